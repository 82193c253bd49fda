// A Transformer encoder block: multi-head self-attention and the position-wise feed-forward network, each
// wrapped in a residual connection with layer normalisation, in either placement:
//
//   pre-LN  (BERT-from-scratch listing 1.33, seed 004's TransformerEncoderLayer, GPT-2):
//       h = x + attn(norm1(x), mask)
//       y = h + ff(norm2(h))
//   post-LN (the original Transformer and BERT):
//       h = norm1(x + attn(x, mask))
//       y = norm2(h + ff(h))
//
// The dropouts are the sublayers' own, as in the seed: on the attention weights and on the attention
// output projection (MultiHeadAttention), and after the GELU and after the second Linear (FeedForward). The
// last of each pair is the dropout on the residual branch (Hugging Face's hidden_dropout_prob), so there is
// no extra dropout around the additions. In training mode the masks are drawn in forward order: attention
// weights, attention output, feed-forward hidden, feed-forward output.
//
// Parameter names and initialisation order are the seed's (registration order attn, ff, norm1, norm2):
//   attn.qkv.weight, attn.qkv.bias, attn.out.weight, attn.out.bias      (per_head layout: see MultiHeadAttention)
//   ff.net.0.weight, ff.net.0.bias, ff.net.3.weight, ff.net.3.bias
//   norm1.weight, norm1.bias, norm2.weight, norm2.bias
#pragma once

#include <limits>
#include <optional>
#include <string>

#include "eigenformer/nn/feedforward.hpp"
#include "eigenformer/nn/layernorm.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/nn/multi_head_attention.hpp"

namespace eigenformer::nn {

enum class NormPosition { pre, post };

struct TransformerBlockOptions {
  NormPosition norm = NormPosition::pre;
  double dropout = 0.1;          // every dropout in the block (see above)
  double layer_norm_eps = 1e-5;  // nn.LayerNorm's default; BERT checkpoints use 1e-12
  std::string activation = "gelu";  // Hugging Face hidden_act name, see FeedForward
  bool causal = false;           // decoder-style (GPT) blocks
  QkvLayout layout = QkvLayout::fused;
  double masked_value = -std::numeric_limits<double>::infinity();  // or the seed's -1e9
};

template <floating_element T>
class TransformerBlock : public Module<T> {
 public:
  // The seed's TransformerBlock(dim, heads, ff_dim, dropout): pre-LN. ff_dim = 0 means 4 * dim.
  TransformerBlock(index_t dim, index_t heads, index_t ff_dim, double dropout = 0.1,
                   Generator& gen = default_generator())
      : TransformerBlock(dim, heads, ff_dim, with_dropout(dropout), gen) {}

  TransformerBlock(index_t dim, index_t heads, index_t ff_dim, const TransformerBlockOptions& options,
                   Generator& gen = default_generator())
      : attn(dim, heads, attention_options(options), gen),
        ff(dim, ff_dim, options.dropout, options.activation, gen),
        norm1(dim, options.layer_norm_eps),
        norm2(dim, options.layer_norm_eps),
        norm_(options.norm) {}

  MultiHeadAttention<T> attn;
  FeedForward<T> ff;
  LayerNorm<T> norm1;
  LayerNorm<T> norm2;

  NormPosition norm_position() const noexcept { return norm_; }
  index_t dim() const noexcept { return attn.dim(); }

  // (B, T, C) -> (B, T, C)
  Tensor<T, 3> forward(const Tensor<T, 3>& x) { return run(x, nullptr); }
  // With a (B, T) key padding mask, true (or nonzero) = real token; see MultiHeadAttention.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<bool, 2>& key_padding_mask) {
    return run(x, &key_padding_mask);
  }
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<std::int64_t, 2>& key_padding_mask) {
    auto m = Tensor<bool, 2>::empty(key_padding_mask.shape());
    bool* o = m.data();
    key_padding_mask.for_each_value([&](const std::int64_t& v) { *o++ = v != 0; });
    return run(x, &m);
  }

  // The residual connections pass the gradient straight through; each sublayer adds its own part.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    if (!cached_shape_) Module<T>::throw_no_cache("TransformerBlock");
    const Shape<3> shape = *cached_shape_;
    cached_shape_.reset();
    detail::check_grad_shape("TransformerBlock.backward", grad_output.shape(), shape);
    if (norm_ == NormPosition::pre) {
      const auto dh = grad_output + norm2.backward(ff.backward(grad_output));  // y = h + ff(norm2(h))
      return dh + norm1.backward(attn.backward(dh));                          // h = x + attn(norm1(x))
    }
    const auto dz2 = norm2.backward(grad_output);  // y = norm2(z2), z2 = h + ff(h)
    const auto dh = dz2 + ff.backward(dz2);
    const auto dz1 = norm1.backward(dh);           // h = norm1(z1), z1 = x + attn(x)
    return dz1 + attn.backward(dz1);
  }

  void collect_parameters(const std::string& prefix, ParameterList<T>& out) override {
    attn.collect_parameters(prefix + "attn.", out);
    ff.collect_parameters(prefix + "ff.", out);
    norm1.collect_parameters(prefix + "norm1.", out);
    norm2.collect_parameters(prefix + "norm2.", out);
  }

 protected:
  void set_children_training(bool mode) override {
    attn.train(mode);
    ff.train(mode);
    norm1.train(mode);
    norm2.train(mode);
  }

 private:
  static TransformerBlockOptions with_dropout(double p) {
    TransformerBlockOptions o;
    o.dropout = p;
    return o;
  }
  static MultiHeadAttentionOptions attention_options(const TransformerBlockOptions& o) {
    MultiHeadAttentionOptions a;
    a.attn_dropout = a.out_dropout = o.dropout;
    a.causal = o.causal;
    a.layout = o.layout;
    a.masked_value = o.masked_value;
    return a;
  }

  Tensor<T, 3> attend(const Tensor<T, 3>& x, const Tensor<bool, 2>* mask) {
    return mask ? attn.forward(x, *mask) : attn.forward(x);
  }

  Tensor<T, 3> run(const Tensor<T, 3>& x, const Tensor<bool, 2>* mask) {
    if (x.shape()[2] != dim())
      throw shape_error("TransformerBlock.forward: input " + shape_string(x.shape()) + " x norm1.weight [" +
                        std::to_string(dim()) + "]: last dim of the input must be dim " + std::to_string(dim()));
    cached_shape_.reset();
    Tensor<T, 3> y;
    if (norm_ == NormPosition::pre) {
      const auto h = x + attend(norm1.forward(x), mask);
      y = h + ff.forward(norm2.forward(h));
    } else {
      const auto h = norm1.forward(x + attend(x, mask));
      y = norm2.forward(h + ff.forward(h));
    }
    if (this->is_training()) cached_shape_ = x.shape();
    return y;
  }

  NormPosition norm_;
  std::optional<Shape<3>> cached_shape_;  // training mode only: the sublayers hold the rest
};

}  // namespace eigenformer::nn
