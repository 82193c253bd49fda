// BERT (Devlin et al. 2019) as Hugging Face's modeling_bert computes it, with its module tree and state-dict
// names, so a downloaded checkpoint maps onto named_parameters() one to one (models/pretrained_bert.hpp reads
// the files; this header has no file or JSON code):
//
//   BertModel { embeddings: BertEmbeddings { word_embeddings, position_embeddings, token_type_embeddings,
//                                            LayerNorm, dropout },
//               encoder: BertEncoder { layer: ModuleList<BertLayer> },
//               pooler: BertPooler { dense, activation: Tanh } }          (the pooler only with add_pooling_layer)
//   BertLayer { attention: BertAttention { self: BertSelfAttention { query, key, value, dropout },
//                                           output: BertSelfOutput { dense, LayerNorm, dropout } },
//               intermediate: BertIntermediate { dense, intermediate_act_fn },
//               output: BertOutput { dense, LayerNorm, dropout } }
//   BertForMaskedLM { bert: BertModel (no pooler), cls: BertOnlyMLMHead { predictions: BertLMPredictionHead {
//                     transform: BertPredictionHeadTransform { dense, transform_act_fn, LayerNorm },
//                     decoder: the word embeddings, tied; bias (V) } } }
//   BertForSequenceClassification { bert: BertModel, dropout, classifier: Linear(C, num_labels) }
//
// Computation of one (post-LN) layer, x (B, T, C) and the padding mask m (B, T):
//   a = LayerNorm(x + dropout(dense(attention(x, m))))          attention.output
//   y = LayerNorm(a + dropout(dense(act(dense(a)))))             intermediate, output
// attention: query, key and value Linears write side by side into one (B, T, 3C) buffer, which is the
// layout of the library's one attention core (nn::fused_attention): scores q k^T / sqrt(HS), padded keys
// hidden, softmax, dropout on the weights, context. Hugging Face adds (1 - mask) * finfo.min to the
// scores where we give padded keys weight exactly 0: the same weights whenever a row has a real key, which
// every row of a batch does (a sequence is at least [CLS]).
//
// Pre-LN (BertConfig::pre_layer_norm, not a Hugging Face option): the seed-000 "BERT from scratch" encoder
// normalises before each sublayer instead of after, with the same parameters in the same places:
//   a = x + dropout(attention.output.dense(attention(attention.output.LayerNorm(x), m)))
//   y = a + dropout(output.dense(act(intermediate.dense(output.LayerNorm(a)))))
// and no final LayerNorm. With add_pooling_layer false, BertForSequenceClassification classifies the [CLS]
// hidden state itself (the seed's `out[:, 0]`), else the pooler's tanh(dense([CLS])).
//
// Padding: attention_mask (B, T), 1 for a token and 0 for padding, as a tokenizer's batch gives it; padded
// positions are hidden as keys, so every real token of a padded batch gets what it gets alone (to float
// rounding). The padded positions' own outputs are computed and are meaningless, as in PyTorch.
//
// Dropout (training mode only) draws from eigenformer::current_generator() in Hugging Face's forward order:
// the embeddings, then per layer the attention weights, attention.output, output; then the classifier's.
//
// Initialisation (Hugging Face's _init_weights): Linear and Embedding weights N(0, initializer_range),
// biases 0, LayerNorm 1 / 0, the padding row of the word embeddings 0. Drawn once each, in
// named_parameters() order, from the generator given to the constructor.
//
// Threads: an eval-mode or InferenceMode forward only reads the model, so one model serves many threads.
//
// Weights for inference (each model's methods): pack_weights() keeps every weight matrix also in the packed
// kernel's order (q | k | v side by side), and unpack_weights() undoes it; to_bf16_weights() holds the Linear
// weights and the word embeddings as bfloat16 (tensor/bf16.hpp), beside the float ones or, with
// FloatWeights::release, instead of them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "eigenformer/models/detail/residual.hpp"
#include "eigenformer/models/no_init.hpp"
#include "eigenformer/models/tied_lm_head.hpp"
#include "eigenformer/nn/activation.hpp"
#include "eigenformer/nn/attention.hpp"
#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/embedding.hpp"
#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/layernorm.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/nn/module_list.hpp"
#include "eigenformer/nn/pack_weights.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/tensor.hpp"
#include "eigenformer/tensor/allocator.hpp"
#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/bf16.hpp"
#include "eigenformer/train/losses.hpp"

namespace eigenformer::models {

// Hugging Face's BertConfig (config.json names) with its defaults, which are bert-base-uncased's.
struct BertConfig {
  index_t vocab_size = 30522;
  index_t hidden_size = 768;
  index_t num_hidden_layers = 12;
  index_t num_attention_heads = 12;
  index_t intermediate_size = 3072;
  std::string hidden_act = "gelu";  // gelu, gelu_new, gelu_pytorch_tanh or relu
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  std::optional<double> classifier_dropout;  // null: hidden_dropout_prob
  index_t max_position_embeddings = 512;
  index_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  std::optional<index_t> pad_token_id = 0;
  // Accepted only at their defaults: other values change the computation in ways this model does not do.
  std::string position_embedding_type = "absolute";
  bool is_decoder = false;
  // Sequence classification: the number of classes and their names (index = class id). An empty id2label
  // means Hugging Face's defaults, "LABEL_0", "LABEL_1", ...
  index_t num_labels = 2;
  std::vector<std::string> id2label;
  // eigenformer's own, not in Hugging Face's configs (the seed-000 encoder; see the top of this file).
  bool pre_layer_norm = false;
  bool add_pooling_layer = true;

  static BertConfig bert_base_uncased() { return {}; }
  static BertConfig bert_large_uncased() {
    BertConfig c;
    c.hidden_size = 1024;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 16;
    c.intermediate_size = 4096;
    return c;
  }

  index_t head_dim() const noexcept { return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0; }
  double classifier_dropout_prob() const noexcept { return classifier_dropout.value_or(hidden_dropout_prob); }
  // The name of class `id`: id2label's, else "LABEL_<id>".
  std::string label(index_t id) const {
    if (id < 0 || id >= num_labels)
      throw std::out_of_range("BertConfig.label: class " + std::to_string(id) + " is out of range for num_labels " +
                              std::to_string(num_labels));
    return id2label.empty() ? "LABEL_" + std::to_string(id) : id2label[static_cast<std::size_t>(id)];
  }
  // The class id of a label name (label2id), or -1.
  index_t label_id(const std::string& name) const {
    for (index_t i = 0; i < num_labels; ++i)
      if (label(i) == name) return i;
    return -1;
  }

  // Throws std::invalid_argument naming the first field that cannot make a model.
  void validate() const {
    auto positive = [](const char* name, index_t v) {
      if (v <= 0) throw std::invalid_argument(std::string("BertConfig: ") + name + " must be positive, got " + std::to_string(v));
    };
    positive("vocab_size", vocab_size);
    positive("hidden_size", hidden_size);
    positive("num_hidden_layers", num_hidden_layers);
    positive("num_attention_heads", num_attention_heads);
    positive("intermediate_size", intermediate_size);
    positive("max_position_embeddings", max_position_embeddings);
    positive("type_vocab_size", type_vocab_size);
    positive("num_labels", num_labels);
    if (hidden_size % num_attention_heads != 0)
      throw std::invalid_argument("BertConfig: hidden_size " + std::to_string(hidden_size) +
                                  " is not divisible by num_attention_heads " + std::to_string(num_attention_heads) +
                                  " (each head gets hidden_size / num_attention_heads channels)");
    auto probability = [](const char* name, double p) {
      if (!(p >= 0.0 && p <= 1.0))
        throw std::invalid_argument(std::string("BertConfig: ") + name + " must be between 0 and 1, got " + std::to_string(p));
    };
    probability("hidden_dropout_prob", hidden_dropout_prob);
    probability("attention_probs_dropout_prob", attention_probs_dropout_prob);
    if (classifier_dropout) probability("classifier_dropout", *classifier_dropout);
    if (!(layer_norm_eps >= 0.0))
      throw std::invalid_argument("BertConfig: layer_norm_eps must be >= 0, got " + std::to_string(layer_norm_eps));
    if (!(initializer_range >= 0.0))
      throw std::invalid_argument("BertConfig: initializer_range must be >= 0, got " + std::to_string(initializer_range));
    if (pad_token_id && (*pad_token_id < 0 || *pad_token_id >= vocab_size))
      throw std::invalid_argument("BertConfig: pad_token_id " + std::to_string(*pad_token_id) +
                                  " is out of range for vocab_size " + std::to_string(vocab_size));
    if (position_embedding_type != "absolute")
      throw std::invalid_argument("BertConfig: position_embedding_type \"" + position_embedding_type +
                                  "\" is not supported (only \"absolute\": learned positions added to the tokens)");
    if (is_decoder)
      throw std::invalid_argument("BertConfig: is_decoder true is not supported (BERT here is an encoder; a "
                                  "decoder would need causal attention and cross-attention)");
    if (!id2label.empty() && static_cast<index_t>(id2label.size()) != num_labels)
      throw std::invalid_argument("BertConfig: id2label names " + std::to_string(id2label.size()) +
                                  " classes but num_labels is " + std::to_string(num_labels));
    try {
      (void)nn::activation_kind(hidden_act);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("BertConfig: hidden_act: ") + e.what());
    }
  }
};

// What BertModel::forward returns (Hugging Face's BaseModelOutputWithPooling).
template <floating_element T>
struct BertModelOutput {
  Tensor<T, 3> last_hidden_state;  // (B, T, C)
  Tensor<T, 2> pooler_output;      // (B, C): tanh(dense(hidden[:, 0])); empty without a pooler
  std::vector<Tensor<T, 4>> attentions{};  // with output_attentions: each layer's weights (B, NH, T, T)
};

namespace detail::bert {

template <floating_element T>
nn::Linear<T> linear(index_t in, index_t out) {
  return nn::Linear<T>(in, out, true, nn::skip_init);
}

inline nn::BertEmbeddingsOptions embeddings_options(const BertConfig& c) {
  return {.vocab_size = c.vocab_size,
          .hidden_size = c.hidden_size,
          .max_position_embeddings = c.max_position_embeddings,
          .type_vocab_size = c.type_vocab_size,
          .pad_token_id = c.pad_token_id,
          .layer_norm_eps = c.layer_norm_eps,
          .hidden_dropout_prob = c.hidden_dropout_prob};
}

// Hugging Face's _init_weights over a whole model, in named_parameters() order.
template <floating_element T>
void init_weights(nn::Module<T>& model, const BertConfig& c, nn::Embedding<T>& word_embeddings, Generator& gen) {
  for (auto& p : model.named_parameters()) {
    const std::string& name = p.name;
    const bool layer_norm = name.find("LayerNorm.") != std::string::npos;
    const bool is_bias = name == "bias" || (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
    if (layer_norm) p.data.fill_(is_bias ? T(0) : T(1));
    else if (is_bias) p.data.fill_(T(0));
    else normal_(p.data, 0.0, c.initializer_range, gen);
  }
  if (c.pad_token_id) word_embeddings.weight.data.select(0, *c.pad_token_id).fill_(T(0));
}

inline const BertConfig& checked(const BertConfig& c) {
  c.validate();
  return c;
}

}  // namespace detail::bert

// Multi-head self-attention with separate query, key and value Linears (Hugging Face's BertSelfAttention):
// hidden (B, T, C) -> the heads' contexts side by side (B, T, C), before the output projection.
template <floating_element T>
class BertSelfAttention : public nn::Module<T> {
 public:
  explicit BertSelfAttention(const BertConfig& c)
      : query(detail::bert::linear<T>(c.hidden_size, c.hidden_size)),
        key(detail::bert::linear<T>(c.hidden_size, c.hidden_size)),
        value(detail::bert::linear<T>(c.hidden_size, c.hidden_size)),
        dropout(c.attention_probs_dropout_prob),
        dim_(c.hidden_size),
        heads_(c.num_attention_heads) {}

  nn::Linear<T> query, key, value;  // (C, C) each
  nn::Dropout<T> dropout;           // on the attention weights; its p is what the attention core applies

  std::string type_name() const override { return "BertSelfAttention"; }
  void register_members(nn::Members<T>& m) override {
    m.child("query", query);
    m.child("key", key);
    m.child("value", value);
    m.child("dropout", dropout);
  }

  // `mask` (B, T): true for a token, false for padding (hidden as a key); nullptr = no padding.
  // `weights`, when given, receives the attention weights (B, NH, T, T) before dropout.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<bool, 2>* mask, Tensor<T, 4>* weights = nullptr) const {
    const index_t b = x.shape()[0], t = x.shape()[1];
    if (x.shape()[2] != dim_)
      throw shape_error("BertSelfAttention.forward: hidden states " + shape_string(x.shape()) + " do not end in hidden_size " +
                        std::to_string(dim_));
    const auto x2 = x.reshape(Shape<2>{b * t, dim_});
    // q | k | v written side by side: the fused layout the attention core reads in place.
    auto qkv = Tensor<T, 2>::empty({b * t, 3 * dim_});
    if (!project_packed_qkv(x2, qkv)) {
      const nn::Linear<T>* projections[3] = {&query, &key, &value};
      for (index_t i = 0; i < 3; ++i) {
        auto out = qkv.narrow(1, i * dim_, dim_);
        const auto& lin = *projections[i];
        const backend::Epilogue<T> epilogue{lin.bias ? &lin.bias->data : nullptr, backend::Activation::none};
        nn::detail::dense_product_into(x2, lin.weight.data.t(), lin.prepared_weight(), out, epilogue);
      }
    }
    std::optional<Context> ctx;
    if (this->records_for_backward()) ctx.emplace(Context{x2, {}});
    const double p = this->is_training() ? dropout.p() : 0.0;
    auto merged = nn::fused_attention(qkv.view(Shape<3>{b, t, 3 * dim_}), {.num_heads = heads_, .dropout_p = p},
                                      {.key_padding_mask = mask, .weights = weights,
                                       .context = ctx ? &ctx->attention : nullptr});
    if (ctx) this->save_for_backward(std::move(*ctx));
    return merged;
  }

  // The query, key and value weights packed side by side for inference (PackedMatrix::side_by_side): one
  // product of 3C columns then reads the hidden states once where three products of C would each pack them
  // again, with the same bits. 1.10x on BERT-base's three products at batch 8 and 1.12x at batch 1 (128
  // tokens, 2 threads, AMD Zen 5). Replaces the three Linears' own packed copies; like them a snapshot, to
  // be taken again after the weights change. Only when all three have a bias or none has. FloatWeights::release
  // frees the three float weights once packed (inference only, as nn::Linear::pack_weights): every
  // projection, of any number of rows, then reads the side-by-side copy.
  void pack_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    const int biases = int(query.bias.has_value()) + int(key.bias.has_value()) + int(value.bias.has_value());
    if (biases % 3 != 0 || qkv_held_only_packed()) return;
    if (query.weight.float_released() || key.weight.float_released() || value.weight.float_released())
      throw std::logic_error(std::string("BertSelfAttention.pack_weights: the query, key and value weights are held only as ") +
                             query.weight.held_as() + ", so there are no float values to pack");
    pack_side_by_side();
    if (qkv_packed_.empty()) return;
    query.unpack_weights();
    key.unpack_weights();
    value.unpack_weights();
    if (floats == FloatWeights::release)
      for (nn::Linear<T>* lin : {&query, &key, &value}) lin->weight.release_float_(eigenformer::detail::held_as_packed);
  }
  // Drops the side-by-side copy; weights it held alone get their float values back from it first, bit for bit.
  void unpack_weights()
    requires std::is_same_v<T, float>
  {
    if (qkv_held_only_packed()) {
      // Packed as [Wq^T | Wk^T | Wv^T] (C, 3C): each weight is a run of its columns.
      nn::Linear<T>* parts[3] = {&query, &key, &value};
      for (index_t i = 0; i < 3; ++i) parts[i]->weight.restore_float_(qkv_packed_.transposed_columns(i * dim_, dim_));
    }
    qkv_packed_ = PackedMatrix();
    qkv_bias_ = Tensor<T, 1>();
  }
  // The side-by-side packed copy, or null before pack_weights() (or where there is no packed kernel:
  // backend::cpu_isa()).
  const PackedMatrix* packed_qkv_weight() const noexcept { return qkv_packed_.empty() ? nullptr : &qkv_packed_; }

  // The three weights held as bfloat16 (nn::Linear::to_bf16_weights). The side-by-side packed copy, if any,
  // is packed again from the rounded values (FloatWeights::keep) or dropped with the float weights
  // (FloatWeights::release: every product then reads the bfloat16 copies).
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    if (qkv_held_only_packed())
      throw std::logic_error(std::string("BertSelfAttention.to_bf16_weights: the query, key and value weights are held "
                                         "only as ") + eigenformer::detail::held_as_packed +
                             ", so there are no float values to round; convert a model that keeps its float weights");
    query.to_bf16_weights(floats);
    key.to_bf16_weights(floats);
    value.to_bf16_weights(floats);
    if (qkv_packed_.empty()) return;
    if (floats == FloatWeights::release) qkv_packed_ = PackedMatrix(), qkv_bias_ = Tensor<T, 1>();
    else pack_side_by_side();
  }

  // dL/dx from dL/d(contexts); accumulates the three projections' gradients.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    const auto ctx = this->template take_saved<Context>("BertSelfAttention");
    const index_t n = ctx.x.shape()[0];
    const auto d_qkv = nn::fused_attention_backward(ctx.attention, grad_output);  // (B, T, 3C)
    const index_t b = d_qkv.shape()[0], t = d_qkv.shape()[1];
    const auto d2 = d_qkv.reshape(Shape<2>{n, 3 * dim_});
    auto dx = Tensor<T, 2>::empty({n, dim_});
    nn::Linear<T>* projections[3] = {&query, &key, &value};
    for (index_t i = 0; i < 3; ++i) {
      auto& lin = *projections[i];
      const auto g = d2.narrow(1, i * dim_, dim_);  // (N, C)
      if (lin.weight.requires_grad()) {
        auto dw = lin.weight.grad_buffer();
        backend::gemm(g.t(), ctx.x, dw, T(1), T(1));
      }
      if (lin.bias && lin.bias->requires_grad()) backend::add_column_sums(g, lin.bias->grad_buffer().data());
      backend::gemm(g, lin.weight.data, dx, T(1), i == 0 ? T(0) : T(1));
    }
    return dx.view(Shape<3>{b, t, dim_});
  }

 private:
  // The three float weights freed by pack_weights(FloatWeights::release): qkv_packed_ is all there is (a
  // release by to_bf16_weights drops qkv_packed_).
  bool qkv_held_only_packed() const noexcept { return !qkv_packed_.empty() && query.weight.float_released(); }

  // (C, 3C): the weights as the product reads them, side by side.
  std::vector<Tensor<T, 2>> qkv_weights() const {
    return {query.weight.data.t(), key.weight.data.t(), value.weight.data.t()};
  }

  // The side-by-side copy and [bq | bk | bv], concatenated here once rather than on every forward (where it was
  // the forward's only heap allocation once the allocator's caches were warm: 12 a BERT-base forward).
  void pack_side_by_side() {
    if constexpr (std::is_same_v<T, float>) {
      qkv_packed_ = PackedMatrix::side_by_side(qkv_weights());
      qkv_bias_ = query.bias && !qkv_packed_.empty()
                      ? cat<T, 1>({query.bias->data, key.bias->data, value.bias->data}, 0)
                      : Tensor<T, 1>();
    }
  }
  // Whether the biases still hold the values concatenated at packing, bit for bit (they are not part of the
  // packed copy's staleness check, so a changed bias is concatenated afresh rather than refused).
  bool qkv_bias_current() const {
    const nn::Linear<T>* parts[3] = {&query, &key, &value};
    for (index_t i = 0; i < 3; ++i) {
      const auto& b = parts[i]->bias->data;
      if (!b.is_contiguous() ||
          std::memcmp(b.data(), qkv_bias_.data() + i * dim_, sizeof(T) * static_cast<std::size_t>(dim_)) != 0)
        return false;
    }
    return true;
  }

  // qkv = x2 [Wq^T | Wk^T | Wv^T] + [bq | bk | bv] as one product from the side-by-side packed copy, when there
  // is one and this forward may read it (inference, enough rows); false otherwise.
  bool project_packed_qkv(const Tensor<T, 2>& x2, Tensor<T, 2>& qkv) const {
    if constexpr (std::is_same_v<T, float>) {
      const bool released = qkv_held_only_packed();
      if (released && this->records_for_backward())
        throw std::logic_error(std::string("BertSelfAttention.forward: the layer is in training mode, but its query, key "
                                           "and value weights are held only as ") + eigenformer::detail::held_as_packed +
                               " and training needs the float weights; call eval(), run under InferenceMode, or train "
                               "a model that keeps its float weights");
      if (!released && (!qkv_packed_.serves(x2.shape()[0]) || this->records_for_backward())) return false;
      if (!released && !qkv_packed_.matches(qkv_weights()))
        throw std::logic_error("BertSelfAttention.forward: the query, key or value weight has changed since it was "
                               "packed; call pack_weights() again after changing weights");
      if (!query.bias) {
        backend::gemm(x2, qkv_packed_, qkv);
      } else if (qkv_bias_current()) {
        backend::gemm(x2, qkv_packed_, qkv, {&qkv_bias_, backend::Activation::none});
      } else {
        const auto bias = cat<T, 1>({query.bias->data, key.bias->data, value.bias->data}, 0);
        backend::gemm(x2, qkv_packed_, qkv, {&bias, backend::Activation::none});
      }
      return true;
    } else {
      return false;
    }
  }

  struct Context {
    Tensor<T, 2> x;  // (B T, C), the input (a handle)
    nn::FusedAttentionContext<T> attention;
  };
  index_t dim_, heads_;
  PackedMatrix qkv_packed_;
  Tensor<T, 1> qkv_bias_;  // [bq | bk | bv] as they were at packing (empty without biases or a packed copy)
};

namespace detail::bert {
// What the models' pack_weights() do: each self-attention's query, key and value side by side, then every
// other Linear's weight on its own (nn::pack_weights). Never both for one weight: freed copies stay in the
// allocator's cache, so packing the three alone first and dropping them raised BERT-base's peak RSS by 93 MB.
inline void pack_weights(nn::Module<float>& root, FloatWeights floats) {
  std::vector<const nn::Module<float>*> packed_together;
  root.apply([&packed_together, floats](nn::Module<float>& m) {
    if (auto* attention = dynamic_cast<BertSelfAttention<float>*>(&m)) {
      attention->pack_weights(floats);
      if (attention->packed_qkv_weight())
        packed_together.insert(packed_together.end(), {&attention->query, &attention->key, &attention->value});
      if (floats == FloatWeights::release) release_cached_memory();
    }
  });
  nn::pack_weights(root, packed_together, floats);
}
// What the models' unpack_weights() do: the side-by-side copies first (their three Linears hold no copy of
// their own), then every other Linear.
inline void unpack_weights(nn::Module<float>& root) {
  root.apply([](nn::Module<float>& m) {
    if (auto* attention = dynamic_cast<BertSelfAttention<float>*>(&m)) attention->unpack_weights();
  });
  nn::unpack_weights(root);
}

// What the models' to_bf16_weights() do: each self-attention's query, key and value (with their side-by-side
// packed copy), every other Linear and the word embeddings held as bfloat16; position and token-type
// embeddings, biases and LayerNorm stay float. Released weights go back to the system after each layer, not
// to the allocator's cache, so that the peak stays at the float model plus one layer's copy.
inline void to_bf16_weights(nn::Module<float>& root, nn::Embedding<float>& word_embeddings, FloatWeights floats) {
  const auto settle = [floats] {
    if (floats == FloatWeights::release) release_cached_memory();
  };
  std::vector<const nn::Module<float>*> converted;
  root.apply([&](nn::Module<float>& m) {
    if (auto* attention = dynamic_cast<BertSelfAttention<float>*>(&m)) {
      attention->to_bf16_weights(floats);
      converted.insert(converted.end(), {&attention->query, &attention->key, &attention->value});
      settle();
    }
  });
  root.apply([&](nn::Module<float>& m) {
    auto* linear = dynamic_cast<nn::Linear<float>*>(&m);
    if (!linear || std::find(converted.begin(), converted.end(), linear) != converted.end()) return;
    linear->to_bf16_weights(floats);
    settle();
  });
  word_embeddings.to_bf16_weights(floats);
  settle();
}
}  // namespace detail::bert

// A sublayer's output: dense, dropout, the residual and the LayerNorm (Hugging Face's BertSelfOutput and
// BertOutput, which differ only in their name and input width).
//   post-LN: y = LayerNorm(dropout(dense(h)) + input)
//   pre-LN:  y = input + dropout(dense(h)), LayerNorm having been applied before the sublayer by its caller
template <floating_element T>
class BertResidualOutput : public nn::Module<T> {
 public:
  BertResidualOutput(const BertConfig& c, index_t in_features, const char* name)
      : dense(detail::bert::linear<T>(in_features, c.hidden_size)),
        LayerNorm(c.hidden_size, c.layer_norm_eps),
        dropout(c.hidden_dropout_prob),
        pre_layer_norm_(c.pre_layer_norm),
        name_(name) {}

  nn::Linear<T> dense;
  nn::LayerNorm<T> LayerNorm;  // Hugging Face's attribute name, kept for the state-dict keys
  nn::Dropout<T> dropout;

  std::string type_name() const override { return name_; }
  void register_members(nn::Members<T>& m) override {
    m.child("dense", dense);
    m.child("LayerNorm", LayerNorm);
    m.child("dropout", dropout);
  }

  // h: (B, T, in_features), or its rows (B * T, in_features) as BertIntermediate::forward_rows gives them.
  template <std::size_t R>
  Tensor<T, 3> forward(const Tensor<T, R>& h, const Tensor<T, 3>& input) const {
    static_assert(R == 2 || R == 3, "BertOutput.forward: the hidden layer is (B, T, in) or (B * T, in)");
    Tensor<T, 3> dense_out;
    if constexpr (R == 2) dense_out = dense.forward(h).view(input.shape());
    else dense_out = dense.forward(h);
    auto y = dropout.forward(dense_out);
    if (pre_layer_norm_) return detail::add_into(y, input);
    return LayerNorm.add_forward(std::move(y), input);  // the sum and its LayerNorm in one pass, over y
  }

  // {dL/dh, dL/dinput} from dL/dy.
  std::pair<Tensor<T, 3>, Tensor<T, 3>> backward(const Tensor<T, 3>& grad_output) {
    const auto g = pre_layer_norm_ ? grad_output : LayerNorm.backward(grad_output);
    return {dense.backward(dropout.backward(g)), g};
  }

 private:
  bool pre_layer_norm_;
  const char* name_;
};

// Self-attention and its output sublayer (Hugging Face's BertAttention).
template <floating_element T>
class BertAttention : public nn::Module<T> {
 public:
  explicit BertAttention(const BertConfig& c)
      : self(c), output(c, c.hidden_size, "BertSelfOutput"), pre_layer_norm_(c.pre_layer_norm) {}

  BertSelfAttention<T> self;
  BertResidualOutput<T> output;

  std::string type_name() const override { return "BertAttention"; }
  void register_members(nn::Members<T>& m) override {
    m.child("self", self);
    m.child("output", output);
  }

  // `weights`: as BertSelfAttention::forward's.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<bool, 2>* mask, Tensor<T, 4>* weights = nullptr) const {
    if (!pre_layer_norm_) return output.forward(self.forward(x, mask, weights), x);
    return output.forward(self.forward(output.LayerNorm.forward(x), mask, weights), x);
  }

  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    auto [dh, dx] = output.backward(grad_output);
    const auto d_in = self.backward(dh);
    return dx + (pre_layer_norm_ ? output.LayerNorm.backward(d_in) : d_in);
  }

 private:
  bool pre_layer_norm_;
};

// The feed-forward's first half (Hugging Face's BertIntermediate): act(dense(x)), C -> intermediate_size.
template <floating_element T>
class BertIntermediate : public nn::Module<T> {
 public:
  explicit BertIntermediate(const BertConfig& c)
      : dense(detail::bert::linear<T>(c.hidden_size, c.intermediate_size)), intermediate_act_fn(c.hidden_act) {}

  nn::Linear<T> dense;
  nn::Activation<T> intermediate_act_fn;

  std::string type_name() const override { return "BertIntermediate"; }
  void register_members(nn::Members<T>& m) override {
    m.child("dense", dense);
    m.child("intermediate_act_fn", intermediate_act_fn);
  }

  Tensor<T, 3> forward(const Tensor<T, 3>& x) const {
    if (!fuses(x)) return intermediate_act_fn.forward(dense.forward(x));
    // Inference: one gemm with the bias and the activation in its epilogue (one pass over the wide hidden
    // layer, no tensor for the pre-activation).
    const auto h = nn::detail::dense_product(rows_of(x), dense.weight.data.t(), dense.prepared_weight(), epilogue());
    return h.view(Shape<3>{x.shape()[0], x.shape()[1], dense.out_features()});
  }

  // Whether forward runs as one fused product: in inference, on an input of the right width.
  bool fuses(const Tensor<T, 3>& x) const {
    return !this->records_for_backward() && x.shape()[2] == dense.in_features();
  }
  // The fused forward as (B * T, intermediate_size) rows laid out for the product that reads them next
  // (BertOutput's dense; nn::detail::dense_hidden_product), for BertLayer's inference. Only where fuses(x).
  Tensor<T, 2> forward_rows(const Tensor<T, 3>& x) const {
    return nn::detail::dense_hidden_product(rows_of(x), dense.weight.data.t(), dense.prepared_weight(), epilogue());
  }
  Tensor<T, 3> backward(const Tensor<T, 3>& g) { return dense.backward(intermediate_act_fn.backward(g)); }

 private:
  Tensor<T, 2> rows_of(const Tensor<T, 3>& x) const {
    return x.reshape(Shape<2>{x.shape()[0] * x.shape()[1], dense.in_features()});
  }
  backend::Epilogue<T> epilogue() const {
    return {&dense.bias->data, nn::epilogue_activation(intermediate_act_fn.kind())};
  }
};

// One encoder layer (Hugging Face's BertLayer).
template <floating_element T>
class BertLayer : public nn::Module<T> {
 public:
  explicit BertLayer(const BertConfig& c)
      : attention(c), intermediate(c), output(c, c.intermediate_size, "BertOutput"), pre_layer_norm_(c.pre_layer_norm) {}

  BertAttention<T> attention;
  BertIntermediate<T> intermediate;
  BertResidualOutput<T> output;

  std::string type_name() const override { return "BertLayer"; }
  void register_members(nn::Members<T>& m) override {
    m.child("attention", attention);
    m.child("intermediate", intermediate);
    m.child("output", output);
  }

  // `weights`: as BertSelfAttention::forward's.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<bool, 2>* mask, Tensor<T, 4>* weights = nullptr) const {
    const auto a = attention.forward(x, mask, weights);
    const auto in = pre_layer_norm_ ? output.LayerNorm.forward(a) : a;
    if (!this->records_for_backward() && intermediate.fuses(in)) return output.forward(intermediate.forward_rows(in), a);
    return output.forward(intermediate.forward(in), a);
  }

  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    auto [di, da] = output.backward(grad_output);
    const auto d_in = intermediate.backward(di);
    return attention.backward(da + (pre_layer_norm_ ? output.LayerNorm.backward(d_in) : d_in));
  }

 private:
  bool pre_layer_norm_;
};

// The stack of layers (Hugging Face's BertEncoder).
template <floating_element T>
class BertEncoder : public nn::Module<T> {
 public:
  explicit BertEncoder(const BertConfig& c) {
    layer.reserve(static_cast<std::size_t>(c.num_hidden_layers));
    for (index_t i = 0; i < c.num_hidden_layers; ++i) layer.emplace_back(c);
  }

  nn::ModuleList<BertLayer<T>> layer;

  std::string type_name() const override { return "BertEncoder"; }
  void register_members(nn::Members<T>& m) override { m.child("layer", layer); }

  // `attentions`, when given, receives every layer's attention weights (B, NH, T, T) before dropout.
  Tensor<T, 3> forward(Tensor<T, 3> x, const Tensor<bool, 2>* mask, std::vector<Tensor<T, 4>>* attentions = nullptr) const {
    if (attentions) attentions->assign(layer.size(), Tensor<T, 4>{});
    for (std::size_t i = 0; i < layer.size(); ++i) x = layer[i].forward(x, mask, attentions ? &(*attentions)[i] : nullptr);
    return x;
  }
  Tensor<T, 3> backward(Tensor<T, 3> g) {
    for (auto it = layer.rbegin(); it != layer.rend(); ++it) g = it->backward(g);
    return g;
  }
};

// tanh(dense(hidden[:, 0])): the [CLS] token's summary of the sequence (Hugging Face's BertPooler).
template <floating_element T>
class BertPooler : public nn::Module<T> {
 public:
  explicit BertPooler(const BertConfig& c) : dense(detail::bert::linear<T>(c.hidden_size, c.hidden_size)) {}

  nn::Linear<T> dense;
  nn::Tanh<T> activation;

  std::string type_name() const override { return "BertPooler"; }
  void register_members(nn::Members<T>& m) override {
    m.child("dense", dense);
    m.child("activation", activation);
  }

  // (B, T, C) -> (B, C).
  Tensor<T, 2> forward(const Tensor<T, 3>& hidden) const {
    if (this->records_for_backward()) this->save_for_backward(Context{hidden.shape()});
    return activation.forward(dense.forward(hidden.select(1, 0).contiguous()));
  }
  // dL/dhidden (B, T, C): the gradient reaches the [CLS] position only.
  Tensor<T, 3> backward(const Tensor<T, 2>& grad_output) {
    const auto ctx = this->template take_saved<Context>("BertPooler");
    auto d = zeros<T>(ctx.shape);
    d.select(1, 0).copy_(dense.backward(activation.backward(grad_output)));
    return d;
  }

 private:
  struct Context {
    Shape<3> shape;
  };
};

// The encoder (Hugging Face's BertModel): embeddings, the layers, the pooler.
template <floating_element T>
class BertModel : public nn::Module<T> {
 public:
  using value_type = T;

  // Initialised as Hugging Face's _init_weights (see the top of this file), drawing from `gen`. Throws
  // std::invalid_argument for an invalid config.
  explicit BertModel(const BertConfig& config, Generator& gen = default_generator()) : BertModel(config, no_init) {
    detail::bert::init_weights(*this, config_, embeddings.word_embeddings, gen);
  }
  // Every weight zero (LayerNorm 1 / 0), nothing drawn: for loading a checkpoint.
  BertModel(const BertConfig& config, no_init_t)
      : embeddings(detail::bert::embeddings_options(detail::bert::checked(config)), nn::skip_init),
        encoder(config),
        config_(config) {
    if (config.add_pooling_layer) pooler.emplace(config);
  }

  nn::BertEmbeddings<T> embeddings;
  BertEncoder<T> encoder;
  std::optional<BertPooler<T>> pooler;

  const BertConfig& config() const noexcept { return config_; }

  // Every weight matrix also kept in the packed kernel's order for inference (nn::pack_weights,
  // tensor/packed_matrix.hpp; each self-attention's query, key and value side by side): same outputs, no
  // repacking per forward, about the weights' memory again. A snapshot: after changing the weights
  // (training, loading), call it again. FloatWeights::release frees each float weight matrix once packed:
  // the packed products at the float model's memory, inference only (nn::Linear::pack_weights says which
  // bits few-row products then have); the embeddings stay float.
  void pack_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    detail::bert::pack_weights(*this, floats);
  }
  // Undoes pack_weights: every packed copy dropped, weights held only packed given back their float values
  // first, bit for bit, so the model can be trained or saved again.
  void unpack_weights()
    requires std::is_same_v<T, float>
  {
    detail::bert::unpack_weights(*this);
  }
  // bfloat16 weight storage for inference (tensor/bf16.hpp): every Linear weight and the word embeddings
  // rounded to bfloat16, as model.to(torch.bfloat16) would round them, with bfloat16 copies that products
  // read; the arithmetic stays float. Biases, LayerNorm, position and token-type embeddings stay float.
  // FloatWeights::keep keeps the rounded float weights too (a snapshot: after changing the weights, call it
  // again). FloatWeights::release frees them layer by layer as their copies are made, leaving about half the
  // float model's memory; the model then serves inference only (training, state_dict, pack_weights refuse,
  // saying why).
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    detail::bert::to_bf16_weights(*this, embeddings.word_embeddings, floats);
  }

  std::string type_name() const override { return "BertModel"; }
  void register_members(nn::Members<T>& m) override {
    m.child("embeddings", embeddings);
    m.child("encoder", encoder);
    if (pooler) m.child("pooler", *pooler);
  }

  // input_ids (B, T); attention_mask (B, T), 1 = token, 0 = padding (none: no padding); token_type_ids
  // (B, T), the segment of each token (none: all 0). Ids out of range, a length beyond
  // max_position_embeddings, masks of another shape or with values other than 0 and 1 throw, naming them.
  // output_attentions (Hugging Face's name) also returns every layer's attention weights, for looking at them.
  BertModelOutput<T> forward(const Tensor<std::int64_t, 2>& input_ids,
                             const std::optional<Tensor<std::int64_t, 2>>& attention_mask = std::nullopt,
                             const std::optional<Tensor<std::int64_t, 2>>& token_type_ids = std::nullopt,
                             bool output_attentions = false) const {
    check_inputs("BertModel.forward", input_ids, attention_mask, token_type_ids);
    const auto mask = attention_mask ? std::optional<Tensor<bool, 2>>(*attention_mask != std::int64_t{0}) : std::nullopt;
    BertModelOutput<T> out;
    out.last_hidden_state = encoder.forward(embeddings.forward(input_ids, token_type_ids), mask ? &*mask : nullptr,
                                            output_attentions ? &out.attentions : nullptr);
    const auto& hidden = out.last_hidden_state;
    if (pooler) out.pooler_output = pooler->forward(hidden);
    return out;
  }

  // Accumulates every gradient from dL/d(last_hidden_state) and, with a pooler, dL/d(pooler_output) (either
  // may be omitted: an empty tensor counts as zeros).
  void backward(const Tensor<T, 3>& grad_last_hidden_state, const Tensor<T, 2>& grad_pooler_output = Tensor<T, 2>{}) {
    if (!pooler && grad_pooler_output.numel() != 0)
      throw std::invalid_argument("BertModel.backward: grad_pooler_output given but the model has no pooler "
                                  "(add_pooling_layer is false)");
    Tensor<T, 3> g = grad_last_hidden_state;
    // Without a pooler gradient the pooler contributes nothing; what its recording forward saved is simply
    // replaced by the next one.
    if (pooler && grad_pooler_output.numel() != 0) {
      const auto d = pooler->backward(grad_pooler_output);
      g = g.numel() == 0 ? d : g + d;
    }
    if (g.numel() == 0)
      throw std::invalid_argument("BertModel.backward: no gradient given (grad_last_hidden_state and "
                                  "grad_pooler_output are both empty)");
    embeddings.backward(encoder.backward(g));
  }

  // The checks of forward, for the heads that call the parts themselves.
  void check_inputs(const char* op, const Tensor<std::int64_t, 2>& ids,
                    const std::optional<Tensor<std::int64_t, 2>>& attention_mask,
                    const std::optional<Tensor<std::int64_t, 2>>& token_type_ids) const {
    const index_t b = ids.shape()[0], t = ids.shape()[1];
    if (b == 0 || t == 0)
      throw std::invalid_argument(std::string(op) + ": input_ids " + shape_string(ids.shape()) +
                                  " is empty; it needs at least one token in each of at least one sequence");
    if (t > config_.max_position_embeddings)
      throw std::out_of_range(std::string(op) + ": sequence length " + std::to_string(t) +
                              " exceeds max_position_embeddings " + std::to_string(config_.max_position_embeddings) +
                              " (the number of learned positions)");
    check_range(op, "input_ids", "token id", ids, config_.vocab_size, "vocab_size");
    if (token_type_ids) {
      check_shape(op, "token_type_ids", *token_type_ids, ids);
      check_range(op, "token_type_ids", "token type", *token_type_ids, config_.type_vocab_size, "type_vocab_size");
    }
    if (attention_mask) {
      check_shape(op, "attention_mask", *attention_mask, ids);
      for (index_t i = 0; i < b; ++i) {
        bool any = false;
        for (index_t j = 0; j < t; ++j) {
          const std::int64_t v = (*attention_mask)(i, j);
          if (v != 0 && v != 1)
            throw std::out_of_range(std::string(op) + ": attention_mask[" + std::to_string(i) + ", " +
                                    std::to_string(j) + "] is " + std::to_string(v) + "; a mask holds 1 (token) or 0 (padding)");
          any = any || v != 0;
        }
        if (!any)
          throw std::invalid_argument(std::string(op) + ": attention_mask row " + std::to_string(i) +
                                      " is all padding; every sequence needs at least one token");
      }
    }
  }

 private:
  static void check_shape(const char* op, const char* what, const Tensor<std::int64_t, 2>& x,
                          const Tensor<std::int64_t, 2>& ids) {
    if (x.shape() != ids.shape())
      throw shape_error(std::string(op) + ": " + what + " " + shape_string(x.shape()) + " and input_ids " +
                        shape_string(ids.shape()) + " differ in shape");
  }
  // `noun` names one value of `what` in the message: "token id 30522 at input_ids[0, 3] is out of range ...".
  static void check_range(const char* op, const char* what, const char* noun, const Tensor<std::int64_t, 2>& x,
                          index_t limit, const char* limit_name) {
    for (index_t i = 0; i < x.shape()[0]; ++i)
      for (index_t j = 0; j < x.shape()[1]; ++j) {
        const std::int64_t v = x(i, j);
        if (v < 0 || v >= limit)
          throw std::out_of_range(std::string(op) + ": " + noun + " " + std::to_string(v) + " at " + what + "[" +
                                  std::to_string(i) + ", " + std::to_string(j) + "] is out of range for " + limit_name +
                                  " " + std::to_string(limit) + " (valid: 0 to " + std::to_string(limit - 1) + ")");
      }
  }

  BertConfig config_;
};

// The masked-LM head's transform (Hugging Face's BertPredictionHeadTransform): LayerNorm(act(dense(x))).
template <floating_element T>
class BertPredictionHeadTransform : public nn::Module<T> {
 public:
  explicit BertPredictionHeadTransform(const BertConfig& c)
      : dense(detail::bert::linear<T>(c.hidden_size, c.hidden_size)),
        transform_act_fn(c.hidden_act),
        LayerNorm(c.hidden_size, c.layer_norm_eps) {}

  nn::Linear<T> dense;
  nn::Activation<T> transform_act_fn;
  nn::LayerNorm<T> LayerNorm;

  std::string type_name() const override { return "BertPredictionHeadTransform"; }
  void register_members(nn::Members<T>& m) override {
    m.child("dense", dense);
    m.child("transform_act_fn", transform_act_fn);
    m.child("LayerNorm", LayerNorm);
  }

  Tensor<T, 3> forward(const Tensor<T, 3>& x) const { return LayerNorm.forward(transform_act_fn.forward(dense.forward(x))); }
  Tensor<T, 3> backward(const Tensor<T, 3>& g) { return dense.backward(transform_act_fn.backward(LayerNorm.backward(g))); }
};

// transform, then logits over the vocabulary with the word embeddings as weight (tied) and a bias of its own
// (Hugging Face's BertLMPredictionHead; its decoder.bias is this bias).
template <floating_element T>
class BertLMPredictionHead : public nn::Module<T> {
 public:
  explicit BertLMPredictionHead(const BertConfig& c)
      : transform(c), decoder(c.hidden_size, c.vocab_size, true), bias(zeros<T>(Shape<1>{c.vocab_size})) {}

  BertPredictionHeadTransform<T> transform;
  TiedLMHead<T> decoder;
  nn::Parameter<T, 1> bias;  // (V)

  std::string type_name() const override { return "BertLMPredictionHead"; }
  void register_members(nn::Members<T>& m) override {
    m.parameter("bias", bias);
    m.child("transform", transform);
    m.child("decoder", decoder);
  }

  Tensor<T, 3> forward(const Tensor<T, 3>& hidden, const Tensor<T, 2>& word_embeddings) const {
    return decoder.forward(transform.forward(hidden), word_embeddings, &bias.data);
  }
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_logits, nn::Parameter<T, 2>& word_embeddings) {
    return transform.backward(decoder.backward(grad_logits, word_embeddings, &bias));
  }
};

// Hugging Face's BertOnlyMLMHead: a wrapper whose one child gives the state-dict keys "cls.predictions.*".
template <floating_element T>
class BertOnlyMLMHead : public nn::Module<T> {
 public:
  explicit BertOnlyMLMHead(const BertConfig& c) : predictions(c) {}

  BertLMPredictionHead<T> predictions;

  std::string type_name() const override { return "BertOnlyMLMHead"; }
  void register_members(nn::Members<T>& m) override { m.child("predictions", predictions); }
};

namespace detail::bert {
inline BertConfig without_pooler(BertConfig c) {
  c.add_pooling_layer = false;
  return c;
}
}  // namespace detail::bert

// BERT with its masked-language-model head (Hugging Face's BertForMaskedLM): logits (B, T, V) at every
// position; the [MASK] positions' rows are the predictions.
template <floating_element T>
class BertForMaskedLM : public nn::Module<T> {
 public:
  using value_type = T;

  explicit BertForMaskedLM(const BertConfig& config, Generator& gen = default_generator())
      : BertForMaskedLM(config, no_init) {
    detail::bert::init_weights(*this, bert.config(), bert.embeddings.word_embeddings, gen);
  }
  BertForMaskedLM(const BertConfig& config, no_init_t) : bert(detail::bert::without_pooler(config), no_init), cls(config) {}

  BertModel<T> bert;
  BertOnlyMLMHead<T> cls;

  const BertConfig& config() const noexcept { return bert.config(); }

  // Every weight matrix also kept in the packed kernel's order for inference (nn::pack_weights,
  // tensor/packed_matrix.hpp; each self-attention's query, key and value side by side): same outputs, no
  // repacking per forward, about the weights' memory again. A snapshot: after changing the weights
  // (training, loading), call it again. FloatWeights::release as BertModel::pack_weights, and the word
  // embeddings' lookups then read their rows out of the tied decoder's packed copy.
  void pack_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    detail::bert::pack_weights(*this, floats);
    pack_tied_decoder(floats);
  }
  // The tied decoder's packed copy of the word embeddings alone (what pack_weights does last); with
  // FloatWeights::release the only copy of the table, whose lookups then read it. For a loader that packs each
  // weight as it is read.
  void pack_tied_decoder(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    auto& words = bert.embeddings.word_embeddings;
    cls.predictions.decoder.pack_weights(words.weight.data, floats);
    if (floats == FloatWeights::release && cls.predictions.decoder.packed_weight()) {
      words.use_packed_table(*cls.predictions.decoder.packed_weight());
      release_cached_memory();
    }
  }
  // Undoes pack_weights: every packed copy dropped, weights held only packed (the word embeddings too) given
  // back their float values first, bit for bit, so the model can be trained or saved again.
  void unpack_weights()
    requires std::is_same_v<T, float>
  {
    bert.embeddings.word_embeddings.use_float_table();
    cls.predictions.decoder.unpack_weights(bert.embeddings.word_embeddings.weight);
    detail::bert::unpack_weights(*this);
  }
  // bfloat16 weight storage, as BertModel::to_bf16_weights; the tied decoder reads the word embeddings'
  // bfloat16 copy, shared, not copied.
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    auto& words = bert.embeddings.word_embeddings;
    detail::bert::to_bf16_weights(*this, words, floats);
    cls.predictions.decoder.use_bf16_weight(*words.bf16_weight(), words.weight.float_released() ? nullptr : &words.weight.data);
  }

  std::string type_name() const override { return "BertForMaskedLM"; }
  void register_members(nn::Members<T>& m) override {
    m.child("bert", bert);
    m.child("cls", cls);
  }

  Tensor<T, 3> forward(const Tensor<std::int64_t, 2>& input_ids,
                       const std::optional<Tensor<std::int64_t, 2>>& attention_mask = std::nullopt,
                       const std::optional<Tensor<std::int64_t, 2>>& token_type_ids = std::nullopt) const {
    const auto hidden = bert.forward(input_ids, attention_mask, token_type_ids).last_hidden_state;
    return cls.predictions.forward(hidden, bert.embeddings.word_embeddings.weight.data);
  }

  // Accumulates every gradient from dL/dlogits (B, T, V); the word embeddings get both of their parts.
  void backward(const Tensor<T, 3>& grad_logits) {
    bert.backward(cls.predictions.backward(grad_logits, bert.embeddings.word_embeddings.weight));
  }
};

// BERT with a classification head (Hugging Face's BertForSequenceClassification): logits (B, num_labels)
// from the pooled [CLS] state (or the raw [CLS] state without a pooler), after dropout.
template <floating_element T>
class BertForSequenceClassification : public nn::Module<T> {
 public:
  using value_type = T;

  explicit BertForSequenceClassification(const BertConfig& config, Generator& gen = default_generator())
      : BertForSequenceClassification(config, no_init) {
    detail::bert::init_weights(*this, bert.config(), bert.embeddings.word_embeddings, gen);
  }
  BertForSequenceClassification(const BertConfig& config, no_init_t)
      : bert(config, no_init),
        dropout(config.classifier_dropout_prob()),
        classifier(detail::bert::linear<T>(config.hidden_size, config.num_labels)) {}

  BertModel<T> bert;
  nn::Dropout<T> dropout;
  nn::Linear<T> classifier;  // (num_labels, C)

  const BertConfig& config() const noexcept { return bert.config(); }
  index_t num_labels() const noexcept { return config().num_labels; }

  // Every weight matrix also kept in the packed kernel's order for inference (nn::pack_weights,
  // tensor/packed_matrix.hpp; each self-attention's query, key and value side by side): same outputs, no
  // repacking per forward, about the weights' memory again. A snapshot: after changing the weights
  // (training, loading), call it again. FloatWeights::release frees each float weight matrix once packed:
  // the packed products at the float model's memory, inference only (nn::Linear::pack_weights says which
  // bits few-row products then have); the embeddings stay float.
  void pack_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    detail::bert::pack_weights(*this, floats);
  }
  // Undoes pack_weights: every packed copy dropped, weights held only packed given back their float values
  // first, bit for bit, so the model can be trained or saved again.
  void unpack_weights()
    requires std::is_same_v<T, float>
  {
    detail::bert::unpack_weights(*this);
  }
  // bfloat16 weight storage, as BertModel::to_bf16_weights (the classifier's weight too).
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    detail::bert::to_bf16_weights(*this, bert.embeddings.word_embeddings, floats);
  }

  std::string type_name() const override { return "BertForSequenceClassification"; }
  void register_members(nn::Members<T>& m) override {
    m.child("bert", bert);
    m.child("dropout", dropout);
    m.child("classifier", classifier);
  }

  // -> logits (B, num_labels).
  Tensor<T, 2> forward(const Tensor<std::int64_t, 2>& input_ids,
                       const std::optional<Tensor<std::int64_t, 2>>& attention_mask = std::nullopt,
                       const std::optional<Tensor<std::int64_t, 2>>& token_type_ids = std::nullopt) const {
    const auto out = bert.forward(input_ids, attention_mask, token_type_ids);
    const auto summary = bert.pooler ? out.pooler_output : out.last_hidden_state.select(1, 0).contiguous();
    if (this->records_for_backward()) this->save_for_backward(Context{out.last_hidden_state.shape()});
    return classifier.forward(dropout.forward(summary));
  }

  // Accumulates every gradient from dL/dlogits (B, num_labels).
  void backward(const Tensor<T, 2>& grad_logits) {
    const auto ctx = this->template take_saved<Context>("BertForSequenceClassification");
    const auto d_summary = dropout.backward(classifier.backward(grad_logits));  // (B, C)
    if (bert.pooler) return bert.backward(Tensor<T, 3>{}, d_summary);
    auto d_hidden = zeros<T>(ctx.hidden_shape);
    d_hidden.select(1, 0).copy_(d_summary);
    bert.backward(d_hidden);
  }

  // Hugging Face's loss for `labels` (B): cross-entropy averaged over the batch, or with num_labels == 1
  // (regression) the mean squared error against the labels as numbers. loss_backward() then gives
  // dloss/dlogits for backward(): `m.backward(m.loss_backward())`.
  T loss(const Tensor<T, 2>& logits, const Tensor<std::int64_t, 1>& labels) const {
    if (logits.shape()[0] != labels.shape()[0] || logits.shape()[1] != num_labels())
      throw shape_error("BertForSequenceClassification.loss: logits " + shape_string(logits.shape()) + " and labels " +
                        shape_string(labels.shape()) + " do not match (expected [batch, " + std::to_string(num_labels()) +
                        "] and [batch])");
    std::optional<InferenceMode> no_record;
    if (!this->records_for_backward()) no_record.emplace();
    if (num_labels() == 1) {
      auto target = Tensor<T, 2>::empty({labels.shape()[0], 1});
      for (index_t i = 0; i < labels.shape()[0]; ++i) target(i, 0) = static_cast<T>(labels(i));
      return mse_.forward(logits, target).item();
    }
    return cross_entropy_.forward(logits, labels).item();
  }
  Tensor<T, 2> loss_backward(T grad_output = T(1)) {
    return num_labels() == 1 ? mse_.backward(grad_output) : cross_entropy_.backward(grad_output);
  }


 private:
  struct Context {
    Shape<3> hidden_shape;
  };
  // Not children (they have no parameters and Hugging Face's module has no such attributes); they record
  // only when the model does, so an eval-mode loss() leaves the model untouched.
  nn::CrossEntropyLoss<T> cross_entropy_;
  nn::MSELoss<T> mse_;
};

}  // namespace eigenformer::models
