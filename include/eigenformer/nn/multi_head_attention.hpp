// Multi-head self-attention with an output projection, as BERT-from-scratch listing 1.31 writes it
// (MultiHeadSelfAttention), with the options it leaves implicit:
//
//   qkv   = x W_qkv^T + b_qkv                       (B, T, 3C): query, key and value features side by side
//   heads = fused_attention(qkv)                     causal and/or key padding mask, dropout on the weights
//   y     = out_dropout(heads W_out^T + b_out)       (B, T, C)
//
// Parameters (state-dict names of the seed): qkv.weight (3C, C), qkv.bias (3C), out.weight (C, C), out.bias
// (C), initialised as nn.Linear(C, 3C) then nn.Linear(C, C). The rows of qkv.weight are all query features,
// then all key features, then all value features, head h owning features h*HS .. h*HS+HS-1 of each: the
// layout the attention core (attention.hpp) reads in place. Seed 004's per-head modules are the same
// layer under other names: tutorial::MultiHeadAttentionPerHead (nn/tutorial/per_head_attention.hpp).
//
// The qkv projection is computed here rather than by qkv.forward, so that one saved context covers the
// projection and the attention (and the per-head variant, which lists qkv under other names, runs the same
// code). qkv stays a Linear child for its parameters, initialisation and repr.
//
// Key padding mask: (B, T) with true (or 1) = a real token that may be attended to and false (0) = padding,
// the seed's `mask` (ids != PAD) and Hugging Face's attention_mask. (nn.MultiheadAttention's
// key_padding_mask is the opposite, true = ignore.) Masked scores become -inf by default, so a query whose
// keys are all padding gets zero weights and zero context instead of NaN; masked_value = -1e9 reproduces
// the seed (listing 1.31 masks with masked_fill(mask == 0, -1e9)) exactly, including on such rows.
//
// Attention weights: forward_with_weights returns them with the output. The module never stores them: an
// eval-mode forward writes nothing to the module (module.hpp), so one layer can serve several threads,
// and a stored copy would be a second cache with its own lifetime rules.
//
// Dropout draws from current_generator() in PyTorch's forward order: the attention-weight mask over
// (B, NH, T, T), then the output mask over (B, T, C).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "eigenformer/nn/attention.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

struct MultiHeadAttentionOptions {
  double attn_dropout = 0.1;  // on the attention weights (the seed's attn_dropout)
  double out_dropout = 0.1;   // on the projected output (the seed's out_dropout)
  bool causal = false;        // GPT-style: token i attends to tokens 0..i only
  bool qkv_bias = true;
  bool out_bias = true;
  double masked_value = -std::numeric_limits<double>::infinity();  // or the seed's -1e9
};

namespace detail {
// The seed's integer mask ((ids != PAD).long()) as booleans: nonzero = real token.
inline Tensor<bool, 2> nonzero_mask(const Tensor<std::int64_t, 2>& m) {
  auto b = Tensor<bool, 2>::empty(m.shape());
  bool* o = b.data();
  m.for_each_value([&](const std::int64_t& v) { *o++ = v != 0; });
  return b;
}
}  // namespace detail

template <floating_element T>
class MultiHeadAttention : public Module<T> {
  // Declared first: initialised (and checked) before the layers below draw their weights.
  index_t dim_, heads_, head_dim_;
  MultiHeadAttentionOptions options_;

 public:
  // The seed's MultiHeadSelfAttention(dim, heads, dropout): both dropouts p, no causal mask. `gen` is used
  // for initialisation only.
  MultiHeadAttention(index_t dim, index_t heads, double dropout = 0.1, Generator& gen = default_generator())
      : MultiHeadAttention(dim, heads, with_dropout(dropout), gen) {}

  // Throws std::invalid_argument when dim is not divisible by heads or a probability is outside [0, 1].
  MultiHeadAttention(index_t dim, index_t heads, const MultiHeadAttentionOptions& options,
                     Generator& gen = default_generator())
      : MultiHeadAttention(dim, heads, options, [&] { return Linear<T>(dim, 3 * dim, options.qkv_bias, gen); }, gen) {}

  Linear<T> qkv;  // (3C, C): query rows, key rows, value rows
  Linear<T> out;  // (C, C) output projection
  Dropout<T> attn_dropout;  // its p is applied to the attention weights by the attention core
  Dropout<T> out_dropout;

  index_t dim() const noexcept { return dim_; }
  index_t heads() const noexcept { return heads_; }
  index_t head_dim() const noexcept { return head_dim_; }
  const MultiHeadAttentionOptions& options() const noexcept { return options_; }
  bool causal() const noexcept { return options_.causal; }

  std::string type_name() const override { return "MultiHeadSelfAttention"; }
  void register_members(Members<T>& m) override {
    m.child("qkv", qkv);
    m.child("out", out);
    m.child("attn_dropout", attn_dropout);
    m.child("out_dropout", out_dropout);
  }

  // (B, T, C) -> (B, T, C)
  Tensor<T, 3> forward(const Tensor<T, 3>& x) const { return run(x, nullptr, nullptr); }
  // With a (B, T) key padding mask, true = real token.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<bool, 2>& key_padding_mask) const {
    return run(x, &key_padding_mask, nullptr);
  }
  // The seed's integer mask ((ids != PAD).long()): nonzero = real token.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<std::int64_t, 2>& key_padding_mask) const {
    const auto m = detail::nonzero_mask(key_padding_mask);
    return run(x, &m, nullptr);
  }

  // The output and the attention weights (B, NH, T, T) before dropout, each row summing to 1 (0 for a
  // query that sees no key): for visualisation. (Hugging Face's output_attentions returns them after
  // dropout; in eval mode the two agree.)
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

  // dL/dx from dL/dy: output dropout and projection, attention, then the qkv projection.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    auto ctx = this->template take_saved<Context>("MultiHeadAttention");
    const index_t b = ctx.attn.qkv.shape()[0], t = ctx.attn.qkv.shape()[1];
    detail::check_grad_shape("MultiHeadAttention.backward", grad_output.shape(), Shape<3>{b, t, dim_});
    const auto g = out.backward(out_dropout.backward(grad_output));  // dL/d(merged heads) (B, T, C)
    const auto d_qkv = fused_attention_backward(ctx.attn, g);        // (B, T, 3C)
    return detail::dense_backward("MultiHeadAttention.qkv", d_qkv, ctx.proj, qkv.weight, qkv.bias ? &*qkv.bias : nullptr,
                                  detail::DenseLayout::out_in);
  }

 protected:
  // For variants that initialise the fused qkv projection in another order (the per-head tutorial layer).
  template <class MakeQkv>
  MultiHeadAttention(index_t dim, index_t heads, const MultiHeadAttentionOptions& options, MakeQkv&& make_qkv,
                     Generator& gen)
      : dim_(checked_dim(dim, heads, options)),
        heads_(heads),
        head_dim_(dim / heads),
        options_(options),
        qkv(make_qkv()),
        out(dim, dim, options.out_bias, gen),
        attn_dropout(options.attn_dropout),
        out_dropout(options.out_dropout) {}

 private:
  struct Context {
    detail::DenseContext<T> proj;    // the qkv projection's input
    FusedAttentionContext<T> attn;   // the attention core's saved tensors
  };

  static MultiHeadAttentionOptions with_dropout(double p) {
    MultiHeadAttentionOptions o;
    o.attn_dropout = o.out_dropout = p;
    return o;
  }

  static index_t checked_dim(index_t dim, index_t heads, const MultiHeadAttentionOptions& o) {
    if (dim <= 0 || heads <= 0)
      throw std::invalid_argument("MultiHeadAttention: dim and heads must be positive, got dim " +
                                  std::to_string(dim) + " and heads " + std::to_string(heads));
    if (dim % heads != 0)
      throw std::invalid_argument("MultiHeadAttention: dim " + std::to_string(dim) + " is not divisible by " +
                                  std::to_string(heads) + " heads (each head gets dim / heads features)");
    for (const auto& [name, p] : {std::pair{"attn_dropout", o.attn_dropout}, std::pair{"out_dropout", o.out_dropout}})
      if (!(p >= 0.0 && p <= 1.0))
        throw std::invalid_argument(std::string("MultiHeadAttention: ") + name +
                                    " has to be between 0 and 1, but got " + std::to_string(p));
    return dim;
  }

  Tensor<T, 3> run(const Tensor<T, 3>& x, const Tensor<bool, 2>* key_padding_mask, Tensor<T, 4>* weights) const {
    if (x.shape()[2] != dim_)
      throw shape_error("MultiHeadAttention.forward: input " + shape_string(x.shape()) + " x qkv.weight " +
                        shape_string(qkv.weight.shape()) + ": last dim of the input must be dim " +
                        std::to_string(dim_));
    const index_t b = x.shape()[0], t = x.shape()[1];
    if (key_padding_mask && key_padding_mask->shape() != Shape<2>{b, t})
      throw shape_error("MultiHeadAttention.forward: key_padding_mask " + shape_string(key_padding_mask->shape()) +
                        " does not match the input " + shape_string(x.shape()) + " (expected [batch, tokens] = " +
                        shape_string(Shape<2>{b, t}) + ")");
    const bool record = this->records_for_backward();
    Context ctx;
    const auto projected = detail::dense_forward("MultiHeadAttention.qkv", x, qkv.weight.data,
                                                 qkv.bias ? &qkv.bias->data : nullptr, detail::DenseLayout::out_in,
                                                 record ? &ctx.proj : nullptr);  // (B, T, 3C)
    FusedAttentionOptions opt;
    opt.num_heads = heads_;
    opt.causal = options_.causal;
    opt.dropout_p = this->is_training() ? attn_dropout.p() : 0.0;
    opt.masked_value = options_.masked_value;
    const auto merged = fused_attention(projected, opt,
                                        {.key_padding_mask = key_padding_mask, .weights = weights,
                                         .context = record ? &ctx.attn : nullptr});  // (B, T, C)
    auto y = out_dropout.forward(out.forward(merged));
    if (record) this->save_for_backward(std::move(ctx));
    return y;
  }
};

}  // namespace eigenformer::nn
