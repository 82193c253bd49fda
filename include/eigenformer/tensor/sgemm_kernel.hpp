// eigenformer's own single-precision product kernel for x86 CPUs with AVX2 + FMA or AVX-512, used by
// backend::gemm for float products of 8 rows or more in place of Eigen's. Why: on an AVX-512 Xeon, Eigen 3.4
// reached 0.55-0.95x of oneDNN and OpenBLAS at the transformer shapes (bench/bench_gemm.cpp); it is weakest
// on the weight gradients g^T x, whose transposed left operand it packs slowly, and it zeroes c before a
// beta = 0 product. This kernel follows the usual packed design (Goto and van de Geijn, "Anatomy of
// high-performance matrix multiplication", 2008): panels of b are copied into the order the register-blocked
// inner loop reads them, so a transposed b costs one copy; a is read where it lies, row- or column-major
// (see APanel). Few rows times a transposed b compute c^T = b^T a^T instead, copying only a (under AVX2
// from k = 512; sgemm_transposes_weight).
//
// Two compilations of one text (sgemm_kernel_isa.inl): namespace avx512 (a 12 x 32 register block) and
// namespace avx2 (6 x 16), both in every GCC or Clang build on x86-64 whatever its flags; sgemm_kernel()
// returns the one for the instruction set chosen at run time (cpu_isa.hpp), or null when Eigen computes
// float products (a CPU without AVX2 + FMA, EIGENFORMER_MAX_CPU_ISA=baseline, another compiler or CPU).
//
// Bits: element (i, j) of a product is, for each block of sgemm_kc consecutive k in order,
// acc = fma(a(i,k), b(k,j), acc) from acc = 0 in order of k, then c = beta c + alpha acc for the first
// block and c = c + alpha acc after it (each product rounded, then the sum: no FMA there). That depends on K
// alone: not on where the tiles of backend::gemm start, the thread count, whether the element sits in a full
// or a partial register block (partial ones use masked loads and stores with the same arithmetic), nor on
// which of the two instruction sets computes it.
#pragma once

// Defining EIGENFORMER_NO_PACKED_KERNEL keeps float products on Eigen (to compare, or to rule the kernel out).
#include "eigenformer/tensor/simd.hpp"
#if defined(EIGENFORMER_X86_KERNELS) && !defined(EIGENFORMER_NO_PACKED_KERNEL)
#define EIGENFORMER_SGEMM_KERNEL 1
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "eigenformer/tensor/cpu_isa.hpp"
#include "eigenformer/tensor/shape.hpp"

namespace eigenformer::backend::detail {

// Cache blocking: a kc x nr panel of b (32 KB on AVX-512) stays in L1 while the mr-row panels of an
// mc x kc block of a (L2-sized) stream past it; kc is part of the bit contract above, so it is fixed.
inline constexpr index_t sgemm_kc = 256;
inline constexpr index_t sgemm_mc = 144;
inline constexpr index_t sgemm_nc = 1024;
// Rows up to which a product with a packed weight takes the few-row kernel (SgemmKernel::few_rows).
inline constexpr index_t sgemm_few_rows = 4;

// Whether SgemmKernel::packed computes c^T = b^T a^T (sgemm_kernel_isa.inl, sgemm_transposed_weight): a
// row-major a of few rows times a transposed b with at least as many columns, nn.Linear's x W^T with the
// weight not packed beforehand. On an Intel Xeon (Sapphire Rapids kind, 2 MB L2), one thread, GFLOP/s
// swapped against packing b (throwaway drivers, medians of 7-9). 1536 columns: at k = 768 m = 16 81 / 68, 32
// 157 / 94, 128 170 / 148, 256 176 / 163, 384 161 / 169; at k = 3072 m = 96 152 / 131, 128 137 / 138, 256 126 /
// 153; at k = 256 m = 128 160 / 154, 192 158 / 166. Fewer columns, operands in cache: at k = 768 m = 128 n =
// 64 136 / 140, 128 147 / 130; at k = 64 (an attention head's scores) m = 128 n = 128 127 / 136, 256 123 /
// 133, 384 132 / 129, m = 32 n = 128 144 / 113. It wins while a^T, copied whole and read again for every 12
// columns of c, stays within half of L2 (rows x k at most 2^18 floats), rows are few (at most 256; at most
// 128 for k below 512) and b is the larger operand: at least as many columns as rows, three times as many
// below k = 256, where the transposed writes of c weigh more against the multiply-adds. The AVX2 kernel's
// narrower block only from k = 512: on the same Xeon it gained at k = 768 m = 128 (1.04x the speed) and lost
// at k = 256 m = 128 (0.87x); on an AMD Zen 4 held to AVX2 (bench/ab.py, 10 interleaved rounds, 2 threads)
// 128 x 2304 x 768 and 128 x 3072 x 768 took 0.84x the time, 128 x 768 x 768 0.95x, against 0.98x for
// 128 x 768 x 3072, which the rule leaves alone (bench/README.md, "fifty-first session").
inline constexpr bool sgemm_transposes_weight(CpuIsa isa, bool a_col_major, bool b_col_major, index_t rows,
                                              index_t cols, index_t k) {
  return (isa == CpuIsa::avx512 || (isa == CpuIsa::avx2 && k >= 512)) && !a_col_major && b_col_major &&
         rows <= 256 && rows * k <= (index_t{1} << 18) && (rows <= 128 || k >= 512) &&
         cols >= (k >= 256 ? rows : 3 * rows);
}

// Where a panel starts in a packed b (PackedMatrix), for the packer, the kernels and the readers alike: the k
// blocks of sgemm_kc rows lie one after another (block pc after pc whole rows of padded_cols floats), and in
// each block its panels of nr columns (the one starting at column j0 after j0 columns of kc floats, kc being
// that block's depth), each panel kc rows of nr values.
inline constexpr index_t packed_panel_offset(index_t pc, index_t j0, index_t kc, index_t padded_cols) noexcept {
  return pc * padded_cols + j0 * kc;
}

// Scratch for the packed panels, one per thread, grown on demand and 64-byte aligned.
struct SgemmScratch {
  std::unique_ptr<float[]> storage;
  std::size_t capacity = 0;
  float* get(std::size_t floats) {
    if (floats + 16 > capacity) {
      capacity = floats + 16;
      storage.reset(new float[capacity]);
    }
    const auto address = reinterpret_cast<std::uintptr_t>(storage.get());
    return storage.get() + ((64 - address % 64) % 64) / sizeof(float);
  }
};

// Memory a caller reads right after a product (up to four runs of whole cache lines), which the product's
// register blocks ask for while they run, spread over all of them.
struct PrefetchRuns {
  static constexpr int max_runs = 4;
  const char* start[max_runs] = {};
  index_t lines[max_runs] = {};
  int count = 0;
};

// One instruction set's kernel, as the rest of the library calls it: its register block and its entry points
// (sgemm_kernel_isa.inl documents each). A weight packed by one kernel (PackedMatrix) is read by that kernel
// only, its panels being nr columns wide.
struct SgemmKernel {
  CpuIsa isa;
  int mr, nr;
  // c (rows x cols) = beta c + alpha op(a) op(b), packing b as it goes.
  void (*packed)(bool a_col_major, bool b_col_major, index_t rows, index_t cols, index_t k, float alpha,
                 const float* a, index_t lda, const float* b, index_t ldb, float beta, float* c, index_t ldc);
  // k [0, kc) x columns [0, nc) of b into panels of nr columns.
  void (*pack_b)(const float* b, bool b_col_major, index_t ldb, index_t kc, index_t nc, float* out);
  // Rows [r0, r1) x columns [c0, c1) of c with b packed beforehand by pack_b, plus bias[j] in column j (null
  // for none); `ahead` (null for none) asked for while it runs.
  void (*both_packed_block)(index_t k, float alpha, bool a_col_major, const float* a, index_t lda,
                            const float* packed_b, index_t padded_cols, index_t r0, index_t r1, index_t c0,
                            index_t c1, float beta, float* c, index_t ldc, const float* bias,
                            const PrefetchRuns* ahead);
  // Rows [0, rows) x columns [c0, c1) of c = a b for rows <= sgemm_few_rows, a row-major, b packed
  // beforehand: the bits both_packed_block gives those rows, each panel of b read once.
  void (*few_rows)(index_t k, const float* a, index_t lda, index_t rows, const float* packed_b, index_t padded_cols,
                   index_t c0, index_t c1, float* c, index_t ldc);
  // Rows rounded up to whole panels of mr, columns to whole panels of nr.
  index_t padded_rows(index_t rows) const { return (rows + mr - 1) / mr * mr; }
  index_t padded_cols(index_t cols) const { return (cols + nr - 1) / nr * nr; }
  const char* name() const { return isa == CpuIsa::avx512 ? "AVX-512" : "AVX2"; }
};

}  // namespace eigenformer::backend::detail

#if defined(EIGENFORMER_SGEMM_KERNEL)
#define EIGENFORMER_ISA_BODY "eigenformer/tensor/sgemm_kernel_isa.inl"
#include "eigenformer/tensor/for_each_isa.inl"
#undef EIGENFORMER_ISA_BODY
#endif

namespace eigenformer::backend::detail {

// The kernel for an instruction set, or null where there is none (baseline, or no kernels in this build).
inline const SgemmKernel* sgemm_kernel_for(CpuIsa isa) noexcept {
#if defined(EIGENFORMER_SGEMM_KERNEL)
  if (isa == CpuIsa::avx512) return &avx512::sgemm_kernel_entry;
  if (isa == CpuIsa::avx2) return &avx2::sgemm_kernel_entry;
#endif
  (void)isa;
  return nullptr;
}

// The kernel float products use now (cpu_isa()), or null when Eigen computes them.
inline const SgemmKernel* sgemm_kernel() { return sgemm_kernel_for(cpu_isa()); }

}  // namespace eigenformer::backend::detail
