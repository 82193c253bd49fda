// <immintrin.h> for every eigenformer header that uses x86 intrinsics or Eigen (whose packet code includes it),
// included first through here. GCC 12 reports -Wuninitialized / -Wmaybe-uninitialized inside its own
// avx512fintrin.h, where _mm512_undefined_ps() initialises a variable with itself on purpose, wherever Eigen's
// AVX-512 packets are inlined: 177 warnings for one -march=native build of examples/gpt2.cpp, all false (GCC
// 13 no longer reports them). A GCC diagnostic region around the include silences them for that header's
// lines only; a program that includes <immintrin.h> before any eigenformer header still sees them.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif
