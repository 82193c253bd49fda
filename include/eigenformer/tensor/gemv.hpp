// Products with a handful of rows, c (M, N) = a (M, K) b (K, N) for M <= gemv_max_rows: one decoding step,
// where the left operand is the new token's activations and the right one a weight matrix. Such a product
// does two flops per weight element it reads, so it runs at the speed the weights stream from memory; the
// packed gemm kernel would copy each weight panel before using it once, and Eigen's GEMV reads b once per
// row of a. These kernels read every element of b exactly once, whatever M, straight from where it lies:
// row-major b (Conv1D's (in, out) weight) along its rows, column-major b (a transposed (out, in) weight:
// nn.Linear's, the tied LM head's wte^T) along its columns. b may be float or bfloat16 (stored as its 16
// upper bits); bfloat16 is widened to float in registers, so the arithmetic is float either way and a
// bfloat16 weight costs half the bytes to stream.
//
// Bits: every output column is computed on its own by the same sequence of operations, so a column's value
// does not depend on which other columns share its call, block or thread: backend.hpp splits the columns
// over the thread pool and the results are bit-identical for every thread count.
//   row-major b:    acc = fma(a(i,k), b(k,j), acc) from acc = 0, k ascending (a paneled bfloat16 b too).
//                   A large b (gemv_k_parts) is cut along k into parts fixed by its shape alone, each summed
//                   so from 0, and the parts' sums then added in order: (part 0 + part 1) + part 2 ...
//   column-major b: lane l of a vector of W lanes accumulates the k = l (mod W) terms by fma, k ascending;
//                   the lanes are then summed in a fixed tree (W = 16 with AVX-512, 8 with AVX2, 8 in the
//                   portable fallback), a partial last vector being padded with zeros. A bfloat16 b in the
//                   vector paths: over the first multiple of 2W of k, lane l takes k = 2l and 2l + 1 of each
//                   2W instead (the order its cheaper widening delivers them in), then as above.
//   then c = alpha acc (+ beta c when beta != 0).
// Builds without AVX2 + FMA use the portable loops below, whose multiply-adds round twice: the bits differ
// between builds, never between thread counts.
#pragma once

#include "eigenformer/tensor/simd.hpp"
#if defined(EIGENFORMER_SIMD_FLOAT)
#define EIGENFORMER_GEMV_SIMD 1
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "eigenformer/tensor/shape.hpp"

namespace eigenformer {

// float -> bfloat16 bits, rounding to nearest with ties to even: the value torch's .to(torch.bfloat16)
// gives for a contiguous float tensor (tools/reference/make_bf16_fixtures.py checks it bit for bit).
// Finite values too large for bfloat16 round to +-inf; subnormals keep their upper bits (rounded, not
// flushed). Every NaN becomes 0xFFFF: that is what the vectorised conversion of a contiguous tensor
// writes in PyTorch 1.13 (its scalar conversion, of a 0-dim or strided tensor, writes 0x7FC0 instead).
inline std::uint16_t bf16_bits_from_float(float x) noexcept {
  if (std::isnan(x)) return 0xFFFF;
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// The float a bfloat16 stands for: exact, bfloat16 being float with its low 16 mantissa bits cut.
inline float float_from_bf16_bits(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace eigenformer

namespace eigenformer::backend::detail {

// Products of up to this many rows take these kernels (backend::gemm, float only): a few sequences decoded
// together still read each weight once. With more rows, the packed gemm's register blocking wins.
inline constexpr index_t gemv_max_rows = 4;

// Columns a panel of a paneled b (below): 128 bytes of each bfloat16 row, two cache lines.
inline constexpr index_t gemv_panel_cols = 64;

// The right operand b (K, N): element (k, j) at data[k * ld + j] (row-major) or data[k + j * ld]. W is
// float or std::uint16_t (bfloat16 bits). Paneled (Bf16Matrix's layout of a row-major weight): the rows cut
// into the parts of k that the products sum separately (gemv_k_part_rows below; one part for a small
// matrix), the parts stored one after another; within a part of R rows, the columns cut into panels of
// P = gemv_panel_cols, the last one padded with zeros, each panel stored whole, row after row: element
// (k0 + r, j) of the part starting at row k0 at data[k0 * Np + (j / P) * P * R + r * P + j % P], with Np
// the columns padded to whole panels; ld unused. Why: a decoding step's thread then reads its share (a part
// of k, or its columns of a part) as one contiguous stretch of memory. Read in place from a row-major
// matrix, a thread's share of a 768-column weight is 768 bytes of every row, runs too short for the
// hardware prefetcher: such weights streamed at 9.6-12.3 GB/s on 2 threads where the wider ones reached
// 12.9-17.8, and 11.7-15.9 all of them in panels (an AVX-512 Xeon, GPT-2 small's bfloat16 weights, six rounds).
enum class GemvLayout { row_major, col_major, paneled };

template <class W>
struct GemvWeight {
  const W* data;
  index_t ld;
  GemvLayout layout;
};

inline float gemv_widen(float w) noexcept { return w; }
inline float gemv_widen(std::uint16_t w) noexcept { return float_from_bf16_bits(w); }

// One multiply-add of the scalar paths: fused where the vector paths are, so that a column computed in a
// scalar tail gets the bits it would have had in a vector block.
inline float gemv_fma(float a, float b, float c) noexcept {
#if defined(EIGENFORMER_GEMV_SIMD)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

inline float gemv_finish(float acc, float alpha, float beta, float old) noexcept {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * old;
}

#if defined(EIGENFORMER_GEMV_SIMD)
// The 8 lanes' sum: halves added, then quarters, then the last two: a fixed order.
inline float gemv_sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

#if defined(__AVX512F__)
// SimdFloat (simd.hpp) with the bfloat16 loads and the fixed-order horizontal sum.
struct GemvSimd : SimdFloat {
  using SimdFloat::load;
  // 16 bfloat16 (32 bytes) widened: each 16-bit pattern becomes the upper half of a float.
  static reg load(const std::uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // 32 bfloat16 (64 bytes) widened two instructions for 32 values: the even-indexed ones (the low halves
  // of the 32-bit lanes) shifted up into `even`, the odd-indexed ones masked in place into `odd`.
  static void load_pairs(const std::uint16_t* p, reg& even, reg& odd) {
    const __m512i v = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // 32 floats split the same way: lane l of `even` holds p[2 l], of `odd` p[2 l + 1].
  static void split_pairs(const float* p, reg& even, reg& odd) {
    const reg lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
    const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    even = _mm512_permutex2var_ps(lo, e, hi);
    odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(e, _mm512_set1_epi32(1)), hi);
  }
  // Halves added, then as gemv_sum8: a fixed order.
  static float sum(reg v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return gemv_sum8(_mm256_add_ps(lo, hi));
  }
};
#else
struct GemvSimd : SimdFloat {
  using SimdFloat::load;
  static reg load(const std::uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void load_pairs(const std::uint16_t* p, reg& even, reg& odd) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static void split_pairs(const float* p, reg& even, reg& odd) {
    const reg lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    // Within each 128-bit half: lo's two, then hi's two; the 64-bit pieces then put back in order.
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
  }
  static float sum(reg v) { return gemv_sum8(v); }
};
#endif
inline constexpr int gemv_lanes = GemvSimd::width;

// The sums of one group of 2 W columns widened as pairs (GemvSimd::load_pairs), the even columns' W sums then
// the odd ones' in `pairs`, written to `out` in column order.
inline void gemv_pairs_in_order(const float* pairs, float* out) {
  constexpr int w = GemvSimd::width;
  for (int q = 0; q < w; ++q) {
    out[2 * q] = pairs[q];
    out[2 * q + 1] = pairs[w + q];
  }
}
#else
inline constexpr int gemv_lanes = 8;
#endif

// Columns per pass over k of a row-major b: the running sums (M x this many floats, 16 KB) stay in L1 while
// every row of b is read along this many columns. With one row of a a pass spans the whole row of any
// GPT-2 weight, so a thread reads its rows of b as one contiguous stretch.
template <int M>
inline constexpr index_t gemv_block_cols = 4096 / M / 64 * 64;

// Asks for the cache line at p ahead of its use. A decoding step's products read each weight once, a
// thread's share one contiguous stretch, and on an AMD Zen 5 the hardware prefetchers alone kept a core well
// below the memory's read rate for the bfloat16 kernels (GPT-2 small's tied LM head, 77 MB: 1.7-2.1 ms, about
// the time of the same matrix in float, twice the bytes). Asking a fixed distance ahead (below) made the
// bfloat16 LM head 1.25-1.42 ms, the float one 0.76-0.80x its time, and the bfloat16 block weights 0.7-0.95x
// (throwaway driver of GPT-2 small's 49 decode products, 2 threads, a noisy host). With AVX2 a step reads
// half a cache line, so every line is asked for twice: an instruction more, not a memory access (not
// timed). The address is formed as an integer: near the end of b it lies past the allocation, which a
// prefetch may name (it never faults) but a pointer may not.
template <class W>
inline void gemv_prefetch(const W* p, index_t ahead) {
#if defined(EIGENFORMER_GEMV_SIMD)
  const auto address = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(ahead) * sizeof(W);
  _mm_prefetch(reinterpret_cast<const char*>(address), _MM_HINT_T0);
#else
  (void)p, (void)ahead;
#endif
}
// How far ahead: a column-major b, the lines of the group of 4 columns twice after this one (12 KB in
// bfloat16 at k = 768; one group ahead was as fast, four slower); a paneled bfloat16 b, 64 rows of its panel
// ahead (8 KB; 16 and 32 rows gained less, 128 no more).
inline constexpr index_t gemv_cols_prefetch_groups = 2;
inline constexpr index_t gemv_panel_prefetch_rows = 64;

// A row-major (or paneled) b of at least this many elements is summed in parts of k (gemv_k_parts).
inline constexpr index_t gemv_split_elements = index_t(1) << 18;

// The rows of each part of k that a row-major or paneled b (K, N) is summed in (k itself: one part), and
// how many parts that makes: fixed by the shape alone, so that the bits do not depend on the thread count.
// Why parts: split by columns, each of two threads read a 768-wide fp32 weight as 1.5 KB runs of every row
// (one run per 3 KB of stride), and GPT-2 small's block weights streamed at 0.72-0.76 of the rate of a plain
// read of the same bytes; split along k, a thread reads whole rows, one contiguous stretch, at the plain
// read's rate or better, and fp32 decode steps took 0.77-0.80 of the time on 2 threads (AMD EPYC Zen 5,
// bench/ab.py, bench/README.md "eighteenth session"). Four parts keep 1, 2 and 4 threads busy; more threads
// than parts split the columns of each part as well. A part is a whole multiple of 4 rows (the k step).
inline index_t gemv_k_part_rows(index_t k, index_t n) {
  constexpr index_t parts = 4;
  if (k < 16 * parts || double(k) * double(n) < double(gemv_split_elements)) return k;
  return ((k + parts - 1) / parts + 3) / 4 * 4;
}
inline index_t gemv_k_parts(index_t k, index_t n) {
  const index_t rows = gemv_k_part_rows(k, n);
  return rows == 0 ? 1 : (k + rows - 1) / rows;
}

// Row-major b, columns [j0, j0 + cols), cols <= gemv_block_cols<M>: acc[i * gemv_block_cols<M> + j - j0] =
// the sum. k advances four rows at a time, each running sum taking the four terms in order while it sits in
// a register: one load and store of the sums per four rows of b instead of per row.
template <int M, class W>
void gemv_rows(index_t k, const float* a, index_t lda, const W* b, index_t ld, index_t j0, index_t cols,
               float* acc) {
  constexpr index_t S = gemv_block_cols<M>;
  std::fill(acc, acc + M * S, 0.0f);
  index_t p = 0;
#if defined(EIGENFORMER_GEMV_SIMD)
  using V = GemvSimd;
  using reg = typename V::reg;
  constexpr index_t w = V::width;
  constexpr bool bf16 = std::is_same_v<W, std::uint16_t>;
  const index_t vec_cols = cols / w * w;
  // bfloat16: whole groups of 2 w columns are widened as pairs (V::load_pairs), half the instructions of
  // widening w at a time; the sums of a group then lie even columns first, odd ones after, until the end.
  const index_t pair_cols = bf16 ? cols / (2 * w) * (2 * w) : 0;
  for (; p + 4 <= k; p += 4) {
    const W* r = b + p * ld + j0;
    reg x[M][4];
    for (int i = 0; i < M; ++i)
      for (int u = 0; u < 4; ++u) x[i][u] = V::set1(a[i * lda + p + u]);
    index_t j = 0;
    if constexpr (bf16)
      for (; j < pair_cols; j += 2 * w) {
        reg even[4], odd[4];
        for (int u = 0; u < 4; ++u) V::load_pairs(r + u * ld + j, even[u], odd[u]);
        for (int i = 0; i < M; ++i) {
          reg se = V::load(acc + i * S + j), so = V::load(acc + i * S + j + w);
          for (int u = 0; u < 4; ++u) {
            se = V::fmadd(x[i][u], even[u], se);
            so = V::fmadd(x[i][u], odd[u], so);
          }
          V::store(acc + i * S + j, se);
          V::store(acc + i * S + j + w, so);
        }
      }
    for (; j < vec_cols; j += w) {
      const typename V::reg b0 = V::load(r + j), b1 = V::load(r + ld + j), b2 = V::load(r + 2 * ld + j),
                            b3 = V::load(r + 3 * ld + j);
      for (int i = 0; i < M; ++i) {
        typename V::reg s = V::load(acc + i * S + j);
        s = V::fmadd(x[i][0], b0, s);
        s = V::fmadd(x[i][1], b1, s);
        s = V::fmadd(x[i][2], b2, s);
        s = V::fmadd(x[i][3], b3, s);
        V::store(acc + i * S + j, s);
      }
    }
    for (index_t j = vec_cols; j < cols; ++j)
      for (int i = 0; i < M; ++i)
        for (int u = 0; u < 4; ++u)
          acc[i * S + j] = gemv_fma(a[i * lda + p + u], gemv_widen(r[u * ld + j]), acc[i * S + j]);
  }
  for (; p < k; ++p) {
    const W* r = b + p * ld + j0;
    for (int i = 0; i < M; ++i) {
      const reg x = V::set1(a[i * lda + p]);
      index_t j = 0;
      if constexpr (bf16)
        for (; j < pair_cols; j += 2 * w) {
          reg even, odd;
          V::load_pairs(r + j, even, odd);
          V::store(acc + i * S + j, V::fmadd(x, even, V::load(acc + i * S + j)));
          V::store(acc + i * S + j + w, V::fmadd(x, odd, V::load(acc + i * S + j + w)));
        }
      for (; j < vec_cols; j += w) V::store(acc + i * S + j, V::fmadd(x, V::load(r + j), V::load(acc + i * S + j)));
      for (; j < cols; ++j) acc[i * S + j] = gemv_fma(a[i * lda + p], gemv_widen(r[j]), acc[i * S + j]);
    }
  }
  for (int i = 0; i < M; ++i)  // the pair groups back in column order
    for (index_t g = 0; g < pair_cols; g += 2 * w) {
      float t[2 * w];
      std::copy(acc + i * S + g, acc + i * S + g + 2 * w, t);
      gemv_pairs_in_order(t, acc + i * S + g);
    }
#else
  // Plain loops over the columns, which the compiler vectorises with whatever the build targets.
  for (; p < k; ++p) {
    const W* r = b + p * ld + j0;
    for (int i = 0; i < M; ++i) {
      const float x = a[i * lda + p];
      float* s = acc + i * S;
      for (index_t j = 0; j < cols; ++j) s[j] = gemv_fma(x, gemv_widen(r[j]), s[j]);
    }
  }
#endif
}

// One panel of a paneled b (GemvWeight): acc[i * gemv_panel_cols + j] = the sum over k for row i of a and
// column j of the panel, in the order of the row-major kernel above (one fma a row, k ascending), so a
// paneled weight gives the bits of the same weight read in place. The panel's columns are taken G at a time
// with all their running sums in registers across the whole of k: G = 64 (M x 4 registers) with AVX-512;
// with AVX2's 16 registers, G shrinks as M grows so that the sums take at most 8.
template <int M>
void gemv_panel(index_t k, const float* a, index_t lda, const std::uint16_t* panel, float* acc) {
  constexpr index_t P = gemv_panel_cols;
#if defined(EIGENFORMER_GEMV_SIMD)
  using V = GemvSimd;
  using reg = typename V::reg;
  constexpr int w = V::width;
  constexpr int budget = w == 16 ? 16 : 8;  // registers for the running sums
  // Each group of 2 w columns (one load_pairs) takes two registers a row of a.
  constexpr int G = std::min<int>(P, budget / (2 * M) * 2 * w);
  static_assert(G >= 2 * w && P % G == 0, "gemv_panel: a group of columns must be whole pairs of vectors");
  constexpr int groups = G / (2 * w);
  for (index_t g0 = 0; g0 < P; g0 += G) {
    reg even[M][groups], odd[M][groups];
    for (int i = 0; i < M; ++i)
      for (int g = 0; g < groups; ++g) even[i][g] = odd[i][g] = V::zero();
    const std::uint16_t* row = panel + g0;
    for (index_t p = 0; p < k; ++p, row += P) {
      for (int g = 0; g < groups; ++g) gemv_prefetch(row + g * 2 * w, gemv_panel_prefetch_rows * P);
      reg e[groups], o[groups];
      for (int g = 0; g < groups; ++g) V::load_pairs(row + g * 2 * w, e[g], o[g]);
      for (int i = 0; i < M; ++i) {
        const reg x = V::set1(a[i * lda + p]);
        for (int g = 0; g < groups; ++g) {
          even[i][g] = V::fmadd(x, e[g], even[i][g]);
          odd[i][g] = V::fmadd(x, o[g], odd[i][g]);
        }
      }
    }
    for (int i = 0; i < M; ++i)
      for (int g = 0; g < groups; ++g) {
        alignas(64) float t[2 * w];
        V::store(t, even[i][g]);
        V::store(t + w, odd[i][g]);
        gemv_pairs_in_order(t, acc + i * P + g0 + g * 2 * w);
      }
  }
#else
  std::fill(acc, acc + M * P, 0.0f);
  for (index_t p = 0; p < k; ++p)
    for (int i = 0; i < M; ++i)
      for (index_t j = 0; j < P; ++j)
        acc[i * P + j] = gemv_fma(a[i * lda + p], gemv_widen(panel[p * P + j]), acc[i * P + j]);
#endif
}

// Column-major b: columns [j0, j1), each the dot product of a row of a with a contiguous column of b. Four
// columns at a time (four streams of b in flight), then one at a time; both compute a column alike.
template <int M, class W>
void gemv_cols(index_t k, const float* a, index_t lda, const W* b, index_t ld, index_t j0, index_t j1, float* c,
               index_t ldc, float alpha, float beta) {
  constexpr index_t L = gemv_lanes;
  const index_t full = k / L * L, rest = k - full;
  // The partial last vector of each row of a, padded with zeros.
  float a_tail[M][L] = {};
  for (int i = 0; i < M; ++i)
    for (index_t q = 0; q < rest; ++q) a_tail[i][q] = a[i * lda + full + q];
#if defined(EIGENFORMER_GEMV_SIMD)
  using V = GemvSimd;
  using reg = typename V::reg;
  const auto tail_of = [&](const W* col) {
    W t[L] = {};
    for (index_t q = 0; q < rest; ++q) t[q] = col[full + q];
    return V::load(t);
  };
  // bfloat16: the first 2L-aligned stretch of k is widened as pairs (V::load_pairs) against a split the
  // same way (V::split_pairs), lane l then taking k = 2l and 2l + 1 of each 2L in turn.
  const index_t pair_k = std::is_same_v<W, std::uint16_t> ? k / (2 * L) * (2 * L) : 0;
  index_t j = j0;
  const index_t ahead = gemv_cols_prefetch_groups * 4 * ld;
  for (; j + 4 <= j1; j += 4) {
    const W* col[4] = {b + j * ld, b + (j + 1) * ld, b + (j + 2) * ld, b + (j + 3) * ld};
    reg s[M][4];
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < 4; ++q) s[i][q] = V::zero();
    if constexpr (std::is_same_v<W, std::uint16_t>)
      for (index_t p = 0; p < pair_k; p += 2 * L) {
        reg even[4], odd[4];
        for (int q = 0; q < 4; ++q) {
          gemv_prefetch(col[q] + p, ahead);
          V::load_pairs(col[q] + p, even[q], odd[q]);
        }
        for (int i = 0; i < M; ++i) {
          reg xe, xo;
          V::split_pairs(a + i * lda + p, xe, xo);
          for (int q = 0; q < 4; ++q) s[i][q] = V::fmadd(xo, odd[q], V::fmadd(xe, even[q], s[i][q]));
        }
      }
    for (index_t p = pair_k; p < full; p += L) {
      for (int q = 0; q < 4; ++q) gemv_prefetch(col[q] + p, ahead);
      const reg w0 = V::load(col[0] + p), w1 = V::load(col[1] + p), w2 = V::load(col[2] + p), w3 = V::load(col[3] + p);
      for (int i = 0; i < M; ++i) {
        const reg x = V::load(a + i * lda + p);
        s[i][0] = V::fmadd(x, w0, s[i][0]);
        s[i][1] = V::fmadd(x, w1, s[i][1]);
        s[i][2] = V::fmadd(x, w2, s[i][2]);
        s[i][3] = V::fmadd(x, w3, s[i][3]);
      }
    }
    if (rest > 0) {
      const reg w[4] = {tail_of(col[0]), tail_of(col[1]), tail_of(col[2]), tail_of(col[3])};
      for (int i = 0; i < M; ++i)
        for (int q = 0; q < 4; ++q) s[i][q] = V::fmadd(V::load(a_tail[i]), w[q], s[i][q]);
    }
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < 4; ++q) {
        float& out = c[i * ldc + j + q];
        out = gemv_finish(V::sum(s[i][q]), alpha, beta, out);
      }
  }
  for (; j < j1; ++j) {
    const W* col = b + j * ld;
    reg s[M];
    for (int i = 0; i < M; ++i) s[i] = V::zero();
    if constexpr (std::is_same_v<W, std::uint16_t>)
      for (index_t p = 0; p < pair_k; p += 2 * L) {
        reg even, odd;
        V::load_pairs(col + p, even, odd);
        for (int i = 0; i < M; ++i) {
          reg xe, xo;
          V::split_pairs(a + i * lda + p, xe, xo);
          s[i] = V::fmadd(xo, odd, V::fmadd(xe, even, s[i]));
        }
      }
    for (index_t p = pair_k; p < full; p += L) {
      const reg w0 = V::load(col + p);
      for (int i = 0; i < M; ++i) s[i] = V::fmadd(V::load(a + i * lda + p), w0, s[i]);
    }
    if (rest > 0) {
      const reg w0 = tail_of(col);
      for (int i = 0; i < M; ++i) s[i] = V::fmadd(V::load(a_tail[i]), w0, s[i]);
    }
    for (int i = 0; i < M; ++i) {
      float& out = c[i * ldc + j];
      out = gemv_finish(V::sum(s[i]), alpha, beta, out);
    }
  }
#else
  for (index_t j = j0; j < j1; ++j) {
    const W* col = b + j * ld;
    for (int i = 0; i < M; ++i) {
      float s[L] = {};
      for (index_t p = 0; p < full; p += L)
        for (index_t q = 0; q < L; ++q) s[q] = gemv_fma(a[i * lda + p + q], gemv_widen(col[p + q]), s[q]);
      for (index_t q = 0; q < rest; ++q) s[q] = gemv_fma(a_tail[i][q], gemv_widen(col[full + q]), s[q]);
      const float total = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
      float& out = c[i * ldc + j];
      out = gemv_finish(total, alpha, beta, out);
    }
  }
#endif
}

template <int M, class W>
void gemv_columns_m(index_t k, const float* a, index_t lda, const GemvWeight<W>& b, float* c, index_t ldc, float alpha,
                    float beta, index_t j0, index_t j1) {
  if (b.layout == GemvLayout::col_major) {
    gemv_cols<M>(k, a, lda, b.data, b.ld, j0, j1, c, ldc, alpha, beta);
    return;
  }
  if constexpr (std::is_same_v<W, std::uint16_t>)
    if (b.layout == GemvLayout::paneled) {
      constexpr index_t P = gemv_panel_cols;
      alignas(64) float acc[M * P];
      for (index_t q = j0 / P; q * P < j1; ++q) {
        gemv_panel<M>(k, a, lda, b.data + q * P * k, acc);
        for (int i = 0; i < M; ++i)
          for (index_t j = std::max(j0, q * P); j < std::min(j1, q * P + P); ++j) {
            float& out = c[i * ldc + j];
            out = gemv_finish(acc[i * P + j - q * P], alpha, beta, out);
          }
      }
      return;
    }
  constexpr index_t S = gemv_block_cols<M>;
  alignas(64) float acc[M * S];
  for (index_t jb = j0; jb < j1; jb += S) {
    const index_t cols = std::min(S, j1 - jb);
    gemv_rows<M>(k, a, lda, b.data, b.ld, jb, cols, acc);
    for (int i = 0; i < M; ++i)
      for (index_t j = 0; j < cols; ++j) {
        float& out = c[i * ldc + jb + j];
        out = gemv_finish(acc[i * S + j], alpha, beta, out);
      }
  }
}

// Columns [j0, j1) of c (m rows, 1 <= m <= gemv_max_rows, row stride ldc) = alpha a b + beta c, a (m, k)
// row-major with row stride lda. With beta == 0, c is not read. One thread; see the top of the file for the bits.
template <class W>
void gemv_columns(index_t m, index_t k, const float* a, index_t lda, const GemvWeight<W>& b, float* c, index_t ldc,
                  float alpha, float beta, index_t j0, index_t j1) {
  switch (m) {
    case 1: return gemv_columns_m<1>(k, a, lda, b, c, ldc, alpha, beta, j0, j1);
    case 2: return gemv_columns_m<2>(k, a, lda, b, c, ldc, alpha, beta, j0, j1);
    case 3: return gemv_columns_m<3>(k, a, lda, b, c, ldc, alpha, beta, j0, j1);
    default: return gemv_columns_m<4>(k, a, lda, b, c, ldc, alpha, beta, j0, j1);
  }
}

// How many columns each parallel_for chunk of a gemv takes: a multiple of 64 (whole cache lines of c, which
// no two threads then share), and a single chunk when the product is too small to be worth waking a thread.
// A column-major b (the tied LM head's wte^T) is split into about four chunks a thread, so that one starting
// late evens out: each chunk is one contiguous stretch of b whatever its width. A row-major b (a Conv1D or
// Linear weight as GPT-2 stores it) too small to be summed in parts of k (gemv_k_parts; larger ones are split
// along k instead, backend.hpp's gemv_product) gets one chunk a thread: a chunk of c columns reads every row
// of b along c columns only, and with four chunks a thread those runs were 256 bytes to 1.5 KB, too short for
// the hardware prefetcher; one chunk a thread made whole GPT-2 small decode steps 15-23% faster on 2 threads
// (fp32 34.2-35.9 -> 28.6-29.1 ms, bfloat16 24.5-25.8 -> 19.8-20.5 ms, three runs of 40 consecutive steps
// each, Intel Xeon). A paneled bfloat16 weight takes one chunk a thread too (four were no faster in a
// throwaway driver). The bits do not depend on it.
inline index_t gemv_chunk_cols(index_t m, index_t n, index_t k, int threads, bool b_col_major) {
  if (threads <= 1 || double(m) * double(n) * double(k) < double(1 << 16)) return std::max<index_t>(n, 1);
  const index_t per_thread = b_col_major ? 4 : 1;
  const index_t wanted = (n + per_thread * threads - 1) / (per_thread * threads);
  return std::max<index_t>(64, (wanted + 63) / 64 * 64);
}

}  // namespace eigenformer::backend::detail
