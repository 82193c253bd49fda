// GPT2LMHeadModel and generation: PyTorch fixtures (tests/data/gpt2_tiny.json, written by
// tools/reference/make_gpt2_fixtures.py: Hugging Face's GPT-2 in plain torch on a tiny config) for the logits,
// every parameter's gradient with dropout, the initialisation rule, greedy and sampled generation and the
// logits warpers; Hugging Face's printed module tree; central finite differences of the whole model; the KV
// cache against the full forward (all positions, or only the last); generate() on another CausalLM; bad
// input. Threads, thread counts and gradient-free inference: test_threads.cpp.
//
// Tolerances against PyTorch. The fixture is a float32 run from float32 parameters (exact in double too), so
// its own rounding is the floor: against a float64 run of the same script it differs by up to 1.8e-6 in
// the logits (O(5)) and by up to 1.1e-6 of each gradient tensor's largest entry (O(20-70): the probe sums
// 1098 logits), the errors of ~25 chained float32 steps (LayerNorm, GEMMs, softmax, tanh, the LM head and the
// way back) summed in ATen's order. Ours are the same steps in Eigen's order. So:
//   logits     1e-5 relative + 1e-5 absolute;
//   gradients  1e-5 relative + 5e-6 x the tensor's largest |entry| (entries that are sums of O(10) terms
//              cancelling to near zero carry the absolute error of their terms; a per-element relative
//              bound would be noise there).
// Measured (EIGENFORMER_REPORT_ERRORS=1): logits max abs 3.4e-6 (float) / 2.6e-6 (double) at a scale of 4.7;
// gradients <= 1.2e-6 of their tensor's scale, float and double alike.
// A wrong transpose, mask, scale, tie or dropout draw is off by O(1).
#include <doctest/doctest.h>

#include <eigenformer/models/generation.hpp>
#include <sstream>
#include <eigenformer/models/gpt2.hpp>
#include <eigenformer/io/state_dict.hpp>
#include <eigenformer/train/optimizers.hpp>

#include "support/cases.hpp"
#include "support/gradcheck.hpp"
#include "support/naive.hpp"
#include "support/parameters.hpp"
#include "support/nn_fixtures.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace models = ef::models;

namespace {

constexpr double gpt2_rtol = 1e-5;
constexpr double gpt2_atol = 1e-5;       // logits
constexpr double gpt2_grad_scale = 5e-6;  // gradients: absolute error allowed per unit of the tensor's scale

const json& gpt2_case(const std::string& name) {
  static const json file = load_fixture("gpt2_tiny.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("gpt2_tiny.json: no case named " + name);
}

template <typename T>
std::string tag() {
  return std::is_same_v<T, float> ? " [float]" : " [double]";
}

models::GPT2Config fixture_config() {
  const auto& c = gpt2_case("model").at("config");
  models::GPT2Config cfg;
  cfg.vocab_size = c.at("vocab_size").get<index_t>();
  cfg.n_positions = c.at("n_positions").get<index_t>();
  cfg.n_embd = c.at("n_embd").get<index_t>();
  cfg.n_layer = c.at("n_layer").get<index_t>();
  cfg.n_head = c.at("n_head").get<index_t>();
  cfg.layer_norm_epsilon = c.at("layer_norm_epsilon").get<double>();
  cfg.activation_function = c.at("activation_function").get<std::string>();
  cfg.resid_pdrop = c.at("resid_pdrop").get<double>();
  cfg.embd_pdrop = c.at("embd_pdrop").get<double>();
  cfg.attn_pdrop = c.at("attn_pdrop").get<double>();
  cfg.initializer_range = c.at("initializer_range").get<double>();
  return cfg;
}

// The fixture model with its recorded parameters, in eval mode.
template <typename T>
models::GPT2LMHeadModel<T> fixture_model() {
  models::GPT2LMHeadModel<T> m(fixture_config(), models::no_init);
  load_params(m, gpt2_case("model"));
  m.eval();
  return m;
}

ef::Tensor<std::int64_t, 2> ids_of(const json& t) { return to_tensor<std::int64_t, 2>(t); }

// Every recorded gradient against the parameter's .grad, at 1e-5 relative + 5e-6 x max |expected|.
template <typename T>
void check_gpt2_grads(ef::nn::Module<T>& m, const json& c, const std::string& what) {
  const auto& grads = c.at("grads");
  for (auto& p : m.named_parameters()) {
    REQUIRE_MESSAGE(grads.contains(p.name), p.name);
    REQUIRE(shape_of(grads.at(p.name)) == p.shape);
    json flat = grads.at(p.name);
    flat["shape"] = std::vector<index_t>{p.grad().numel()};
    double scale = 0;
    for (const double e : values_of(flat)) scale = std::max(scale, std::abs(e));
    check_fixture(p.grad(), flat, gpt2_rtol, gpt2_grad_scale * scale, what + " d" + p.name);
    if (std::getenv("EIGENFORMER_REPORT_ERRORS"))
      std::cout << "[fixture scale] " << what << " d" << p.name << ": max |expected| " << scale
                << ", max abs error / scale " << errors_of(p.grad(), flat).max_abs / scale << "\n";
  }
}

template <typename T>
void check_gpt2(const ef::Tensor<T, 3>& actual, const json& expected, const std::string& what) {
  check_fixture(actual, expected, gpt2_rtol, gpt2_atol, what);
}

}  // namespace

TEST_CASE("GPT2LMHeadModel: Hugging Face state-dict names and shapes, tied head, configs") {
  auto m = fixture_model<float>();
  const auto& params = gpt2_case("model").at("params");
  std::vector<std::string> names, expected;
  for (auto& p : m.named_parameters()) {
    names.push_back(p.name);
    CHECK_MESSAGE(shape_of(params.at(p.name)) == p.shape, p.name);
  }
  for (auto it = params.begin(); it != params.end(); ++it) expected.push_back(it.key());
  std::vector<std::string> sorted_names = names;
  std::sort(sorted_names.begin(), sorted_names.end());
  CHECK(sorted_names == expected);  // the JSON keys are sorted; the order is checked below
  CHECK(names.front() == "transformer.wte.weight");
  CHECK(names[1] == "transformer.wpe.weight");
  CHECK(std::vector<std::string>(names.begin() + 2, names.begin() + 14) ==
        std::vector<std::string>{"transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
                                 "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
                                 "transformer.h.0.attn.c_proj.weight", "transformer.h.0.attn.c_proj.bias",
                                 "transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
                                 "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias",
                                 "transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.bias"});
  CHECK(names.back() == "transformer.ln_f.bias");
  CHECK(names.size() == 2 + 12 * 2 + 2);  // no lm_head.weight: it is wte
  // Conv1D weights are (in, out), as in the checkpoints.
  CHECK(m.transformer.h[0].attn.c_attn.weight.shape() == ef::Shape<2>{12, 36});
  CHECK(m.transformer.h[0].mlp.c_proj.weight.shape() == ef::Shape<2>{48, 12});
  CHECK(m.num_parameters() == 61 * 12 + 16 * 12 + 2 * (4 * 12 + 12 * 36 + 36 + 12 * 12 + 12 + 12 * 48 + 48 + 48 * 12 + 12) + 2 * 12);

  const auto small = models::GPT2Config::gpt2_small();
  CHECK(small.vocab_size == 50257);
  CHECK(small.n_positions == 1024);
  CHECK(small.n_embd == 768);
  CHECK(small.n_layer == 12);
  CHECK(small.n_head == 12);
  CHECK(small.head_dim() == 64);
  CHECK(small.inner_dim() == 3072);
  CHECK(small.layer_norm_epsilon == 1e-5);
  CHECK(small.activation_function == "gelu_new");
  CHECK(small.resid_pdrop == 0.1);
  CHECK(models::GPT2Config::gpt2_xl().head_dim() == 64);
  CHECK_NOTHROW(models::GPT2Config::gpt2_large().validate());
}

TEST_CASE("GPT2LMHeadModel: std::cout << model prints what print(model) prints in PyTorch (fixture)") {
  // The fixture's text is print(model) of the twin module tree with Hugging Face's class and attribute names
  // (torch 1.13 lists every ModuleList entry), for the same config.
  const auto& c = gpt2_case("repr");
  REQUIRE(c.at("config") == gpt2_case("model").at("config"));
  auto m = fixture_model<float>();
  std::ostringstream os;
  os << m;
  CHECK(os.str() == c.at("text").get<std::string>());
  // The tied head prints as a Linear but owns nothing: its tensor is listed once, as wte.
  CHECK(m.lm_head.repr() == "Linear(in_features=12, out_features=61, bias=False)");
  for (const auto& p : m.named_parameters()) CHECK(p.name.find("lm_head") == std::string::npos);
  // Hugging Face's module names, as named_modules() lists them.
  std::vector<std::string> modules;
  for (const auto& [name, module] : m.named_modules()) modules.push_back(name);
  CHECK(modules.size() == 1 + 1 + 5 + 2 * (1 + 1 + 1 + 4 + 1 + 1 + 4) + 1);
  CHECK(std::find(modules.begin(), modules.end(), "transformer.h.1.attn.attn_dropout") != modules.end());
  CHECK(std::find(modules.begin(), modules.end(), "transformer.h.0.mlp.act") != modules.end());
  CHECK(modules.back() == "lm_head");
}

TEST_CASE_TEMPLATE("GPT2LMHeadModel: eval-mode logits match PyTorch (fixture)", T, float, double) {
  auto m = fixture_model<T>();
  const auto& c = gpt2_case("model");
  const auto ids = ids_of(c.at("inputs").at("input_ids"));
  check_gpt2(m.forward(ids), c.at("logits"), "logits" + tag<T>());
  // One sequence given as a std::vector: the row's logits.
  const auto row = ids.select(0, 1).to_vector();
  const auto one = m.forward(row);
  CHECK(one.shape() == ef::Shape<3>{1, 9, 61});
  json expected = c.at("logits");
  const auto all = values_of(expected);
  expected["shape"] = std::vector<index_t>{1, 9, 61};
  expected["data"] = std::vector<double>(all.begin() + 9 * 61, all.end());
  check_gpt2(one, expected, "logits of row 1 as a vector" + tag<T>());
}

TEST_CASE_TEMPLATE("GPT2LMHeadModel: training forward with dropout and every gradient match PyTorch (fixture)", T,
                   float, double) {
  auto m = fixture_model<T>();
  const auto& c = gpt2_case("model");
  const auto ids = ids_of(c.at("inputs").at("input_ids"));
  const auto probe = fx<T, 3>(c.at("probe"));
  m.train();
  m.zero_grad();
  ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());  // the dropout masks, in PyTorch's forward order
  const auto logits = m.forward(ids);
  const double loss = static_cast<double>(ef::sum(ef::mul(logits, probe)).item());
  const double expected_loss = values_of(c.at("loss"))[0];
  CHECK(loss == doctest::Approx(expected_loss).epsilon(1e-5));
  m.backward(probe);
  check_gpt2_grads(m, c, "model" + tag<T>());
  // backward consumed the cache.
  CHECK_THROWS_WITH_EXACTLY(m.backward(probe), doctest::Contains("nothing saved"), std::logic_error);
}

TEST_CASE("GPT2LMHeadModel: initialisation is Hugging Face's rule drawn in parameter order (fixture)") {
  const auto& c = gpt2_case("init");
  ef::manual_seed(c.at("seed").get<std::uint64_t>());
  models::GPT2LMHeadModel<float> m(fixture_config());
  const auto& weights = c.at("weights");
  std::size_t drawn = 0;
  for (auto& p : m.named_parameters()) {
    INFO(p.name);
    const bool is_bias = p.name.ends_with("bias");
    if (is_bias || p.name.find(".ln_") != std::string::npos) {
      const float v = is_bias ? 0.0f : 1.0f;  // LayerNorm 1 / 0, biases 0: no draws
      for (const float x : p.data.to_vector()) CHECK(x == v);
      continue;
    }
    REQUIRE(weights.contains(p.name));
    const auto& w = weights.at(p.name);
    REQUIRE(w.at("numel").get<index_t>() == p.data.numel());
    // normal_ of >= 16 elements: float Box-Muller with libm here, ATen's portable log/cos there: a few ulps.
    // Values near 0 (cos near pi/2) carry that error absolutely: 2e-7 is 1e-5 of the 0.02 spread.
    check_close(p.data.narrow(0, 0, 16), w.at("head"), 1e-5, 2e-7, p.name + " head");
    check_close(p.data.narrow(0, p.data.numel() - 16, 16), w.at("tail"), 1e-5, 2e-7, p.name + " tail");
    // The whole tensor in one number: the root mean square of all its values against PyTorch's, which follows
    // the rule's spread (0.02, or 0.02 / sqrt(2 n_layer) = 0.01 for the residual projections c_proj), so
    // a wrong rule is off by a factor (2 for an unscaled c_proj). The bound is the elements' own: when every
    // |ours - theirs| <= 1e-5 |theirs| + 2e-7, the triangle inequality for the 2-norm gives
    // |rms(ours) - rms(theirs)| <= rms(ours - theirs) <= 1e-5 rms(theirs) + 2e-7.
    double sum_sq = 0;
    for (const float x : p.data.to_vector()) sum_sq += static_cast<double>(x) * x;
    const double rms = std::sqrt(sum_sq / static_cast<double>(p.data.numel()));
    const double expected_rms = w.at("rms").get<double>();
    CHECK_MESSAGE(std::abs(rms - expected_rms) <= 1e-5 * expected_rms + 2e-7,
                  p.name << ": rms " << rms << ", PyTorch's " << expected_rms);
    ++drawn;
  }
  check_ran(drawn, weights.size(), "initialised weights of the fixture");
  // no_init: zeros, nothing drawn.
  ef::manual_seed(5);
  const float before = ef::rand({1}).item();
  ef::manual_seed(5);
  models::GPT2LMHeadModel<float> z(fixture_config(), models::no_init);
  CHECK(ef::rand({1}).item() == before);
  for (const float x : z.transformer.wte.weight.data.to_vector()) CHECK(x == 0.0f);
}

TEST_CASE("GPT2LMHeadModel: backward matches central finite differences (double), every parameter") {
  models::GPT2Config cfg;
  cfg.vocab_size = 11;
  cfg.n_positions = 6;
  cfg.n_embd = 6;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0;  // deterministic, so eval computes the same function
  ef::manual_seed(2024);
  models::GPT2LMHeadModel<double> m(cfg);
  for (auto& p : m.named_parameters()) {  // away from the tiny 0.02 init, so every nonlinearity matters
    const bool ln = p.name.find(".ln_") != std::string::npos && p.name.ends_with("weight");
    ef::normal_(p.data, ln ? 1.0 : 0.0, ln ? 0.2 : 0.4);
  }
  const auto ids = ef::tensor<std::int64_t>({{3, 10, 0, 3, 7}, {5, 5, 1, 9, 2}});
  m.train();
  m.zero_grad();
  const auto logits = m.forward(ids);
  const auto probe = ef::randn<double>(logits.shape());
  m.backward(probe);
  auto f = [&] {
    m.eval();
    auto out = m.forward(ids);
    m.train();
    return out;
  };
  for (auto& p : m.named_parameters())
    check_tensors_close(p.grad(), numerical_gradient(f, p.data, probe), 1e-6, 1e-8, "d" + p.name);
}

TEST_CASE_TEMPLATE("GPT2LMHeadModel: KV-cache logits equal the full forward's", T, float, double) {
  auto m = fixture_model<T>();
  const auto ids = ids_of(gpt2_case("model").at("inputs").at("input_ids"));  // (2, 9)
  const auto full = m.forward(ids);
  // The same arithmetic in other GEMM shapes (matrix-vector for one token, Eigen blocks differently), so only
  // the rounding differs: measured max 2.2e-6 (float, ~5 ulps of these O(5) logits) and 4e-15 (double).
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12, atol = std::is_same_v<T, float> ? 5e-6 : 1e-12;
  auto check_chunks = [&](std::vector<index_t> chunks, index_t capacity) {
    auto cache = m.make_cache(2, capacity);
    index_t start = 0;
    for (const index_t n : chunks) {
      const auto out = m.forward(ids.narrow(1, start, n).contiguous(), cache);
      CHECK(cache.length() == start + n);
      const auto expected = full.narrow(1, start, n);
      check_tensors_close(out, expected, rtol, atol, "positions " + std::to_string(start) + ".." +
                                                       std::to_string(start + n - 1) + tag<T>());
      if (std::getenv("EIGENFORMER_REPORT_ERRORS")) {
        const auto a = out.to_vector(), e = expected.to_vector();
        double worst = 0;
        for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(e[i])));
        std::cout << "[kv-cache error]" << tag<T>() << " positions " << start << ".." << start + n - 1 << ": max abs "
                  << worst << "\n";
      }
      start += n;
    }
  };
  check_chunks({4, 1, 1, 1, 1, 1}, 0);  // a prompt, then one token at a time
  check_chunks({1, 1, 1, 1, 1, 1, 1, 1, 1}, 9);
  check_chunks({3, 4, 2}, 12);
  check_chunks({9}, 9);
  // The cache path leaves the mode alone and caches nothing for backward.
  m.train();
  auto cache = m.make_cache(2);
  m.forward(ids, cache);
  CHECK(m.is_training());
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<T>({2, 9, 61})), std::logic_error);
  cache.reset();
  CHECK(cache.length() == 0);
}

TEST_CASE_TEMPLATE("GPT2LMHeadModel: a cached forward with LogitsFor::last returns the last position only", T, float,
                   double) {
  auto m = fixture_model<T>();
  const auto ids = ids_of(gpt2_case("model").at("inputs").at("input_ids"));  // (2, 9)
  const auto full = m.forward(ids);
  // The KV-cache tolerances above (same arithmetic, other GEMM shapes).
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12, atol = std::is_same_v<T, float> ? 5e-6 : 1e-12;
  auto cache = m.make_cache(2, 9);
  const auto prompt = m.forward(ids.narrow(1, 0, 6).contiguous(), cache, models::LogitsFor::last);
  CHECK(prompt.shape() == ef::Shape<3>{2, 1, 61});
  CHECK(cache.length() == 6);  // every prompt token is cached, whatever the logits asked for
  check_tensors_close(prompt, full.narrow(1, 5, 1), rtol, atol, "prompt, last position" + tag<T>());
  const auto step = m.forward(ids.narrow(1, 6, 3).contiguous(), cache, models::LogitsFor::last);
  CHECK(step.shape() == ef::Shape<3>{2, 1, 61});
  check_tensors_close(step, full.narrow(1, 8, 1), rtol, atol, "after the cache, last position" + tag<T>());
}

// A bigram "language model" that is not GPT-2: logits(next | last token) = table[last]. It satisfies
// CausalLM with a cache that only counts positions, so generate() must drive it as it drives GPT-2.
struct BigramLM {
  using value_type = double;
  struct Cache {
    index_t len = 0, cap = 0;
    index_t length() const { return len; }
  };
  using cache_type = Cache;

  ef::Tensor<double, 2> table;  // (V, V)
  index_t vocab_size() const { return table.shape()[0]; }
  index_t max_positions() const { return 32; }
  Cache make_cache(index_t, index_t capacity) const { return Cache{0, capacity}; }
  ef::Tensor<double, 3> forward(const ef::Tensor<std::int64_t, 2>& ids, Cache& cache, models::LogitsFor which) const {
    const index_t b = ids.shape()[0], t = ids.shape()[1], v = vocab_size();
    const index_t first = which == models::LogitsFor::last ? t - 1 : 0;
    auto out = ef::Tensor<double, 3>::empty({b, t - first, v});
    for (index_t i = 0; i < b; ++i)
      for (index_t j = first; j < t; ++j)
        for (index_t k = 0; k < v; ++k) out(i, j - first, k) = table(ids(i, j), k);
    cache.len += t;
    if (cache.len > cache.cap) throw std::out_of_range("BigramLM: cache overflow");
    return out;
  }
};
static_assert(models::CausalLM<BigramLM>);
static_assert(models::CausalLM<models::GPT2LMHeadModel<double>>);
static_assert(!models::CausalLM<ef::nn::LayerNorm<float>>);

TEST_CASE("generate: any CausalLM, not only GPT-2 (a bigram table)") {
  BigramLM lm{ef::zeros<double>({5, 5})};
  for (index_t i = 0; i < 5; ++i) lm.table(i, (i * 2 + 1) % 5) = 1.0;  // 0 -> 1 -> 3 -> 2 -> 0, 4 -> 4
  models::GenerationConfig g;
  g.max_new_tokens = 6;
  const auto out = models::generate(lm, ef::tensor<std::int64_t>({{0, 4}, {2, 2}}), g);
  CHECK(out.to_vector() == std::vector<std::int64_t>{0, 4, 4, 4, 4, 4, 4, 4, 2, 2, 0, 1, 3, 2, 0, 1});
  g.eos_token_id = 3;  // generation stops once the only sequence has produced it
  CHECK(models::generate(lm, std::vector<std::int64_t>{2}, g) == std::vector<std::int64_t>{2, 0, 1, 3});
  CHECK(models::next_token_table(lm, {1}, 2)[0].id == 3);
  // The timings count what ran: a 2-token prompt, 3 tokens chosen, 2 passes through the cache (the token
  // that ends generation needs none).
  models::GenerationTimings timings;
  CHECK(models::generate(lm, std::vector<std::int64_t>{0, 2}, g, ef::default_generator(), &timings) ==
        std::vector<std::int64_t>{0, 2, 0, 1, 3});
  CHECK(timings.prompt_tokens == 2);
  CHECK(timings.new_tokens == 3);
  CHECK(timings.decode_passes == 2);
  CHECK(timings.prompt_seconds >= 0);
  CHECK(timings.decode_seconds >= 0);
  g.max_new_tokens = 0;
  models::generate(lm, std::vector<std::int64_t>{1}, g, ef::default_generator(), &timings);
  CHECK(timings.new_tokens == 0);
  CHECK(timings.decode_passes == 0);
}

TEST_CASE_TEMPLATE("generate: greedy search equals PyTorch's, with and without eos (fixture)", T, float, double) {
  auto m = fixture_model<T>();
  for (const char* name : {"greedy", "greedy_eos"}) {
    const auto& c = gpt2_case(name);
    models::GenerationConfig g;
    g.max_new_tokens = c.at("max_new_tokens").get<index_t>();
    if (!c.at("eos_token_id").is_null()) g.eos_token_id = c.at("eos_token_id").get<std::int64_t>();
    const auto out = models::generate(m, ids_of(c.at("prompt")), g);
    CHECK_MESSAGE(out.to_vector() == ids_of(c.at("out")).to_vector(), name << tag<T>());
    CHECK(out.shape() == ids_of(c.at("out")).shape());
  }
  // One prompt as a vector: row 0 of the greedy case.
  const auto& c = gpt2_case("greedy");
  const auto prompt = ids_of(c.at("prompt")).select(0, 0).to_vector();
  models::GenerationConfig g;
  g.max_new_tokens = 8;
  CHECK(models::generate(m, prompt, g) == ids_of(c.at("out")).select(0, 0).to_vector());
  g.max_new_tokens = 0;
  CHECK(models::generate(m, prompt, g) == prompt);
}

TEST_CASE_TEMPLATE("generate: sampling after a seed draws PyTorch's tokens (torch.multinomial, fixture)", T, float,
                   double) {
  auto m = fixture_model<T>();
  for (const char* name : {"sample_plain", "sample_warped", "sample_hot"}) {
    const auto& c = gpt2_case(name);
    models::GenerationConfig g;
    g.max_new_tokens = c.at("max_new_tokens").get<index_t>();
    g.do_sample = true;
    g.temperature = c.at("temperature").get<double>();
    g.top_k = c.at("top_k").get<index_t>();
    g.top_p = c.at("top_p").get<double>();
    g.seed = c.at("seed").get<std::uint64_t>();
    const auto out = models::generate(m, ids_of(c.at("prompt")), g);
    CHECK_MESSAGE(out.to_vector() == ids_of(c.at("out")).to_vector(), name << tag<T>());
    // Without config.seed the given generator is used: seeding it the same way gives the same tokens.
    g.seed.reset();
    ef::Generator gen(c.at("seed").get<std::uint64_t>());
    CHECK(models::generate(m, ids_of(c.at("prompt")), g, gen).to_vector() == out.to_vector());
  }
}

TEST_CASE_TEMPLATE("logits warpers: temperature, top-k and top-p equal transformers' (fixture), ties included", T,
                   float, double) {
  for (const char* name : {"warp_top_k_5", "warp_top_k_1", "warp_top_k_100", "warp_top_p_0.9", "warp_top_p_0.3",
                           "warp_top_p_0", "warp_temperature_0.7", "warp_all", "warp_ties_top_k_3",
                           "warp_ties_top_p_0.5", "warp_ties_top_p_0.75", "warp_quantized_top_p_0.6",
                           "warp_quantized_top_p_0.95", "warp_quantized_all"}) {
    const auto& c = gpt2_case(name);
    const auto& a = c.at("args");
    models::GenerationConfig g;
    g.temperature = a.at("temperature").get<double>();
    g.top_k = a.at("top_k").get<index_t>();
    g.top_p = a.at("top_p").get<double>();
    const auto out = models::warp_logits(fx<T, 2>(c.at("scores")), g);
    // The kept set must be identical (-inf exactly where transformers put it); kept values are the scores
    // divided by the temperature: exact in float, the double quotient is within 2 float32 ulps of float's.
    check_fixture(out, c.at("out"), std::is_same_v<T, float> ? 0.0 : 2.5e-7, 0.0, name + tag<T>());
  }
  // Direct calls and their checks.
  const auto s = ef::tensor<T>({{1, 3, 2, 3}});
  CHECK(models::top_k_filter(s, 1).to_vector() ==
        std::vector<T>{-INFINITY, 3, -INFINITY, 3});  // both maxima tie with the 1st largest: both kept
  CHECK(models::top_p_filter(s, 1.0).to_vector() == s.to_vector());
  CHECK_THROWS_WITH_EXACTLY(models::top_k_filter(s, 0), "top_k_filter: top_k must be a positive integer, got 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(models::top_p_filter(s, 1.5), "top_p_filter: top_p must be between 0 and 1, got 1.500000",
                       std::invalid_argument);
  CHECK_THROWS_EXACTLY(models::temperature_warp(s, 0.0), std::invalid_argument);
  // NaN scores: ranked highest, as torch.topk does; nothing is below a NaN k-th value, so all are kept.
  const auto with_nan = ef::tensor<T>({{1, NAN, 2}});
  const auto kept = models::top_k_filter(with_nan, 1).to_vector();
  CHECK((kept[0] == 1 && std::isnan(kept[1]) && kept[2] == 2));
  CHECK(models::top_tokens(with_nan.select(0, 0), 3).size() == 3);
}

TEST_CASE_TEMPLATE("Conv1D: y = x W + b with W stored (in, out); bad input", T, float, double) {
  ef::manual_seed(3);
  ef::nn::Conv1D<T> c(4, 3, 0.5);
  CHECK(c.weight.shape() == ef::Shape<2>{4, 3});
  ef::normal_(c.bias.data, 0.0, 1.0);
  const auto x = ef::randn<T>({2, 5, 4});
  // Against plain loops summing in double, not the library's matmul and add (the tolerance of test_linear.cpp's
  // Linear forward: 4-term sums of O(1) values).
  const auto expected = naive_affine(x, c.weight.data, false, c.bias.data);
  check_tensors_close(c.forward(x).template to<double>(),
                      ef::from_vector(ef::Shape<1>{static_cast<index_t>(expected.size())}, expected), 1e-6, 1e-6, "forward");
  CHECK_THROWS_WITH_EXACTLY(c.forward(ef::zeros<T>({2, 3})),
                       "Conv1D.forward: input [2, 3] x weight [4, 3]: last dim of the input must be in_features 4",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::nn::Conv1D<T>(0, 3), std::invalid_argument);
}

TEST_CASE("sample_multinomial: zero-probability entries are never drawn; bad rows throw") {
  ef::Generator gen(7);
  const auto p = ef::tensor<float>({{0.0f, 0.5f, 0.0f, 0.5f}, {0.0f, 0.0f, 2.0f, 0.0f}});
  int ones = 0;
  for (int i = 0; i < 200; ++i) {
    const auto s = models::sample_multinomial(p, gen);
    CHECK((s(0) == 1 || s(0) == 3));
    CHECK(s(1) == 2);  // rows need not be normalised
    ones += s(0) == 1;
  }
  CHECK(ones > 60);
  CHECK(ones < 140);
  CHECK_THROWS_WITH_EXACTLY(models::sample_multinomial(ef::tensor<float>({{0.5f, -0.1f}}), gen),
                       doctest::Contains("at [0, 1] is negative, infinite or NaN"), std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(models::sample_multinomial(ef::tensor<float>({{0.5f, 0.5f}, {0.0f, 0.0f}}), gen),
                       "sample_multinomial: row 1 of the probabilities sums to 0", std::invalid_argument);
}

TEST_CASE("next_token_table: the K most probable next tokens with their probabilities") {
  auto m = fixture_model<float>();
  const auto& c = gpt2_case("model");
  const auto ids = ids_of(c.at("inputs").at("input_ids"));
  const auto prompt = ids.select(0, 0).to_vector();
  const auto table = models::next_token_table(m, prompt, 5);
  REQUIRE(table.size() == 5);
  const auto logits = m.forward(ids).select(0, 0).select(0, 8);  // (V)
  const auto probs = ef::softmax(logits, 0);
  const auto best = ef::argmax(logits, 0).item();
  CHECK(table[0].id == best);
  for (std::size_t i = 0; i < table.size(); ++i) {
    CHECK(table[i].probability == doctest::Approx(probs(table[i].id)).epsilon(1e-5));
    if (i > 0) CHECK(table[i].probability <= table[i - 1].probability);
  }
  // Every other token is at most as probable as the last listed one.
  for (index_t v = 0; v < 61; ++v) {
    bool listed = false;
    for (const auto& e : table) listed = listed || e.id == v;
    if (!listed) CHECK(probs(v) <= table.back().probability + 1e-7);
  }
  CHECK(models::next_token_table(m, prompt, 100).size() == 61);
  double total = 0;
  for (const auto& e : models::next_token_table(m, prompt, 61)) total += e.probability;
  CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("GPT2LMHeadModel: bad input throws, naming what was wrong") {
  auto m = fixture_model<float>();
  CHECK_THROWS_WITH_EXACTLY(m.forward(ef::tensor<std::int64_t>({{1, 2, 3}, {4, 61, 6}})),
                       "GPT2LMHeadModel.forward: token id 61 at input_ids[1, 1] is out of range for vocab_size 61 "
                       "(valid ids are 0 to 60)",
                       std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(m.forward(std::vector<std::int64_t>{-1}), doctest::Contains("token id -1 at input_ids[0, 0]"),
                       std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(m.forward(std::vector<std::int64_t>(17, 0)),
                       "GPT2LMHeadModel.forward: sequence length 17 exceeds n_positions 16 (the number of learned "
                       "positions)",
                       std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(m.forward(std::vector<std::int64_t>{}), doctest::Contains("is empty"), std::invalid_argument);

  auto cfg = fixture_config();
  cfg.n_embd = 10;
  CHECK_THROWS_WITH_EXACTLY(models::GPT2LMHeadModel<float>{cfg},
                       "GPT2Config: n_embd 10 is not divisible by n_head 3 (each head gets n_embd / n_head channels)",
                       std::invalid_argument);
  cfg = fixture_config();
  cfg.n_layer = 0;
  CHECK_THROWS_WITH_EXACTLY(models::GPT2LMHeadModel<float>{cfg}, "GPT2Config: n_layer must be positive, got 0",
                       std::invalid_argument);
  cfg = fixture_config();
  cfg.attn_pdrop = 1.5;
  CHECK_THROWS_WITH_EXACTLY(cfg.validate(), doctest::Contains("attn_pdrop must be between 0 and 1"), std::invalid_argument);
  cfg = fixture_config();
  cfg.activation_function = "swish";
  CHECK_THROWS_WITH_EXACTLY(cfg.validate(), doctest::Contains("unknown activation \"swish\""), std::invalid_argument);

  // The KV cache: overflow, batch, config.
  auto cache = m.make_cache(1, 4);
  m.forward(std::vector<std::int64_t>{1, 2, 3}, cache);
  CHECK_THROWS_WITH_EXACTLY(m.forward(std::vector<std::int64_t>{4, 5}, cache),
                       "GPT2LMHeadModel.forward: the KVCache holds 3 tokens and 2 new ones would need 5 positions, "
                       "more than its capacity 4",
                       std::out_of_range);
  CHECK(cache.length() == 3);  // a failed call leaves the cache as it was
  auto full = m.make_cache(1);
  m.forward(std::vector<std::int64_t>(15, 1), full);
  CHECK_THROWS_WITH_EXACTLY(m.forward(std::vector<std::int64_t>{1, 2}, full),
                       "GPT2LMHeadModel.forward: 15 cached + 2 new tokens exceed n_positions 16 (the number of "
                       "learned positions)",
                       std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(m.forward(ef::zeros<std::int64_t>({2, 1}), cache),
                       "GPT2LMHeadModel.forward: input_ids [2, 1] has batch 2 but the KVCache holds 1 sequences",
                       ef::shape_error);
  auto other = fixture_config();
  other.n_layer = 3;
  auto wrong = models::GPT2LMHeadModel<float>(other, models::no_init).make_cache(1);
  CHECK_THROWS_WITH_EXACTLY(m.forward(std::vector<std::int64_t>{1}, wrong), doctest::Contains("made for another config"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(m.make_cache(1, 17), doctest::Contains("capacity 17 must be within 1..n_positions 16"),
                       std::invalid_argument);

  // backward without a training forward, with a wrong shape.
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({1, 3, 61})), std::logic_error);
  m.train();
  m.forward(std::vector<std::int64_t>{1, 2, 3});
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({1, 3, 60})), ef::shape_error);

  // generate's checks.
  m.eval();
  const std::vector<std::int64_t> prompt{1, 2, 3, 4};
  models::GenerationConfig g;
  g.max_new_tokens = 14;
  CHECK_THROWS_WITH_EXACTLY(models::generate(m, prompt, g),
                       "generate: a prompt of 4 tokens and max_new_tokens 14 need 17 positions, more than "
                       "n_positions 16",
                       std::invalid_argument);
  g.max_new_tokens = 13;  // 4 + 13 - 1 = 16 positions: fits
  CHECK(models::generate(m, prompt, g).size() == 17);
  g.max_new_tokens = 3;
  g.do_sample = true;
  g.temperature = 0.0;
  CHECK_THROWS_WITH_EXACTLY(models::generate(m, prompt, g), doctest::Contains("temperature must be a strictly positive"),
                       std::invalid_argument);
  g.temperature = 1.0;
  g.top_p = -0.5;
  CHECK_THROWS_EXACTLY(models::generate(m, prompt, g), std::invalid_argument);
  g.top_p = 1.0;
  g.top_k = -1;
  CHECK_THROWS_EXACTLY(models::generate(m, prompt, g), std::invalid_argument);
  g.top_k = 50;
  g.eos_token_id = 61;
  CHECK_THROWS_WITH_EXACTLY(models::generate(m, prompt, g), "generate: eos_token_id 61 is out of range for vocab_size 61",
                       std::invalid_argument);
  g.eos_token_id.reset();
  CHECK_THROWS_WITH_EXACTLY(models::generate(m, std::vector<std::int64_t>{1, 99}, g), doctest::Contains("token id 99"),
                       std::out_of_range);
}

// The GPT-2 case of tests/data/bf16.json: PyTorch's run of the fixture model with bfloat16-rounded weights.
namespace {
const json& bf16_gpt2_case() {
  static const json file = load_fixture("bf16.json");
  for (const auto& c : file.at("cases"))
    if (c.at("kind") == "gpt2") return c;
  throw std::runtime_error("bf16.json: no case of kind gpt2");
}
}  // namespace

// bfloat16 weights (to_bf16_weights) against tests/data/bf16.json: PyTorch's run of the same model with its
// Conv1D weights and wte rounded to bfloat16, float32 arithmetic. The model then computes with exactly those
// weights, so the float tolerances of this file apply unchanged (1e-5 relative + 1e-5 absolute, the rounding
// of ~25 chained float steps in another order), for the full forward (float products over the rounded
// weights) and for the KV-cache steps, whose one-row products read the bfloat16 copies through gemv.hpp.
// Against the float model: each weight moves by at most 2^-9 of itself, and each of the 13 products on the
// way (6 per block, the head) passes on at most that relative change of its output, so to first order the
// logits move by at most 13 x 2^-9 = 2.5% of their scale (max |logit|); checked at 5%, and at least 10x the
// float tolerance, or the rounding did not happen. The greedy tokens on the test prompts are the float
// model's (the script checks that in PyTorch; here both models run).
TEST_CASE("GPT2LMHeadModel: bfloat16 weights give PyTorch's logits for the rounded model and the float model's greedy tokens (fixture)") {
  const json& c = bf16_gpt2_case();
  const auto fp32_model = fixture_model<float>();
  auto m = fixture_model<float>();
  m.to_bf16_weights();
  // The float parameters now hold bfloat16 values.
  for (const float w : m.transformer.wte.weight.data.to_vector())
    CHECK(ef::float_from_bf16_bits(ef::bf16_bits_from_float(w)) == w);
  REQUIRE(m.transformer.h[0].mlp.c_fc.bf16_weight() != nullptr);
  const auto ids = ids_of(c.at("input_ids"));  // (2, 9)
  const auto expected = to_tensor<float, 3>(c.at("logits"));
  const auto full = m.forward(ids);
  check_gpt2(full, c.at("logits"), "bf16 weights, full forward");
  // Packed first: to_bf16_weights packs the rounded weights again, the tied head's included, so prompts that
  // read the packed copies compute with the same rounded model.
  auto packed = fixture_model<float>();
  packed.pack_weights();
  packed.to_bf16_weights();
  check_gpt2(packed.forward(ids), c.at("logits"), "bf16 weights after pack_weights, full forward");
  auto cache = m.make_cache(2, 9);
  check_tensors_close(m.forward(ids.narrow(1, 0, 4).contiguous(), cache), expected.narrow(1, 0, 4), gpt2_rtol,
                      gpt2_atol, "bf16 weights, cached prompt");
  for (index_t t = 4; t < 9; ++t)  // one row a sequence: the bfloat16 copies through gemv.hpp
    check_tensors_close(m.forward(ids.narrow(1, t, 1).contiguous(), cache), expected.narrow(1, t, 1), gpt2_rtol,
                        gpt2_atol, "bf16 weights, cached step at position " + std::to_string(t));
  const auto reference = fp32_model.forward(ids).to_vector(), rounded = full.to_vector();
  double scale = 0, moved = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    scale = std::max(scale, std::abs(double(reference[i])));
    moved = std::max(moved, std::abs(double(rounded[i]) - double(reference[i])));
  }
  if (std::getenv("EIGENFORMER_REPORT_ERRORS"))  // measured: 0.046 at a scale of 4.7, 1%
    std::cout << "[bf16 weights] logits moved by up to " << moved << " (max |logit| " << scale << ")\n";
  CHECK(moved <= 0.05 * scale);
  CHECK(moved >= 10 * gpt2_atol);
  models::GenerationConfig g;
  g.max_new_tokens = c.at("max_new_tokens").get<index_t>();
  const auto out = models::generate(m, ids_of(c.at("prompt")), g);
  CHECK(out.to_vector() == ids_of(c.at("out")).to_vector());
  const auto& fp32 = gpt2_case("greedy");
  REQUIRE(fp32.at("prompt") == c.at("prompt"));
  CHECK(out.to_vector() == models::generate(fp32_model, ids_of(fp32.at("prompt")), g).to_vector());
  CHECK(out.to_vector() == ids_of(fp32.at("out")).to_vector());
}

// bfloat16 weights held alone (to_bf16_weights(FloatWeights::release)): the float Conv1D weights and wte are
// freed and every product reads the bfloat16 copies -- decoding's few rows streamed as before, a prompt's or a
// full forward's many rows widened block by block (backend::gemm over a Bf16Matrix), the embedding lookup
// widening rows of wte's copy. The model is the same rounded model as with FloatWeights::keep, so the same
// PyTorch fixture and tolerances apply, and a one-token forward reads the very same copies through the very
// same kernel, so it equals the kept model's bit for bit. What needs float values refuses, naming the cause.
TEST_CASE("GPT2LMHeadModel: bfloat16 weights held alone give the rounded model's logits and tokens, and refuse training and saving (fixture)") {
  const json& c = bf16_gpt2_case();
  auto kept = fixture_model<float>();
  kept.to_bf16_weights(ef::FloatWeights::keep);
  auto m = fixture_model<float>();
  const index_t parameters = m.num_parameters();
  const std::string printed = m.repr();
  m.to_bf16_weights(ef::FloatWeights::release);
  CHECK(m.transformer.wte.weight.float_released());
  CHECK(m.transformer.h[1].mlp.c_proj.weight.float_released());
  CHECK_FALSE(m.transformer.wpe.weight.float_released());  // positions, biases and LayerNorm stay float
  CHECK_FALSE(m.transformer.h[0].attn.c_attn.bias.float_released());
  CHECK(m.num_parameters() == parameters);
  CHECK(m.repr() == printed);
  m.to_bf16_weights(ef::FloatWeights::release);  // again: nothing left to do, nothing changes

  const auto ids = ids_of(c.at("input_ids"));  // (2, 9): 18 rows, past the few-row products
  const auto expected = to_tensor<float, 3>(c.at("logits"));
  check_gpt2(m.forward(ids), c.at("logits"), "bf16 weights held alone, full forward");
  auto cache = m.make_cache(2, 9);
  check_tensors_close(m.forward(ids.narrow(1, 0, 4).contiguous(), cache), expected.narrow(1, 0, 4), gpt2_rtol,
                      gpt2_atol, "bf16 weights held alone, cached prompt");
  std::size_t steps = 0;
  for (index_t t = 4; t < 9; ++t) {  // one row a sequence after a cached prompt of many rows
    const auto step = ids.narrow(1, t, 1).contiguous();
    const auto got = m.forward(step, cache);
    check_tensors_close(got, expected.narrow(1, t, 1), gpt2_rtol, gpt2_atol,
                        "bf16 weights held alone, cached step at position " + std::to_string(t));
    ++steps;
  }
  check_ran(steps, 5, "cached steps");
  // One fresh row with an empty cache: every product the same bfloat16 copy through the same kernel.
  auto one = m.make_cache(1, 1), kept_one = kept.make_cache(1, 1);
  const std::vector<std::int64_t> token{ids(0, 0)};
  CHECK(m.forward(token, one).to_vector() == kept.forward(token, kept_one).to_vector());

  models::GenerationConfig g;
  g.max_new_tokens = c.at("max_new_tokens").get<index_t>();
  CHECK(models::generate(m, ids_of(c.at("prompt")), g).to_vector() == ids_of(c.at("out")).to_vector());

  // Training, saving, loading, optimising and packing need the float values.
  m.train();
  CHECK_THROWS_WITH_AS(m.forward(ids), doctest::Contains("held only as bfloat16"), std::logic_error);
  m.eval();
  CHECK_THROWS_WITH_AS(ef::io::state_dict(m), doctest::Contains("\"transformer.wte.weight\""), ef::io::checkpoint_error);
  CHECK_THROWS_WITH_AS(ef::io::load_state_dict(m, ef::io::state_dict(kept)), doctest::Contains("held only as bfloat16"),
                       ef::io::checkpoint_error);
  CHECK_THROWS_WITH_AS(ef::train::AdamW<float>(m.named_parameters()), doctest::Contains("held only as bfloat16"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.pack_weights(), doctest::Contains("held only as bfloat16"), std::logic_error);
  // The released tensors read as NaN, never as a plausible weight.
  CHECK(std::isnan(m.transformer.h[0].attn.c_attn.weight.data(0, 0)));
}

// pack_weights(FloatWeights::release): every Conv1D weight and the tied head held only in the packed kernel's
// order, wte's lookups reading rows out of the head's copy. A full forward (18 rows) equals the model keeping its
// float weights beside the packed copies bit for bit; cached steps of one row read the packed copies through the
// packed kernel's few-row path (not the float weights' decoding kernels) and stay within the fixture's
// tolerances; greedy generation gives PyTorch's tokens. What needs float values refuses, naming the packed copy.
TEST_CASE("GPT2LMHeadModel: weights held only packed give the packed model's logits and PyTorch's tokens (fixture)") {
  auto m = fixture_model<float>();
  if (!ef::backend::detail::packed_weights_supported()) {
    MESSAGE("skipped: no packed kernel on this CPU, so pack_weights packs nothing");
    m.pack_weights(ef::FloatWeights::release);
    CHECK_FALSE(m.transformer.h[0].attn.c_attn.weight.float_released());
    return;
  }
  auto kept = fixture_model<float>();
  kept.pack_weights();
  const index_t parameters = m.num_parameters();
  m.pack_weights(ef::FloatWeights::release);
  CHECK(m.transformer.h[1].mlp.c_proj.weight.float_released());
  CHECK(m.transformer.h[0].attn.c_attn.weight.float_released());
  CHECK(m.transformer.wte.weight.float_released());  // its rows read out of the head's packed copy
  CHECK_FALSE(m.transformer.wpe.weight.float_released());
  CHECK_FALSE(m.transformer.h[0].attn.c_attn.bias.float_released());
  CHECK(m.num_parameters() == parameters);
  m.pack_weights(ef::FloatWeights::release);  // again: nothing to do for the released weights

  const auto& c = gpt2_case("model");
  const auto ids = ids_of(c.at("inputs").at("input_ids"));  // (2, 9)
  const auto full = m.forward(ids);
  CHECK(full.to_vector() == kept.forward(ids).to_vector());
  check_gpt2(full, c.at("logits"), "weights held only packed, full forward");
  const auto expected = to_tensor<float, 3>(c.at("logits"));
  auto cache = m.make_cache(2, 9);
  m.forward(ids.narrow(1, 0, 4).contiguous(), cache);
  std::size_t steps = 0;
  for (index_t t = 4; t < 9; ++t) {
    const auto got = m.forward(ids.narrow(1, t, 1).contiguous(), cache);
    check_tensors_close(got, expected.narrow(1, t, 1), gpt2_rtol, gpt2_atol,
                        "weights held only packed, cached step at position " + std::to_string(t));
    ++steps;
  }
  check_ran(steps, 5, "cached steps");
  for (const char* name : {"greedy", "greedy_eos"}) {
    const auto& g_case = gpt2_case(name);
    models::GenerationConfig g;
    g.max_new_tokens = g_case.at("max_new_tokens").get<index_t>();
    if (!g_case.at("eos_token_id").is_null()) g.eos_token_id = g_case.at("eos_token_id").get<std::int64_t>();
    CHECK_MESSAGE(models::generate(m, ids_of(g_case.at("prompt")), g).to_vector() == ids_of(g_case.at("out")).to_vector(),
                  name);
  }

  m.train();
  CHECK_THROWS_WITH_AS(m.forward(ids), doctest::Contains("held only as packed"), std::logic_error);
  m.eval();
  CHECK_THROWS_WITH_AS(ef::io::state_dict(m), doctest::Contains("\"transformer.wte.weight\" [61, 12] is held only as packed"),
                       ef::io::checkpoint_error);
  CHECK_THROWS_WITH_AS(ef::train::AdamW<float>(m.named_parameters()), doctest::Contains("held only as packed"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.to_bf16_weights(), doctest::Contains("held only packed"), std::logic_error);
  CHECK(std::isnan(m.transformer.h[0].mlp.c_fc.weight.data(0, 0)));

  // The head alone cannot drop the only copy of the table it shares with wte.
  CHECK_THROWS_WITH_AS(m.lm_head.unpack_weights(m.transformer.wte.weight), doctest::Contains("use_float_table"),
                       std::logic_error);
  // unpack_weights undoes it: every weight's float values back bit for bit (wte's out of the head's copy),
  // no packed copy left, and a model that saves and trains again.
  m.unpack_weights();
  CHECK(m.lm_head.packed_weight() == nullptr);
  CHECK(m.transformer.h[0].attn.c_attn.packed_weight() == nullptr);
  CHECK_FALSE(m.transformer.wte.weight.float_released());
  check_same_parameters(m, kept, "GPT-2 after unpack_weights");
  CHECK(m.forward(ids).to_vector() == kept.forward(ids).to_vector());
  CHECK_NOTHROW(ef::io::state_dict(m));
  m.train();
  CHECK_NOTHROW(m.forward(ids));
}
