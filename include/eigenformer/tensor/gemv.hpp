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
// The kernels (gemv_isa.inl) are compiled three times: for AVX-512, for AVX2 + FMA (each in its target
// region, whatever the build's flags) and as portable loops, whose multiply-adds round twice; gemv_kernel()
// picks the one for the instruction set chosen at run time (cpu_isa.hpp). The bits differ between
// instruction sets, never between thread counts.
#pragma once

#include "eigenformer/tensor/cpu_isa.hpp"
#include "eigenformer/tensor/simd.hpp"

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

inline float gemv_finish(float acc, float alpha, float beta, float old) noexcept {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * old;
}

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
// half a cache line; the column-major kernel asks once every two steps, since asking every step (each line
// twice) took a load slot a step: asked once, 1 x 2304 x 768 with b = W^T (bench_gemm, AMD Zen 4 held to
// AVX2, bench/ab.py, 8 rounds) took 0.91x the time on 2 threads and 0.90x on 1. The address is formed as an
// integer: near the end of b it lies past the allocation, which a prefetch may name (it never faults) but a
// pointer may not. kIntoL2: into L2 only (see gemv_cols_prefetch_groups).
template <bool kIntoL2 = false, class W>
inline void gemv_prefetch(const W* p, index_t ahead) {
#if defined(EIGENFORMER_X86_KERNELS)
  const auto address = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(ahead) * sizeof(W);
  _mm_prefetch(reinterpret_cast<const char*>(address), kIntoL2 ? _MM_HINT_T1 : _MM_HINT_T0);
#else
  (void)p, (void)ahead;
#endif
}
// How far ahead: a column-major b, the lines of the group of 4 columns twice after this one (12 KB in
// bfloat16 at k = 768; one group ahead was as fast, four slower, both measured asking into L1); a paneled
// bfloat16 b, 64 rows of its panel ahead (8 KB; 16 and 32 rows gained less, 128 no more). A column-major b
// asks for its lines into L2 only (the loads then find them there, not in memory; which of the core's own
// prefetchers moves them on into L1 was not looked at), which on an AMD Zen 4 (32 KB L1, 1 MB L2) was faster
// for both types; a paneled b keeps asking into L1. 2 threads, GCC 12 -march=native: a GPT-2 small decoding
// step with bfloat16 weights (its LM head the one column-major b) 0.77x the time (bench/ab.py, 5 rounds, 10.3
// against 7.9 ms, each round 0.73-0.86; the paneled weights into L2 as well: 0.82x); float 1 x 2304 x 768
// with b = W^T (throwaway driver, medians of rounds alternating the builds): W in L3 52 us against 57 (one
// thread 92 against 101), GPT-2's 50257 x 768 LM head from memory 5.3 ms against 6.3 (10 rounds). Into L1 one
// group ahead was faster from L3 (46 us) but no faster from memory (6.1 ms). Not measured on other machines.
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

}  // namespace eigenformer::backend::detail

#if defined(EIGENFORMER_X86_KERNELS)
// Each instruction set's SimdFloat (simd.hpp) with the bfloat16 loads and the fixed-order horizontal sum.
EIGENFORMER_TARGET_AVX2_BEGIN
namespace eigenformer::backend::detail::avx2 {
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
  static float sum(reg v) { return sum8(v); }
};
}  // namespace eigenformer::backend::detail::avx2
EIGENFORMER_TARGET_END

EIGENFORMER_TARGET_AVX512_BEGIN
namespace eigenformer::backend::detail::avx512 {
struct GemvSimd : SimdFloat {
  using SimdFloat::load;
  // The masked ("maskz") forms of the shift and the widening with `all` lanes on are the plain
  // instructions; the plain intrinsics pass an undefined register that GCC 12 then reports, in every
  // program that includes this header with -Wall, as "may be used uninitialized".
  // 16 bfloat16 (32 bytes) widened: each 16-bit pattern becomes the upper half of a float.
  static reg load(const std::uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
  }
  // 32 bfloat16 (64 bytes) widened two instructions for 32 values: the even-indexed ones (the low halves
  // of the 32-bit lanes) shifted up into `even`, the odd-indexed ones masked in place into `odd`.
  static void load_pairs(const std::uint16_t* p, reg& even, reg& odd) {
    const __m512i v = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, v, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // 32 floats split the same way: lane l of `even` holds p[2 l], of `odd` p[2 l + 1].
  static void split_pairs(const float* p, reg& even, reg& odd) {
    const reg lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
    const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    even = _mm512_permutex2var_ps(lo, e, hi);
    odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(e, _mm512_set1_epi32(1)), hi);
  }
  static float sum(reg v) { return sum16(&v); }  // halves added, then as avx2's sum8: a fixed order
};
}  // namespace eigenformer::backend::detail::avx512
EIGENFORMER_TARGET_END
#endif

namespace eigenformer::backend::detail {

// One instruction set's entry points (gemv_isa.inl's gemv_columns for float and for bfloat16 weights).
template <class W>
using GemvColumns = void (*)(index_t m, index_t k, const float* a, index_t lda, const GemvWeight<W>& b, float* c,
                             index_t ldc, float alpha, float beta, index_t j0, index_t j1);
struct GemvKernel {
  CpuIsa isa;
  GemvColumns<float> float_weight;
  GemvColumns<std::uint16_t> bf16_weight;
  template <class W>
  GemvColumns<W> columns() const {
    if constexpr (std::is_same_v<W, float>) return float_weight;
    else return bf16_weight;
  }
};

}  // namespace eigenformer::backend::detail

#define EIGENFORMER_ISA_BODY "eigenformer/tensor/gemv_isa.inl"
#if defined(EIGENFORMER_X86_KERNELS)
#define EIGENFORMER_GEMV_VECTOR 1
#include "eigenformer/tensor/for_each_isa.inl"
#undef EIGENFORMER_GEMV_VECTOR
#endif

#define EIGENFORMER_GEMV_VECTOR 0
namespace eigenformer::backend::detail::portable {
inline constexpr CpuIsa this_isa = CpuIsa::baseline;
#include EIGENFORMER_ISA_BODY
}  // namespace eigenformer::backend::detail::portable
#undef EIGENFORMER_GEMV_VECTOR
#undef EIGENFORMER_ISA_BODY

namespace eigenformer::backend::detail {

// The kernels for an instruction set: the vector ones where compiled, else the portable loops.
inline const GemvKernel& gemv_kernel_for(CpuIsa isa) noexcept {
#if defined(EIGENFORMER_X86_KERNELS)
  if (isa == CpuIsa::avx512) return avx512::gemv_kernel_entry;
  if (isa == CpuIsa::avx2) return avx2::gemv_kernel_entry;
#endif
  (void)isa;
  return portable::gemv_kernel_entry;
}

// The kernels few-row products use now (cpu_isa()). Read once a product, so that its chunks agree.
inline const GemvKernel& gemv_kernel() { return gemv_kernel_for(cpu_isa()); }

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
