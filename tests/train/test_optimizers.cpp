// train::AdamW, train::SGD, train::clip_grad_norm and the schedules: PyTorch fixtures (tests/data/train.json),
// invariants, bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <eigenformer/train.hpp>

#include "support/errors.hpp"
#include "support/thread_counts.hpp"
#include "support/train_fixtures.hpp"

using namespace eftest;
namespace nn = ef::nn;
namespace train = ef::train;

namespace {

// A few free-standing parameters named like a layer's, with flat views as named_parameters() gives them.
template <typename T>
struct Params {
  std::vector<nn::Parameter<T, 2>> matrices;
  std::vector<nn::Parameter<T, 1>> vectors;
  nn::ParameterList<T> list;
};

// The case's initial parameters ("weight" (3, 4), or (2, 131) in one AdamW case, and "bias" (4)) as a
// ParameterList.
template <typename T>
Params<T> params_of(const json& c) {
  Params<T> p;
  p.matrices.emplace_back(to_tensor<T, 2>(c.at("params").at("weight")));
  p.vectors.emplace_back(to_tensor<T, 1>(c.at("params").at("bias")));
  add_named(p.list, "weight", p.matrices[0]);
  add_named(p.list, "bias", p.vectors[0]);
  return p;
}

template <typename T>
void set_grads(nn::ParameterList<T>& list, const json& grads) {
  for (auto& p : list) {
    const auto values = values_of(grads.at(p.name));
    auto g = p.grad_buffer();
    REQUIRE(static_cast<index_t>(values.size()) == g.numel());
    for (std::size_t i = 0; i < values.size(); ++i) g(static_cast<index_t>(i)) = static_cast<T>(values[i]);
  }
}

// Bitwise equality of float32 values (so -0 vs 0 and NaN payloads would count too).
void check_bits(const ef::Tensor<float, 1>& actual, const json& expected, const std::string& what) {
  INFO(what);
  const auto e = expected_values<float>(expected);
  REQUIRE(static_cast<index_t>(e.size()) == actual.numel());
  int bad = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const float a = actual(static_cast<index_t>(i)), x = static_cast<float>(e[i]);
    if (std::memcmp(&a, &x, sizeof(float)) != 0 && bad++ < 5)
      FAIL_CHECK("element " << i << ": " << a << " vs expected " << x << " (diff " << (a - x) << ")");
  }
  CHECK(bad == 0);
}

train::AdamWOptions adamw_options(const json& config) {
  return {.lr = config.at("lr").get<double>(),
          .beta1 = config.at("beta1").get<double>(),
          .beta2 = config.at("beta2").get<double>(),
          .eps = config.at("eps").get<double>(),
          .weight_decay = config.at("weight_decay").get<double>(),
          .amsgrad = config.at("amsgrad").get<bool>()};
}

train::SGDOptions sgd_options(const json& config) {
  return {.lr = config.at("lr").get<double>(),
          .momentum = config.at("momentum").get<double>(),
          .dampening = config.at("dampening").get<double>(),
          .weight_decay = config.at("weight_decay").get<double>(),
          .nesterov = config.at("nesterov").get<bool>()};
}

// Runs the recorded gradient sequence through `opt` and compares every parameter after every step, bit for bit.
template <typename Opt>
void check_trajectory(const json& c, Params<float>& p, Opt& opt) {
  const auto& grads = c.at("grads");
  const auto& after = c.at("after");
  REQUIRE(grads.size() == 5);
  for (std::size_t step = 0; step < grads.size(); ++step) {
    opt.zero_grad();
    set_grads(p.list, grads[step]);
    opt.step();
    for (auto& q : p.list)
      check_bits(q.data, after[step].at(q.name),
                 c.at("name").get<std::string>() + " step " + std::to_string(step + 1) + " " + q.name);
  }
}

}  // namespace

// Same float operations in the same order as torch 1.13's _single_tensor_adamw (see optimizers.hpp), so
// every bit of every parameter agrees after each of the 5 steps, including amsgrad and a zero-gradient row.
TEST_CASE("AdamW: float32 trajectories equal torch.optim.AdamW bit for bit (fixture)") {
  for_each_train_case("adamw", [&](const std::string& name, const json& c) {
    INFO(name);
    auto p = params_of<float>(c);
    train::AdamW<float> opt(p.list, adamw_options(c.at("config")));
    check_trajectory(c, p, opt);
    CHECK(opt.steps_taken() == 5);
  });
}

TEST_CASE("SGD: float32 trajectories equal torch.optim.SGD bit for bit (fixture)") {
  for_each_train_case("sgd", [&](const std::string& name, const json& c) {
    INFO(name);
    auto p = params_of<float>(c);
    train::SGD<float> opt(p.list, sgd_options(c.at("config")));
    check_trajectory(c, p, opt);
  });
}

TEST_CASE("AdamW: nanoGPT-style groups decay matrices only; set_lr; the step really is decoupled") {
  auto run = [](bool split) {
    nn::Parameter<double, 2> w(ef::full<double>(ef::Shape<2>{2, 2}, 1.0));
    nn::Parameter<double, 1> b(ef::full<double>(ef::Shape<1>{2}, 1.0));
    nn::ParameterList<double> list;
    add_named(list, "weight", w);
    add_named(list, "bias", b);
    train::AdamWOptions o{.lr = 0.1, .weight_decay = 0.5};
    auto opt = split ? train::AdamW<double>(list, o, train::decays_by_default<double>) : train::AdamW<double>(list, o);
    for (auto& q : list) q.grad_buffer();  // as after a backward that contributed zeros
    opt.step();  // zero gradients: Adam's update is 0 / (0 + eps) = 0, only the decay moves anything
    return std::pair{w.data(0, 0), b.data(0)};
  };
  const auto [w_all, b_all] = run(false);
  CHECK(w_all == doctest::Approx(1.0 - 0.1 * 0.5));
  CHECK(b_all == doctest::Approx(1.0 - 0.1 * 0.5));
  const auto [w_split, b_split] = run(true);
  CHECK(w_split == doctest::Approx(0.95));
  CHECK(b_split == 1.0);

  nn::Parameter<float, 1> p(ef::full<float>(ef::Shape<1>{1}, 0.f));
  nn::ParameterList<float> list;
  add_named(list, "p", p);
  train::AdamW<float> opt(list, {.lr = 0.25, .weight_decay = 0});
  REQUIRE(opt.groups().size() == 1);
  opt.set_lr(0.5);
  list[0].grad_buffer()(0) = 3.f;
  opt.step();  // the first Adam step is lr * sign(g) (up to eps): m_hat = g, sqrt(v_hat) = |g|
  CHECK(p.data(0) == doctest::Approx(-0.5).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm: total norm and clipped gradients match torch.nn.utils.clip_grad_norm_ (fixture)") {
  for_each_train_case("clip_grad_norm", [&](const std::string& name, const json& c) {
    INFO(name);
    Params<float> p;
    p.matrices.emplace_back(ef::zeros<float>({3, 4}));
    p.vectors.emplace_back(ef::zeros<float>({4}));
    add_named(p.list, "weight", p.matrices[0]);
    add_named(p.list, "bias", p.vectors[0]);
    set_grads(p.list, c.at("grads"));
    const float total = train::clip_grad_norm(p.list, c.at("config").at("max_norm").get<double>());
    // The sum of 16 squares: eigenformer accumulates in double and rounds once, torch accumulates per
    // tensor in float, so the norm (and through it the coefficient) may differ by a float ulp or two.
    check_fixture(ef::Tensor<float, 0>(total), c.at("total_norm"), 3e-7, 0, name + " total norm");
    for (auto& q : p.list) {
      json flat = c.at("clipped").at(q.name);  // compared flat: q.grad() is the parameter's rank-1 view
      flat["shape"] = std::vector<index_t>{q.grad().numel()};
      check_fixture(q.grad(), flat, 5e-7, 0, name + " clipped " + q.name);
    }
  });
}

TEST_CASE("clip_grad_norm: no clipping below max_norm, zero gradients stay zero") {
  nn::Parameter<double, 1> a(ef::zeros<double>({2}));
  nn::ParameterList<double> list;
  add_named(list, "a", a);
  a.grad_buffer()(0) = 3;
  a.grad_buffer()(1) = 4;
  CHECK(train::clip_grad_norm(list, 10.0) == 5.0);
  CHECK(a.grad()(0) == 3.0);
  CHECK(train::clip_grad_norm(list, 1.0) == 5.0);
  CHECK(a.grad()(1) == doctest::Approx(0.8));
  a.zero_grad();
  CHECK(train::clip_grad_norm(list, 1.0) == 0.0);
  CHECK(a.grad()(0) == 0.0);
}

// Gradients longer than clip_grad_norm's fixed runs (2^16 values): the runs are summed on the pool, and the
// norm and the clipped gradients have the same bits for 1 to 4 threads. Against a double sum of the squares
// taken in one pass, every value checked relative to its own size (Approx's scale 0). Only the order of the
// double additions differs (~1e-11 relative over 211,000 terms), so the float norm, rounded once from double,
// lies within half a float ulp (2^-24) of the exact one: checked to 2^-23. Each clipped value is g * coef with
// coef = (1 / norm) * max_norm in float: three roundings after the norm's, each within 2^-24 relative, so
// within 4 x 2^-24 = 2.4e-7 of g * max_norm / sqrt(sum): checked to 2.5e-7. zero_grad (on the pool as well)
// then zeroes every value.
TEST_CASE("clip_grad_norm and zero_grad: long gradients on 1 to 4 threads, the same bits") {
  ef::Generator gen(5);
  nn::Parameter<float, 2> w(ef::zeros<float>({300, 700}));  // 210,000 values: four runs, the last partial
  nn::Parameter<float, 1> b(ef::zeros<float>({1000}));
  nn::ParameterList<float> list;
  add_named(list, "weight", w);
  add_named(list, "bias", b);
  const auto gw = ef::randn<float>({300, 700}, gen);
  const auto gb = ef::randn<float>({1000}, gen);
  REQUIRE(w.numel() > 3 * train::detail::grad_norm_run);
  double sq = 0;
  for (const float x : gw.to_vector()) sq += double(x) * x;
  for (const float x : gb.to_vector()) sq += double(x) * x;
  const auto one = check_same_bits_on_thread_counts([&] {
    w.grad_buffer().copy_(gw);
    b.grad_buffer().copy_(gb);
    const float norm = train::clip_grad_norm(list, 100.0);  // the norm is ~459: clipping scales every value
    std::vector<float> out = w.grad().to_vector();
    const auto tail = b.grad().to_vector();
    out.insert(out.end(), tail.begin(), tail.end());
    out.push_back(norm);
    return out;
  });
  CHECK(double(one.back()) == doctest::Approx(std::sqrt(sq)).epsilon(0x1p-23).scale(0));
  // Every scaled value, by its worst relative error against x * factor (one assertion, not 211,000).
  auto worst_relative_error = [](const std::vector<float>& got, const std::vector<float>& x, double factor) {
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double want = double(x[i]) * factor;
      if (want != 0) worst = std::max(worst, std::abs(double(got[i]) - want) / std::abs(want));
    }
    return worst;
  };
  std::vector<float> unclipped = gw.to_vector();
  const auto gb_values = gb.to_vector();
  unclipped.insert(unclipped.end(), gb_values.begin(), gb_values.end());
  REQUIRE(one.size() == unclipped.size() + 1);
  CHECK(worst_relative_error(one, unclipped, 100.0 / std::sqrt(sq)) <= 2.5e-7);
  // The same parameter passed twice is counted and scaled twice, as torch's loop does, with the same bits on
  // 1 and 3 threads (its runs are then scaled on one thread, never by two at once).
  nn::ParameterList<float> twice;
  add_named(twice, "weight", w);
  add_named(twice, "weight_again", w);
  const auto twice_one = check_same_bits_on_thread_counts(
      [&] {
        w.grad_buffer().copy_(gw);
        const float norm = train::clip_grad_norm(twice, 100.0);
        std::vector<float> out = w.grad().to_vector();
        out.push_back(norm);
        return out;
      },
      {3});
  double sq_w = 0;
  for (const float x : gw.to_vector()) sq_w += double(x) * x;
  CHECK(double(twice_one.back()) == doctest::Approx(std::sqrt(2 * sq_w)).epsilon(0x1p-23).scale(0));
  // Scaled twice by the same float coef: its two roundings (counted twice, as coef is squared) and those of
  // the two products, 6 x 2^-24 = 3.6e-7 against the exact coef from the float norm.
  const double coef = 100.0 / double(twice_one.back());
  const auto gw_values = gw.to_vector();
  REQUIRE(twice_one.size() == gw_values.size() + 1);
  CHECK(worst_relative_error(twice_one, gw_values, coef * coef) <= 3.7e-7);
  const eftest::RestoreThreadCount restore_threads;
  ef::set_num_threads(2);
  train::AdamW<float> opt(list, {});
  opt.zero_grad();
  index_t nonzero = 0;
  for (const float x : w.grad().to_vector()) nonzero += x != 0.0f;
  for (const float x : b.grad().to_vector()) nonzero += x != 0.0f;
  CHECK(nonzero == 0);
}

// torch.optim skips every p whose p.grad is None: no decay, no moments, and its step count (AdamW's bias
// corrections) starts at its own first gradient. A frozen parameter is skipped even if it holds a gradient.
TEST_CASE("optimizers: parameters without a gradient, or frozen, are left alone; state starts lazily") {
  for (const bool adamw : {true, false}) {
    INFO((adamw ? "AdamW" : "SGD"));
    nn::Parameter<double, 1> a(ef::full<double>(ef::Shape<1>{2}, 1.0)), b(ef::full<double>(ef::Shape<1>{2}, 1.0)),
        c(ef::full<double>(ef::Shape<1>{2}, 1.0));
    nn::ParameterList<double> list;
    add_named(list, "a", a);
    add_named(list, "b", b);
    add_named(list, "c", c);
    train::AdamW<double> adam(list, {.lr = 0.1, .weight_decay = 0.5});
    train::SGD<double> sgd(list, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5});
    auto step = [&] { adamw ? adam.step() : sgd.step(); };
    c.grad_buffer().fill_(1.0);
    c.requires_grad_(false);
    step();  // nothing has a usable gradient
    CHECK_FALSE(a.has_grad());
    CHECK(ef::sum(a.data).item() == 2.0);
    CHECK(ef::sum(c.data).item() == 2.0);
    adamw ? adam.zero_grad() : sgd.zero_grad();
    CHECK_FALSE(a.has_grad());  // zero_grad allocates nothing
    CHECK(c.grad()(0) == 0.0);
    a.grad_buffer().fill_(1.0);
    step();  // a's first step, b still without a gradient
    CHECK(ef::sum(b.data).item() == 2.0);
    CHECK(ef::sum(c.data).item() == 2.0);
    // a fresh optimizer taking one step on a is a's first step too: the same update, bit for bit
    nn::Parameter<double, 1> fresh(ef::full<double>(ef::Shape<1>{2}, 1.0));
    nn::ParameterList<double> one;
    add_named(one, "fresh", fresh);
    fresh.grad_buffer().fill_(1.0);
    if (adamw) train::AdamW<double>(one, {.lr = 0.1, .weight_decay = 0.5}).step();
    else train::SGD<double>(one, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5}).step();
    CHECK(a.data(0) == fresh.data(0));
    CHECK(a.data(0) != 1.0);
  }
}

// The Python formulas (Hugging Face's lambdas, nanoGPT's get_lr) in double: the same operations in the same
// order, so equal to the last bit when no FMA is contracted; 1e-15 relative leaves room for a build that
// fuses nanoGPT's min_lr + coeff * (lr - min_lr).
TEST_CASE("schedules: values match the Hugging Face and nanoGPT formulas (fixture)") {
  for_each_train_case("schedule", [&](const std::string& name, const json& c) {
    INFO(name);
    const auto& cfg = c.at("config");
    const auto steps = c.at("steps").get<std::vector<std::int64_t>>();
    const auto& values = c.at("values");
    const std::string kind = c.at("schedule");
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto s = steps[i];
      const auto warmup = cfg.at("warmup").get<std::int64_t>();
      double v = 0;
      if (kind == "cosine_with_warmup") v = train::cosine_with_warmup(s, warmup, cfg.at("total").get<std::int64_t>());
      else if (kind == "linear_with_warmup") v = train::linear_with_warmup(s, warmup, cfg.at("total").get<std::int64_t>());
      else if (kind == "constant_with_warmup") v = train::constant_with_warmup(s, warmup);
      else if (kind == "nanogpt")
        v = train::nanogpt_lr(s, cfg.at("lr").get<double>(), cfg.at("min_lr").get<double>(), warmup,
                              cfg.at("decay_iters").get<std::int64_t>());
      else FAIL("unknown schedule " << kind);
      INFO("step " << s);
      CHECK(v == doctest::Approx(number(values[i])).epsilon(1e-15).scale(1e-3));
    }
  });
}

TEST_CASE("schedules: shape") {
  CHECK(train::cosine_with_warmup(0, 10, 100) == 0.0);
  CHECK(train::cosine_with_warmup(10, 10, 100) == 1.0);
  CHECK(train::cosine_with_warmup(55, 10, 100) == doctest::Approx(0.5));
  CHECK(train::cosine_with_warmup(100, 10, 100) == doctest::Approx(0.0));
  CHECK(train::linear_with_warmup(120, 10, 100) == 0.0);
  CHECK(train::constant_with_warmup(3) == 1.0);
  CHECK(train::nanogpt_lr(0, 1e-3, 1e-4, 10, 100) == doctest::Approx(1e-3 / 11));
  CHECK(train::nanogpt_lr(10, 1e-3, 1e-4, 10, 100) == 1e-3);
  CHECK(train::nanogpt_lr(1000, 1e-3, 1e-4, 10, 100) == 1e-4);
}

TEST_CASE("optimizers and schedules: bad input") {
  nn::Parameter<float, 1> p(ef::zeros<float>({3}));
  nn::ParameterList<float> list;
  add_named(list, "p", p);
  CHECK(error_of<std::invalid_argument>([&] { train::AdamW<float>(list, {.lr = -1}); }) == "AdamW: lr must be >= 0, got -1.000000");
  CHECK(error_of<std::invalid_argument>([&] { train::AdamW<float>(list, {.beta1 = 1.0}); }) == "AdamW: beta1 must be in [0, 1), got 1.000000");
  CHECK(error_of<std::invalid_argument>([&] { train::AdamW<float>(list, {.beta2 = -0.1}); }) == "AdamW: beta2 must be in [0, 1), got -0.100000");
  CHECK(error_of<std::invalid_argument>([&] { train::AdamW<float>(list, {.weight_decay = -0.1}); }) ==
        "AdamW: weight_decay must be >= 0, got -0.100000");
  CHECK(error_of<std::invalid_argument>([&] { train::SGD<float>(list, {.momentum = 0, .nesterov = true}); }) ==
        "SGD: nesterov needs momentum > 0 and dampening 0");
  auto bad = list;
  bad[0].state = nullptr;
  CHECK(error_of<std::invalid_argument>([&] { train::AdamW<float>{bad}; }) ==
        "AdamW: parameter p has no gradient state (build the list with Module::named_parameters())");
  CHECK(error_of<std::invalid_argument>([&] { train::clip_grad_norm(list, -1.0); }) == "clip_grad_norm: max_norm must be >= 0, got -1.000000");
  CHECK(error_of<std::invalid_argument>([] { train::cosine_with_warmup(-1, 10, 100); }) == "cosine_with_warmup: step must be >= 0, got -1");
  CHECK(error_of<std::invalid_argument>([] { train::linear_with_warmup(1, -2, 100); }) == "linear_with_warmup: warmup must be >= 0, got -2");
  CHECK(error_of<std::invalid_argument>([] { train::nanogpt_lr(1, 1e-3, 1e-4, 10, 10); }) ==
        "nanogpt_lr: decay_iters (10) must be greater than warmup (10)");
}
