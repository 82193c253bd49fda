// Which vector instruction set the library's own kernels use, chosen when the program runs rather than by
// the flags it was compiled with (the packed float kernel, sgemm_kernel.hpp).
//
// Why at run time: a program compiled without -mavx2 / -march (what CMake's Release gives, and what a
// distribution builds) used to get Eigen's SSE2 products, 3-4x slower than the same code built with
// -march=native (README, "Compiler flags"), and one built with -march=native dies of an illegal instruction
// on an older CPU. With GCC or Clang on x86-64, the kernels are compiled once per instruction set inside
// regions that enable it (the EIGENFORMER_TARGET_* macros below; the rest of the program keeps its own
// flags), and the first product picks the widest set that the CPU and the operating system support. PyTorch
// (its ATen "CPU capability") and oneDNN do the same.
//
// EIGENFORMER_MAX_CPU_ISA=avx512|avx2|baseline caps the choice (as oneDNN's ONEDNN_MAX_CPU_ISA does): to
// compare the kernels, or to reproduce the bits another machine computes. "baseline" leaves float products
// to Eigen, as on a CPU without AVX2. backend::set_max_cpu_isa does the same from code.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>  // sysconf
#endif

// The kernels can be compiled for instruction sets beyond the translation unit's own flags (GCC and Clang
// on x86-64, which accept target regions); elsewhere only Eigen's code, for the compiler's flags.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EIGENFORMER_X86_KERNELS 1
#include "eigenformer/tensor/intrinsics.hpp"  // <immintrin.h>
// Code between a BEGIN and EIGENFORMER_TARGET_END is compiled for that instruction set, whatever the
// command line says. Only code that is called after cpu_isa() has chosen that set may live there.
#if defined(__clang__)
#define EIGENFORMER_TARGET_AVX2_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
#define EIGENFORMER_TARGET_AVX512_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx2,fma\"))), apply_to = function)")
#define EIGENFORMER_TARGET_END _Pragma("clang attribute pop")
#else
#define EIGENFORMER_TARGET_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define EIGENFORMER_TARGET_AVX512_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx2,fma\")")
#define EIGENFORMER_TARGET_END _Pragma("GCC pop_options")
#endif
#endif

namespace eigenformer::backend {

// Ordered: each level has every instruction of the ones before it.
enum class CpuIsa {
  baseline = 0,  // what the compiler's flags allow (on x86-64 without flags, SSE2): Eigen computes products
  avx2 = 1,      // AVX2 + FMA (Intel Haswell, AMD Zen and newer)
  avx512 = 2,    // AVX-512F + AVX2 + FMA (Intel Skylake-SP, AMD Zen 4 and newer)
};

inline const char* cpu_isa_name(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
    default:
      return "baseline";
  }
}

// The widest level this CPU and operating system support among those the kernels are compiled for.
// __builtin_cpu_supports asks the operating system too (XGETBV): AVX and AVX-512 instructions fault unless
// the OS has enabled saving their registers, which a CPU's feature bits alone do not tell.
inline CpuIsa detected_cpu_isa() noexcept {
#if defined(EIGENFORMER_X86_KERNELS)
  __builtin_cpu_init();  // may run before the runtime's own constructor, from a static initialiser
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return CpuIsa::baseline;
  if (__builtin_cpu_supports("avx512f")) return CpuIsa::avx512;
  return CpuIsa::avx2;
#else
  return CpuIsa::baseline;
#endif
}

namespace detail {

// The cap EIGENFORMER_MAX_CPU_ISA asks for (avx512 when unset); a value that names no level is ignored with
// one line on stderr, as the other settings are (environment.hpp).
inline CpuIsa environment_max_cpu_isa() {
  const char* text = std::getenv("EIGENFORMER_MAX_CPU_ISA");
  if (text == nullptr || *text == '\0') return CpuIsa::avx512;
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512})
    if (std::strcmp(text, cpu_isa_name(isa)) == 0) return isa;
  std::fprintf(
      stderr,
      "eigenformer: ignoring EIGENFORMER_MAX_CPU_ISA=\"%s\": expected avx512, avx2 or baseline; using the "
      "widest this CPU supports\n",
      text);
  return CpuIsa::avx512;
}

// -1 until the first use, then the level in use. An atomic rather than a function-local static so that
// set_max_cpu_isa can change it.
inline std::atomic<int>& cpu_isa_state() {
  static std::atomic<int> state{-1};
  return state;
}

inline CpuIsa capped(CpuIsa isa, CpuIsa cap) {
  return static_cast<int>(isa) < static_cast<int>(cap) ? isa : cap;
}

}  // namespace detail

// The level the kernels use: the detected one capped by EIGENFORMER_MAX_CPU_ISA (read once) or by the last
// set_max_cpu_isa.
inline CpuIsa cpu_isa() {
  auto& state = detail::cpu_isa_state();
  int isa = state.load(std::memory_order_relaxed);
  if (isa < 0) {
    const int chosen =
        static_cast<int>(detail::capped(detected_cpu_isa(), detail::environment_max_cpu_isa()));
    // Two first calls at once both compute the same value; the first to store it wins.
    state.compare_exchange_strong(isa, chosen, std::memory_order_relaxed);
    isa = state.load(std::memory_order_relaxed);
  }
  return static_cast<CpuIsa>(isa);
}

// Whether the CPU is Intel's (CPUID's vendor string), for the few layout rules that were measured to differ
// between Intel's and AMD's cores of the same cache geometry (backend.hpp's copies_rows_4k_apart).
inline bool cpu_is_intel() noexcept {
#if defined(EIGENFORMER_X86_KERNELS)
  static const bool intel = [] {
    __builtin_cpu_init();  // may run before the runtime's own constructor, from a static initialiser
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
#else
  return false;
#endif
}

// How many ways the L1 data cache has (12 on AMD Zen 5 and Intel's cores since Ice Lake, 8 on AMD Zen 3 and
// Intel Skylake), as glibc reads it from CPUID; 0 where the C library does not say.
inline int l1_data_ways() noexcept {
#if defined(_SC_LEVEL1_DCACHE_ASSOC)
  static const int ways = [] {
    const long w = sysconf(_SC_LEVEL1_DCACHE_ASSOC);
    return w > 0 && w < 256 ? static_cast<int>(w) : 0;
  }();
  return ways;
#else
  return 0;
#endif
}

// Caps the level for products that start after the call (never above what the CPU supports), and returns the
// level now in use. Weights packed earlier (PackedMatrix, pack_weights) keep the kernel that packed them.
// Meant for tests and comparisons: call it while no product is running.
inline CpuIsa set_max_cpu_isa(CpuIsa cap) {
  const CpuIsa isa = detail::capped(detected_cpu_isa(), cap);
  detail::cpu_isa_state().store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}

}  // namespace eigenformer::backend
