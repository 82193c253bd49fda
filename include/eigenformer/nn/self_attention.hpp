// The single-head attention modules of "Build a Large Language Model (From Scratch)", chapter 3, each with
// its backward pass:
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
// W_key.weight, ...), so their state dicts load by name.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "eigenformer/nn/attention.hpp"
#include "eigenformer/nn/linear.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

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

  // The attention weights of the last forward (B, T, T), kept when keep_weights(true): for visualisation.
  void keep_weights(bool keep = true) noexcept { keep_weights_ = keep; }
  const std::optional<Tensor<T, 3>>& attention_weights() const noexcept { return weights_; }

  void collect_parameters(const std::string& prefix, ParameterList<T>& out) override {
    W_query.collect_parameters(prefix + "W_query.", out);
    W_key.collect_parameters(prefix + "W_key.", out);
    W_value.collect_parameters(prefix + "W_value.", out);
  }

 protected:
  ProjectedSelfAttention(const char* layer, index_t d_in, index_t d_out, bool qkv_bias, Generator& gen)
      : W_query((check_positive_dims(layer, d_in, d_out), d_in), d_out, qkv_bias, gen),
        W_key(d_in, d_out, qkv_bias, gen),
        W_value(d_in, d_out, qkv_bias, gen) {}

  // (..., T, d_in) -> (..., T, d_out)
  template <std::size_t R>
  Tensor<T, R> attend(const char* op, const Tensor<T, R>& x, const AttentionOptions& options) {
    check_input(op, x, "W_query.weight", W_query.weight.shape(), d_in());
    ctx_.reset();
    const auto x3 = as_batched(x);     // (B, T, d_in)
    const auto q = W_query.forward(x3);  // (B, T, d_out)
    const auto k = W_key.forward(x3);
    const auto v = W_value.forward(x3);
    AttentionContext<T, 3> ctx;
    Tensor<T, 3> w;
    const auto out = scaled_dot_product_attention(q, k, v, std::nullopt, options,
                                                  this->is_training() ? &ctx : nullptr, &w);  // (B, T, d_out)
    weights_.reset();
    if (keep_weights_) weights_ = w;
    if (this->is_training()) {
      ctx_ = std::move(ctx);
      in_shape_.assign(x.shape().begin(), x.shape().end());
    }
    return out.view(with_last(x.shape(), d_out()));
  }

  // dL/dx = sum over q, k, v of the projection backward of the attention gradient.
  template <std::size_t R>
  Tensor<T, R> attend_backward(const char* layer, const Tensor<T, R>& grad_output) {
    if (!ctx_) Module<T>::throw_no_cache(layer);
    const auto ctx = std::move(*ctx_);
    ctx_.reset();
    nn::detail::check_grad_shape((std::string(layer) + ".backward").c_str(), grad_output.shape(),
                                 with_last(nn::detail::as_shape<R>(in_shape_), d_out()));
    const auto g = scaled_dot_product_attention_backward(ctx, as_batched(grad_output));
    auto dx = W_query.backward(g.q);
    dx = add(dx, W_key.backward(g.k));
    dx = add(dx, W_value.backward(g.v));
    return dx.view(nn::detail::as_shape<R>(in_shape_));
  }

  void set_children_training(bool mode) override {
    W_query.train(mode);
    W_key.train(mode);
    W_value.train(mode);
  }

 private:
  std::optional<AttentionContext<T, 3>> ctx_;  // training mode only
  std::vector<index_t> in_shape_;
  bool keep_weights_ = false;
  std::optional<Tensor<T, 3>> weights_;
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

  // (..., T, d_in) -> (..., T, d_out). Training mode caches the input and the attention context.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    detail::check_input("SelfAttentionV1.forward", x, "W_query", W_query.shape(), d_in());
    cache_.reset();
    const auto x3 = detail::as_batched(x);           // (B, T, d_in)
    const auto q = matmul(x3, W_query.data);         // (B, T, d_out)
    const auto k = matmul(x3, W_key.data);
    const auto v = matmul(x3, W_value.data);
    Cache cache{x3, {}, {x.shape().begin(), x.shape().end()}};
    const auto out = scaled_dot_product_attention(q, k, v, std::nullopt, AttentionOptions{},
                                                  this->is_training() ? &cache.ctx : nullptr);
    if (this->is_training()) cache_ = std::move(cache);
    return out.view(detail::with_last(x.shape(), d_out()));
  }

  // dW_q += x^T dq (summed over the batch), likewise for k and v; dx = dq W_q^T + dk W_k^T + dv W_v^T.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    if (!cache_) Module<T>::throw_no_cache("SelfAttentionV1");
    const Cache cache = std::move(*cache_);
    cache_.reset();
    nn::detail::check_grad_shape("SelfAttentionV1.backward", grad_output.shape(),
                                 detail::with_last(nn::detail::as_shape<R>(cache.shape), d_out()));
    const auto g = scaled_dot_product_attention_backward(cache.ctx, detail::as_batched(grad_output));
    const index_t n = cache.x.numel() / d_in();
    const auto x2 = cache.x.view(Shape<2>{n, d_in()});  // (N, d_in)
    const auto dq = g.q.view(Shape<2>{n, d_out()});      // (N, d_out), fresh from backward
    const auto dk = g.k.view(Shape<2>{n, d_out()});
    const auto dv = g.v.view(Shape<2>{n, d_out()});
    as_matrix(W_query.grad).noalias() += as_matrix(x2).transpose() * as_matrix(dq);
    as_matrix(W_key.grad).noalias() += as_matrix(x2).transpose() * as_matrix(dk);
    as_matrix(W_value.grad).noalias() += as_matrix(x2).transpose() * as_matrix(dv);
    auto dx = Tensor<T, 2>::empty({n, d_in()});
    auto dxm = as_matrix(dx);
    dxm.noalias() = as_matrix(dq) * as_matrix(W_query.data).transpose();
    dxm.noalias() += as_matrix(dk) * as_matrix(W_key.data).transpose();
    dxm.noalias() += as_matrix(dv) * as_matrix(W_value.data).transpose();
    return dx.view(nn::detail::as_shape<R>(cache.shape));
  }

  void collect_parameters(const std::string& prefix, ParameterList<T>& out) override {
    add_parameter(out, prefix, "W_query", W_query);
    add_parameter(out, prefix, "W_key", W_key);
    add_parameter(out, prefix, "W_value", W_value);
  }

 private:
  static Shape<2> shape_of(index_t d_in, index_t d_out) {
    detail::check_positive_dims("SelfAttentionV1", d_in, d_out);
    return {d_in, d_out};
  }
  struct Cache {
    Tensor<T, 3> x;  // (B, T, d_in)
    AttentionContext<T, 3> ctx;
    std::vector<index_t> shape;
  };
  std::optional<Cache> cache_;  // training mode only
};

// Listing 3.2: SelfAttentionV1 with nn.Linear projections (qkv_bias = false as in the book).
template <floating_element T>
class SelfAttentionV2 : public detail::ProjectedSelfAttention<T> {
 public:
  SelfAttentionV2(index_t d_in, index_t d_out, bool qkv_bias = false, Generator& gen = default_generator())
      : detail::ProjectedSelfAttention<T>("SelfAttentionV2", d_in, d_out, qkv_bias, gen) {}

  // (..., T, d_in) -> (..., T, d_out)
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    return this->attend("SelfAttentionV2.forward", x, AttentionOptions{});
  }
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    return this->attend_backward("SelfAttentionV2", grad_output);
  }
};

// Listing 3.3: causal self-attention with dropout on the attention weights. context_length is the book's
// mask buffer size: inputs may have at most that many tokens.
template <floating_element T>
class CausalAttention : public detail::ProjectedSelfAttention<T> {
 public:
  CausalAttention(index_t d_in, index_t d_out, index_t context_length, double dropout, bool qkv_bias = false,
                  Generator& gen = default_generator())
      : detail::ProjectedSelfAttention<T>("CausalAttention", d_in, d_out, qkv_bias, gen),
        context_length_(context_length),
        dropout_(dropout),
        gen_(&gen) {
    if (context_length <= 0)
      throw std::invalid_argument("CausalAttention: context_length must be positive, got " +
                                  std::to_string(context_length));
    if (!(dropout >= 0.0 && dropout <= 1.0))
      throw std::invalid_argument("CausalAttention: dropout probability has to be between 0 and 1, but got " +
                                  std::to_string(dropout));
  }

  index_t context_length() const noexcept { return context_length_; }
  double dropout() const noexcept { return dropout_; }

  // (..., T, d_in) -> (..., T, d_out), T <= context_length. In training mode the weights' dropout mask is
  // drawn from the generator (nn.Dropout's order).
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    if (x.shape()[R - 2] > context_length_)
      throw shape_error("CausalAttention.forward: input " + shape_string(x.shape()) + " has " +
                        std::to_string(x.shape()[R - 2]) + " tokens, more than context_length " +
                        std::to_string(context_length_) + " (the causal mask is [" + std::to_string(context_length_) +
                        ", " + std::to_string(context_length_) + "])");
    AttentionOptions options;
    options.is_causal = true;
    options.dropout_p = this->is_training() ? dropout_ : 0.0;
    options.generator = gen_;
    return this->attend("CausalAttention.forward", x, options);
  }
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    return this->attend_backward("CausalAttention", grad_output);
  }

 private:
  index_t context_length_;
  double dropout_;
  Generator* gen_;
};

}  // namespace eigenformer::nn
