// The residual connection of the models' blocks, in place.
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>

#include "eigenformer/tensor.hpp"

namespace eigenformer::models::detail {

// sum += x element-wise, in place, on the pool (in the element-wise ops' chunks; the bits do not depend on
// them). The sublayer's output is a fresh tensor that nothing saved for backward (the layers save their
// inputs), so it can take the sum and the block allocates nothing for it.
template <floating_element T>
Tensor<T, 3>& add_into(Tensor<T, 3>& sum, const Tensor<T, 3>& x) {
  if (!sum.is_contiguous() || !x.is_contiguous() || sum.shape() != x.shape()) return sum = sum + x;
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  T* s = sum.data();
  const T* a = x.data();
  backend::parallel_for(sum.numel(), eigenformer::detail::elementwise_grain, [s, a](index_t b, index_t e) {
    Eigen::Map<Arr>(s + b, e - b) += Eigen::Map<const Arr>(a + b, e - b);
  });
  return sum;
}

}  // namespace eigenformer::models::detail
