// A float weight matrix stored once in the order the packed kernel reads it (sgemm_kernel.hpp), for
// inference. Every product of the packed kernel copies the panels of its right operand into that order
// first; for a layer's weight, which is the same matrix on every call, the copy is work repeated on every
// forward (the transposing copy of nn.Linear's (out, in) weight was ~15% of BERT-base's forward at batch 1
// on an AMD Zen 5). Packed once, the products read the panels straight from memory.
//
// How a model uses it (nn::Linear / nn::Conv1D::pack_weights, the models' pack_weights):
//   - the layer keeps its float weight, which everything else reads (products of a few rows, training, the
//     state dict), and a PackedMatrix beside it: about the weight's size again in memory;
//   - the products that the packed kernel takes (8 rows or more) read the packed copy, with the same bits as
//     from the float weight (the register block sees the same panels in the same order);
//   - the copy is a snapshot: after the weight changes (an optimiser step, load_state_dict), pack_weights()
//     again. A product that finds the weight no longer matching its copy throws instead of using it.
//   - or, with pack_weights(FloatWeights::release), the copy alone: the float weight freed, every product of
//     the layer (few rows too: backend::gemm(a, PackedMatrix, c)) reading the copy, inference only.
//   - the copy is laid out for the kernel that packed it (panels of 32 columns for AVX-512, 16 for AVX2) and
//     read by that kernel only: after backend::set_max_cpu_isa chooses another, products read the float
//     weight (same bits) until pack_weights() is called again.
// Where there is no packed kernel (a CPU without AVX2 + FMA, EIGENFORMER_MAX_CPU_ISA=baseline,
// -DEIGENFORMER_BLAS=onednn, another compiler or CPU) packing does nothing and every product reads the float
// weight.
#pragma once

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/join.hpp"

namespace eigenformer {

// What to_bf16_weights and pack_weights do with the float weights once their other copies exist.
enum class FloatWeights {
  keep,     // kept (to_bf16_weights rounds them to bfloat16 values): training, state_dict and repacking still work
  release,  // freed, inference only: to_bf16_weights halves the memory, pack_weights keeps it at the weights' size
};

namespace detail {
// How a released weight is held (nn::Parameter::held_as), for the messages of what then refuses it.
inline constexpr const char* held_as_bf16 = "bfloat16 (to_bf16_weights with FloatWeights::release)";
inline constexpr const char* held_as_packed = "packed (pack_weights with FloatWeights::release)";
}  // namespace detail

namespace backend::detail {
// Whether float products can read packed weights now: there is a packed kernel (sgemm_kernel()), and it
// takes products of many rows.
inline bool packed_weights_supported() { return packed_product_kernel<float>(1 << 20) != nullptr; }
}  // namespace backend::detail

// b (K, N) in the packed kernel's panel order: for each block of sgemm_kc rows of b (k), all its columns
// in panels of the kernel's nr, each panel kc x nr with k outermost, the last panel padded with zero columns.
// Shares its storage when copied.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  // b in any layout (nn.Linear's weight.t() is a column-major view), for the packed kernel in use now. Empty
  // where there is none.
  explicit PackedMatrix(const Tensor<float, 2>& b) {
    const auto* kernel = backend::detail::packed_product_kernel<float>(1 << 20);
    if (b.shape()[0] == 0 || b.shape()[1] == 0 || kernel == nullptr) return;
    allocate(kernel, b.shape()[0], b.shape()[1]);
    pack_columns(b, 0);
    parts_ = {sample(b)};
  }

  // Several matrices with the same rows packed as one, side by side ([b0 | b1 | ...], torch.cat along dim 1):
  // one product then computes what one product per part would, with the same bits (an element of the
  // packed kernel's product depends on its row of a and its column of b alone), reading a once. Empty where
  // there is no packed kernel. Throws shape_error when the parts' row counts differ.
  static PackedMatrix side_by_side(const std::vector<Tensor<float, 2>>& parts) {
    if (parts.empty()) throw std::invalid_argument("PackedMatrix::side_by_side: expected at least one matrix");
    index_t cols = 0;
    bool whole_panels = true;  // every part but the last a whole number of panels: each packs in place
    const auto* kernel = backend::detail::packed_product_kernel<float>(1 << 20);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].shape()[0] != parts.front().shape()[0])
        throw shape_error("PackedMatrix::side_by_side: the matrices " + eigenformer::shape_string(parts.front().shape()) +
                          " and " + eigenformer::shape_string(parts[i].shape()) + " have different row counts");
      cols += parts[i].shape()[1];
      if (kernel != nullptr && i + 1 < parts.size() && parts[i].shape()[1] % kernel->nr != 0)
        whole_panels = false;
    }
    PackedMatrix packed;
    const index_t rows = parts.front().shape()[0];
    if (kernel == nullptr || rows == 0 || cols == 0) return packed;
    if (whole_panels) {
      packed.allocate(kernel, rows, cols);
      index_t col0 = 0;
      for (const auto& part : parts) {
        if (part.shape()[1] > 0) packed.pack_columns(part, col0);
        col0 += part.shape()[1];
      }
    } else {
      packed = PackedMatrix(cat(parts, 1));  // a panel straddles two parts: pack their concatenation
    }
    packed.parts_.clear();
    for (const auto& part : parts) packed.parts_.push_back(sample(part));
    return packed;
  }

  bool empty() const noexcept { return data_ == nullptr; }
  index_t rows() const noexcept { return rows_; }
  index_t cols() const noexcept { return cols_; }
  // cols() rounded up to whole panels: the row length of every block.
  index_t padded_cols() const noexcept { return padded_cols_; }
  const float* data() const noexcept { return data_.get(); }
  // The kernel whose panel order data() is in (null when empty).
  const backend::detail::SgemmKernel* kernel() const noexcept { return kernel_; }
  // Whether a product of this many rows reads this copy: it is not empty, and its kernel is the one such a
  // product takes now (backend::detail::packed_product_kernel; fewer than 8 rows take none).
  bool serves(index_t rows) const { return !empty() && kernel_ == backend::detail::packed_product_kernel<float>(rows); }
  // Whether the kernel in use now is the one this copy was packed for, so that it can read it for a product of
  // any number of rows (a weight that exists only packed: backend::gemm(a, packed, c)).
  bool readable() const { return serves(1 << 20); }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(rows_ * padded_cols_) * sizeof(float); }
  std::string shape_string() const { return eigenformer::detail::rows_cols_string(rows_, cols_); }

  // The (rows, cols) matrix it was packed from, row-major: the panels read back, the padding left out.
  Tensor<float, 2> to_dense() const {
    auto out = Tensor<float, 2>::empty(Shape<2>{rows_, cols_});
    if (empty()) return out;
    const index_t nr = kernel_->nr, panels = padded_cols_ / nr;
    float* dst = out.data();
    const float* src = data_.get();
    backend::parallel_for(panels, 8, [&](index_t p0, index_t p1) {
      for (index_t pc = 0; pc < rows_; pc += backend::detail::sgemm_kc) {
        const index_t kc = std::min<index_t>(backend::detail::sgemm_kc, rows_ - pc);
        for (index_t p = p0; p < p1; ++p) {
          const index_t j0 = p * nr, width = std::min(nr, cols_ - j0);
          const float* panel = src + backend::detail::packed_panel_offset(pc, j0, kc, padded_cols_);
          for (index_t r = 0; r < kc; ++r)
            std::memcpy(dst + (pc + r) * cols_ + j0, panel + r * nr, sizeof(float) * static_cast<std::size_t>(width));
        }
      }
    });
    return out;
  }

  // Columns [j0, j0 + count) of the matrix it was packed from, as the rows of a (count, rows) matrix: the
  // weights packed as their transpose (nn.Linear's (out, in) weight, the embedding table a tied output layer
  // holds as (C, V), BERT's q | k | v side by side) read back in their own layout, column by column on the
  // pool, without a (rows, cols) copy to transpose afterwards.
  Tensor<float, 2> transposed_columns(index_t j0, index_t count) const {
    auto out = Tensor<float, 2>::empty(Shape<2>{count, rows_});
    if (empty() || rows_ == 0) return out;
    float* dst = out.data();
    backend::parallel_for(count, std::max<index_t>(1, 16384 / rows_), [&](index_t begin, index_t end) {
      for (index_t j = begin; j < end; ++j) copy_column(j0 + j, dst + j * rows_);
    });
    return out;
  }

  // Column j of the matrix it was packed from (rows() values) into out: a row of an embedding table whose
  // transpose the tied output layer holds packed.
  void copy_column(index_t j, float* out) const {
    const index_t nr = kernel_->nr, lane = j % nr, panel = j - lane;
    for (index_t pc = 0; pc < rows_; pc += backend::detail::sgemm_kc) {
      const index_t kc = std::min<index_t>(backend::detail::sgemm_kc, rows_ - pc);
      const float* from = data_.get() + backend::detail::packed_panel_offset(pc, panel, kc, padded_cols_) + lane;
      for (index_t r = 0; r < kc; ++r) out[pc + r] = from[r * nr];
    }
  }

  // Whether b has this matrix's shape and still holds, bit for bit, three of the values it was packed from
  // (the first, the middle and the last element): an optimiser step or a new checkpoint changes them, so a
  // stale copy is caught at the price of three loads.
  bool matches(const Tensor<float, 2>& b) const { return parts_.size() == 1 && part_matches(parts_[0], b); }
  // The same for a side_by_side packing: each part against its matrix, in order.
  bool matches(const std::vector<Tensor<float, 2>>& parts) const {
    if (empty() || parts.size() != parts_.size()) return false;
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (!part_matches(parts_[i], parts[i])) return false;
    return true;
  }

 private:
  // The kernel is read once by the caller: a copy's layout and its kernel must agree.
  void allocate(const backend::detail::SgemmKernel* kernel, index_t k, index_t n) {
    kernel_ = kernel;
    rows_ = k, cols_ = n;
    padded_cols_ = kernel_->padded_cols(n);
    // Weight storage: huge pages when large (allocate_zeroed), given back to the system when freed.
    data_ = eigenformer::detail::allocate_zeroed<float>(k * padded_cols_);
  }
  // b (rows_ x its own columns) into columns [col0, col0 + b's columns), col0 a whole number of panels; its
  // last panel padded with zeros.
  void pack_columns(const Tensor<float, 2>& b, index_t col0) {
    using namespace backend::detail;
    const index_t k = rows_, n = b.shape()[1];
    Tensor<float, 2> copy;  // a contiguous copy, when b is strided both ways
    const auto operand = matrix_operand(b, copy);
    const bool col_major = operand.info.layout == eigenformer::detail::matrix_layout::col_major;
    const float* src = operand.data;
    const index_t nr = kernel_->nr, ld = operand.info.outer_stride, panels = (n + nr - 1) / nr;
    float* out = data_.get();
    backend::parallel_for(panels, 8, [&](index_t s0, index_t s1) {
      const index_t j0 = s0 * nr, j1 = std::min(n, s1 * nr);
      for (index_t pc = 0; pc < k; pc += sgemm_kc) {
        const index_t kc = std::min<index_t>(sgemm_kc, k - pc);
        const float* from = col_major ? src + pc + j0 * ld : src + pc * ld + j0;
        kernel_->pack_b(from, col_major, ld, kc, j1 - j0, out + packed_panel_offset(pc, col0 + j0, kc, padded_cols_));
      }
    });
  }

  // What matches() compares: a part's column count and three of its values.
  struct PartSample {
    index_t cols = 0;
    float values[3] = {};
  };
  static index_t sample_row(index_t rows, int s) { return s == 0 ? 0 : s == 1 ? rows / 2 : rows - 1; }
  static index_t sample_col(index_t cols, int s) { return s == 0 ? 0 : s == 1 ? cols / 2 : cols - 1; }
  static PartSample sample(const Tensor<float, 2>& b) {
    PartSample p{b.shape()[1], {}};
    for (int s = 0; s < 3; ++s) p.values[s] = b(sample_row(b.shape()[0], s), sample_col(p.cols, s));
    return p;
  }
  bool part_matches(const PartSample& p, const Tensor<float, 2>& b) const {
    if (empty() || b.shape()[0] != rows_ || b.shape()[1] != p.cols) return false;
    for (int s = 0; s < 3; ++s) {
      const float now = b(sample_row(rows_, s), sample_col(p.cols, s));
      if (std::memcmp(&now, &p.values[s], sizeof(float)) != 0) return false;
    }
    return true;
  }

  std::shared_ptr<float[]> data_;
  const backend::detail::SgemmKernel* kernel_ = nullptr;
  index_t rows_ = 0, cols_ = 0, padded_cols_ = 0;
  std::vector<PartSample> parts_;
};

namespace backend {

namespace detail {

// ---- products with a packed weight: blocks of c handed out on the pool ----
//
// One tile a thread, each packing its own rows of a, left a thread that the host had paused holding its whole
// share while the other waited. Here a is read in place (either layout, sgemm_a_panel) and the threads take
// blocks of c one at a time, whichever thread is free: in busy minutes on a shared VM (up to 37% of the CPU time stolen) two-thread
// BERT-base forwards took 200 ms at batch 1 and 1520 at batch 8 against 268 and 2479 with a tile a thread, and
// the same in quiet minutes (bench/README.md, "10 ms, and blocks handed out one at a time"). Only where b is
// packed already: packing a whole b the same way (for products without a packed weight) wrote it out of L2 and
// read it back, and those products ran 1.3-1.6x slower than with a tile a thread packing b block by block where
// it is used.

// Rows of c a block takes at most: its rows of a (rows x 256 floats a k block) and its block of c stay in L2
// while the panels of b stream past.
inline constexpr index_t shared_block_rows = 21 * 12;
// Blocks a thread, about: enough that the others take over a stalled thread's share.
inline constexpr index_t shared_blocks_per_thread = 8;
// The last blocks in hand-out order go out in parts of their columns (gemm_packed_blocks): this many blocks a
// thread, each in up to this many parts. With whole blocks to the end (one thread's block of BERT-base b8's
// 1024 x 3072 x 768 is ~1 ms) the thread that finished first waited for the other's last block: 2.8-3.2% of a
// two-thread b8 forward's CPU samples lay in the pool's waits, 5.2-5.3% at b1; with the tail in parts
// 1.9-2.0% and 3.1-3.3% (perf, AMD Zen 5). Interleaved A/B (bench/ab.py, 8-10 rounds): 1024 x 3072 x 768 on 2
// threads 0.94x and 0.99x the time in two sets, GPT-2 small s128 0.96x; BERT-base's forwards moved inside the
// host's noise. Any split gives the same bits: an element's arithmetic does not depend on where blocks start.
inline constexpr index_t tail_blocks_per_thread = 2;
inline constexpr index_t tail_block_parts = 4;
// Below this many multiply-adds a product goes out as one tile a thread instead (rows split when N <= M, so
// that each thread reads all of the smaller b; columns otherwise, so that each reads all of the smaller a).
// Such products take well under a millisecond, in blocks of tens of microseconds: a stall of a host's time
// slice (milliseconds) outlasts the whole product whichever way it is cut, so the blocks buy little balance
// there, and one tile a thread ran faster (why, not measured: perhaps the blocks' hand-out and each block's
// first panels of b, which nothing asked for ahead). Intel Xeon (Sapphire Rapids kind), 2 threads,
// bench/ab.py, 4 interleaved rounds: 768 x 384 x 128 0.95x the time, 768 x 128 x 512 0.94-0.95x, 768 x 512 x
// 128 0.975x, 128 x 768 x 768 0.99x; BERT-base b1's forward 0.985x, and 0.94-0.97x with another process busy
// on one of the two cores. Larger products stay on the blocks: one tile a thread took 1.14x the time at 1024 x
// 3072 x 768; at 128 x 2304 x 768 and 128 x 3072 x 768 it took 0.97-0.98x, and BERT-base b1 0.96x, but with
// the other process busy b1 took 1.03x (rounds 1.01-1.15), the imbalance the blocks are there to absorb. A
// variable, not a constant, so that the tests can send every product down either path.
inline double tile_per_thread_below = double(index_t{1} << 27);

inline index_t ceil_div(index_t a, index_t b) { return (a + b - 1) / b; }

// c (m x n, row stride ldc) = act(alpha a b + beta c + bias), a m x k row- or column-major, b packed (a
// PackedMatrix's data, padded_cols columns): on the pool, or all on the calling thread (on_pool false: one
// thread, a small product, or a caller that runs many products in parallel itself). The same blocks and the
// same register blocks over the same panels either way, so the same bits.
inline void gemm_packed_blocks(const SgemmKernel& kernel, index_t m, index_t n, index_t k, bool a_col_major,
                               const float* a, index_t lda, const float* packed_b, index_t padded_cols, float* c,
                               index_t ldc, float alpha, float beta, const float* bias, Activation act,
                               bool on_pool) {
  auto for_each = [on_pool](index_t count, auto&& body) {
    if (on_pool) parallel_for(count, 1, body);
    else body(index_t{0}, count);
  };
  const index_t threads = on_pool ? get_num_threads() : 1;
  // Rows [r0, r1) x columns [c0, c1) of c, r0 and c0 on whole panels: the bias added as the register blocks
  // store their last k block, the activation while the tile is in cache.
  auto run_tile = [&](index_t r0, index_t r1, index_t c0, index_t c1) {
    kernel.both_packed_block(k, alpha, a_col_major, a, lda, packed_b, padded_cols, r0, r1, c0, c1, beta, c, ldc,
                              bias, nullptr);
    apply_epilogue<float>(c + r0 * ldc + c0, ldc, r1 - r0, c1 - c0, nullptr, act);
  };
  if (threads > 1 && double(m) * double(n) * double(k) < tile_per_thread_below) {
    const bool by_rows = n <= m;
    const index_t each = by_rows ? kernel.padded_rows(ceil_div(m, threads)) : kernel.padded_cols(ceil_div(n, threads));
    for_each(ceil_div(by_rows ? m : n, each), [&](index_t begin, index_t end) {
      for (index_t t = begin; t < end; ++t) {
        if (by_rows) run_tile(t * each, std::min(m, (t + 1) * each), 0, n);
        else run_tile(0, m, t * each, std::min(n, (t + 1) * each));
      }
    });
    return;
  }
  const index_t row_blocks = ceil_div(m, shared_block_rows);
  const index_t block_rows = kernel.padded_rows(ceil_div(m, row_blocks));
  const index_t nr = kernel.nr, col_panels = ceil_div(n, nr);
  const index_t wanted = shared_blocks_per_thread * threads;
  const index_t col_groups = std::min(col_panels, std::max(threads, ceil_div(wanted, row_blocks)));
  const index_t group_panels = ceil_div(col_panels, col_groups);
  const index_t groups = ceil_div(col_panels, group_panels);
  // Blocks handed out one after the other run at the same time on different threads, so they should share
  // neither their panels of b nor their rows of a: block t takes column group t % groups (at least as many
  // groups as threads) and, within it, the row blocks in turn from a start that differs between groups by
  // row_blocks / groups. The threads then stream different parts of both operands. With column groups
  // outermost the threads read the same panels of b in step; on the AMD Zen 5 VM, in minutes
  // when the two vCPUs ran slower together (two single-thread processes did not), 2048 x 1024 x 256 took
  // 2.95-3.10 ms that way against 2.59-2.69 ms in this order, and with row blocks outermost (the threads
  // reading the same rows of a in step) 2048 x 256 x 1024 took 2.74-2.77 ms against 2.61 (throwaway driver,
  // 2 threads, medians of 30). In the other minutes every order took the same time. bench_gemm, interleaved:
  // 0.86x the time at 2048 x 1024 x 256 and 0.95x at 1024 x 3072 x 768, both then level with oneDNN.
  const index_t stagger = ceil_div(row_blocks, groups);
  // The tail in parts (tail_blocks_per_thread); parts of a block share its rows of a, not its panels of b.
  const index_t blocks = groups * row_blocks;
  const index_t tail = threads > 1 ? std::min(blocks, tail_blocks_per_thread * threads) : 0;
  const index_t whole = blocks - tail, parts = std::min(tail_block_parts, group_panels);
  auto run_block = [&](index_t t, index_t part, index_t of) {
    const index_t group = t % groups, row_block = (t / groups + group * stagger) % row_blocks;
    const index_t r0 = row_block * block_rows, r1 = std::min(m, r0 + block_rows);
    const index_t first = group * group_panels, panels = std::min(col_panels, first + group_panels) - first;
    const index_t p0 = first + part * panels / of, p1 = first + (part + 1) * panels / of;
    if (p0 == p1) return;  // a group narrower than `parts` panels
    run_tile(r0, r1, p0 * nr, std::min(n, p1 * nr));
  };
  for_each(whole + tail * parts, [&](index_t begin, index_t end) {
    for (index_t u = begin; u < end; ++u) {
      if (u < whole) run_block(u, 0, 1);
      else run_block(whole + (u - whole) / parts, (u - whole) % parts, parts);
    }
  });
}

// The same for a of at most sgemm_few_rows rows (row-major, stride lda): the threads take runs of whole panels
// of columns, each read once for all the rows (kernel.few_rows), with the bits gemm_packed_blocks gives.
inline void gemm_packed_few_rows(const SgemmKernel& kernel, index_t m, index_t n, index_t k, const float* a, index_t lda,
                                 const float* packed_b, index_t padded_cols, float* c, index_t ldc, const float* bias,
                                 Activation act, bool on_pool) {
  const index_t nr = kernel.nr, panels = ceil_div(n, nr);
  auto body = [&](index_t p0, index_t p1) {
    const index_t c0 = p0 * nr, c1 = std::min(n, p1 * nr);
    kernel.few_rows(k, a, lda, m, packed_b, padded_cols, c0, c1, c, ldc);
    apply_epilogue(c + c0, ldc, m, c1 - c0, bias ? bias + c0 : nullptr, act);
  };
  if (on_pool) parallel_for(panels, 4, body);
  else body(0, panels);
}

// Whether a (M, K) times a (b_rows, N) weight into c, with the epilogue's bias, is a product the packed path
// can compute: b_rows == K, c (M, N) with contiguous rows, a bias of N.
inline bool packed_product_shapes_agree(const Tensor<float, 2>& a, index_t b_rows, index_t n, const Tensor<float, 2>& c,
                                        const Epilogue<float>& epilogue) {
  return b_rows == a.shape()[1] && c.shape()[0] == a.shape()[0] && c.shape()[1] == n &&
         (!epilogue.bias || epilogue.bias->numel() == n) && (n <= 1 || c.strides()[1] == 1);
}

// The product with b read from `packed` alone; the caller has checked the shapes and packed.serves(rows).
inline void gemm_reading_packed(const Tensor<float, 2>& a, const PackedMatrix& packed, Tensor<float, 2>& c, float alpha,
                                float beta, const Epilogue<float>& epilogue, Tiling tiling) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = packed.cols();
  Tensor<float, 2> a_copy;
  const auto ao = matrix_operand(a, a_copy);
  const auto bias_values = epilogue.bias ? epilogue.bias->contiguous() : Tensor<float, 1>();
  const float* bias = epilogue.bias ? bias_values.data() : nullptr;
  const bool a_col_major = ao.info.layout == eigenformer::detail::matrix_layout::col_major;
  const bool on_pool = tiling == Tiling::pool && plan_gemm<float>(m, n, k).tiles() > 1;
  if (m <= sgemm_few_rows && alpha == 1.0f && beta == 0.0f) {
    const Tensor<float, 2> rows = a_col_major ? a.contiguous() : Tensor<float, 2>();
    gemm_packed_few_rows(*packed.kernel(), m, n, k, a_col_major ? rows.data() : ao.data,
                         a_col_major ? k : ao.info.outer_stride, packed.data(), packed.padded_cols(), c.data(),
                         c.strides()[0], bias, epilogue.activation, on_pool);
    return;
  }
  Tensor<float, 2> a_spaced;
  const auto a_in = unaliased_left_operand(packed.kernel(), ao, m, k, n, on_pool, a_spaced);
  gemm_packed_blocks(*packed.kernel(), m, n, k, a_col_major, a_in.data, a_in.info.outer_stride, packed.data(),
                     packed.padded_cols(), c.data(), c.strides()[0], alpha, beta, bias, epilogue.activation, on_pool);
}

}  // namespace detail

// c = act(alpha a b + beta c + bias) as gemm, reading b from `packed` (PackedMatrix(b)) when the packed
// kernel takes the product (8 rows or more); from b itself when packed is null or empty, for fewer rows, or
// when another kernel packed it (packed->serves). Same bits either way. Throws shape_error when the shapes
// disagree and std::logic_error when b no longer holds the values it was packed from.
inline void gemm(const Tensor<float, 2>& a, const Tensor<float, 2>& b, const PackedMatrix* packed,
                 Tensor<float, 2>& c, float alpha = 1.0f, float beta = 0.0f, const Epilogue<float>& epilogue = {},
                 Tiling tiling = Tiling::pool) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const bool shapes_agree = detail::packed_product_shapes_agree(a, b.shape()[0], n, c, epilogue);
  if (packed == nullptr || !packed->serves(m) || !shapes_agree || k == 0)
    return gemm(a, b, c, alpha, beta, epilogue, tiling);  // the float product, or its error message
  if (packed->rows() != k || packed->cols() != n)
    throw shape_error("gemm: the packed weight " + packed->shape_string() + " is not a packing of the weight " +
                      shape_string(b.shape()));
  if (!packed->matches(b))
    throw std::logic_error("gemm: the weight " + shape_string(b.shape()) +
                           " has changed since it was packed; call pack_weights() again after changing weights");
  detail::gemm_reading_packed(a, *packed, c, alpha, beta, epilogue, tiling);
}

// Whether a float product of this many rows reads packed weights (there is a packed kernel now and it takes
// the product); products of fewer rows stream the float weight (gemv.hpp).
inline bool reads_packed_weight(index_t rows) { return detail::uses_sgemm_kernel<float>(rows); }

// c = act(a b + bias) for a weight b that exists only packed, such as several weights packed side by side
// (PackedMatrix::side_by_side) or a layer's weight packed with FloatWeights::release; a (M, K), any M >= 1.
// The packed kernel reads the copy for every row count (gemv.hpp's kernels take few-row products of a float
// weight, whose bits differ): each element then has the bits of the same element of a product of 8 rows or
// more, whatever M. When the copy was packed for another kernel than the one in use now
// (backend::set_max_cpu_isa), its values are read back (PackedMatrix::to_dense) and multiplied as a float
// weight would be: the right values, slowly, until it is packed again. Throws shape_error when the shapes
// disagree and std::invalid_argument for an empty copy.
inline void gemm(const Tensor<float, 2>& a, const PackedMatrix& packed, Tensor<float, 2>& c,
                 const Epilogue<float>& epilogue = {}) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = packed.cols();
  if (!detail::packed_product_shapes_agree(a, packed.rows(), n, c, epilogue))
    throw shape_error("gemm: input " + shape_string(a.shape()) + " x packed weight " + packed.shape_string() +
                      " into output " + shape_string(c.shape()) +
                      (epilogue.bias ? " with bias " + shape_string(epilogue.bias->shape()) : std::string()) +
                      ": expected a (M, K) x (K, N) -> (M, N) with row-contiguous output and a bias of N");
  if (packed.empty())
    throw std::invalid_argument("gemm: the packed weight " + packed.shape_string() +
                                " is empty (packed where there is no packed kernel, or never packed)");
  if (m == 0) return;
  if (k == 0 || !packed.readable()) return gemm(a, packed.to_dense(), c, 1.0f, 0.0f, epilogue);
  detail::gemm_reading_packed(a, packed, c, 1.0f, 0.0f, epilogue, Tiling::pool);
}

// A fresh (M, N) result.
inline Tensor<float, 2> gemm(const Tensor<float, 2>& a, const Tensor<float, 2>& b, const PackedMatrix* packed,
                             const Epilogue<float>& epilogue = {}) {
  auto c = Tensor<float, 2>::empty(Shape<2>{a.shape()[0], b.shape()[1]});
  gemm(a, b, packed, c, 1.0f, 0.0f, epilogue);
  return c;
}

}  // namespace backend
}  // namespace eigenformer
