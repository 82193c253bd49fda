// bfloat16 weight storage for inference: a weight matrix kept as bfloat16 (the upper 16 bits of a float:
// float's range, 8 bits of precision) and widened to float inside the products that read it, so the
// arithmetic stays float while decoding streams half the bytes. This is weight-only rounding, as
// `model.to(torch.bfloat16)` would round the weights; activations, biases and LayerNorm stay float.
//
// How a model uses it (GPT2LMHeadModel::to_bf16_weights, nn::Linear / nn::Conv1D::to_bf16_weights):
//   1. round_to_bf16_(weight): the float parameter itself takes its bfloat16 values, so everything that
//      reads the float tensor (products of many rows such as a prompt's, the embedding lookup, the
//      state dict) computes with the very same model;
//   2. Bf16Matrix(weight): a bfloat16 copy, which the products of up to backend::detail::gemv_max_rows rows
//      (one decoding step) read instead of the float tensor, at half the memory traffic.
// The float tensor thus stays (1.5x the float model's memory in all). The copy is a snapshot: a weight
// changed afterwards (training, load_state_dict) needs to_bf16_weights() again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/gemv.hpp"

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
    data_ = std::shared_ptr<std::uint16_t[]>(new std::uint16_t[static_cast<std::size_t>(std::max<index_t>(stored, 1))]());
    if (col_major_) {
      for (index_t i = 0; i < m.numel(); ++i) data_[i] = bf16_bits_from_float(dense.data()[i]);
    } else {
      for (index_t i = 0; i < rows_; ++i)
        for (index_t j = 0; j < cols_; ++j) data_[offset(i, j)] = bf16_bits_from_float(dense.data()[i * cols_ + j]);
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
  auto c = Tensor<float, 2>::empty(Shape<2>{m, n});
  const auto bias_values = epilogue.bias ? epilogue.bias->contiguous() : Tensor<float, 1>();
  const detail::GemvWeight<std::uint16_t> w{
      b16.data(), b16.col_major() ? k : n, b16.col_major() ? detail::GemvLayout::col_major : detail::GemvLayout::paneled};
  detail::gemv_product(m, n, k, a.data(), info.outer_stride, w, c.data(), n, 1.0f, 0.0f,
                       epilogue.bias ? bias_values.data() : nullptr, epilogue.activation);
  return c;
}

}  // namespace backend
}  // namespace eigenformer
