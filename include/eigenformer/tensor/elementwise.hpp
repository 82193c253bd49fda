// Element-wise arithmetic with PyTorch broadcasting, unary math, comparisons, where, masked_fill,
// tril/triu. Results are fresh contiguous tensors; the operands are never modified (the `_` methods
// on Tensor are the in-place forms).
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>

#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/creation.hpp"

namespace eigenformer {

namespace detail {

// Elements per parallel_for chunk of an element-wise loop: tens of microseconds of work, so that a chunk is
// worth a thread and anything smaller (the tutorials' 6 x 3 tensors) is one chunk, run inline. A multiple
// of every SIMD width, so that chunks start on the same alignment as the whole array would and Eigen
// takes the same vector path for each element.
inline constexpr index_t elementwise_grain = 1 << 15;

// for_each_row restricted to rows [first, last) of the walk, for one parallel_for chunk: the odometer starts
// from row `first`'s index instead of 0.
template <std::size_t R, std::size_t N, class F>
void for_each_row_range(const Shape<R>& shape, const std::array<Shape<R>, N>& strides, index_t first, index_t last,
                        F&& f) {
  static_assert(R >= 2);
  Shape<R> idx{};
  std::array<index_t, N> off{};
  for (index_t rest = first, d = static_cast<index_t>(R) - 2; d >= 0; --d) {
    idx[d] = rest % shape[d];
    rest /= shape[d];
    for (std::size_t k = 0; k < N; ++k) off[k] += idx[d] * strides[k][d];
  }
  for (index_t row = first; row < last; ++row) {
    f(off);
    for (std::size_t d = R - 1; d-- > 0;) {
      ++idx[d];
      for (std::size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (idx[d] < shape[d]) break;
      for (std::size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * shape[d];
      idx[d] = 0;
    }
  }
}

constexpr std::size_t max_rank(std::initializer_list<std::size_t> ranks) {
  std::size_t r = 0;
  for (auto x : ranks) r = x > r ? x : r;
  return r;
}

template <std::size_t A, std::size_t B>
bool same_shape(const Shape<A>& a, const Shape<B>& b) {
  if constexpr (A != B) return false;
  else return a == b;
}

template <std::size_t R, typename T, std::size_t Ri>
Shape<R> padded_shape(const Tensor<T, Ri>& t) {
  Shape<R> s{};
  for (std::size_t i = 0; i < R; ++i) s[i] = i < R - Ri ? 1 : t.shape()[i - (R - Ri)];
  return s;
}

// out[i...] = f(ts[i...]...) over the broadcast shape of the operands.
template <typename Out, class F, typename... Ts, std::size_t... Rs>
Tensor<Out, max_rank({Rs...})> broadcast_map(std::string_view op, F f, const Tensor<Ts, Rs>&... ts) {
  constexpr std::size_t R = max_rank({Rs...});
  constexpr std::size_t N = sizeof...(Ts);
  // Fold the broadcast pairwise so an error names the two shapes that clash.
  Shape<R> shape{};
  {
    bool first = true;
    auto fold = [&](const auto& t) {
      auto s = padded_shape<R>(t);
      if (first) {
        shape = s;
        first = false;
        return;
      }
      for (std::size_t i = 0; i < R; ++i) {
        if (s[i] != shape[i] && s[i] != 1 && shape[i] != 1) {
          std::string msg(op);
          msg += ": shapes";
          ((msg += " " + shape_string(ts.shape())), ...);
          msg += " do not broadcast (size " + std::to_string(shape[i]) + " vs " + std::to_string(s[i]) +
                 " at dim " + std::to_string(i) + ")";
          throw shape_error(msg);
        }
        if (shape[i] == 1) shape[i] = s[i];
      }
    };
    (fold(ts), ...);
  }
  auto out = Tensor<Out, R>::empty(shape);
  Out* o = out.data();
  const index_t n = out.numel();
  if (((same_shape(ts.shape(), shape) && ts.is_contiguous()) && ...)) {
    // Same shape, contiguous: one flat loop the compiler vectorises.
    std::tuple<const Ts*...> p{ts.data()...};
    backend::parallel_for(n, elementwise_grain, [&](index_t begin, index_t end) {
      std::apply([&](auto... ptr) {
        for (index_t i = begin; i < end; ++i) o[i] = f(ptr[i]...);
      }, p);
    });
    return out;
  }
  const std::array<Shape<R>, N + 1> strides{out.strides(), broadcast_strides<R>(ts.shape(), ts.strides())...};
  const std::tuple<const Ts*...> ptrs{ts.data()...};
  const index_t inner = inner_size(shape);
  auto row = [&](const std::array<index_t, N + 1>& off) {
    std::apply([&](auto... ptr) {
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        Out* orow = o + off[0];
        if (((inner_stride(strides[K + 1]) == 1) && ...)) {
          for (index_t i = 0; i < inner; ++i) orow[i] = f(ptr[off[K + 1] + i]...);
        } else {
          for (index_t i = 0; i < inner; ++i) orow[i] = f(ptr[off[K + 1] + i * inner_stride(strides[K + 1])]...);
        }
      }(std::index_sequence_for<Ts...>{});
    }, ptrs);
  };
  if constexpr (R >= 2) {
    if (n > elementwise_grain && inner > 0) {
      const index_t rows = n / inner;
      backend::parallel_for(rows, std::max<index_t>(1, elementwise_grain / inner), [&](index_t begin, index_t end) {
        for_each_row_range<R, N + 1>(shape, strides, begin, end, row);
      });
      return out;
    }
  }
  for_each_row<R, N + 1>(shape, strides, row);
  return out;
}

// f over a contiguous copy of x, through Eigen's vectorised array ops: f maps an Eigen array expression.
template <typename T, std::size_t R, class F>
Tensor<T, R> eigen_unary(const Tensor<T, R>& x, F f) {
  const auto xc = x.contiguous();
  auto out = Tensor<T, R>::empty(x.shape());
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  backend::parallel_for(out.numel(), elementwise_grain, [&](index_t begin, index_t end) {
    Eigen::Map<Arr>(out.data() + begin, end - begin) = f(Eigen::Map<const Arr>(xc.data() + begin, end - begin));
  });
  return out;
}

template <typename T, std::size_t R, class F>
Tensor<T, R> scalar_unary(const Tensor<T, R>& x, F f) {
  auto out = Tensor<T, R>::empty(x.shape());
  T* o = out.data();
  if (out.numel() <= elementwise_grain) {
    x.for_each_value([&](const T& v) { *o++ = f(v); });
    return out;
  }
  const auto xc = x.contiguous();
  const T* p = xc.data();
  backend::parallel_for(out.numel(), elementwise_grain, [&](index_t begin, index_t end) {
    for (index_t i = begin; i < end; ++i) o[i] = f(p[i]);
  });
  return out;
}

}  // namespace detail

// ---- arithmetic between tensors (broadcasting) ---------------------------------------------------------
#define EIGENFORMER_BINARY(NAME, OPNAME, EXPR)                                                             \
  template <floating_element T, std::size_t R1, std::size_t R2>                                            \
  auto NAME(const Tensor<T, R1>& a, const Tensor<T, R2>& b) {                                              \
    return detail::broadcast_map<T>(OPNAME, [](T x, T y) { return EXPR; }, a, b);                           \
  }

EIGENFORMER_BINARY(add, "add", x + y)
EIGENFORMER_BINARY(sub, "sub", x - y)
EIGENFORMER_BINARY(mul, "mul", x* y)
EIGENFORMER_BINARY(div, "div", x / y)
// NaN propagates, as in torch.maximum / torch.minimum.
EIGENFORMER_BINARY(maximum, "maximum", (x != x || y != y) ? std::numeric_limits<T>::quiet_NaN() : (x > y ? x : y))
EIGENFORMER_BINARY(minimum, "minimum", (x != x || y != y) ? std::numeric_limits<T>::quiet_NaN() : (x < y ? x : y))
EIGENFORMER_BINARY(pow, "pow", std::pow(x, y))
#undef EIGENFORMER_BINARY

template <floating_element T, std::size_t R1, std::size_t R2>
auto operator+(const Tensor<T, R1>& a, const Tensor<T, R2>& b) { return add(a, b); }
template <floating_element T, std::size_t R1, std::size_t R2>
auto operator-(const Tensor<T, R1>& a, const Tensor<T, R2>& b) { return sub(a, b); }
template <floating_element T, std::size_t R1, std::size_t R2>
auto operator*(const Tensor<T, R1>& a, const Tensor<T, R2>& b) { return mul(a, b); }
template <floating_element T, std::size_t R1, std::size_t R2>
auto operator/(const Tensor<T, R1>& a, const Tensor<T, R2>& b) { return div(a, b); }

// ---- arithmetic with a scalar ----------------------------------------------------------------------------
// The scalar is converted to T first (as PyTorch does for a Python number and a float32 tensor).
template <floating_element T, std::size_t R>
Tensor<T, R> operator+(const Tensor<T, R>& a, double s) {
  const T v = static_cast<T>(s);
  return detail::eigen_unary(a, [v](const auto& x) { return x + v; });
}
template <floating_element T, std::size_t R>
Tensor<T, R> operator+(double s, const Tensor<T, R>& a) { return a + s; }
template <floating_element T, std::size_t R>
Tensor<T, R> operator-(const Tensor<T, R>& a, double s) {
  const T v = static_cast<T>(s);
  return detail::eigen_unary(a, [v](const auto& x) { return x - v; });
}
template <floating_element T, std::size_t R>
Tensor<T, R> operator-(double s, const Tensor<T, R>& a) {
  const T v = static_cast<T>(s);
  return detail::eigen_unary(a, [v](const auto& x) { return v - x; });
}
template <floating_element T, std::size_t R>
Tensor<T, R> operator*(const Tensor<T, R>& a, double s) {
  const T v = static_cast<T>(s);
  return detail::eigen_unary(a, [v](const auto& x) { return x * v; });
}
template <floating_element T, std::size_t R>
Tensor<T, R> operator*(double s, const Tensor<T, R>& a) { return a * s; }
template <floating_element T, std::size_t R>
Tensor<T, R> operator/(const Tensor<T, R>& a, double s) {
  const T v = static_cast<T>(s);
  return detail::eigen_unary(a, [v](const auto& x) { return x / v; });
}
template <floating_element T, std::size_t R>
Tensor<T, R> operator/(double s, const Tensor<T, R>& a) {
  const T v = static_cast<T>(s);
  return detail::eigen_unary(a, [v](const auto& x) { return v / x; });
}
template <floating_element T, std::size_t R>
Tensor<T, R> operator-(const Tensor<T, R>& a) { return detail::eigen_unary(a, [](const auto& x) { return -x; }); }
template <floating_element T, std::size_t R>
Tensor<T, R> neg(const Tensor<T, R>& a) { return -a; }
template <floating_element T, std::size_t R>
Tensor<T, R> pow(const Tensor<T, R>& a, double exponent) {
  const T e = static_cast<T>(exponent);
  if (exponent == 2.0) return detail::eigen_unary(a, [](const auto& x) { return x.square(); });
  return detail::scalar_unary(a, [e](T x) { return std::pow(x, e); });
}

// ---- unary math ------------------------------------------------------------------------------------------
// Eigen's vectorised exp and log are accurate to an ulp or two on normal numbers but clamp outside that
// range: exp(x) for x below log(smallest normal), -inf included, comes out as ~1e-38 (float) / ~1e-308
// (double) instead of a denormal or 0, and log of a denormal as log(smallest normal). Those elements are
// recomputed with libm, so that exp(-inf) == 0 as in PyTorch (masked softmax entries are exactly 0).
namespace detail {
template <typename T>
T exp_eigen_lower_bound() {
  return std::log(std::numeric_limits<T>::min());
}
}  // namespace detail
template <floating_element T, std::size_t R>
Tensor<T, R> exp(const Tensor<T, R>& x) {
  auto out = detail::eigen_unary(x, [](const auto& a) { return a.exp(); });
  const T lo = detail::exp_eigen_lower_bound<T>();
  T* o = out.data();
  x.for_each_value([&](const T& v) {
    if (v < lo) *o = std::exp(v);
    ++o;
  });
  return out;
}
template <floating_element T, std::size_t R>
Tensor<T, R> log(const Tensor<T, R>& x) {
  auto out = detail::eigen_unary(x, [](const auto& a) { return a.log(); });
  T* o = out.data();
  x.for_each_value([&](const T& v) {
    if (v > 0 && v < std::numeric_limits<T>::min()) *o = std::log(v);
    ++o;
  });
  return out;
}
// libm per element: Eigen's float sqrt/rsqrt (EIGEN_FAST_MATH, the default) use an rsqrt estimate plus a
// Newton step: off by an ulp, sqrt(inf) = NaN and denormals flushed. rsqrt is 1 / sqrt(x), as in ATen.
template <floating_element T, std::size_t R>
Tensor<T, R> sqrt(const Tensor<T, R>& x) { return detail::scalar_unary(x, [](T v) { return std::sqrt(v); }); }
template <floating_element T, std::size_t R>
Tensor<T, R> rsqrt(const Tensor<T, R>& x) { return detail::scalar_unary(x, [](T v) { return T(1) / std::sqrt(v); }); }
template <floating_element T, std::size_t R>
Tensor<T, R> tanh(const Tensor<T, R>& x) { return detail::eigen_unary(x, [](const auto& a) { return a.tanh(); }); }
template <floating_element T, std::size_t R>
Tensor<T, R> abs(const Tensor<T, R>& x) { return detail::eigen_unary(x, [](const auto& a) { return a.abs(); }); }
template <floating_element T, std::size_t R>
Tensor<T, R> square(const Tensor<T, R>& x) { return detail::eigen_unary(x, [](const auto& a) { return a.square(); }); }
// libm's erf, per element: Eigen's vectorised erf is an approximation, and exact GELU depends on erf.
template <floating_element T, std::size_t R>
Tensor<T, R> erf(const Tensor<T, R>& x) { return detail::scalar_unary(x, [](T v) { return std::erf(v); }); }
template <floating_element T, std::size_t R>
Tensor<T, R> sigmoid(const Tensor<T, R>& x) {
  return detail::scalar_unary(x, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
}

// ---- comparisons (to bool tensors) -------------------------------------------------------------------------
// On float, double and int64 tensors alike. A scalar of the tensor's kind is converted to its element type, as
// PyTorch does with a Python number (`ids != pad`, `x > 0.5` on float32 compares in float32); a fractional
// scalar against an int64 tensor compares in double, so `ids < 0.5` means ids < 0.5, not ids < 0.
namespace detail {
template <typename T, typename S>
using comparison_type = std::conditional_t<std::is_integral_v<T> && std::is_floating_point_v<S>, double, T>;
}  // namespace detail

#define EIGENFORMER_COMPARE(NAME, OP)                                                                      \
  template <numeric_element T, std::size_t R1, std::size_t R2>                                             \
  Tensor<bool, detail::max_rank({R1, R2})> NAME(const Tensor<T, R1>& a, const Tensor<T, R2>& b) {          \
    return detail::broadcast_map<bool>(#NAME, [](T x, T y) { return x OP y; }, a, b);                      \
  }                                                                                                         \
  template <numeric_element T, std::size_t R, typename S>                                                  \
    requires std::is_arithmetic_v<S>                                                                        \
  Tensor<bool, R> NAME(const Tensor<T, R>& a, S s) {                                                       \
    using C = detail::comparison_type<T, S>;                                                                \
    const C v = static_cast<C>(s);                                                                          \
    return detail::broadcast_map<bool>(#NAME, [v](T x) { return static_cast<C>(x) OP v; }, a);             \
  }
EIGENFORMER_COMPARE(eq, ==)
EIGENFORMER_COMPARE(ne, !=)
EIGENFORMER_COMPARE(lt, <)
EIGENFORMER_COMPARE(le, <=)
EIGENFORMER_COMPARE(gt, >)
EIGENFORMER_COMPARE(ge, >=)
#undef EIGENFORMER_COMPARE

// The operators read like PyTorch and give bool tensors. `==` and `!=` are element-wise too (tensors have no
// C++ value equality; compare shapes with shape() == shape() and contents with equal()).
#define EIGENFORMER_COMPARE_OPERATOR(OP, NAME)                                                             \
  template <numeric_element T, std::size_t R1, std::size_t R2>                                             \
  auto operator OP(const Tensor<T, R1>& a, const Tensor<T, R2>& b) {                                       \
    return NAME(a, b);                                                                                      \
  }                                                                                                         \
  template <numeric_element T, std::size_t R, typename S>                                                  \
    requires std::is_arithmetic_v<S>                                                                        \
  Tensor<bool, R> operator OP(const Tensor<T, R>& a, S s) {                                                \
    return NAME(a, s);                                                                                      \
  }
EIGENFORMER_COMPARE_OPERATOR(==, eq)
EIGENFORMER_COMPARE_OPERATOR(!=, ne)
EIGENFORMER_COMPARE_OPERATOR(<, lt)
EIGENFORMER_COMPARE_OPERATOR(<=, le)
EIGENFORMER_COMPARE_OPERATOR(>, gt)
EIGENFORMER_COMPARE_OPERATOR(>=, ge)
#undef EIGENFORMER_COMPARE_OPERATOR

// torch.equal: same shape and every element equal.
template <tensor_element T, std::size_t R>
bool equal(const Tensor<T, R>& a, const Tensor<T, R>& b) {
  if (a.shape() != b.shape()) return false;
  const auto ac = a.contiguous(), bc = b.contiguous();
  return std::equal(ac.data(), ac.data() + ac.numel(), bc.data());
}

// Element-wise logical ops on masks.
template <std::size_t R1, std::size_t R2>
auto logical_and(const Tensor<bool, R1>& a, const Tensor<bool, R2>& b) {
  return detail::broadcast_map<bool>("logical_and", [](bool x, bool y) { return x && y; }, a, b);
}
template <std::size_t R1, std::size_t R2>
auto logical_or(const Tensor<bool, R1>& a, const Tensor<bool, R2>& b) {
  return detail::broadcast_map<bool>("logical_or", [](bool x, bool y) { return x || y; }, a, b);
}
template <std::size_t R>
Tensor<bool, R> logical_not(const Tensor<bool, R>& a) {
  return detail::broadcast_map<bool>("logical_not", [](bool x) { return !x; }, a);
}

// `~mask` inverts a mask, as in PyTorch (`scores.masked_fill(~causal_mask, -inf)`).
template <std::size_t R>
Tensor<bool, R> operator~(const Tensor<bool, R>& a) { return logical_not(a); }

// cond ? a : b element-wise, all three broadcast together (torch.where).
template <numeric_element T, std::size_t Rc, std::size_t Ra, std::size_t Rb>
auto where(const Tensor<bool, Rc>& cond, const Tensor<T, Ra>& a, const Tensor<T, Rb>& b) {
  return detail::broadcast_map<T>("where", [](bool c, T x, T y) { return c ? x : y; }, cond, a, b);
}
template <numeric_element T, std::size_t Rc, std::size_t Ra, typename S>
  requires std::is_arithmetic_v<S>
auto where(const Tensor<bool, Rc>& cond, const Tensor<T, Ra>& a, S b) {
  const T v = static_cast<T>(b);
  return detail::broadcast_map<T>("where", [v](bool c, T x) { return c ? x : v; }, cond, a);
}

// x with `value` wherever mask is true; mask must broadcast to x's shape (Tensor.masked_fill).
// Attention masks use value = -inf (or the seed's -1e9) before softmax.
template <numeric_element T, std::size_t R, std::size_t Rm, typename S>
  requires std::is_arithmetic_v<S>
Tensor<T, R> masked_fill(const Tensor<T, R>& x, const Tensor<bool, Rm>& mask, S value) {
  static_assert(Rm <= R, "masked_fill: the mask may not have more dims than the tensor");
  const auto b = detail::broadcast_shapes("masked_fill", x.shape(), mask.shape());
  if (b != x.shape())
    throw shape_error("masked_fill: mask of shape " + shape_string(mask.shape()) +
                      " does not broadcast to tensor shape " + shape_string(x.shape()));
  const T v = static_cast<T>(value);
  return detail::broadcast_map<T>("masked_fill", [v](T a, bool m) { return m ? v : a; }, x, mask);
}

// Lower (tril) / upper (triu) triangle of the last two dims, keeping diagonal k and below/above,
// the rest zero. k = 0 is the main diagonal, k > 0 above it, k < 0 below it.
template <typename T, std::size_t R>
Tensor<T, R> tril(const Tensor<T, R>& x, index_t k = 0) {
  static_assert(R >= 2, "tril: needs a tensor of rank 2 or more (it works on the last two dims)");
  auto out = x.clone();
  const index_t rows = x.shape()[R - 2], cols = x.shape()[R - 1];
  T* p = out.data();
  for (index_t b = 0, nb = out.numel() / std::max<index_t>(rows * cols, 1); b < nb; ++b)
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = std::max<index_t>(i + k + 1, 0); j < cols; ++j) p[(b * rows + i) * cols + j] = T(0);
  return out;
}
template <typename T, std::size_t R>
Tensor<T, R> triu(const Tensor<T, R>& x, index_t k = 0) {
  static_assert(R >= 2, "triu: needs a tensor of rank 2 or more (it works on the last two dims)");
  auto out = x.clone();
  const index_t rows = x.shape()[R - 2], cols = x.shape()[R - 1];
  T* p = out.data();
  for (index_t b = 0, nb = out.numel() / std::max<index_t>(rows * cols, 1); b < nb; ++b)
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < std::min(i + k, cols); ++j) p[(b * rows + i) * cols + j] = T(0);
  return out;
}

}  // namespace eigenformer
