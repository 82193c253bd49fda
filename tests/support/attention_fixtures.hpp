// The attention fixtures (tests/data/nn_attention.json, written by tools/reference/make_attention_fixtures.py)
// and the checks the attention and Transformer block tests share.
//
// Tolerance against PyTorch: 1e-5 relative plus 1e-6 absolute, for float and double alike. Both libraries
// compute the same formulas in float32 (the fixtures are PyTorch float32 runs, and their parameters and
// inputs are exact float32 values, so the double implementation starts from the same numbers). What differs
// is the rounding: GEMMs accumulate in another order (Eigen's blocking vs ATen's), exp comes from another
// implementation, and a forward plus backward chains some ten such steps, each within a few float ulps
// (2^-23 ~ 1.2e-7), giving observed errors of ~1e-6 relative; 1e-5 keeps a 10x margin without letting a
// wrong formula through (a wrong mask, scale or transpose is off by O(1)). The absolute floor covers entries
// that are sums of O(1) terms cancelling to near zero, whose error is that of the terms, not of the result.
// The float64 cases (*_f64: PyTorch run in double) are held to double precision instead, f64_rtol and
// f64_atol (support/nn_fixtures.hpp, which says why); check_attn picks by the fixture's dtype.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <type_traits>

#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"

namespace eftest {

inline constexpr double attn_rtol = 1e-5;
inline constexpr double attn_atol = 1e-6;

inline const json& attention_case(const std::string& name) {
  static const json file = load_fixture("nn_attention.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("nn_attention.json: no case named " + name);
}

// The case holding c's parameters: eval cases share them with their training twin ("params_from").
inline const json& params_case(const json& c) {
  return c.contains("params_from") ? attention_case(c.at("params_from").get<std::string>()) : c;
}

inline std::string case_name(const json& c) { return c.at("name").get<std::string>(); }

template <typename T>
std::string type_tag() {
  return std::is_same_v<T, float> ? " [float]" : " [double]";
}

// check_fixture at the attention tolerance (double precision for a float64 fixture). With EIGENFORMER_REPORT_ERRORS set it also prints the largest
// |expected|, so that errors can be read relative to the tensor's scale (the per-element relative error
// of entries that cancel to near zero says little).
template <typename T, std::size_t R>
void check_attn(const ef::Tensor<T, R>& actual, const json& expected, const std::string& what) {
  const bool f64 = expected.at("dtype") == "float64";
  check_fixture(actual, expected, f64 ? f64_rtol : attn_rtol, f64 ? f64_atol : attn_atol, what);
  if (std::getenv("EIGENFORMER_REPORT_ERRORS")) {
    double m = 0;
    for (const double e : values_of(expected))
      if (std::isfinite(e)) m = std::max(m, std::abs(e));
    std::cout << "[fixture scale] " << what << ": max |expected| " << m << "\n";
  }
}

// Every recorded parameter gradient against the module's .grad of the same name.
template <typename T>
void check_attn_param_grads(ef::nn::Module<T>& m, const json& c) {
  const auto& grads = c.at("grads");
  for (auto& p : m.named_parameters()) {
    REQUIRE_MESSAGE(grads.contains(p.name), p.name);
    json flat = grads.at(p.name);  // compared flat: p.grad() is the parameter's rank-1 view
    flat["shape"] = std::vector<index_t>{p.data.numel()};
    REQUIRE_MESSAGE(p.has_grad(), p.name);
    check_attn(p.grad(), flat, case_name(c) + type_tag<T>() + " d" + p.name);
  }
}

// Loads the case's parameters into m, runs forward (reseeding the default generator with forward_seed
// first, as the fixture script did) in the case's mode, compares the output and, for a training case,
// backward of the recorded probe against the input and parameter gradients. `forward(m, x)` runs the
// module on x (with whatever mask the case has).
template <typename T, class M, class Forward>
void run_module_case(M& m, const json& c, Forward&& forward) {
  const std::string name = case_name(c) + type_tag<T>();
  load_params(m, params_case(c));
  const bool train = c.at("train").get<bool>();
  m.train(train);
  m.zero_grad();
  const auto x = fx<T, 3>(c.at("inputs").at("x"));
  if (train && !c.at("forward_seed").is_null()) ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());
  const auto y = forward(m, x);
  check_attn(y, c.at("out"), name + " forward");
  if (!train) return;
  const auto dx = m.backward(fx<T, 3>(c.at("probe")));
  check_attn(dx, c.at("grads").at("x"), name + " dx");
  check_attn_param_grads(m, c);
}

// Central finite differences (double) of sum(forward(m, x) * probe) against m.backward, for the input and
// every parameter. The module must be deterministic in training mode (dropout 0): the differences are
// taken in eval mode, which then computes the same function.
template <class M, class Forward>
void check_module_gradients(M& m, ef::Tensor<double, 3> x, Forward&& forward, const std::string& what) {
  m.train();
  m.zero_grad();
  const auto y = forward(m, x);
  const auto probe = ef::randn<double>(y.shape());
  const auto dx = m.backward(probe);
  auto f = [&] {
    m.eval();
    auto out = forward(m, x);
    m.train();
    return out;
  };
  check_tensors_close(dx, numerical_gradient(f, x, probe), 1e-6, 1e-8, what + " dx");
  for (auto& p : m.named_parameters())
    check_tensors_close(p.grad(), numerical_gradient(f, p.data, probe), 1e-6, 1e-8, what + " d" + p.name);
}

}  // namespace eftest
