// Printing in PyTorch's format (placeholder; being replaced by the exact formatter).
#pragma once

#include <ostream>
#include <sstream>
#include <iomanip>

#include "eigenformer/tensor/tensor.hpp"

namespace eigenformer {

template <typename T, std::size_t R>
std::ostream& operator<<(std::ostream& os, const Tensor<T, R>& t) {
  os << "tensor(" << shape_string(t.shape()) << ", [";
  bool first = true;
  t.for_each_value([&](const T& v) { os << (first ? "" : ", ") << std::fixed << std::setprecision(4) << v; first = false; });
  return os << "])";
}

}  // namespace eigenformer
