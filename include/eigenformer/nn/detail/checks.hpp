// Small checks shared by the layers' forward and backward passes, so every layer words its shape errors
// the same way: the operation, then both shapes.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "eigenformer/tensor/shape.hpp"

namespace eigenformer::nn::detail {

// backward's grad_output must have the shape of the forward output it is the gradient of.
template <class A, class B>
void check_grad_shape(const char* op, const A& grad_shape, const B& expected_shape) {
  const bool same = grad_shape.size() == expected_shape.size() &&
                    std::equal(grad_shape.begin(), grad_shape.end(), expected_shape.begin());
  if (!same)
    throw shape_error(std::string(op) + ": grad_output " + shape_string(grad_shape) +
                      " does not match the forward output " + shape_string(expected_shape));
}

// A cached shape (kept as a vector by layers whose forward is templated on the rank) as Shape<R>.
template <std::size_t R>
Shape<R> as_shape(const std::vector<index_t>& dims) {
  Shape<R> s{};
  for (std::size_t i = 0; i < R && i < dims.size(); ++i) s[i] = dims[i];
  return s;
}

}  // namespace eigenformer::nn::detail
