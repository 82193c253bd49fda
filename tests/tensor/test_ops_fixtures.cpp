// Every case of tests/data/ops.json (PyTorch 1.13, scalar ATen kernels, one thread; written by
// tools/reference/make_fixtures.py) against eigenformer, one TEST_CASE per op family.
//
// To keep this translation unit cheap, fixture tensors are padded to rank 4 with leading size-1 dims
// (to_tensor<T, 4>), which leaves broadcasting, reductions and views unchanged; a non-negative dim d of a
// rank-r fixture becomes d + 4 - r, negative dims count from the end and stay as they are. Only matmul
// with a 1-D operand needs the real rank (its rank rules differ), so it switches on it (float32 only: no
// float64 case has a 1-D operand); select keeps its meaning under padding (the selected dim moves with
// the padding). Outputs are compared up to leading size-1 dims, and the 0-d outputs of full reductions
// are Tensor<T, 0>. float64 cases (dtype "float64") run on double tensors. Every case is checked, by
// exactly one op family; an unknown op fails.
//
// Tolerances (rtol, atol), numpy.isclose style. Measured maxima (GCC 12, Eigen 3.4, -O1 and -O2
// -march=native alike; print them with EIGENFORMER_REPORT_ERRORS=1 in the environment) in brackets:
//   bit-exact: add sub mul div maximum minimum neg abs sqrt rsqrt, the tensor-scalar ops but pow,
//     comparisons, where, masked_fill, tril/triu, logical_and/or/not and ~, every shape/view op,
//     split/chunk/cat/stack, creation, max/min/argmax/argmin (ties: the first index; NaN: the first NaN),
//     and sum/mean (not var/std) / matmul on the quantised inputs (multiples of 1/64: exact in any
//     order). One correctly rounded IEEE operation per element (rsqrt: two, 1 / sqrt(x) as ATen), a
//     selection or a copy: nothing may differ, not even the sign of a zero, which is checked too.
//   exp log tanh, float32 (5e-7, 0) [1 ulp, rel 9.7e-8]: Eigen's vectorised polynomials vs libm, last bit.
//   pow erf sigmoid, float32 (2.5e-7, 0) [0; sigmoid 0 in float64 too]: libm on both sides (sigmoid is 1 / (1 + exp(-x)) with
//     libm's exp in ATen's scalar kernel and here); 2 ulps of slack for another libm.
//   sum mean var std on full-precision inputs (var std on any), float32 (1e-6, 1e-7) [rel 2.6e-7, abs
//     2.4e-7; std rel 1.1e-7, 1 ulp]: Eigen's vectorised summation order differs from ATen's, and ATen's
//     var/std use Welford's update; the absolute part covers sums that cancel. std = sqrt(var) halves the
//     relative error of var.
//   softmax log_softmax, float32 (1e-6, 1e-7) [rel 3.9e-7, abs 4.8e-7 on values ~1]: exp and sum order.
//   matmul on full-precision inputs, float32 (2e-6, 1e-6) [abs 4.8e-7, rel 1.2e-6 on a value 0.38]: GEMM
//     blocking / FMA order; the absolute part covers entries that cancel towards 0.
//   float64: transcendental (1e-14, 1e-15), libm incl. sigmoid (1e-15, 0), reductions incl. std (1e-14,
//     1e-14), softmax (1e-14, 1e-15), matmul (1e-13, 1e-14) [all measured <= 3e-15 relative, 9e-16
//     absolute]; min argmin rsqrt bit-exact as in float32.
#include <doctest/doctest.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "support/cases.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace eftest;

const json& ops_file() {
  static const json j = load_fixture("ops.json");
  return j;
}

const json& ops_cases() { return ops_file().at("cases"); }

// ---- tolerances ----------------------------------------------------------------------------------------
struct tol {
  double rtol = 0, atol = 0;
  bool exact() const { return rtol == 0 && atol == 0; }
};
constexpr tol bit_exact{};
constexpr tol transcendental_f32{5e-7, 0};  // Eigen exp/log/tanh vs libm: last-bit differences
constexpr tol transcendental_f64{1e-14, 1e-15};
constexpr tol libm_f32{2.5e-7, 0};  // powf / erff: libm on both sides, bit-equal here
constexpr tol libm_f64{1e-15, 0};
constexpr tol reduction_f32{1e-6, 1e-7};  // summation order differs (Eigen vs ATen)
constexpr tol reduction_f64{1e-14, 1e-14};
constexpr tol softmax_f32{1e-6, 1e-7};  // exp approximation + sum order
constexpr tol softmax_f64{1e-14, 1e-15};
constexpr tol matmul_f32{2e-6, 1e-6};  // GEMM blocking order
constexpr tol matmul_f64{1e-13, 1e-14};

template <typename T>
constexpr tol pick(tol f32, tol f64) {
  return std::is_same_v<T, double> ? f64 : f32;
}

// ---- measured errors, for the report ---------------------------------------------------------------------
struct error_stats {
  double max_abs = 0, max_rel = 0;
  std::int64_t max_ulp = 0;
  int cases = 0;
};
std::map<std::string, error_stats>& stats() {
  static std::map<std::string, error_stats> s;
  return s;
}

template <typename T>
std::int64_t ulp_distance(T a, T b) {
  using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  auto ordered = [](T x) {
    const auto i = std::bit_cast<I>(x);
    return static_cast<std::int64_t>(i < 0 ? std::numeric_limits<I>::min() - i : i);
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

void print_stats(const char* family) {
  if (!std::getenv("EIGENFORMER_REPORT_ERRORS")) return;
  std::printf("%s\n", family);
  for (const auto& [key, s] : stats())
    std::printf("  %-28s %3d outputs  max abs %.3g  max rel %.3g  max ulp %lld\n", key.c_str(), s.cases, s.max_abs,
                s.max_rel, static_cast<long long>(s.max_ulp));
  stats().clear();
}

template <typename T>
std::string dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else return "bool";
}

// An output reduced to what the comparison needs, so that the comparison itself is compiled once
// rather than per element type and rank.
struct observed {
  std::string dtype;
  std::vector<index_t> shape;
  std::vector<double> values;
  bool floating = false, single = false;
};

template <typename T, std::size_t R>
observed observe(const ef::Tensor<T, R>& t) {
  observed o{dtype_name<T>(), std::vector<index_t>(t.shape().begin(), t.shape().end()), {}, ef::floating_element<T>,
             std::is_same_v<T, float>};
  t.for_each_value([&](const T& v) { o.values.push_back(static_cast<double>(v)); });
  return o;
}

// Compares one output (dtype, shape up to leading 1s, values within tolerance as numpy.isclose, inf and
// nan exactly; when exact, also the sign of zeros) and records the error.
void compare_observed(const observed& a, const json& expected, tol t, const json& c) {
  const std::string name = c.at("name");
  INFO(name);
  CHECK_MESSAGE(expected.at("dtype") == a.dtype, "dtype");
  auto strip = [](std::vector<index_t> s) {
    while (!s.empty() && s.front() == 1) s.erase(s.begin());
    return s;
  };
  REQUIRE_MESSAGE(strip(a.shape) == strip(shape_of(expected)),
                  "shape " << ef::shape_string(a.shape) << " vs expected " << ef::shape_string(shape_of(expected)));
  const auto e = values_of(expected);
  REQUIRE(a.values.size() == e.size());
  auto& s = stats()[c.at("op").get<std::string>() + " " + a.dtype];
  ++s.cases;
  int bad = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double x = a.values[i], y = e[i];
    const bool ok = (std::isnan(y) && std::isnan(x)) || (std::isinf(y) && x == y) ||
                    (std::isfinite(y) && std::abs(x - y) <= t.atol + t.rtol * std::abs(y) &&
                     (!t.exact() || std::signbit(x) == std::signbit(y)));
    if (!ok && bad++ < 5) FAIL_CHECK("element " << i << ": " << x << " vs expected " << y);
    if (!std::isfinite(y)) continue;
    const double d = std::abs(x - y);
    s.max_abs = std::max(s.max_abs, d);
    if (y != 0) s.max_rel = std::max(s.max_rel, d / std::abs(y));
    if (a.floating)
      s.max_ulp = std::max(s.max_ulp, a.single ? ulp_distance(static_cast<float>(x), static_cast<float>(y))
                                               : ulp_distance(x, y));
  }
  CHECK_MESSAGE(bad == 0, bad << " elements differ");
}

template <typename T, std::size_t R>
void compare(const ef::Tensor<T, R>& actual, const json& expected, tol t, const json& c) {
  compare_observed(observe(actual), expected, t, c);
}

// ---- fixture plumbing ------------------------------------------------------------------------------------
std::size_t rank_of(const json& t) { return t.at("shape").size(); }

// A dim of a rank-`rank` fixture tensor, in the rank-4 padded tensor.
index_t pad_dim(index_t d, std::size_t rank) { return d >= 0 ? d + 4 - static_cast<index_t>(rank) : d; }
index_t pad_dim(const json& d, const json& input) { return pad_dim(d.get<index_t>(), rank_of(input)); }

template <typename T>
ef::Tensor<T, 4> in4(const json& c, std::size_t k = 0) {
  return to_tensor<T, 4>(c.at("inputs").at(k));
}

// The float dtype of a case: its first input's, or for creation ops the "dtype" arg.
std::string case_dtype(const json& c) {
  if (!c.at("inputs").empty()) {
    for (const auto& in : c.at("inputs"))
      if (in.at("dtype") == "float32" || in.at("dtype") == "float64") return in.at("dtype");
  }
  if (c.at("args").contains("dtype")) return c.at("args").at("dtype");
  return "float32";
}

// Calls f(T{}) with T = float or double according to the case's dtype.
template <class F>
void with_float_type(const json& c, F&& f) {
  const auto dt = case_dtype(c);
  if (dt == "float32") f(float{});
  else if (dt == "float64") f(double{});
  else FAIL("unexpected dtype " << dt << " in " << c.at("name").get<std::string>());
}

// float64 fixtures exist for a few ops only (add div pow mul_scalar exp sigmoid rsqrt sum min argmin var std
// softmax log_softmax matmul); the other ops are instantiated for float alone, which keeps this file's compile time down. A
// float64 case of such an op then fails as unknown rather than going unchecked.
template <typename T>
constexpr bool is_f64 = std::is_same_v<T, double>;

template <class F>
void with_float32(const json& c, F&& f) {
  const auto dt = case_dtype(c);
  if (dt == "float32") f(float{});
  else FAIL("only float32 is instantiated for " << c.at("op").get<std::string>() << ", got " << dt);
}

// Runs `check(case)` on every ops.json case whose op is in `ops`, then checks that each was handled
// (check returns false for an op it does not know) and that as many ran as ops.json declares for those ops.
template <class F>
void for_each_case(const std::set<std::string>& ops, F&& check) {
  std::size_t declared = 0, checked = 0;
  std::string names;
  for (const auto& op : ops) {
    declared += declared_cases(ops_file(), "ops.json", "op", op);
    names += (names.empty() ? "" : ", ") + op;
  }
  for (const auto& c : ops_cases()) {
    const std::string op = c.at("op");
    if (!ops.count(op)) continue;
    CAPTURE(c.at("name").get<std::string>());
    if (check(c)) ++checked;
    else FAIL_CHECK("unknown op " << op << " in case " << c.at("name").get<std::string>());
  }
  check_ran(checked, declared, "ops.json cases of " + names);
}

const std::set<std::string> binary_ops{"add", "sub", "mul", "div", "maximum", "minimum", "pow"};
const std::set<std::string> scalar_ops{"add_scalar", "sub_scalar",  "mul_scalar",
                                       "div_scalar", "rsub_scalar", "pow_scalar"};
const std::set<std::string> unary_ops{"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "abs", "neg"};
const std::set<std::string> mask_ops{"eq", "ne",    "lt",          "le",   "gt",  "ge",
                                     "gt_scalar", "where", "masked_fill", "tril", "triu"};
const std::set<std::string> reduction_ops{"sum", "mean", "max", "min", "argmax", "argmin", "var", "std"};
const std::set<std::string> logical_ops{"logical_and", "logical_or", "logical_not"};
const std::set<std::string> softmax_ops{"softmax", "log_softmax"};
const std::set<std::string> matmul_ops{"matmul", "matmul_bt", "matmul_at"};
const std::set<std::string> shape_ops{"transpose", "permute", "reshape", "select", "contiguous", "narrow",
                                      "slice",     "chunk",   "split",   "split_with_sizes", "cat", "stack"};
const std::set<std::string> creation_ops{"arange", "eye", "zeros", "ones", "full"};

// True when the case's inputs are all multiples of 1/64 (the generator's quantised inputs), on which
// sums and products are exact whatever the order.
bool quantised_inputs(const json& c) {
  for (const auto& in : c.at("inputs"))
    for (double v : values_of(in))
      if (std::isfinite(v) && v * 64 != std::round(v * 64)) return false;
  return true;
}

template <std::size_t N>
ef::Shape<N> padded_shape(const json& dims, index_t fill = 1) {
  const auto v = dims.get<std::vector<index_t>>();
  REQUIRE(v.size() <= N);
  ef::Shape<N> s{};
  for (std::size_t i = 0; i < N; ++i) s[i] = i < N - v.size() ? fill : v[i - (N - v.size())];
  return s;
}

}  // namespace

TEST_CASE("ops.json: binary ops with broadcasting (add sub mul div maximum minimum pow)") {
  for_each_case(binary_ops, [](const json& c) {
    bool known = true;
    with_float_type(c, [&]<typename T>(T) {
      const auto a = in4<T>(c, 0), b = in4<T>(c, 1);
      const std::string op = c.at("op");
      const json& out = c.at("out");
      // The operators and the named functions are both checked.
      if (op == "add") compare(a + b, out, bit_exact, c), compare(ef::add(a, b), out, bit_exact, c);
      else if (op == "div") compare(a / b, out, bit_exact, c), compare(ef::div(a, b), out, bit_exact, c);
      else if (op == "pow") compare(ef::pow(a, b), out, pick<T>(libm_f32, libm_f64), c);
      else if constexpr (!is_f64<T>) {
        if (op == "sub") compare(a - b, out, bit_exact, c), compare(ef::sub(a, b), out, bit_exact, c);
        else if (op == "mul") compare(a * b, out, bit_exact, c), compare(ef::mul(a, b), out, bit_exact, c);
        else if (op == "maximum") compare(ef::maximum(a, b), out, bit_exact, c);
        else if (op == "minimum") compare(ef::minimum(a, b), out, bit_exact, c);
        else known = false;
      } else {
        known = false;
      }
    });
    return known;
  });
  print_stats("binary ops");
}

TEST_CASE("ops.json: tensor-scalar ops (x + s, x - s, x * s, x / s, s - x, pow(x, s))") {
  for_each_case(scalar_ops, [](const json& c) {
    bool known = true;
    with_float_type(c, [&]<typename T>(T) {
      const auto x = in4<T>(c);
      const double s = number(c.at("args").at("scalar"));
      const std::string op = c.at("op");
      const json& out = c.at("out");
      if (op == "mul_scalar") compare(x * s, out, bit_exact, c), compare(s * x, out, bit_exact, c);
      else if constexpr (!is_f64<T>) {
        if (op == "add_scalar") compare(x + s, out, bit_exact, c), compare(s + x, out, bit_exact, c);
        else if (op == "sub_scalar") compare(x - s, out, bit_exact, c);
        else if (op == "div_scalar") compare(x / s, out, bit_exact, c);
        else if (op == "rsub_scalar") compare(s - x, out, bit_exact, c);
        else if (op == "pow_scalar") compare(ef::pow(x, s), out, libm_f32, c);
        else known = false;
      } else {
        known = false;
      }
    });
    return known;
  });
  print_stats("tensor-scalar ops");
}

TEST_CASE("ops.json: unary math (exp log sqrt rsqrt tanh erf sigmoid abs neg)") {
  for_each_case(unary_ops, [](const json& c) {
    bool known = true;
    with_float_type(c, [&]<typename T>(T) {
      const auto x = in4<T>(c);
      const std::string op = c.at("op");
      const json& out = c.at("out");
      const tol approx = pick<T>(transcendental_f32, transcendental_f64);
      if (op == "exp") compare(ef::exp(x), out, approx, c);
      else if (op == "sigmoid") compare(ef::sigmoid(x), out, pick<T>(libm_f32, libm_f64), c);
      else if (op == "rsqrt") compare(ef::rsqrt(x), out, bit_exact, c);
      else if constexpr (!is_f64<T>) {
        if (op == "log") compare(ef::log(x), out, approx, c);
        else if (op == "tanh") compare(ef::tanh(x), out, approx, c);
        else if (op == "sqrt") compare(ef::sqrt(x), out, bit_exact, c);
        else if (op == "erf") compare(ef::erf(x), out, libm_f32, c);
        else if (op == "abs") compare(ef::abs(x), out, bit_exact, c);
        else if (op == "neg") compare(ef::neg(x), out, bit_exact, c), compare(-x, out, bit_exact, c);
        else known = false;
      } else {
        known = false;
      }
    });
    return known;
  });
  print_stats("unary math");
}

TEST_CASE("ops.json: comparisons, where, masked_fill, tril and triu") {
  for_each_case(mask_ops, [](const json& c) {
    bool known = true;
    with_float32(c, [&]<typename T>(T) {
      const std::string op = c.at("op");
      const json& out = c.at("out");
      const json& args = c.at("args");
      if (op == "where") {
        const auto cond = to_tensor<bool, 4>(c.at("inputs").at(0));
        compare(ef::where(cond, in4<T>(c, 1), in4<T>(c, 2)), out, bit_exact, c);
      } else if (op == "masked_fill") {
        const auto mask = to_tensor<bool, 4>(c.at("inputs").at(1));
        compare(ef::masked_fill(in4<T>(c, 0), mask, number(args.at("value"))), out, bit_exact, c);
      } else if (op == "tril") {
        compare(ef::tril(in4<T>(c), args.at("diagonal").get<index_t>()), out, bit_exact, c);
      } else if (op == "triu") {
        compare(ef::triu(in4<T>(c), args.at("diagonal").get<index_t>()), out, bit_exact, c);
      } else if (op == "gt_scalar") {
        const double s = number(args.at("scalar"));
        compare(ef::gt(in4<T>(c), s), out, bit_exact, c);
        compare(in4<T>(c) > s, out, bit_exact, c);
      } else {
        const auto a = in4<T>(c, 0), b = in4<T>(c, 1);
        if (op == "eq") compare(ef::eq(a, b), out, bit_exact, c);
        else if (op == "ne") compare(ef::ne(a, b), out, bit_exact, c);
        else if (op == "lt") compare(ef::lt(a, b), out, bit_exact, c), compare(a < b, out, bit_exact, c);
        else if (op == "le") compare(ef::le(a, b), out, bit_exact, c), compare(a <= b, out, bit_exact, c);
        else if (op == "gt") compare(ef::gt(a, b), out, bit_exact, c), compare(a > b, out, bit_exact, c);
        else if (op == "ge") compare(ef::ge(a, b), out, bit_exact, c), compare(a >= b, out, bit_exact, c);
        else known = false;
      }
    });
    return known;
  });
  print_stats("comparisons / where / masked_fill / tril / triu");
}

TEST_CASE("ops.json: reductions (sum mean max min argmax argmin var std), per dim with and without keepdim, and full") {
  for_each_case(reduction_ops, [](const json& c) {
    bool known = true;
    with_float_type(c, [&]<typename T>(T) {
      const auto x = in4<T>(c);
      const std::string op = c.at("op");
      const json& out = c.at("out");
      const json& args = c.at("args");
      // Quantised inputs sum exactly in any order; full-precision ones get the summation-order tolerance.
      // var and std are never exact: the mean is rounded, and the squared deviations then round differently.
      const bool moments = op == "var" || op == "std";
      const tol sum_tol = quantised_inputs(c) && !moments ? bit_exact : pick<T>(reduction_f32, reduction_f64);
      const bool unbiased = args.value("unbiased", true);
      if constexpr (is_f64<T>) {  // float64 fixtures: sum over a dim, var with keepdim; min argmin std both ways
        if (args.at("dim").is_null()) {
          known = false;
        } else {
          const index_t d = pad_dim(args.at("dim"), c.at("inputs").at(0));
          const bool keep = args.at("keepdim").get<bool>();
          if (op == "sum" && !keep) compare(ef::sum(x, d), out, sum_tol, c);
          else if (op == "var" && keep) compare(ef::var(x, d, ef::keepdim, unbiased), out, sum_tol, c);
          else if (op == "min" && keep) compare(ef::min(x, d, ef::keepdim), out, bit_exact, c);
          else if (op == "min") compare(ef::min(x, d), out, bit_exact, c);
          else if (op == "argmin" && keep) compare(ef::argmin(x, d, ef::keepdim), out, bit_exact, c);
          else if (op == "argmin") compare(ef::argmin(x, d), out, bit_exact, c);
          else if (op == "std" && keep) compare(ef::std(x, d, ef::keepdim, unbiased), out, sum_tol, c);
          else if (op == "std") compare(ef::std(x, d, unbiased), out, sum_tol, c);
          else known = false;
        }
        return;
      }
      if (args.at("dim").is_null()) {  // full reduction to a 0-d tensor
        if (op == "sum") compare(ef::sum(x), out, sum_tol, c);
        else if (op == "mean") compare(ef::mean(x), out, sum_tol, c);
        else if (op == "max") compare(ef::max(x), out, bit_exact, c);
        else if (op == "min") compare(ef::min(x), out, bit_exact, c);
        else if (op == "argmax") compare(ef::argmax(x), out, bit_exact, c);
        else if (op == "argmin") compare(ef::argmin(x), out, bit_exact, c);
        else if (op == "var") compare(ef::var(x, unbiased), out, sum_tol, c);
        else known = false;
        return;
      }
      const index_t d = pad_dim(args.at("dim"), c.at("inputs").at(0));
      if (args.at("keepdim").get<bool>()) {
        if (op == "sum") compare(ef::sum(x, d, ef::keepdim), out, sum_tol, c);
        else if (op == "mean") compare(ef::mean(x, d, ef::keepdim), out, sum_tol, c);
        else if (op == "max") compare(ef::max(x, d, ef::keepdim), out, bit_exact, c);
        else if (op == "min") compare(ef::min(x, d, ef::keepdim), out, bit_exact, c);
        else if (op == "argmax") compare(ef::argmax(x, d, ef::keepdim), out, bit_exact, c);
        else if (op == "argmin") compare(ef::argmin(x, d, ef::keepdim), out, bit_exact, c);
        else if (op == "var") compare(ef::var(x, d, ef::keepdim, unbiased), out, sum_tol, c);
        else if (op == "std") compare(ef::std(x, d, ef::keepdim, unbiased), out, sum_tol, c);
        else known = false;
      } else {
        if (op == "sum") compare(ef::sum(x, d), out, sum_tol, c);
        else if (op == "mean") compare(ef::mean(x, d), out, sum_tol, c);
        else if (op == "max") compare(ef::max(x, d), out, bit_exact, c);
        else if (op == "min") compare(ef::min(x, d), out, bit_exact, c);
        else if (op == "argmax") compare(ef::argmax(x, d), out, bit_exact, c);
        else if (op == "argmin") compare(ef::argmin(x, d), out, bit_exact, c);
        else if (op == "var") compare(ef::var(x, d, unbiased), out, sum_tol, c);
        else if (op == "std") compare(ef::std(x, d, unbiased), out, sum_tol, c);
        else known = false;
      }
    });
    return known;
  });
  print_stats("reductions");
}

TEST_CASE("ops.json: logical_and, logical_or, logical_not and ~ on bool masks, with broadcasting") {
  for_each_case(logical_ops, [](const json& c) {
    const std::string op = c.at("op");
    const json& out = c.at("out");
    const auto a = to_tensor<bool, 4>(c.at("inputs").at(0));
    if (op == "logical_not") {
      compare(ef::logical_not(a), out, bit_exact, c);
      compare(~a, out, bit_exact, c);
      return true;
    }
    const auto b = to_tensor<bool, 4>(c.at("inputs").at(1));
    if (op == "logical_and") compare(ef::logical_and(a, b), out, bit_exact, c);
    else if (op == "logical_or") compare(ef::logical_or(a, b), out, bit_exact, c);
    else return false;
    return true;
  });
  print_stats("logical ops");
}

TEST_CASE("ops.json: softmax and log_softmax, including -inf entries and an all -inf row") {
  for_each_case(softmax_ops, [](const json& c) {
    bool known = true;
    with_float_type(c, [&]<typename T>(T) {
      const auto x = in4<T>(c);
      const std::string op = c.at("op");
      const index_t d = pad_dim(c.at("args").at("dim"), c.at("inputs").at(0));
      // For an all -inf row "out" holds eigenformer's convention (softmax 0, log_softmax -inf) where
      // PyTorch's own result ("torch_out") is NaN.
      const auto y = op == "softmax" ? ef::softmax(x, d) : ef::log_softmax(x, d);
      known = op == "softmax" || op == "log_softmax";
      compare(y, c.at("out"), pick<T>(softmax_f32, softmax_f64), c);
      // Where the input is -inf the result is exactly 0 (softmax) or -inf (log_softmax), as in PyTorch,
      // not a tiny positive number: these are masked attention positions.
      const auto xs = values_of(c.at("inputs").at(0));
      const auto ys = y.to_vector();
      for (std::size_t i = 0; i < xs.size(); ++i)
        if (xs[i] == -std::numeric_limits<double>::infinity()) {
          if (op == "softmax") CHECK(ys[i] == T(0));
          else CHECK(ys[i] == -std::numeric_limits<T>::infinity());
        }
      if (c.at("args").value("all_neg_inf_row", false)) {
        for (auto v : y.to_vector()) CHECK_FALSE(std::isnan(v));
        CHECK(values_of(c.at("torch_out")) != values_of(c.at("out")));  // really a case PyTorch gets NaN on
      }
    });
    return known;
  });
  print_stats("softmax / log_softmax");
}

TEST_CASE("ops.json: matmul (1-D operands, batched broadcasting, transposed operands)") {
  for_each_case(matmul_ops, [](const json& c) {
    bool known = true;
    with_float_type(c, [&]<typename T>(T) {
      const std::string op = c.at("op");
      const json& out = c.at("out");
      const json& ja = c.at("inputs").at(0);
      const json& jb = c.at("inputs").at(1);
      const tol t = quantised_inputs(c) ? bit_exact : pick<T>(matmul_f32, matmul_f64);
      if (op == "matmul_bt") {  // a @ b.transpose(-2, -1), b read in place (column-major)
        compare(ef::matmul(in4<T>(c, 0), in4<T>(c, 1).transpose(-2, -1)), out, t, c);
      } else if (op == "matmul_at") {  // a.transpose(-2, -1) @ b
        compare(ef::matmul(in4<T>(c, 0).transpose(-2, -1), in4<T>(c, 1)), out, t, c);
      } else if (op != "matmul") {
        known = false;
      } else if (rank_of(ja) >= 2 && rank_of(jb) >= 2) {
        compare(ef::matmul(to_tensor<T, 4>(ja), to_tensor<T, 4>(jb)), out, t, c);
      } else if constexpr (std::is_same_v<T, float>) {  // 1-D cases: float32 only (compile time)
        // Dot product [k] x [k]: the second vector as a [1, 1, k, 1] column, which gives the same number
        // without instantiating a rank-2 GEMM here (compile time); matmul(Tensor<T, 1>, Tensor<T, 1>)
        // -> Tensor<T, 0> itself is covered in test_matmul.cpp.
        if (rank_of(ja) == 1 && rank_of(jb) == 1)
          compare(ef::matmul(to_tensor<T, 1>(ja), to_tensor<T, 4>(jb).view({1, 1, -1, 1})), out, t, c);
        else if (rank_of(ja) == 1)  // [k] x [..., k, n] -> [..., n]
          compare(ef::matmul(to_tensor<T, 1>(ja), to_tensor<T, 4>(jb)), out, t, c);
        else  // [..., m, k] x [k] -> [..., m]
          compare(ef::matmul(to_tensor<T, 4>(ja), to_tensor<T, 1>(jb)), out, t, c);
      } else {
        known = false;  // a float64 case with a 1-D operand: add the instantiation above
      }
    });
    return known;
  });
  print_stats("matmul");
}

TEST_CASE("ops.json: shape ops (transpose permute reshape select contiguous narrow slice split chunk cat stack)") {
  for_each_case(shape_ops, [](const json& c) {
    bool known = true;
    with_float32(c, [&]<typename T>(T) {
      const std::string op = c.at("op");
      const json& args = c.at("args");
      const json& in0 = c.at("inputs").at(0);
      const auto x = in4<T>(c);
      auto dim = [&](const char* key) { return pad_dim(args.at(key), in0); };
      auto check_outs = [&](const std::vector<ef::Tensor<T, 4>>& parts) {
        REQUIRE(parts.size() == c.at("outs").size());
        for (std::size_t i = 0; i < parts.size(); ++i) {
          CHECK(parts[i].shares_storage_with(x));  // split and chunk return views
          compare(parts[i], c.at("outs").at(i), bit_exact, c);
        }
      };
      if (op == "transpose") {
        const auto y = x.transpose(dim("dim0"), dim("dim1"));
        CHECK(y.shares_storage_with(x));
        compare(y, c.at("out"), bit_exact, c);
      } else if (op == "permute") {
        ef::Shape<4> p{0, 1, 2, 3};  // leading (padding) dims stay in place
        const auto dims = args.at("dims").get<std::vector<index_t>>();
        for (std::size_t i = 0; i < dims.size(); ++i) p[4 - dims.size() + i] = pad_dim(dims[i], rank_of(in0));
        compare(x.permute(p), c.at("out"), bit_exact, c);
      } else if (op == "reshape") {
        const auto y = x.reshape(padded_shape<4>(args.at("shape")));
        CHECK(y.shares_storage_with(x));  // contiguous input: a view
        compare(y, c.at("out"), bit_exact, c);
      } else if (op == "select") {
        compare(x.select(dim("dim"), args.at("index").get<index_t>()), c.at("out"), bit_exact, c);
      } else if (op == "contiguous") {
        const auto dims = args.at("transpose").get<std::vector<index_t>>();
        const auto t = x.transpose(pad_dim(dims[0], rank_of(in0)), pad_dim(dims[1], rank_of(in0)));
        CHECK_FALSE(t.is_contiguous());
        const auto y = t.contiguous();
        CHECK(y.is_contiguous());
        CHECK_FALSE(y.shares_storage_with(x));
        compare(y, c.at("out"), bit_exact, c);
      } else if (op == "narrow") {
        compare(x.narrow(dim("dim"), args.at("start").get<index_t>(), args.at("length").get<index_t>()),
                c.at("out"), bit_exact, c);
      } else if (op == "slice") {
        compare(x.slice(dim("dim"), args.at("start").get<index_t>(), args.at("end").get<index_t>(),
                        args.at("step").get<index_t>()),
                c.at("out"), bit_exact, c);
      } else if (op == "chunk") {
        check_outs(ef::chunk(x, args.at("chunks").get<index_t>(), dim("dim")));
      } else if (op == "split") {
        check_outs(ef::split(x, args.at("split_size").get<index_t>(), dim("dim")));
      } else if (op == "split_with_sizes") {
        check_outs(ef::split(x, args.at("split_sizes").get<std::vector<index_t>>(), dim("dim")));
      } else if (op == "cat" || op == "stack") {
        std::vector<ef::Tensor<T, 4>> xs;
        for (std::size_t k = 0; k < c.at("inputs").size(); ++k) xs.push_back(in4<T>(c, k));
        if (op == "cat") compare(ef::cat(xs, dim("dim")), c.at("out"), bit_exact, c);
        else compare(ef::stack(xs, dim("dim")), c.at("out"), bit_exact, c);  // new dim: same shift
      } else {
        known = false;
      }
    });
    return known;
  });
  print_stats("shape ops");
}

TEST_CASE("ops.json: creation (arange eye zeros ones full)") {
  for_each_case(creation_ops, [](const json& c) {
    const std::string op = c.at("op");
    const json& args = c.at("args");
    const json& out = c.at("out");
    if (op == "arange") {
      const double start = number(args.at("start")), end = number(args.at("end")), step = number(args.at("step"));
      const std::string dt = args.at("dtype");
      if (dt == "int64") compare(ef::arange<std::int64_t>(start, end, step), out, bit_exact, c);
      else if (dt == "float32") compare(ef::arange<float>(start, end, step), out, bit_exact, c);
      else if (dt == "float64") compare(ef::arange<double>(start, end, step), out, bit_exact, c);
      else return false;
      return true;
    }
    if (args.at("dtype") != "float32") return false;
    if (op == "eye") {
      const auto n = args.at("n").get<index_t>();
      compare(args.at("m").is_null() ? ef::eye<float>(n) : ef::eye<float>(n, args.at("m").get<index_t>()), out,
              bit_exact, c);
    } else if (op == "zeros") {
      compare(ef::zeros<float>(padded_shape<4>(args.at("size"))), out, bit_exact, c);
    } else if (op == "ones") {
      compare(ef::ones<float>(padded_shape<4>(args.at("size"))), out, bit_exact, c);
    } else if (op == "full") {
      compare(ef::full<float>(padded_shape<4>(args.at("size")), static_cast<float>(number(args.at("fill_value")))),
              out, bit_exact, c);
    } else {
      return false;
    }
    return true;
  });
  print_stats("creation");
}

TEST_CASE("ops.json: every case belongs to a family checked above") {
  const std::vector<const std::set<std::string>*> families{&binary_ops,  &scalar_ops,  &unary_ops,    &mask_ops,
                                                           &logical_ops, &reduction_ops, &softmax_ops, &matmul_ops,
                                                           &shape_ops,   &creation_ops};
  std::size_t covered = 0;
  for (const auto& c : ops_cases()) {
    const std::string op = c.at("op");
    int owners = 0;
    for (const auto* f : families) owners += static_cast<int>(f->count(op));
    CHECK_MESSAGE(owners == 1, "op " << op << " (case " << c.at("name").get<std::string>()
                                     << ") belongs to " << owners << " families; unknown ops must fail");
    if (owners == 1) ++covered;
  }
  CHECK(covered == ops_cases().size());
  // The fixture file as generated by make_fixtures.py with PyTorch 1.13: guards against a truncated or
  // regenerated-but-not-reviewed file. Update together with tools/reference/make_fixtures.py.
  CHECK(ops_cases().size() == 450);
}
