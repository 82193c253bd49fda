// nn::LayerNorm: PyTorch fixtures, finite differences, the worked example of BERT-from-scratch 1.17, and
// the defining property (each row comes out with mean = bias and standard deviation = weight).
#include <doctest/doctest.h>

#include <eigenformer/nn/layernorm.hpp>

#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"
#include "support/thread_counts.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace nn = ef::nn;

// Float32: eigenformer accumulates each row's mean and variance in double, PyTorch in float (Welford),
// so normalised values differ by a few float ulps (1e-5 relative; 2e-6 absolute for O(1) outputs that
// pass near 0). Gradients sum C = 12 (dx) or N = 10 (dweight, dbias) such terms: the same bounds hold.
TEST_CASE("LayerNorm: forward and backward match PyTorch (fixtures, float32)") {
  for (const char* name : {"layernorm_affine", "layernorm_plain"}) {
    const auto& c = nn_case(name);
    const auto& cfg = c.at("config");
    nn::LayerNorm<float> ln(cfg.at("normalized_shape").get<index_t>(), cfg.at("eps").get<double>(),
                            cfg.at("elementwise_affine").get<bool>());
    CHECK(ln.weight.has_value() == cfg.at("elementwise_affine").get<bool>());
    load_params(ln, c);
    const auto x = fx<float, 3>(c.at("inputs").at("x"));
    check_fixture(ln.forward(x), c.at("out"), 1e-5, 2e-6, std::string(name) + " forward");
    check_fixture(ln.backward(fx<float, 3>(c.at("probe"))), c.at("grads").at("x"), 1e-5, 2e-6,
                  std::string(name) + " dx");
    check_param_grads(ln, c, 1e-5, 2e-6);
  }
}

// Tolerance: f64_rtol / f64_atol, see support/nn_fixtures.hpp.
TEST_CASE("LayerNorm: forward and backward match PyTorch run in float64, at double precision (fixture)") {
  const auto& c = nn_case("layernorm_affine_f64");
  const auto& cfg = c.at("config");
  nn::LayerNorm<double> ln(cfg.at("normalized_shape").get<index_t>(), cfg.at("eps").get<double>(),
                           cfg.at("elementwise_affine").get<bool>());
  check_f64_case(ln, c);
}

TEST_CASE("LayerNorm: backward matches central finite differences (double)") {
  ef::manual_seed(5);
  for (const bool affine : {true, false}) {
    INFO("elementwise_affine " << affine);
    nn::LayerNorm<double> ln(6, 1e-5, affine);
    if (affine) {
      ln.weight->data.copy_(ef::randn<double>({6}) + 1.0);
      ln.bias->data.copy_(ef::randn<double>({6}));
    }
    auto x = ef::randn<double>({2, 3, 6}) * 2.0;
    const auto probe = ef::randn<double>({2, 3, 6});
    auto f = [&] {
      ln.eval();
      auto y = ln.forward(x);
      ln.train();
      return y;
    };
    ln.zero_grad();
    ln.forward(x);
    const auto dx = ln.backward(probe);
    check_tensors_close(dx, numerical_gradient(f, x, probe), 1e-6, 1e-9, "dx");
    for (auto& p : ln.named_parameters())
      check_tensors_close(p.grad(), numerical_gradient(f, p.data, probe), 1e-6, 1e-9, p.name);
  }
}

// Enough rows that the weight and bias gradients' columns are split between threads
// (backend::column_reduction_grain); each column is still summed whole in row order, so 1 to 4 threads give
// the same bits, for dx too (its rows are independent).
TEST_CASE("LayerNorm: backward on 1 to 4 threads, the same bits") {
  ef::Generator gen(18);
  nn::LayerNorm<float> ln(96);
  ln.weight->data.copy_(ef::randn<float>({96}, gen) + 1.0f);
  ln.bias->data.copy_(ef::randn<float>({96}, gen));
  const auto x = ef::randn<float>({6, 500, 96}, gen) * 2.0f;
  const auto probe = ef::randn<float>({6, 500, 96}, gen);
  REQUIRE(ef::backend::column_reduction_grain(96, 3000, 2) < 96);
  const auto one = check_same_bits_on_thread_counts([&] {
    ln.zero_grad();
    ln.forward(x);
    std::vector<float> out = ln.backward(probe).to_vector();
    for (auto& p : ln.named_parameters()) {
      const auto g = p.grad().to_vector();
      out.insert(out.end(), g.begin(), g.end());
    }
    return out;
  });
  CHECK(one.size() == std::size_t{3000 * 96 + 2 * 96});
}

// The worked example prints 6 decimals: half a unit there (5e-7) plus float32 rounding of values up to 2
// (1.2e-7). Its mean and biased variance are checked the same way.
TEST_CASE_TEMPLATE("LayerNorm: the six activations of BERT-from-scratch section 1.17 (worked example)", T, float,
                   double) {
  const auto& ex = worked_examples().at("layernorm_example");
  const auto xv = ex.at("x").get<std::vector<double>>();
  auto x = ef::Tensor<T, 2>::empty({1, static_cast<index_t>(xv.size())});
  for (std::size_t i = 0; i < xv.size(); ++i) x(0, static_cast<index_t>(i)) = static_cast<T>(xv[i]);
  CHECK(std::abs(ef::mean(x).item() - ex.at("mean").get<double>()) <= 5e-7 + 1e-7);
  CHECK(std::abs(ef::var(x, false).item() - ex.at("var_biased").get<double>()) <= 5e-7 + 1e-7);
  // Plain variables, not structured bindings: CHECK_MESSAGE captures `key` in a lambda, which clang before 16
  // does not allow for a binding.
  for (const auto& eps_key : {std::pair{1e-5, "normalized_eps_1e_5"}, std::pair{0.0, "normalized_eps_0"}}) {
    const double eps = eps_key.first;
    const char* const key = eps_key.second;
    nn::LayerNorm<T> ln(6, eps);
    const auto y = ln.forward(x).to_vector();
    const auto e = ex.at(key).template get<std::vector<double>>();
    for (std::size_t i = 0; i < e.size(); ++i) CHECK_MESSAGE(std::abs(y[i] - e[i]) <= 6.2e-7, key << " element " << i);
  }
}

TEST_CASE_TEMPLATE("LayerNorm: every row comes out with mean = bias and (biased) std = weight", T, float, double) {
  ef::manual_seed(9);
  nn::LayerNorm<T> ln(16, 1e-5);
  ln.weight->data.fill_(T(2.5));
  ln.bias->data.fill_(T(-1));
  const auto x = ef::randn<T>({3, 4, 16}) * 5.0 + 3.0;
  const auto y = ln.forward(x);
  const auto m = ef::mean(y, -1).to_vector();
  const auto s = ef::std(y, -1, false).to_vector();
  const auto var = ef::var(x.template to<double>(), -1, false).to_vector();
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  for (std::size_t i = 0; i < m.size(); ++i) {
    CHECK(std::abs(m[i] - T(-1)) <= tol);
    // eps shrinks the standard deviation a little: std(y) = weight * sqrt(var / (var + eps)).
    CHECK(std::abs(s[i] - 2.5 * std::sqrt(var[i] / (var[i] + 1e-5))) <= tol);
    CHECK(std::abs(s[i] - 2.5) <= 1e-5);
  }
}

TEST_CASE("LayerNorm: parameters, eval mode and bad input") {
  nn::LayerNorm<float> ln(12);
  auto names = ln.named_parameters();
  REQUIRE(names.size() == 2);
  CHECK(names[0].name == "weight");
  CHECK(names[1].name == "bias");
  CHECK(ef::sum(ln.weight->data).item() == 12.f);
  CHECK(ef::sum(ef::abs(ln.bias->data)).item() == 0.f);
  CHECK(nn::LayerNorm<float>(12, 1e-5, false).named_parameters().empty());

  CHECK_THROWS_WITH_EXACTLY(ln.forward(ef::zeros<float>({2, 5, 7})),
                       "LayerNorm.forward: input [2, 5, 7] does not end in normalized_shape [12] (the weight's shape)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(ln.backward(ef::zeros<float>({2, 12})), doctest::Contains("LayerNorm.backward: nothing saved"),
                       std::logic_error);
  ln.forward(ef::zeros<float>({2, 12}));
  CHECK_THROWS_WITH_EXACTLY(ln.backward(ef::zeros<float>({3, 12})),
                       "LayerNorm.backward: grad_output [3, 12] does not match the forward output [2, 12]",
                       ef::shape_error);
  ln.eval();
  const auto y = ln.forward(ef::ones<float>({2, 12}));  // a constant row normalises to 0 (then + bias)
  CHECK(ef::sum(ef::abs(y)).item() == 0.f);
  CHECK_THROWS_EXACTLY(ln.backward(ef::zeros<float>({2, 12})), std::logic_error);
  CHECK_THROWS_EXACTLY(nn::LayerNorm<float>(0), std::invalid_argument);
}

// add_forward runs the same float operations as the add followed by forward (the sum rounded to T, then the
// same double statistics), only in one pass over each row: the bits are equal, so the tolerance is 0. The
// recording form is the add and forward themselves, so its backward is LayerNorm's backward of the sum.
TEST_CASE_TEMPLATE("LayerNorm.add_forward = x + residual then forward, bit for bit; x holds the sum", T, float, double) {
  ef::manual_seed(51);
  nn::LayerNorm<T> ln(24);
  ln.weight->data.copy_(ef::randn<T>({24}));
  ln.bias->data.copy_(ef::randn<T>({24}));
  const auto a = ef::randn<T>({3, 5, 24}) * T(3), r = ef::randn<T>({3, 5, 24}) + T(2);
  const auto sum = a + r;
  for (const bool training : {false, true}) {
    INFO("training " << training);
    ln.train(training);
    const auto expected = ln.forward(sum);
    auto x = a.clone();
    const auto y = ln.add_forward(x, r);
    check_tensors_close(y, expected, 0, 0, "add_forward");
    check_tensors_close(x, sum, 0, 0, "x += residual");
  }
  const auto g = ef::randn<T>({3, 5, 24});
  const auto dx = ln.backward(g);  // of the recording add_forward above
  ln.forward(sum);
  check_tensors_close(dx, ln.backward(g), 0, 0, "backward");
  {
    ef::InferenceMode inference;  // inference in training mode: the one-pass form too
    auto x = a.clone();
    check_tensors_close(ln.add_forward(x, r), ln.forward(sum), 0, 0, "InferenceMode");
  }
  ln.eval();
  auto given = a.clone();  // an x the caller gives up (an rvalue): the same bits, written over x's rows
  const T* given_rows = given.data();
  const auto over = ln.add_forward(std::move(given), r);
  check_tensors_close(over, ln.forward(sum), 0, 0, "x given up");
  CHECK(over.data() == given_rows);
  auto strided = a.transpose(0, 1).contiguous().transpose(0, 1);  // not contiguous: the add, then forward
  check_tensors_close(ln.add_forward(strided, r), ln.forward(sum), 0, 0, "non-contiguous input");
  auto x = a.clone();
  CHECK_THROWS_WITH_EXACTLY(ln.add_forward(x, r.narrow(1, 0, 4)),
                            "LayerNorm.add_forward: input [3, 5, 24] and residual [3, 4, 24] differ in shape",
                            ef::shape_error);
}
