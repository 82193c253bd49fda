// Optional: float products through oneDNN's sgemm instead of Eigen's. Off unless EIGENFORMER_BLAS_ONEDNN is
// defined (CMake: -DEIGENFORMER_BLAS=onednn, which also links libdnnl; Debian: libdnnl-dev). Why: at the
// transformer shapes measured on an AVX-512 Xeon, oneDNN's JIT kernels were 1.1-1.4x faster than Eigen's on
// one core (bench/bench_gemm.cpp), and oneDNN's beta = 0 writes c once where Eigen zeroes it first.
//
// backend::gemm keeps its own tiling and thread pool and hands oneDNN one tile at a time, so which thread
// computes a tile, and how many there are, still cannot change a bit of the result. oneDNN's OpenMP build
// would otherwise start a team of its own inside every tile (two pool threads times two OpenMP threads on
// two cores); each call therefore runs with OpenMP's thread count set to 1 for the calling thread, and puts
// back what the caller had.
#pragma once

#if defined(EIGENFORMER_BLAS_ONEDNN)
#include <dlfcn.h>
#include <dnnl.h>
#endif

#include <stdexcept>
#include <string>
#include <type_traits>

#include "eigenformer/tensor/shape.hpp"

namespace eigenformer::backend {

namespace detail {

#if defined(EIGENFORMER_BLAS_ONEDNN)
template <typename T>
inline constexpr bool onednn_gemm_enabled = std::is_same_v<T, float>;

// OpenMP's per-thread thread-count setting, found at run time in the OpenMP runtime libdnnl loads, so that
// neither users nor the build have to link it by name (a TBB or sequential oneDNN has none: nothing to set).
struct OpenMPThreadSetting {
  using Get = int (*)();
  using Set = void (*)(int);
  Get get = nullptr;
  Set set = nullptr;
  OpenMPThreadSetting()
      : get(reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"))),
        set(reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) {}
};

inline const OpenMPThreadSetting& openmp_thread_setting() {
  static const OpenMPThreadSetting s;
  return s;
}

// Row-major c (m, n) = alpha op(a) op(b) + beta c on the calling thread alone, op = transpose when asked
// (lda / ldb are the row strides of a and b as stored). With beta == 0, c is only written.
inline void onednn_sgemm(bool transpose_a, bool transpose_b, index_t m, index_t n, index_t k, float alpha,
                         const float* a, index_t lda, const float* b, index_t ldb, float beta, float* c,
                         index_t ldc) {
  const auto& omp = openmp_thread_setting();
  const int saved = omp.get && omp.set ? omp.get() : 1;
  if (omp.set && saved != 1) omp.set(1);
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda,
                                          b, ldb, beta, c, ldc);
  if (omp.set && saved != 1) omp.set(saved);
  if (status != dnnl_success)
    throw std::runtime_error("gemm: oneDNN's dnnl_sgemm failed (status " + std::to_string(int(status)) + ") on " +
                             std::to_string(m) + " x " + std::to_string(k) + " x " + std::to_string(n));
}
#else
template <typename T>
inline constexpr bool onednn_gemm_enabled = false;
#endif

}  // namespace detail
}  // namespace eigenformer::backend
