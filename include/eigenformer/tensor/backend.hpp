// The compute backend: every matrix product of the library (gemm) and every large loop (parallel_for) goes
// through this header, so threading, blocking and fused epilogues live in one place.
//
// Contract that callers rely on:
//   - gemm(a, b, c, alpha, beta, epilogue): c = act(alpha * a b + beta * c + bias), a (M, K) and b (K, N)
//     any 2-D views (a transposed view such as w.t() is read in place), c (M, N) with unit column stride.
//   - parallel_for(n, grain, body) calls body(begin, end) on disjoint ranges covering [0, n). The ranges
//     depend only on n and grain, never on the thread count, and no reduction is split across calls, so
//     results are bit-identical for every thread count.
//   - set_num_threads(n) / EIGENFORMER_NUM_THREADS choose the pool size (default: the machine's cores).
//
// This first version runs serially; the thread pool replaces the body of parallel_for without changing
// the contract.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>

#include "eigenformer/tensor/creation.hpp"
#include "eigenformer/tensor/matmul.hpp"

namespace eigenformer {

namespace detail {
inline int& num_threads_setting() {
  static int n = [] {
    if (const char* env = std::getenv("EIGENFORMER_NUM_THREADS")) {
      const int v = std::atoi(env);
      if (v > 0) return v;
    }
    const unsigned hc = std::thread::hardware_concurrency();
    return hc == 0 ? 1 : static_cast<int>(hc);
  }();
  return n;
}
}  // namespace detail

// The number of threads parallel_for and gemm may use (torch.get_num_threads()).
inline int get_num_threads() { return detail::num_threads_setting(); }
// torch.set_num_threads(n); n >= 1. Results do not depend on it, only the speed does.
inline void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: expected a positive number of threads, got " + std::to_string(n));
  detail::num_threads_setting() = n;
}

namespace backend {

enum class Activation { none, relu, gelu_erf, gelu_tanh };

// Applied to each element of c after the product: bias (N) added to every row, then the activation.
template <floating_element T>
struct Epilogue {
  const Tensor<T, 1>* bias = nullptr;
  Activation activation = Activation::none;
};

// body(begin, end) over disjoint ranges of at most `grain` indices covering [0, n).
template <class F>
void parallel_for(index_t n, index_t grain, F&& body) {
  if (n <= 0) return;
  grain = std::max<index_t>(grain, 1);
  for (index_t begin = 0; begin < n; begin += grain) body(begin, std::min(n, begin + grain));
}

namespace detail {
template <floating_element T>
T apply_activation(T x, Activation a) {
  switch (a) {
    case Activation::none: return x;
    case Activation::relu: return x > T(0) ? x : T(0);
    case Activation::gelu_erf: return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
    case Activation::gelu_tanh: {
      const T c = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
    }
  }
  return x;
}
}  // namespace detail

// c = act(alpha * a b + beta * c + bias). Throws shape_error naming all three shapes when they disagree.
template <floating_element T>
void gemm(const Tensor<T, 2>& a, const Tensor<T, 2>& b, Tensor<T, 2>& c, T alpha = T(1), T beta = T(0),
          const Epilogue<T>& epilogue = {}) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (b.shape()[0] != k || c.shape()[0] != m || c.shape()[1] != n)
    throw shape_error("gemm: " + shape_string(a.shape()) + " x " + shape_string(b.shape()) + " -> " +
                      shape_string(c.shape()) + ": shapes do not agree");
  if (epilogue.bias && epilogue.bias->numel() != n)
    throw shape_error("gemm: bias " + shape_string(epilogue.bias->shape()) + " does not match the " +
                      std::to_string(n) + " output columns");
  if (n > 1 && c.strides()[1] != 1)
    throw shape_error("gemm: the output " + shape_string(c.shape()) + " needs unit column stride");
  if (m == 0 || n == 0) return;
  using Out = Eigen::Map<eigenformer::detail::RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;
  Out o(c.data(), m, n, Eigen::OuterStride<>(m == 1 ? n : c.strides()[0]));
  if (beta == T(0)) o.setZero();
  else if (beta != T(1)) o *= beta;
  if (k > 0) {
    const auto ac = eigenformer::detail::classify(m, k, a.strides()[0], a.strides()[1]).layout ==
                            eigenformer::detail::matrix_layout::strided
                        ? a.contiguous()
                        : a;
    const auto bc = eigenformer::detail::classify(k, n, b.strides()[0], b.strides()[1]).layout ==
                            eigenformer::detail::matrix_layout::strided
                        ? b.contiguous()
                        : b;
    const auto ai = eigenformer::detail::classify(m, k, ac.strides()[0], ac.strides()[1]);
    const auto bi = eigenformer::detail::classify(k, n, bc.strides()[0], bc.strides()[1]);
    eigenformer::detail::with_matrix_map(ac.data(), m, k, ai, [&](const auto& am) {
      eigenformer::detail::with_matrix_map(bc.data(), k, n, bi, [&](const auto& bm) {
        if (alpha == T(1)) o.noalias() += am * bm;
        else o.noalias() += alpha * (am * bm);
      });
    });
  }
  if (epilogue.bias || epilogue.activation != Activation::none) {
    const auto bias_values = epilogue.bias ? epilogue.bias->contiguous() : Tensor<T, 1>();
    const T* bias = epilogue.bias ? bias_values.data() : nullptr;
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        T v = o(i, j);
        if (bias) v += bias[j];
        o(i, j) = detail::apply_activation(v, epilogue.activation);
      }
  }
}

// A fresh (M, N) result.
template <floating_element T>
Tensor<T, 2> gemm(const Tensor<T, 2>& a, const Tensor<T, 2>& b, const Epilogue<T>& epilogue = {}) {
  auto c = Tensor<T, 2>::empty(Shape<2>{a.shape()[0], b.shape()[1]});
  gemm(a, b, c, T(1), T(0), epilogue);
  return c;
}

}  // namespace backend
}  // namespace eigenformer
