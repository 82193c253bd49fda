// Checks of the few-row products (include/eigenformer/tensor/gemv.hpp), run by tests/tensor/test_backend.cpp
// once for each instruction set this CPU has (AVX-512, AVX2, the portable loops), so every path of the
// kernels is checked the same way.
//
// Tolerance: element (i, j) is a K-term dot product in float, in some fixed order, with or without FMA, so
// it is within gamma_{K+2} sum_k |a_ik b_kj| of the exact value (Higham, Accuracy and Stability, 3.1;
// gamma_n = n u / (1 - n u), u = 2^-24), +2 for alpha's scaling and the beta c addition, whose magnitude
// |beta c| joins the sum. For a bfloat16 weight the exact value is that of the widened bfloat16 weights
// (the widening is exact). A wrong column, row, stride or lane is an O(1) error, far outside the bound.
#pragma once

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "eigenformer/tensor.hpp"
#include "support/cases.hpp"
#include "support/thread_counts.hpp"

namespace eftest::gemv_check {

namespace ef = eigenformer;
using ef::index_t;

// Values in [-1, 1) from a fixed linear congruential stream.
inline ef::Tensor<float, 2> values(index_t rows, index_t cols, std::uint64_t seed) {
  auto t = ef::Tensor<float, 2>::empty({rows, cols});
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (index_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    t.data()[i] = static_cast<float>(static_cast<double>(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return t;
}

inline std::vector<unsigned char> bytes_of(const ef::Tensor<float, 2>& t) {
  const auto c = t.contiguous();
  std::vector<unsigned char> out(static_cast<std::size_t>(c.numel()) * sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), c.data(), out.size());
  return out;
}

// The largest |c - exact| / bound over c, the exact product computed in double from a and `b_at(k, j)`.
template <class B>
double worst_error(const ef::Tensor<float, 2>& a, B b_at, const ef::Tensor<float, 2>& c, const ef::Tensor<float, 2>& c0,
                   double alpha, double beta) {
  const index_t m = a.size(0), k = a.size(1), n = c.size(1);
  const double u = std::ldexp(1.0, -24), gamma = (k + 2) * u / (1 - (k + 2) * u);
  double worst = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double dot = 0, mag = 0;
      for (index_t p = 0; p < k; ++p) {
        const double t = double(a(i, p)) * double(b_at(p, j));
        dot += t;
        mag += std::abs(t);
      }
      const double old = beta == 0 ? 0.0 : double(c0(i, j));
      const double exact = alpha * dot + beta * old;
      const double bound = gamma * (std::abs(alpha) * mag + std::abs(beta * old)) + 1e-37;
      worst = std::max(worst, std::abs(double(c(i, j)) - exact) / bound);
    }
  return worst;
}

// backend::gemm of 1-4 rows against float weights in both layouts and bfloat16 weights in both layouts:
// within the bound above, and the same bits on 1, 2, 3 and 5 threads. Shapes cross the vector width, the
// four-row k step, the four-column groups and the 1024-column block, and are large enough to be split into
// several chunks on 2 and 3 threads; the last one is summed in parts of k (gemv_k_parts), which 5 threads
// also split by columns, and it runs once more with a bias and GELU in the epilogue.
inline void check_products() {
  const eftest::RestoreThreadCount restore_threads;
  struct Size {
    index_t k, n;
  };
  const std::array<Size, 6> sizes{Size{1, 1},       Size{7, 33},    Size{19, 5},
                                  Size{67, 1100}, Size{300, 263}, Size{301, 1000}};
  // The last size must be cut along k (into parts that are not all the same length), the others not: a
  // change to the rule would otherwise leave the parts unchecked.
  REQUIRE(ef::backend::detail::gemv_k_parts(301, 1000) == 4);
  REQUIRE(301 % ef::backend::detail::gemv_k_part_rows(301, 1000) != 0);
  REQUIRE(ef::backend::detail::gemv_k_parts(300, 263) == 1);
  std::size_t ran = 0;
  for (index_t m = 1; m <= ef::backend::detail::gemv_max_rows; ++m)
    for (const Size size : sizes)
      for (int variant = 0; variant < 4; ++variant) {
        const index_t k = size.k, n = size.n;  // not a structured binding: clang < 16 cannot capture those
        const bool col_major = variant % 2 == 1, bf16 = variant >= 2;
        CAPTURE(m);
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(col_major);
        CAPTURE(bf16);
        // a as a view whose rows are longer than k (row stride k + 3), b (K, N) row-major, or the
        // transposed view of an (N, K) matrix.
        const auto a = values(m, k + 3, 10 * m + 1).narrow(1, 0, k);
        auto b = col_major ? values(n, k, 20 * m + 2).t() : values(k, n, 20 * m + 2);
        if (bf16) {
          auto stored = col_major ? b.t().contiguous() : b.contiguous();
          ef::round_to_bf16_(stored);  // b then holds exactly the bfloat16 values
          b = col_major ? stored.t() : stored;
        }
        const ef::Bf16Matrix b16(b);
        const auto b_at = [&](index_t p, index_t j) { return bf16 ? b16.at(p, j) : b(p, j); };
        const auto c0 = values(m, n, 30 * m + 3);
        std::vector<unsigned char> first;
        const bool parts = ef::backend::detail::gemv_k_parts(k, n) > 1;
        for (int threads : {1, 2, 3, 5}) {
          if (threads == 5 && !parts) continue;
          CAPTURE(threads);
          ef::set_num_threads(threads);
          if (bf16) {
            const auto c = ef::backend::gemm(a, b, b16);
            CHECK(worst_error(a, b_at, c, c0, 1.0, 0.0) <= 1.0);
            if (threads == 1) first = bytes_of(c);
            else CHECK(bytes_of(c) == first);
            // A row-major weight's bfloat16 copy is stored in panels but summed in the float kernel's
            // order: the same bits as the float weight that holds the same values.
            if (threads == 1 && !col_major) CHECK(bytes_of(ef::backend::gemm(a, b)) == first);
          } else {
            // alpha and beta, into a c whose rows are longer than n (row stride n + 5).
            auto wide = ef::zeros<float>(ef::Shape<2>{m, n + 5});
            auto c = wide.narrow(1, 0, n);
            c.copy_(c0);
            ef::backend::gemm(a, b, c, -0.75f, 1.5f);
            CHECK(worst_error(a, b_at, c, c0, -0.75, 1.5) <= 1.0);
            if (threads == 1) first = bytes_of(c);
            else CHECK(bytes_of(c) == first);
          }
          if (parts) {
            // The epilogue after the parts are added: the same bits as the bias and GELU applied afterwards.
            const auto bias = values(1, n, 40 * m + 4).reshape(ef::Shape<1>{n});
            const auto fused = bf16 ? ef::backend::gemm(a, b, b16, {&bias, ef::backend::Activation::gelu_erf})
                                    : ef::backend::gemm(a, b, {&bias, ef::backend::Activation::gelu_erf});
            auto after = bf16 ? ef::backend::gemm(a, b, b16) : ef::backend::gemm(a, b);
            for (index_t i = 0; i < m; ++i) {
              float* row = after.data() + i * n;
              for (index_t j = 0; j < n; ++j) row[j] += bias(j);
              ef::backend::activate(row, row, n, ef::backend::Activation::gelu_erf);
            }
            CHECK(bytes_of(fused) == bytes_of(after));
          }
        }
        ++ran;
      }
  check_ran(ran, 4 * 6 * 4, "gemv products");
}

}  // namespace eftest::gemv_check
