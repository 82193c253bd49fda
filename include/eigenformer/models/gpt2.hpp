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
// Module tree (Hugging Face's, so `std::cout << model` prints what print(model) prints in PyTorch):
//   GPT2LMHeadModel { transformer: GPT2Model { wte: Embedding, wpe: Embedding, drop: Dropout,
//                     h: ModuleList<GPT2Block>, ln_f: LayerNorm }, lm_head: TiedLMHead (prints as Linear) }
//   GPT2Block { ln_1, attn: GPT2Attention { c_attn, c_proj, attn_dropout, resid_dropout }, ln_2,
//               mlp: GPT2MLP { c_fc, c_proj, act, dropout } }
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
// Dropout (training mode only) draws in forward order from eigenformer::current_generator(): embeddings
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
// forward(ids, cache, which) runs only the new tokens, attending to the cached ones, and returns the logits of
// the positions asked for (all new ones, or only the last: what generation uses). It is inference by
// construction, whatever the training flag: no dropout and nothing saved for backward, so it never writes to
// the model. GPT2LMHeadModel satisfies models::CausalLM (generation.hpp), which is all generate() needs.
//
// Threads: a forward that does not record (eval mode, InferenceMode, or any cached forward) only reads the
// model, so one model can serve many threads at once, each with its own KV cache
// (tests/models/test_threads.cpp). Training forwards save their contexts in the modules: one thread per
// model there.
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>
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
#include "eigenformer/models/generation.hpp"
#include "eigenformer/models/detail/residual.hpp"
#include "eigenformer/models/no_init.hpp"
#include "eigenformer/models/tied_lm_head.hpp"
#include "eigenformer/nn/dropout.hpp"
#include "eigenformer/nn/embedding.hpp"
#include "eigenformer/nn/layernorm.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/nn/module_list.hpp"
#include "eigenformer/nn/pack_weights.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/tensor.hpp"
#include "eigenformer/tensor/backend.hpp"

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

// The KV cache of a decoder: nn::KVCache from the attention core (one LayerKVCache per layer, keys and
// values preallocated (B, NH, capacity, HS), so decoding never reallocates them). Not GPT-2's own: any
// decoder built on nn::fused_attention uses it. GPT2LMHeadModel::make_cache sizes one for the model.
template <floating_element T>
using KVCache = nn::KVCache<T>;

// Causal multi-head self-attention with Conv1D projections (Hugging Face's GPT2Attention).
template <floating_element T>
class GPT2Attention : public nn::Module<T> {
 public:
  GPT2Attention(const GPT2Config& c, double proj_std, Generator& gen, bool init)
      : c_attn(c.n_embd, 3 * c.n_embd, init ? c.initializer_range : 0.0, gen),
        c_proj(c.n_embd, c.n_embd, init ? proj_std : 0.0, gen),
        attn_dropout(c.attn_pdrop),
        resid_dropout(c.resid_pdrop),
        dim_(c.n_embd),
        heads_(c.n_head) {}

  nn::Conv1D<T> c_attn;  // (C, 3C): columns q | k | v, head h owning h*HS .. h*HS+HS-1 of each
  nn::Conv1D<T> c_proj;  // (C, C)
  nn::Dropout<T> attn_dropout;  // on the attention weights; its p is what the attention core applies
  nn::Dropout<T> resid_dropout;

  std::string type_name() const override { return "GPT2Attention"; }
  void register_members(nn::Members<T>& m) override {
    m.child("c_attn", c_attn);
    m.child("c_proj", c_proj);
    m.child("attn_dropout", attn_dropout);
    m.child("resid_dropout", resid_dropout);
  }

  // (B, T, C) -> (B, T, C), every token attending to itself and the tokens before it. `weights`, when
  // given, receives the attention weights (B, NH, T, T) before dropout.
  Tensor<T, 3> forward(const Tensor<T, 3>& x, Tensor<T, 4>* weights = nullptr) const {
    // The context only when recording: a default-constructed one allocates its tensors, which an
    // inference forward has no use for.
    std::optional<nn::FusedAttentionContext<T>> ctx;
    if (this->records_for_backward()) ctx.emplace();
    const auto merged = nn::fused_attention(c_attn.forward(x), options(this->is_training() ? attn_dropout.p() : 0.0),
                                            {.weights = weights, .context = ctx ? &*ctx : nullptr});  // (B, T, C)
    if (ctx) this->save_for_backward(std::move(*ctx));
    return resid_dropout.forward(c_proj.forward(merged));
  }

  // The new tokens x (B, Tn, C) at positions past .. past+Tn-1 (past = cache.length()): their keys and values
  // are appended to the layer's cache and each token attends to the cached ones and the new ones up to
  // itself. Inference: no dropout, nothing saved (the model holds an InferenceMode scope around it).
  Tensor<T, 3> forward_cached(const Tensor<T, 3>& x, nn::LayerKVCache<T>& cache) const {
    return c_proj.forward(nn::fused_attention(c_attn.forward(x), options(0.0), {.cache = &cache}));
  }

  // dL/dx from dL/dy: resid dropout and c_proj, attention, then c_attn.
  Tensor<T, 3> backward(const Tensor<T, 3>& grad_output) {
    const auto ctx = this->template take_saved<nn::FusedAttentionContext<T>>("GPT2Attention");
    const index_t b = ctx.qkv.shape()[0], t = ctx.qkv.shape()[1];
    nn::detail::check_grad_shape("GPT2Attention.backward", grad_output.shape(), Shape<3>{b, t, dim_});
    const auto g = c_proj.backward(resid_dropout.backward(grad_output));  // (B, T, C)
    return c_attn.backward(nn::fused_attention_backward(ctx, g));
  }

 private:
  nn::FusedAttentionOptions options(double dropout_p) const {
    return {.num_heads = heads_, .causal = true, .dropout_p = dropout_p};
  }

  index_t dim_, heads_;
};
// The position-wise MLP (Hugging Face's GPT2MLP): c_proj(act(c_fc(x))), then the resid dropout.
template <floating_element T>
class GPT2MLP : public nn::Module<T> {
 public:
  GPT2MLP(const GPT2Config& c, double proj_std, Generator& gen, bool init)
      : c_fc(c.n_embd, c.inner_dim(), init ? c.initializer_range : 0.0, gen),
        c_proj(c.inner_dim(), c.n_embd, init ? proj_std : 0.0, gen),
        act(c.activation_function),
        dropout(c.resid_pdrop) {}

  nn::Conv1D<T> c_fc;    // (C, 4C)
  nn::Conv1D<T> c_proj;  // (4C, C)
  nn::Activation<T> act;
  nn::Dropout<T> dropout;

  std::string type_name() const override { return "GPT2MLP"; }
  void register_members(nn::Members<T>& m) override {
    m.child("c_fc", c_fc);
    m.child("c_proj", c_proj);
    m.child("act", act);
    m.child("dropout", dropout);
  }

  Tensor<T, 3> forward(const Tensor<T, 3>& x) const {
    return dropout.forward(c_proj.forward(act.forward(c_fc.forward(x))));
  }
  // Inference: the same without the dropout, c_fc and the activation as one gemm (the activation applied in
  // its epilogue: one pass over the 4C-wide hidden layer and no tensor for the pre-activation), the hidden
  // layer's rows spaced for c_proj's product (dense_hidden_product).
  Tensor<T, 3> forward_inference(const Tensor<T, 3>& x) const {
    const index_t b = x.shape()[0], t = x.shape()[1];
    if (x.shape()[2] != c_fc.in_features()) return c_proj.forward(act.forward(c_fc.forward(x)));  // its error
    const auto hidden = nn::detail::dense_hidden_product(
        x.reshape(Shape<2>{b * t, c_fc.in_features()}), c_fc.weight.data, c_fc.prepared_weight(),
        backend::Epilogue<T>{&c_fc.bias.data, nn::epilogue_activation(act.kind())});
    return c_proj.forward(hidden).view(Shape<3>{b, t, c_proj.out_features()});
  }
  Tensor<T, 3> backward(const Tensor<T, 3>& g) {
    return c_fc.backward(act.backward(c_proj.backward(dropout.backward(g))));
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

  std::string type_name() const override { return "GPT2Block"; }
  void register_members(nn::Members<T>& m) override {
    m.child("ln_1", ln_1);
    m.child("attn", attn);
    m.child("ln_2", ln_2);
    m.child("mlp", mlp);
  }

  // `weights`: as GPT2Attention::forward's.
  // h = x + attn and ln_2(h) in one pass (add_forward).
  Tensor<T, 3> forward(const Tensor<T, 3>& x, Tensor<T, 4>* weights = nullptr) const {
    auto h = attn.forward(ln_1.forward(x), weights);
    auto y = mlp.forward(ln_2.add_forward(h, x));
    return detail::add_into(y, h);
  }
  Tensor<T, 3> forward_cached(const Tensor<T, 3>& x, nn::LayerKVCache<T>& cache) const {
    auto h = attn.forward_cached(ln_1.forward(x), cache);
    auto y = mlp.forward_inference(ln_2.add_forward(h, x));
    return detail::add_into(y, h);
  }
  // The residual connections pass the gradient straight through; each sublayer adds its own part.
  Tensor<T, 3> backward(const Tensor<T, 3>& g) {
    const auto dh = g + ln_2.backward(mlp.backward(g));
    return dh + ln_1.backward(attn.backward(dh));
  }

 private:
  static double proj_std(const GPT2Config& c) {
    return c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  }
};

// The transformer body (Hugging Face's GPT2Model): embeddings, the blocks, the final LayerNorm. Its output is
// the last hidden state (B, T, C).
template <floating_element T>
class GPT2Model : public nn::Module<T> {
 public:
  // Weights drawn from `gen` (see the top of this file) when init, else zeros with nothing drawn from it.
  GPT2Model(const GPT2Config& config, Generator& gen, bool init)
      : wte(embedding(checked(config).vocab_size, config.n_embd)),
        wpe(embedding(config.n_positions, config.n_embd)),
        drop(config.embd_pdrop),
        ln_f(config.n_embd, config.layer_norm_epsilon),
        config_(config) {
    if (init) {
      normal_(wte.weight.data, 0.0, config.initializer_range, gen);
      normal_(wpe.weight.data, 0.0, config.initializer_range, gen);
    }
    h.reserve(static_cast<std::size_t>(config.n_layer));
    for (index_t i = 0; i < config.n_layer; ++i) h.emplace_back(config, gen, init);
  }

  nn::Embedding<T> wte;  // (V, C), also the LM head
  nn::Embedding<T> wpe;  // (n_positions, C)
  nn::Dropout<T> drop;
  nn::ModuleList<GPT2Block<T>> h;
  nn::LayerNorm<T> ln_f;

  const GPT2Config& config() const noexcept { return config_; }

  std::string type_name() const override { return "GPT2Model"; }
  void register_members(nn::Members<T>& m) override {
    m.child("wte", wte);
    m.child("wpe", wpe);
    m.child("drop", drop);
    m.child("h", h);
    m.child("ln_f", ln_f);
  }

  // input_ids (B, T), already checked -> last hidden state (B, T, C). `attentions`, when given, receives the
  // attention weights of every block, (B, NH, T, T) each, before dropout (Hugging Face's output_attentions).
  Tensor<T, 3> forward(const Tensor<std::int64_t, 2>& input_ids, std::vector<Tensor<T, 4>>* attentions = nullptr) const {
    auto x = drop.forward(embed(input_ids, 0));
    if (attentions) attentions->assign(h.size(), Tensor<T, 4>{});
    for (std::size_t i = 0; i < h.size(); ++i) x = h[i].forward(x, attentions ? &(*attentions)[i] : nullptr);
    return ln_f.forward(x);
  }

  // The new tokens at positions cache.length() .. (checked by the caller) through every block, each appending
  // to its layer's cache; returns their hidden states before ln_f (B, Tn, C).
  Tensor<T, 3> forward_cached(const Tensor<std::int64_t, 2>& input_ids, KVCache<T>& cache) const {
    const index_t past = cache.length();
    // wte's rows, then wpe's added in place: no position ids and no second lookup tensor (nothing is
    // recorded here, so wpe's lookup context is not needed).
    auto x = wte.forward(input_ids);  // (B, Tn, C)
    const index_t b = x.shape()[0], tn = x.shape()[1], dim = x.shape()[2];
    using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
    for (index_t i = 0; i < b; ++i)
      Eigen::Map<Arr>(x.data() + i * tn * dim, tn * dim) += Eigen::Map<const Arr>(wpe.weight.data.data() + past * dim, tn * dim);
    for (std::size_t i = 0; i < h.size(); ++i) x = h[i].forward_cached(x, cache[i]);
    return x;
  }

  // From dL/d(hidden) (B, T, C): accumulates every gradient of the body, wte's lookup part included.
  void backward(const Tensor<T, 3>& grad_hidden) {
    auto dx = ln_f.backward(grad_hidden);
    for (auto it = h.rbegin(); it != h.rend(); ++it) dx = it->backward(dx);
    const auto de = drop.backward(dx);
    wte.backward(de);
    wpe.backward(de);
  }

 private:
  // The lookup tables start as zeros; the constructor draws them from the caller's generator when asked.
  static nn::Embedding<T> embedding(index_t rows, index_t dim) {
    return nn::Embedding<T>(rows, dim, std::nullopt, nn::skip_init);
  }
  static const GPT2Config& checked(const GPT2Config& c) {
    c.validate();
    return c;
  }

  // wte[id] + wpe[start + t] for every token: (B, T, C).
  Tensor<T, 3> embed(const Tensor<std::int64_t, 2>& ids, index_t start) const {
    const index_t b = ids.shape()[0], t = ids.shape()[1];
    auto positions = Tensor<std::int64_t, 2>::empty({b, t});
    for (index_t i = 0; i < b; ++i)
      for (index_t j = 0; j < t; ++j) positions(i, j) = start + j;
    return wte.forward(ids) + wpe.forward(positions);
  }

  GPT2Config config_;
};

// GPT-2 with its language-model head (Hugging Face's GPT2LMHeadModel).
template <floating_element T>
class GPT2LMHeadModel : public nn::Module<T> {
 public:
  using value_type = T;
  using cache_type = KVCache<T>;

  // Initialised as described at the top of this file, drawing from `gen`. Throws std::invalid_argument for
  // an invalid config.
  explicit GPT2LMHeadModel(const GPT2Config& config, Generator& gen = default_generator())
      : GPT2LMHeadModel(config, gen, true) {}
  // Every weight zero (LayerNorm still 1 / 0) and nothing drawn: for loading a checkpoint. (The generator
  // argument is accepted for symmetry and not used.)
  GPT2LMHeadModel(const GPT2Config& config, no_init_t) : GPT2LMHeadModel(config, default_generator(), false) {}

  GPT2Model<T> transformer;
  TiedLMHead<T> lm_head;

  const GPT2Config& config() const noexcept { return transformer.config(); }
  index_t vocab_size() const noexcept { return config().vocab_size; }
  index_t max_positions() const noexcept { return config().n_positions; }

  std::string type_name() const override { return "GPT2LMHeadModel"; }
  void register_members(nn::Members<T>& m) override {
    m.child("transformer", transformer);
    m.child("lm_head", lm_head);
  }

  // input_ids (B, T) -> logits (B, T, V). Ids must be in [0, vocab_size) and T <= n_positions; violations
  // throw std::out_of_range naming the id and where it is, or the length. A training-mode forward outside
  // InferenceMode saves what backward needs; otherwise the model is only read. `attentions`: as
  // GPT2Model::forward's.
  Tensor<T, 3> forward(const Tensor<std::int64_t, 2>& input_ids, std::vector<Tensor<T, 4>>* attentions = nullptr) const {
    check_ids("GPT2LMHeadModel.forward", input_ids, 0);
    return lm_head.forward(transformer.forward(input_ids, attentions), transformer.wte.weight.data);
  }
  // One sequence: ids (T) -> logits (1, T, V).
  Tensor<T, 3> forward(const std::vector<std::int64_t>& ids, std::vector<Tensor<T, 4>>* attentions = nullptr) const {
    return forward(as_batch(ids), attentions);
  }

  // Incremental inference: the new tokens (B, Tn) at positions cache.length() .. cache.length()+Tn-1 attend
  // to the cached ones and are appended to the cache. Returns the logits of every new position (B, Tn, V),
  // or with LogitsFor::last only of the last one (B, 1, V) -- the LM head and ln_f then run on one row per
  // sequence, which for a long prompt saves most of the head's time and its Tn x V logits. Equal (up to
  // float summation order) to the same positions of forward() on the whole sequence. Inference whatever the
  // mode: no dropout, nothing saved, the training flag untouched.
  Tensor<T, 3> forward(const Tensor<std::int64_t, 2>& input_ids, KVCache<T>& cache,
                       LogitsFor which = LogitsFor::all) const {
    const index_t b = input_ids.shape()[0], tn = input_ids.shape()[1], past = cache.length();
    if (static_cast<index_t>(cache.num_layers()) != config().n_layer || cache.heads() != config().n_head ||
        cache.head_dim() != config().head_dim())
      throw std::invalid_argument("GPT2LMHeadModel.forward: the KVCache was made for another config (" +
                                  std::to_string(cache.num_layers()) + " layers of " + std::to_string(cache.heads()) +
                                  " heads of " + std::to_string(cache.head_dim()) + " channels; this model has " +
                                  std::to_string(config().n_layer) + " of " + std::to_string(config().n_head) +
                                  " of " + std::to_string(config().head_dim()) + ")");
    if (b != cache.batch())
      throw shape_error("GPT2LMHeadModel.forward: input_ids " + shape_string(input_ids.shape()) + " has batch " +
                        std::to_string(b) + " but the KVCache holds " + std::to_string(cache.batch()) + " sequences");
    check_ids("GPT2LMHeadModel.forward", input_ids, past);
    if (past + tn > cache.capacity())
      throw std::out_of_range("GPT2LMHeadModel.forward: the KVCache holds " + std::to_string(past) + " tokens and " +
                              std::to_string(tn) + " new ones would need " + std::to_string(past + tn) +
                              " positions, more than its capacity " + std::to_string(cache.capacity()));
    InferenceMode inference;
    auto x = transformer.forward_cached(input_ids, cache);  // (B, Tn, C), before ln_f
    if (which == LogitsFor::last && tn > 1) x = x.narrow(1, tn - 1, 1).contiguous();
    return lm_head.forward(transformer.ln_f.forward(x), transformer.wte.weight.data);
  }
  Tensor<T, 3> forward(const std::vector<std::int64_t>& ids, KVCache<T>& cache,
                       LogitsFor which = LogitsFor::all) const {
    return forward(as_batch(ids), cache, which);
  }

  // bfloat16 weight storage for inference (tensor/bf16.hpp): every Conv1D weight and the tied wte (so the LM
  // head too) rounded to bfloat16, as model.to(torch.bfloat16) would round them, with bfloat16 copies that
  // decoding's few-row products stream at half the bytes; the arithmetic stays float. Biases, LayerNorm and
  // wpe stay float. FloatWeights::keep keeps the rounded float weights too (1.5x the float model's memory; a
  // snapshot: after changing the weights, call it again). FloatWeights::release frees them layer by layer
  // as their copies are made, so memory never holds much more than the float model and ends at about half
  // of it; the model then serves inference only (training, state_dict, pack_weights refuse, saying why).
  void to_bf16_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    // Freed weights go to the allocator's cache (tensor/allocator.hpp) unless it is emptied: after each layer,
    // so that the peak stays at the float model plus one layer's copy.
    const auto settle = [&] {
      if (floats == FloatWeights::release) release_cached_memory();
    };
    for (auto& block : transformer.h) {
      block.attn.c_attn.to_bf16_weights(floats);
      block.attn.c_proj.to_bf16_weights(floats);
      block.mlp.c_fc.to_bf16_weights(floats);
      block.mlp.c_proj.to_bf16_weights(floats);
      settle();
    }
    transformer.wte.to_bf16_weights(floats);
    const auto& wte = transformer.wte.weight;
    lm_head.use_bf16_weight(*transformer.wte.bf16_weight(), wte.float_released() ? nullptr : &wte.data);
    settle();
  }

  // Every weight matrix (the tied LM head's too) also kept in the packed kernel's order, which the float
  // products of a prompt then read without repacking it on every call (tensor/packed_matrix.hpp): same
  // logits, about the weights' memory again. A snapshot: after changing the weights, call it again.
  // FloatWeights::release frees each float weight matrix once packed (inference only): every product then
  // reads the packed copy, a decoding step's too, with the bits that row has in a prompt's product rather than
  // the float weight's decoding kernels' (nn::Linear::pack_weights), and wte's lookups read its rows out of the
  // head's packed copy: the packed model in the float model's memory.
  void pack_weights(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    nn::pack_weights(*this, {}, floats);
    pack_tied_head(floats);
  }
  // Undoes pack_weights: every packed copy dropped, and weights held only packed (wte too) given back their
  // float values first, bit for bit, so the model can be trained or saved again.
  void unpack_weights()
    requires std::is_same_v<T, float>
  {
    transformer.wte.use_float_table();
    lm_head.unpack_weights(transformer.wte.weight);
    nn::unpack_weights(*this);
  }
  // The tied head's packed copy of wte alone (what pack_weights does last); with FloatWeights::release the only
  // copy of wte, whose lookups then read it. For a loader that packs each weight as it is read.
  void pack_tied_head(FloatWeights floats = FloatWeights::keep)
    requires std::is_same_v<T, float>
  {
    lm_head.pack_weights(transformer.wte.weight.data, floats);
    if (floats == FloatWeights::release && lm_head.packed_weight()) {
      transformer.wte.use_packed_table(*lm_head.packed_weight());
      release_cached_memory();
    }
  }

  // A cache for `batch` sequences of up to `capacity` tokens (0 = n_positions).
  KVCache<T> make_cache(index_t batch = 1, index_t capacity = 0) const {
    if (batch <= 0) throw std::invalid_argument("KVCache: batch must be positive, got " + std::to_string(batch));
    if (capacity < 0 || capacity > config().n_positions)
      throw std::invalid_argument("KVCache: capacity " + std::to_string(capacity) + " must be within 1..n_positions " +
                                  std::to_string(config().n_positions) + " (0 = n_positions)");
    return KVCache<T>(config().n_layer, batch, config().n_head, capacity == 0 ? config().n_positions : capacity,
                      config().head_dim());
  }

  // Accumulates every parameter's gradient from dL/dlogits (B, T, V). wte receives both of its parts: the LM
  // head's (dlogits^T ln_f(h)) and the embedding lookup's (scatter-add over the ids). Ids are not
  // differentiable, so nothing is returned.
  void backward(const Tensor<T, 3>& grad_logits) {
    transformer.backward(lm_head.backward(grad_logits, transformer.wte.weight));
  }

 private:
  GPT2LMHeadModel(const GPT2Config& config, Generator& gen, bool init)
      : transformer(config, gen, init), lm_head(config.n_embd, config.vocab_size) {}

  static Tensor<std::int64_t, 2> as_batch(const std::vector<std::int64_t>& ids) {
    auto t = Tensor<std::int64_t, 2>::empty({1, static_cast<index_t>(ids.size())});
    std::copy(ids.begin(), ids.end(), t.data());
    return t;
  }

  void check_ids(const char* op, const Tensor<std::int64_t, 2>& ids, index_t past) const {
    const index_t b = ids.shape()[0], t = ids.shape()[1];
    const index_t n_positions = config().n_positions, vocab = config().vocab_size;
    if (b == 0 || t == 0)
      throw std::invalid_argument(std::string(op) + ": input_ids " + shape_string(ids.shape()) +
                                  " is empty; it needs at least one token in each of at least one sequence");
    if (past + t > n_positions) {
      if (past == 0)
        throw std::out_of_range(std::string(op) + ": sequence length " + std::to_string(t) + " exceeds n_positions " +
                                std::to_string(n_positions) + " (the number of learned positions)");
      throw std::out_of_range(std::string(op) + ": " + std::to_string(past) + " cached + " + std::to_string(t) +
                              " new tokens exceed n_positions " + std::to_string(n_positions) +
                              " (the number of learned positions)");
    }
    for (index_t i = 0; i < b; ++i)
      for (index_t j = 0; j < t; ++j) {
        const std::int64_t id = ids(i, j);
        if (id < 0 || id >= vocab)
          throw std::out_of_range(std::string(op) + ": token id " + std::to_string(id) + " at input_ids[" +
                                  std::to_string(i) + ", " + std::to_string(j) + "] is out of range for vocab_size " +
                                  std::to_string(vocab) + " (valid ids are 0 to " + std::to_string(vocab - 1) + ")");
      }
  }
};

static_assert(CausalLM<GPT2LMHeadModel<float>>);

}  // namespace eigenformer::models
