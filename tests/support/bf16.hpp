// Comparing bfloat16 weight copies (tensor/bf16.hpp) made two ways, such as a model loaded with bf16_weights
// against a float load followed by to_bf16_weights.
#pragma once

#include <doctest/doctest.h>

#include <eigenformer/tensor/bf16.hpp>
#include <string>

namespace eftest {

// Both copies exist, with the same shape and layout and the same bits in every element.
inline void check_same_bf16_bits(const eigenformer::Bf16Matrix* a, const eigenformer::Bf16Matrix* b, const std::string& what) {
  INFO(what);
  REQUIRE((a != nullptr && b != nullptr));
  REQUIRE((a->rows() == b->rows() && a->cols() == b->cols() && a->col_major() == b->col_major()));
  std::size_t differ = 0;
  for (eigenformer::index_t i = 0; i < a->rows(); ++i)
    for (eigenformer::index_t j = 0; j < a->cols(); ++j) differ += a->bits(i, j) != b->bits(i, j);
  CHECK(differ == 0);
}

}  // namespace eftest
