// Seed 004's multi-head attention (the Hugging Face NLP book): one AttentionHead per head, each with its own
// q, k and v Linear(C, HS), the heads' outputs concatenated and passed through output_linear. It computes
// exactly what nn::MultiHeadAttention computes, so it IS that layer, with other parameter names and another
// initialisation order:
//
//   heads.{h}.q.weight (HS, C), heads.{h}.q.bias (HS), heads.{h}.k.*, heads.{h}.v.*   (h = 0 .. NH-1)
//   output_linear.weight (C, C), output_linear.bias (C)
//
// Each heads.{h}.* entry is a view of its rows of the fused (3C, C) projection (query rows h*HS .., key rows
// C + h*HS .., value rows 2C + h*HS ..), so a seed-004 state dict loads by name and writes straight into
// the fused matrix the attention core reads. The weights are drawn in the seed's order: head 0's q, k, v
// (weight then bias each), head 1's, ..., then output_linear.
//
// The two dropouts (attention weights, output) are eigenformer's options, as in the fixture script's
// PyTorch twin MultiHeadAttentionPerHead, whose name and repr this class takes.
#pragma once

#include <string>
#include <utility>

#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/module_list.hpp"
#include "eigenformer/nn/multi_head_attention.hpp"

namespace eigenformer::nn::tutorial {

namespace detail {

// Rows [row, row + rows) of a fused Linear, listed as a Linear of their own (names, repr, state dict).
// Holds no tensors: the parameters are views of the fused layer's, re-bound by the owner before every walk
// of the module tree (so a moved owner never leaves a dangling pointer in use).
template <floating_element T>
class LinearRows : public Module<T> {
 public:
  void bind(Linear<T>& fused, index_t row, index_t rows) noexcept {
    fused_ = &fused;
    row_ = row;
    rows_ = rows;
  }
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override {
    return "in_features=" + std::to_string(fused_->in_features()) + ", out_features=" + std::to_string(rows_) +
           ", bias=" + this->py_bool(fused_->bias.has_value());
  }
  void register_members(Members<T>& m) override {
    m.parameter_rows("weight", fused_->weight, row_, rows_);
    if (fused_->bias) m.parameter_rows("bias", *fused_->bias, row_, rows_);
  }

 private:
  Linear<T>* fused_ = nullptr;
  index_t row_ = 0, rows_ = 0;
};

// Seed 004's AttentionHead: the q, k and v projections of one head.
template <floating_element T>
class AttentionHead : public Module<T> {
 public:
  LinearRows<T> q, k, v;

  void bind(Linear<T>& fused, index_t head, index_t dim, index_t head_dim) noexcept {
    q.bind(fused, head * head_dim, head_dim);
    k.bind(fused, dim + head * head_dim, head_dim);
    v.bind(fused, 2 * dim + head * head_dim, head_dim);
  }
  std::string type_name() const override { return "AttentionHead"; }
  void register_members(Members<T>& m) override {
    m.child("q", q);
    m.child("k", k);
    m.child("v", v);
  }
};

}  // namespace detail

template <floating_element T>
class MultiHeadAttentionPerHead : public MultiHeadAttention<T> {
 public:
  MultiHeadAttentionPerHead(index_t dim, index_t heads, double dropout = 0.1, Generator& gen = default_generator())
      : MultiHeadAttentionPerHead(dim, heads, both_dropouts(dropout), gen) {}

  // Throws std::invalid_argument as MultiHeadAttention does.
  MultiHeadAttentionPerHead(index_t dim, index_t heads, const MultiHeadAttentionOptions& options,
                            Generator& gen = default_generator())
      : MultiHeadAttention<T>(dim, heads, options, [&] { return seed_order_qkv(dim, heads, options, gen); }, gen) {
    for (index_t h = 0; h < heads; ++h) heads_.emplace_back();
  }

  std::string type_name() const override { return "MultiHeadAttentionPerHead"; }
  void register_members(Members<T>& m) override {
    for (std::size_t h = 0; h < heads_.size(); ++h)
      heads_[h].bind(this->qkv, static_cast<index_t>(h), this->dim(), this->head_dim());
    m.child("heads", heads_);
    m.child("output_linear", this->out);
    m.child("attn_dropout", this->attn_dropout);
    m.child("out_dropout", this->out_dropout);
  }

 private:
  static MultiHeadAttentionOptions both_dropouts(double p) {
    MultiHeadAttentionOptions o;
    o.attn_dropout = o.out_dropout = p;
    return o;
  }

  // The fused (3C, C) projection with each head's q, k, v rows drawn as seed 004's Linear(C, HS) layers.
  static Linear<T> seed_order_qkv(index_t dim, index_t heads, const MultiHeadAttentionOptions& o, Generator& gen) {
    Generator scratch;  // the fused layer's own draws, all overwritten below
    Linear<T> l(dim, 3 * dim, o.qkv_bias, scratch);
    const index_t hs = dim / heads;
    for (index_t h = 0; h < heads; ++h)
      for (index_t j = 0; j < 3; ++j) {
        auto w = l.weight.data.narrow(0, j * dim + h * hs, hs);
        std::optional<Tensor<T, 1>> b;
        if (l.bias) b = l.bias->data.narrow(0, j * dim + h * hs, hs);
        init::linear_(w, b ? &*b : nullptr, gen);
      }
    return l;
  }

  ModuleList<detail::AttentionHead<T>> heads_;
};

}  // namespace eigenformer::nn::tutorial
