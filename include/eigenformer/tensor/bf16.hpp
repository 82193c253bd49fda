// bfloat16 weight storage for inference: a weight matrix kept as bfloat16 (the upper 16 bits of a float:
// float's range, 8 bits of precision) and widened to float inside the products that read it, so the
// arithmetic stays float while decoding streams half the bytes. This is weight-only rounding, as
// `model.to(torch.bfloat16)` would round the weights; activations, biases and LayerNorm stay float.
//
// How a model uses it (GPT2LMHeadModel::to_bf16_weights, nn::Linear / nn::Conv1D::to_bf16_weights):
//   1. round_to_bf16_(weight): the float parameter itself takes its bfloat16 values, so whatever reads the
//      float tensor computes with the very same model;
//   2. Bf16Matrix(weight): a bfloat16 copy, which the products of up to backend::detail::gemv_max_rows rows
//      (one decoding step) read instead of the float tensor, at half the memory traffic;
//   3. with FloatWeights::release, the float tensor is then freed: the bfloat16 copy is the only one (half
//      the float model's memory), products of more rows widen it a group of columns at a time, and the
//      model serves inference only (training, state dicts and packing need the float values and refuse).
// With FloatWeights::keep the float tensor stays (1.5x the float model's memory in all), and the copy is a
// snapshot: a weight changed afterwards (training, load_state_dict) needs to_bf16_weights() again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/gemv.hpp"
#include "eigenformer/tensor/packed_matrix.hpp"

namespace eigenformer {

// Every element of t replaced by the float value of its bfloat16 rounding (bf16_bits_from_float), in place:
// t.copy_(t.to(torch.bfloat16)) in PyTorch.
template <std::size_t R>
Tensor<float, R>& round_to_bf16_(Tensor<float, R>& t) {
  if (!t.is_contiguous())
    throw std::invalid_argument("round_to_bf16_: the tensor " + shape_string(t.shape()) +
                                " is a strided view; round a contiguous tensor (a parameter, or .contiguous())");
  float* p = t.data();
  for (index_t i = 0; i < t.numel(); ++i) p[i] = float_from_bf16_bits(bf16_bits_from_float(p[i]));
  return t;
}

// A 2-D float matrix rounded to bfloat16 (bf16_bits_from_float), laid out for the products that read it:
// a transposed view such as Linear's weight.t() column-major, each column contiguous as in the float
// original; any other matrix in the paneled layout of backend::detail::GemvWeight (the parts of k its
// products sum separately, one after another, each in panels of 64 columns stored whole, the last padded
// with zeros), so that a thread's share of a product is one contiguous stretch. Shares its storage when
// copied.
class Bf16Matrix {
 public:
  Bf16Matrix() = default;
  explicit Bf16Matrix(const Tensor<float, 2>& m) : rows_(m.shape()[0]), cols_(m.shape()[1]) {
    const auto info = detail::classify(rows_, cols_, m.strides()[0], m.strides()[1]);
    col_major_ = info.layout == detail::matrix_layout::col_major && rows_ > 1;
    const auto dense = col_major_ ? m.t().contiguous() : m.contiguous();  // (cols, rows) or (rows, cols)
    const index_t stored = col_major_ ? m.numel() : rows_ * padded_cols();
    const auto size = static_cast<std::size_t>(std::max<index_t>(stored, 1));
    // Weight storage (allocate_zeroed: huge pages when large), zero, so that the panels' padding columns
    // need no writing. Converted on the thread pool: a model loaded as bfloat16 converts every weight matrix
    // this way.
    data_ = eigenformer::detail::allocate_zeroed<std::uint16_t>(static_cast<index_t>(size));
    std::uint16_t* out = data_.get();
    const float* in = dense.data();
    if (col_major_) {
      backend::parallel_for(m.numel(), 65536, [&](index_t begin, index_t end) {
        for (index_t i = begin; i < end; ++i) out[i] = bf16_bits_from_float(in[i]);
      });
    } else {
      // Row i's piece of each 64-column panel is contiguous at both ends: converted a piece at a time (an
      // offset() per element took 1.2 ns an element, against 0.26 for the column-major loop).
      constexpr index_t P = backend::detail::gemv_panel_cols;
      backend::parallel_for(rows_, std::max<index_t>(1, 65536 / std::max<index_t>(cols_, 1)), [&](index_t begin, index_t end) {
        for (index_t i = begin; i < end; ++i)
          for (index_t j = 0; j < cols_; j += P) {
            std::uint16_t* dst = out + offset(i, j);
            const float* src = in + i * cols_ + j;
            const index_t piece = std::min(P, cols_ - j);
            for (index_t q = 0; q < piece; ++q) dst[q] = bf16_bits_from_float(src[q]);
          }
      });
    }
  }

  bool empty() const noexcept { return data_ == nullptr; }
  index_t rows() const noexcept { return rows_; }
  index_t cols() const noexcept { return cols_; }
  bool col_major() const noexcept { return col_major_; }
  // Not column-major: stored in panels (see the class comment).
  bool paneled() const noexcept { return !col_major_; }
  const std::uint16_t* data() const noexcept { return data_.get(); }
  // The bits of element (i, j) and its value as a float.
  std::uint16_t bits(index_t i, index_t j) const { return data_[offset(i, j)]; }
  float at(index_t i, index_t j) const { return float_from_bf16_bits(bits(i, j)); }
  std::string shape_string() const { return detail::rows_cols_string(rows_, cols_); }

  // Columns [j0, j0 + n) widened to float as a (rows, n) matrix (a transposed view when column-major): what a
  // product of many rows reads when no float copy of the weight exists, one block of columns at a time.
  Tensor<float, 2> widened_columns(index_t j0, index_t n) const {
    if (j0 < 0 || n < 0 || j0 + n > cols_)
      throw std::out_of_range("Bf16Matrix::widened_columns: columns [" + std::to_string(j0) + ", " +
                              std::to_string(j0 + n) + ") of " + shape_string());
    if (col_major_) {  // column j is stored contiguous: rows (j, :) of the (n, rows) result
      auto out = Tensor<float, 2>::empty(Shape<2>{n, rows_});
      backend::parallel_for(n, std::max<index_t>(1, 65536 / std::max<index_t>(rows_, 1)), [&](index_t begin, index_t end) {
        for (index_t j = begin; j < end; ++j) widen_column(j0 + j, out.data() + j * rows_);
      });
      return out.t();
    }
    auto out = Tensor<float, 2>::empty(Shape<2>{rows_, n});
    constexpr index_t P = backend::detail::gemv_panel_cols;
    backend::parallel_for(rows_, std::max<index_t>(1, 65536 / std::max<index_t>(n, 1)), [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) {
        float* dst = out.data() + i * n;
        for (index_t j = j0; j < j0 + n;) {  // a panel's part of row i at a time: contiguous in storage
          const index_t stop = std::min(j0 + n, (j / P + 1) * P);
          const std::uint16_t* src = data_.get() + offset(i, j);
          for (index_t q = 0; q < stop - j; ++q) dst[j - j0 + q] = float_from_bf16_bits(src[q]);
          j = stop;
        }
      }
    });
    return out;
  }
  // Columns [j0, j0 + n) widened to float in the order `kernel` reads a packed weight: PackedMatrix's layout
  // of that (rows, n) block (k blocks of sgemm_kc rows at out + p * kernel.padded_cols(n), each in panels of
  // kernel.nr columns with k outermost, the last padded with zeros), so the packed kernel multiplies it as it
  // would the float weight packed at load, with the same bits. j0 is a multiple of kernel.nr. On the calling
  // thread; out holds rows() * kernel.padded_cols(n) floats.
  void widen_into_panels(const backend::detail::SgemmKernel& kernel, index_t j0, index_t n, float* out) const {
    using backend::detail::sgemm_kc;
    if (j0 < 0 || n < 0 || j0 + n > cols_ || j0 % kernel.nr != 0 || backend::detail::gemv_panel_cols % kernel.nr != 0)
      throw std::out_of_range("Bf16Matrix::widen_into_panels: columns [" + std::to_string(j0) + ", " +
                              std::to_string(j0 + n) + ") of " + shape_string() + " in panels of " +
                              std::to_string(kernel.nr));
    static thread_local backend::detail::SgemmScratch tile_scratch;
    const index_t nr = kernel.nr, padded = kernel.padded_cols(n);
    // A column-major tile of one panel (nr columns, each kc contiguous floats), for the kernel's transposing pack.
    float* tile =
        col_major_ ? tile_scratch.get(static_cast<std::size_t>(nr * std::min<index_t>(sgemm_kc, rows_))) : nullptr;
    for (index_t p = 0; p < rows_; p += sgemm_kc) {
      const index_t kc = std::min<index_t>(sgemm_kc, rows_ - p);
      for (index_t c = 0; c < n; c += nr) {
        float* panel = out + p * padded + c * kc;
        const index_t cols = std::min(nr, n - c);
        if (col_major_) {  // each column's k contiguous: widen, then transpose into the panel
          for (index_t j = 0; j < cols; ++j) {
            const std::uint16_t* src = data_.get() + (j0 + c + j) * rows_ + p;
            for (index_t q = 0; q < kc; ++q) tile[j * kc + q] = float_from_bf16_bits(src[q]);
          }
          kernel.pack_b(tile, true, kc, kc, cols, panel);
        } else if (cols == nr) {  // row i's nr columns are contiguous inside one of the storage's 64-column panels
          for (index_t q = 0; q < kc; ++q) {
            const std::uint16_t* src = data_.get() + offset(p + q, j0 + c);
            for (index_t j = 0; j < nr; ++j) panel[q * nr + j] = float_from_bf16_bits(src[j]);
          }
        } else {
          for (index_t q = 0; q < kc; ++q) {
            const std::uint16_t* src = data_.get() + offset(p + q, j0 + c);
            for (index_t j = 0; j < nr; ++j) panel[q * nr + j] = j < cols ? float_from_bf16_bits(src[j]) : 0.0f;
          }
        }
      }
    }
  }
  // Where columns [j0, j0 + n) lie in storage, as whole cache lines: one run column-major, one a part of k
  // paneled (with the rest of the 64-column panels they start and end in).
  backend::detail::PrefetchRuns storage_runs(index_t j0, index_t n) const {
    backend::detail::PrefetchRuns runs;
    auto add = [&](index_t from, index_t to) {  // elements [from, to) of data()
      const auto* first = reinterpret_cast<const char*>(data_.get() + from);
      const auto* last = reinterpret_cast<const char*>(data_.get() + to);
      runs.start[runs.count] = first;
      runs.lines[runs.count++] = (last - first + 63) / 64;
    };
    if (n <= 0) return runs;
    if (col_major_) {
      add(j0 * rows_, (j0 + n) * rows_);
      return runs;
    }
    constexpr index_t P = backend::detail::gemv_panel_cols;
    const index_t part_rows = std::max<index_t>(backend::detail::gemv_k_part_rows(rows_, cols_), 1);
    for (index_t k0 = 0; k0 < rows_ && runs.count < runs.max_runs; k0 += part_rows) {
      const index_t rows = std::min(part_rows, rows_ - k0);
      add(k0 * padded_cols() + j0 / P * P * rows, k0 * padded_cols() + (j0 + n + P - 1) / P * P * rows);
    }
    return runs;
  }
  // Column j widened into dst[0, rows) (a column-major matrix only, such as a tied head's embedding rows).
  void widen_column(index_t j, float* dst) const {
    if (!col_major_ && rows_ > 1)
      throw std::logic_error("Bf16Matrix::widen_column: " + shape_string() + " is stored in panels, not by column");
    const std::uint16_t* src = data_.get() + j * rows_;
    for (index_t i = 0; i < rows_; ++i) dst[i] = float_from_bf16_bits(src[i]);
  }

 private:
  index_t padded_cols() const noexcept {
    constexpr index_t P = backend::detail::gemv_panel_cols;
    return (cols_ + P - 1) / P * P;
  }
  // Paneled: part of k first (backend::detail::gemv_k_part_rows), then panel, row within the part, column.
  index_t offset(index_t i, index_t j) const noexcept {
    constexpr index_t P = backend::detail::gemv_panel_cols;
    if (col_major_) return i + j * rows_;
    const index_t part_rows = std::max<index_t>(backend::detail::gemv_k_part_rows(rows_, cols_), 1);
    const index_t k0 = i / part_rows * part_rows, rows = std::min(part_rows, rows_ - k0);
    return k0 * padded_cols() + (j / P) * P * rows + (i - k0) * P + j % P;
  }

  std::shared_ptr<std::uint16_t[]> data_;
  index_t rows_ = 0, cols_ = 0;
  bool col_major_ = false;
};

namespace backend {

namespace detail {
// A column group's widened panels (rows x group columns of float) are at most this many floats, or one panel:
// 256 KB, which stays in L2 while every row block of c reads it.
inline constexpr index_t bf16_widened_group_floats = index_t{1} << 16;

// c = act(a b16 + bias) with the packed kernel: the weight's columns in groups, each widened into its thread's
// panels (Bf16Matrix::widen_into_panels) and multiplied by every row block of a there, so it is read once from
// memory as bfloat16 and once from L2 as float. Same bits as the float product of the rounded weight (the
// register blocks see the same panels in the same order). Shapes checked by the caller.
inline void gemm_widening_bf16(const SgemmKernel& kernel, const Tensor<float, 2>& a, const Bf16Matrix& b16,
                               Tensor<float, 2>& c, const float* bias, Activation act) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b16.cols(), nr = kernel.nr, ldc = c.strides()[0];
  Tensor<float, 2> a_copy, a_spaced;
  const bool on_pool = plan_gemm<float>(m, n, k).tiles() > 1;
  const auto ao = unaliased_left_operand(&kernel, matrix_operand(a, a_copy), m, k, n, on_pool, a_spaced);
  const bool a_col_major = ao.info.layout == eigenformer::detail::matrix_layout::col_major;
  const index_t threads = on_pool ? get_num_threads() : 1, panels = ceil_div(n, nr);
  // At least shared_blocks_per_thread groups a thread where the weight has that many panels, handed out in
  // about four runs a thread (below), so that the others take over a stalled thread's share (see
  // gemm_packed_blocks).
  const index_t group_panels = std::clamp<index_t>(bf16_widened_group_floats / std::max<index_t>(k * nr, 1), 1,
                                                   std::max<index_t>(1, panels / (shared_blocks_per_thread * threads)));
  const index_t groups = ceil_div(panels, group_panels);
  const index_t row_blocks = ceil_div(m, shared_block_rows), block_rows = kernel.padded_rows(ceil_div(m, row_blocks));
  // Widening a group stalled on reading its bfloat16 bytes (15% of GPT-2 small's bf16 forward of 128 tokens on
  // an AMD Zen 5, mostly one load). So a thread takes a few groups in a row, and while it multiplies one its
  // register blocks ask for the next one's bytes (Bf16Matrix::storage_runs), which the widening then finds in
  // cache. Interleaved A/B on 2 threads: GPT-2's forward 0.88x the time, BERT-base's 0.93x at batch 1 and
  // 0.98x at batch 8; prefetching the group g + threads with groups handed out one at a time instead gained
  // less (0.91x, 0.95x), and runs of half the length less (0.94x on GPT-2).
  const index_t chunk = std::max<index_t>(1, groups / (4 * threads));
  auto run = [&](index_t begin, index_t end) {
    static thread_local SgemmScratch panels_scratch;
    for (index_t g = begin; g < end; ++g) {
      const index_t c0 = g * group_panels * nr, cols = std::min(n - c0, group_panels * nr);
      const index_t padded = kernel.padded_cols(cols);
      float* w = panels_scratch.get(static_cast<std::size_t>(k * padded));
      b16.widen_into_panels(kernel, c0, cols, w);
      PrefetchRuns ahead;
      if (g + 1 < end) {
        const index_t next0 = c0 + group_panels * nr;
        ahead = b16.storage_runs(next0, std::min(n - next0, group_panels * nr));
      }
      for (index_t r0 = 0; r0 < m; r0 += block_rows) {
        const index_t r1 = std::min(m, r0 + block_rows);
        kernel.both_packed_block(k, 1.0f, a_col_major, ao.data, ao.info.outer_stride, w, padded, r0, r1, 0, cols, 0.0f,
                                 c.data() + c0, ldc, bias ? bias + c0 : nullptr, r0 == 0 ? &ahead : nullptr);
        apply_epilogue<float>(c.data() + r0 * ldc + c0, ldc, r1 - r0, cols, nullptr, act);
      }
    }
  };
  if (on_pool) parallel_for(groups, chunk, run);
  else run(0, groups);
}
}  // namespace detail

// c = act(a b16 + bias) for a weight held only as bfloat16 (FloatWeights::release), c (M, N) with contiguous
// rows (a view such as a column block of a wider tensor will do). Products of up to detail::gemv_max_rows rows
// of a row-major a stream b16, widening it in registers (gemv.hpp); products the packed kernel takes widen a
// group of columns at a time into that kernel's panels in a thread's cache (detail::gemm_widening_bf16), with
// the same bits as the float product of the rounded weight; without a packed kernel, b16 is widened a block
// of columns at a time (Bf16Matrix::widened_columns) into a float product each. No float copy of the whole
// weight exists at any time (GPT-2's tied head is 154 MB as float). Throws shape_error when the shapes
// disagree.
inline void gemm(const Tensor<float, 2>& a, const Bf16Matrix& b16, Tensor<float, 2>& c,
                 const Epilogue<float>& epilogue = {}) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b16.cols();
  if (k != b16.rows() || c.shape()[0] != m || c.shape()[1] != n || (n > 1 && c.strides()[1] != 1))
    throw shape_error("gemm: " + shape_string(a.shape()) + " x bfloat16 weight " + b16.shape_string() + " -> " +
                      shape_string(c.shape()) + ": shapes do not agree (expected (M, K) x (K, N) -> (M, N) with "
                      "row-contiguous output)");
  if (epilogue.bias && epilogue.bias->numel() != n)
    throw shape_error("gemm: bias " + shape_string(epilogue.bias->shape()) + " does not match the " +
                      std::to_string(n) + " output columns");
  if (m == 0 || n == 0) return;
  const auto info = eigenformer::detail::classify(m, k, a.strides()[0], a.strides()[1]);
  const auto bias_values = epilogue.bias ? epilogue.bias->contiguous() : Tensor<float, 1>();
  const float* bias = epilogue.bias ? bias_values.data() : nullptr;
  if (m <= detail::gemv_max_rows && info.layout == eigenformer::detail::matrix_layout::row_major) {
    const detail::GemvWeight<std::uint16_t> w{
        b16.data(), b16.col_major() ? k : n, b16.col_major() ? detail::GemvLayout::col_major : detail::GemvLayout::paneled};
    detail::gemv_product(m, n, k, a.data(), info.outer_stride, w, c.data(), c.strides()[0], 1.0f, 0.0f, bias,
                         epilogue.activation);
    return;
  }
  if (const auto* kernel = detail::packed_product_kernel<float>(m); kernel != nullptr && k > 0)
    return detail::gemm_widening_bf16(*kernel, a, b16, c, bias, epilogue.activation);
  // Blocks of at most 4 MB of float (a multiple of the panels' 64 columns, 64 to 512 of them): GPT-2's
  // widest k (3072) gets 320 columns. Measured on GPT-2 small's 128-token forward (Zen 5): 512 columns for
  // every k peaked 5 MB higher, 128 columns at k = 3072 cost ~10% of the forward's time.
  constexpr index_t P = detail::gemv_panel_cols;
  const index_t block = std::clamp<index_t>((index_t{1} << 20) / std::max<index_t>(k, 1) / P * P, P, 8 * P);
  for (index_t j0 = 0; j0 < n; j0 += block) {
    const index_t cols = std::min(block, n - j0);
    const auto w = b16.widened_columns(j0, cols);
    auto out = c.narrow(1, j0, cols);
    Tensor<float, 1> bias_part;
    if (epilogue.bias) bias_part = bias_values.narrow(0, j0, cols);
    gemm(a, w, out, 1.0f, 0.0f, Epilogue<float>{epilogue.bias ? &bias_part : nullptr, epilogue.activation});
  }
}

// The same into a fresh (M, N) result.
inline Tensor<float, 2> gemm(const Tensor<float, 2>& a, const Bf16Matrix& b16, const Epilogue<float>& epilogue = {}) {
  auto c = Tensor<float, 2>::empty(Shape<2>{a.shape()[0], b16.cols()});
  gemm(a, b16, c, epilogue);
  return c;
}

// act(a b + bias) for a weight b held both as float (`b`) and as its bfloat16 copy (`b16`, made from b after
// round_to_bf16_, so the two hold the same values): products of up to detail::gemv_max_rows rows of a
// row-major a read b16, widening it in registers; larger ones read b. Throws shape_error when the shapes
// disagree.
inline Tensor<float, 2> gemm(const Tensor<float, 2>& a, const Tensor<float, 2>& b, const Bf16Matrix& b16,
                             const Epilogue<float>& epilogue = {}) {
  if (b16.rows() != b.shape()[0] || b16.cols() != b.shape()[1])
    throw shape_error("gemm: the bfloat16 weight " + b16.shape_string() + " is not a copy of the float weight " +
                      shape_string(b.shape()));
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const auto info = eigenformer::detail::classify(m, k, a.strides()[0], a.strides()[1]);
  if (m > detail::gemv_max_rows || m == 0 || k != b.shape()[0] || info.layout != eigenformer::detail::matrix_layout::row_major ||
      (epilogue.bias && epilogue.bias->numel() != n))
    return gemm(a, b, epilogue);  // the float product, or its error message
  return gemm(a, b16, epilogue);  // the streamed product of the overload above
}

}  // namespace backend
}  // namespace eigenformer
