// Factories: zeros, ones, full, empty, arange, eye and the *_like variants (torch.zeros, ...).
// Shapes are braced lists whose length is the rank: `zeros<float>({2, 3})` is a Tensor<float, 2>.
#pragma once

#include <cmath>
#include <vector>

#include "eigenformer/tensor/tensor.hpp"

namespace eigenformer {

namespace detail {
template <std::size_t N>
Shape<N> to_shape(const index_t (&dims)[N]) {
  Shape<N> s{};
  for (std::size_t i = 0; i < N; ++i) s[i] = dims[i];
  return s;
}
}  // namespace detail

template <typename T, std::size_t N>
Tensor<T, N> empty(const Shape<N>& shape) { return Tensor<T, N>::empty(shape); }
template <typename T, std::size_t N>
Tensor<T, N> empty(const index_t (&shape)[N]) { return empty<T>(detail::to_shape(shape)); }

template <typename T, std::size_t N>
Tensor<T, N> full(const Shape<N>& shape, T value) {
  auto t = Tensor<T, N>::empty(shape);
  t.fill_(value);
  return t;
}
template <typename T, std::size_t N>
Tensor<T, N> full(const index_t (&shape)[N], T value) { return full<T>(detail::to_shape(shape), value); }

template <typename T, std::size_t N>
Tensor<T, N> zeros(const Shape<N>& shape) { return full<T>(shape, T(0)); }
template <typename T, std::size_t N>
Tensor<T, N> zeros(const index_t (&shape)[N]) { return zeros<T>(detail::to_shape(shape)); }

namespace detail {
// zeros(shape) whose memory is committed only as it is written (allocate_zeroed): the weights of a layer
// built to be overwritten by a checkpoint.
template <typename T, std::size_t N>
Tensor<T, N> untouched_zeros(const Shape<N>& shape) {
  check_nonnegative_shape("zeros", shape);
  auto storage = allocate_zeroed<T>(numel_of(shape));
  T* p = storage.get();
  return Tensor<T, N>(std::move(storage), p, shape, contiguous_strides(shape));
}
}  // namespace detail

template <typename T, std::size_t N>
Tensor<T, N> ones(const Shape<N>& shape) { return full<T>(shape, T(1)); }
template <typename T, std::size_t N>
Tensor<T, N> ones(const index_t (&shape)[N]) { return ones<T>(detail::to_shape(shape)); }

namespace detail {
// t.shape(), made afresh for a 0-d tensor: copying its empty Shape<0> makes GCC 12 warn "may be used
// uninitialized" at -O1 (a false positive on an empty std::array), in a user's -Wall build as in ours.
template <typename T, std::size_t N>
Shape<N> shape_for_like(const Tensor<T, N>& t) {
  if constexpr (N == 0) return Shape<0>{};
  else return t.shape();
}
}  // namespace detail

template <typename T, std::size_t N>
Tensor<T, N> zeros_like(const Tensor<T, N>& t) { return zeros<T>(detail::shape_for_like(t)); }
template <typename T, std::size_t N>
Tensor<T, N> ones_like(const Tensor<T, N>& t) { return ones<T>(detail::shape_for_like(t)); }
template <typename T, std::size_t N>
Tensor<T, N> empty_like(const Tensor<T, N>& t) { return empty<T>(detail::shape_for_like(t)); }
template <typename T, std::size_t N>
Tensor<T, N> full_like(const Tensor<T, N>& t, T value) { return full<T>(detail::shape_for_like(t), value); }

// A tensor of the given shape holding `values` in row-major order (sizes must match).
template <typename T, std::size_t N>
Tensor<T, N> from_vector(const Shape<N>& shape, const std::vector<T>& values) {
  auto t = Tensor<T, N>::empty(shape);
  if (static_cast<index_t>(values.size()) != t.numel())
    throw shape_error("from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                      shape_string(shape) + " (" + std::to_string(t.numel()) + " elements)");
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

// Values start, start + step, ... below end (torch.arange). As in PyTorch the length is
// ceil((end - start) / step) computed in double, and each value is start + i * step computed in double
// and then rounded to T, so float ranges such as arange(0, 1, 0.1) have PyTorch's length and digits.
template <typename T>
Tensor<T, 1> arange(double start, double end, double step = 1.0) {
  if (step == 0.0) throw std::invalid_argument("arange: step must be nonzero");
  if (std::isnan(step)) throw std::invalid_argument("arange: step must be a number, got nan");
  if (!std::isfinite(start) || !std::isfinite(end))
    throw std::invalid_argument("arange: start and end must be finite");
  if ((step > 0 && end < start) || (step < 0 && end > start))
    throw std::invalid_argument("arange: upper bound " + std::to_string(end) + " and lower bound " +
                                std::to_string(start) + " are inconsistent with step sign " +
                                std::to_string(step));
  const auto n = static_cast<index_t>(std::ceil((end - start) / step));
  auto t = Tensor<T, 1>::empty({n});
  for (index_t i = 0; i < n; ++i) t.data()[i] = static_cast<T>(start + static_cast<double>(i) * step);
  return t;
}
template <typename T>
Tensor<T, 1> arange(double end) { return arange<T>(0.0, end, 1.0); }

// The n x m identity (torch.eye).
template <typename T>
Tensor<T, 2> eye(index_t n, index_t m = -1) {
  if (m < 0) m = n;
  auto t = zeros<T>(Shape<2>{n, m});
  for (index_t i = 0; i < std::min(n, m); ++i) t(i, i) = T(1);
  return t;
}

}  // namespace eigenformer
