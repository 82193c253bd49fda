// The single-head attention modules of "Build a Large Language Model (From Scratch)", chapter 3, each with
// its backward pass, on the library's attention kernel (scaled_dot_product_attention):
//
//   SelfAttentionV1  listing 3.1: raw (d_in, d_out) parameters W_query, W_key, W_value drawn with rand, in
//                    that order, and x @ W projections.
//   SelfAttentionV2  listing 3.2: the projections are Linear(d_in, d_out, bias=qkv_bias) layers (weights
//                    stored (d_out, d_in) as in PyTorch), initialised like nn.Linear in the order W_query,
//                    W_key, W_value.
//   CausalAttention  listing 3.3: SelfAttentionV2 plus the causal mask (-inf above the diagonal before the
//                    softmax) and dropout on the attention weights in training mode.
//
// Inputs are (T, d_in) as in the book, or batched (B, T, d_in), or any (..., T, d_in): leading dims are
// batch dims. Outputs are (..., T, d_out). Parameter names are the book's attribute names (W_query,
// W_key.weight, ...), so their state dicts load by name. Like every module, a forward saves what backward
// needs only in training mode outside InferenceMode; the attention weights are returned by
// forward_with_weights, never stored.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "eigenformer/nn/attention.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn::tutorial {

namespace detail {

// (..., T, C) as (B, T, C), B the product of the leading dims (1 for a (T, C) input). A view when x is
// contiguous.
template <typename T, std::size_t R>
Tensor<T, 3> as_batched(const Tensor<T, R>& x) {
  static_assert(R >= 2, "attention: the input needs at least two dims (tokens, features)");
  index_t b = 1;
  for (std::size_t i = 0; i + 2 < R; ++i) b *= x.shape()[i];
  return x.reshape(Shape<3>{b, x.shape()[R - 2], x.shape()[R - 1]});
}

// The input shape with its last dim replaced.
template <std::size_t R>
Shape<R> with_last(Shape<R> s, index_t last) {
  s[R - 1] = last;
  return s;
}

inline void check_positive_dims(const char* layer, index_t d_in, index_t d_out) {
  if (d_in <= 0 || d_out <= 0)
    throw std::invalid_argument(std::string(layer) + ": d_in and d_out must be positive, got " +
                                std::to_string(d_in) + " and " + std::to_string(d_out));
}

template <typename T, std::size_t R>
void check_input(const char* op, const Tensor<T, R>& x, const char* weight_name, const Shape<2>& weight_shape,
                 index_t d_in) {
  if (x.shape()[R - 1] != d_in)
    throw shape_error(std::string(op) + ": input " + shape_string(x.shape()) + " x " + weight_name + " " +
                      shape_string(weight_shape) + ": last dim of the input must be d_in " + std::to_string(d_in));
}

// The part SelfAttentionV2 and CausalAttention share: three Linear projections, scaled dot-product
// attention between them, and the backward through both.
template <floating_element T>
class ProjectedSelfAttention : public Module<T> {
 public:
  Linear<T> W_query;  // (d_out, d_in) weight, optional (d_out) bias
  Linear<T> W_key;
  Linear<T> W_value;

  index_t d_in() const noexcept { return W_query.in_features(); }
  index_t d_out() const noexcept { return W_query.out_features(); }

  void register_members(Members<T>& m) override {
    m.child("W_query", W_query);
    m.child("W_key", W_key);
    m.child("W_value", W_value);
  }

 protected:
  ProjectedSelfAttention(const char* layer, index_t d_in, index_t d_out, bool qkv_bias, Generator& gen)
      : W_query((check_positive_dims(layer, d_in, d_out), d_in), d_out, qkv_bias, gen),
        W_key(d_in, d_out, qkv_bias, gen),
        W_value(d_in, d_out, qkv_bias, gen) {}

  // (..., T, d_in) -> (..., T, d_out); the weights (B, T, T) into *weights when given.
  template <std::size_t R>
  Tensor<T, R> attend(const char* op, const Tensor<T, R>& x, const AttentionOptions& options,
                      Tensor<T, 3>* weights) const {
    check_input(op, x, "W_query.weight", W_query.weight.shape(), d_in());
    const bool record = this->records_for_backward();
    const auto x3 = as_batched(x);       // (B, T, d_in)
    const auto q = W_query.forward(x3);  // (B, T, d_out)
    const auto k = W_key.forward(x3);
    const auto v = W_value.forward(x3);
    Context ctx;
    const auto out = scaled_dot_product_attention(q, k, v, std::nullopt, options, record ? &ctx.attn : nullptr,
                                                  weights);  // (B, T, d_out)
    if (record) {
      ctx.input_shape.assign(x.shape().begin(), x.shape().end());
      this->save_for_backward(std::move(ctx));
    }
    return out.view(with_last(x.shape(), d_out()));
  }

  // dL/dx = sum over q, k, v of the projection backward of the attention gradient.
  template <std::size_t R>
  Tensor<T, R> attend_backward(const char* layer, const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>(layer);
    const auto in_shape = nn::detail::as_shape<R>(ctx.input_shape);
    nn::detail::check_grad_shape((std::string(layer) + ".backward").c_str(), grad_output.shape(),
                                 with_last(in_shape, d_out()));
    const auto g = scaled_dot_product_attention_backward(ctx.attn, as_batched(grad_output));
    auto dx = W_query.backward(g.q);
    dx = add(dx, W_key.backward(g.k));
    dx = add(dx, W_value.backward(g.v));
    return dx.view(in_shape);
  }

 private:
  struct Context {
    AttentionContext<T, 3> attn;
    std::vector<index_t> input_shape;
  };
};

}  // namespace detail

// Listing 3.1: context = softmax((x W_q)(x W_k)^T / sqrt(d_out)) (x W_v), with raw (d_in, d_out) weights.
template <floating_element T>
class SelfAttentionV1 : public Module<T> {
 public:
  // W_query, W_key, W_value = rand(d_in, d_out) each, drawn from `gen` in that order (the book's
  // nn.Parameter(torch.rand(d_in, d_out))): manual_seed(123) reproduces the book's numbers.
  SelfAttentionV1(index_t d_in, index_t d_out, Generator& gen = default_generator())
      : W_query(rand<T>(shape_of(d_in, d_out), gen)),
        W_key(rand<T>(shape_of(d_in, d_out), gen)),
        W_value(rand<T>(shape_of(d_in, d_out), gen)) {}

  Parameter<T, 2> W_query;  // (d_in, d_out)
  Parameter<T, 2> W_key;    // (d_in, d_out)
  Parameter<T, 2> W_value;  // (d_in, d_out)

  index_t d_in() const noexcept { return W_query.shape()[0]; }
  index_t d_out() const noexcept { return W_query.shape()[1]; }

  std::string type_name() const override { return "SelfAttentionV1"; }
  void register_members(Members<T>& m) override {
    m.parameter("W_query", W_query);
    m.parameter("W_key", W_key);
    m.parameter("W_value", W_value);
  }

  // (..., T, d_in) -> (..., T, d_out).
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    return run(x, nullptr);
  }
  // The output and the attention weights (B, T, T), B the product of the leading dims.
  template <std::size_t R>
  std::pair<Tensor<T, R>, Tensor<T, 3>> forward_with_weights(const Tensor<T, R>& x) const {
    Tensor<T, 3> w;
    auto y = run(x, &w);
    return {std::move(y), std::move(w)};
  }

  // dW_q += x^T dq (summed over the batch), likewise for k and v; dx = dq W_q^T + dk W_k^T + dv W_v^T.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>("SelfAttentionV1");
    const auto in_shape = nn::detail::as_shape<R>(ctx.input_shape);
    nn::detail::check_grad_shape("SelfAttentionV1.backward", grad_output.shape(), detail::with_last(in_shape, d_out()));
    const auto g = scaled_dot_product_attention_backward(ctx.attn, detail::as_batched(grad_output));
    const index_t n = ctx.x.numel() / d_in();
    const auto x2 = ctx.x.view(Shape<2>{n, d_in()});  // (N, d_in)
    auto dx = Tensor<T, 2>::empty({n, d_in()});
    bool first = true;
    for (auto [p, d] : {std::pair{&W_query, &g.q}, std::pair{&W_key, &g.k}, std::pair{&W_value, &g.v}}) {
      const auto d2 = d->view(Shape<2>{n, d_out()});  // fresh from backward: contiguous
      if (p->requires_grad()) {
        auto grad = p->grad_buffer();
        backend::gemm(x2.t(), d2, grad, T(1), T(1));
      }
      backend::gemm(d2, p->data.t(), dx, T(1), first ? T(0) : T(1));
      first = false;
    }
    return dx.view(in_shape);
  }

 private:
  struct Context {
    Tensor<T, 3> x;  // (B, T, d_in)
    AttentionContext<T, 3> attn;
    std::vector<index_t> input_shape;
  };

  static Shape<2> shape_of(index_t d_in, index_t d_out) {
    detail::check_positive_dims("SelfAttentionV1", d_in, d_out);
    return {d_in, d_out};
  }

  template <std::size_t R>
  Tensor<T, R> run(const Tensor<T, R>& x, Tensor<T, 3>* weights) const {
    detail::check_input("SelfAttentionV1.forward", x, "W_query", W_query.shape(), d_in());
    const bool record = this->records_for_backward();
    const auto x3 = detail::as_batched(x);  // (B, T, d_in)
    const auto q = matmul(x3, W_query.data);  // (B, T, d_out)
    const auto k = matmul(x3, W_key.data);
    const auto v = matmul(x3, W_value.data);
    Context ctx{x3, {}, {}};
    const auto out = scaled_dot_product_attention(q, k, v, std::nullopt, AttentionOptions{},
                                                  record ? &ctx.attn : nullptr, weights);
    if (record) {
      ctx.input_shape.assign(x.shape().begin(), x.shape().end());
      this->save_for_backward(std::move(ctx));
    }
    return out.view(detail::with_last(x.shape(), d_out()));
  }
};

// Listing 3.2: SelfAttentionV1 with nn.Linear projections (qkv_bias = false as in the book).
template <floating_element T>
class SelfAttentionV2 : public detail::ProjectedSelfAttention<T> {
 public:
  SelfAttentionV2(index_t d_in, index_t d_out, bool qkv_bias = false, Generator& gen = default_generator())
      : detail::ProjectedSelfAttention<T>("SelfAttentionV2", d_in, d_out, qkv_bias, gen) {}

  std::string type_name() const override { return "SelfAttentionV2"; }

  // (..., T, d_in) -> (..., T, d_out)
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    return this->attend("SelfAttentionV2.forward", x, AttentionOptions{}, nullptr);
  }
  // The output and the attention weights (B, T, T).
  template <std::size_t R>
  std::pair<Tensor<T, R>, Tensor<T, 3>> forward_with_weights(const Tensor<T, R>& x) const {
    Tensor<T, 3> w;
    auto y = this->attend("SelfAttentionV2.forward", x, AttentionOptions{}, &w);
    return {std::move(y), std::move(w)};
  }
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    return this->attend_backward("SelfAttentionV2", grad_output);
  }
};

// Listing 3.3: causal self-attention with dropout on the attention weights. context_length is the book's
// mask buffer size: inputs may have at most that many tokens. The book's `mask` buffer (1 above the
// diagonal) is kept as a persistent buffer so that its state dicts load strictly; the computation itself
// uses the kernel's causal flag.
template <floating_element T>
class CausalAttention : public detail::ProjectedSelfAttention<T> {
 public:
  CausalAttention(index_t d_in, index_t d_out, index_t context_length, double dropout_p, bool qkv_bias = false,
                  Generator& gen = default_generator())
      : detail::ProjectedSelfAttention<T>("CausalAttention", d_in, d_out, qkv_bias, gen),
        dropout(checked_dropout(dropout_p)),
        mask(upper_mask(context_length)),
        context_length_(context_length) {}

  Dropout<T> dropout;  // its p is applied to the attention weights
  Tensor<T, 2> mask;   // (context_length, context_length): 1 above the diagonal

  index_t context_length() const noexcept { return context_length_; }

  std::string type_name() const override { return "CausalAttention"; }
  void register_members(Members<T>& m) override {
    detail::ProjectedSelfAttention<T>::register_members(m);
    m.child("dropout", dropout);
    m.buffer("mask", mask);
  }

  // (..., T, d_in) -> (..., T, d_out), T <= context_length. In training mode the weights' dropout mask is
  // drawn from current_generator() (nn.Dropout's order).
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    return run(x, nullptr);
  }
  template <std::size_t R>
  std::pair<Tensor<T, R>, Tensor<T, 3>> forward_with_weights(const Tensor<T, R>& x) const {
    Tensor<T, 3> w;
    auto y = run(x, &w);
    return {std::move(y), std::move(w)};
  }
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    return this->attend_backward("CausalAttention", grad_output);
  }

 private:
  static double checked_dropout(double p) {
    if (!(p >= 0.0 && p <= 1.0))
      throw std::invalid_argument("CausalAttention: dropout probability has to be between 0 and 1, but got " +
                                  std::to_string(p));
    return p;
  }
  static Tensor<T, 2> upper_mask(index_t n) {
    if (n <= 0) throw std::invalid_argument("CausalAttention: context_length must be positive, got " + std::to_string(n));
    auto m = zeros<T>(Shape<2>{n, n});
    for (index_t i = 0; i < n; ++i)
      for (index_t j = i + 1; j < n; ++j) m(i, j) = T(1);
    return m;
  }

  template <std::size_t R>
  Tensor<T, R> run(const Tensor<T, R>& x, Tensor<T, 3>* weights) const {
    if (x.shape()[R - 2] > context_length_)
      throw shape_error("CausalAttention.forward: input " + shape_string(x.shape()) + " has " +
                        std::to_string(x.shape()[R - 2]) + " tokens, more than context_length " +
                        std::to_string(context_length_) + " (the causal mask is [" + std::to_string(context_length_) +
                        ", " + std::to_string(context_length_) + "])");
    AttentionOptions options;
    options.is_causal = true;
    options.dropout_p = this->is_training() ? dropout.p() : 0.0;
    return this->attend("CausalAttention.forward", x, options, weights);
  }

  index_t context_length_;
};

}  // namespace eigenformer::nn::tutorial
