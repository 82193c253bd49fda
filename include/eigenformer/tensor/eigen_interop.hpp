// Eigen interop both ways: view a rank-2 (or rank-1) tensor as an Eigen map, and build a tensor from any
// Eigen dense expression.
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>

#include "eigenformer/tensor/creation.hpp"

namespace eigenformer {

template <typename T>
using MatrixMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstMatrixMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
template <typename T>
using VectorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;

namespace detail {
// The Eigen outer stride of a row-major rank-2 tensor: its row stride, which may be 0 (an expanded
// tensor, every row the same elements); with a single row any value >= cols does.
template <typename T>
index_t row_stride(const Tensor<T, 2>& t) {
  return t.shape()[0] > 1 ? t.strides()[0] : std::max<index_t>(t.shape()[1], 1);
}
}  // namespace detail

// A writable Eigen map of a rank-2 tensor's elements (no copy). Needs unit stride along the last dim
// (any row-major tensor or row slice of one); call contiguous() first for a transposed view.
template <floating_element T>
MatrixMap<T> as_matrix(Tensor<T, 2>& t) {
  if (t.shape()[1] > 1 && t.strides()[1] != 1)
    throw shape_error("as_matrix: tensor of shape " + shape_string(t.shape()) + " with strides " +
                      shape_string(t.strides()) + " is not row-major; call contiguous() first");
  return MatrixMap<T>(t.data(), t.shape()[0], t.shape()[1], Eigen::OuterStride<>(detail::row_stride(t)));
}
template <floating_element T>
ConstMatrixMap<T> as_matrix(const Tensor<T, 2>& t) {
  if (t.shape()[1] > 1 && t.strides()[1] != 1)
    throw shape_error("as_matrix: tensor of shape " + shape_string(t.shape()) + " with strides " +
                      shape_string(t.strides()) + " is not row-major; call contiguous() first");
  return ConstMatrixMap<T>(t.data(), t.shape()[0], t.shape()[1], Eigen::OuterStride<>(detail::row_stride(t)));
}
// A writable Eigen column-vector map of a rank-1 tensor (any stride).
template <floating_element T>
VectorMap<T> as_vector(Tensor<T, 1>& t) {
  return VectorMap<T>(t.data(), t.shape()[0], Eigen::InnerStride<>(t.strides()[0]));
}

// A new rank-2 tensor holding the values of an Eigen matrix or expression (any storage order).
template <typename Derived>
auto from_eigen(const Eigen::DenseBase<Derived>& m) {
  using T = typename Derived::Scalar;
  static_assert(floating_element<T>, "from_eigen: the Eigen scalar type must be float or double");
  auto t = Tensor<T, 2>::empty(Shape<2>{m.rows(), m.cols()});
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(t.data(), m.rows(), m.cols()) = m;
  return t;
}

}  // namespace eigenformer
