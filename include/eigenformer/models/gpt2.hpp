// GPT-2 (Radford et al. 2019) as Hugging Face's GPT2LMHeadModel computes it, with its state-dict names and
// weight layouts, so a Hugging Face checkpoint maps onto named_parameters() one to one:
//
//   transformer.wte.weight (V, C)             token embeddings, also the LM head (tied: one parameter)
//   transformer.wpe.weight (n_positions, C)   learned positions
//   transformer.h.{i}.ln_1.{weight,bias} (C)
//   transformer.h.{i}.attn.c_attn.weight (C, 3C), .bias (3C)    Conv1D: stored (in, out), y = x W + b
//   transformer.h.{i}.attn.c_proj.weight (C, C), .bias (C)
//   transformer.h.{i}.ln_2.{weight,bias} (C)
//   transformer.h.{i}.mlp.c_fc.weight (C, 4C), .bias (4C)
//   transformer.h.{i}.mlp.c_proj.weight (4C, C), .bias (C)
//   transformer.ln_f.{weight,bias} (C)
//
// Layout decision: the Conv1D weights keep Hugging Face's (in, out) layout rather than nn.Linear's (out, in),
// so a safetensors tensor is copied as it is, with no transpose on load or save; the forward multiplies by
// W instead of W^T, which Eigen does at the same speed. lm_head.weight is not a parameter of its own: the
// logits are ln_f(h) wte^T and its gradient is added to wte's, as tying does in PyTorch. (A checkpoint's
// "lm_head.weight", when present, is wte's tensor again, and files saved from GPT2Model name everything
// without the "transformer." prefix: loaders strip or add it, as from_pretrained does.)
//
// Computation, per block (pre-LN):  h = x + attn(ln_1(x));  y = h + mlp(ln_2(h))
//   attn: q, k, v = split(c_attn(x), C) -> heads (B, NH, T, HS); softmax(q k^T / sqrt(HS), causal) v;
//         heads merged, c_proj, resid dropout. (HF fills masked scores with the float minimum instead of
//         -inf; every causal row keeps its diagonal, so the weights are the same.)
//   mlp:  c_proj(gelu_new(c_fc(x))), resid dropout.
// Dropout (training mode only) draws in forward order from the generator given at construction: embeddings
// (embd_pdrop), then per block the attention weights (attn_pdrop), the attention output and the MLP output
// (resid_pdrop) -- the order of PyTorch's forward, so a manual_seed'ed training step reproduces it.
//
// Initialisation (Hugging Face's _init_weights): every weight N(0, initializer_range), biases 0, LayerNorm 1
// and 0, and the two c_proj weights of each block N(0, initializer_range / sqrt(2 n_layer)) ("scale the
// residual layers by 1/sqrt(N)", GPT-2 paper). They are drawn once each from eigenformer's PyTorch-exact
// generator in named_parameters() order; Hugging Face draws the same distributions but several times over
// (module constructors, two init passes), so its stream is not reproduced, only its distributions.
//
// Inference with a KV cache: KVCache holds every layer's keys and values, preallocated (B, NH, capacity, HS);
// forward(ids, cache) runs only the new tokens, attending to the cached ones, and returns their logits.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "eigenformer/nn/activation.hpp"
#include "eigenformer/nn/attention.hpp"
#include "eigenformer/nn/conv1d.hpp"
#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/layernorm.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/tensor.hpp"

namespace eigenformer::models {

// Hugging Face's GPT2Config fields (config.json names) with its defaults, which are GPT-2 small (124M).
struct GPT2Config {
  index_t vocab_size = 50257;
  index_t n_positions = 1024;
  index_t n_embd = 768;
  index_t n_layer = 12;
  index_t n_head = 12;
  index_t n_inner = 0;  // the MLP width; 0 (Hugging Face's null) means 4 * n_embd
  std::string activation_function = "gelu_new";
  double resid_pdrop = 0.1;
  double embd_pdrop = 0.1;
  double attn_pdrop = 0.1;
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;

  static GPT2Config gpt2_small() { return {}; }
  static GPT2Config gpt2_medium() { return with_size(1024, 24, 16); }
  static GPT2Config gpt2_large() { return with_size(1280, 36, 20); }
  static GPT2Config gpt2_xl() { return with_size(1600, 48, 25); }
  // The test model of tools/reference/make_gpt2_fixtures.py: vocabulary 61, 16 positions, 12 channels, 2 layers
  // of 3 heads. Small enough for finite differences.
  static GPT2Config tiny() {
    GPT2Config c;
    c.vocab_size = 61;
    c.n_positions = 16;
    c.n_embd = 12;
    c.n_layer = 2;
    c.n_head = 3;
    return c;
  }

  index_t head_dim() const noexcept { return n_head > 0 ? n_embd / n_head : 0; }
  index_t inner_dim() const noexcept { return n_inner > 0 ? n_inner : 4 * n_embd; }

  // Throws std::invalid_argument naming the first field that cannot make a model.
  void validate() const {
    auto positive = [](const char* name, index_t v) {
      if (v <= 0) throw std::invalid_argument(std::string("GPT2Config: ") + name + " must be positive, got " + std::to_string(v));
    };
    positive("vocab_size", vocab_size);
    positive("n_positions", n_positions);
    positive("n_embd", n_embd);
    positive("n_layer", n_layer);
    positive("n_head", n_head);
    if (n_inner < 0) throw std::invalid_argument("GPT2Config: n_inner must be >= 0 (0 = 4 * n_embd), got " + std::to_string(n_inner));
    if (n_embd % n_head != 0)
      throw std::invalid_argument("GPT2Config: n_embd " + std::to_string(n_embd) + " is not divisible by n_head " +
                                  std::to_string(n_head) + " (each head gets n_embd / n_head channels)");
    for (auto [name, p] : {std::pair{"resid_pdrop", resid_pdrop}, std::pair{"embd_pdrop", embd_pdrop},
                           std::pair{"attn_pdrop", attn_pdrop}})
      if (!(p >= 0.0 && p <= 1.0))
        throw std::invalid_argument(std::string("GPT2Config: ") + name + " must be between 0 and 1, got " + std::to_string(p));
    if (!(layer_norm_epsilon >= 0.0))
      throw std::invalid_argument("GPT2Config: layer_norm_epsilon must be >= 0, got " + std::to_string(layer_norm_epsilon));
    if (!(initializer_range >= 0.0))
      throw std::invalid_argument("GPT2Config: initializer_range must be >= 0, got " + std::to_string(initializer_range));
    (void)nn::activation_kind(activation_function);  // throws, listing the accepted names
  }

 private:
  static GPT2Config with_size(index_t embd, index_t layers, index_t heads) {
    GPT2Config c;
    c.n_embd = embd;
    c.n_layer = layers;
    c.n_head = heads;
    return c;
  }
};

// Construction tag: all weights zero, nothing drawn (a model about to be overwritten by a checkpoint).
struct no_init_t {
  explicit no_init_t() = default;
};
inline constexpr no_init_t no_init{};

// The keys and values of every layer for up to `capacity` positions of a batch of B sequences,
// preallocated as (B, NH, capacity, HS) per layer so decoding never reallocates. length() tokens are cached;
// each GPT2LMHeadModel::forward(ids, cache) appends its tokens. Memory: 2 n_layer B capacity n_embd elements
// (GPT-2 small, B = 1, 1024 positions: 75 MB in float), so pass a smaller capacity when the length is known.
template <floating_element T>
class KVCache {
 public:
  KVCache(const GPT2Config& config, index_t batch, index_t capacity = 0)
      : batch_(batch), capacity_(capacity == 0 ? config.n_positions : capacity), n_positions_(config.n_positions) {
    config.validate();
    if (batch <= 0) throw std::invalid_argument("KVCache: batch must be positive, got " + std::to_string(batch));
    if (capacity_ < 0 || capacity_ > config.n_positions)
      throw std::invalid_argument("KVCache: capacity " + std::to_string(capacity) + " must be within 1..n_positions " +
                                  std::to_string(config.n_positions) + " (0 = n_positions)");
    const Shape<4> shape{batch, config.n_head, capacity_, config.head_dim()};
    for (index_t i = 0; i < config.n_layer; ++i) {
      keys.push_back(Tensor<T, 4>::empty(shape));
      values.push_back(Tensor<T, 4>::empty(shape));
    }
  }

  std::vector<Tensor<T, 4>> keys, values;  // per layer (B, NH, capacity, HS); rows [0, length()) are valid

  index_t length() const noexcept { return length_; }
  index_t batch() const noexcept { return batch_; }
  index_t capacity() const noexcept { return capacity_; }
  index_t n_layer() const noexcept { return static_cast<index_t>(keys.size()); }
  // Forgets every cached token (the storage is kept).
  void reset() noexcept { length_ = 0; }

 private:
  template <floating_element>
  friend class GPT2LMHeadModel;
  index_t batch_, capacity_, n_positions_;
  index_t length_ = 0;
};

namespace detail {

// Switches a module to eval mode for a scope and restores its mode after (inference paths).
template <floating_element T>
class EvalScope {
 public:
  explicit EvalScope(nn::Module<T>& m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~EvalScope() { m_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  nn::Module<T>& m_;
  bool was_training_;
};

}  // namespace detail

// Causal multi-head self-attention with Conv1D projections (Hugging Face's GPT2Attention).
template <floating_element T>
class GPT2Attention : public nn::Module<T> {
 public:
  GPT2Attention(const GPT2Config& c, double proj_std, Generator& gen, bool init)
      : c_attn(c.n_embd, 3 * c.n_embd, init ? c.initializer_range : 0.0, gen),
        c_proj(c.n_embd, c.n_embd, init ? proj_std : 0.0, gen),
        resid_dropout(c.resid_pdrop, gen),
        dim_(c.n_embd),
        heads_(c.n_head),
        head_dim_(c.head_dim()),
        attn_pdrop_(c.attn_pdrop),
        gen_(&gen) {}

  nn::Conv1D<T> c_attn;  // (C, 3C): columns q | k | v, head h owning h*HS .. h*HS+HS-1 of each
  nn::Conv1D<T> c_proj;  // (C, C)
  nn::Dropout<T> resid_dropout;

  // (B, T, C) -> (B, T, C), every token attending to itself and the tokens before it.
  Tensor<T, 3> forward(const Tensor<T, 3>& x) {
    const index_t b = x.shape()[0], t = x.shape()[1];
    ctx_.reset();
    const auto [q, k, v] = split_heads(c_attn.forward(x), b, t);
    nn::AttentionOptions opt;
    opt.dropout_p = this->is_training() ? attn_pdrop_ : 0.0;
    opt.is_causal = true;
    opt.generator = gen_;
    nn::AttentionContext<T, 4> ctx;
    const auto heads = nn::scaled_dot_product_attention(q, k, v, std::nullopt, opt,
                                                        this->is_training() ? &ctx : nullptr);  // (B, NH, T, HS)
    auto y = resid_dropout.forward(c_proj.forward(merge_heads(heads, b, t)));
    if (this->is_training()) ctx_ = std::move(ctx);
    return y;
  }

  // The new tokens x (B, Tn, C) at positions past .. past+Tn-1: their keys and values are written into the
  // layer's cache (B, NH, capacity, HS) and each token attends to the cached ones and the new ones up to
  // itself. Run in eval mode (GPT2LMHeadModel::forward(ids, cache) sees to it).
  Tensor<T, 3> forward_cached(const Tensor<T, 3>& x, Tensor<T, 4>& k_cache, Tensor<T, 4>& v_cache, index_t past) {
    const index_t b = x.shape()[0], tn = x.shape()[1], total = past + tn;
    const auto [q, k, v] = split_heads(c_attn.forward(x), b, tn);
    k_cache.narrow(2, past, tn).copy_(k);
    v_cache.narrow(2, past, tn).copy_(v);
    const auto keys = k_cache.narrow(2, 0, total), values = v_cache.narrow(2, 0, total);
    nn::AttentionOptions opt;  // no dropout: inference
    Tensor<T, 4> heads;
    if (tn == 1) {  // one new token sees everything cached: no mask
      heads = nn::scaled_dot_product_attention(q, keys, values, std::nullopt, opt);
    } else {  // query i (absolute position past + i) sees keys 0 .. past + i
      auto mask = Tensor<bool, 2>::empty({tn, total});
      for (index_t i = 0; i < tn; ++i)
        for (index_t j = 0; j < total; ++j) mask(i, j) = j <= past + i;
      heads = nn::scaled_dot_product_attention(q, keys, values, mask, opt);
    }
    return resid_dropout.forward(c_proj.forward(merge_heads(heads, b, tn)));
  }

  // dL/dx from dL/dy: resid dropout and c_proj, attention, then c_attn.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    if (!ctx_) nn::Module<T>::throw_no_cache("GPT2Attention");
    const auto ctx = std::move(*ctx_);
    ctx_.reset();
    const index_t b = ctx.q.shape()[0], t = ctx.q.shape()[2];
    nn::detail::check_grad_shape("GPT2Attention.backward", grad_output.shape(), Shape<3>{b, t, dim_});
    const auto g = c_proj.backward(resid_dropout.backward(grad_output));                  // (B, T, C)
    const auto g_heads = g.view(Shape<4>{b, t, heads_, head_dim_}).transpose(1, 2);       // (B, NH, T, HS)
    const auto grads = nn::scaled_dot_product_attention_backward(ctx, g_heads);
    auto d_qkv = Tensor<T, 3>::empty({b, t, 3 * dim_});
    const auto parts = d_qkv.view(Shape<5>{b, t, 3, heads_, head_dim_});
    parts.select(2, 0).transpose(1, 2).copy_(grads.q);
    parts.select(2, 1).transpose(1, 2).copy_(grads.k);
    parts.select(2, 2).transpose(1, 2).copy_(grads.v);
    return c_attn.backward(d_qkv);
  }

  void collect_parameters(const std::string& prefix, nn::ParameterList<T>& out) override {
    c_attn.collect_parameters(prefix + "c_attn.", out);
    c_proj.collect_parameters(prefix + "c_proj.", out);
  }

 protected:
  void set_children_training(bool mode) override {
    c_attn.train(mode);
    c_proj.train(mode);
    resid_dropout.train(mode);
  }

 private:
  // q, k, v as (B, NH, T, HS) strided views into c_attn's output (no copies).
  std::array<Tensor<T, 4>, 3> split_heads(const Tensor<T, 3>& qkv, index_t b, index_t t) const {
    const auto parts = qkv.view(Shape<5>{b, t, 3, heads_, head_dim_});
    return {parts.select(2, 0).transpose(1, 2), parts.select(2, 1).transpose(1, 2), parts.select(2, 2).transpose(1, 2)};
  }
  Tensor<T, 3> merge_heads(const Tensor<T, 4>& heads, index_t b, index_t t) const {
    return heads.transpose(1, 2).reshape(Shape<3>{b, t, dim_});  // (B, T, C): heads side by side
  }

  index_t dim_, heads_, head_dim_;
  double attn_pdrop_;
  Generator* gen_;
  std::optional<nn::AttentionContext<T, 4>> ctx_;  // training mode only
};

// The position-wise MLP (Hugging Face's GPT2MLP): c_proj(act(c_fc(x))), then the resid dropout.
template <floating_element T>
class GPT2MLP : public nn::Module<T> {
 public:
  GPT2MLP(const GPT2Config& c, double proj_std, Generator& gen, bool init)
      : c_fc(c.n_embd, c.inner_dim(), init ? c.initializer_range : 0.0, gen),
        act(c.activation_function),
        c_proj(c.inner_dim(), c.n_embd, init ? proj_std : 0.0, gen),
        dropout(c.resid_pdrop, gen) {}

  nn::Conv1D<T> c_fc;    // (C, 4C)
  nn::Activation<T> act;
  nn::Conv1D<T> c_proj;  // (4C, C)
  nn::Dropout<T> dropout;

  Tensor<T, 3> forward(const Tensor<T, 3>& x) { return dropout.forward(c_proj.forward(act.forward(c_fc.forward(x)))); }
  Tensor<T, 3> backward(const Tensor<T, 3>& g) {
    return c_fc.backward(act.backward(c_proj.backward(dropout.backward(g))));
  }

  void collect_parameters(const std::string& prefix, nn::ParameterList<T>& out) override {
    c_fc.collect_parameters(prefix + "c_fc.", out);
    c_proj.collect_parameters(prefix + "c_proj.", out);
  }

 protected:
  void set_children_training(bool mode) override {
    c_fc.train(mode);
    act.train(mode);
    c_proj.train(mode);
    dropout.train(mode);
  }
};

// One pre-LN block (Hugging Face's GPT2Block): h = x + attn(ln_1(x)); y = h + mlp(ln_2(h)).
template <floating_element T>
class GPT2Block : public nn::Module<T> {
 public:
  GPT2Block(const GPT2Config& c, Generator& gen, bool init)
      : ln_1(c.n_embd, c.layer_norm_epsilon),
        attn(c, proj_std(c), gen, init),
        ln_2(c.n_embd, c.layer_norm_epsilon),
        mlp(c, proj_std(c), gen, init) {}

  nn::LayerNorm<T> ln_1;
  GPT2Attention<T> attn;
  nn::LayerNorm<T> ln_2;
  GPT2MLP<T> mlp;

  Tensor<T, 3> forward(const Tensor<T, 3>& x) {
    const auto h = x + attn.forward(ln_1.forward(x));
    return h + mlp.forward(ln_2.forward(h));
  }
  Tensor<T, 3> forward_cached(const Tensor<T, 3>& x, Tensor<T, 4>& k_cache, Tensor<T, 4>& v_cache, index_t past) {
    const auto h = x + attn.forward_cached(ln_1.forward(x), k_cache, v_cache, past);
    return h + mlp.forward(ln_2.forward(h));
  }
  // The residual connections pass the gradient straight through; each sublayer adds its own part.
  Tensor<T, 3> backward(const Tensor<T, 3>& g) {
    const auto dh = g + ln_2.backward(mlp.backward(g));
    return dh + ln_1.backward(attn.backward(dh));
  }

  void collect_parameters(const std::string& prefix, nn::ParameterList<T>& out) override {
    ln_1.collect_parameters(prefix + "ln_1.", out);
    attn.collect_parameters(prefix + "attn.", out);
    ln_2.collect_parameters(prefix + "ln_2.", out);
    mlp.collect_parameters(prefix + "mlp.", out);
  }

 protected:
  void set_children_training(bool mode) override {
    ln_1.train(mode);
    attn.train(mode);
    ln_2.train(mode);
    mlp.train(mode);
  }

 private:
  static double proj_std(const GPT2Config& c) {
    return c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  }
};

// GPT-2 with its language-model head (Hugging Face's GPT2LMHeadModel). Members are named as the state-dict
// entries under "transformer." (wte, wpe, h, ln_f).
template <floating_element T>
class GPT2LMHeadModel : public nn::Module<T> {
 public:
  // Initialised as described at the top of this file, drawing from `gen`; dropout masks are drawn from `gen`
  // too, so it must outlive the model. Throws std::invalid_argument for an invalid config.
  explicit GPT2LMHeadModel(const GPT2Config& config, Generator& gen = default_generator())
      : GPT2LMHeadModel(config, gen, true) {}
  // Every weight zero (LayerNorm still 1 / 0) and nothing drawn: for loading a checkpoint.
  GPT2LMHeadModel(const GPT2Config& config, no_init_t, Generator& gen = default_generator())
      : GPT2LMHeadModel(config, gen, false) {}

  nn::Parameter<T, 2> wte;  // (V, C), also the LM head
  nn::Parameter<T, 2> wpe;  // (n_positions, C)
  nn::Dropout<T> drop;
  std::vector<GPT2Block<T>> h;
  nn::LayerNorm<T> ln_f;

  const GPT2Config& config() const noexcept { return config_; }

  // input_ids (B, T) -> logits (B, T, V). Ids must be in [0, vocab_size) and T <= n_positions; violations
  // throw std::out_of_range naming the id and where it is, or the length. Training mode caches what
  // backward needs.
  Tensor<T, 3> forward(const Tensor<std::int64_t, 2>& input_ids) {
    const index_t b = input_ids.shape()[0], t = input_ids.shape()[1];
    check_ids("GPT2LMHeadModel.forward", input_ids, 0);
    cache_.reset();
    auto x = drop.forward(embed(input_ids, 0));
    for (auto& block : h) x = block.forward(x);
    auto hf = ln_f.forward(x);                                  // (B, T, C)
    auto logits = lm_head(hf.view(Shape<2>{b * t, config_.n_embd})).view(Shape<3>{b, t, config_.vocab_size});
    if (this->is_training()) cache_ = Cache{input_ids.clone(), hf};
    return logits;
  }
  // One sequence: ids (T) -> logits (1, T, V).
  Tensor<T, 3> forward(const std::vector<std::int64_t>& ids) { return forward(as_batch(ids)); }

  // Incremental inference: the new tokens (B, Tn) at positions cache.length() .. cache.length()+Tn-1 attend
  // to the cached ones; returns their logits (B, Tn, V) and appends them to the cache. Equal (up to float
  // summation order) to the last Tn positions of forward() on the whole sequence. Always inference, whatever
  // the mode: no dropout, nothing cached for backward (like any forward it discards an earlier training
  // forward's cache).
  Tensor<T, 3> forward(const Tensor<std::int64_t, 2>& input_ids, KVCache<T>& cache) {
    const index_t b = input_ids.shape()[0], tn = input_ids.shape()[1], past = cache.length_;
    if (cache.n_layer() != config_.n_layer || cache.n_positions_ != config_.n_positions ||
        (cache.n_layer() > 0 && cache.keys[0].shape()[1] != config_.n_head) ||
        (cache.n_layer() > 0 && cache.keys[0].shape()[3] != config_.head_dim()))
      throw std::invalid_argument("GPT2LMHeadModel.forward: the KVCache was made for another config (" +
                                  std::to_string(cache.n_layer()) + " layers, this model has " +
                                  std::to_string(config_.n_layer) + ")");
    if (b != cache.batch_)
      throw shape_error("GPT2LMHeadModel.forward: input_ids " + shape_string(input_ids.shape()) + " has batch " +
                        std::to_string(b) + " but the KVCache holds " + std::to_string(cache.batch_) + " sequences");
    check_ids("GPT2LMHeadModel.forward", input_ids, past);
    if (past + tn > cache.capacity_)
      throw std::out_of_range("GPT2LMHeadModel.forward: the KVCache holds " + std::to_string(past) + " tokens and " +
                              std::to_string(tn) + " new ones would need " + std::to_string(past + tn) +
                              " positions, more than its capacity " + std::to_string(cache.capacity_));
    detail::EvalScope<T> inference(*this);
    cache_.reset();
    auto x = drop.forward(embed(input_ids, past));
    for (std::size_t i = 0; i < h.size(); ++i) x = h[i].forward_cached(x, cache.keys[i], cache.values[i], past);
    const auto hf = ln_f.forward(x);
    cache.length_ = past + tn;
    return lm_head(hf.view(Shape<2>{b * tn, config_.n_embd})).view(Shape<3>{b, tn, config_.vocab_size});
  }
  Tensor<T, 3> forward(const std::vector<std::int64_t>& ids, KVCache<T>& cache) { return forward(as_batch(ids), cache); }

  // A cache for `batch` sequences of up to `capacity` tokens (0 = n_positions).
  KVCache<T> make_cache(index_t batch = 1, index_t capacity = 0) const { return KVCache<T>(config_, batch, capacity); }

  // Accumulates every parameter's gradient from dL/dlogits (B, T, V). wte receives both of its parts: the LM
  // head's (dlogits^T ln_f(h)) and the embedding lookup's (scatter-add over the ids). Ids are not
  // differentiable, so nothing is returned.
  void backward(const Tensor<T, 3>& grad_logits) {
    if (!cache_) nn::Module<T>::throw_no_cache("GPT2LMHeadModel");
    const Cache c = std::move(*cache_);
    cache_.reset();
    const index_t b = c.ids.shape()[0], t = c.ids.shape()[1], n = b * t, dim = config_.n_embd;
    nn::detail::check_grad_shape("GPT2LMHeadModel.backward", grad_logits.shape(), Shape<3>{b, t, config_.vocab_size});
    const auto g = grad_logits.reshape(Shape<2>{n, config_.vocab_size});  // (N, V)
    const auto hf = c.hf.view(Shape<2>{n, dim});                            // (N, C)
    as_matrix(wte.grad).noalias() += as_matrix(g).transpose() * as_matrix(hf);
    auto dx = matmul(g, wte.data).view(Shape<3>{b, t, dim});
    dx = ln_f.backward(dx);
    for (auto it = h.rbegin(); it != h.rend(); ++it) dx = it->backward(dx);
    const auto de = drop.backward(dx).contiguous();
    const std::int64_t* ids = c.ids.data();
    T* gw = wte.grad.data();
    T* gp = wpe.grad.data();
    for (index_t i = 0; i < n; ++i) {
      const T* row = de.data() + i * dim;
      T* tok = gw + ids[i] * dim;
      T* pos = gp + (i % t) * dim;
      for (index_t j = 0; j < dim; ++j) {
        tok[j] += row[j];
        pos[j] += row[j];
      }
    }
  }

  void collect_parameters(const std::string& prefix, nn::ParameterList<T>& out) override {
    const std::string p = prefix + "transformer.";
    nn::add_parameter(out, p, "wte.weight", wte);
    nn::add_parameter(out, p, "wpe.weight", wpe);
    for (std::size_t i = 0; i < h.size(); ++i) h[i].collect_parameters(p + "h." + std::to_string(i) + ".", out);
    ln_f.collect_parameters(p + "ln_f.", out);
  }

 protected:
  void set_children_training(bool mode) override {
    drop.train(mode);
    for (auto& block : h) block.train(mode);
    ln_f.train(mode);
  }

 private:
  struct Cache {
    Tensor<std::int64_t, 2> ids;  // (B, T)
    Tensor<T, 3> hf;              // ln_f output (B, T, C), the LM head's input
  };

  GPT2LMHeadModel(const GPT2Config& config, Generator& gen, bool init)
      : wte(checked(config).zeros_wte()),
        wpe(zeros<T>(Shape<2>{config.n_positions, config.n_embd})),
        drop(config.embd_pdrop, gen),
        ln_f(config.n_embd, config.layer_norm_epsilon),
        config_(config) {
    if (init) {
      normal_(wte.data, 0.0, config.initializer_range, gen);
      normal_(wpe.data, 0.0, config.initializer_range, gen);
    }
    h.reserve(static_cast<std::size_t>(config.n_layer));
    for (index_t i = 0; i < config.n_layer; ++i) h.emplace_back(config, gen, init);
  }

  // Validates before any allocation (the first member initialiser calls it).
  struct Checked {
    const GPT2Config& c;
    Tensor<T, 2> zeros_wte() const { return zeros<T>(Shape<2>{c.vocab_size, c.n_embd}); }
  };
  static Checked checked(const GPT2Config& c) {
    c.validate();
    return Checked{c};
  }

  static Tensor<std::int64_t, 2> as_batch(const std::vector<std::int64_t>& ids) {
    auto t = Tensor<std::int64_t, 2>::empty({1, static_cast<index_t>(ids.size())});
    std::copy(ids.begin(), ids.end(), t.data());
    return t;
  }

  void check_ids(const char* op, const Tensor<std::int64_t, 2>& ids, index_t past) const {
    const index_t b = ids.shape()[0], t = ids.shape()[1];
    if (b == 0 || t == 0)
      throw std::invalid_argument(std::string(op) + ": input_ids " + shape_string(ids.shape()) +
                                  " is empty; it needs at least one token in each of at least one sequence");
    if (past + t > config_.n_positions) {
      if (past == 0)
        throw std::out_of_range(std::string(op) + ": sequence length " + std::to_string(t) + " exceeds n_positions " +
                                std::to_string(config_.n_positions) + " (the number of learned positions)");
      throw std::out_of_range(std::string(op) + ": " + std::to_string(past) + " cached + " + std::to_string(t) +
                              " new tokens exceed n_positions " + std::to_string(config_.n_positions) +
                              " (the number of learned positions)");
    }
    for (index_t i = 0; i < b; ++i)
      for (index_t j = 0; j < t; ++j) {
        const std::int64_t id = ids(i, j);
        if (id < 0 || id >= config_.vocab_size)
          throw std::out_of_range(std::string(op) + ": token id " + std::to_string(id) + " at input_ids[" +
                                  std::to_string(i) + ", " + std::to_string(j) + "] is out of range for vocab_size " +
                                  std::to_string(config_.vocab_size) + " (valid ids are 0 to " +
                                  std::to_string(config_.vocab_size - 1) + ")");
      }
  }

  // wte[id] + wpe[start + t] for every token: (B, T, C). Ids were checked.
  Tensor<T, 3> embed(const Tensor<std::int64_t, 2>& ids, index_t start) const {
    const index_t b = ids.shape()[0], t = ids.shape()[1], dim = config_.n_embd;
    auto x = Tensor<T, 3>::empty({b, t, dim});
    const T* tok = wte.data.data();
    const T* pos = wpe.data.data();
    T* o = x.data();
    for (index_t i = 0; i < b; ++i)
      for (index_t j = 0; j < t; ++j, o += dim) {
        const T* a = tok + ids(i, j) * dim;
        const T* p = pos + (start + j) * dim;
        for (index_t k = 0; k < dim; ++k) o[k] = a[k] + p[k];
      }
    return x;
  }

  // The tied LM head: (N, C) x wte^T -> (N, V).
  Tensor<T, 2> lm_head(const Tensor<T, 2>& hf) const { return matmul(hf, wte.data.t()); }

  GPT2Config config_;
  std::optional<Cache> cache_;  // training mode only
};

}  // namespace eigenformer::models
