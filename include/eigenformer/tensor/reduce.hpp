// Reductions over one dim (sum, mean, max, min, argmax, argmin, var, std) with optional keepdim, full
// reductions to 0-d tensors, and the numerically stable softmax / log_softmax.
//
// keepdim is a tag rather than a bool because it changes the rank, which is part of the type:
//   sum(x, -1)           // Tensor<T, R - 1>
//   sum(x, -1, keepdim)  // Tensor<T, R>, the reduced dim kept with size 1
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>
#include <cmath>
#include <concepts>
#include <limits>

#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/elementwise.hpp"

namespace eigenformer {

struct keepdim_t {
  explicit constexpr keepdim_t() = default;
};
inline constexpr keepdim_t keepdim{};

namespace detail {

// A dim of a contiguous tensor splits its elements into [outer, n, inner]; lane (o, i) is the n elements
// at offset o * n * inner + i with stride inner.
struct lanes {
  index_t outer = 1, n = 1, inner = 1;
};
template <std::size_t R>
lanes lanes_of(const Shape<R>& shape, std::size_t d) {
  lanes l;
  for (std::size_t i = 0; i < R; ++i) {
    if (i < d) l.outer *= shape[i];
    else if (i > d) l.inner *= shape[i];
  }
  l.n = shape[d];
  return l;
}

template <std::size_t R>
Shape<R - 1> drop_dim(const Shape<R>& s, std::size_t d) {
  Shape<R - 1> out{};
  for (std::size_t i = 0, j = 0; i < R; ++i)
    if (i != d) out[j++] = s[i];
  return out;
}

// Lanes per parallel_for chunk: about `reduce_grain_elements` elements each, so that a chunk is worth waking a
// thread for and a small tensor (the tutorials' 6 x 3) stays one chunk, run inline. Each lane is reduced whole
// by one thread: the grouping changes who computes a lane, never how.
inline constexpr index_t reduce_grain_elements = 1 << 15;
inline index_t lanes_per_chunk(index_t lane_length) {
  return std::max<index_t>(1, reduce_grain_elements / std::max<index_t>(lane_length, 1));
}

template <typename T>
using strided_lane = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, 0, Eigen::InnerStride<>>;

// out (keepdim shape) [o, i] = f(pointer to lane start, n, stride).
template <typename Out, typename T, std::size_t R, class F>
Tensor<Out, R> reduce_lanes(std::string_view op, const Tensor<T, R>& x, index_t dim, F f) {
  const auto d = normalize_dim(op, dim, R);
  const auto xc = x.contiguous();
  const auto l = lanes_of(xc.shape(), d);
  Shape<R> out_shape = xc.shape();
  out_shape[d] = 1;
  auto out = Tensor<Out, R>::empty(out_shape);
  const T* p = xc.data();
  Out* o = out.data();
  // Lane number q = a * inner + i, so o[q] is the lane's output.
  backend::parallel_for(l.outer * l.inner, lanes_per_chunk(l.n), [&](index_t begin, index_t end) {
    for (index_t q = begin; q < end; ++q) {
      const index_t a = q / l.inner, i = q % l.inner;
      o[q] = f(p + a * l.n * l.inner + i, l.n, l.inner);
    }
  });
  return out;
}

template <typename T>
T lane_sum(const T* p, index_t n, index_t stride) {
  if (stride == 1) return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p, n).sum();
  return strided_lane<T>(p, n, Eigen::InnerStride<>(stride)).sum();
}

// Index of the largest (Greater) or smallest element; the first NaN wins, as in PyTorch.
template <bool Greater, typename T>
index_t lane_arg_extreme(const T* p, index_t n, index_t stride) {
  index_t best = 0;
  for (index_t k = 0; k < n; ++k) {
    const T v = p[k * stride];
    if (v != v) return k;
    if (Greater ? v > p[best * stride] : v < p[best * stride]) best = k;
  }
  return best;
}

template <typename T>
T lane_var(const T* p, index_t n, index_t stride, index_t correction) {
  const T mean = lane_sum(p, n, stride) / static_cast<T>(n);
  T acc = 0;
  for (index_t k = 0; k < n; ++k) {
    const T dlt = p[k * stride] - mean;
    acc += dlt * dlt;
  }
  const index_t dof = n - correction;
  return dof > 0 ? acc / static_cast<T>(dof) : std::numeric_limits<T>::quiet_NaN();
}

template <typename T, std::size_t R>
void check_nonempty_dim(std::string_view op, const Tensor<T, R>& x, index_t dim) {
  const auto d = normalize_dim(op, dim, R);
  if (x.shape()[d] == 0)
    throw shape_error(std::string(op) + ": cannot reduce over dim " + std::to_string(d) + " of size 0 in shape " +
                      shape_string(x.shape()));
}

}  // namespace detail

// Each reduction comes in three forms: over `dim` dropping it, over `dim` keeping it (keepdim), and over
// all elements to a 0-d tensor.
#define EIGENFORMER_REDUCTION(NAME, OUT, EXPR, NONEMPTY)                                                   \
  template <typename T, std::size_t R>                                                                       \
    requires floating_element<T>                                                                             \
  Tensor<OUT, R> NAME(const Tensor<T, R>& x, index_t dim, keepdim_t) {                                       \
    if (NONEMPTY) detail::check_nonempty_dim(#NAME, x, dim);                                                 \
    return detail::reduce_lanes<OUT>(#NAME, x, dim, [](const T* p, index_t n, index_t s) -> OUT { EXPR; }); \
  }                                                                                                          \
  template <typename T, std::size_t R>                                                                       \
    requires floating_element<T>                                                                             \
  Tensor<OUT, R - 1> NAME(const Tensor<T, R>& x, index_t dim) {                                              \
    const auto d = detail::normalize_dim(#NAME, dim, R);                                                     \
    return NAME(x, dim, keepdim).view(detail::drop_dim(x.shape(), d));                                       \
  }                                                                                                          \
  template <typename T, std::size_t R>                                                                       \
    requires floating_element<T>                                                                             \
  Tensor<OUT, 0> NAME(const Tensor<T, R>& x) {                                                               \
    return NAME(x.reshape(Shape<1>{x.numel()}), 0);                                                          \
  }

EIGENFORMER_REDUCTION(sum, T, return detail::lane_sum(p, n, s), false)
EIGENFORMER_REDUCTION(mean, T, return n == 0 ? std::numeric_limits<T>::quiet_NaN()
                                             : detail::lane_sum(p, n, s) / static_cast<T>(n), false)
EIGENFORMER_REDUCTION(max, T, return p[detail::lane_arg_extreme<true>(p, n, s) * s], true)
EIGENFORMER_REDUCTION(min, T, return p[detail::lane_arg_extreme<false>(p, n, s) * s], true)
EIGENFORMER_REDUCTION(argmax, std::int64_t, return detail::lane_arg_extreme<true>(p, n, s), true)
EIGENFORMER_REDUCTION(argmin, std::int64_t, return detail::lane_arg_extreme<false>(p, n, s), true)
#undef EIGENFORMER_REDUCTION

// Variance over dim with Bessel's correction when `unbiased` (PyTorch's default), std its square root.
template <floating_element T, std::size_t R>
Tensor<T, R> var(const Tensor<T, R>& x, index_t dim, keepdim_t, bool unbiased = true) {
  const index_t c = unbiased ? 1 : 0;
  return detail::reduce_lanes<T>("var", x, dim,
                                 [c](const T* p, index_t n, index_t s) { return detail::lane_var(p, n, s, c); });
}
template <floating_element T, std::size_t R>
Tensor<T, R - 1> var(const Tensor<T, R>& x, index_t dim, bool unbiased = true) {
  const auto d = detail::normalize_dim("var", dim, R);
  return var(x, dim, keepdim, unbiased).view(detail::drop_dim(x.shape(), d));
}
template <floating_element T, std::size_t R>
Tensor<T, 0> var(const Tensor<T, R>& x) {
  return var(x.reshape(Shape<1>{x.numel()}), 0, true);
}
// Exactly bool, so that var(x, 1) still means dim 1.
template <floating_element T, std::size_t R, std::same_as<bool> B>
Tensor<T, 0> var(const Tensor<T, R>& x, B unbiased) {
  return var(x.reshape(Shape<1>{x.numel()}), 0, unbiased);
}
template <floating_element T, std::size_t R>
Tensor<T, R> std(const Tensor<T, R>& x, index_t dim, keepdim_t, bool unbiased = true) {
  return sqrt(var(x, dim, keepdim, unbiased));
}
template <floating_element T, std::size_t R>
Tensor<T, R - 1> std(const Tensor<T, R>& x, index_t dim, bool unbiased = true) {
  return sqrt(var(x, dim, unbiased));
}

namespace detail {

// Softmax along lanes. Subtracting the lane maximum keeps exp from overflowing; a lane that is entirely
// -inf (every position masked) gives zeros instead of PyTorch's NaN, so a fully padded row cannot poison
// the rest of a batch. log_softmax of such a lane is -inf everywhere.
template <bool Log, class In, class Out>
void softmax_lane(const In& in, Out&& o) {
  using T = typename In::Scalar;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  if (in.size() == 0) return;
  const T m = in.maxCoeff();
  if (m == neg_inf) {
    o.setConstant(Log ? neg_inf : T(0));
    return;
  }
  if constexpr (Log) {
    const T lse = std::log((in - m).exp().sum());
    o = in - m - lse;
  } else {
    o = (in - m).exp();
    // Eigen's exp gives ~1e-38 instead of 0 (or a denormal) far below the maximum, -inf included: libm there,
    // except for -inf itself (a causal mask's upper half), whose exp is exactly 0 without a call.
    const T lo = exp_eigen_lower_bound<T>();
    for (Eigen::Index k = 0; k < in.size(); ++k)
      if (in(k) - m < lo) o(k) = in(k) == neg_inf ? T(0) : std::exp(in(k) - m);
    o /= o.sum();
  }
}

// softmax_lane over a contiguous row of n >= 1 elements (in and out apart), by the vector kernel for float
// where this CPU has one (vector_math.hpp).
template <floating_element T>
void softmax_row(const T* in, T* out, index_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (const backend::detail::VectorMathKernel* kernel = backend::detail::vector_math_kernel())
      return kernel->softmax(in, out, n);
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  softmax_lane<false>(Eigen::Map<const Arr>(in, n), Eigen::Map<Arr>(out, n));
}

template <bool Log, floating_element T, std::size_t R>
Tensor<T, R> softmax_impl(std::string_view op, const Tensor<T, R>& x, index_t dim) {
  const auto d = normalize_dim(op, dim, R);
  const auto xc = x.contiguous();
  const auto l = lanes_of(xc.shape(), d);
  auto out = Tensor<T, R>::empty(xc.shape());
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  backend::parallel_for(l.outer * l.inner, lanes_per_chunk(l.n), [&](index_t begin, index_t end) {
    for (index_t q = begin; q < end; ++q) {
      const index_t a = q / l.inner, i = q % l.inner;
      const index_t base = a * l.n * l.inner + i;
      if (l.inner == 1 && !Log) {  // softmax over the last dim, the attention case: unit stride, vectorised
        if (l.n > 0) softmax_row(xc.data() + base, out.data() + base, l.n);
      } else if (l.inner == 1) {
        softmax_lane<Log>(Eigen::Map<const Arr>(xc.data() + base, l.n), Eigen::Map<Arr>(out.data() + base, l.n));
      } else {
        const Eigen::InnerStride<> st(l.inner);
        softmax_lane<Log>(Eigen::Map<const Arr, 0, Eigen::InnerStride<>>(xc.data() + base, l.n, st),
                          Eigen::Map<Arr, 0, Eigen::InnerStride<>>(out.data() + base, l.n, st));
      }
    }
  });
  return out;
}

}  // namespace detail

// exp(x - max) / sum(exp(x - max)) along dim (torch.softmax); rows of all -inf give zeros.
template <floating_element T, std::size_t R>
Tensor<T, R> softmax(const Tensor<T, R>& x, index_t dim) { return detail::softmax_impl<false>("softmax", x, dim); }

// x - max - log(sum(exp(x - max))) along dim (torch.log_softmax); rows of all -inf give -inf.
template <floating_element T, std::size_t R>
Tensor<T, R> log_softmax(const Tensor<T, R>& x, index_t dim) {
  return detail::softmax_impl<true>("log_softmax", x, dim);
}

}  // namespace eigenformer
