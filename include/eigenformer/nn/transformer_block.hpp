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
//   attn.qkv.weight, attn.qkv.bias, attn.out.weight, attn.out.bias
//   ff.net.0.weight, ff.net.0.bias, ff.net.3.weight, ff.net.3.bias
//   norm1.weight, norm1.bias, norm2.weight, norm2.bias
//
// The attention weights come back from forward_with_weights; like every module the block stores nothing
// in eval mode, and in training mode only what backward needs (each sublayer its own part).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

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

  std::string type_name() const override { return "TransformerBlock"; }
  void register_members(Members<T>& m) override {
    m.child("attn", attn);
    m.child("ff", ff);
    m.child("norm1", norm1);
    m.child("norm2", norm2);
  }

  // (B, T, C) -> (B, T, C)
  Tensor<T, 3> forward(const Tensor<T, 3>& x) const { return run(x, nullptr, nullptr); }
  // With a (B, T) key padding mask, true (or nonzero) = real token; see MultiHeadAttention.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<bool, 2>& key_padding_mask) const {
    return run(x, &key_padding_mask, nullptr);
  }
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<std::int64_t, 2>& key_padding_mask) const {
    const auto m = detail::nonzero_mask(key_padding_mask);
    return run(x, &m, nullptr);
  }
  // The output and the attention weights (B, NH, T, T) before dropout.
  std::pair<Tensor<T, 3>, Tensor<T, 4>> forward_with_weights(const Tensor<T, 3>& x) const {
    Tensor<T, 4> w;
    auto y = run(x, nullptr, &w);
    return {std::move(y), std::move(w)};
  }
  std::pair<Tensor<T, 3>, Tensor<T, 4>> forward_with_weights(const Tensor<T, 3>& x,
                                                             const Tensor<bool, 2>& key_padding_mask) const {
    Tensor<T, 4> w;
    auto y = run(x, &key_padding_mask, &w);
    return {std::move(y), std::move(w)};
  }

  // The residual connections pass the gradient straight through; each sublayer adds its own part.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    const Shape<3> shape = this->template take_saved<Context>("TransformerBlock").shape;
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

 private:
  // The sublayers save their own contexts; the block keeps the shape, so that its backward checks the
  // gradient before any sublayer consumes its context.
  struct Context {
    Shape<3> shape;
  };

  static TransformerBlockOptions with_dropout(double p) {
    TransformerBlockOptions o;
    o.dropout = p;
    return o;
  }
  static MultiHeadAttentionOptions attention_options(const TransformerBlockOptions& o) {
    MultiHeadAttentionOptions a;
    a.attn_dropout = a.out_dropout = o.dropout;
    a.causal = o.causal;
    a.masked_value = o.masked_value;
    return a;
  }

  Tensor<T, 3> attend(const Tensor<T, 3>& x, const Tensor<bool, 2>* mask, Tensor<T, 4>* weights) const {
    if (weights) {
      auto [y, w] = mask ? attn.forward_with_weights(x, *mask) : attn.forward_with_weights(x);
      *weights = std::move(w);
      return y;
    }
    return mask ? attn.forward(x, *mask) : attn.forward(x);
  }

  Tensor<T, 3> run(const Tensor<T, 3>& x, const Tensor<bool, 2>* mask, Tensor<T, 4>* weights) const {
    if (x.shape()[2] != dim())
      throw shape_error("TransformerBlock.forward: input " + shape_string(x.shape()) + " x norm1.weight [" +
                        std::to_string(dim()) + "]: last dim of the input must be dim " + std::to_string(dim()));
    Tensor<T, 3> y;
    if (norm_ == NormPosition::pre) {
      const auto h = x + attend(norm1.forward(x), mask, weights);
      y = h + ff.forward(norm2.forward(h));
    } else {
      const auto h = norm1.forward(x + attend(x, mask, weights));
      y = norm2.forward(h + ff.forward(h));
    }
    if (this->records_for_backward()) this->save_for_backward(Context{x.shape()});
    return y;
  }

  NormPosition norm_;
};

}  // namespace eigenformer::nn
