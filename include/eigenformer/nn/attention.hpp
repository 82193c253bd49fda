// Scaled dot-product attention, the computation at the heart of every attention layer, with its backward:
//
//   scores  = q k^T / sqrt(HS)                          (..., Tq, Tk)
//   scores  = masked_value where the mask says "masked"  (causal and/or a boolean mask)
//   weights = softmax(scores, -1)                        (..., Tq, Tk)   <- returned for visualisation
//   dropped = dropout(weights, p)                        (training only: p > 0)
//   out     = dropped v                                  (..., Tq, HSv)
//
// q is (..., Tq, HS), k (..., Tk, HS) and v (..., Tk, HSv) with the same leading (batch/head) dims. Every
// product is one of eigenformer's Eigen GEMMs; k^T and v^T are transposed views read in place, so q, k and v
// may be strided views into a fused qkv projection (MultiHeadAttention passes them without copying).
//
// Masks follow PyTorch's boolean attn_mask: true = attend, false = masked. A mask of any rank up to the
// scores' broadcasts to (..., Tq, Tk): (Tq, Tk) for one pattern shared by every batch and head, (B, 1, 1, Tk)
// for a key padding mask. `is_causal` masks keys after the query (key j > query i, top-left aligned as in
// torch's is_causal); a mask and is_causal may be combined.
//
// Masked scores become -inf by default: they get weight exactly 0, and a row whose keys are all masked (a
// sequence of padding only) gets weights 0 everywhere, so its output is 0 and its gradients are 0 instead of
// PyTorch's NaN. masked_value = -1e9 reproduces the BERT-from-scratch seed (listing 1.31) exactly, including
// its behaviour on such rows: uniform weights over the masked keys. Rows with at least one visible key are
// identical either way (exp(-1e9 - max) is 0 in float and double).
//
// Dropout is drawn exactly as nn.Dropout / F.dropout on the weights tensor: bernoulli_(1 - p) over its
// elements in row-major order from the generator, scaled by 1 / (1 - p).
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/tensor.hpp"

namespace eigenformer::nn {

struct AttentionOptions {
  double dropout_p = 0.0;        // dropout on the attention weights (applied whenever > 0)
  bool is_causal = false;        // key j is masked for query i when j > i
  std::optional<double> scale = std::nullopt;  // multiplies the scores; default: divided by sqrt(HS)
  double masked_value = -std::numeric_limits<double>::infinity();  // or the seed's -1e9
  Generator* generator = nullptr;  // dropout masks; nullptr = default_generator()
};

// What backward needs from a forward: handles to the inputs and to the softmax output (no copies), the
// scaled dropout mask, and the boolean mask when masked scores were given a finite value.
template <floating_element T, std::size_t R>
struct AttentionContext {
  Tensor<T, R> q, k, v;
  Tensor<T, R> weights;                // softmax output, before dropout (..., Tq, Tk)
  std::optional<Tensor<T, R>> keep;    // dropout: 0 or 1 / (1 - p), same shape as weights
  std::optional<Tensor<bool, R>> mask; // broadcast view of the boolean mask (finite masked_value only)
  bool causal = false;                 // ... and the causal flag (finite masked_value only)
  T masked_value = -std::numeric_limits<T>::infinity();
  double divisor = 1.0;                // scores were divided by this
};

template <floating_element T, std::size_t R>
struct AttentionGrads {
  Tensor<T, R> q, k, v;  // dL/dq (..., Tq, HS), dL/dk (..., Tk, HS), dL/dv (..., Tk, HSv)
};

namespace detail {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using RowsMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// A fresh contiguous (..., rows, cols) tensor as a (numel / cols) x cols row-major array.
template <typename T, std::size_t R>
RowsMap<T> rows_of(Tensor<T, R>& t) {
  const index_t cols = t.shape()[R - 1];
  return RowsMap<T>(t.data(), cols == 0 ? 0 : t.numel() / cols, cols);
}

// s (contiguous, (..., Tq, Tk)) := value where the causal pattern and/or the (broadcast) mask masks it.
template <typename T, std::size_t R>
void fill_masked(Tensor<T, R>& s, const Tensor<bool, R>* mask, bool causal, T value) {
  const index_t tq = s.shape()[R - 2], tk = s.shape()[R - 1];
  if (s.numel() == 0) return;
  T* p = s.data();
  if (causal) {
    const index_t blocks = s.numel() / (tq * tk);
    for (index_t b = 0; b < blocks; ++b)
      for (index_t i = 0; i + 1 < tk && i < tq; ++i) {
        T* row = p + (b * tq + i) * tk;
        std::fill(row + i + 1, row + tk, value);
      }
  }
  if (mask) {
    const bool* m = mask->data();
    const index_t ms = mask->strides()[R - 1];
    eigenformer::detail::for_each_row<R, 2>(s.shape(), {s.strides(), mask->strides()},
                                            [&](const std::array<index_t, 2>& off) {
                                              T* row = p + off[0];
                                              const bool* mrow = m + off[1];
                                              for (index_t j = 0; j < tk; ++j)
                                                if (!mrow[j * ms]) row[j] = value;
                                            });
  }
}

template <std::size_t R>
bool same_batch_dims(const Shape<R>& a, const Shape<R>& b) {
  for (std::size_t i = 0; i + 2 < R; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

template <floating_element T, std::size_t R>
void check_qkv(const char* op, const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v) {
  static_assert(R >= 2, "scaled_dot_product_attention: q, k and v need at least two dims (..., tokens, features)");
  const std::string shapes = "query " + shape_string(q.shape()) + ", key " + shape_string(k.shape()) +
                             ", value " + shape_string(v.shape());
  if (q.shape()[R - 1] != k.shape()[R - 1])
    throw shape_error(std::string(op) + ": " + shapes + ": query and key differ in their last dim (" +
                      std::to_string(q.shape()[R - 1]) + " vs " + std::to_string(k.shape()[R - 1]) + ")");
  if (k.shape()[R - 2] != v.shape()[R - 2])
    throw shape_error(std::string(op) + ": " + shapes + ": key and value differ in their number of tokens (" +
                      std::to_string(k.shape()[R - 2]) + " vs " + std::to_string(v.shape()[R - 2]) + ")");
  if (!same_batch_dims(q.shape(), k.shape()) || !same_batch_dims(q.shape(), v.shape()))
    throw shape_error(std::string(op) + ": " + shapes + ": the leading (batch, head) dims must be equal");
}

// The mask seen with the scores' shape (a stride-0 view; no copy), or a shape_error naming both shapes.
template <std::size_t R, std::size_t Rm>
Tensor<bool, R> broadcast_mask(const char* op, const Tensor<bool, Rm>& mask, const Shape<R>& scores) {
  static_assert(Rm <= R, "scaled_dot_product_attention: the mask may not have more dims than the scores");
  for (std::size_t i = 0; i < Rm; ++i) {
    const index_t m = mask.shape()[i], s = scores[i + (R - Rm)];
    if (m != s && m != 1)
      throw shape_error(std::string(op) + ": mask " + shape_string(mask.shape()) +
                        " does not broadcast to the attention scores " + shape_string(scores) +
                        " (batch..., query tokens, key tokens)");
  }
  return mask.expand(scores);
}

template <floating_element T, std::size_t R>
Tensor<T, R> attention_forward(const char* op, const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                               const Tensor<bool, R>* mask, const AttentionOptions& opt, AttentionContext<T, R>* ctx,
                               Tensor<T, R>* weights_out) {
  if (!(opt.dropout_p >= 0.0 && opt.dropout_p <= 1.0))
    throw std::invalid_argument(std::string(op) + ": dropout probability has to be between 0 and 1, but got " +
                                std::to_string(opt.dropout_p));
  const index_t hs = q.shape()[R - 1];
  const double divisor = opt.scale ? 1.0 / *opt.scale : std::sqrt(static_cast<double>(hs));

  Tensor<T, R> s = matmul(q, k.transpose(-2, -1));  // (..., Tq, Tk), fresh and contiguous
  ArrayMap<T>(s.data(), s.numel()) /= static_cast<T>(divisor);
  const T masked = static_cast<T>(opt.masked_value);
  fill_masked(s, mask, opt.is_causal, masked);
  Tensor<T, R> w = softmax(s, -1);  // a row of only -inf gives zeros

  Tensor<T, R> dropped = w;
  std::optional<Tensor<T, R>> keep;
  if (opt.dropout_p > 0.0 && w.numel() > 0) {
    keep = Tensor<T, R>::empty(w.shape());
    if (opt.dropout_p == 1.0) {
      keep->zero_();
    } else {  // nn.Dropout's CPU path: noise = bernoulli_(1 - p); noise /= (1 - p); out = x * noise
      bernoulli_(*keep, 1.0 - opt.dropout_p, opt.generator ? *opt.generator : default_generator());
      ArrayMap<T>(keep->data(), keep->numel()) *= T(1) / static_cast<T>(1.0 - opt.dropout_p);
    }
    dropped = mul(w, *keep);
  }
  Tensor<T, R> out = matmul(dropped, v);  // (..., Tq, HSv)

  if (weights_out) *weights_out = w;
  if (ctx) {
    *ctx = AttentionContext<T, R>{q, k, v, w, std::move(keep), std::nullopt, false, masked, divisor};
    if (std::isfinite(opt.masked_value)) {  // -inf entries already get weight 0 and so gradient 0
      if (mask) ctx->mask = *mask;
      ctx->causal = opt.is_causal;
    }
  }
  return out;
}

}  // namespace detail

// The general form. Fills *ctx for backward and *weights with the attention weights (before dropout) when
// given. The mask is a boolean tensor broadcastable to (..., Tq, Tk), true = attend.
template <floating_element T, std::size_t R, std::size_t Rm>
Tensor<T, R> scaled_dot_product_attention(const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                                          const Tensor<bool, Rm>& attn_mask, const AttentionOptions& options,
                                          std::type_identity_t<AttentionContext<T, R>>* ctx = nullptr,
                                          std::type_identity_t<Tensor<T, R>>* weights = nullptr) {
  constexpr const char* op = "scaled_dot_product_attention";
  detail::check_qkv(op, q, k, v);
  Shape<R> scores = q.shape();
  scores[R - 1] = k.shape()[R - 2];
  const auto m = detail::broadcast_mask(op, attn_mask, scores);
  return detail::attention_forward(op, q, k, v, &m, options, ctx, weights);
}
template <floating_element T, std::size_t R>
Tensor<T, R> scaled_dot_product_attention(const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                                          std::nullopt_t, const AttentionOptions& options,
                                          std::type_identity_t<AttentionContext<T, R>>* ctx = nullptr,
                                          std::type_identity_t<Tensor<T, R>>* weights = nullptr) {
  constexpr const char* op = "scaled_dot_product_attention";
  detail::check_qkv(op, q, k, v);
  return detail::attention_forward<T, R>(op, q, k, v, nullptr, options, ctx, weights);
}

// torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal): the output only.
template <floating_element T, std::size_t R, std::size_t Rm>
Tensor<T, R> scaled_dot_product_attention(const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                                          const Tensor<bool, Rm>& attn_mask, double dropout_p = 0.0,
                                          bool is_causal = false, Generator& gen = default_generator()) {
  return scaled_dot_product_attention(q, k, v, attn_mask, AttentionOptions{dropout_p, is_causal, std::nullopt,
                                      -std::numeric_limits<double>::infinity(), &gen});
}
template <floating_element T, std::size_t R>
Tensor<T, R> scaled_dot_product_attention(const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                                          std::nullopt_t = std::nullopt, double dropout_p = 0.0,
                                          bool is_causal = false, Generator& gen = default_generator()) {
  return scaled_dot_product_attention(q, k, v, std::nullopt, AttentionOptions{dropout_p, is_causal, std::nullopt,
                                      -std::numeric_limits<double>::infinity(), &gen});
}

// Backward of scaled_dot_product_attention given dL/d(out) (..., Tq, HSv). With P the weights, D the dropout
// mask and g the incoming gradient:
//   dv = (P * D)^T g
//   dP = (g v^T) * D
//   dS = P * (dP - rowsum(dP * P))     softmax backward; masked entries have P = 0, so dS = 0 there
//   dq = dS k / divisor,  dk = dS^T q / divisor
template <floating_element T, std::size_t R>
AttentionGrads<T, R> scaled_dot_product_attention_backward(const AttentionContext<T, R>& ctx,
                                                           const Tensor<T, R>& grad_output) {
  Shape<R> out_shape = ctx.q.shape();
  out_shape[R - 1] = ctx.v.shape()[R - 1];
  detail::check_grad_shape("scaled_dot_product_attention.backward", grad_output.shape(), out_shape);
  const Tensor<T, R> dropped = ctx.keep ? mul(ctx.weights, *ctx.keep) : ctx.weights;
  AttentionGrads<T, R> g;
  g.v = matmul(dropped.transpose(-2, -1), grad_output);      // (..., Tk, HSv)
  Tensor<T, R> ds = matmul(grad_output, ctx.v.transpose(-2, -1));  // dL/d(dropped): (..., Tq, Tk)
  auto D = detail::rows_of(ds);
  Tensor<T, R> w = ctx.weights;
  const auto P = detail::rows_of(w);
  if (ctx.keep) {
    Tensor<T, R> keep = *ctx.keep;
    D *= detail::rows_of(keep);
  }
  const Eigen::Array<T, Eigen::Dynamic, 1> rowdot = (P * D).rowwise().sum();
  D.colwise() -= rowdot;
  D *= P;
  // masked_fill's backward: no gradient reaches a masked score (only matters for a finite masked value,
  // where a fully masked row has nonzero weights).
  if (ctx.mask || ctx.causal) detail::fill_masked(ds, ctx.mask ? &*ctx.mask : nullptr, ctx.causal, T(0));
  detail::ArrayMap<T>(ds.data(), ds.numel()) /= static_cast<T>(ctx.divisor);
  g.q = matmul(ds, ctx.k);                       // (..., Tq, HS)
  g.k = matmul(ds.transpose(-2, -1), ctx.q);     // (..., Tk, HS)
  return g;
}

}  // namespace eigenformer::nn
