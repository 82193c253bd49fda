// The attention core: the one implementation of scaled dot-product attention that every attention layer of
// the library calls (MultiHeadAttention, GPT-2's GPT2Attention, BERT's self-attention), with its backward
// and a per-layer KV cache for decoding.
//
// ---- API ------------------------------------------------------------------------------------------------
//
//   auto merged = nn::fused_attention(qkv, {.num_heads = NH, .causal = true, .dropout_p = p},
//                                     {.key_padding_mask = &mask, .cache = &layer_cache,
//                                      .weights = &w, .context = recording ? &ctx : nullptr});
//   auto d_qkv  = nn::fused_attention_backward(ctx, d_merged);
//
//   qkv     (B, Tn, 3C)  the fused projection output: columns [0, C) are the query features, [C, 2C) the
//                        key features, [2C, 3C) the value features, and head h owns features
//                        h*HS .. h*HS+HS-1 of each (HS = C / NH). This is MultiHeadAttention's qkv Linear,
//                        GPT-2's c_attn Conv1D, and BERT's query/key/value weights concatenated.
//   merged  (B, Tn, C)   the heads' contexts side by side (head h in columns h*HS ..), ready for the output
//                        projection: no split or merge copies are left to the caller.
//   options              num_heads; causal (key j hidden from query i when j > past + i); dropout_p on the
//                        weights (the caller passes 0 outside training); masked_value (-inf, or -1e9 to
//                        reproduce seed 000's masked_fill); scale (default 1 / sqrt(HS)).
//   extras (all optional)
//     key_padding_mask   (B, Tk) bool, true = a real token that may be attended to, false = padding
//                        (Hugging Face's attention_mask; Tk = past + Tn with a cache).
//     cache              a LayerKVCache: the new keys and values are written at positions
//                        past .. past+Tn-1 (past = cache->length()), the queries attend to all past + Tn
//                        keys, and the cache length advances by Tn. A prompt after cached tokens gets the
//                        causal offset `past`; one decoded token sees every cached key, so needs no mask.
//     weights            receives the attention weights (B, NH, Tn, Tk) after the softmax, before dropout.
//     context            receives what fused_attention_backward needs (handles, no copies). Pass it only
//                        when the caller records for backward; not combinable with a cache.
//   fused_attention_backward(ctx, d_merged (B, T, C)) -> d_qkv (B, T, 3C), in the same column layout, ready
//                        for the projection's backward.
//
//   KVCache<T>  a decoder's cache: one LayerKVCache<T> per layer, each holding keys and values preallocated
//               as (B, NH, capacity, HS) plus its length, so decoding never reallocates.
//
//   scaled_dot_product_attention(q, k, v, mask, options) and its backward: the same computation on
//               separate q (..., Tq, HS), k (..., Tk, HS), v (..., Tk, HSv) of any rank, with a boolean mask
//               broadcastable to (..., Tq, Tk) (torch.nn.functional.scaled_dot_product_attention).
//
// ---- The computation, per (batch, head) -------------------------------------------------------------------
//
//   scores  = q k^T / sqrt(HS)                          (Tq, Tk)
//   scores  = masked_value where masked                 (causal and/or the boolean mask)
//   weights = softmax(scores, -1)                        <- returned for visualisation
//   dropped = dropout(weights, p)
//   out     = dropped v                                  (Tq, HSv)
//
// Masks follow PyTorch's boolean attn_mask: true = attend. Masked scores become -inf by default: they get
// weight exactly 0, and a row whose keys are all masked (a sequence of padding only) gets weights 0
// everywhere, so its output and gradients are 0 instead of PyTorch's NaN. masked_value = -1e9 reproduces
// the BERT-from-scratch seed (000), including on such rows: uniform weights over the masked keys. Rows with
// at least one visible key are identical either way (exp(-1e9 - max) is 0 in float and double).
//
// Dropout is drawn exactly as nn.Dropout / F.dropout on the weights tensor, from current_generator() (or
// options.generator for the functional form): bernoulli_(1 - p) over the (..., Tq, Tk) elements in row-major
// order, scaled by 1 / (1 - p). The whole mask is drawn before the parallel part, so the draws do not depend
// on the thread count.
//
// Two paths compute this. A call that asks for the weights, records a backward context or applies dropout
// forms the (Tq, Tk) scores and weights of each problem (the "weights path"). Any other call -- inference:
// eval mode, InferenceMode, every cached forward -- streams: blocks of queries against blocks of keys with
// an online softmax, never holding more than a score tile, skipping the key blocks the causal mask hides
// (see "streaming attention" below). The two agree to rounding (a few float ulps of the output).
//
// Threads: the (batch, head) problems -- (batch, head, query block) units when streaming -- run through
// backend::parallel_for. Each one writes only its own rows and columns of the output (the cache rows are
// written before), and every sum inside a unit is computed by one thread, so results are bit-identical for
// every thread count. Products go through backend::gemm, which reads the strided query/key/value columns of
// qkv and k^T in place.
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/tensor.hpp"

namespace eigenformer::nn {

// ---- KV cache ---------------------------------------------------------------------------------------------

template <floating_element T>
class LayerKVCache;

namespace detail {
// The core's access to a cache's length (users see it read-only).
struct KVCacheAccess {
  template <floating_element T>
  static void advance(LayerKVCache<T>& c, index_t n) noexcept {
    c.length_ += n;
  }
};
}  // namespace detail

// One attention layer's cached keys and values for up to `capacity` positions of B sequences.
template <floating_element T>
class LayerKVCache {
 public:
  // Throws std::invalid_argument for a non-positive size.
  LayerKVCache(index_t batch, index_t heads, index_t capacity, index_t head_dim)
      : keys(Tensor<T, 4>::empty(checked_shape(batch, heads, capacity, head_dim))),
        values(Tensor<T, 4>::empty(keys.shape())) {}

  Tensor<T, 4> keys, values;  // (B, NH, capacity, HS); positions [0, length()) are valid

  index_t length() const noexcept { return length_; }
  index_t batch() const noexcept { return keys.shape()[0]; }
  index_t heads() const noexcept { return keys.shape()[1]; }
  index_t capacity() const noexcept { return keys.shape()[2]; }
  index_t head_dim() const noexcept { return keys.shape()[3]; }
  // Forgets the cached tokens; the storage is kept for the next sequence.
  void reset() noexcept { length_ = 0; }

 private:
  friend struct detail::KVCacheAccess;
  static Shape<4> checked_shape(index_t b, index_t nh, index_t cap, index_t hs) {
    if (b <= 0 || nh <= 0 || cap <= 0 || hs <= 0)
      throw std::invalid_argument("LayerKVCache: batch, heads, capacity and head_dim must be positive, got " +
                                  shape_string(Shape<4>{b, nh, cap, hs}));
    return {b, nh, cap, hs};
  }
  index_t length_ = 0;
};

// The caches of every attention layer of a decoder. Memory: 2 num_layers B capacity NH HS elements (GPT-2
// small, B = 1, 1024 positions: 75 MB in float), so size the capacity to the longest sequence expected.
template <floating_element T>
class KVCache {
 public:
  KVCache(index_t num_layers, index_t batch, index_t heads, index_t capacity, index_t head_dim) {
    if (num_layers <= 0)
      throw std::invalid_argument("KVCache: num_layers must be positive, got " + std::to_string(num_layers));
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (index_t i = 0; i < num_layers; ++i) layers_.emplace_back(batch, heads, capacity, head_dim);
  }

  LayerKVCache<T>& operator[](std::size_t i) { return layers_[i]; }
  const LayerKVCache<T>& operator[](std::size_t i) const { return layers_[i]; }
  LayerKVCache<T>& layer(std::size_t i) { return layers_.at(i); }
  std::size_t num_layers() const noexcept { return layers_.size(); }
  auto begin() noexcept { return layers_.begin(); }
  auto end() noexcept { return layers_.end(); }

  // Tokens cached. Every layer holds the same number once a model forward has gone through all of them;
  // the first layer's count is the one a model reads before its forward.
  index_t length() const noexcept { return layers_.front().length(); }
  index_t batch() const noexcept { return layers_.front().batch(); }
  index_t heads() const noexcept { return layers_.front().heads(); }
  index_t capacity() const noexcept { return layers_.front().capacity(); }
  index_t head_dim() const noexcept { return layers_.front().head_dim(); }
  void reset() noexcept {
    for (auto& l : layers_) l.reset();
  }

 private:
  std::vector<LayerKVCache<T>> layers_;
};

// ---- options and contexts ---------------------------------------------------------------------------------

// Options of scaled_dot_product_attention.
struct AttentionOptions {
  double dropout_p = 0.0;                      // dropout on the attention weights (applied whenever > 0)
  bool is_causal = false;                      // key j is masked for query i when j > i (top-left aligned)
  std::optional<double> scale = std::nullopt;  // multiplies the scores; default: divided by sqrt(HS)
  double masked_value = -std::numeric_limits<double>::infinity();  // or the seed's -1e9
  Generator* generator = nullptr;              // dropout draws; nullptr = current_generator()
};

// Options of fused_attention.
struct FusedAttentionOptions {
  index_t num_heads = 1;
  bool causal = false;       // key j is masked for query i when j > past + i
  double dropout_p = 0.0;    // on the weights; pass 0 outside training
  double masked_value = -std::numeric_limits<double>::infinity();  // or the seed's -1e9
  std::optional<double> scale = std::nullopt;  // default 1 / sqrt(HS)
};

// What scaled_dot_product_attention_backward needs: handles to the inputs and to the softmax output (no
// copies), the scaled dropout mask, and the boolean mask when masked scores were given a finite value.
template <floating_element T, std::size_t R>
struct AttentionContext {
  Tensor<T, R> q, k, v;
  Tensor<T, R> weights;                 // softmax output, before dropout (..., Tq, Tk)
  std::optional<Tensor<T, R>> keep;     // dropout: 0 or 1 / (1 - p), same shape as weights
  std::optional<Tensor<bool, R>> mask;  // broadcast view of the boolean mask (finite masked_value only)
  bool causal = false;                  // ... and the causal flag (finite masked_value only)
  T masked_value = -std::numeric_limits<T>::infinity();
  double divisor = 1.0;                 // scores were divided by this
};

template <floating_element T, std::size_t R>
struct AttentionGrads {
  Tensor<T, R> q, k, v;  // dL/dq (..., Tq, HS), dL/dk (..., Tk, HS), dL/dv (..., Tk, HSv)
};

// What fused_attention_backward needs from a recording forward.
template <floating_element T>
struct FusedAttentionContext {
  Tensor<T, 3> qkv;                                // (B, T, 3C), the projection output (a handle)
  Tensor<T, 4> weights;                            // (B, NH, T, T) softmax output, before dropout
  std::optional<Tensor<T, 4>> keep;                // dropout: 0 or 1 / (1 - p)
  std::optional<Tensor<bool, 2>> key_padding_mask; // finite masked_value only (see masked_fill's backward)
  index_t num_heads = 1;
  bool causal = false;                             // finite masked_value only
  double divisor = 1.0;
};

// The optional parts of one fused_attention call.
template <floating_element T>
struct FusedAttentionExtras {
  const Tensor<bool, 2>* key_padding_mask = nullptr;  // (B, Tk), true = real token
  LayerKVCache<T>* cache = nullptr;                   // decode: append and attend to the cached keys
  Tensor<T, 4>* weights = nullptr;                    // out: (B, NH, Tn, Tk)
  FusedAttentionContext<T>* context = nullptr;        // out: for fused_attention_backward
};

namespace detail {

// A boolean mask seen as a (Tq, Tk) matrix: element (i, j) at p[i * rs + j * cs]. rs = 0 for a key
// padding mask (one row shared by every query).
struct MaskView {
  const bool* p = nullptr;
  index_t rs = 0, cs = 0;
};

// How one (batch, head) problem turns scores into masked, scaled scores.
template <typename T>
struct ScoreRule {
  T divisor = T(1);
  T masked = -std::numeric_limits<T>::infinity();
  bool causal = false;
  index_t causal_offset = 0;  // query i sees keys j <= i + offset
};

// Writes `value` into the masked entries of the contiguous (Tq, Tk) matrix s.
template <typename T>
void fill_masked(T* s, index_t tq, index_t tk, const MaskView& mask, const ScoreRule<T>& rule, T value) {
  for (index_t i = 0; i < tq; ++i) {
    T* row = s + i * tk;
    if (rule.causal) {
      const index_t first_hidden = std::max<index_t>(0, std::min<index_t>(tk, i + rule.causal_offset + 1));
      std::fill(row + first_hidden, row + tk, value);
    }
    if (mask.p) {
      const bool* m = mask.p + i * mask.rs;
      for (index_t j = 0; j < tk; ++j)
        if (!m[j * mask.cs]) row[j] = value;
    }
  }
}

// One (batch, head) forward. q (Tq, HS), k (Tk, HS), v (Tk, HSv) any 2-D views; w (Tq, Tk) contiguous,
// receives the weights; out (Tq, HSv) with unit column stride; keep (Tq, Tk) contiguous or null; scratch
// holds at least Tq * Tk elements.
template <typename T>
void attention_problem_forward(const Tensor<T, 2>& q, const Tensor<T, 2>& k, const Tensor<T, 2>& v, Tensor<T, 2>& w,
                               Tensor<T, 2>& out, const T* keep, const MaskView& mask, const ScoreRule<T>& rule,
                               Tensor<T, 2>& scratch) {
  const index_t tq = q.shape()[0], tk = k.shape()[0];
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  backend::gemm(q, k.t(), scratch);  // scores (Tq, Tk)
  T* s = scratch.data();
  Eigen::Map<Arr>(s, tq * tk) /= rule.divisor;
  fill_masked(s, tq, tk, mask, rule, rule.masked);
  if (tk > 0)
    for (index_t i = 0; i < tq; ++i)  // the tensor softmax's row kernel: a row of only -inf gives zeros
      eigenformer::detail::softmax_row(s + i * tk, w.data() + i * tk, tk);
  if (keep) {
    Eigen::Map<Arr>(s, tq * tk) = Eigen::Map<const Arr>(w.data(), tq * tk) * Eigen::Map<const Arr>(keep, tq * tk);
    backend::gemm(scratch, v, out);
  } else {
    backend::gemm(w, v, out);
  }
}

// One (batch, head) backward given g = dL/d(out) (Tq, HSv). With P the weights, D the dropout mask:
//   dv = (P * D)^T g
//   dP = (g v^T) * D
//   dS = P * (dP - rowsum(dP * P))     softmax backward; masked entries have P = 0, so dS = 0 there
//   dq = dS k / divisor,  dk = dS^T q / divisor
// dq, dk, dv have unit column stride; scratch_a and scratch_b hold Tq * Tk elements each.
template <typename T>
void attention_problem_backward(const Tensor<T, 2>& q, const Tensor<T, 2>& k, const Tensor<T, 2>& v,
                                const Tensor<T, 2>& w, const T* keep, const MaskView& mask, const ScoreRule<T>& rule,
                                bool zero_masked, const Tensor<T, 2>& g, Tensor<T, 2>& dq, Tensor<T, 2>& dk,
                                Tensor<T, 2>& dv, Tensor<T, 2>& scratch_a, Tensor<T, 2>& scratch_b) {
  const index_t tq = q.shape()[0], tk = k.shape()[0];
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  using Rows = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  using ConstRows = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  const ConstRows P(w.data(), tq, tk);
  if (keep) {
    Rows(scratch_a.data(), tq, tk) = P * ConstRows(keep, tq, tk);
    backend::gemm(scratch_a.t(), g, dv);
  } else {
    backend::gemm(w.t(), g, dv);
  }
  backend::gemm(g, v.t(), scratch_b);  // dL/d(dropped)
  Rows D(scratch_b.data(), tq, tk);
  if (keep) D *= ConstRows(keep, tq, tk);
  const Arr rowdot = (P * D).rowwise().sum();
  D.colwise() -= rowdot;
  D *= P;
  // masked_fill's backward: no gradient reaches a masked score. Only a finite masked value needs it: a
  // fully masked row then has nonzero weights.
  if (zero_masked) fill_masked(scratch_b.data(), tq, tk, mask, rule, T(0));
  D /= rule.divisor;
  backend::gemm(scratch_b, k, dq);
  backend::gemm(scratch_b.t(), q, dk);
}

// Problems per parallel_for chunk: enough to amortise a task (~64k multiply-adds), so tiny tensors stay in
// one chunk. Depends on the sizes only, never on the thread count.
inline index_t attention_grain(index_t tq, index_t tk, index_t hs, index_t hsv) {
  const index_t work = std::max<index_t>(1, tq * tk * (hs + hsv));
  return std::max<index_t>(1, 65536 / work);
}

// A (rows, cols) view at p with the given strides, sharing `storage`.
template <typename T, class Storage>
Tensor<T, 2> view2(const Storage& storage, const T* p, index_t rows, index_t cols, index_t rs, index_t cs) {
  return Tensor<T, 2>(storage, const_cast<T*>(p), Shape<2>{rows, cols}, Shape<2>{rs, cs});
}

// The dropout mask over `shape`: 0 or 1 / (1 - p), nn.Dropout's draws.
template <floating_element T, std::size_t R>
std::optional<Tensor<T, R>> dropout_keep(const char* op, double p, const Shape<R>& shape, Generator& gen) {
  if (!(p >= 0.0 && p <= 1.0))
    throw std::invalid_argument(std::string(op) + ": dropout probability has to be between 0 and 1, but got " +
                                std::to_string(p));
  if (p == 0.0 || eigenformer::detail::numel_of(shape) == 0) return std::nullopt;
  auto keep = Tensor<T, R>::empty(shape);
  if (p == 1.0) {
    keep.zero_();  // as PyTorch: zeros, nothing drawn
  } else {        // nn.Dropout's CPU path: noise = bernoulli_(1 - p); noise /= (1 - p)
    eigenformer::detail::bernoulli_fill(keep.data(), keep.numel(), 1.0 - p, T(1) / static_cast<T>(1.0 - p), gen);
  }
  return keep;
}

// Element offsets of every (..., rows, cols) matrix of a rank-R operand, in row-major order of the leading
// dims; strides of size-1 or broadcast dims are taken as given.
template <std::size_t R>
std::vector<index_t> matrix_offsets(const Shape<R>& shape, const Shape<R>& strides) {
  std::vector<index_t> out;
  if constexpr (R == 2) {
    out.push_back(0);
  } else {
    Shape<R> batch = shape;
    batch[R - 2] = batch[R - 1] = 1;
    eigenformer::detail::for_each_row<R, 1>(batch, {strides},
                                            [&](const std::array<index_t, 1>& off) { out.push_back(off[0]); });
  }
  return out;
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

template <typename T>
ScoreRule<T> score_rule(double divisor, double masked_value, bool causal, index_t causal_offset) {
  return ScoreRule<T>{static_cast<T>(divisor), static_cast<T>(masked_value), causal, causal_offset};
}

// ---- streaming attention: inference without the (Tq, Tk) weights ------------------------------------------
//
// When nothing asks for the weights (no `weights` out-parameter, no backward context, no dropout), each
// problem is cut into blocks of stream_unit_rows queries, and each query block walks the keys in blocks,
// keeping per query row a running maximum m, a running sum l of exp(score - m) and an output accumulator o,
// rescaled by exp(m_old - m_new) whenever the maximum grows (the online softmax of flash attention):
//
//   s = q_blk k_blk^T / divisor, masked         (rows, keys of the block)
//   m' = max(m, rowmax s);  p = exp(s - m');    l = l exp(m - m') + rowsum p;  o = o exp(m - m') + p v_blk
//   out = o / l                                  (l = 0: every key masked; out = 0, as the weights path gives)
//
// The working set is one (rows, key block) score tile instead of the (Tq, Tk) weights and scores. With the
// causal mask and masked_value -inf, key blocks wholly above the diagonal are never computed and only the
// blocks that cross it are masked. (A finite masked_value makes a fully masked row's weights uniform over all
// Tk keys, the causally hidden ones included, so then every block is visited.)
//
// Against the weights path only rounding differs: the scores are the same products of the same rows, but
// exp is taken relative to a running maximum with a rescale per key block, l and o are summed block by
// block, and an unmasked score more than 87 below its row's maximum gets Eigen's exp (~1e-38) where the
// tensor softmax calls libm (a denormal): nothing that survives the sum with the maximum's exp(0) = 1.
// Every unit (problem, query block) is computed whole by one thread, in a fixed order.

// Query rows per streaming unit, the unit of parallel work next to (batch, head): a multiple of the packed
// kernel's register rows (12 with AVX-512, 6 with AVX2), so that no register block runs half empty.
inline constexpr index_t stream_query_rows = 96;
// Elements of one score tile, query rows times keys: 96 x 256 floats are 96 KB, which stays in L2 between
// the two products. Each key block repacks the query block for the product, so long key blocks repack it
// least; 256 keys measured best against 64 and 128 (GPT-2 small's heads at 512 tokens, causal and not),
// although under the causal mask a longer block wastes more of the diagonal. A decode step's single query
// row takes all its keys in one block.
inline constexpr index_t stream_tile_elements = stream_query_rows * 256;

// The query rows of one streaming unit: stream_query_rows, or a whole problem's tq rows when that is at most a
// third more, no causal mask trims the keys and there are at least 16 problems. k^T and v are then packed
// once a head instead of once a block, and no 32-row block is left over at 128 tokens. BERT-base b8 (96
// problems of 128 tokens), interleaved A/B on an Intel Xeon: 0.987x and 0.988x the time on 2 threads (two sets
// of 6 rounds), 0.977x on 1; on an AMD Zen 5 (as 144-row blocks for every problem) 0.96x. Not for fewer
// problems: BERT-base b1's 12 problems balanced worse on 2 threads (1.02x the time here, 1.02x on the Zen 5);
// nor under a causal mask, where a first block of 96 rows skips the keys past its diagonal and one whole unit
// would compute them (on the Zen 5, 144-row blocks for every problem took 1.06x at GPT-2 small s512).
// A function of the shapes alone, not of the thread count: with Eigen computing the products, where the rows
// start can change their bits.
inline index_t stream_unit_rows(index_t tq, bool causal, index_t problems) {
  return !causal && tq <= stream_query_rows * 4 / 3 && problems >= 16 ? tq : stream_query_rows;
}

// row = exp(row - shift), and a row's sum: for float by the vector kernels where this CPU has them
// (vector_math.hpp), else by Eigen.
template <typename T>
void exp_shifted_row(T* row, index_t n, T shift) {
  if constexpr (std::is_same_v<T, float>)
    if (const auto* kernel = backend::detail::vector_math_kernel()) return kernel->exp_shifted(row, n, shift);
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> r(row, n);
  r = (r - shift).exp();
}
template <typename T>
T sum_of_row(const T* row, index_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (const auto* kernel = backend::detail::vector_math_kernel()) return kernel->sum(row, n);
  return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(row, n).sum();
}

// The handles of one (batch, head) problem: q (Tq, HS), k (Tk, HS), v (Tk, HSv) any 2-D views, out (Tq, HSv)
// with unit column stride.
template <typename T>
struct ProblemViews {
  Tensor<T, 2> q, k, v, out;
  MaskView mask;
};

// Query rows [q0, q0 + rows) of one problem, rows = q.shape()[0]; q and out are those rows' views. The key
// block is tile's width; row_max and row_sum hold `rows` values.
template <typename T>
void attention_rows_streaming(const Tensor<T, 2>& q, index_t q0, const Tensor<T, 2>& k, const Tensor<T, 2>& v,
                              Tensor<T, 2>& out, const MaskView& mask, const ScoreRule<T>& rule, Tensor<T, 2>& tile,
                              T* row_max, T* row_sum) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  const index_t rows = q.shape()[0], tk = k.shape()[0], hsv = v.shape()[1];
  const index_t kb = tile.shape()[1], ldo = out.strides()[0];
  auto out_row = [&](index_t i) { return Eigen::Map<Arr>(out.data() + i * ldo, hsv); };
  // Dividing by a power of two (sqrt(HS) for HS = 4, 16, 64, 256) is exact, and so is multiplying by its
  // inverse: the product applies it as its alpha, the same bits without a pass over the tile.
  int exponent = 0;
  const bool scale_in_product = std::frexp(rule.divisor, &exponent) == T(0.5);
  // Keys past the last one the block's last row sees are skipped, not masked.
  const index_t key_end =
      rule.causal && rule.masked == neg_inf ? std::clamp<index_t>(q0 + rows + rule.causal_offset, 0, tk) : tk;
  if (key_end == 0) {  // no key at all: zeros, as the weights path gives
    for (index_t i = 0; i < rows; ++i) out_row(i).setZero();
    return;
  }
  std::fill(row_max, row_max + rows, neg_inf);
  std::fill(row_sum, row_sum + rows, T(0));
  for (index_t k0 = 0; k0 < key_end; k0 += kb) {
    const index_t nk = std::min(kb, key_end - k0);
    auto s = view2(tile.storage(), tile.data(), rows, nk, kb, 1);
    backend::gemm(q, k.narrow(0, k0, nk).t(), s, scale_in_product ? T(1) / rule.divisor : T(1), T(0), {},
                  backend::Tiling::calling_thread);
    // A mask with one row for all queries (a key padding mask) that hides none of this block's keys is
    // skipped for the whole block instead of tested key by key in every row: BERT's all-ones attention mask
    // cost 2% of its batch-1 forward that way.
    bool block_masked = mask.p != nullptr;
    if (block_masked && mask.rs == 0) {
      const bool* m = mask.p + k0 * mask.cs;
      block_masked = false;
      for (index_t j = 0; j < nk && !block_masked; ++j) block_masked = !m[j * mask.cs];
    }
    for (index_t i = 0; i < rows; ++i) {
      T* srow = tile.data() + i * kb;
      Eigen::Map<Arr> sr(srow, nk);
      if (!scale_in_product) sr /= rule.divisor;
      // Masked keys: the causal ones from `hidden` on (only where the block crosses this row's diagonal),
      // and the padding the mask hides before that.
      const index_t hidden = rule.causal ? std::clamp<index_t>(q0 + i + rule.causal_offset + 1 - k0, 0, nk) : nk;
      const bool* m = block_masked ? mask.p + (q0 + i) * mask.rs + k0 * mask.cs : nullptr;
      auto fill_masked_keys = [&](T value) {
        std::fill(srow + hidden, srow + nk, value);
        if (m)
          for (index_t j = 0; j < hidden; ++j)
            if (!m[j * mask.cs]) srow[j] = value;
      };
      fill_masked_keys(rule.masked);
      const T m_old = row_max[i], m_new = std::max(m_old, sr.maxCoeff());
      if (m_new == neg_inf) {  // nothing visible to this row yet: the block adds nothing
        sr.setZero();
        continue;
      }
      exp_shifted_row(srow, nk, m_new);
      // Exactly 0 for the masked keys (Eigen's exp of -inf is ~1e-38), unless they are all this row has seen
      // (a finite masked_value: then they share the weight, exp(0) each).
      if (m_new != rule.masked) fill_masked_keys(T(0));
      const T rescale = m_old == neg_inf ? T(0) : std::exp(m_old - m_new);
      row_sum[i] = row_sum[i] * rescale + sum_of_row(srow, nk);
      row_max[i] = m_new;
      if (k0 > 0 && rescale != T(1)) out_row(i) *= rescale;
    }
    backend::gemm(s, v.narrow(0, k0, nk), out, T(1), k0 == 0 ? T(0) : T(1), {}, backend::Tiling::calling_thread);
  }
  for (index_t i = 0; i < rows; ++i)
    if (row_sum[i] > T(0)) out_row(i) /= row_sum[i];
}

// Every problem's output by streaming; problem(n) returns the ProblemViews of problem n < problems. The units
// (query block, problem) go to the pool the last query blocks first: under the causal mask they see the most
// keys, so the chunks left for the end are the short ones.
template <typename T, class Problem>
void attention_streaming(index_t problems, index_t tq, index_t tk, index_t hs, index_t hsv, const ScoreRule<T>& rule,
                         Problem&& problem) {
  if (problems == 0 || tq == 0) return;
  const index_t unit_rows = stream_unit_rows(tq, rule.causal, problems);
  const index_t blocks = (tq - 1) / unit_rows + 1, rows_max = std::min(tq, unit_rows);
  const index_t kb = stream_tile_elements / rows_max;
  backend::parallel_for(problems * blocks, attention_grain(rows_max, tk, hs, hsv), [&](index_t begin, index_t end) {
    // One buffer per thread, kept (no allocation per call once it is large enough): the score tile, then
    // the running maxima and sums. Tensor storage is 64-byte aligned and the tile's rows lie whole numbers
    // of cache lines apart, so Eigen's row sums group their terms the same way on every thread.
    static thread_local Tensor<T, 1> buffer;
    const index_t need = rows_max * (kb + 2);
    if (buffer.numel() < need) buffer = Tensor<T, 1>::empty({need});
    auto tile = view2(buffer.storage(), buffer.data(), rows_max, kb, kb, 1);
    T* row_max = buffer.data() + rows_max * kb;
    for (index_t u = begin; u < end; ++u) {
      const index_t n = u % problems, q0 = (blocks - 1 - u / problems) * unit_rows;
      const index_t rows = std::min(unit_rows, tq - q0);
      const ProblemViews<T> p = problem(n);
      auto out = p.out.narrow(0, q0, rows);
      attention_rows_streaming(p.q.narrow(0, q0, rows), q0, p.k, p.v, out, p.mask, rule, tile, row_max,
                               row_max + rows_max);
    }
  });
}

template <floating_element T, std::size_t R>
Tensor<T, R> sdpa_forward(const char* op, const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                          const Tensor<bool, R>* mask, const AttentionOptions& opt, AttentionContext<T, R>* ctx,
                          Tensor<T, R>* weights_out) {
  const index_t tq = q.shape()[R - 2], tk = k.shape()[R - 2], hs = q.shape()[R - 1], hsv = v.shape()[R - 1];
  const double divisor = opt.scale ? 1.0 / *opt.scale : std::sqrt(static_cast<double>(hs));
  Shape<R> w_shape = q.shape(), out_shape = q.shape();
  w_shape[R - 1] = tk;
  out_shape[R - 1] = hsv;
  const auto keep = dropout_keep<T>(op, opt.dropout_p, w_shape, opt.generator ? *opt.generator : current_generator());
  auto w = Tensor<T, R>::empty(w_shape);
  auto out = Tensor<T, R>::empty(out_shape);
  const auto qo = matrix_offsets(q.shape(), q.strides()), ko = matrix_offsets(k.shape(), k.strides()),
             vo = matrix_offsets(v.shape(), v.strides());
  const auto mo = mask ? matrix_offsets(mask->shape(), mask->strides()) : std::vector<index_t>{};
  const auto rule = score_rule<T>(divisor, opt.masked_value, opt.is_causal, 0);
  const index_t problems = static_cast<index_t>(qo.size());
  backend::parallel_for(problems, attention_grain(tq, tk, hs, hsv), [&](index_t begin, index_t end) {
    auto scratch = Tensor<T, 2>::empty({tq, tk});
    for (index_t n = begin; n < end; ++n) {
      const auto qs = view2(q.storage(), q.data() + qo[n], tq, hs, q.strides()[R - 2], q.strides()[R - 1]);
      const auto ks = view2(k.storage(), k.data() + ko[n], tk, hs, k.strides()[R - 2], k.strides()[R - 1]);
      const auto vs = view2(v.storage(), v.data() + vo[n], tk, hsv, v.strides()[R - 2], v.strides()[R - 1]);
      auto ws = view2(w.storage(), w.data() + n * tq * tk, tq, tk, tk, 1);
      auto os = view2(out.storage(), out.data() + n * tq * hsv, tq, hsv, hsv, 1);
      MaskView mv;
      if (mask) mv = {mask->data() + mo[n], mask->strides()[R - 2], mask->strides()[R - 1]};
      attention_problem_forward(qs, ks, vs, ws, os, keep ? keep->data() + n * tq * tk : nullptr, mv, rule, scratch);
    }
  });
  if (weights_out) *weights_out = w;
  if (ctx) {
    *ctx = AttentionContext<T, R>{q, k, v, w, keep, std::nullopt, false, static_cast<T>(opt.masked_value), divisor};
    if (std::isfinite(opt.masked_value)) {  // -inf entries already get weight 0 and so gradient 0
      if (mask) ctx->mask = *mask;
      ctx->causal = opt.is_causal;
    }
  }
  return out;
}

}  // namespace detail

// ---- the fused core ---------------------------------------------------------------------------------------

// Multi-head attention on a fused projection output; see the top of this file. Throws shape_error for a
// qkv whose last dim is not 3C with C divisible by num_heads, a mask or cache of another size;
// std::out_of_range when the cache would overflow; std::invalid_argument for a bad dropout probability or
// a context requested together with a cache.
template <floating_element T>
Tensor<T, 3> fused_attention(const Tensor<T, 3>& qkv, const FusedAttentionOptions& options,
                             const std::type_identity_t<FusedAttentionExtras<T>>& extras = {}) {
  constexpr const char* op = "fused_attention";
  const index_t b = qkv.shape()[0], tn = qkv.shape()[1], nh = options.num_heads;
  if (nh <= 0) throw std::invalid_argument(std::string(op) + ": num_heads must be positive, got " + std::to_string(nh));
  if (qkv.shape()[2] % (3 * nh) != 0)
    throw shape_error(std::string(op) + ": qkv " + shape_string(qkv.shape()) + " must end in 3C (query, key and value "
                      "features) with C divisible by num_heads " + std::to_string(nh));
  const index_t c = qkv.shape()[2] / 3, hs = c / nh;
  LayerKVCache<T>* cache = extras.cache;
  const index_t past = cache ? cache->length() : 0, tk = past + tn;
  if (cache) {
    if (cache->batch() != b || cache->heads() != nh || cache->head_dim() != hs)
      throw shape_error(std::string(op) + ": qkv " + shape_string(qkv.shape()) + " with " + std::to_string(nh) +
                        " heads needs a cache of [" + std::to_string(b) + ", " + std::to_string(nh) + ", capacity, " +
                        std::to_string(hs) + "], got " + shape_string(cache->keys.shape()));
    if (tk > cache->capacity())
      throw std::out_of_range(std::string(op) + ": the KV cache holds " + std::to_string(past) + " tokens and " +
                              std::to_string(tn) + " new ones would need " + std::to_string(tk) +
                              " positions, more than its capacity " + std::to_string(cache->capacity()));
    if (extras.context)
      throw std::invalid_argument(std::string(op) + ": backward through a KV cache is not supported; record the "
                                  "forward for backward without a cache");
  }
  const Tensor<bool, 2>* mask = extras.key_padding_mask;
  if (mask && mask->shape() != Shape<2>{b, tk})
    throw shape_error(std::string(op) + ": key_padding_mask " + shape_string(mask->shape()) + " does not match the " +
                      std::to_string(b) + " sequences of " + std::to_string(tk) + " keys (expected [batch, keys] = " +
                      shape_string(Shape<2>{b, tk}) + ")");
  const double divisor = options.scale ? 1.0 / *options.scale : std::sqrt(static_cast<double>(hs));
  const auto keep = detail::dropout_keep<T>(op, options.dropout_p, Shape<4>{b, nh, tn, tk}, current_generator());
  auto merged = Tensor<T, 3>::empty({b, tn, c});
  const auto rule = detail::score_rule<T>(divisor, options.masked_value, options.causal, past);
  const index_t s0 = qkv.strides()[0], s1 = qkv.strides()[1], s2 = qkv.strides()[2];
  // Problem n = (batch bi, head h): its query, key and value columns of qkv (keys and values from the cache
  // when there is one), its columns of merged, its sequence's mask.
  auto problem = [&](index_t n) {
    const index_t bi = n / nh, h = n % nh;
    const T* row0 = qkv.data() + bi * s0 + h * hs * s2;
    detail::ProblemViews<T> p{detail::view2(qkv.storage(), row0, tn, hs, s1, s2),
                              detail::view2(qkv.storage(), row0 + c * s2, tn, hs, s1, s2),
                              detail::view2(qkv.storage(), row0 + 2 * c * s2, tn, hs, s1, s2),
                              detail::view2(merged.storage(), merged.data() + bi * tn * c + h * hs, tn, hs, c, 1),
                              {}};
    if (cache) {
      p.k = cache->keys.select(0, bi).select(0, h).narrow(0, 0, tk);
      p.v = cache->values.select(0, bi).select(0, h).narrow(0, 0, tk);
    }
    if (mask) p.mask = {mask->data() + bi * mask->strides()[0], 0, mask->strides()[1]};
    return p;
  };
  if (cache)  // the new keys and values first: every query block of a problem reads them
    backend::parallel_for(b * nh, detail::attention_grain(tn, 1, hs, hs), [&](index_t begin, index_t end) {
      for (index_t n = begin; n < end; ++n) {
        const index_t bi = n / nh, h = n % nh;
        const T* row0 = qkv.data() + bi * s0 + h * hs * s2;
        cache->keys.select(0, bi).select(0, h).narrow(0, past, tn).copy_(
            detail::view2(qkv.storage(), row0 + c * s2, tn, hs, s1, s2));
        cache->values.select(0, bi).select(0, h).narrow(0, past, tn).copy_(
            detail::view2(qkv.storage(), row0 + 2 * c * s2, tn, hs, s1, s2));
      }
    });
  // Inference that does not look at the weights never forms them.
  if (!extras.weights && !extras.context && !keep) {
    detail::attention_streaming<T>(b * nh, tn, tk, hs, hs, rule, problem);
    if (cache) detail::KVCacheAccess::advance(*cache, tn);
    return merged;
  }
  auto w = Tensor<T, 4>::empty({b, nh, tn, tk});
  backend::parallel_for(b * nh, detail::attention_grain(tn, tk, hs, hs), [&](index_t begin, index_t end) {
    auto scratch = Tensor<T, 2>::empty({tn, tk});
    for (index_t n = begin; n < end; ++n) {
      auto p = problem(n);
      auto ws = detail::view2(w.storage(), w.data() + n * tn * tk, tn, tk, tk, 1);
      detail::attention_problem_forward(p.q, p.k, p.v, ws, p.out, keep ? keep->data() + n * tn * tk : nullptr, p.mask,
                                        rule, scratch);
    }
  });
  if (cache) detail::KVCacheAccess::advance(*cache, tn);
  if (extras.weights) *extras.weights = w;
  if (extras.context) {
    auto& ctx = *extras.context;
    ctx = FusedAttentionContext<T>{qkv, w, keep, std::nullopt, nh, false, divisor};
    if (std::isfinite(options.masked_value)) {  // -inf entries already get weight 0 and so gradient 0
      if (mask) ctx.key_padding_mask = *mask;
      ctx.causal = options.causal;
    }
  }
  return merged;
}

// dL/d(qkv) (B, T, 3C) from dL/d(merged) (B, T, C), for the forward that filled ctx.
template <floating_element T>
Tensor<T, 3> fused_attention_backward(const FusedAttentionContext<T>& ctx, const Tensor<T, 3>& grad_merged) {
  const index_t b = ctx.qkv.shape()[0], t = ctx.qkv.shape()[1], c = ctx.qkv.shape()[2] / 3, nh = ctx.num_heads;
  const index_t hs = c / nh;
  detail::check_grad_shape("fused_attention_backward", grad_merged.shape(), Shape<3>{b, t, c});
  auto d_qkv = Tensor<T, 3>::empty({b, t, 3 * c});
  const auto& qkv = ctx.qkv;
  const index_t s0 = qkv.strides()[0], s1 = qkv.strides()[1], s2 = qkv.strides()[2];
  const index_t g0 = grad_merged.strides()[0], g1 = grad_merged.strides()[1], g2 = grad_merged.strides()[2];
  const bool zero_masked = ctx.causal || ctx.key_padding_mask;
  const auto rule = detail::score_rule<T>(ctx.divisor, 0.0, ctx.causal, 0);
  const Tensor<bool, 2>* mask = ctx.key_padding_mask ? &*ctx.key_padding_mask : nullptr;
  backend::parallel_for(b * nh, detail::attention_grain(t, t, hs, hs), [&](index_t begin, index_t end) {
    auto scratch_a = Tensor<T, 2>::empty({t, t}), scratch_b = Tensor<T, 2>::empty({t, t});
    for (index_t n = begin; n < end; ++n) {
      const index_t bi = n / nh, h = n % nh;
      const T* row0 = qkv.data() + bi * s0 + h * hs * s2;
      const auto q = detail::view2(qkv.storage(), row0, t, hs, s1, s2);
      const auto k = detail::view2(qkv.storage(), row0 + c * s2, t, hs, s1, s2);
      const auto v = detail::view2(qkv.storage(), row0 + 2 * c * s2, t, hs, s1, s2);
      const auto w = detail::view2(ctx.weights.storage(), ctx.weights.data() + n * t * t, t, t, t, 1);
      const auto g = detail::view2(grad_merged.storage(), grad_merged.data() + bi * g0 + h * hs * g2, t, hs, g1, g2);
      T* d0 = d_qkv.data() + bi * t * 3 * c + h * hs;
      auto dq = detail::view2(d_qkv.storage(), d0, t, hs, 3 * c, 1);
      auto dk = detail::view2(d_qkv.storage(), d0 + c, t, hs, 3 * c, 1);
      auto dv = detail::view2(d_qkv.storage(), d0 + 2 * c, t, hs, 3 * c, 1);
      detail::MaskView mv;
      if (mask) mv = {mask->data() + bi * mask->strides()[0], 0, mask->strides()[1]};
      detail::attention_problem_backward(q, k, v, w, ctx.keep ? ctx.keep->data() + n * t * t : nullptr, mv, rule,
                                         zero_masked, g, dq, dk, dv, scratch_a, scratch_b);
    }
  });
  return d_qkv;
}

// ---- scaled_dot_product_attention: the same kernel on separate q, k, v ------------------------------------

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
  return detail::sdpa_forward(op, q, k, v, &m, options, ctx, weights);
}
template <floating_element T, std::size_t R>
Tensor<T, R> scaled_dot_product_attention(const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                                          std::nullopt_t, const AttentionOptions& options,
                                          std::type_identity_t<AttentionContext<T, R>>* ctx = nullptr,
                                          std::type_identity_t<Tensor<T, R>>* weights = nullptr) {
  constexpr const char* op = "scaled_dot_product_attention";
  detail::check_qkv(op, q, k, v);
  return detail::sdpa_forward<T, R>(op, q, k, v, nullptr, options, ctx, weights);
}

// torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal): the output only.
template <floating_element T, std::size_t R, std::size_t Rm>
Tensor<T, R> scaled_dot_product_attention(const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                                          const Tensor<bool, Rm>& attn_mask, double dropout_p = 0.0,
                                          bool is_causal = false, Generator& gen = current_generator()) {
  return scaled_dot_product_attention(q, k, v, attn_mask, AttentionOptions{dropout_p, is_causal, std::nullopt,
                                      -std::numeric_limits<double>::infinity(), &gen});
}
template <floating_element T, std::size_t R>
Tensor<T, R> scaled_dot_product_attention(const Tensor<T, R>& q, const Tensor<T, R>& k, const Tensor<T, R>& v,
                                          std::nullopt_t = std::nullopt, double dropout_p = 0.0,
                                          bool is_causal = false, Generator& gen = current_generator()) {
  return scaled_dot_product_attention(q, k, v, std::nullopt, AttentionOptions{dropout_p, is_causal, std::nullopt,
                                      -std::numeric_limits<double>::infinity(), &gen});
}

// Backward of scaled_dot_product_attention given dL/d(out) (..., Tq, HSv); see attention_problem_backward.
template <floating_element T, std::size_t R>
AttentionGrads<T, R> scaled_dot_product_attention_backward(const AttentionContext<T, R>& ctx,
                                                           const Tensor<T, R>& grad_output) {
  Shape<R> out_shape = ctx.q.shape();
  out_shape[R - 1] = ctx.v.shape()[R - 1];
  detail::check_grad_shape("scaled_dot_product_attention.backward", grad_output.shape(), out_shape);
  const index_t tq = ctx.q.shape()[R - 2], tk = ctx.k.shape()[R - 2], hs = ctx.q.shape()[R - 1],
                hsv = ctx.v.shape()[R - 1];
  AttentionGrads<T, R> grads{Tensor<T, R>::empty(ctx.q.shape()), Tensor<T, R>::empty(ctx.k.shape()),
                             Tensor<T, R>::empty(ctx.v.shape())};
  const auto& q = ctx.q;
  const auto& k = ctx.k;
  const auto& v = ctx.v;
  const auto& g = grad_output;
  const auto qo = detail::matrix_offsets(q.shape(), q.strides()), ko = detail::matrix_offsets(k.shape(), k.strides()),
             vo = detail::matrix_offsets(v.shape(), v.strides()), go = detail::matrix_offsets(g.shape(), g.strides());
  const Tensor<bool, R>* mask = ctx.mask ? &*ctx.mask : nullptr;
  const auto mo = mask ? detail::matrix_offsets(mask->shape(), mask->strides()) : std::vector<index_t>{};
  const auto rule = detail::score_rule<T>(ctx.divisor, 0.0, ctx.causal, 0);
  const bool zero_masked = ctx.causal || mask;
  backend::parallel_for(static_cast<index_t>(qo.size()), detail::attention_grain(tq, tk, hs, hsv),
                        [&](index_t begin, index_t end) {
    auto scratch_a = Tensor<T, 2>::empty({tq, tk}), scratch_b = Tensor<T, 2>::empty({tq, tk});
    for (index_t n = begin; n < end; ++n) {
      const auto qs = detail::view2(q.storage(), q.data() + qo[n], tq, hs, q.strides()[R - 2], q.strides()[R - 1]);
      const auto ks = detail::view2(k.storage(), k.data() + ko[n], tk, hs, k.strides()[R - 2], k.strides()[R - 1]);
      const auto vs = detail::view2(v.storage(), v.data() + vo[n], tk, hsv, v.strides()[R - 2], v.strides()[R - 1]);
      const auto gs = detail::view2(g.storage(), g.data() + go[n], tq, hsv, g.strides()[R - 2], g.strides()[R - 1]);
      const auto ws = detail::view2(ctx.weights.storage(), ctx.weights.data() + n * tq * tk, tq, tk, tk, 1);
      auto dq = detail::view2(grads.q.storage(), grads.q.data() + n * tq * hs, tq, hs, hs, 1);
      auto dk = detail::view2(grads.k.storage(), grads.k.data() + n * tk * hs, tk, hs, hs, 1);
      auto dv = detail::view2(grads.v.storage(), grads.v.data() + n * tk * hsv, tk, hsv, hsv, 1);
      detail::MaskView mv;
      if (mask) mv = {mask->data() + mo[n], mask->strides()[R - 2], mask->strides()[R - 1]};
      detail::attention_problem_backward(qs, ks, vs, ws, ctx.keep ? ctx.keep->data() + n * tq * tk : nullptr, mv, rule,
                                         zero_masked, gs, dq, dk, dv, scratch_a, scratch_b);
    }
  });
  return grads;
}

}  // namespace eigenformer::nn
