// One float SIMD register type and its operations, for the hand-vectorised kernels (sgemm_kernel.hpp's
// packed product, gemv.hpp's few-row products), once per instruction set: avx512::SimdFloat (16 floats a
// register) and avx2::SimdFloat (8), with this_isa naming the set, each compiled inside its target region
// (cpu_isa.hpp) so that both exist in every GCC or Clang build on x86-64, whatever its flags. The kernels are
// written once against SimdFloat's static functions (for_each_isa.inl compiles them in both namespaces), so a
// new instruction set is one more definition here.
//
// SimdFloat in namespace detail is the widest of the two that the translation unit's own flags enable
// (EIGENFORMER_SIMD_FLOAT is then defined), for code that is compiled for one instruction set only.
#pragma once

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
};
}  // namespace eigenformer::backend::detail::avx2
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
