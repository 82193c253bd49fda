// Lookup tables: nn.Embedding, the learned positional embedding, and BERT's input embeddings (token +
// position + segment, then LayerNorm and Dropout; BERT-from-scratch listing 1.30 with Hugging Face's
// parameter names).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/layernorm.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/bf16.hpp"

namespace eigenformer::nn {

// nn.Embedding: row i of weight (V, C) is the vector of id i. Ids are Tensor<std::int64_t, R> of any shape;
// the output adds a trailing dim C. The padding_idx row starts at zero and never receives gradient (its
// output still is whatever that row holds, as in PyTorch).
template <floating_element T>
class Embedding : public Module<T> {
 public:
  // Initialised exactly as nn.Embedding(num_embeddings, embedding_dim, padding_idx): N(0, 1) drawn from
  // `gen`, then the padding row zeroed. A negative padding_idx counts from the end, as in PyTorch.
  Embedding(index_t num_embeddings, index_t embedding_dim, std::optional<index_t> padding_idx = std::nullopt,
            Generator& gen = default_generator())
      : Embedding(num_embeddings, embedding_dim, padding_idx, skip_init) {
    init::embedding_(weight.data, padding_idx_, gen);
  }
  // All zeros and nothing drawn (torch.nn.utils.skip_init): for a table about to be overwritten by a
  // checkpoint, where drawing N(0, 1) for every row would only cost time.
  Embedding(index_t num_embeddings, index_t embedding_dim, std::optional<index_t> padding_idx, skip_init_t)
      : num_(num_embeddings), dim_(embedding_dim) {
    if (num_embeddings <= 0 || embedding_dim <= 0)
      throw std::invalid_argument("Embedding: num_embeddings and embedding_dim must be positive, got " +
                                  std::to_string(num_embeddings) + " and " + std::to_string(embedding_dim));
    if (padding_idx) {
      if (*padding_idx < -num_embeddings || *padding_idx >= num_embeddings)
        throw std::out_of_range("Embedding: padding_idx " + std::to_string(*padding_idx) +
                                " must be within num_embeddings " + std::to_string(num_embeddings));
      padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
    }
    // Memory is committed only as rows are written (untouched_zeros): by init::embedding_, or row by row by a
    // checkpoint load, which may then convert the table (to bfloat16) before the next tensor is read.
    weight = Parameter<T, 2>(eigenformer::detail::untouched_zeros<T>(Shape<2>{num_embeddings, embedding_dim}));
  }

  Parameter<T, 2> weight;  // (V, C)

  index_t num_embeddings() const noexcept { return num_; }
  index_t embedding_dim() const noexcept { return dim_; }
  std::optional<index_t> padding_idx() const noexcept { return padding_idx_; }

  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override {
    std::string r = std::to_string(num_) + ", " + std::to_string(dim_);
    if (padding_idx_) r += ", padding_idx=" + std::to_string(*padding_idx_);
    return r;
  }
  void register_members(Members<T>& m) override { m.parameter("weight", weight); }

  // ids (...) -> (..., C). An id outside [0, V) throws std::out_of_range naming the id, where it is, and V.
  // A recording forward saves the ids (a handle).
  template <std::size_t R>
  Tensor<T, R + 1> forward(const Tensor<std::int64_t, R>& ids) const {
    const auto flat = ids.reshape(Shape<1>{ids.numel()});  // (N)
    const index_t n = flat.numel();
    Shape<R + 1> out_shape{};
    for (std::size_t i = 0; i < R; ++i) out_shape[i] = ids.shape()[i];
    out_shape[R] = dim_;
    // Every id is checked before any row is copied, so the error names the first bad id.
    for (index_t k = 0; k < n; ++k) {
      const std::int64_t id = flat(k);
      if (id < 0 || id >= num_) throw_bad_id(id, k, ids.shape());
    }
    if (this->records_for_backward() && weight.float_released())
      throw std::logic_error(std::string("Embedding.forward: the layer is in training mode, but its table is held only as ") +
                             weight.held_as() + " and training needs the float table; call eval(), run under "
                             "InferenceMode, or train a model that keeps its float weights");
    auto out = Tensor<T, R + 1>::empty(out_shape);
    const T* w = weight.data.data();
    const std::int64_t* id_data = flat.data();
    // Released: row id of the table is column id of its (C, V) copy, bfloat16 or packed.
    const bool from_copy = weight.float_released();
    backend::parallel_for(n, std::max<index_t>(1, 16384 / dim_), [&](index_t begin, index_t end) {
      for (index_t k = begin; k < end; ++k) {
        if constexpr (std::is_same_v<T, float>)  // the copies hold float values only
          if (from_copy) {
            if (!weight_packed_.empty()) weight_packed_.copy_column(id_data[k], out.data() + k * dim_);
            else weight_bf16_.widen_column(id_data[k], out.data() + k * dim_);
            continue;
          }
        std::copy(w + id_data[k] * dim_, w + (id_data[k] + 1) * dim_, out.data() + k * dim_);
      }
    });
    if (this->records_for_backward())
      this->save_for_backward(Context{flat, std::vector<index_t>(out_shape.begin(), out_shape.end())});
    return out;
  }

  // bfloat16 storage of the table (tensor/bf16.hpp): the weight rounded to bfloat16 in place and a bfloat16
  // copy of it, (C, V) column-major so each row of the table is contiguous, which a language model's tied
  // output layer can share (bf16_weight()). With FloatWeights::release the float table is freed and lookups
  // widen rows of the copy (inference only; see Parameter::float_released); with FloatWeights::keep lookups
  // read the float table, which holds the same values. Nothing to do for a table already held only as bfloat16.
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    if (!weight_packed_.empty())
      throw std::logic_error("Embedding.to_bf16_weights: the table is held only as the tied output layer's packed "
                             "copy (pack_weights with FloatWeights::release), so there are no float values to round");
    if (weight.float_released()) return;
    // A table about to be freed needs no rounding in place: the copy rounds as it converts.
    if (floats == FloatWeights::keep) round_to_bf16_(weight.data);
    weight_bf16_ = Bf16Matrix(weight.data.t());
    if (floats == FloatWeights::release) weight.release_float_(eigenformer::detail::held_as_bf16);
  }
  // Frees the float table, which `table_t` -- its (C, V) transpose packed by the tied output layer
  // (TiedLMHead::pack_weights with FloatWeights::release), shared, not copied -- holds instead: lookups then read
  // rows out of its panels (inference only; see Parameter::float_released). Throws shape_error for a copy of
  // another shape and std::logic_error for a table already held only as bfloat16.
  void use_packed_table(const PackedMatrix& table_t)
    requires std::is_same_v<T, float>
  {
    if (table_t.rows() != dim_ || table_t.cols() != num_)
      throw shape_error("Embedding.use_packed_table: the packed table " + table_t.shape_string() + " is not the (" +
                        std::to_string(dim_) + ", " + std::to_string(num_) + ") transpose of the table");
    if (weight.float_released() && weight_packed_.empty())
      throw std::logic_error(std::string("Embedding.use_packed_table: the table is held only as ") + weight.held_as());
    weight_packed_ = table_t;
    if (!weight.float_released()) weight.release_float_(eigenformer::detail::held_as_packed);
  }
  // Undoes use_packed_table: the table read back out of the packed copy (bit for bit) into a float table of its
  // own, which lookups read again. Nothing to do for a table that never used a packed copy. The (V, C) table
  // directly (PackedMatrix::transposed_columns), not the (C, V) matrix read back and then transposed (a third
  // copy of a table that is GPT-2's largest matrix).
  void use_float_table()
    requires std::is_same_v<T, float>
  {
    if (weight_packed_.empty()) return;
    weight.restore_float_(weight_packed_.transposed_columns(0, num_));
    weight_packed_ = PackedMatrix();
  }
  // The (C, V) bfloat16 copy of the table, or null before to_bf16_weights().
  const Bf16Matrix* bf16_weight() const noexcept { return weight_bf16_.empty() ? nullptr : &weight_bf16_; }

  // Scatter-add: weight.grad[id] += grad_output[..., :] for every looked-up id except padding_idx.
  // Ids are not differentiable, so nothing is returned.
  template <std::size_t R>
  void backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>("Embedding");
    detail::check_grad_shape("Embedding.backward", grad_output.shape(), ctx.shape);
    if (!weight.requires_grad()) return;
    const auto g = grad_output.contiguous();
    const auto& ids = ctx.ids;
    T* gw = weight.grad_buffer().data();
    // Several tokens may share an id, so tokens are not split between chunks; the embedding dim is, and
    // each gradient element still receives its terms in token order.
    const index_t grain = backend::column_reduction_grain(dim_, ids.numel());
    backend::parallel_for(dim_, grain, [&](index_t begin, index_t end) {
      for (index_t k = 0, n = ids.numel(); k < n; ++k) {
        const std::int64_t id = ids(k);
        if (padding_idx_ && id == *padding_idx_) continue;
        const T* gr = g.data() + k * dim_;
        T* row = gw + id * dim_;
        for (index_t j = begin; j < end; ++j) row[j] += gr[j];
      }
    });
  }

 private:
  template <std::size_t R>
  [[noreturn]] void throw_bad_id(std::int64_t id, index_t flat_index, const Shape<R>& shape) const {
    Shape<R> idx{};
    for (std::size_t d = R; d-- > 0;) {
      idx[d] = flat_index % shape[d];
      flat_index /= shape[d];
    }
    throw std::out_of_range("Embedding.forward: id " + std::to_string(id) + " at index " + shape_string(idx) +
                            " is out of range for a vocabulary of size " + std::to_string(num_) +
                            " (valid ids are 0 to " + std::to_string(num_ - 1) + ")");
  }

  struct Context {
    Tensor<std::int64_t, 1> ids;  // (N)
    std::vector<index_t> shape;   // the output's shape
  };
  index_t num_, dim_;
  std::optional<index_t> padding_idx_;
  Bf16Matrix weight_bf16_;  // (C, V) column-major, when to_bf16_weights was called
  PackedMatrix weight_packed_;  // (C, V) packed by the tied output layer, when use_packed_table was called
};

// A learned absolute positional embedding (GPT-2's wpe, BERT's position_embeddings): a table (L, C) whose
// first T rows are added to a (B, T, C) input, row t to every token at position start + t. Initialised as
// nn.Embedding(max_len, dim). Parameter: "weight".
template <floating_element T>
class LearnedPositionalEmbedding : public Module<T> {
 public:
  LearnedPositionalEmbedding(index_t max_len, index_t dim, Generator& gen = default_generator())
      : table_(max_len, dim, std::nullopt, gen) {}

  Parameter<T, 2>& weight() noexcept { return table_.weight; }
  index_t max_len() const noexcept { return table_.num_embeddings(); }

  std::string type_name() const override { return "LearnedPositionalEmbedding"; }
  std::string extra_repr() const override { return table_.extra_repr(); }
  void register_members(Members<T>& m) override { m.parameter("weight", table_.weight); }

  // (..., T, C) -> (..., T, C): x + weight[start : start + T]. Positions past max_len throw std::out_of_range.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x, index_t start = 0) const {
    static_assert(R >= 2, "LearnedPositionalEmbedding.forward: the input needs (T, C) as its last dims");
    const index_t len = x.shape()[R - 2];
    if (x.shape()[R - 1] != table_.embedding_dim())
      throw shape_error("LearnedPositionalEmbedding.forward: input " + shape_string(x.shape()) +
                        " x weight " + shape_string(table_.weight.shape()) + ": last dims differ");
    if (start < 0 || start + len > max_len())
      throw std::out_of_range("LearnedPositionalEmbedding.forward: positions " + std::to_string(start) + ".." +
                              std::to_string(start + len - 1) + " exceed max_len " + std::to_string(max_len()));
    if (this->records_for_backward())
      this->save_for_backward(Context{start, len, std::vector<index_t>(x.shape().begin(), x.shape().end())});
    return add(x, table_.weight.data.narrow(0, start, len));
  }

  // Returns grad_output (the input's gradient); weight.grad[start + t] += sum of grad_output over the
  // leading dims at position t.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto c = this->template take_saved<Context>("LearnedPositionalEmbedding");
    detail::check_grad_shape("LearnedPositionalEmbedding.backward", grad_output.shape(), c.shape);
    if (!table_.weight.requires_grad()) return grad_output;
    const index_t dim = table_.embedding_dim();
    const auto g = grad_output.reshape(Shape<3>{-1, c.len, dim});  // (B', T, C)
    auto rows = table_.weight.grad_buffer().narrow(0, c.start, c.len);
    rows.copy_(add(rows, sum(g, 0)));
    return grad_output;
  }

 private:
  struct Context {
    index_t start, len;
    std::vector<index_t> shape;
  };
  Embedding<T> table_;
};

// BertEmbeddings options, with Hugging Face's BertConfig names and defaults. The seed's BERTEmbedding
// (listing 1.30) is {.vocab_size = V, .hidden_size = 256, .max_position_embeddings = max_len,
// .pad_token_id = PAD_ID, .layer_norm_eps = 1e-5}.
struct BertEmbeddingsOptions {
  index_t vocab_size = 30522;
  index_t hidden_size = 768;
  index_t max_position_embeddings = 512;
  index_t type_vocab_size = 2;
  std::optional<index_t> pad_token_id = 0;  // padding_idx of the word embeddings
  double layer_norm_eps = 1e-12;
  double hidden_dropout_prob = 0.1;
};

// BERT's input embeddings: word(ids) + position(0..T-1) + token_type(segment ids), then LayerNorm and
// Dropout. Parameters (HF state-dict names): word_embeddings.weight, position_embeddings.weight,
// token_type_embeddings.weight, LayerNorm.weight, LayerNorm.bias. Built in that order from `gen` (the
// order of both the seed's module and HF's), so a manual_seed'ed construction equals PyTorch's; dropout
// draws from current_generator() at forward time.
template <floating_element T>
class BertEmbeddings : public Module<T> {
 public:
  explicit BertEmbeddings(const BertEmbeddingsOptions& o = {}, Generator& gen = default_generator())
      : word_embeddings(o.vocab_size, o.hidden_size, o.pad_token_id, gen),
        position_embeddings(o.max_position_embeddings, o.hidden_size, std::nullopt, gen),
        token_type_embeddings(o.type_vocab_size, o.hidden_size, std::nullopt, gen),
        layer_norm(o.hidden_size, o.layer_norm_eps),
        dropout(o.hidden_dropout_prob) {}

  // All zeros (LayerNorm 1 / 0) and nothing drawn: for a model that initialises or loads its weights next.
  BertEmbeddings(const BertEmbeddingsOptions& o, skip_init_t)
      : word_embeddings(o.vocab_size, o.hidden_size, o.pad_token_id, skip_init),
        position_embeddings(o.max_position_embeddings, o.hidden_size, std::nullopt, skip_init),
        token_type_embeddings(o.type_vocab_size, o.hidden_size, std::nullopt, skip_init),
        layer_norm(o.hidden_size, o.layer_norm_eps),
        dropout(o.hidden_dropout_prob) {}

  Embedding<T> word_embeddings;        // (V, C)
  Embedding<T> position_embeddings;    // (max_position_embeddings, C)
  Embedding<T> token_type_embeddings;  // (type_vocab_size, C)
  LayerNorm<T> layer_norm;             // named "LayerNorm" in named_parameters
  Dropout<T> dropout;

  // input_ids (B, T), token_type_ids (B, T) or none (all segment 0) -> (B, T, C).
  Tensor<T, 3> forward(const Tensor<std::int64_t, 2>& input_ids,
                       const std::optional<Tensor<std::int64_t, 2>>& token_type_ids = std::nullopt) const {
    const index_t b = input_ids.shape()[0], t = input_ids.shape()[1];
    if (t > position_embeddings.num_embeddings())
      throw std::out_of_range("BertEmbeddings.forward: sequence length " + std::to_string(t) +
                              " exceeds max_position_embeddings " +
                              std::to_string(position_embeddings.num_embeddings()));
    if (token_type_ids && token_type_ids->shape() != input_ids.shape())
      throw shape_error("BertEmbeddings.forward: token_type_ids " + shape_string(token_type_ids->shape()) +
                        " and input_ids " + shape_string(input_ids.shape()) + " differ in shape");
    auto positions = Tensor<std::int64_t, 2>::empty({b, t});  // (B, T): 0..T-1 in every row
    for (index_t i = 0; i < b; ++i)
      for (index_t j = 0; j < t; ++j) positions(i, j) = j;
    const auto types = token_type_ids ? *token_type_ids : zeros<std::int64_t>(Shape<2>{b, t});
    auto e = word_embeddings.forward(input_ids);                  // (B, T, C)
    e = add(e, position_embeddings.forward(positions));
    e = add(e, token_type_embeddings.forward(types));
    return dropout.forward(layer_norm.forward(e));
  }

  // Accumulates every parameter's gradient; ids are not differentiable, so nothing is returned.
  void backward(const Tensor<T, 3>& grad_output) {
    const auto g = layer_norm.backward(dropout.backward(grad_output));  // (B, T, C)
    word_embeddings.backward(g);
    position_embeddings.backward(g);
    token_type_embeddings.backward(g);
  }

  std::string type_name() const override { return "BertEmbeddings"; }
  void register_members(Members<T>& m) override {
    m.child("word_embeddings", word_embeddings);
    m.child("position_embeddings", position_embeddings);
    m.child("token_type_embeddings", token_type_embeddings);
    m.child("LayerNorm", layer_norm);
    m.child("dropout", dropout);
  }
};

}  // namespace eigenformer::nn
