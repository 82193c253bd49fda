// The layer fixtures (tests/data/nn_layers.json, written by tools/reference/make_nn_fixtures.py): looking up
// a case, loading its recorded parameters into a module by state-dict name, and comparing outputs and
// gradients with a stated tolerance while recording the largest errors.
//
// Set EIGENFORMER_REPORT_ERRORS=1 to print, for every comparison, the max absolute error and the max
// relative error (over elements with |expected| >= 1e-3; smaller ones, which float rounding of their
// O(1) summands makes relatively inexact, only count in the absolute error).
#pragma once

#include <cstdlib>
#include <iostream>

#include "support/fixtures.hpp"

namespace eftest {

// The float64 fixtures (cases named *_f64: PyTorch run in double on inputs and parameters that no float32
// equals) against the double layers. Both sides compute the same formulas in double; GEMM sums run in another
// order and exp/erf/tanh come from other implementations, each step within a few double ulps (2^-52 ~
// 2.2e-16), a forward plus backward chaining some ten of them: measured at most 1.3e-15 absolute and 3.8e-14
// relative (entries >= 1e-3; 3.1e-13 on one Linear weight gradient of 3e-3 that cancels, which the absolute
// floor holds). 1e-12 relative and 1e-13 absolute leave a margin of 25x and more, yet a layer that computes
// any step (or rounds any constant) in float is off by ~1e-8 and fails. The absolute floor covers entries
// that cancel to near 0 from O(1) summands.
inline constexpr double f64_rtol = 1e-12;
inline constexpr double f64_atol = 1e-13;

inline const json& nn_case(const std::string& name) {
  static const json file = load_fixture("nn_layers.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("nn_layers.json: no case named " + name);
}

// Copies every recorded parameter into the module's parameter of the same dotted name; each recorded
// parameter must exist with the same shape, and every module parameter must be recorded.
template <typename T>
void load_params(ef::nn::Module<T>& m, const json& c) {
  const auto& params = c.at("params");
  auto named = m.named_parameters();
  REQUIRE(named.size() == params.size());
  for (auto& p : named) {
    INFO(p.name);
    REQUIRE(params.contains(p.name));
    REQUIRE(shape_of(params.at(p.name)) == p.shape);
    const auto values = values_of(params.at(p.name));
    for (std::size_t i = 0; i < values.size(); ++i) p.data(static_cast<index_t>(i)) = static_cast<T>(values[i]);
  }
}

// The fixture tensor with its recorded rank.
template <typename T, std::size_t R>
ef::Tensor<T, R> fx(const json& t) {
  REQUIRE(shape_of(t).size() == R);
  return to_tensor<T, R>(t);
}

struct error_stats {
  double max_abs = 0, max_rel = 0;
};

// The expected values as the element type holds them: float fixtures store the shortest decimal of each
// float32, which is the float32 only after rounding to float.
template <typename T>
std::vector<double> expected_values(const json& expected) {
  auto e = values_of(expected);
  for (auto& v : e) v = static_cast<double>(static_cast<T>(v));
  return e;
}

template <typename T, std::size_t R>
error_stats errors_of(const ef::Tensor<T, R>& actual, const json& expected) {
  const auto a = actual.to_vector();
  const auto e = expected_values<T>(expected);
  error_stats s;
  for (std::size_t i = 0; i < e.size() && i < a.size(); ++i) {
    if (!std::isfinite(e[i])) continue;
    const double d = std::abs(static_cast<double>(a[i]) - e[i]);
    s.max_abs = std::max(s.max_abs, d);
    if (std::abs(e[i]) >= 1e-3) s.max_rel = std::max(s.max_rel, d / std::abs(e[i]));
  }
  return s;
}

// |actual - expected| <= atol + rtol * |expected| element-wise (inf and nan must match exactly), and the
// errors reported when EIGENFORMER_REPORT_ERRORS is set.
template <typename T, std::size_t R>
void check_fixture(const ef::Tensor<T, R>& actual, const json& expected, double rtol, double atol,
                   const std::string& what) {
  INFO(what);
  REQUIRE_MESSAGE(same_padded_shape(actual.shape(), shape_of(expected)),
                  "shape " << ef::shape_string(actual.shape()) << " vs expected " << ef::shape_string(shape_of(expected)));
  const auto a = actual.to_vector();
  const auto e = expected_values<T>(expected);
  int bad = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = e[i];
    const bool ok = (std::isnan(y) && std::isnan(x)) || (std::isinf(y) && x == y) ||
                    (std::isfinite(y) && std::abs(x - y) <= atol + rtol * std::abs(y));
    if (!ok && bad++ < 5) FAIL_CHECK("element " << i << ": " << x << " vs expected " << y);
  }
  CHECK(bad == 0);
  if (std::getenv("EIGENFORMER_REPORT_ERRORS")) {
    const auto s = errors_of(actual, expected);
    std::cout << "[fixture error] " << what << ": max abs " << s.max_abs << ", max rel " << s.max_rel << "\n";
  }
}

// Every recorded parameter gradient against the module's .grad() of the same name.
template <typename T>
void check_param_grads(ef::nn::Module<T>& m, const json& c, double rtol, double atol) {
  const auto& grads = c.at("grads");
  for (auto& p : m.named_parameters()) {
    REQUIRE_MESSAGE(grads.contains(p.name), p.name);
    REQUIRE(shape_of(grads.at(p.name)) == p.shape);
    json flat = grads.at(p.name);  // compared flat: p.grad() is the parameter's rank-1 view
    flat["shape"] = std::vector<index_t>{p.grad().numel()};
    check_fixture(p.grad(), flat, rtol, atol, c.at("name").get<std::string>() + " d" + p.name);
  }
}

// A float64 case against module m at double precision: loads the recorded parameters, runs forward on
// inputs.x in training mode and backward of the probe, and checks the output, dx and every parameter gradient.
template <class M>
void check_f64_case(M& m, const json& c) {
  const std::string name = c.at("name");
  load_params(m, c);
  m.train();
  const auto x = fx<double, 3>(c.at("inputs").at("x"));
  check_fixture(m.forward(x), c.at("out"), f64_rtol, f64_atol, name + " forward");
  check_fixture(m.backward(fx<double, 3>(c.at("probe"))), c.at("grads").at("x"), f64_rtol, f64_atol, name + " dx");
  check_param_grads(m, c, f64_rtol, f64_atol);
}

}  // namespace eftest
