// nn::ReLU / GELU / Activation-by-name / Softmax: PyTorch fixtures, finite differences, worked examples.
#include <doctest/doctest.h>

#include <eigenformer/nn/activation.hpp>

#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace nn = ef::nn;

// Float32 against PyTorch's kernels: the same formulas in float, with erf/tanh/exp from different
// implementations, so values differ by a few ulps (1e-5 relative covers them). The absolute floor 1e-6 is
// the float rounding of the terms, |x| * 2^-23 for |x| up to ~8: for x << 0, GELU's 1 + erf(x / sqrt 2)
// cancels, so a tiny output (-0.0058 at x = -2.88) carries an absolute error of that size in both
// libraries (there PyTorch is 2.6e-5 relative off the exact value, eigenformer 4e-6).
TEST_CASE("activations: forward and backward match PyTorch (fixtures, float32)") {
  for (const char* name : {"relu", "gelu", "gelu_pytorch_tanh", "gelu_new"}) {
    const auto& c = nn_case(std::string("activation_") + name);
    nn::Activation<float> act(name);
    const auto x = fx<float, 3>(c.at("inputs").at("x"));
    check_fixture(act.forward(x), c.at("out"), 1e-5, 1e-6, c.at("name").get<std::string>() + " forward");
    const auto dx = act.backward(fx<float, 3>(c.at("probe")));
    check_fixture(dx, c.at("grads").at("x"), 1e-5, 1e-6, c.at("name").get<std::string>() + " dx");
  }
  for (const char* name : {"softmax_dim-1", "softmax_dim1"}) {
    const auto& c = nn_case(name);
    nn::Softmax<float> sm(c.at("config").at("dim").get<index_t>());
    const auto x = fx<float, 3>(c.at("inputs").at("x"));
    const auto y = sm.forward(x);
    check_fixture(y, c.at("out"), 1e-5, 1e-6, std::string(name) + " forward");
    check_fixture(sm.backward(fx<float, 3>(c.at("probe"))), c.at("grads").at("x"), 1e-5, 1e-6,
                  std::string(name) + " dx");
  }
}

// Tolerance: f64_rtol / f64_atol, see support/nn_fixtures.hpp (libm's erf and tanh on both sides here).
TEST_CASE("activations: GELU (exact, tanh) and Softmax match PyTorch run in float64, at double precision (fixtures)") {
  for (const char* name : {"gelu", "gelu_pytorch_tanh"}) {
    nn::Activation<double> act(name);
    check_f64_case(act, nn_case(std::string("activation_") + name + "_f64"));
  }
  const auto& c = nn_case("softmax_dim-1_f64");
  nn::Softmax<double> sm(c.at("config").at("dim").get<index_t>());
  check_f64_case(sm, c);
}

TEST_CASE("activations: backward matches central finite differences (double)") {
  ef::manual_seed(3);
  auto x = ef::randn<double>({2, 3, 5}) * 2.0;
  const auto probe = ef::randn<double>({2, 3, 5});
  for (const char* name : {"relu", "gelu", "gelu_new"}) {
    INFO(name);
    nn::Activation<double> act(name);
    auto f = [&] { return nn::functional::activation(x, act.kind()); };
    act.forward(x);
    check_tensors_close(act.backward(probe), numerical_gradient(f, x, probe), 1e-6, 1e-9, name);
  }
  for (const index_t dim : {-1, 0, 1}) {
    INFO("softmax dim " << dim);
    nn::Softmax<double> sm(dim);
    auto f = [&] { return ef::softmax(x, dim); };
    sm.forward(x);
    check_tensors_close(sm.backward(probe), numerical_gradient(f, x, probe), 1e-6, 1e-9, "softmax");
  }
}

// The worked example prints 6 decimals: agreement to half a unit there (5e-7) plus float32 rounding of
// values up to 3 (2.4e-7).
TEST_CASE_TEMPLATE("activations: GELU and ReLU values of BERT-from-scratch section 1.18 (worked example)", T,
                   float, double) {
  const auto& ex = worked_examples().at("gelu_values");
  const auto xv = ex.at("x").get<std::vector<double>>();
  auto x = ef::Tensor<T, 1>::empty({static_cast<index_t>(xv.size())});
  for (std::size_t i = 0; i < xv.size(); ++i) x(static_cast<index_t>(i)) = static_cast<T>(xv[i]);
  const auto check = [&](nn::Activation<T>& act, const char* key) {
    const auto y = act.forward(x).to_vector();
    const auto e = ex.at(key).template get<std::vector<double>>();
    for (std::size_t i = 0; i < e.size(); ++i) CHECK_MESSAGE(std::abs(y[i] - e[i]) <= 7.5e-7, key << " at x=" << xv[i]);
  };
  nn::GELU<T> exact;
  nn::GELU<T> approx("tanh");
  nn::ReLU<T> relu;
  check(exact, "gelu_exact");
  check(approx, "gelu_tanh");
  check(relu, "relu");
  CHECK(approx.approximate() == nn::GeluApproximate::tanh);
}

TEST_CASE("activations: Hugging Face names, bad names and bad calls") {
  // Built from a hidden_act name, an activation carries the class name transformers' ACT2CLS maps it to,
  // so a model's repr names the class a Hugging Face model prints; built from a kind, torch.nn's.
  CHECK(nn::Activation<float>("gelu").type_name() == "GELUActivation");
  CHECK(nn::Activation<float>("gelu_new").type_name() == "NewGELUActivation");
  CHECK(nn::Activation<float>("gelu_pytorch_tanh").type_name() == "PytorchGELUTanh");
  CHECK(nn::Activation<float>("relu").type_name() == "ReLU");
  CHECK(nn::Activation<float>("gelu_new").extra_repr().empty());
  CHECK(nn::Activation<float>(nn::ActivationKind::gelu_tanh).type_name() == "GELU");
  CHECK(nn::activation_kind("gelu") == nn::ActivationKind::gelu);
  CHECK(nn::activation_kind("gelu_new") == nn::ActivationKind::gelu_tanh);
  CHECK(nn::activation_kind("gelu_pytorch_tanh") == nn::ActivationKind::gelu_tanh);
  CHECK(nn::activation_kind("relu") == nn::ActivationKind::relu);
  CHECK_THROWS_WITH_EXACTLY(nn::Activation<float>("swish"),
                       "activation: unknown activation \"swish\"; accepted names are relu, gelu, gelu_new, "
                       "gelu_pytorch_tanh",
                       std::invalid_argument);
  CHECK_THROWS_EXACTLY(nn::GELU<float>("fast"), std::invalid_argument);

  nn::GELU<float> gelu;
  CHECK_THROWS_WITH_EXACTLY(gelu.backward(ef::zeros<float>({2, 3})), doctest::Contains("GELU.backward: nothing saved"),
                       std::logic_error);
  gelu.forward(ef::zeros<float>({2, 3}));
  CHECK_THROWS_WITH_EXACTLY(gelu.backward(ef::zeros<float>({3, 2})),
                       "GELU.backward: grad_output [3, 2] does not match the forward output [2, 3]", ef::shape_error);
  gelu.eval();
  gelu.forward(ef::zeros<float>({2, 3}));  // eval mode caches nothing
  CHECK_THROWS_EXACTLY(gelu.backward(ef::zeros<float>({2, 3})), std::logic_error);

  nn::Softmax<float> sm(2);
  CHECK_THROWS_EXACTLY(sm.forward(ef::zeros<float>({2, 3})), ef::shape_error);  // dim 2 of a rank-2 input
  CHECK_THROWS_EXACTLY(sm.backward(ef::zeros<float>({2, 3})), std::logic_error);
}

TEST_CASE("activations: softmax of a fully masked row is zero and so is its gradient") {
  const float inf = std::numeric_limits<float>::infinity();
  nn::Softmax<float> sm;
  const auto y = sm.forward(ef::tensor<float>({{-inf, -inf, -inf}, {0.f, -inf, 1.f}}));
  CHECK(y(0, 0) == 0.f);
  CHECK(y(1, 1) == 0.f);
  CHECK(std::abs(y(1, 0) + y(1, 2) - 1.f) < 1e-6f);
  const auto dx = sm.backward(ef::tensor<float>({{1.f, 2.f, 3.f}, {1.f, 2.f, 3.f}}));
  CHECK(dx(0, 0) == 0.f);
  CHECK(dx(1, 1) == 0.f);
}
