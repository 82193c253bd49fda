// Fixed positional encodings from BERT-from-scratch section 1.5, as tables of shape (seq_len, d_model):
// each row is added to the token embedding at that position; SinusoidalPositionalEncoding (below) is the
// sinusoidal table as a layer. The learned and segment encodings are Embedding layers and live with them
// (embedding.hpp: LearnedPositionalEmbedding, BertEmbeddings).
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/tensor/creation.hpp"

namespace eigenformer::nn {

namespace detail {
inline void check_table_size(const char* op, index_t seq_len, index_t dim) {
  if (seq_len < 0 || dim <= 0)
    throw std::invalid_argument(std::string(op) + ": needs seq_len >= 0 and a positive dimension, got seq_len " +
                                std::to_string(seq_len) + " and dimension " + std::to_string(dim));
}
}  // namespace detail

// Row p is the position itself, repeated: position 300 in 8 dims is [300, ..., 300]. The tutorial's
// first, flawed idea: its scale dwarfs token embeddings.
template <floating_element T>
Tensor<T, 2> integer_positional_encoding(index_t seq_len, index_t d_model, index_t start = 0) {
  detail::check_table_size("integer_positional_encoding", seq_len, d_model);
  auto pe = Tensor<T, 2>::empty({seq_len, d_model});
  for (index_t p = 0; p < seq_len; ++p)
    for (index_t j = 0; j < d_model; ++j) pe(p, j) = static_cast<T>(start + p);
  return pe;
}

// Row p is the binary expansion of position start + p in `bits` dims, most significant bit first:
// 64 in 8 bits is [0, 1, 0, 0, 0, 0, 0, 0]. Bounded, but neighbouring positions jump.
template <floating_element T>
Tensor<T, 2> binary_positional_encoding(index_t seq_len, index_t bits, index_t start = 0) {
  detail::check_table_size("binary_positional_encoding", seq_len, bits);
  if (bits > 62 || start < 0 || (seq_len > 0 && start + seq_len - 1 >= (index_t{1} << bits)))
    throw std::invalid_argument("binary_positional_encoding: positions " + std::to_string(start) + ".." +
                                std::to_string(start + seq_len - 1) + " do not fit in " + std::to_string(bits) +
                                " bits");
  auto pe = Tensor<T, 2>::empty({seq_len, bits});
  for (index_t p = 0; p < seq_len; ++p)
    for (index_t j = 0; j < bits; ++j) pe(p, j) = static_cast<T>(((start + p) >> (bits - 1 - j)) & 1);
  return pe;
}

// "Attention Is All You Need": PE(pos, 2i) = sin(pos / 10000^(2i / d)), PE(pos, 2i + 1) = cos(same).
// Angles are computed in double and rounded once, so long tables (pos ~ 1000s) keep full float precision.
template <floating_element T>
Tensor<T, 2> sinusoidal_positional_encoding(index_t seq_len, index_t d_model, double base = 10000.0) {
  detail::check_table_size("sinusoidal_positional_encoding", seq_len, d_model);
  auto pe = Tensor<T, 2>::empty({seq_len, d_model});
  for (index_t j = 0; j < d_model; j += 2) {
    const double inv_freq = std::pow(base, -static_cast<double>(j) / static_cast<double>(d_model));
    for (index_t p = 0; p < seq_len; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      pe(p, j) = static_cast<T>(std::sin(angle));
      if (j + 1 < d_model) pe(p, j + 1) = static_cast<T>(std::cos(angle));
    }
  }
  return pe;
}

// The sinusoidal table as a layer: forward adds its first T rows to a (..., T, C) input (row t to every token
// at position start + t). No parameters; backward passes the gradient through unchanged.
template <floating_element T>
class SinusoidalPositionalEncoding : public Module<T> {
 public:
  SinusoidalPositionalEncoding(index_t max_len, index_t d_model, double base = 10000.0)
      : table_(sinusoidal_positional_encoding<T>(max_len, d_model, base)) {}

  const Tensor<T, 2>& table() const noexcept { return table_; }  // (max_len, C)

  std::string type_name() const override { return "SinusoidalPositionalEncoding"; }
  std::string extra_repr() const override {
    return std::to_string(table_.shape()[0]) + ", " + std::to_string(table_.shape()[1]);
  }
  // The table is derived from the sizes alone, so like the tutorial's register_buffer(..., persistent=False)
  // it is listed as a buffer but kept out of state dicts.
  void register_members(Members<T>& m) override { m.buffer("pe", table_, false); }

  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x, index_t start = 0) const {
    static_assert(R >= 2, "SinusoidalPositionalEncoding.forward: the input needs (T, C) as its last dims");
    const index_t len = x.shape()[R - 2];
    if (x.shape()[R - 1] != table_.shape()[1])
      throw shape_error("SinusoidalPositionalEncoding.forward: input " + shape_string(x.shape()) + " x table " +
                        shape_string(table_.shape()) + ": last dims differ");
    if (start < 0 || start + len > table_.shape()[0])
      throw std::out_of_range("SinusoidalPositionalEncoding.forward: positions " + std::to_string(start) + ".." +
                              std::to_string(start + len - 1) + " exceed max_len " + std::to_string(table_.shape()[0]));
    if (this->records_for_backward())
      this->save_for_backward(Context{std::vector<index_t>(x.shape().begin(), x.shape().end())});
    return add(x, table_.narrow(0, start, len));
  }

  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>("SinusoidalPositionalEncoding");
    detail::check_grad_shape("SinusoidalPositionalEncoding.backward", grad_output.shape(), ctx.shape);
    return grad_output;
  }

 private:
  struct Context {
    std::vector<index_t> shape;  // the input's, to check grad_output against
  };
  Tensor<T, 2> table_;
};

}  // namespace eigenformer::nn
