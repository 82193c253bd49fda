// The attention core (fused_attention, its backward and KV cache, scaled_dot_product_attention), the tutorial
// layers SelfAttentionV1/V2, CausalAttention, MultiHeadAttentionPerHead and MultiHeadAttention: PyTorch
// fixtures (forward, attention weights, every gradient), finite differences, KV cache decoding, thread-count
// independence, read-only eval forwards, reprs, properties, the seeds' worked examples and bad input.
// Tolerances: see support/attention_fixtures.hpp.
#include <doctest/doctest.h>

#include <eigenformer/nn/multi_head_attention.hpp>
#include <eigenformer/nn/self_attention.hpp>
#include <thread>

#include "support/attention_fixtures.hpp"
#include "support/cases.hpp"
#include "support/thread_counts.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace nn = ef::nn;
namespace tut = ef::nn::tutorial;

namespace {


nn::AttentionOptions options_of(const json& c) {
  const auto& cfg = c.at("config");
  nn::AttentionOptions o;
  o.dropout_p = cfg.at("dropout_p").get<double>();
  o.is_causal = cfg.at("is_causal").get<bool>();
  o.masked_value = number(cfg.at("masked_value"));
  return o;
}

// scaled_dot_product_attention on the case's inputs, with the mask at its recorded rank.
template <typename T>
ef::Tensor<T, 4> sdpa_of(const json& c, nn::AttentionContext<T, 4>* ctx, ef::Tensor<T, 4>* w) {
  const auto& in = c.at("inputs");
  const auto q = fx<T, 4>(in.at("q")), k = fx<T, 4>(in.at("k")), v = fx<T, 4>(in.at("v"));
  const auto o = options_of(c);
  if (!c.at("forward_seed").is_null()) ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());
  if (!in.contains("mask")) return nn::scaled_dot_product_attention(q, k, v, std::nullopt, o, ctx, w);
  const auto& m = in.at("mask");
  switch (shape_of(m).size()) {
    case 1: return nn::scaled_dot_product_attention(q, k, v, fx<bool, 1>(m), o, ctx, w);
    case 2: return nn::scaled_dot_product_attention(q, k, v, fx<bool, 2>(m), o, ctx, w);
    default: return nn::scaled_dot_product_attention(q, k, v, fx<bool, 4>(m), o, ctx, w);
  }
}

nn::MultiHeadAttentionOptions mha_options_of(const json& c) {
  const auto& cfg = c.at("config");
  nn::MultiHeadAttentionOptions o;
  o.attn_dropout = cfg.at("attn_dropout").get<double>();
  o.out_dropout = cfg.at("out_dropout").get<double>();
  o.causal = cfg.at("causal").get<bool>();
  o.masked_value = number(cfg.at("masked_value"));
  return o;
}

// Builds the case's layer (MultiHeadAttention for the fused layout, the tutorial's per-head layer for seed
// 004's) and calls f(layer).
template <typename T, class F>
void with_mha_of(const json& c, F&& f) {
  const auto& cfg = c.at("config");
  const index_t dim = cfg.at("dim").get<index_t>(), heads = cfg.at("heads").get<index_t>();
  if (cfg.at("layout") == "fused") {
    nn::MultiHeadAttention<T> m(dim, heads, mha_options_of(c));
    f(m);
  } else {
    tut::MultiHeadAttentionPerHead<T> m(dim, heads, mha_options_of(c));
    f(m);
  }
}

// Forward of a MultiHeadAttention case, with its key padding mask if it has one; the attention weights
// land in *weights.
template <typename T>
auto mha_forward(const json& c, ef::Tensor<T, 4>* weights) {
  return [&c, weights](auto& m, const auto& x) {
    const auto& in = c.at("inputs");
    auto [y, w] = in.contains("mask") ? m.forward_with_weights(x, fx<bool, 2>(in.at("mask"))) : m.forward_with_weights(x);
    *weights = w;
    return y;
  };
}
auto plain_forward() {
  return [](auto& m, const auto& x) { return m.forward(x); };
}

// Every weight above the diagonal exactly 0; every row summing to 1 (or 0 when all its keys are masked).
template <typename T>
void check_weight_rows(const ef::Tensor<T, 4>& w, bool causal, double tol) {
  const index_t tq = w.shape()[2], tk = w.shape()[3];
  for (index_t b = 0; b < w.shape()[0]; ++b)
    for (index_t h = 0; h < w.shape()[1]; ++h)
      for (index_t i = 0; i < tq; ++i) {
        double sum = 0;
        for (index_t j = 0; j < tk; ++j) {
          sum += w(b, h, i, j);
          if (causal && j > i) CHECK(w(b, h, i, j) == T(0));
        }
        CHECK((std::abs(sum - 1.0) <= tol || sum == 0.0));
      }
}

}  // namespace

// ---- PyTorch fixtures ---------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("scaled_dot_product_attention: output, weights and gradients match PyTorch (fixtures)", T, float,
                   double) {
  for (const char* name : {"sdpa_plain", "sdpa_causal", "sdpa_mask_2d", "sdpa_padding_causal_dropout",
                           "sdpa_fully_masked_rows", "sdpa_fully_masked_rows_1e9", "sdpa_cross_causal_keymask"}) {
    const auto& c = attention_case(name);
    const std::string what = name + type_tag<T>();
    nn::AttentionContext<T, 4> ctx;
    ef::Tensor<T, 4> w;
    const auto out = sdpa_of<T>(c, &ctx, &w);
    check_attn(out, c.at("out"), what + " forward");
    check_attn(w, c.at("weights"), what + " weights");
    const auto g = nn::scaled_dot_product_attention_backward(ctx, fx<T, 4>(c.at("probe")));
    check_attn(g.q, c.at("grads").at("q"), what + " dq");
    check_attn(g.k, c.at("grads").at("k"), what + " dk");
    check_attn(g.v, c.at("grads").at("v"), what + " dv");
  }
}

TEST_CASE_TEMPLATE("SelfAttentionV1/V2, CausalAttention: forward and gradients match PyTorch (fixtures)", T, float,
                   double) {
  {
    const auto& c = attention_case("self_attention_v1_train");
    ef::manual_seed(123);
    tut::SelfAttentionV1<T> m(12, 8);
    if constexpr (std::is_same_v<T, float>)  // torch.rand is reproduced bit for bit
      for (auto& p : m.named_parameters())  // (the fixture's decimals are exact only as float32)
        check_tensors_close(p.data, to_tensor<float, 2>(c.at("params").at(p.name)).flatten(), 0, 0, "init " + p.name);
    run_module_case<T>(m, c, plain_forward());
  }
  {
    tut::SelfAttentionV2<T> m(12, 8, true);
    run_module_case<T>(m, attention_case("self_attention_v2_bias_train"), plain_forward());
  }
  for (const char* name : {"causal_attention_train", "causal_attention_eval"}) {
    tut::CausalAttention<T> m(12, 8, 6, 0.3);
    run_module_case<T>(m, attention_case(name), plain_forward());
  }
}

TEST_CASE_TEMPLATE("MultiHeadAttention: forward, weights and gradients match PyTorch (fixtures)", T, float, double) {
  for (const char* name : {"mha_fused_padding_train", "mha_fused_padding_eval", "mha_fused_causal_train",
                           "mha_fused_fully_padded_1e9_train", "mha_fused_fully_padded_train",
                           "mha_per_head_padding_train", "mha_per_head_eval"}) {
    const auto& c = attention_case(name);
    with_mha_of<T>(c, [&](auto& m) {
      ef::Tensor<T, 4> weights;
      run_module_case<T>(m, c, mha_forward<T>(c, &weights));
      if (c.contains("weights")) check_attn(weights, c.at("weights"), name + type_tag<T>() + " weights");
    });
  }
}

// A float64 fixture: check_attn holds it to double precision.
TEST_CASE("MultiHeadAttention: causal with padding matches PyTorch run in float64, at double precision (fixture)") {
  const auto& c = attention_case("mha_fused_f64_padding_causal_train");
  with_mha_of<double>(c, [&](auto& m) {
    ef::Tensor<double, 4> weights;
    run_module_case<double>(m, c, mha_forward<double>(c, &weights));
  });
}

TEST_CASE("MultiHeadAttention: manual_seed initialisation equals the seeds' modules, both layouts (fixtures)") {
  // PyTorch's scalar kernels (the fixtures') and its AVX2 kernels (eigenformer's stream) may round the
  // nn.Linear uniform draws an ulp apart: 1e-6 relative.
  for (const char* name : {"mha_fused_init", "mha_per_head_init"}) {
    const auto& c = attention_case(name);
    ef::manual_seed(c.at("seed").get<std::uint64_t>());
    with_mha_of<float>(c, [&](auto& m) {
    const auto& params = c.at("params");
    REQUIRE(m.named_parameters().size() == params.size());
    for (auto& p : m.named_parameters()) {
      REQUIRE_MESSAGE(params.contains(p.name), p.name);
      json flat = params.at(p.name);
      flat["shape"] = std::vector<index_t>{p.data.numel()};
      check_close(p.data, flat, 1e-6, 1e-7, std::string(name) + " " + p.name);
    }
    m.eval();
    const auto x = fx<float, 3>(c.at("inputs").at("x"));
    const auto [y, w] = m.forward_with_weights(x);
    check_attn(y, c.at("out"), std::string(name) + " forward");
    check_attn(w, c.at("weights"), std::string(name) + " weights");
    });
  }
}

// ---- finite differences (double) ----------------------------------------------------------------------------

TEST_CASE("scaled_dot_product_attention: backward matches central finite differences (double)") {
  ef::manual_seed(11);
  auto q = ef::randn<double>({2, 3, 4, 5}), k = ef::randn<double>({2, 3, 6, 5}), v = ef::randn<double>({2, 3, 6, 3});
  const auto pad = ef::tensor<bool>({{{{true, true, false, true, true, false}}}, {{{false, false, false, false, false, false}}}});
  const auto probe = ef::randn<double>({2, 3, 4, 3});
  for (const double masked : {-inf<double>, -1e9})
    for (const double p : {0.0, 0.3}) {
      INFO("masked value " << masked << ", dropout " << p);
      nn::AttentionOptions o;
      o.is_causal = true;
      o.masked_value = masked;
      o.dropout_p = p;
      auto f = [&] {  // reseeded: every evaluation draws the same dropout mask
        ef::manual_seed(5);
        return nn::scaled_dot_product_attention(q, k, v, pad, o);
      };
      nn::AttentionContext<double, 4> ctx;
      ef::manual_seed(5);
      nn::scaled_dot_product_attention(q, k, v, pad, o, &ctx);
      const auto g = nn::scaled_dot_product_attention_backward(ctx, probe);
      check_tensors_close(g.q, numerical_gradient(f, q, probe), 1e-6, 1e-8, "dq");
      check_tensors_close(g.k, numerical_gradient(f, k, probe), 1e-6, 1e-8, "dk");
      check_tensors_close(g.v, numerical_gradient(f, v, probe), 1e-6, 1e-8, "dv");
    }
}

TEST_CASE("attention modules: backward matches central finite differences (double)") {
  ef::manual_seed(12);
  const auto x = ef::randn<double>({2, 5, 12});
  const auto pad = ef::tensor<bool>({{true, true, true, false, false}, {false, false, false, false, false}});
  {
    tut::SelfAttentionV1<double> m(12, 6);
    check_module_gradients(m, x, plain_forward(), "SelfAttentionV1");
    // The book's unbatched (T, d_in) input.
    auto x2 = ef::randn<double>({5, 12});
    const auto probe = ef::randn<double>({5, 6});
    m.zero_grad();
    m.forward(x2);
    const auto dx = m.backward(probe);
    auto f = [&] {
      m.eval();
      auto y = m.forward(x2);
      m.train();
      return y;
    };
    check_tensors_close(dx, numerical_gradient(f, x2, probe), 1e-6, 1e-8, "SelfAttentionV1 rank 2 dx");
    check_tensors_close(m.W_key.grad(), numerical_gradient(f, m.W_key.data, probe), 1e-6, 1e-8, "rank 2 dW_key");
  }
  {
    tut::SelfAttentionV2<double> m(12, 6, true);
    check_module_gradients(m, x, plain_forward(), "SelfAttentionV2");
  }
  {
    tut::CausalAttention<double> m(12, 6, 5, 0.0, true);
    check_module_gradients(m, x, plain_forward(), "CausalAttention");
  }
  for (const double masked : {-inf<double>, -1e9}) {
    const nn::MultiHeadAttentionOptions o{.attn_dropout = 0, .out_dropout = 0, .causal = true, .masked_value = masked};
    auto f = [&pad](auto& mod, const auto& xx) { return mod.forward(xx, pad); };
    nn::MultiHeadAttention<double> fused(12, 3, o);
    check_module_gradients(fused, x, f, "MHA fused");
    tut::MultiHeadAttentionPerHead<double> per_head(12, 3, o);
    check_module_gradients(per_head, x, f, "MHA per_head");
  }
}

// ---- properties ---------------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("attention properties: causal zeros, rows sum to 1, padded keys get 0, no NaN", T, float, double) {
  ef::manual_seed(21);
  const auto x = ef::randn<T>({2, 5, 12}) * 3.0;
  const auto pad = ef::tensor<bool>({{true, true, true, false, false}, {false, false, false, false, false}});
  nn::MultiHeadAttention<T> m(12, 3, {.attn_dropout = 0.5, .out_dropout = 0.5, .causal = true});
  ef::manual_seed(22);
  const auto [y, w] = m.forward_with_weights(x, pad);  // training mode: dropout on, weights before it
  check_weight_rows(w, true, 1e-6);
  for (index_t h = 0; h < 3; ++h)
    for (index_t i = 0; i < 5; ++i) {
      CHECK(w(0, h, i, 3) == T(0));  // padded keys
      CHECK(w(0, h, i, 4) == T(0));
      for (index_t j = 0; j < 5; ++j) CHECK(w(1, h, i, j) == T(0));  // a sequence of padding only
    }
  for (const T v : y.to_vector()) CHECK(std::isfinite(v));
  const auto dx = m.backward(ef::ones<T>({2, 5, 12}));
  for (const T v : dx.to_vector()) CHECK(std::isfinite(v));
  for (auto& p : m.named_parameters())
    for (const T v : p.grad().to_vector()) CHECK(std::isfinite(v));

  // The fully padded sequence sees no key: its context is 0 and the output is the projection's bias.
  m.eval();
  const auto ye = m.forward(x, pad);
  for (index_t t = 0; t < 5; ++t)
    for (index_t c = 0; c < 12; ++c) CHECK(ye(1, t, c) == m.out.bias->data(c));
  // Eval mode is deterministic and a (B, T) int64 mask means the same as the bool one.
  check_tensors_close(m.forward(x, ef::tensor<std::int64_t>({{1, 1, 1, 0, 0}, {0, 0, 0, 0, 0}})), ye, 0, 0, "int mask");
}

TEST_CASE("scaled_dot_product_attention: a mask of any rank broadcasts; cross-attention shapes") {
  ef::manual_seed(23);
  const auto q = ef::randn<float>({2, 3, 4, 8}), k = ef::randn<float>({2, 3, 6, 8}), v = ef::randn<float>({2, 3, 6, 2});
  const auto mask2 = ef::rand<float>({4, 6}) < 0.7;
  const auto full = ef::Tensor<bool, 4>(mask2.expand(ef::Shape<4>{2, 3, 4, 6}).clone());
  const auto a = nn::scaled_dot_product_attention(q, k, v, mask2);
  const auto b = nn::scaled_dot_product_attention(q, k, v, full);
  CHECK(a.shape() == ef::Shape<4>{2, 3, 4, 2});
  check_tensors_close(a, b, 0, 0, "rank-2 mask = its broadcast");
  // Without a mask and with an all-true one: the same.
  check_tensors_close(nn::scaled_dot_product_attention(q, k, v), nn::scaled_dot_product_attention(q, k, v, ef::ones<bool>({6})),
                      0, 0, "all-true mask");
  // rank 2 inputs: one sequence.
  const auto q2 = q.select(0, 0).select(0, 0), k2 = k.select(0, 0).select(0, 0), v2 = v.select(0, 0).select(0, 0);
  check_tensors_close(nn::scaled_dot_product_attention(q2, k2, v2),
                      nn::scaled_dot_product_attention(q, k, v).select(0, 0).select(0, 0), 1e-6, 1e-7, "rank 2");
}

TEST_CASE("MultiHeadAttention: parameter names of both layouts, gradient accumulation, weights on request") {
  nn::MultiHeadAttention<float> fused(12, 3);
  std::vector<std::string> names;
  for (auto& p : fused.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"qkv.weight", "qkv.bias", "out.weight", "out.bias"});
  CHECK(fused.num_parameters() == 36 * 12 + 36 + 12 * 12 + 12);

  tut::MultiHeadAttentionPerHead<float> per_head(12, 3);
  names.clear();
  for (auto& p : per_head.named_parameters()) names.push_back(p.name);
  REQUIRE(names.size() == 3 * 6 + 2);
  CHECK(names[0] == "heads.0.q.weight");
  CHECK(names[5] == "heads.0.v.bias");
  CHECK(names[6] == "heads.1.q.weight");
  CHECK(names[18] == "output_linear.weight");
  CHECK(per_head.num_parameters() == fused.num_parameters());
  // heads.1.k.weight is rows 12 + 4 .. 12 + 8 of the fused matrix: writing through the name changes the layer.
  per_head.named_parameters()[8].data.fill_(7.0f);
  CHECK(per_head.qkv.weight.data(16, 0) == 7.0f);
  CHECK(per_head.qkv.weight.data(15, 0) != 7.0f);
  // ... also after the layer has moved (the per-head views re-bind to the moved projection).
  auto moved = std::move(per_head);
  moved.named_parameters()[8].data.fill_(8.0f);
  CHECK(moved.qkv.weight.data(16, 0) == 8.0f);

  ef::manual_seed(24);
  nn::MultiHeadAttention<double> m(12, 3, 0.0);
  const auto x = ef::randn<double>({2, 5, 12});
  const auto g = ef::randn<double>({2, 5, 12});
  m.forward(x);
  m.backward(g);
  const auto once = m.qkv.weight.grad().clone();
  m.forward(x);
  m.backward(g);
  check_tensors_close(m.qkv.weight.grad(), once * 2.0, 1e-12, 1e-12, "accumulated");
  // A frozen projection gets no gradient; the input gradient is unchanged.
  m.zero_grad();
  m.forward(x);
  const auto dx_all = m.backward(g);
  m.qkv.requires_grad_(false);
  const auto before = m.qkv.weight.grad().clone();
  m.forward(x);
  check_tensors_close(m.backward(g), dx_all, 0, 0, "frozen qkv: same dx");
  check_tensors_close(m.qkv.weight.grad(), before, 0, 0, "frozen qkv: gradient untouched");
  m.eval();
  const auto [y, w] = m.forward_with_weights(x);
  CHECK(w.shape() == ef::Shape<4>{2, 3, 5, 5});
  // The eval forward streams (no weights formed): equal to rounding, with the streaming test's tolerance.
  check_tensors_close(y, m.forward(x), 1e-12, 1e-13, "forward_with_weights = forward");
}

TEST_CASE("CausalAttention keeps the book's mask as a persistent buffer") {
  // The book's mask buffer is part of CausalAttention's state.
  tut::CausalAttention<float> ca(3, 2, 4, 0.0);
  const auto buffers = ca.named_buffers();
  REQUIRE(buffers.size() == 1);
  CHECK(buffers[0].name == "mask");
  CHECK(buffers[0].shape == std::vector<index_t>{4, 4});
}

// ---- the attention core -------------------------------------------------------------------------------------

namespace {

// A fused projection output (B, T, 3C) split as the core reads it: (B, NH, T, HS) views of q, k and v.
template <typename T>
std::array<ef::Tensor<T, 4>, 3> split_heads(const ef::Tensor<T, 3>& qkv, index_t heads) {
  const index_t b = qkv.shape()[0], t = qkv.shape()[1], c = qkv.shape()[2] / 3;
  const auto parts = qkv.view(ef::Shape<5>{b, t, 3, heads, c / heads});
  return {parts.select(2, 0).transpose(1, 2), parts.select(2, 1).transpose(1, 2), parts.select(2, 2).transpose(1, 2)};
}

// nn.Dropout's scaled mask over `shape`, drawn from the default generator.
template <typename T, std::size_t R>
ef::Tensor<T, R> dropout_mask(const ef::Shape<R>& shape, double p) {
  auto m = ef::Tensor<T, R>::empty(shape);
  if (p == 0.0) return m.fill_(T(1));
  ef::bernoulli_(m, 1.0 - p);
  return m * static_cast<double>(T(1) / static_cast<T>(1.0 - p));
}

}  // namespace

TEST_CASE_TEMPLATE("fused_attention alone reproduces the MultiHeadAttention fixtures (forward, weights, backward)", T,
                   float, double) {
  // The layer written out by hand around the core: projection, core, output projection and dropout.
  for (const char* name : {"mha_fused_padding_train", "mha_fused_causal_train", "mha_fused_fully_padded_1e9_train",
                           "mha_fused_fully_padded_train"}) {
    const auto& c = attention_case(name);
    const std::string what = name + type_tag<T>() + " core";
    const auto& cfg = c.at("config");
    const auto& params = params_case(c).at("params");
    const auto w_qkv = fx<T, 2>(params.at("qkv.weight")), w_out = fx<T, 2>(params.at("out.weight"));
    const auto b_qkv = fx<T, 1>(params.at("qkv.bias")), b_out = fx<T, 1>(params.at("out.bias"));
    const auto x = fx<T, 3>(c.at("inputs").at("x"));
    const index_t b = x.shape()[0], t = x.shape()[1], dim = x.shape()[2];
    std::optional<ef::Tensor<bool, 2>> mask;
    if (c.at("inputs").contains("mask")) mask = fx<bool, 2>(c.at("inputs").at("mask"));
    const nn::FusedAttentionOptions o{.num_heads = cfg.at("heads").get<index_t>(),
                                      .causal = cfg.at("causal").get<bool>(),
                                      .dropout_p = cfg.at("attn_dropout").get<double>(),
                                      .masked_value = number(cfg.at("masked_value"))};
    ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());
    const auto qkv = ef::matmul(x, w_qkv.t()) + b_qkv;  // (B, T, 3C)
    nn::FusedAttentionContext<T> ctx;
    const auto merged = nn::fused_attention(qkv, o, {.key_padding_mask = mask ? &*mask : nullptr, .context = &ctx});
    const auto keep = dropout_mask<T>(ef::Shape<3>{b, t, dim}, cfg.at("out_dropout").get<double>());
    check_attn((ef::matmul(merged, w_out.t()) + b_out) * keep, c.at("out"), what + " forward");

    const auto d_merged = ef::matmul(fx<T, 3>(c.at("probe")) * keep, w_out);
    const auto d_qkv = nn::fused_attention_backward(ctx, d_merged);  // (B, T, 3C)
    check_attn(ef::matmul(d_qkv, w_qkv), c.at("grads").at("x"), what + " dx");
    const auto d2 = d_qkv.view(ef::Shape<2>{b * t, 3 * dim});
    check_attn(ef::matmul(d2.t(), x.view(ef::Shape<2>{b * t, dim})), c.at("grads").at("qkv.weight"), what + " dqkv.weight");
    check_attn(ef::sum(d2, 0), c.at("grads").at("qkv.bias"), what + " dqkv.bias");
  }
}

TEST_CASE_TEMPLATE("fused_attention = scaled_dot_product_attention on the split heads, bit for bit", T, float, double) {
  ef::manual_seed(41);
  const auto qkv = ef::randn<T>({2, 5, 36});
  const auto pad = ef::tensor<bool>({{true, true, true, false, false}, {true, true, true, true, true}});
  for (const double masked : {-inf<double>, -1e9}) {
    nn::FusedAttentionContext<T> ctx;
    ef::Tensor<T, 4> w;
    ef::manual_seed(42);
    const auto y = nn::fused_attention(qkv, {.num_heads = 3, .causal = true, .dropout_p = 0.2, .masked_value = masked},
                                       {.key_padding_mask = &pad, .weights = &w, .context = &ctx});
    const auto [q, k, v] = split_heads(qkv, 3);
    nn::AttentionContext<T, 4> sctx;
    ef::Tensor<T, 4> sw;
    ef::manual_seed(42);
    const auto h = nn::scaled_dot_product_attention(q, k, v, pad.reshape(ef::Shape<4>{2, 1, 1, 5}),
                                                    {.dropout_p = 0.2, .is_causal = true, .masked_value = masked},
                                                    &sctx, &sw);
    check_tensors_close(y, h.transpose(1, 2).reshape(ef::Shape<3>{2, 5, 12}), 0, 0, "merged heads");
    check_tensors_close(w, sw, 0, 0, "weights");
    const auto g = ef::randn<T>({2, 5, 12});
    const auto d = nn::fused_attention_backward(ctx, g);
    const auto sg = nn::scaled_dot_product_attention_backward(sctx, g.view(ef::Shape<4>{2, 5, 3, 4}).transpose(1, 2));
    const auto [dq, dk, dv] = split_heads(d, 3);
    check_tensors_close(dq, sg.q, 0, 0, "dq");
    check_tensors_close(dk, sg.k, 0, 0, "dk");
    check_tensors_close(dv, sg.v, 0, 0, "dv");
  }
}

TEST_CASE("fused_attention: backward matches central finite differences (double)") {
  ef::manual_seed(43);
  auto qkv = ef::randn<double>({2, 5, 36});
  const auto pad = ef::tensor<bool>({{true, true, false, true, false}, {false, false, false, false, false}});
  const auto probe = ef::randn<double>({2, 5, 12});
  for (const double masked : {-inf<double>, -1e9})
    for (const double p : {0.0, 0.3})
      for (const bool causal : {false, true}) {
        INFO("masked value " << masked << ", dropout " << p << ", causal " << causal);
        const nn::FusedAttentionOptions o{.num_heads = 3, .causal = causal, .dropout_p = p, .masked_value = masked};
        auto f = [&] {  // reseeded: every evaluation draws the same dropout mask
          ef::manual_seed(5);
          return nn::fused_attention(qkv, o, {.key_padding_mask = &pad});
        };
        nn::FusedAttentionContext<double> ctx;
        ef::manual_seed(5);
        nn::fused_attention(qkv, o, {.key_padding_mask = &pad, .context = &ctx});
        check_tensors_close(nn::fused_attention_backward(ctx, probe), numerical_gradient(f, qkv, probe), 1e-6, 1e-8,
                            "d qkv");
      }
}

// Decoding with the cache computes the same rows as the full causal forward, only in pieces. Double agrees to
// rounding (1e-12); float to 1e-6 relative: the softmax and the weights-values product sum over the Tk keys
// seen so far instead of all T (the extra terms are exact zeros, but Eigen's vectorised sums group the
// terms by length, so the last bits may differ).
TEST_CASE_TEMPLATE("KV cache: prefill, prompt after cached tokens and one-token decode equal the full causal forward", T,
                   float, double) {
  const double rtol = std::is_same_v<T, float> ? 1e-6 : 1e-12, atol = std::is_same_v<T, float> ? 1e-7 : 1e-14;
  ef::manual_seed(44);
  const index_t b = 2, t = 7, heads = 3, hs = 4, c = heads * hs;
  const auto qkv = ef::randn<T>({b, t, 3 * c});
  const auto pad = ef::tensor<bool>({{true, true, true, true, true, true, true}, {false, true, true, false, true, true, true}});
  for (const bool with_mask : {false, true}) {
    INFO("key padding mask: " << with_mask);
    const nn::FusedAttentionOptions o{.num_heads = heads, .causal = true};
    ef::Tensor<T, 4> full_w;
    const auto full = nn::fused_attention(qkv, o, {.key_padding_mask = with_mask ? &pad : nullptr, .weights = &full_w});
    nn::KVCache<T> cache(2, b, heads, 8, hs);  // two layers: only layer 1 is used here
    auto& layer = cache[1];
    CHECK(cache.num_layers() == 2);
    index_t past = 0;
    for (const index_t tn : {4, 2, 1}) {  // prefill, a prompt of 2 after 4 cached tokens (causal offset), decode
      const auto mask = pad.narrow(1, 0, past + tn);
      ef::Tensor<T, 4> w;
      const auto y = nn::fused_attention(qkv.narrow(1, past, tn).contiguous(), o,
                                         {.key_padding_mask = with_mask ? &mask : nullptr, .cache = &layer, .weights = &w});
      CHECK(layer.length() == past + tn);
      check_tensors_close(y, full.narrow(1, past, tn), rtol, atol, "output rows " + std::to_string(past));
      check_tensors_close(w, full_w.narrow(2, past, tn).narrow(3, 0, past + tn), rtol, atol, "weights");
      past += tn;
    }
    // The cache holds exactly the keys and values of the first 7 tokens.
    const auto [q, k, v] = split_heads(qkv, heads);
    check_tensors_close(layer.keys.narrow(2, 0, t), k, 0, 0, "cached keys");
    check_tensors_close(layer.values.narrow(2, 0, t), v, 0, 0, "cached values");
    CHECK(cache.length() == 0);  // layer 0 untouched
    CHECK_THROWS_WITH_EXACTLY(nn::fused_attention(qkv.narrow(1, 0, 2).contiguous(), o, {.cache = &layer}),
                         "fused_attention: the KV cache holds 7 tokens and 2 new ones would need 9 positions, more "
                         "than its capacity 8",
                         std::out_of_range);
    nn::FusedAttentionContext<T> ctx;
    CHECK_THROWS_EXACTLY(nn::fused_attention(qkv.narrow(1, 0, 1).contiguous(), o, {.cache = &layer, .context = &ctx}),
                    std::invalid_argument);
    cache.reset();
    CHECK(layer.length() == 0);
  }
  nn::LayerKVCache<T> wrong(b, 2, 8, 6);
  CHECK_THROWS_EXACTLY(nn::fused_attention(qkv, {.num_heads = heads, .causal = true}, {.cache = &wrong}), ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::KVCache<T>(2, 1, 3, 0, 4), std::invalid_argument);
}

TEST_CASE("attention: identical bits with 1, 2 and 3 threads (forward, weights, every gradient)") {
  const eftest::RestoreThreadCount restore_threads;
  ef::manual_seed(45);
  const auto x = ef::randn<float>({3, 9, 24});
  const auto g = ef::randn<float>({3, 9, 24});
  const auto pad = ef::rand<float>({3, 9}) < 0.8;
  nn::MultiHeadAttention<float> m(24, 4, {.attn_dropout = 0.2, .out_dropout = 0.1, .causal = true});
  std::vector<std::vector<float>> runs;
  for (const int threads : {1, 2, 3}) {
    ef::set_num_threads(threads);
    m.zero_grad();
    ef::manual_seed(46);
    const auto [y, w] = m.forward_with_weights(x, pad);
    std::vector<float> all = y.to_vector();
    const auto wv = w.to_vector();
    all.insert(all.end(), wv.begin(), wv.end());
    const auto dx = m.backward(g).to_vector();
    all.insert(all.end(), dx.begin(), dx.end());
    for (auto& p : m.named_parameters()) {
      const auto gv = p.grad().to_vector();
      all.insert(all.end(), gv.begin(), gv.end());
    }
    runs.push_back(std::move(all));
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
}

// ---- streaming attention (the inference path) -----------------------------------------------------------------

namespace {

// fused_attention without anything that needs the weights (the streaming path) and with the weights requested
// (the path that forms them), on the same inputs.
template <typename T>
std::pair<ef::Tensor<T, 3>, ef::Tensor<T, 3>> streamed_and_weighted(const ef::Tensor<T, 3>& qkv,
                                                                    const nn::FusedAttentionOptions& o,
                                                                    const ef::Tensor<bool, 2>* mask) {
  ef::Tensor<T, 4> w;
  auto weighted = nn::fused_attention(qkv, o, {.key_padding_mask = mask, .weights = &w});
  return {nn::fused_attention(qkv, o, {.key_padding_mask = mask}), std::move(weighted)};
}

}  // namespace

// The streaming path computes the same softmax as the weights path in another order: exp relative to a
// running maximum with one rescale per key block, sums and the weights-values product accumulated block by
// block. Each output is a convex combination of values; the order changes each weight by a few roundings
// (Eigen's exp 1-2 ulp, one rescale per key block, the sum of the normaliser), so the output moves by a few
// ulps of max |v| (~4 for these normal values): float 2e-6 absolute + 1e-5 relative is ~8 ulps of 4 (the
// largest difference seen is below 1e-6); double 1e-13 + 1e-12 relative is the same margin at 2^-52.
// Sequence lengths cover one short block (5), exactly one query block (96), a second block of 5 rows (101,
// whose product goes to Eigen rather than the packed kernel) and four query blocks walking two key blocks
// (300); batch row 1 is padded, and in the fully padded cases every key of batch row 1 is hidden (zeros with
// -inf; uniform weights with -1e9).
TEST_CASE_TEMPLATE("fused_attention: the streaming inference path equals the weights path", T, float, double) {
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12, atol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  ef::manual_seed(48);
  std::size_t ran = 0;
  for (const index_t t : {5, 96, 101, 300}) {
    const auto qkv = ef::randn<T>({2, t, 3 * 3 * 8});  // 3 heads of 8
    auto padded = ef::ones<bool>(ef::Shape<2>{2, t});
    for (index_t j = 0; j < t; j += 3) padded(1, j) = false;  // every third key of sequence 1, the first included
    auto fully_padded = ef::ones<bool>(ef::Shape<2>{2, t});
    for (index_t j = 0; j < t; ++j) fully_padded(1, j) = false;
    const ef::Tensor<bool, 2>* masks[] = {nullptr, &padded, &fully_padded};
    for (const bool causal : {false, true})
      for (const double masked : {-inf<double>, -1e9})
        for (const ef::Tensor<bool, 2>* mask : masks) {
          INFO("T " << t << ", causal " << causal << ", masked value " << masked << ", mask "
                    << (mask == nullptr ? "none" : mask == &padded ? "padded" : "fully padded row"));
          const auto [streamed, weighted] =
              streamed_and_weighted(qkv, {.num_heads = 3, .causal = causal, .masked_value = masked}, mask);
          check_tensors_close(streamed, weighted, rtol, atol, "streamed output");
          if (mask == &fully_padded && masked == -inf<double>)  // the weights path's zeros, exactly
            check_tensors_close(streamed.select(0, 1), ef::zeros<T>(ef::Shape<2>{t, 24}), 0, 0, "fully padded row");
          ++ran;
        }
  }
  check_ran(ran, 4 * 2 * 2 * 3, "streaming cases");
}

// With 16 problems or more, no causal mask and at most 128 query rows, each problem is one streaming unit of
// all its rows (nn::detail::stream_unit_rows) instead of 96-row blocks: the same comparison, tolerances as
// above, at 101 rows (one unit where the split makes 96 + 5) and 128 (BERT's sequence length), 4 x 4 problems.
TEST_CASE_TEMPLATE("fused_attention: streaming a whole problem as one unit equals the weights path", T, float, double) {
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12, atol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  CHECK(nn::detail::stream_unit_rows(128, false, 16) == 128);
  CHECK(nn::detail::stream_unit_rows(128, true, 16) == nn::detail::stream_query_rows);
  CHECK(nn::detail::stream_unit_rows(128, false, 15) == nn::detail::stream_query_rows);
  CHECK(nn::detail::stream_unit_rows(129, false, 16) == nn::detail::stream_query_rows);
  ef::manual_seed(51);
  std::size_t ran = 0;
  for (const index_t t : {101, 128}) {
    REQUIRE(nn::detail::stream_unit_rows(t, false, 4 * 4) == t);
    const auto qkv = ef::randn<T>({4, t, 3 * 4 * 8});  // 4 heads of 8
    auto padded = ef::ones<bool>(ef::Shape<2>{4, t});
    for (index_t j = 0; j < t; j += 3) padded(1, j) = false;
    for (index_t j = 0; j < t; ++j) padded(3, j) = false;  // every key of sequence 3 hidden
    const ef::Tensor<bool, 2>* masks[] = {nullptr, &padded};
    for (const double masked : {-inf<double>, -1e9})
      for (const ef::Tensor<bool, 2>* mask : masks) {
        INFO("T " << t << ", masked value " << masked << ", mask " << (mask == nullptr ? "none" : "padded"));
        const auto [streamed, weighted] =
            streamed_and_weighted(qkv, {.num_heads = 4, .causal = false, .masked_value = masked}, mask);
        check_tensors_close(streamed, weighted, rtol, atol, "streamed output");
        ++ran;
      }
  }
  check_ran(ran, 2 * 2 * 2, "whole-problem streaming cases");
}

// Prefill, a prompt after cached tokens (causal offset) and decode steps through the cache, streaming, equal
// the full forward on the weights path, to the tolerances of the test above; a prefill of 290 tokens walks
// several query and key blocks.
TEST_CASE_TEMPLATE("KV cache: streaming prefill, prompt and decode steps equal the full forward", T, float, double) {
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12, atol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  ef::manual_seed(49);
  const index_t b = 2, t = 300, heads = 2, hs = 8;
  const auto qkv = ef::randn<T>({b, t, 3 * heads * hs});
  auto pad = ef::ones<bool>(ef::Shape<2>{b, t});
  for (index_t j = 1; j < t; j += 4) pad(1, j) = false;
  for (const bool with_mask : {false, true}) {
    INFO("key padding mask: " << with_mask);
    const nn::FusedAttentionOptions o{.num_heads = heads, .causal = true};
    ef::Tensor<T, 4> w;
    const auto full = nn::fused_attention(qkv, o, {.key_padding_mask = with_mask ? &pad : nullptr, .weights = &w});
    nn::LayerKVCache<T> cache(b, heads, t, hs);
    index_t past = 0;
    for (const index_t tn : {290, 8, 1, 1}) {
      const auto mask = pad.narrow(1, 0, past + tn);
      const auto y = nn::fused_attention(qkv.narrow(1, past, tn).contiguous(), o,
                                         {.key_padding_mask = with_mask ? &mask : nullptr, .cache = &cache});
      check_tensors_close(y, full.narrow(1, past, tn), rtol, atol, "rows from " + std::to_string(past));
      past += tn;
    }
    CHECK(cache.length() == t);
  }
}

TEST_CASE("fused_attention: the streaming path gives identical bits with 1, 2 and 3 threads") {
  const eftest::RestoreThreadCount restore_threads;
  ef::manual_seed(50);
  const auto qkv = ef::randn<float>({2, 300, 3 * 4 * 16});
  const auto pad = ef::rand<float>({2, 300}) < 0.8;
  std::vector<std::vector<float>> runs;
  for (const int threads : {1, 2, 3}) {
    ef::set_num_threads(threads);
    std::vector<float> all;
    for (const bool causal : {false, true}) {
      const auto y = nn::fused_attention(qkv, {.num_heads = 4, .causal = causal}, {.key_padding_mask = &pad});
      const auto v = y.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    nn::LayerKVCache<float> cache(2, 4, 300, 16);
    for (const index_t tn : {280, 20}) {
      const auto v = nn::fused_attention(qkv.narrow(1, cache.length(), tn).contiguous(), {.num_heads = 4, .causal = true},
                                         {.cache = &cache}).to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(std::move(all));
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
}

TEST_CASE("MultiHeadAttention: an eval or InferenceMode forward writes nothing to the module") {
  ef::manual_seed(47);
  const auto x = ef::randn<double>({2, 5, 12});
  const auto x2 = ef::randn<double>({2, 5, 12});
  const auto g = ef::randn<double>({2, 5, 12});
  nn::MultiHeadAttention<double> m(12, 3, 0.0);
  auto snapshot = [&m] {
    std::vector<double> all;
    for (auto& p : m.named_parameters()) {
      const auto v = p.data.to_vector();
      all.insert(all.end(), v.begin(), v.end());
      all.push_back(p.has_grad() ? 1.0 : 0.0);
    }
    return all;
  };
  // A training forward, then an InferenceMode forward of other data: the saved context is still the first's.
  m.forward(x);
  const auto dx_expected = m.backward(g);
  m.zero_grad();
  const auto before = snapshot();
  m.forward(x);
  {
    ef::InferenceMode inference;
    m.forward_with_weights(x2);
  }
  CHECK(snapshot() == before);
  check_tensors_close(m.backward(g), dx_expected, 0, 0, "backward after an inference forward");

  // Eval mode: nothing saved, parameters and gradients untouched, and two threads may share the layer.
  m.eval();
  const auto eval_before = snapshot();
  const auto y = m.forward(x);
  CHECK(snapshot() == eval_before);
  CHECK_THROWS_EXACTLY(m.backward(g), std::logic_error);
  ef::Tensor<double, 3> y1, y2;
  std::thread a([&] { y1 = m.forward(x); });
  std::thread b([&] { y2 = m.forward(x); });
  a.join();
  b.join();
  check_tensors_close(y1, y, 0, 0, "thread 1");
  check_tensors_close(y2, y, 0, 0, "thread 2");
}

// ---- worked examples (tests/data/worked_examples.json) -----------------------------------------------------

namespace {

template <typename T, std::size_t R>
void check_example(const ef::Tensor<T, R>& actual, const json& expected, double tol, const std::string& what) {
  INFO(what);
  const auto a = actual.to_vector();
  const auto e = expected.get<std::vector<double>>();
  REQUIRE(a.size() == e.size());
  for (std::size_t i = 0; i < e.size(); ++i) CHECK_MESSAGE(std::abs(a[i] - e[i]) <= tol, "element " << i << ": " << a[i] << " vs " << e[i]);
}

ef::Tensor<float, 2> journey_inputs() {  // "Your journey starts with one step" (LLMs from scratch 3.3)
  return ef::tensor<float>({{0.43f, 0.15f, 0.89f}, {0.55f, 0.87f, 0.66f}, {0.57f, 0.85f, 0.64f},
                            {0.22f, 0.58f, 0.33f}, {0.77f, 0.25f, 0.10f}, {0.05f, 0.80f, 0.55f}});
}

template <std::size_t R>
ef::Tensor<float, R> from_example(const json& values, const ef::Shape<R>& shape) {
  const auto v = values.get<std::vector<double>>();
  return ef::from_vector(shape, std::vector<float>(v.begin(), v.end()));
}

}  // namespace

// The examples print 6 decimals: agreement to 1e-6 is half a unit there (5e-7) plus float32 rounding; the
// seeds print 4, so this is "exact at 4 decimals" with room to spare. Values of magnitude ~10-15 (scores,
// the saturated multi-head contexts) carry ~1e-6 of float32 rounding themselves: 2e-6 there.
TEST_CASE("worked examples: sa_step_by_step and self_attention_v1 (manual_seed(123), rand weights)") {
  const auto& ex = worked_examples().at("sa_step_by_step");
  const auto inputs = journey_inputs();
  check_example(inputs, ex.at("inputs"), 1e-7, "inputs");
  ef::manual_seed(123);
  tut::SelfAttentionV1<float> sa(3, 2);  // draws W_query, W_key, W_value = rand(3, 2) in that order
  check_example(sa.W_query.data, ex.at("W_query"), 1e-6, "W_query");
  check_example(sa.W_key.data, ex.at("W_key"), 1e-6, "W_key");
  check_example(sa.W_value.data, ex.at("W_value"), 1e-6, "W_value");
  const auto x_2 = inputs.select(0, 1);
  const auto query_2 = ef::matmul(x_2, sa.W_query.data);
  check_example(query_2, ex.at("query_2"), 1e-6, "query_2");
  const auto keys = ef::matmul(inputs, sa.W_key.data);
  const auto scores_2 = ef::matmul(query_2, keys.t());
  check_example(scores_2, ex.at("attn_scores_2"), 1e-6, "attn_scores_2");
  CHECK(std::abs(scores_2(1) - ex.at("attn_score_22").get<double>()) <= 1e-6);
  // Row 2 of the attention function = the step-by-step weights and context vector of "journey".
  ef::Tensor<float, 2> w;
  const auto q = ef::matmul(inputs, sa.W_query.data), v = ef::matmul(inputs, sa.W_value.data);
  const auto context = nn::scaled_dot_product_attention(q, keys, v, std::nullopt, nn::AttentionOptions{}, nullptr, &w);
  check_example(w.select(0, 1), ex.at("attn_weights_2"), 1e-6, "attn_weights_2");
  check_example(context.select(0, 1), ex.at("context_vec_2"), 1e-6, "context_vec_2");

  const auto& v1 = worked_examples().at("self_attention_v1");
  const auto out = sa.forward(inputs);
  check_example(out, v1.at("output"), 1e-6, "SelfAttention_v1 output");
  check_tensors_close(out, context, 0, 0, "module = function");
}

TEST_CASE("worked example: self_attention_v2 (manual_seed(789), nn.Linear init)") {
  const auto& ex = worked_examples().at("self_attention_v2");
  ef::manual_seed(789);
  tut::SelfAttentionV2<float> sa(3, 2);
  check_example(sa.W_query.weight.data, ex.at("W_query_weight"), 1e-6, "W_query.weight");
  check_example(sa.W_key.weight.data, ex.at("W_key_weight"), 1e-6, "W_key.weight");
  check_example(sa.W_value.weight.data, ex.at("W_value_weight"), 1e-6, "W_value.weight");
  const auto out = sa.forward(journey_inputs());
  check_example(out, ex.at("output"), 1e-6, "output");  // [[-0.0739, 0.0713], ...]
  CHECK(ef::to_string(out.select(0, 0)) == "tensor([-0.0739,  0.0713])");
}

TEST_CASE("worked example: sa_next_day_is_bright (seed 000 listings 1.1-1.8, randn weights)") {
  const auto& ex = worked_examples().at("sa_next_day_is_bright");
  const auto inputs = from_example(ex.at("inputs"), ef::Shape<2>{5, 8});
  ef::manual_seed(123);
  const auto W_query = ef::randn({8, 4});
  const auto W_key = ef::randn({8, 4});
  const auto W_value = ef::randn({8, 4});
  check_example(W_query, ex.at("W_query"), 1e-6, "W_query");
  check_example(W_value, ex.at("W_value"), 1e-6, "W_value");
  const auto queries = ef::matmul(inputs, W_query), keys = ef::matmul(inputs, W_key), values = ef::matmul(inputs, W_value);
  check_example(queries, ex.at("queries"), 2e-6, "queries");
  check_example(keys, ex.at("keys"), 2e-6, "keys");
  check_example(values, ex.at("values"), 2e-6, "values");
  check_example(ef::matmul(queries, keys.t()), ex.at("attn_scores"), 2e-6, "attn_scores");
  ef::Tensor<float, 2> w;
  const auto context = nn::scaled_dot_product_attention(queries, keys, values, std::nullopt, nn::AttentionOptions{},
                                                        nullptr, &w);
  check_example(w, ex.at("attn_weights"), 2e-6, "attn_weights");
  check_example(context, ex.at("context"), 2e-6, "context");
  check_example(context.select(0, 1), ex.at("context_next"), 2e-6, "context_next");
}

TEST_CASE("worked example: causal_dropout (seed 000 listing 1.13: dropout 0.5 on the causal weights, manual_seed(0))") {
  // Attention whose scaled scores are listing 1.11's (0.5 + 0.25 i + 0.5 j): q_i = [0.5 + 0.25 i, 1],
  // k_j = [1, 0.5 j], scale 1; v = the identity, so the output IS the dropped-out weight matrix.
  const auto& ex = worked_examples().at("causal_dropout");
  auto q = ef::zeros<float>({5, 2}), k = ef::zeros<float>({5, 2});
  for (index_t i = 0; i < 5; ++i) {
    q(i, 0) = 0.5f + 0.25f * static_cast<float>(i);
    q(i, 1) = 1.0f;
    k(i, 0) = 1.0f;
    k(i, 1) = 0.5f * static_cast<float>(i);
  }
  nn::AttentionOptions o;
  o.is_causal = true;
  o.scale = 1.0;
  ef::Tensor<float, 2> w;
  nn::scaled_dot_product_attention(q, k, ef::eye<float>(5), std::nullopt, o, nullptr, &w);
  check_example(w, worked_examples().at("causal_softmax").at("causal_weights"), 1e-6, "causal weights");
  o.dropout_p = 0.5;
  ef::manual_seed(0);
  const auto dropped = nn::scaled_dot_product_attention(q, k, ef::eye<float>(5), std::nullopt, o);
  check_example(dropped, ex.at("after_dropout_this_build"), 1e-6, "after dropout (non-MKL stream)");
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 5; ++j) {
      if (j > i) CHECK(dropped(i, j) == 0.0f);                                     // stays causal
      CHECK((dropped(i, j) == 0.0f || dropped(i, j) == 2.0f * w(i, j)));          // kept: scaled by 1/(1-p)
    }
}

TEST_CASE("worked example: mha_split_heads (seed 000 listings 1.14-1.19: 2 heads of dim 3)") {
  const auto& ex = worked_examples().at("mha_split_heads");
  const auto x = from_example(ex.at("x"), ef::Shape<3>{1, 3, 6});
  ef::manual_seed(123);
  const auto W_q = ef::randn({6, 6});
  const auto W_k = ef::randn({6, 6});
  const auto W_v = ef::randn({6, 6});
  check_example(W_q, ex.at("W_q"), 1e-6, "W_q");
  check_example(W_v, ex.at("W_v"), 1e-6, "W_v");
  // (1, 3, 6) -> view (1, 3, 2, 3) -> transpose(1, 2) -> (1, 2, 3, 3): heads are views, no copies.
  const auto q = ef::matmul(x, W_q).view(ef::Shape<4>{1, 3, 2, 3}).transpose(1, 2);
  const auto k = ef::matmul(x, W_k).view(ef::Shape<4>{1, 3, 2, 3}).transpose(1, 2);
  const auto v = ef::matmul(x, W_v).view(ef::Shape<4>{1, 3, 2, 3}).transpose(1, 2);
  ef::Tensor<float, 4> weights;
  const auto context = nn::scaled_dot_product_attention(q, k, v, std::nullopt, nn::AttentionOptions{}, nullptr, &weights);
  check_example(weights, ex.at("weights"), 1e-6, "weights");
  check_example(context, ex.at("context_per_head"), 2e-6, "context per head");
  const auto final_context = context.transpose(1, 2).reshape(ef::Shape<3>{1, 3, 6});
  check_example(final_context, ex.at("final_context"), 2e-6, "final context");
}

// ---- bad input ----------------------------------------------------------------------------------------------

TEST_CASE("attention: bad input") {
  CHECK_THROWS_WITH_EXACTLY(nn::MultiHeadAttention<float>(256, 6), doctest::Contains("256 is not divisible by 6"),
                       std::invalid_argument);
  CHECK_THROWS_EXACTLY(nn::MultiHeadAttention<float>(12, 0), std::invalid_argument);
  CHECK_THROWS_EXACTLY(nn::MultiHeadAttention<float>(12, 3, {.attn_dropout = 1.5}), std::invalid_argument);

  const auto q = ef::zeros<float>({2, 3, 5, 4});
  CHECK_THROWS_WITH_EXACTLY(nn::scaled_dot_product_attention(q, q, q, ef::ones<bool>({3, 5})),
                       "scaled_dot_product_attention: mask [3, 5] does not broadcast to the attention scores "
                       "[2, 3, 5, 5] (batch..., query tokens, key tokens)",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::scaled_dot_product_attention(q, q, q, ef::ones<bool>({2, 1, 1, 4})), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(nn::scaled_dot_product_attention(q, ef::zeros<float>({2, 3, 5, 6}), q),
                       doctest::Contains("query [2, 3, 5, 4], key [2, 3, 5, 6]"), ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::scaled_dot_product_attention(q, q, ef::zeros<float>({2, 3, 6, 4})), ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::scaled_dot_product_attention(q, q, q, std::nullopt, 1.5), std::invalid_argument);

  nn::MultiHeadAttention<float> mha(12, 3);
  CHECK_THROWS_WITH_EXACTLY(mha.forward(ef::zeros<float>({2, 5, 10})),
                       "MultiHeadAttention.forward: input [2, 5, 10] x qkv.weight [36, 12]: last dim of the input "
                       "must be dim 12",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(mha.forward(ef::zeros<float>({2, 5, 12}), ef::ones<bool>({2, 4})),
                       doctest::Contains("key_padding_mask [2, 4] does not match the input [2, 5, 12]"), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(mha.backward(ef::zeros<float>({2, 5, 12})), doctest::Contains("nothing saved"), std::logic_error);
  mha.eval();
  mha.forward(ef::zeros<float>({2, 5, 12}));  // eval mode saves nothing
  CHECK_THROWS_EXACTLY(mha.backward(ef::zeros<float>({2, 5, 12})), std::logic_error);
  mha.train();
  mha.forward(ef::zeros<float>({2, 5, 12}));
  CHECK_THROWS_EXACTLY(mha.backward(ef::zeros<float>({2, 4, 12})), ef::shape_error);

  tut::SelfAttentionV1<float> v1(3, 2);
  CHECK_THROWS_WITH_EXACTLY(v1.forward(ef::zeros<float>({6, 4})),
                       "SelfAttentionV1.forward: input [6, 4] x W_query [3, 2]: last dim of the input must be d_in 3",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(v1.backward(ef::zeros<float>({6, 2})), std::logic_error);
  tut::SelfAttentionV2<float> v2(3, 2);
  CHECK_THROWS_WITH_EXACTLY(v2.forward(ef::zeros<float>({6, 4})), doctest::Contains("input [6, 4] x W_query.weight [2, 3]"),
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(v2.backward(ef::zeros<float>({6, 2})), std::logic_error);
  tut::CausalAttention<float> ca(3, 2, 4, 0.1);
  CHECK_THROWS_WITH_EXACTLY(ca.forward(ef::zeros<float>({2, 6, 3})), doctest::Contains("more than context_length 4"),
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(ca.backward(ef::zeros<float>({2, 4, 2})), std::logic_error);
  CHECK_THROWS_EXACTLY(tut::SelfAttentionV1<float>(0, 2), std::invalid_argument);

  const auto qkv = ef::zeros<float>({2, 5, 36});
  CHECK_THROWS_WITH_EXACTLY(nn::fused_attention(qkv, {.num_heads = 5}),
                       "fused_attention: qkv [2, 5, 36] must end in 3C (query, key and value features) with C "
                       "divisible by num_heads 5",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::fused_attention(qkv, {.num_heads = 0}), std::invalid_argument);
  const auto short_mask = ef::ones<bool>({2, 4});
  CHECK_THROWS_WITH_EXACTLY(nn::fused_attention(qkv, {.num_heads = 3}, {.key_padding_mask = &short_mask}),
                       "fused_attention: key_padding_mask [2, 4] does not match the 2 sequences of 5 keys (expected "
                       "[batch, keys] = [2, 5])",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::fused_attention(qkv, {.num_heads = 3, .dropout_p = -0.1}), std::invalid_argument);
  nn::FusedAttentionContext<float> ctx;
  nn::fused_attention(qkv, {.num_heads = 3}, {.context = &ctx});
  CHECK_THROWS_WITH_EXACTLY(nn::fused_attention_backward(ctx, ef::zeros<float>({2, 5, 36})),
                       "fused_attention_backward: grad_output [2, 5, 36] does not match the forward output [2, 5, 12]",
                       ef::shape_error);
}
