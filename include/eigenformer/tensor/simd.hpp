// One float SIMD register type and its operations, for the hand-vectorised kernels (sgemm_kernel.hpp's
// packed product, gemv.hpp's few-row products, vector_math.hpp's GELU and softmax), once per instruction
// set: avx512::SimdFloat (16 floats a register) and avx2::SimdFloat (8), with this_isa naming the set, each
// compiled inside its target region (cpu_isa.hpp) so that both exist in every GCC or Clang build on x86-64,
// whatever its flags. The kernels are written once against SimdFloat's static functions (for_each_isa.inl
// compiles them in both namespaces), so a new instruction set is one more definition here. SimdDouble8
// holds eight doubles (one AVX-512 register, two AVX2 ones), for sums kept in double.
//
// SimdFloat in namespace detail is the widest of the two that the translation unit's own flags enable
// (EIGENFORMER_SIMD_FLOAT is then defined), for code that is compiled for one instruction set only.
#pragma once

#include <cstdint>

#include "eigenformer/tensor/cpu_isa.hpp"

#if defined(EIGENFORMER_X86_KERNELS)

EIGENFORMER_TARGET_AVX512_BEGIN
namespace eigenformer::backend::detail::avx512 {
inline constexpr CpuIsa this_isa = CpuIsa::avx512;
struct SimdFloat {
  using reg = __m512;
  static constexpr int width = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  // The first n lanes (0 < n < width) of p; the others read as zero and are never written.
  static reg load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p); }
  static void store_first(float* p, reg v, int n) { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v); }

  // For the element-wise kernels (vector_math_isa.inl). min and max return b where either is NaN, as the
  // instructions do: put the value that must carry a NaN through second. The masked ("maskz") forms with
  // `all` lanes on are the plain instructions; the plain intrinsics (and _mm512_castps512_ps256) pass an
  // undefined register that GCC 12 then reports, in every program that includes this header with -Wall, as
  // "may be used uninitialized".
  static constexpr __mmask16 all = 0xFFFF;
  using mask = __mmask16;
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b, rounded once
  static reg min(reg a, reg b) { return _mm512_maskz_min_ps(all, a, b); }
  static reg max(reg a, reg b) { return _mm512_maskz_max_ps(all, a, b); }
  static reg abs(reg a) { return _mm512_abs_ps(a); }
  static reg sqrt(reg a) { return _mm512_maskz_sqrt_ps(all, a); }  // correctly rounded, as std::sqrt
  static mask less(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }  // false where NaN
  static mask greater_equal(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static mask not_equal(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }  // true where NaN
  static mask both(mask a, mask b) { return static_cast<mask>(a & b); }
  static bool any(mask m) { return m != 0; }
  static reg select(mask m, reg if_true, reg if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
  // v, opaque to the optimiser: GCC at -O2 (-ffp-contract=fast, its default) fuses an intrinsic's product
  // with the addition that uses it into one FMA, skipping the product's rounding. A product that must be
  // rounded on its own (to give the portable loops' or torch's bits) goes through here first.
  static reg rounded(reg v) {
    __asm__("" : "+v"(v));
    return v;
  }
  // 2^n for whole numbers n in [-126, 127] held as floats: n + 127 in the exponent field.
  static reg exp2_int(reg n) {
    const __m512i e = _mm512_add_epi32(_mm512_maskz_cvtps_epi32(all, n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, e, 23));
  }
  // Dropout's mask (random.hpp's bernoulli_fill) for 16 elements from 32 words of the generator: element i
  // is `kept` where the 53-bit number (words[2i] & 0x1FFFFF) << 32 | words[2i + 1] is below threshold (at
  // most 2^53), else 0. Rotating each 64-bit lane by 32 puts the first word of its pair on top.
  static reg below_threshold(const std::uint32_t* words, std::uint64_t threshold, reg kept) {
    const __m512i low53 = _mm512_set1_epi64(static_cast<long long>((std::uint64_t{0x1FFFFF} << 32) | 0xFFFFFFFFu));
    const __m512i limit = _mm512_set1_epi64(static_cast<long long>(threshold));
    const __m512i a = _mm512_and_si512(_mm512_maskz_rol_epi64(0xFF, _mm512_loadu_si512(words), 32), low53);
    const __m512i b = _mm512_and_si512(_mm512_maskz_rol_epi64(0xFF, _mm512_loadu_si512(words + 16), 32), low53);
    const unsigned below = _mm512_cmplt_epu64_mask(a, limit) | (unsigned{_mm512_cmplt_epu64_mask(b, limit)} << 8);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(below), kept);
  }
  static __m256 low_half(reg v) { return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 0)); }
  static __m256 high_half(reg v) { return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 1)); }
  // Sums of 16 lanes held in 16 / width registers, in one fixed order for both instruction sets (lanes
  // 0-7 plus lanes 8-15, then avx2::SimdFloat::sum8), so that a sum's bits do not depend on the set.
  static constexpr int per16 = 1;
  static float sum16(const reg* v);
  static float max16(const reg* v);
};
// Eight doubles, for the sums that backend.hpp's sum_in_double keeps in eight running totals (lane u sums
// the terms j = u mod 8), each taken from a group of eight floats (an AVX2 register, avx2::SimdFloat).
struct SimdDouble8 {
  using reg = __m512d;
  static reg zero() { return _mm512_setzero_pd(); }
  static reg set1(double x) { return _mm512_set1_pd(x); }
  static reg load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, reg v) { _mm512_storeu_pd(p, v); }
  static reg widen(__m256 v) { return _mm512_maskz_cvtps_pd(0xFF, v); }
  static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_pd(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_pd(a, b); }
  static reg rounded(reg v) {  // as SimdFloat::rounded
    __asm__("" : "+v"(v));
    return v;
  }
};
}  // namespace eigenformer::backend::detail::avx512
EIGENFORMER_TARGET_END

EIGENFORMER_TARGET_AVX2_BEGIN
namespace eigenformer::backend::detail::avx2 {
inline constexpr CpuIsa this_isa = CpuIsa::avx2;
struct SimdFloat {
  using reg = __m256;
  static constexpr int width = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static __m256i first_lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg load_first(const float* p, int n) { return _mm256_maskload_ps(p, first_lanes(n)); }
  static void store_first(float* p, reg v, int n) { _mm256_maskstore_ps(p, first_lanes(n), v); }

  // As avx512::SimdFloat's, lane for lane.
  using mask = __m256;
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static reg min(reg a, reg b) { return _mm256_min_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg abs(reg a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }
  static reg sqrt(reg a) { return _mm256_sqrt_ps(a); }
  static mask less(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static mask greater_equal(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static mask not_equal(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
  static mask both(mask a, mask b) { return _mm256_and_ps(a, b); }
  static bool any(mask m) { return _mm256_movemask_ps(m) != 0; }
  static reg select(mask m, reg if_true, reg if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
  static reg rounded(reg v) {
    __asm__("" : "+v"(v));
    return v;
  }
  static reg exp2_int(reg n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // As avx512::SimdFloat's, for 8 elements from 16 words (0xB1 swaps the two words of each pair); the
  // 64-bit compare is signed, and every number and the threshold lie below 2^63.
  static reg below_threshold(const std::uint32_t* words, std::uint64_t threshold, reg kept) {
    const __m256i low53 = _mm256_set1_epi64x(static_cast<long long>((std::uint64_t{0x1FFFFF} << 32) | 0xFFFFFFFFu));
    const __m256i limit = _mm256_set1_epi64x(static_cast<long long>(threshold));
    const __m256i a = _mm256_and_si256(
        _mm256_shuffle_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words)), 0xB1), low53);
    const __m256i b = _mm256_and_si256(
        _mm256_shuffle_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 8)), 0xB1), low53);
    // Each 64-bit result is all ones or all zeros: its low 32 bits, four from each, make the 8 lanes.
    const __m256i low_words = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m256i ca = _mm256_permutevar8x32_epi32(_mm256_cmpgt_epi64(limit, a), low_words);
    const __m256i cb = _mm256_permutevar8x32_epi32(_mm256_cmpgt_epi64(limit, b), low_words);
    const __m256i below = _mm256_inserti128_si256(ca, _mm256_castsi256_si128(cb), 1);
    return _mm256_and_ps(_mm256_castsi256_ps(below), kept);
  }
  // The 8 lanes' sum: halves added, then quarters, then the last two: a fixed order.
  static float sum8(reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static float max8(reg v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static constexpr int per16 = 2;
  static float sum16(const reg* v) { return sum8(add(v[0], v[1])); }
  static float max16(const reg* v) { return max8(max(v[0], v[1])); }
};
// As avx512::SimdDouble8, in two registers: lanes 0-3 and 4-7.
struct SimdDouble8 {
  struct reg {
    __m256d lo, hi;
  };
  static reg zero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  static reg set1(double x) { return {_mm256_set1_pd(x), _mm256_set1_pd(x)}; }
  static reg load(const double* p) { return {_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
  static void store(double* p, reg v) {
    _mm256_storeu_pd(p, v.lo);
    _mm256_storeu_pd(p + 4, v.hi);
  }
  static reg widen(__m256 v) {
    return {_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
  }
  static reg add(reg a, reg b) { return {_mm256_add_pd(a.lo, b.lo), _mm256_add_pd(a.hi, b.hi)}; }
  static reg sub(reg a, reg b) { return {_mm256_sub_pd(a.lo, b.lo), _mm256_sub_pd(a.hi, b.hi)}; }
  static reg mul(reg a, reg b) { return {_mm256_mul_pd(a.lo, b.lo), _mm256_mul_pd(a.hi, b.hi)}; }
  static reg rounded(reg v) {
    __asm__("" : "+v"(v.lo), "+v"(v.hi));
    return v;
  }
};
}  // namespace eigenformer::backend::detail::avx2
EIGENFORMER_TARGET_END

EIGENFORMER_TARGET_AVX512_BEGIN
namespace eigenformer::backend::detail::avx512 {
inline float SimdFloat::sum16(const reg* v) { return avx2::SimdFloat::sum8(_mm256_add_ps(low_half(*v), high_half(*v))); }
inline float SimdFloat::max16(const reg* v) { return avx2::SimdFloat::max8(_mm256_max_ps(low_half(*v), high_half(*v))); }
}  // namespace eigenformer::backend::detail::avx512
EIGENFORMER_TARGET_END

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define EIGENFORMER_SIMD_FLOAT 1
namespace eigenformer::backend::detail {
#if defined(__AVX512F__)
using SimdFloat = avx512::SimdFloat;
#else
using SimdFloat = avx2::SimdFloat;
#endif
}  // namespace eigenformer::backend::detail
#endif

#endif
