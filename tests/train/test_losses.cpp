// nn::MSELoss and nn::CrossEntropyLoss: PyTorch fixtures, finite differences, bad input.
#include <doctest/doctest.h>

#include <eigenformer/train/losses.hpp>

#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"
#include "support/train_fixtures.hpp"
#include "support/thread_counts.hpp"
#include "support/throws.hpp"

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
  CHECK_THROWS_WITH_EXACTLY(loss.forward(ef::zeros<float>({2, 3}), ef::zeros<float>({3, 2})),
                       "MSELoss.forward: input [2, 3] and target [3, 2] differ in shape", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(loss.backward(), doctest::Contains("MSELoss.backward: nothing saved"), std::logic_error);
  loss.forward(ef::zeros<float>({2, 3, 1}), ef::ones<float>({2, 3, 1}));
  CHECK_THROWS_WITH_EXACTLY(loss.backward(), "MSELoss.backward<2>: the forward input [2, 3, 1] has rank 3", ef::shape_error);
  CHECK(loss.forward(ef::zeros<float>({2, 3}), ef::ones<float>({2, 3})).item() == 1.f);
}

// ---------------------------------------------------------------------------------------------------------
// CrossEntropyLoss

namespace {

nn::CrossEntropyOptions ce_options(const json& config) {
  nn::CrossEntropyOptions o;
  o.ignore_index = config.at("ignore_index").get<std::int64_t>();
  o.label_smoothing = config.at("label_smoothing").get<double>();
  o.reduction = config.at("reduction") == "sum" ? nn::Reduction::sum : nn::Reduction::mean;
  return o;
}

}  // namespace

// PyTorch computes log_softmax in float32 and sums the row losses in float; eigenformer sums each row's
// exponentials and the loss in double, so the two differ by float rounding of O(1) terms. Measured: the
// loss within 1.2e-7 relative (checked at 1e-6); dlogits within 1.5e-7 absolute: softmax p minus the
// one-hot 1 cancels in PyTorch's float arithmetic, leaving an error of about one float ulp of 1
// (1.2e-7) on a small difference ("sum" cases are not scaled down by 1/N), hence atol 2e-7.
TEST_CASE("CrossEntropyLoss: loss and dlogits match PyTorch (fixture, float32)") {
  for_each_train_case("cross_entropy", [&](const std::string& name, const json& c) {
    INFO(name);
    nn::CrossEntropyLoss<float> loss(ce_options(c.at("config")));
    if (shape_of(c.at("logits")).size() == 2) {
      const auto logits = fx<float, 2>(c.at("logits"));
      check_fixture(loss.forward(logits, fx_ids<1>(c.at("target"))), c.at("loss"), 1e-6, 0, name + " loss");
      check_fixture(loss.backward(), c.at("dlogits"), 1e-6, 2e-7, name + " dlogits");
    } else {
      const auto logits = fx<float, 3>(c.at("logits"));
      check_fixture(loss.forward(logits, fx_ids<2>(c.at("target"))), c.at("loss"), 1e-6, 0, name + " loss");
      check_fixture(loss.backward<3>(), c.at("dlogits"), 1e-6, 2e-7, name + " dlogits");
    }
  });
}

TEST_CASE("CrossEntropyLoss: backward matches central finite differences (double)") {
  ef::manual_seed(21);
  const auto probe = ef::full<double>(ef::Shape<0>{}, 0.75);
  for (const double smoothing : {0.0, 0.15}) {
    for (const auto reduction : {nn::Reduction::mean, nn::Reduction::sum}) {
      INFO("smoothing " << smoothing << ", sum " << (reduction == nn::Reduction::sum));
      nn::CrossEntropyLoss<double> loss({.ignore_index = 3, .label_smoothing = smoothing, .reduction = reduction});
      auto logits = ef::randn<double>({2, 3, 5});
      auto target = ef::Tensor<std::int64_t, 2>::empty({2, 3});
      const std::int64_t ids[] = {0, 3, 4, 1, 2, 3};  // two ignored (ignore_index 3)
      std::copy(std::begin(ids), std::end(ids), target.data());
      auto f = [&] {
        loss.eval();
        auto l = loss.forward(logits, target);
        loss.train();
        return l;
      };
      loss.forward(logits, target);
      const auto d = loss.backward<3>(0.75);
      check_tensors_close(d, numerical_gradient(f, logits, probe), 1e-6, 1e-9, "dlogits");
      // Ignored positions get no gradient at all.
      for (index_t j = 0; j < 5; ++j) CHECK(d(0, 1, j) == 0.0);
    }
  }
}

TEST_CASE("CrossEntropyLoss: huge logits stay finite; all targets ignored gives NaN (mean) or 0 (sum)") {
  nn::CrossEntropyLoss<float> loss;
  auto logits = ef::tensor<float>({{1000.f, 0.f, -1000.f}, {-3e38f, 3e38f, 0.f}});
  auto target = ef::Tensor<std::int64_t, 1>::empty({2});
  target.data()[0] = 0;
  target.data()[1] = 1;
  CHECK(loss.forward(logits, target).item() == 0.f);
  const auto d = loss.backward();
  for (float v : d.to_vector()) CHECK(std::isfinite(v));
  target.data()[0] = target.data()[1] = -100;
  CHECK(std::isnan(loss.forward(logits, target).item()));
  for (float v : loss.backward().to_vector()) CHECK(v == 0.f);
  nn::CrossEntropyLoss<float> summed({.reduction = nn::Reduction::sum});
  CHECK(summed.forward(logits, target).item() == 0.f);
}

// The rows run on the pool: a language model's logits (rows x vocabulary) big enough to split into several
// ranges of rows, with ignored targets among them. Loss and gradient must have the one-thread bits on every
// thread count, and the loss must be the mean (or sum) over the kept rows computed here in double, to float's
// rounding of the result (2e-7 relative; the library sums the same terms in the same order).
TEST_CASE("CrossEntropyLoss: rows on the pool give the one-thread bits; the loss covers every kept row") {
  ef::manual_seed(5);
  const index_t n = 700, c = 65;  // 126 rows a range: six ranges
  const auto logits = ef::randn<float>({n, c}) * 3.0f;
  auto target = ef::Tensor<std::int64_t, 1>::empty({n});
  for (index_t i = 0; i < n; ++i) target.data()[i] = i % 7 == 3 ? -100 : (i * 31 + 5) % c;
  std::size_t ran = 0;
  for (const double smoothing : {0.0, 0.1})
    for (const auto reduction : {nn::Reduction::mean, nn::Reduction::sum}) {
      CAPTURE(smoothing);
      CAPTURE(static_cast<int>(reduction));
      const auto results = check_same_bits_on_thread_counts([&] {
        nn::CrossEntropyLoss<float> loss({.label_smoothing = smoothing, .reduction = reduction});
        loss.train();
        std::vector<float> out{loss.forward(logits, target).item()};
        const auto d = loss.backward();
        const auto g = d.to_vector();
        out.insert(out.end(), g.begin(), g.end());
        return out;
      });
      double total = 0;
      index_t kept = 0;
      for (index_t i = 0; i < n; ++i) {
        if (target.data()[i] == -100) continue;
        ++kept;
        double mx = -1e300, se = 0, sum_x = 0;
        for (index_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(logits(i, j)));
        for (index_t j = 0; j < c; ++j) se += std::exp(static_cast<double>(logits(i, j)) - mx), sum_x += logits(i, j);
        const double lse = mx + std::log(se);
        total += -(1.0 - smoothing) * (logits(i, target.data()[i]) - lse) - smoothing / c * (sum_x - c * lse);
      }
      const double expected = reduction == nn::Reduction::mean ? total / static_cast<double>(kept) : total;
      CHECK(results[0] == doctest::Approx(expected).epsilon(2e-7));
      // Ignored rows get no gradient.
      for (index_t j = 0; j < c; ++j) CHECK(results[1 + 3 * c + j] == 0.0f);
      ++ran;
    }
  check_ran(ran, 4, "label smoothings and reductions");
}

TEST_CASE("CrossEntropyLoss: bad input") {
  nn::CrossEntropyLoss<float> loss;
  auto ids = [](std::vector<std::int64_t> v) {
    auto t = ef::Tensor<std::int64_t, 1>::empty({static_cast<index_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data());
    return t;
  };
  CHECK_THROWS_WITH_EXACTLY(loss.forward(ef::zeros<float>({4, 3}), ids({0, 1, 2})),
                       "CrossEntropyLoss.forward: logits [4, 3] and target [3]: expected target (N) for logits (N, C)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(loss.forward(ef::zeros<float>({2, 2, 3}), ids({0, 1}).view(ef::Shape<2>{1, 2})),
                       "CrossEntropyLoss.forward: logits [2, 2, 3] and target [1, 2]: expected target (B, T) for "
                       "logits (B, T, C)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(loss.forward(ef::zeros<float>({3, 3}), ids({0, 3, 1})),
                       "CrossEntropyLoss.forward: target id 3 at position 1 is out of range for 3 classes "
                       "(valid: 0..2, or ignore_index -100)",
                       std::out_of_range);
  CHECK_THROWS_EXACTLY(loss.forward(ef::zeros<float>({3, 3}), ids({0, -1, 1})), std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(loss.forward(ef::zeros<float>({2, 0}), ids({0, 0})),
                       "CrossEntropyLoss.forward: logits [2, 0] have no classes", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(loss.backward(), doctest::Contains("CrossEntropyLoss.backward: nothing saved"),
                       std::logic_error);
  loss.forward(ef::zeros<float>({1, 2, 3}), ids({0, 1}).view(ef::Shape<2>{1, 2}));
  CHECK_THROWS_WITH_EXACTLY(loss.backward(), "CrossEntropyLoss.backward<2>: the forward logits [1, 2, 3] have rank 3",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(nn::CrossEntropyLoss<float>({.label_smoothing = 1.5}), std::invalid_argument);
}
