// The few-row product kernels for one instruction set (gemv.hpp explains them and their bits). Not a header
// of its own: gemv.hpp compiles it three times, inside namespaces avx512 and avx2 (for_each_isa.inl: each
// within that set's target region, with EIGENFORMER_GEMV_VECTOR 1 and GemvSimd that set's registers) and
// inside namespace portable (EIGENFORMER_GEMV_VECTOR 0: plain loops the compiler vectorises as the build's
// flags allow). No include guard, on purpose; no #include either: gemv.hpp has included what it uses.
#if !defined(EIGENFORMER_ISA_BODY) || !defined(EIGENFORMER_GEMV_VECTOR)
#error "gemv_isa.inl is included by gemv.hpp only"
#endif

// One multiply-add of the scalar paths: fused where the vector paths are, so that a column computed in a
// scalar tail gets the bits it would have had in a vector block.
inline float gemv_fma(float a, float b, float c) noexcept {
#if EIGENFORMER_GEMV_VECTOR
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

#if EIGENFORMER_GEMV_VECTOR
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

// Row-major b, columns [j0, j0 + cols), cols <= gemv_block_cols<M>: acc[i * gemv_block_cols<M> + j - j0] =
// the sum. k advances four rows at a time, each running sum taking the four terms in order while it sits in
// a register: one load and store of the sums per four rows of b instead of per row.
template <int M, class W>
void gemv_rows(index_t k, const float* a, index_t lda, const W* b, index_t ld, index_t j0, index_t cols,
               float* acc) {
  constexpr index_t S = gemv_block_cols<M>;
  std::fill(acc, acc + M * S, 0.0f);
  index_t p = 0;
#if EIGENFORMER_GEMV_VECTOR
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
      float t[2 * w] = {};  // zeroed only so that GCC 12 -O3 does not think the copy might leave it unset
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
#if EIGENFORMER_GEMV_VECTOR
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
#if EIGENFORMER_GEMV_VECTOR
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
          gemv_prefetch<true>(col[q] + p, ahead);
          V::load_pairs(col[q] + p, even[q], odd[q]);
        }
        for (int i = 0; i < M; ++i) {
          reg xe, xo;
          V::split_pairs(a + i * lda + p, xe, xo);
          for (int q = 0; q < 4; ++q) s[i][q] = V::fmadd(xo, odd[q], V::fmadd(xe, even[q], s[i][q]));
        }
      }
    auto step = [&](index_t p) __attribute__((always_inline)) {
      const reg w0 = V::load(col[0] + p), w1 = V::load(col[1] + p), w2 = V::load(col[2] + p), w3 = V::load(col[3] + p);
      for (int i = 0; i < M; ++i) {
        const reg x = V::load(a + i * lda + p);
        s[i][0] = V::fmadd(x, w0, s[i][0]);
        s[i][1] = V::fmadd(x, w1, s[i][1]);
        s[i][2] = V::fmadd(x, w2, s[i][2]);
        s[i][3] = V::fmadd(x, w3, s[i][3]);
      }
    };
    index_t p = pair_k;
    // AVX2: a step reads half of each column's cache line, so two steps a hint for it (gemv_prefetch).
    if constexpr (L == 8)
      for (; p + 2 * L <= full; p += 2 * L) {
        for (int q = 0; q < 4; ++q) gemv_prefetch<true>(col[q] + p, ahead);
        step(p);
        step(p + L);
      }
    for (; p < full; p += L) {
      for (int q = 0; q < 4; ++q) gemv_prefetch<true>(col[q] + p, ahead);
      step(p);
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

// This instruction set's entry in the table that backend::gemv_product calls through.
inline constexpr GemvKernel gemv_kernel_entry{this_isa, &gemv_columns<float>, &gemv_columns<std::uint16_t>};
