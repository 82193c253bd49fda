// Float element-wise kernels of our own, chosen at run time like the products (cpu_isa.hpp): GELU (erf
// and tanh forms) and its derivative, softmax rows, the exp and sum of streaming attention, the AdamW update,
// dropout's masks, LayerNorm's rows (forward, backward, and their sums in double) and cross-entropy's rows.
//
// Why not Eigen's exp and erf: Eigen picks its vector width from the compiler's flags, so a program built
// without -mavx2 / -march ran them with SSE2 and without fused multiply-adds, 6-9x slower than the same
// code built with -march=native (a char GPT training step spent 36% of its time in GELU and softmax that
// way, against 8% native). These kernels are compiled for AVX-512 and AVX2 + FMA whatever the flags
// (vector_math_isa.inl, once per set) and give the same bits on both; on a CPU without AVX2 (or with
// EIGENFORMER_MAX_CPU_ISA=baseline) vector_math_kernel() is null and the callers keep Eigen's code (or
// their portable loops). The AdamW, dropout and LayerNorm kernels give their portable loops' bits as a
// build without FMA computes them (AdamW's loops keep them with FMA too, and so torch.optim's): where those
// round a product before adding it, so do the kernels (SimdFloat::rounded, as GCC at -O2 would fuse them).
//
// Accuracy (tests/tensor/test_vector_math.cpp measures it against double): exp to about an ulp on
// [log(FLT_MIN), 88] and 0 below; GELU's Phi(x) from erfc(|x| / sqrt 2) = R(a) exp(-a^2) with a rational
// R fitted by tools/fit_erfc_scaled.py, a few ulps in relative terms on both sides of 0 (including the
// negative tail, where 1 + erf(x / sqrt 2) would cancel).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "eigenformer/tensor/cpu_isa.hpp"
#include "eigenformer/tensor/shape.hpp"
#include "eigenformer/tensor/simd.hpp"

namespace eigenformer::backend::detail {

// One AdamW step's float scalars, each already rounded to float (train/optimizers.hpp says how).
struct AdamWStep {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size, bc2_sqrt;
};

// One instruction set's kernels. Each reads and writes n floats; in may equal out except for softmax.
struct VectorMathKernel {
  CpuIsa isa;
  void (*gelu_erf)(const float* in, float* out, index_t n);                           // x Phi(x)
  void (*gelu_erf_backward)(const float* g, const float* x, float* out, index_t n);  // g GELU'(x)
  void (*gelu_tanh)(const float* in, float* out, index_t n);
  void (*gelu_tanh_backward)(const float* g, const float* x, float* out, index_t n);
  // softmax of one row of n >= 1 floats; a row of only -inf gives zeros (reduce.hpp's softmax_lane).
  void (*softmax)(const float* in, float* out, index_t n);
  // row[i] = exp(row[i] - shift), exactly 0 where that is below float's normal range.
  void (*exp_shifted)(float* row, index_t n, float shift);
  // The sum of n floats in an order that does not depend on the instruction set.
  float (*sum)(const float* p, index_t n);
  // AdamW on n elements of the parameter x with gradient g, moments m and v (and amsgrad's running max vmax,
  // or null): torch.optim.AdamW's single-tensor order, one rounding per operation, so the same bits as
  // train/optimizers.hpp's portable loops.
  void (*adamw)(index_t n, float* x, const float* g, float* m, float* v, float* vmax, const AdamWStep& c);
  // Dropout's mask from 2n generator words: out[i] = kept where (words[2i] & 0x1FFFFF) << 32 | words[2i + 1]
  // is below threshold, else 0 (random.hpp's bernoulli_fill, the same values).
  void (*bernoulli)(const std::uint32_t* words, float* out, index_t n, std::uint64_t threshold, float kept);
  // LayerNorm's row work (nn/layernorm.hpp), the same bits as its portable loops. The sums are backend.hpp's
  // sum_in_double of p[j] and of (p[j] - mean)^2, term for term.
  double (*sum_double)(const float* p, index_t n);
  double (*sum_squared_deviation)(const float* p, index_t n, double mean);
  // y = (x - mean) rstd weight + bias over a row of n (weight and bias may be null).
  void (*layer_norm)(const float* x, float* y, index_t n, float mean, float rstd, const float* weight,
                     const float* bias);
  // The input gradient of one row from its output gradient g.
  void (*layer_norm_backward)(const float* x, const float* g, const float* weight, float mean, float rstd,
                              float* dx, index_t n);
  // Adds one row's terms to the running double sums of the weight and bias gradients (either may be null).
  void (*layer_norm_param_grads)(const float* g, const float* x, float mean, float rstd, double* dweight,
                                 double* dbias, index_t n);
  // Cross-entropy's rows (train/losses.hpp). log sum_j exp(x[j]) over n >= 1 floats: each exp(x[j] - max)
  // in float, their sum in double (lanes 0-7 and 8-15 of each group of 16 in two sums of eight, the same on
  // both sets), so the result keeps about float's digits whatever n.
  double (*log_sum_exp)(const float* x, index_t n);
  // grad[j] = ((exp(x[j] - lse) - off) - (j == target ? on_target : 0)) scale over n floats, in float, with
  // x[j] - lse taken as (x[j] - hi) - lo for lse = hi + lo split into two floats.
  void (*cross_entropy_grad)(const float* x, float* grad, index_t n, double lse, float off, index_t target,
                             float on_target, float scale);
};

}  // namespace eigenformer::backend::detail

#if defined(EIGENFORMER_X86_KERNELS)
#define EIGENFORMER_ISA_BODY "eigenformer/tensor/vector_math_isa.inl"
#include "eigenformer/tensor/for_each_isa.inl"
#undef EIGENFORMER_ISA_BODY
#endif

namespace eigenformer::backend::detail {

// The kernels for an instruction set, or null where there are none (baseline, or another compiler or CPU).
inline const VectorMathKernel* vector_math_kernel_for(CpuIsa isa) noexcept {
#if defined(EIGENFORMER_X86_KERNELS)
  if (isa == CpuIsa::avx512) return &avx512::vector_math_entry;
  if (isa == CpuIsa::avx2) return &avx2::vector_math_entry;
#endif
  (void)isa;
  return nullptr;
}

// The kernels float element-wise work uses now (cpu_isa()), or null when Eigen's code computes it.
inline const VectorMathKernel* vector_math_kernel() { return vector_math_kernel_for(cpu_isa()); }

// The same for a layer or optimizer of element type T: the kernels are float's, so null for any other T.
template <typename T>
const VectorMathKernel* vector_math_kernel_for_type() {
  if constexpr (std::is_same_v<T, float>) return vector_math_kernel();
  else return nullptr;
}

}  // namespace eigenformer::backend::detail
