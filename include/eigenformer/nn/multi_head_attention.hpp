// Multi-head self-attention with an output projection, as BERT-from-scratch listing 1.31
// (MultiHeadSelfAttention) and the Hugging Face NLP book's MultiHeadAttention (seed 004: one AttentionHead
// per head, outputs concatenated) write it, with the options both leave implicit:
//
//   qkv   = x W_qkv^T + b_qkv                      (B, T, 3C) -> q, k, v views (B, NH, T, HS)
//   heads = scaled_dot_product_attention(q, k, v)   causal and/or key padding mask, dropout on the weights
//   y     = dropout(concat(heads) W_out^T + b_out)  (B, T, C)
//
// Parameters: both layouts store the query, key and value projections as ONE (3C, C) matrix (rows: all
// query features, then all key features, then all value features; head h owns features h*HS .. h*HS+HS-1 of
// each), so every forward is one GEMM for q, k and v together and q, k, v are strided views into its output
// (no copies). The layouts differ only in their names and initialisation order:
//
//   QkvLayout::fused     seed 000 listing 1.31:  qkv.weight (3C, C), qkv.bias (3C), out.weight (C, C), out.bias
//                        initialised as nn.Linear(C, 3C) then nn.Linear(C, C).
//   QkvLayout::per_head  seed 004 (AttentionHead + concatenation): heads.{h}.q.weight (HS, C), heads.{h}.q.bias,
//                        heads.{h}.k.*, heads.{h}.v.*, then output_linear.weight (C, C), output_linear.bias; each
//                        heads.{h}.* entry is a view of its rows of the fused matrix, initialised in the seed's
//                        order: head 0's q, k, v Linear(C, HS) layers, head 1's, ..., then output_linear.
//
// Key padding mask: (B, T) with true (or 1) = a real token that may be attended to and false (0) = padding,
// the seed's `mask` (ids != PAD) and Hugging Face's attention_mask. (nn.MultiheadAttention's
// key_padding_mask is the opposite, true = ignore.) Masked scores become -inf by default, so a query whose
// keys are all padding gets zero weights and zero output instead of NaN; masked_value = -1e9 reproduces the
// seed (listing 1.31 masks with masked_fill(mask == 0, -1e9)) exactly, including on such rows.
//
// Dropout draws in PyTorch's forward order: the attention-weight mask over (B, NH, T, T), then the output
// mask over (B, T, C), both from the generator given at construction.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "eigenformer/nn/attention.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

enum class QkvLayout { fused, per_head };

struct MultiHeadAttentionOptions {
  double attn_dropout = 0.1;   // on the attention weights (the seed's attn_dropout)
  double out_dropout = 0.1;    // on the projected output (the seed's out_dropout)
  bool causal = false;         // GPT-style: token i attends to tokens 0..i only
  QkvLayout layout = QkvLayout::fused;
  bool qkv_bias = true;
  bool out_bias = true;
  double masked_value = -std::numeric_limits<double>::infinity();  // or the seed's -1e9
  bool keep_weights = false;   // keep each forward's attention weights for attention_weights()
};

template <floating_element T>
class MultiHeadAttention : public Module<T> {
  // Declared first: initialised (and checked) before the layers below draw their weights.
  index_t dim_, heads_, head_dim_;
  MultiHeadAttentionOptions options_;

 public:
  // The seed's MultiHeadSelfAttention(dim, heads, dropout): fused qkv, both dropouts p, no causal mask.
  MultiHeadAttention(index_t dim, index_t heads, double dropout = 0.1, Generator& gen = default_generator())
      : MultiHeadAttention(dim, heads, with_dropout(dropout), gen) {}

  // Throws std::invalid_argument when dim is not divisible by heads.
  MultiHeadAttention(index_t dim, index_t heads, const MultiHeadAttentionOptions& options,
                     Generator& gen = default_generator())
      : dim_(checked_dim(dim, heads, options)),
        heads_(heads),
        head_dim_(dim / heads),
        options_(options),
        qkv(make_qkv(dim, heads, options, gen)),
        out(dim, dim, options.out_bias, gen),
        out_drop(options.out_dropout, gen),
        gen_(&gen) {}

  Linear<T> qkv;       // (3C, C): query rows, key rows, value rows
  Linear<T> out;       // (C, C) output projection
  Dropout<T> out_drop;

  index_t dim() const noexcept { return dim_; }
  index_t heads() const noexcept { return heads_; }
  index_t head_dim() const noexcept { return head_dim_; }
  const MultiHeadAttentionOptions& options() const noexcept { return options_; }
  bool causal() const noexcept { return options_.causal; }

  // (B, T, C) -> (B, T, C)
  Tensor<T, 3> forward(const Tensor<T, 3>& x) { return run(x, nullptr); }
  // With a (B, T) key padding mask, true = real token.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<bool, 2>& key_padding_mask) {
    return run(x, &key_padding_mask);
  }
  // The seed's integer mask ((ids != PAD).long()): nonzero = real token.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, const Tensor<std::int64_t, 2>& key_padding_mask) {
    const auto m = to_bool(key_padding_mask);
    return run(x, &m);
  }

  // The output and the attention weights (B, NH, T, T) before dropout, each row summing to 1 (0 for a
  // query that sees no key): for visualisation. (Hugging Face's output_attentions returns them after
  // dropout; in eval mode the two agree.)
  std::pair<Tensor<T, 3>, Tensor<T, 4>> forward_with_weights(const Tensor<T, 3>& x) {
    Tensor<T, 4> w;
    auto y = run(x, nullptr, &w);
    return {std::move(y), std::move(w)};
  }
  std::pair<Tensor<T, 3>, Tensor<T, 4>> forward_with_weights(const Tensor<T, 3>& x,
                                                             const Tensor<bool, 2>& key_padding_mask) {
    Tensor<T, 4> w;
    auto y = run(x, &key_padding_mask, &w);
    return {std::move(y), std::move(w)};
  }

  // With options.keep_weights (or keep_weights(true)), the weights of the last forward, else empty.
  void keep_weights(bool keep = true) noexcept { options_.keep_weights = keep; }
  const std::optional<Tensor<T, 4>>& attention_weights() const noexcept { return weights_; }

  // dL/dx from dL/dy: output dropout and projection, attention, then the qkv projection.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    if (!ctx_) Module<T>::throw_no_cache("MultiHeadAttention");
    const auto ctx = std::move(*ctx_);
    ctx_.reset();
    const index_t b = ctx.q.shape()[0], t = ctx.q.shape()[2];
    detail::check_grad_shape("MultiHeadAttention.backward", grad_output.shape(), Shape<3>{b, t, dim_});
    const auto g = out.backward(out_drop.backward(grad_output));                           // (B, T, C)
    const auto g_heads = g.view(Shape<4>{b, t, heads_, head_dim_}).transpose(1, 2);        // (B, NH, T, HS)
    const auto grads = scaled_dot_product_attention_backward(ctx, g_heads);
    auto d_qkv = Tensor<T, 3>::empty({b, t, 3 * dim_});                                   // (B, T, 3C)
    const auto parts = d_qkv.view(Shape<5>{b, t, 3, heads_, head_dim_});
    parts.select(2, 0).transpose(1, 2).copy_(grads.q);
    parts.select(2, 1).transpose(1, 2).copy_(grads.k);
    parts.select(2, 2).transpose(1, 2).copy_(grads.v);
    return qkv.backward(d_qkv);
  }

  void collect_parameters(const std::string& prefix, ParameterList<T>& list) override {
    if (options_.layout == QkvLayout::fused) {
      qkv.collect_parameters(prefix + "qkv.", list);
      out.collect_parameters(prefix + "out.", list);
      return;
    }
    static constexpr const char* names[3] = {"q", "k", "v"};
    for (index_t h = 0; h < heads_; ++h) {
      for (index_t j = 0; j < 3; ++j) {
        const std::string name = prefix + "heads." + std::to_string(h) + "." + names[j] + ".";
        const index_t row = j * dim_ + h * head_dim_;
        list.push_back(NamedParameter<T>{name + "weight", {head_dim_, dim_},
                                         qkv.weight.data.narrow(0, row, head_dim_).view(Shape<1>{head_dim_ * dim_}),
                                         qkv.weight.grad.narrow(0, row, head_dim_).view(Shape<1>{head_dim_ * dim_})});
        if (qkv.bias)
          list.push_back(NamedParameter<T>{name + "bias", {head_dim_}, qkv.bias->data.narrow(0, row, head_dim_),
                                           qkv.bias->grad.narrow(0, row, head_dim_)});
      }
    }
    out.collect_parameters(prefix + "output_linear.", list);
  }

 protected:
  void set_children_training(bool mode) override {
    qkv.train(mode);
    out.train(mode);
    out_drop.train(mode);
  }

 private:
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
    if (!(o.attn_dropout >= 0.0 && o.attn_dropout <= 1.0))
      throw std::invalid_argument("MultiHeadAttention: attn_dropout has to be between 0 and 1, but got " +
                                  std::to_string(o.attn_dropout));
    return dim;
  }

  // The fused (3C, C) projection, initialised in the layout's order.
  static Linear<T> make_qkv(index_t dim, index_t heads, const MultiHeadAttentionOptions& o, Generator& gen) {
    if (o.layout == QkvLayout::fused) return Linear<T>(dim, 3 * dim, o.qkv_bias, gen);
    Generator scratch;  // overwritten below, in seed 004's order, from `gen`
    Linear<T> l(dim, 3 * dim, o.qkv_bias, scratch);
    const index_t hs = dim / heads;
    for (index_t h = 0; h < heads; ++h)
      for (index_t j = 0; j < 3; ++j) {  // AttentionHead: self.q, self.k, self.v = nn.Linear(C, HS)
        auto w = l.weight.data.narrow(0, j * dim + h * hs, hs);
        std::optional<Tensor<T, 1>> b;
        if (l.bias) b = l.bias->data.narrow(0, j * dim + h * hs, hs);
        init::linear_(w, b ? &*b : nullptr, gen);
      }
    return l;
  }

  static Tensor<bool, 2> to_bool(const Tensor<std::int64_t, 2>& m) {
    auto b = Tensor<bool, 2>::empty(m.shape());
    bool* o = b.data();
    m.for_each_value([&](const std::int64_t& v) { *o++ = v != 0; });
    return b;
  }

  Tensor<T, 3> run(const Tensor<T, 3>& x, const Tensor<bool, 2>* key_padding_mask, Tensor<T, 4>* weights = nullptr) {
    if (x.shape()[2] != dim_)
      throw shape_error("MultiHeadAttention.forward: input " + shape_string(x.shape()) + " x qkv.weight " +
                        shape_string(qkv.weight.shape()) + ": last dim of the input must be dim " +
                        std::to_string(dim_));
    const index_t b = x.shape()[0], t = x.shape()[1];
    if (key_padding_mask && key_padding_mask->shape() != Shape<2>{b, t})
      throw shape_error("MultiHeadAttention.forward: key_padding_mask " + shape_string(key_padding_mask->shape()) +
                        " does not match the input " + shape_string(x.shape()) + " (expected [batch, tokens] = " +
                        shape_string(Shape<2>{b, t}) + ")");
    ctx_.reset();
    const auto projected = qkv.forward(x);                                     // (B, T, 3C)
    const auto parts = projected.view(Shape<5>{b, t, 3, heads_, head_dim_});   // (B, T, 3, NH, HS)
    const auto q = parts.select(2, 0).transpose(1, 2);                         // (B, NH, T, HS) views
    const auto k = parts.select(2, 1).transpose(1, 2);
    const auto v = parts.select(2, 2).transpose(1, 2);
    AttentionOptions opt;
    opt.dropout_p = this->is_training() ? options_.attn_dropout : 0.0;
    opt.is_causal = options_.causal;
    opt.masked_value = options_.masked_value;
    opt.generator = gen_;
    AttentionContext<T, 4> ctx;
    Tensor<T, 4> w;
    AttentionContext<T, 4>* ctx_out = this->is_training() ? &ctx : nullptr;
    const auto heads_out =
        key_padding_mask
            ? scaled_dot_product_attention(q, k, v, key_padding_mask->reshape(Shape<4>{b, 1, 1, t}), opt, ctx_out, &w)
            : scaled_dot_product_attention(q, k, v, std::nullopt, opt, ctx_out, &w);  // (B, NH, T, HS)
    const auto merged = heads_out.transpose(1, 2).reshape(Shape<3>{b, t, dim_});     // (B, T, C): heads side by side
    auto y = out_drop.forward(out.forward(merged));
    weights_.reset();
    if (options_.keep_weights) weights_ = w;
    if (weights) *weights = w;
    if (this->is_training()) ctx_ = std::move(ctx);
    return y;
  }

  Generator* gen_;
  std::optional<AttentionContext<T, 4>> ctx_;  // training mode only
  std::optional<Tensor<T, 4>> weights_;
};

}  // namespace eigenformer::nn
