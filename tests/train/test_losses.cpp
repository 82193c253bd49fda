// nn::MSELoss: PyTorch fixture, finite differences, bad input.
#include <doctest/doctest.h>

#include <eigenformer/train/losses.hpp>

#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"

using namespace eftest;
namespace nn = ef::nn;

// A mean of 30 float squares: summation order and eigenformer's double accumulator give float-ulp
// differences (1e-6 relative); the gradient 2 (pred - target) / N is one subtraction and one multiply.
TEST_CASE("MSELoss: loss and gradient match PyTorch (fixture, float32)") {
  const auto& c = nn_case("mse_loss");
  nn::MSELoss<float> loss;
  const auto pred = fx<float, 3>(c.at("inputs").at("input"));
  const auto target = fx<float, 3>(c.at("inputs").at("target"));
  check_fixture(loss.forward(pred, target), c.at("out"), 1e-6, 0, "mse_loss forward");
  check_fixture(loss.backward<3>(), c.at("grads").at("input"), 1e-6, 1e-8, "mse_loss dinput");
}

TEST_CASE("MSELoss: backward matches central finite differences (double), scaled by the loss gradient") {
  ef::manual_seed(13);
  nn::MSELoss<double> loss;
  auto pred = ef::randn<double>({4, 3});
  const auto target = ef::randn<double>({4, 3});
  const auto probe = ef::full<double>(ef::Shape<0>{}, 2.5);
  auto f = [&] {
    loss.eval();
    auto l = loss.forward(pred, target);
    loss.train();
    return l;
  };
  loss.forward(pred, target);
  const auto d = loss.backward(2.5);
  check_tensors_close(d, numerical_gradient(f, pred, probe), 1e-6, 1e-9, "dpred");
}

TEST_CASE("MSELoss: bad input") {
  nn::MSELoss<float> loss;
  CHECK_THROWS_WITH_AS(loss.forward(ef::zeros<float>({2, 3}), ef::zeros<float>({3, 2})),
                       "MSELoss.forward: input [2, 3] and target [3, 2] differ in shape", ef::shape_error);
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("MSELoss.backward: nothing cached"), std::logic_error);
  loss.forward(ef::zeros<float>({2, 3, 1}), ef::ones<float>({2, 3, 1}));
  CHECK_THROWS_WITH_AS(loss.backward(), "MSELoss.backward<2>: the forward input [2, 3, 1] has rank 3", ef::shape_error);
  CHECK(loss.forward(ef::zeros<float>({2, 3}), ef::ones<float>({2, 3})).item() == 1.f);
}
