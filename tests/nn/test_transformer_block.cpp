// TransformerBlock, pre-LN and post-LN: PyTorch fixtures (forward and every gradient, with dropout),
// initialisation order, finite differences, residual/normalisation properties, repr, read-only eval
// forwards and bad input.
// Tolerances: see support/attention_fixtures.hpp.
#include <doctest/doctest.h>

#include <eigenformer/nn/transformer_block.hpp>

#include "support/attention_fixtures.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace nn = ef::nn;

namespace {

template <typename T>
nn::TransformerBlock<T> block_of(const json& c) {
  const auto& cfg = c.at("config");
  nn::TransformerBlockOptions o;
  o.norm = cfg.at("norm") == "pre" ? nn::NormPosition::pre : nn::NormPosition::post;
  o.dropout = cfg.at("dropout").get<double>();
  o.causal = cfg.at("causal").get<bool>();
  o.layer_norm_eps = cfg.at("layer_norm_eps").get<double>();
  return nn::TransformerBlock<T>(cfg.at("dim").get<index_t>(), cfg.at("heads").get<index_t>(),
                                 cfg.at("ff_dim").get<index_t>(), o);
}

// The case's forward, with its key padding mask if it has one; the attention weights land in *weights.
template <typename T>
auto block_forward(const json& c, ef::Tensor<T, 4>* weights) {
  return [&c, weights](auto& m, const auto& x) {
    const auto& in = c.at("inputs");
    auto [y, w] = in.contains("mask") ? m.forward_with_weights(x, fx<bool, 2>(in.at("mask"))) : m.forward_with_weights(x);
    *weights = w;
    return y;
  };
}

}  // namespace

TEST_CASE_TEMPLATE("TransformerBlock: pre-LN and post-LN match PyTorch, with dropout and padding (fixtures)", T, float,
                   double) {
  for (const char* name : {"block_pre_padding_train", "block_pre_causal_eval", "block_post_padding_train",
                           "block_post_causal_eval"}) {
    const auto& c = attention_case(name);
    auto m = block_of<T>(c);
    ef::Tensor<T, 4> weights;
    run_module_case<T>(m, c, block_forward<T>(c, &weights));
    if (c.contains("weights")) check_attn(weights, c.at("weights"), name + type_tag<T>() + " weights");
  }
}

// A float64 fixture (pre-LN, padding, dropout 0): check_attn holds it to double precision.
TEST_CASE("TransformerBlock: pre-LN matches PyTorch run in float64, at double precision (fixture)") {
  const auto& c = attention_case("block_pre_f64_padding_train");
  auto m = block_of<double>(c);
  ef::Tensor<double, 4> weights;
  run_module_case<double>(m, c, block_forward<double>(c, &weights));
}

TEST_CASE("TransformerBlock: manual_seed initialisation equals the seed's block (fixture), parameter names") {
  const auto& c = attention_case("block_pre_init");
  ef::manual_seed(c.at("seed").get<std::uint64_t>());
  auto m = block_of<float>(c);
  std::vector<std::string> names;
  for (auto& p : m.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"attn.qkv.weight", "attn.qkv.bias", "attn.out.weight", "attn.out.bias",
                                          "ff.net.0.weight", "ff.net.0.bias", "ff.net.3.weight", "ff.net.3.bias",
                                          "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  const auto& params = c.at("params");
  for (auto& p : m.named_parameters()) {  // nn.Linear draws an ulp apart at most (see test_attention.cpp)
    json flat = params.at(p.name);
    flat["shape"] = std::vector<index_t>{p.data.numel()};
    check_close(p.data, flat, 1e-6, 1e-7, "init " + p.name);
  }
  m.eval();
  check_attn(m.forward(fx<float, 3>(c.at("inputs").at("x"))), c.at("out"), "init forward");
  CHECK(m.num_parameters() == 4 * 12 + 12 + 4 * 4 + 4 + 8 * 4 + 8 + 4 * 8 + 4 + 4 * 4);
}

TEST_CASE("TransformerBlock: backward matches central finite differences (double), both placements") {
  ef::manual_seed(31);
  const auto x = ef::randn<double>({2, 5, 12});
  const auto pad = ef::tensor<bool>({{true, true, true, true, false}, {true, true, false, false, false}});
  for (const auto norm : {nn::NormPosition::pre, nn::NormPosition::post})
    for (const bool causal : {false, true}) {
      nn::TransformerBlock<double> m(12, 3, 16, {.norm = norm, .dropout = 0.0, .causal = causal});
      for (auto* ln : {&m.norm1, &m.norm2}) {  // move LayerNorm off its identity start
        ef::normal_(ln->weight->data, 1.0, 0.3);
        ef::normal_(ln->bias->data, 0.0, 0.3);
      }
      auto f = [&pad](auto& mod, const auto& xx) { return mod.forward(xx, pad); };
      check_module_gradients(m, x, f, std::string(norm == nn::NormPosition::pre ? "pre-LN" : "post-LN") +
                                          (causal ? " causal" : ""));
    }
}

TEST_CASE("TransformerBlock: residual structure, normalised post-LN output, eval determinism") {
  ef::manual_seed(32);
  const auto x = ef::randn<float>({2, 5, 12});
  // Post-LN: the output is LayerNorm's, so every token has mean ~0 and variance ~1 (weight 1, bias 0).
  nn::TransformerBlock<float> post(12, 3, 0, {.norm = nn::NormPosition::post});
  CHECK(post.ff.hidden() == 48);  // ff_dim 0 = 4 * dim
  post.eval();
  // Each token's mean and biased variance, summed here in double rather than by the library's own mean/var.
  const auto y = post.forward(x).to_vector();
  for (std::size_t token = 0; token < y.size() / 12; ++token) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < 12; ++j) mean += y[token * 12 + j] / 12.0;
    for (std::size_t j = 0; j < 12; ++j) var += (y[token * 12 + j] - mean) * (y[token * 12 + j] - mean) / 12.0;
    INFO("token " << token);
    CHECK(std::abs(mean) <= 1e-5);  // 12 float outputs of magnitude ~1: rounding leaves ~1e-7
    CHECK(std::abs(var - 1.0) <= 1e-3);  // LayerNorm divides by sqrt(var + 1e-5): 1 - 1e-5 of a unit variance
  }

  // Eval is deterministic, checked against PyTorch rather than against itself: two eval forwards of the
  // fixture's post-LN block (dropout 0.1, which eval must not apply) both give PyTorch's eval output, at the
  // attention fixtures' tolerance (support/attention_fixtures.hpp).
  const auto& c = attention_case("block_post_causal_eval");
  auto fixture_block = block_of<float>(c);
  for (int run = 0; run < 2; ++run) {
    INFO("eval forward " << run);
    ef::Tensor<float, 4> weights;
    run_module_case<float>(fixture_block, c, block_forward<float>(c, &weights));
  }

  // Pre-LN with both sublayers' outputs zeroed (output projections 0) is the identity: the residual path.
  nn::TransformerBlock<float> pre(12, 3, 16, 0.0);
  pre.eval();
  pre.attn.out.weight.data.zero_();
  pre.attn.out.bias->data.zero_();
  pre.ff.fc2.weight.data.zero_();
  pre.ff.fc2.bias->data.zero_();
  check_tensors_close(pre.forward(x), x, 0, 0, "identity");
  // ... and its gradient is the identity too.
  pre.train();
  pre.forward(x);
  const auto g = ef::randn<float>({2, 5, 12});
  check_tensors_close(pre.backward(g), g, 0, 0, "identity gradient");
}

TEST_CASE("TransformerBlock: an eval forward writes nothing; forward_with_weights = forward") {
  ef::manual_seed(33);
  const auto x = ef::randn<float>({2, 5, 12});
  nn::TransformerBlock<float> m(12, 3, 16, {.causal = true});
  m.eval();
  std::vector<float> before;
  for (auto& p : m.named_parameters()) {
    const auto v = p.data.to_vector();
    before.insert(before.end(), v.begin(), v.end());
    CHECK_FALSE(p.has_grad());
  }
  const auto [y, w] = m.forward_with_weights(x);
  // forward streams its attention (no weights formed): the same output to rounding (see test_attention.cpp).
  check_tensors_close(m.forward(x), y, 1e-5, 2e-6, "same output");
  CHECK(w.shape() == ef::Shape<4>{2, 3, 5, 5});
  std::vector<float> after;
  for (auto& p : m.named_parameters()) {
    const auto v = p.data.to_vector();
    after.insert(after.end(), v.begin(), v.end());
    CHECK_FALSE(p.has_grad());
  }
  CHECK(after == before);
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({2, 5, 12})), std::logic_error);
}

TEST_CASE("TransformerBlock: bad input") {
  CHECK_THROWS_WITH_EXACTLY(nn::TransformerBlock<float>(256, 6, 1024), doctest::Contains("256 is not divisible by 6"),
                       std::invalid_argument);
  nn::TransformerBlock<float> m(12, 3, 16);
  CHECK_THROWS_WITH_EXACTLY(m.forward(ef::zeros<float>({2, 5, 8})),
                       "TransformerBlock.forward: input [2, 5, 8] x norm1.weight [12]: last dim of the input must be dim 12",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(m.forward(ef::zeros<float>({2, 5, 12}), ef::ones<bool>({5, 2})), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(m.backward(ef::zeros<float>({2, 5, 12})), doctest::Contains("nothing saved"), std::logic_error);
  m.eval();
  m.forward(ef::zeros<float>({2, 5, 12}));
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({2, 5, 12})), std::logic_error);
  m.train();
  m.forward(ef::zeros<float>({2, 5, 12}));
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({1, 5, 12})), ef::shape_error);
}
