// The packed float kernel's code for one instruction set (sgemm_kernel.hpp explains the design and its bit
// contract). Not a header of its own: sgemm_kernel.hpp has for_each_isa.inl compile it inside namespace
// avx512 and inside namespace avx2, each within that set's target region, where SimdFloat is that set's
// register type and this_isa its name (simd.hpp). One text, two compilations, so the two cannot drift apart.
// No include guard, on purpose; no #include either: the including header has included what it uses.

#if !defined(EIGENFORMER_ISA_BODY)
#error "sgemm_kernel_isa.inl is included by sgemm_kernel.hpp only"
#endif

// The register block, sgemm_mr rows by sgemm_nr columns of c. AVX-512 (16 floats a register): 12 x 32
// accumulators take 24 of the 32 registers, leaving the two rows of b and a broadcast value room without
// spilling. AVX2 (8 floats a register): 6 x 16 accumulators take 12 of the 16.
inline constexpr int sgemm_mr = SimdFloat::width == 16 ? 12 : 6;
inline constexpr int sgemm_nr = 2 * SimdFloat::width;
static_assert(sgemm_mc % sgemm_mr == 0, "a block of a is whole panels");

// sgemm_packed copies a column-major a into panels when its columns lie 4 KiB apart or more (1024 floats: a
// weight gradient g^T x of a layer with 1024 or more outputs, whose g^T has a column per token, lda = the
// output count apart). Read in place, each of a panel's kc columns is then a page of its own: the register
// block's loads touch kc pages a pass, more than the L1 TLB holds, and the hardware prefetchers do not cross
// pages. At multiples of 4 KiB the columns also all fall in one set of the L1 cache (64 sets of 64 bytes),
// which holds 8-12 of them. Multiples first: 1024 x 256 x 2048 on 2 threads, with AVX2 on an AMD Zen 5 (GCC
// -march=znver3) 136-138 GFLOP/s in place against 172-183 copied (OpenBLAS's Haswell kernel 173-177); with
// AVX-512 on an Intel Xeon (Sapphire Rapids kind, 2 MB L2) the copy took 0.70x the time of reading in place
// (0.57x on 1 thread), about 0.89x (0.77x) that of reading in place with the prefetches below (bench/README.md,
// "fortieth session"), where on the Zen 5 it had been 2-5% slower than in place (361-364 against 370-381
// GFLOP/s, without them): one rule for both, for the larger gain. Then any stride from 4 KiB: GPT-2 small's
// weight gradients over 512 tokens on the Intel Xeon, 2 threads, copied against in place: the tied head's
// 50257 x 768 x 512 0.90x the time, the attention's 2304 x 768 x 512 0.87x (bench/README.md, "forty-sixth
// session"). Below 4 KiB the copy lost: 512 x 128 x 768 (2 KiB apart) took 1.09x the time copied.
inline constexpr index_t sgemm_copied_a_stride = 1024;
// And columns a multiple of 1 KiB apart from 2 KiB on, when the block has 8 column panels or more: such
// columns lie a multiple of 16 cache lines apart, so a panel's lines fall in at most 4 of the L1 cache's 64
// sets (2 at 2 KiB), which hold 48 lines on the Intel Xeon and 32 on an AMD Zen 3, against the 256 lines a
// panel reads over a k block; the panel then goes back to L2 for every column panel the block walks it
// against. Weight gradients of 768-output layers (g^T x, columns 3 KiB apart) on the Intel Xeon (Sapphire
// Rapids kind), copied against in place, bench/ab.py, 5-8 interleaved rounds: BERT-base's 768 x 3072 x 1024
// 0.93x the time on 2 threads and 0.89x on 1; its 768 x 768 x 1024 0.86x on 1 thread and 0.97x on 2, where
// each thread's tile has 384 columns (every round at or below 0.99); with AVX2 there 0.95x (768 x 3072 x 1024,
// 2 threads), 0.91x and 0.945x (768 x 768 x 1024, 1 and 2 threads). Whole training steps moved less than their
// rounds spread (BERT-base fine-tuning 1.01x, GPT-2 small 1.03x, rounds 0.96-1.06). With few column panels the
// copy is not paid back: the char GPT's 512 x 128 x 768 (2 KiB apart, 4 panels) took 1.12x the time copied.
// Columns 1 KiB apart (256 floats) stay in place: the tiny BERT's 256 x 1024 x 2048 and a 256 x 3072 x 1024
// took the same time either way (throwaway driver, 2 threads, within its runs' spread).
inline constexpr index_t sgemm_copied_a_min_cols = 256;
inline constexpr bool sgemm_copies_a(index_t lda, index_t cols) {
  return lda >= sgemm_copied_a_stride || (lda >= 512 && lda % 256 == 0 && cols >= sgemm_copied_a_min_cols);
}
// How many steps of k ahead the register block asks for the lines of a column-major a that it reads in
// place: each step's rows lie lda floats after the last step's, a stride the hardware prefetchers do not
// follow past a 4 KB page. 512 x 128 x 768 (columns 2 KB apart) on 2 threads on the Intel Xeon: 0.85x the
// time at 8 steps, 0.87x at 4 and 0.89x at 16; with AVX2 there, 0.87x at 8.
inline constexpr index_t sgemm_a_prefetch_steps = 8;

// Whether products ask for each register block's lines of c during its k loop whatever the size of their
// block of c, not only when it is larger than L2. With AVX-512 on an AMD Zen 5 (L2 1 MB a core), one thread's
// blocks of 1024 x 3072 x 768 with a packed weight (BERT-base b8's feed-forward, 216 x 1536 floats, 1.3 MB)
// left c's lines out of L2 between k blocks and the epilogue's loads missed: 14% of the kernel's samples lay
// outside its k loop, 9% with the lines asked for, and the product took 0.91x the time (bench/ab.py, 11
// interleaved rounds, each round 0.84-1.00x). On 2 threads the blocks (216 x 768) stay in L2 and the time
// did not change (1.01x), nor at 128 rows (0.95-1.06x, no sign). On an Intel Xeon (Sapphire Rapids kind, 2
// MB L2), with the hints spread over the loop (sgemm_register_block), products that pack b as they go gained
// too: 128 x 768 x 768 0.97x the time on 2 threads, 128 x 2304 x 768 0.98x, the char GPT's training step
// 0.93x and the seed classifier's 0.98x (5 interleaved rounds); without the hints, 768 x 512 x 128 with a
// packed weight took 1.08x even at k = 128, where c is only written. With AVX2, whose register block runs
// half as long, the change ranged 0.75-1.10x from round to round of a throwaway driver with no clear sign,
// so it asks only for blocks of c larger than L2: Intel's 2 MB per call, 512 KB with a packed weight (below).
inline constexpr bool sgemm_prefetches_c_always = sgemm_mr == 12;
// Where products with a packed weight start asking for c's lines without sgemm_prefetches_c_always: blocks of
// c above 2^17 floats, 512 KB, half the L2 of an AMD Zen 4 core and all of a Zen 3's. At 2^19 (the per-call
// products' bound, set on the Intel Xeon's 2 MB) GPT-2 small's tied LM head at 128 rows, 128 x 50257 x 768,
// ran its two threads' blocks of 128 x 3152 floats (1.6 MB) unasked on a Zen 4 held to AVX2 and reached 170
// GFLOP/s against 202 with the hints (throwaway driver linking both builds into one process, 6 alternating
// rounds, each link order: 0.84x the time both ways), while one thread, whose blocks are twice as wide and
// were asked for already, ran at 107. BERT-base b8's blocks (216 x 768) cross the new bound too and did not
// move (1024 x 3072 x 768 and 1024 x 768 x 3072: 0.98-1.02x); 2^16 against 2^17 at GPT-2's 512-row products,
// whose blocks (174 x 384) lie between the two, took 0.96-1.03x the time: faster at one shape, slower at
// another (bench/README.md, "fifty-third session").
inline constexpr index_t sgemm_packed_prefetches_c_above = index_t{1} << 17;

// Whether sgemm_packed walks a block of a and its packed panels of b row panel first: each register block's
// rows of a stay in L1 while the block's panels of b stream past from L2, asked for sgemm_rows_first_b_ahead
// floats (64 steps of k, 8 KB) ahead, instead of one panel of b staying in L1 while the block's row panels of
// a stream past (twelve rows in place, each its own stream). L1 then holds 12 KB of a instead of a 32 KB
// panel of b beside those streams, and b's one sequential stream is what the prefetch serves best. It pays
// where a's panel is reused more often than b's would be (more column panels than row panels in the block),
// over a whole k block. On the Intel Xeon (Sapphire Rapids kind, 2 MB L2), AVX-512, 2 threads, bench/ab.py
// (bench/README.md, "forty-seventh session"): BERT-base training's 1024-row products 0.94-0.99x the time
// (1024 x 3072 x 768 0.94-0.98x, sets of 4 and 8 rounds); GPT-2 small's weight gradients over 512 tokens,
// whose a is copied (sgemm_copies_a), 0.90x (the tied head's 50257 x 768 x 512) and 0.95-0.96x,
// BERT-base's over 1024 tokens 1.00x; a BERT-base fine-tuning step 0.95x (0.96x on 1 thread), GPT-2 small's
// 0.97x (0.93x). Off where it lost: k blocks of 128 (the char GPT's 768 x 512 x 128 1.02-1.04x, 768 x 384 x
// 128 1.07x); and below 256 rows, where it was not measured apart from noise. The packed-weight path
// (inference) keeps its order: walked row panel first there, BERT-base b8's forward gained less than its rounds
// spread and b1's lost (bench/README.md, "forty-second session"; again in the forty-eighth, 1.05x the time at
// 1024 x 3072 x 768). AVX2's 6 x 16 block was not measured this way, so it keeps the old order.
inline constexpr index_t sgemm_rows_first_min_rows = 256;
inline constexpr index_t sgemm_rows_first_b_ahead = 2048;
inline constexpr bool sgemm_walks_rows_first(index_t rows, index_t mc, index_t nc, index_t kc) {
  return sgemm_mr == 12 && rows >= sgemm_rows_first_min_rows && kc == sgemm_kc &&
         (nc + sgemm_nr - 1) / sgemm_nr > (mc + sgemm_mr - 1) / sgemm_mr;
}

// out[p * width + j] = src[j * ld + p] for j < count, p < kc, and zeros for count <= j < width: one panel
// whose lines (columns of a column-major b) lie along k in memory. Reading each line along k and writing it
// across the panel one float at a time cost ~1.4 ns a float; 4 x 4 blocks transposed in registers read and
// write whole vectors instead.
inline void sgemm_pack_transposed(const float* src, index_t ld, index_t count, index_t kc, index_t width, float* out) {
  index_t j0 = 0;
  for (; j0 + 8 <= count; j0 += 8) {
    const float* s = src + j0 * ld;
    index_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      // Register h (0..3) holds line h's k p..p+3 in its low half and line h+4's in its high half, and
      // register h+4 the same for k p+4..p+7: the loads do the cross-half step of the transpose, which
      // leaves two rounds of in-half shuffles (the shuffle port is what limits this loop).
      __m256 r[8];
      for (int h = 0; h < 4; ++h) {
        const float* lo = s + h * ld + p;
        const float* hi = s + (h + 4) * ld + p;
        r[h] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
        r[h + 4] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo + 4)), _mm_loadu_ps(hi + 4), 1);
      }
      float* d = out + p * width + j0;
      for (int g = 0; g < 8; g += 4) {
        const __m256 t0 = _mm256_unpacklo_ps(r[g], r[g + 1]), t1 = _mm256_unpackhi_ps(r[g], r[g + 1]);
        const __m256 t2 = _mm256_unpacklo_ps(r[g + 2], r[g + 3]), t3 = _mm256_unpackhi_ps(r[g + 2], r[g + 3]);
        _mm256_storeu_ps(d + (g + 0) * width, _mm256_shuffle_ps(t0, t2, 0x44));
        _mm256_storeu_ps(d + (g + 1) * width, _mm256_shuffle_ps(t0, t2, 0xEE));
        _mm256_storeu_ps(d + (g + 2) * width, _mm256_shuffle_ps(t1, t3, 0x44));
        _mm256_storeu_ps(d + (g + 3) * width, _mm256_shuffle_ps(t1, t3, 0xEE));
      }
    }
    for (; p < kc; ++p)
      for (int q = 0; q < 8; ++q) out[p * width + j0 + q] = s[q * ld + p];
  }
  for (; j0 + 4 <= count; j0 += 4) {
    const float* s0 = src + j0 * ld;
    const float *s1 = s0 + ld, *s2 = s1 + ld, *s3 = s2 + ld;
    index_t p = 0;
    for (; p + 4 <= kc; p += 4) {
      __m128 r0 = _mm_loadu_ps(s0 + p), r1 = _mm_loadu_ps(s1 + p), r2 = _mm_loadu_ps(s2 + p), r3 = _mm_loadu_ps(s3 + p);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      float* d = out + p * width + j0;
      _mm_storeu_ps(d, r0);
      _mm_storeu_ps(d + width, r1);
      _mm_storeu_ps(d + 2 * width, r2);
      _mm_storeu_ps(d + 3 * width, r3);
    }
    for (; p < kc; ++p) {
      float* d = out + p * width + j0;
      d[0] = s0[p], d[1] = s1[p], d[2] = s2[p], d[3] = s3[p];
    }
  }
  for (; j0 < count; ++j0)
    for (index_t p = 0; p < kc; ++p) out[p * width + j0] = src[j0 * ld + p];
  for (index_t j = count; j < width; ++j)
    for (index_t p = 0; p < kc; ++p) out[p * width + j] = 0.0f;
}

// Rows [0, mc) x k [0, kc) of a column-major a (column stride lda) into mr-row panels: panel r holds (p, i)
// at r * mr * kc + p * mr + i, rows past mc as zeros. a points at the block's first element. Row-major a is
// never packed: the register block reads it in place (APanel).
inline void sgemm_pack_a(const float* a, index_t lda, index_t mc, index_t kc, float* out) {
  // The whole panels: one fixed-size copy a panel and step, which the compiler turns into vector moves (the
  // loop over a variable row count stayed scalar and cost ~0.6 ns a float, a fifth of a weight gradient).
  // k outermost, so that each column of a is read once, front to back: panel by panel, every panel read
  // its kc columns lda apart again from L2, and the copy waited on those loads (85% of the packing's
  // samples, 15% of a 512 x 128 x 768 weight gradient on an AMD Zen 5).
  const index_t whole = mc / sgemm_mr;
  for (index_t p = 0; p < kc; ++p)
    for (index_t r = 0; r < whole; ++r)
      std::memcpy(out + r * sgemm_mr * kc + p * sgemm_mr, a + r * sgemm_mr + p * lda, sizeof(float) * sgemm_mr);
  const index_t r0 = whole * sgemm_mr, rows = mc - r0;
  if (rows == 0) return;
  out += whole * sgemm_mr * kc;
  for (index_t p = 0; p < kc; ++p) {
    const float* src = a + r0 + p * lda;
    float* dst = out + p * sgemm_mr;
    for (index_t i = 0; i < rows; ++i) dst[i] = src[i];
    for (index_t i = rows; i < sgemm_mr; ++i) dst[i] = 0.0f;
  }
}

// k [0, kc) x columns [0, nc) of b into nr-column panels: panel s holds (p, j) at s * nr * kc + p * nr + j,
// columns past nc as zeros.
inline void sgemm_pack_b(const float* b, bool b_col_major, index_t ldb, index_t kc, index_t nc, float* out) {
  for (index_t c0 = 0; c0 < nc; c0 += sgemm_nr, out += sgemm_nr * kc) {
    const index_t cols = std::min<index_t>(sgemm_nr, nc - c0);
    if (!b_col_major) {
      for (index_t p = 0; p < kc; ++p) {
        const float* src = b + p * ldb + c0;
        float* dst = out + p * sgemm_nr;
        if (cols == sgemm_nr) {
          std::memcpy(dst, src, sizeof(float) * sgemm_nr);
        } else {
          for (index_t j = 0; j < cols; ++j) dst[j] = src[j];
          for (index_t j = cols; j < sgemm_nr; ++j) dst[j] = 0.0f;
        }
      }
    } else {
      sgemm_pack_transposed(b + c0 * ldb, ldb, cols, kc, sgemm_nr, out);
    }
  }
}

// Where the register block reads its rows of a over kc steps of k. Rows of a row-major a in place
// (row_stride != 0: a(i, p) at data[i * row_stride + p]), or column by column (row_stride 0: a(i, p) at
// data[p * k_step + i]), which is a column-major a in place (k_step its column stride) or a panel packed by
// sgemm_pack_a (k_step sgemm_mr). Row-major activations are read in place: transposing them into panels cost
// 4% of BERT-base's batch-8 forward and, shared between threads, a wait for every thread before the
// products could start; on an AMD Zen 5 packed-weight products ran 3-19% faster on 2 threads without it
// (bench/README.md, "nineteenth session"). A column-major a (a weight gradient's g^T) already holds each
// step's rows side by side, so copying it into panels only cost time: 18% of a 512 x 128 x 768 weight
// gradient's samples on 2 threads; in place it takes 0.95 of the time on 2 threads and 0.91 on 1 (AMD Zen 5,
// bench/README.md, "twentieth session"). The exceptions: columns 4 KiB apart or more, and some closer ones
// (sgemm_copies_a).
struct APanel {
  const float* data;
  index_t row_stride;
  index_t k_step = sgemm_mr;
};

// The register block: c[0:rows, 0:cols] = beta c + alpha (a_panel b_panel) over kc, with beta == 0
// meaning c is only written (its old contents, NaN included, are ignored). Either way of reading a does
// the same arithmetic in the same order, so gives the same bits. kRows (rows <= kRows) is how many rows of a
// it reads and multiplies: sgemm_mr, or a third or two thirds of it for a matrix's last panel (see
// sgemm_kernel_rows). A packed panel still holds sgemm_mr rows a step; only the first kRows are read.
// bias (null for none; the last k block of a product with a bias epilogue) is added to each column's result
// as it is stored: the one rounded sum that a pass over c afterwards made, so the same bits, without reading c
// back. That pass had added a median 7% (-1% to 11% from minute to minute) to a 128 x 3072 x 768 product with
// a packed weight on 2 threads on an AMD Zen 4; folded in, nothing measurable (throwaway driver, medians of
// 300 calls, 4 alternating runs).
template <bool kAInPlace, int kRows = sgemm_mr>
inline void sgemm_register_block(index_t kc, APanel a_panel, const float* b, float* c, index_t ldc, index_t rows,
                                 index_t cols, float alpha, float beta, bool prefetch_c, const float* prefetch_b,
                                 index_t prefetch_lines, index_t prefetch_row_lines, index_t prefetch_row_stride,
                                 index_t b_ahead, const float* bias) {
  const float* a = a_panel.data;
  const index_t a_row_stride = a_panel.row_stride;
  using V = SimdFloat;
  constexpr int nv = sgemm_nr / V::width;
  typename V::reg acc[kRows][nv];
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < nv; ++v) acc[i][v] = V::zero();
  // The block of c is read and written after the k loop. When c is too large to stay in cache between k
  // blocks, asking for its lines during the loop hides their misses behind the multiply-adds (7% on a 1024 x
  // 3072 product with k = 768); when it is cached the hints only cost instructions, so the caller decides.
  // One line a step over the loop's first 2 * rows steps (each row's first and last line), not all of them
  // before it: on an Intel Xeon (Sapphire Rapids kind) that burst of 24 stalled on the core's miss buffers
  // (14% of a packed 1024 x 3072 x 768's samples lay outside the k loop, most on the hints and the spills
  // around them); spread, the packed product took 0.97x the time on 1 thread, 0.98x on 2, and 768 x 384 x
  // 128 0.93x on 2 (bench/ab.py, 4 interleaved rounds, every round at or below 1.00). The AVX2 block, whose
  // 12 hints come before half as many multiply-adds a step, keeps the burst: spread, its products took
  // 0.99-1.02x the time there (4 rounds, no clear sign).
  const index_t c_lines = prefetch_c && sgemm_mr == 12 ? 2 * rows : 0;
  if (prefetch_c && c_lines == 0) {
    for (index_t i = 0; i < rows; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + cols - 1), _MM_HINT_T0);
    }
  }
  // prefetch_lines cache lines from prefetch_b, one every `every` steps of k: spread out, they never fill
  // the core's miss buffers at once (a burst of 30-50 before the loop stalled on the prefetches themselves).
  // At most one a step: with more lines than steps (a block of one row panel) the rest are left to the caches.
  // One run of lines into L1, or with prefetch_row_lines > 0 that many lines of each row of a matrix whose rows
  // lie prefetch_row_stride floats apart, into L2 (sgemm_transposed_weight's next rows of b).
  const index_t every = prefetch_lines > 0 ? std::max<index_t>(1, kc / prefetch_lines) : kc + 1;
  index_t row_left = prefetch_row_lines;
  // With b_ahead > 0 the panels of b stream past (sgemm_walks_rows_first): each step asks for the two lines
  // that a step b_ahead floats later reads, which may lie in the next panel, where the block goes next, or
  // past the last one (prefetches never fault).
  // In place, rows 3q..3q+2 are read through row_base[q] and the stride (x86 addresses base + 4 or 8 times an
  // index), so that twelve rows take four pointers and no address arithmetic per row.
  constexpr int bases = (kRows + 2) / 3;
  const float* row_base[bases];
#pragma GCC unroll 4
  for (int q = 0; q < bases; ++q) row_base[q] = a + 3 * q * a_row_stride;
  if constexpr (sgemm_mr == 6) {
    // AVX2, where b_ahead and c_lines are always 0 (both are AVX-512's): the hint's bookkeeping once every
    // `every` steps, outside the loop that multiplies. Checked every step, it made GCC's loop 30 instructions
    // (27 operations once compare-and-branch pairs fuse) with two taken branches for 12 multiply-adds, which
    // two 256-bit units finish in 6 cycles, against a front end that issues 6 operations a cycle; apart, the
    // loop is 24 instructions (23 operations) with one. On an AMD Zen 4 held to AVX2 (GCC 12
    // -march=znver3, bench/README.md, "fifty-second session") BERT-base's packed products took 0.86-0.95x
    // the time, b1 and b8 forwards 0.91x; the AVX-512 loop, at a third of the front end's rate, is unchanged.
    // One step of k: row p of b's panel against kRows values of a, then on to step p + 1.
    auto step = [&]() __attribute__((always_inline)) {
      typename V::reg bv[nv];
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) bv[v] = V::load(b + v * V::width);
#pragma GCC unroll 16
      for (int i = 0; i < kRows; ++i) {
        const typename V::reg ai = V::set1(kAInPlace ? row_base[i / 3][(i % 3) * a_row_stride] : a[i]);
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) acc[i][v] = V::fmadd(ai, bv[v], acc[i][v]);
      }
      b += sgemm_nr;
      if constexpr (kAInPlace) {
#pragma GCC unroll 4
        for (int q = 0; q < bases; ++q) ++row_base[q];
      } else {
        // A packed panel (k_step sgemm_mr) gains nothing from these but lost nothing either (same Intel Xeon).
        const float* ahead = a + sgemm_a_prefetch_steps * a_panel.k_step;
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + kRows - 1), _MM_HINT_T0);
        a += a_panel.k_step;
      }
    };
    auto prefetch_next_b_line = [&]() {
      if (prefetch_row_lines == 0) _mm_prefetch(reinterpret_cast<const char*>(prefetch_b), _MM_HINT_T0);
      else _mm_prefetch(reinterpret_cast<const char*>(prefetch_b), _MM_HINT_T1);
      prefetch_b += 16;
      if (prefetch_row_lines > 0 && --row_left == 0) {  // on to the next row's first line
        prefetch_b += prefetch_row_stride - 16 * prefetch_row_lines;
        row_left = prefetch_row_lines;
      }
      --prefetch_lines;
    };
    for (index_t p = 0; p < kc;) {
      const index_t end = prefetch_lines > 0 ? std::min(kc, p + every) : kc;
      if (prefetch_lines > 0) prefetch_next_b_line();
      for (; p < end; ++p) step();
    }
  } else {
    // The AVX-512 loop as measured before the AVX2 one moved out: with its step as a lambda, GCC laid the
    // bookkeeping out differently (same instructions in the multiply-adds, not the same code around them).
    index_t until_prefetch = every;
    for (index_t p = 0; p < kc; ++p, b += sgemm_nr) {
      if (b_ahead > 0) {
#pragma GCC unroll 2
        for (int line = 0; line < sgemm_nr / 16; ++line)
          _mm_prefetch(reinterpret_cast<const char*>(b + b_ahead + 16 * line), _MM_HINT_T0);
      }
      if (p < c_lines)
        _mm_prefetch(reinterpret_cast<const char*>(c + (p >> 1) * ldc + ((p & 1) ? cols - 1 : 0)), _MM_HINT_T0);
      if (--until_prefetch == 0) {
        until_prefetch = every;
        if (prefetch_lines > 0) {
          if (prefetch_row_lines == 0) _mm_prefetch(reinterpret_cast<const char*>(prefetch_b), _MM_HINT_T0);
          else _mm_prefetch(reinterpret_cast<const char*>(prefetch_b), _MM_HINT_T1);
          prefetch_b += 16;
          if (prefetch_row_lines > 0 && --row_left == 0) {  // on to the next row's first line
            prefetch_b += prefetch_row_stride - 16 * prefetch_row_lines;
            row_left = prefetch_row_lines;
          }
          --prefetch_lines;
        }
      }
      typename V::reg bv[nv];
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) bv[v] = V::load(b + v * V::width);
#pragma GCC unroll 16
      for (int i = 0; i < kRows; ++i) {
        const typename V::reg ai = V::set1(kAInPlace ? row_base[i / 3][(i % 3) * a_row_stride] : a[i]);
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) acc[i][v] = V::fmadd(ai, bv[v], acc[i][v]);
      }
      if constexpr (kAInPlace) {
#pragma GCC unroll 4
        for (int q = 0; q < bases; ++q) ++row_base[q];
      } else {
        // A packed panel (k_step sgemm_mr) gains nothing from these but lost nothing either (same Intel Xeon).
        const float* ahead = a + sgemm_a_prefetch_steps * a_panel.k_step;
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + kRows - 1), _MM_HINT_T0);
        a += a_panel.k_step;
      }
    }
  }
  const typename V::reg va = V::set1(alpha), vb = V::set1(beta);
  // Constant bounds, fully unrolled, so that acc is indexed by constants only and stays in registers.
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) {
    if (i >= rows) break;
    float* row = c + i * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < nv; ++v) {
      const index_t left = cols - v * V::width;
      if (left <= 0) break;
      // Both products rounded before their sum (V::rounded): GCC at -O2 would fuse one of them with the add,
      // and not always the same one for both instruction sets or for full and partial registers.
      const typename V::reg t = V::rounded(V::mul(va, acc[i][v]));
      float* dst = row + v * V::width;
      if (left >= V::width) {
        const typename V::reg sum = beta == 0.0f ? t : V::add(V::rounded(V::mul(vb, V::load(dst))), t);
        V::store(dst, bias ? V::add(sum, V::load(bias + v * V::width)) : sum);
      } else {
        const int n = static_cast<int>(left);
        const typename V::reg sum =
            beta == 0.0f ? t : V::add(V::rounded(V::mul(vb, V::load_first(dst, n))), t);
        V::store_first(dst, bias ? V::add(sum, V::load_first(bias + v * V::width, n)) : sum, n);
      }
    }
  }
}

// The rows a register block for `rows` rows of c multiplies: sgemm_mr, or a third or two thirds of it. A
// matrix's last panel is often short (128 rows are ten panels of twelve and one of eight); multiplying its
// zero rows as well cost 3% of every 128-row product.
inline constexpr int sgemm_kernel_rows(index_t rows) {
  return rows > 2 * sgemm_mr / 3 ? sgemm_mr : rows > sgemm_mr / 3 ? 2 * sgemm_mr / 3 : sgemm_mr / 3;
}

// The register block for `rows` rows of c (at most sgemm_mr): a read row by row (a.row_stride != 0) or column
// by column, and as few rows of a multiplied as sgemm_kernel_rows allows.
inline void sgemm_micro_kernel(index_t kc, APanel a, const float* b, float* c, index_t ldc, index_t rows, index_t cols,
                               float alpha, float beta, bool prefetch_c = false, const float* prefetch_b = nullptr,
                               index_t prefetch_lines = 0, index_t prefetch_row_lines = 0,
                               index_t prefetch_row_stride = 0, index_t b_ahead = 0,
                               const float* bias = nullptr) {
  auto run = [&]<bool kInPlace>() {
    switch (sgemm_kernel_rows(rows)) {
      case sgemm_mr / 3:
        return sgemm_register_block<kInPlace, sgemm_mr / 3>(kc, a, b, c, ldc, rows, cols, alpha, beta, prefetch_c,
                                                            prefetch_b, prefetch_lines, prefetch_row_lines,
                                                            prefetch_row_stride, b_ahead, bias);
      case 2 * sgemm_mr / 3:
        return sgemm_register_block<kInPlace, 2 * sgemm_mr / 3>(kc, a, b, c, ldc, rows, cols, alpha, beta, prefetch_c,
                                                                prefetch_b, prefetch_lines, prefetch_row_lines,
                                                                prefetch_row_stride, b_ahead, bias);
      default:
        return sgemm_register_block<kInPlace>(kc, a, b, c, ldc, rows, cols, alpha, beta, prefetch_c, prefetch_b,
                                              prefetch_lines, prefetch_row_lines, prefetch_row_stride, b_ahead,
                                              bias);
    }
  };
  if (a.row_stride != 0) run.template operator()<true>();
  else run.template operator()<false>();
}

// The register blocks' view of rows [i0, i1) (at most sgemm_mr) of a over k [p, p + kc), a row- or
// column-major with stride lda: in place when the register block for that many rows reads exactly them
// (sgemm_kernel_rows, always so for a whole panel); other counts, a matrix's short last panel, are copied into
// edge (sgemm_mr * kc floats) with zero rows after them up to the rows the register block reads. Callers copy
// that panel once a k block, not once for every panel of b.
inline APanel sgemm_a_panel(bool a_col_major, const float* a, index_t lda, index_t i0, index_t i1, index_t p,
                            index_t kc, float* edge) {
  const index_t rows = i1 - i0;
  if (rows == sgemm_kernel_rows(rows))
    return a_col_major ? APanel{a + i0 + p * lda, 0, lda} : APanel{a + i0 * lda + p, lda};
  if (a_col_major) {
    sgemm_pack_a(a + i0 + p * lda, lda, rows, kc, edge);
    return {edge, 0};
  }
  for (index_t i = 0; i < sgemm_kernel_rows(rows); ++i) {
    if (i < rows) std::memcpy(edge + i * kc, a + (i0 + i) * lda + p, sizeof(float) * static_cast<std::size_t>(kc));
    else std::memset(edge + i * kc, 0, sizeof(float) * static_cast<std::size_t>(kc));
  }
  return {edge, kc};
}

// c[m * ldc + i] = tile[i * ld + m] for i < tile_rows (at most sgemm_mr), m < cols; ld is a multiple of 16 and
// the tile's rows are readable up to it. With AVX-512, 16 columns at a time go through a 16 x 16 transpose in
// registers and leave as masked stores, a row of c each: copied one float at a time, this took 2-10% of a
// 128-row product (10% at k = 256 on one thread: 144 GFLOP/s against 160 in registers).
template <class V = SimdFloat>
inline void sgemm_store_transposed_tile(const float* tile, index_t ld, index_t tile_rows, index_t cols, float* c,
                                        index_t ldc) {
  if constexpr (V::width == 16) {
    const __mmask16 mask = static_cast<__mmask16>((1u << tile_rows) - 1);
    for (index_t m0 = 0; m0 < cols; m0 += 16) {
      __m512 r[16], t[16];
      for (int i = 0; i < 16; ++i) r[i] = i < tile_rows ? _mm512_load_ps(tile + i * ld + m0) : _mm512_setzero_ps();
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      // After this loop r[4g + j]'s 128-bit lane L holds rows 4g..4g+3 of column 4L + j.
      for (int g = 0; g < 16; g += 4) {
        r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
      }
      for (int j = 0; j < 4; ++j) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
      }
      const index_t count = std::min<index_t>(16, cols - m0);
      for (int j = 0; j < 4; ++j) {
        // Columns j, 4 + j, 8 + j and 12 + j of the tile, all 16 rows each.
        const __m512 column[4] = {
            _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88), _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88),
            _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD), _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xDD)};
        for (int q = 0; q < 4; ++q)
          if (4 * q + j < count) _mm512_mask_storeu_ps(c + (m0 + 4 * q + j) * ldc, mask, column[q]);
      }
    }
  } else {
    for (index_t m = 0; m < cols; ++m)
      for (index_t i = 0; i < tile_rows; ++i) c[m * ldc + i] = tile[i * ld + m];
  }
}

// sgemm_packed's path for a row-major a of few rows times a transposed b (sgemm_transposes_weight): c^T =
// b^T a^T, the operands' roles swapped, so that the register block reads b's rows in place as its rows of a
// and only a, the small operand, is copied into panels, once. Packing b instead sends the whole weight
// through the transposed copy on every call: 18% of a 128 x 3072 x 768 product's samples, at ~0.3 ns a float
// (read from L3 at ~11 GB/s). Each element still gets one chain of multiply-adds a k block, k ascending, from
// zero (the same products: multiplication commutes exactly) and the same epilogue, so the bits of
// sgemm_packed's other path. The k blocks' epilogues run on a tile of c^T (sgemm_mr columns of c, all its
// rows; c read into it first when beta != 0), written into c once its k blocks are done.
inline void sgemm_transposed_weight(index_t rows, index_t cols, index_t k, float alpha, const float* a, index_t lda,
                                    const float* b, index_t ldb, float beta, float* c, index_t ldc) {
  static thread_local SgemmScratch a_scratch, tile_scratch, edge_scratch;
  const index_t padded_rows = (rows + sgemm_nr - 1) / sgemm_nr * sgemm_nr;
  float* at = a_scratch.get(static_cast<std::size_t>(padded_rows * k));
  float* tile = tile_scratch.get(static_cast<std::size_t>(sgemm_mr * padded_rows));
  float* edge = edge_scratch.get(static_cast<std::size_t>(sgemm_mr * std::min<index_t>(sgemm_kc, k)));
  // a^T in panels of sgemm_nr of a's rows, k block after k block, as packed_panel_offset lays out a weight.
  for (index_t pc = 0; pc < k; pc += sgemm_kc) {
    const index_t kc = std::min<index_t>(sgemm_kc, k - pc);
    for (index_t m0 = 0; m0 < rows; m0 += sgemm_nr)
      sgemm_pack_transposed(a + m0 * lda + pc, lda, std::min<index_t>(sgemm_nr, rows - m0), kc, sgemm_nr,
                            at + packed_panel_offset(pc, m0, kc, padded_rows));
  }
  for (index_t j0 = 0; j0 < cols; j0 += sgemm_mr) {
    const index_t tile_rows = std::min<index_t>(sgemm_mr, cols - j0);
    if (beta != 0.0f)
      for (index_t i = 0; i < tile_rows; ++i)
        for (index_t m = 0; m < rows; ++m) tile[i * padded_rows + m] = c[m * ldc + j0 + i];
    for (index_t pc = 0; pc < k; pc += sgemm_kc) {
      const index_t kc = std::min<index_t>(sgemm_kc, k - pc);
      const APanel b_rows = sgemm_a_panel(false, b, ldb, j0, j0 + tile_rows, pc, kc, edge);
      // The next 12 rows of b, this k block's part of each, asked for into L2 a few rows a call: in a model's
      // forward each weight comes from memory once, and a row panel's 12 short streams, 16 lines a k block, are
      // too short for the hardware prefetchers to run ahead of. BERT-base's forward b1 with unpacked weights:
      // 0.93-0.96x the time on 2 threads (0.92x on 1) against packing b, where without these hints the swap
      // had taken 1.01-1.04x; a product whose weight stays in L3 from call to call (bench_gemm) pays 1.02-1.09x
      // for the hints.
      const index_t next_rows = std::clamp<index_t>(cols - j0 - sgemm_mr, 0, sgemm_mr);
      const index_t row_lines = (kc + 15) / 16, calls = (rows + sgemm_nr - 1) / sgemm_nr;
      index_t q = 0;
      for (index_t m0 = 0; m0 < rows; m0 += sgemm_nr, ++q) {
        const index_t first = q * next_rows / calls, last = (q + 1) * next_rows / calls;
        const float* ahead = last > first ? b + (j0 + sgemm_mr + first) * ldb + pc : nullptr;
        sgemm_micro_kernel(kc, b_rows, at + packed_panel_offset(pc, m0, kc, padded_rows), tile + m0, padded_rows,
                           tile_rows, std::min<index_t>(sgemm_nr, rows - m0), alpha, pc == 0 ? beta : 1.0f, false,
                           ahead, (last - first) * row_lines, row_lines, ldb);
      }
    }
    sgemm_store_transposed_tile(tile, padded_rows, tile_rows, rows, c + j0, ldc);
  }
}

// c (rows x cols, row stride ldc) = beta c + alpha op(a) op(b), a rows x k and b k x cols, each stored row-
// or column-major with the given row (column) stride; on the calling thread. Each k block of b's column block
// is packed and the register blocks walk it, reading a in place (only a short last panel of a is copied);
// few rows of a times a transposed b swap the operands instead (sgemm_transposed_weight).
// Products with a packed weight (a PackedMatrix) take sgemm_both_packed_block instead, which feeds
// the register block the same panels in the same order, hence the same bits.
inline void sgemm_packed(bool a_col_major, bool b_col_major, index_t rows, index_t cols, index_t k, float alpha,
                         const float* a, index_t lda, const float* b, index_t ldb, float beta, float* c,
                         index_t ldc) {
  if (sgemm_transposes_weight(this_isa, a_col_major, b_col_major, rows, cols, k))
    return sgemm_transposed_weight(rows, cols, k, alpha, a, lda, b, ldb, beta, c, ldc);
  static thread_local SgemmScratch a_scratch, b_scratch;
  const index_t nc_max = std::min<index_t>(sgemm_nc, (cols + sgemm_nr - 1) / sgemm_nr * sgemm_nr);
  const index_t kc_max = std::min<index_t>(sgemm_kc, k);
  const bool copy_a = a_col_major && sgemm_copies_a(lda, cols);
  // The copy of a's block when copy_a, else room for a short last panel.
  float* a_buffer = a_scratch.get(static_cast<std::size_t>((copy_a ? sgemm_mc : sgemm_mr) * kc_max));
  float* bp = b_scratch.get(static_cast<std::size_t>(nc_max * kc_max));
  // Above ~2 MB (the L2 a core of the Intel Xeon where this was measured) the output no longer stays cached
  // from one k block to the next; below it, sgemm_prefetches_c_always.
  const bool prefetch_c = sgemm_prefetches_c_always || rows * cols > (index_t{1} << 19);
  auto b_at = [&](index_t p, index_t j) { return b_col_major ? b + p + j * ldb : b + p * ldb + j; };
  for (index_t jc = 0; jc < cols; jc += sgemm_nc) {
    const index_t nc = std::min<index_t>(sgemm_nc, cols - jc);
    for (index_t pc = 0; pc < k; pc += sgemm_kc) {
      const index_t kc = std::min<index_t>(sgemm_kc, k - pc);
      const float block_beta = pc == 0 ? beta : 1.0f;
      sgemm_pack_b(b_at(pc, jc), b_col_major, ldb, kc, nc, bp);
      for (index_t ic = 0; ic < rows; ic += sgemm_mc) {
        const index_t mc = std::min<index_t>(sgemm_mc, rows - ic);
        const index_t whole = mc / sgemm_mr * sgemm_mr;
        if (copy_a) sgemm_pack_a(a + ic + pc * lda, lda, mc, kc, a_buffer);
        const APanel edge_panel = whole < mc && !copy_a
                                      ? sgemm_a_panel(a_col_major, a, lda, ic + whole, ic + mc, pc, kc, a_buffer)
                                      : APanel{};
        auto a_panel = [&](index_t ir) {
          if (copy_a) return APanel{a_buffer + ir * kc, 0};
          return ir < whole ? sgemm_a_panel(a_col_major, a, lda, ic + ir, ic + ir + sgemm_mr, pc, kc, nullptr)
                            : edge_panel;
        };
        // The register block at row panel ir and column panel jr of this block; b_ahead as the walk needs it.
        auto register_block = [&](const APanel& panel, index_t ir, index_t jr, index_t b_ahead) {
          sgemm_micro_kernel(kc, panel, bp + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc,
                             std::min<index_t>(sgemm_mr, mc - ir), std::min<index_t>(sgemm_nr, nc - jr), alpha,
                             block_beta, prefetch_c, nullptr, 0, 0, 0, b_ahead);
        };
        if (sgemm_walks_rows_first(rows, mc, nc, kc)) {
          for (index_t ir = 0; ir < mc; ir += sgemm_mr) {
            const APanel panel = a_panel(ir);
            for (index_t jr = 0; jr < nc; jr += sgemm_nr) register_block(panel, ir, jr, sgemm_rows_first_b_ahead);
          }
        } else {
          for (index_t jr = 0; jr < nc; jr += sgemm_nr)
            for (index_t ir = 0; ir < mc; ir += sgemm_mr) register_block(a_panel(ir), ir, jr, 0);
        }
      }
    }
  }
}


// c rows [r0, r1) x columns [c0, c1) (c points at element (0, 0), row stride ldc) = beta c + alpha a b with b
// packed beforehand (a PackedMatrix's data, laid out as packed_panel_offset says, in sgemm_pack_b's panel
// order over all columns) and a row- or column-major (stride lda), read in place. r0 and c0 start whole
// panels. The same register blocks over the same panels as sgemm_packed, so the same bits; with bias (not
// null), bias[j] added to column j as the last k block is stored. With `ahead` (not null), the register
// blocks ask for its lines, each run spread over its share of them, instead of each next panel of b: a caller
// that fills the panels itself just before (bfloat16 weights widened into them, tensor/bf16.hpp) names the
// memory it reads next, whose misses then overlap with the multiply-adds.
inline void sgemm_both_packed_block(index_t k, float alpha, bool a_col_major, const float* a, index_t lda,
                                    const float* packed_b, index_t padded_cols, index_t r0, index_t r1, index_t c0,
                                    index_t c1, float beta, float* c, index_t ldc, const float* bias,
                                    const PrefetchRuns* ahead) {
  static thread_local SgemmScratch edge_scratch;
  const bool prefetch_c = sgemm_prefetches_c_always || (r1 - r0) * (c1 - c0) > sgemm_packed_prefetches_c_above;
  const index_t whole = r0 + (r1 - r0) / sgemm_mr * sgemm_mr;
  float* edge = whole < r1 ? edge_scratch.get(static_cast<std::size_t>(sgemm_mr * sgemm_kc)) : nullptr;
  const index_t row_panels = (r1 - r0 + sgemm_mr - 1) / sgemm_mr;
  const index_t blocks = ((k + sgemm_kc - 1) / sgemm_kc) * ((c1 - c0 + sgemm_nr - 1) / sgemm_nr) * row_panels;
  index_t block = 0;  // register blocks run so far, for ahead's share of each
  for (index_t pc = 0; pc < k; pc += sgemm_kc) {
    const index_t kc = std::min<index_t>(sgemm_kc, k - pc);
    const float block_beta = pc == 0 ? beta : 1.0f;
    const bool last_block = pc + kc >= k;
    const float* bp = packed_b + packed_panel_offset(pc, 0, kc, padded_cols);
    const APanel edge_panel = edge ? sgemm_a_panel(a_col_major, a, lda, whole, r1, pc, kc, edge) : APanel{};
    auto a_panel = [&](index_t ir) {
      return ir < whole ? sgemm_a_panel(a_col_major, a, lda, ir, ir + sgemm_mr, pc, kc, nullptr) : edge_panel;
    };
    for (index_t jr = c0; jr < c1; jr += sgemm_nr) {
      // The next panel of b (this k block's next column panel, else the next k block's first), a slice of it
      // prefetched by each register block: it comes from memory or L3 while this one is read from L1, instead
      // of stalling the first register block that reads it. BERT-base packed forwards, interleaved A/B on an
      // AMD Zen 5: 0.96-0.98x the time on 1 thread with the slices issued in a burst before each register
      // block; spread out within it (the micro-kernel's prefetch_b) 0.93-0.97x that again at batch 1 on 2
      // threads, where the bursts had stalled on the prefetches themselves (3.8% of the samples).
      const float* next = nullptr;
      index_t next_lines = 0;
      if (jr + sgemm_nr < c1) {
        next = bp + (jr + sgemm_nr) * kc;
        next_lines = sgemm_nr * kc / 16;
      } else if (pc + sgemm_kc < k) {
        const index_t next_kc = std::min<index_t>(sgemm_kc, k - pc - sgemm_kc);
        next = packed_b + packed_panel_offset(pc + sgemm_kc, c0, next_kc, padded_cols);
        next_lines = sgemm_nr * next_kc / 16;
      }
      index_t q = 0;
      for (index_t ir = r0; ir < r1; ir += sgemm_mr, ++q, ++block) {
        index_t first = q * next_lines / row_panels, last = (q + 1) * next_lines / row_panels;
        const float* lines = next ? next + first * 16 : nullptr;
        if (ahead != nullptr && ahead->count > 0) {  // run r takes register blocks [r B / R, (r + 1) B / R)
          const index_t runs = ahead->count, r = block * runs / blocks;
          const index_t b0 = (r * blocks + runs - 1) / runs, b1 = ((r + 1) * blocks + runs - 1) / runs;
          first = (block - b0) * ahead->lines[r] / (b1 - b0), last = (block - b0 + 1) * ahead->lines[r] / (b1 - b0);
          lines = reinterpret_cast<const float*>(ahead->start[r] + first * 64);  // 64 bytes a line
        }
        sgemm_micro_kernel(kc, a_panel(ir), bp + jr * kc, c + ir * ldc + jr, ldc, std::min<index_t>(sgemm_mr, r1 - ir),
                           std::min<index_t>(sgemm_nr, c1 - jr), alpha, block_beta, prefetch_c, lines,
                           last - first, 0, 0, 0, last_block && bias ? bias + jr : nullptr);
      }
    }
  }
}

// c rows [0, rows) x columns [c0, c1) = a b for rows <= sgemm_few_rows (a decoding step's few rows), with b
// packed beforehand as for sgemm_both_packed_block and a row-major (row stride lda); c0 starts a whole panel.
// Each element goes through the operations sgemm_register_block gives it -- per k block a chain of
// multiply-adds from 0, k ascending, the blocks' sums then added in order -- so the rows have the bits they
// have in a product of many rows; but each panel of b is read once for all the rows (the register block
// would run 4 rows, the others zero), and a thread's panels of a k block lie one after another in memory.
template <int kRows>
inline void sgemm_few_rows_block(index_t k, const float* a, index_t lda, const float* packed_b, index_t padded_cols,
                                 index_t c0, index_t c1, float* c, index_t ldc) {
  using V = SimdFloat;
  constexpr int nv = sgemm_nr / V::width;
  // b's lines asked for 4 KB ahead of the one read: one row a step leaves the memory stream exposed (one
  // 768 x 3072 weight on 2 threads, AMD Zen 5, throwaway driver, five interleaved rounds: 1.18x the float
  // decoding kernel's time without, 1.10x at 2 or 4 KB). Past the end of a thread's panels it fetches
  // lines another thread or the next k block reads; prefetches never fault.
  constexpr index_t ahead = 1024;
  for (index_t pc = 0; pc < k; pc += sgemm_kc) {
    const index_t kc = std::min<index_t>(sgemm_kc, k - pc);
    const float* b = packed_b + packed_panel_offset(pc, c0, kc, padded_cols);
    for (index_t j = c0; j < c1; j += sgemm_nr) {
      typename V::reg acc[kRows][nv];
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) acc[i][v] = V::zero();
      const float* ak = a + pc;
      for (index_t p = 0; p < kc; ++p, b += sgemm_nr, ++ak) {
        _mm_prefetch(reinterpret_cast<const char*>(b + ahead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b + ahead + 16), _MM_HINT_T0);
        typename V::reg bv[nv];
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) bv[v] = V::load(b + v * V::width);
#pragma GCC unroll 4
        for (int i = 0; i < kRows; ++i) {
          const typename V::reg ai = V::set1(ak[i * lda]);
#pragma GCC unroll 4
          for (int v = 0; v < nv; ++v) acc[i][v] = V::fmadd(ai, bv[v], acc[i][v]);
        }
      }
      const index_t cols = std::min<index_t>(sgemm_nr, c1 - j);
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i) {
        float* row = c + i * ldc + j;
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) {
          const index_t left = cols - v * V::width;
          if (left <= 0) break;
          float* dst = row + v * V::width;
          if (left >= V::width) {
            V::store(dst, pc == 0 ? acc[i][v] : V::add(V::load(dst), acc[i][v]));
          } else {
            const int n = static_cast<int>(left);
            V::store_first(dst, pc == 0 ? acc[i][v] : V::add(V::load_first(dst, n), acc[i][v]), n);
          }
        }
      }
    }
  }
}

inline void sgemm_few_rows(index_t k, const float* a, index_t lda, index_t rows, const float* packed_b,
                           index_t padded_cols, index_t c0, index_t c1, float* c, index_t ldc) {
  switch (rows) {
    case 1: return sgemm_few_rows_block<1>(k, a, lda, packed_b, padded_cols, c0, c1, c, ldc);
    case 2: return sgemm_few_rows_block<2>(k, a, lda, packed_b, padded_cols, c0, c1, c, ldc);
    case 3: return sgemm_few_rows_block<3>(k, a, lda, packed_b, padded_cols, c0, c1, c, ldc);
    default: return sgemm_few_rows_block<4>(k, a, lda, packed_b, padded_cols, c0, c1, c, ldc);
  }
}

// This instruction set's entry in the table that backend::gemm and PackedMatrix call through.
inline constexpr SgemmKernel sgemm_kernel_entry{this_isa, sgemm_mr, sgemm_nr, &sgemm_packed, &sgemm_pack_b,
                                                &sgemm_both_packed_block, &sgemm_few_rows};
