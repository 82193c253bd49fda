// Reductions (sum, mean, max, min, argmax, argmin, var, std) in their three forms -- over a dim, over a
// dim with keepdim, over everything to a 0-d tensor -- and softmax / log_softmax, including the all -inf
// row (zeros, never NaN) and the worked examples softmax_examples and causal_softmax.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;


template <typename T, std::size_t R>
void check_near(const ef::Tensor<T, R>& t, const std::vector<double>& expected, double atol) {
  const auto v = t.to_vector();
  REQUIRE(v.size() == expected.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(static_cast<double>(v[i]) - expected[i]) <= atol);
  }
}

}  // namespace

// ---- sum, mean, max, min, argmax, argmin -------------------------------------------------------------------

TEST_CASE_TEMPLATE("reduce: sum and mean over a dim, with keepdim, and over everything", T, float, double) {
  const auto x = iota<T>(ef::Shape<3>{2, 3, 4});  // 0..23
  const auto s1 = ef::sum(x, 1);
  CHECK(std::is_same_v<decltype(s1), const ef::Tensor<T, 2>>);
  CHECK(s1.shape() == ef::Shape<2>{2, 4});
  CHECK(s1.to_vector() == vec<T>({12, 15, 18, 21, 48, 51, 54, 57}));
  const auto k1 = ef::sum(x, 1, ef::keepdim);
  CHECK(std::is_same_v<decltype(k1), const ef::Tensor<T, 3>>);
  CHECK(k1.shape() == ef::Shape<3>{2, 1, 4});
  CHECK(k1.to_vector() == s1.to_vector());
  CHECK(ef::sum(x, -1).to_vector() == vec<T>({6, 22, 38, 54, 70, 86}));
  CHECK(ef::sum(x, 0).to_vector() == ef::sum(x, -3).to_vector());
  const auto all = ef::sum(x);
  CHECK(std::is_same_v<decltype(all), const ef::Tensor<T, 0>>);
  CHECK(all.item() == T(276));
  CHECK(ef::mean(x).item() == T(11.5));
  CHECK(ef::mean(x, 2).to_vector() == vec<T>({1.5, 5.5, 9.5, 13.5, 17.5, 21.5}));
  CHECK(ef::mean(x, 0, ef::keepdim).shape() == ef::Shape<3>{1, 3, 4});
  CHECK(ef::mean(x, 0, ef::keepdim)(0, 2, 3) == T(17));
  // Strided input: the reduction follows the view.
  CHECK(ef::sum(x.transpose(0, 2), 0).to_vector() == ef::sum(x, 2).t().contiguous().to_vector());
  CHECK(ef::sum(ef::Tensor<T, 1>{1, 2}.expand(ef::Shape<2>{3, 2}), 0).to_vector() == vec<T>({3, 6}));
  // Empty reductions: sum is 0, mean is NaN (as in PyTorch).
  const auto empty = ef::zeros<T>(ef::Shape<2>{3, 0});
  CHECK(ef::sum(empty, 1).to_vector() == vec<T>({0, 0, 0}));
  CHECK(ef::sum(empty).item() == T(0));
  CHECK(std::isnan(ef::mean(empty, 1)(0)));
  CHECK(ef::sum(empty, 0).shape() == ef::Shape<1>{0});
  CHECK(ef::sum(ef::Tensor<T, 0>(T(4))).item() == T(4));

  CHECK_THROWS_WITH_EXACTLY(ef::sum(x, 3), "sum: dim 3 is out of range for a tensor of rank 3 (expected -3 to 2)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(ef::mean(x, -4, ef::keepdim), doctest::Contains("mean: dim -4 is out of range"), ef::shape_error);
}

TEST_CASE_TEMPLATE("reduce: max, min, argmax, argmin", T, float, double) {
  const ef::Tensor<T, 2> x{{3, 7, -1, 7}, {0, -5, 2, 1}};
  CHECK(ef::max(x, 1).to_vector() == vec<T>({7, 2}));
  CHECK(ef::min(x, 1).to_vector() == vec<T>({-1, -5}));
  CHECK(ef::max(x, 0).to_vector() == vec<T>({3, 7, 2, 7}));
  CHECK(ef::min(x, 0, ef::keepdim).shape() == ef::Shape<2>{1, 4});
  CHECK(ef::min(x, 0, ef::keepdim).to_vector() == vec<T>({0, -5, -1, 1}));
  CHECK(ef::max(x, -1, ef::keepdim).to_vector() == vec<T>({7, 2}));
  CHECK(ef::max(x, -1, ef::keepdim).shape() == ef::Shape<2>{2, 1});
  CHECK(ef::argmin(x, 1, ef::keepdim).shape() == ef::Shape<2>{2, 1});
  CHECK(ef::max(x).item() == T(7));
  CHECK(ef::min(x).item() == T(-5));
  const auto am = ef::argmax(x, 1);
  CHECK(std::is_same_v<decltype(am), const ef::Tensor<std::int64_t, 1>>);
  CHECK(am.to_vector() == std::vector<std::int64_t>{1, 2});  // ties: the first index
  CHECK(ef::argmin(x, 1).to_vector() == std::vector<std::int64_t>{2, 1});
  CHECK(ef::argmax(x, 0, ef::keepdim).to_vector() == std::vector<std::int64_t>{0, 0, 1, 0});
  CHECK(ef::argmin(x, -2).to_vector() == std::vector<std::int64_t>{1, 1, 0, 1});
  CHECK(ef::argmax(x).item() == 1);  // into the flattened tensor
  CHECK(ef::argmin(x).item() == 5);
  CHECK(ef::argmax(x.t()).item() == 2);  // flattened in the view's row-major order
  // NaN wins, as in PyTorch.
  const ef::Tensor<T, 1> n{1, std::numeric_limits<T>::quiet_NaN(), 5};
  CHECK(std::isnan(ef::max(n).item()));
  CHECK(std::isnan(ef::min(n).item()));
  CHECK(ef::argmax(n).item() == 1);
  CHECK(ef::argmin(n).item() == 1);
  CHECK(ef::max(ef::Tensor<T, 1>{-inf<T>, -inf<T>}).item() == -inf<T>);

  const auto empty = ef::zeros<T>(ef::Shape<2>{2, 0});
  CHECK_THROWS_WITH_EXACTLY(ef::max(empty, 1), "max: cannot reduce over dim 1 of size 0 in shape [2, 0]", ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::min(empty, -1, ef::keepdim), ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::argmax(empty, 1), ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::argmin(empty), ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::max(empty), ef::shape_error);
  CHECK(ef::max(empty, 0).shape() == ef::Shape<1>{0});  // reducing a non-empty dim of an empty tensor is fine
  CHECK_THROWS_WITH_EXACTLY(ef::argmax(x, 2), doctest::Contains("argmax: dim 2 is out of range"), ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::min(x, -3), ef::shape_error);
}

TEST_CASE_TEMPLATE("reduce: var and std, unbiased by default", T, float, double) {
  const ef::Tensor<T, 2> x{{1, 2, 3, 4}, {2, 2, 2, 2}};
  CHECK(ef::var(x, 1).to_vector() == std::vector<T>{T(5) / T(3), T(0)});
  CHECK(ef::var(x, 1, false).to_vector() == vec<T>({1.25, 0}));
  CHECK(ef::var(x, -1, ef::keepdim).shape() == ef::Shape<2>{2, 1});
  CHECK(ef::var(x, 1, ef::keepdim, false).to_vector() == vec<T>({1.25, 0}));
  CHECK(ef::var(x, 0).to_vector() == vec<T>({0.5, 0, 0.5, 2}));
  const auto v = ef::var(x);
  CHECK(std::is_same_v<decltype(v), const ef::Tensor<T, 0>>);
  CHECK(v.item() == doctest::Approx(5.5 / 7).epsilon(1e-6));  // mean 2.25, squared deviations sum to 5.5
  CHECK(ef::var(x, false).item() == T(5.5 / 8));
  CHECK(ef::var(x, true).item() == v.item());
  CHECK(ef::std(x, 1).to_vector() == std::vector<T>{std::sqrt(T(5) / 3), T(0)});
  CHECK(ef::std(x, 1, false).to_vector() == vec<T>({std::sqrt(1.25), 0}));
  CHECK(ef::std(x, 1, ef::keepdim).shape() == ef::Shape<2>{2, 1});
  CHECK(ef::std(x, 1, ef::keepdim, false)(0, 0) == std::sqrt(T(1.25)));
  // A single element: unbiased variance is NaN (n - 1 = 0), biased 0.
  CHECK(std::isnan(ef::var(ef::Tensor<T, 1>{3}, 0).item()));
  CHECK(ef::var(ef::Tensor<T, 1>{3}, 0, false).item() == T(0));
  // Strided input.
  CHECK(ef::var(x.t(), 0).to_vector() == ef::var(x, 1).to_vector());

  CHECK_THROWS_WITH_EXACTLY(ef::var(x, 2), "var: dim 2 is out of range for a tensor of rank 2 (expected -2 to 1)",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::std(x, -3), ef::shape_error);
  CHECK_THROWS_EXACTLY(ef::std(x, 5, ef::keepdim), ef::shape_error);
}

// ---- softmax / log_softmax ---------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("reduce: softmax rows sum to 1 along any dim", T, float, double) {
  auto x = ef::zeros<T>(ef::Shape<3>{2, 3, 5});
  for (index_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<T>(std::sin(0.7 * static_cast<double>(i)) * 4);
  for (index_t d : {0, 1, 2, -1}) {
    CAPTURE(d);
    const auto y = ef::softmax(x, d);
    CHECK(y.shape() == x.shape());
    for (T v : y.to_vector()) CHECK((v > T(0) && v < T(1)));
    for (T s : ef::sum(y, d).to_vector()) CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
    // log_softmax is log(softmax), computed stably.
    const auto ly = ef::log_softmax(x, d);
    const auto ref = ef::log(y);
    for (index_t i = 0; i < y.numel(); ++i)
      CHECK(ly.data()[i] == doctest::Approx(static_cast<double>(ref.data()[i])).epsilon(1e-5));
  }
  // Strided input gives the same as its contiguous copy.
  CHECK(ef::softmax(x.transpose(0, 2), 1).to_vector() == ef::softmax(x.transpose(0, 2).contiguous(), 1).to_vector());
  // Invariant to shifts; no overflow for large inputs.
  const ef::Tensor<T, 1> a{1, 2, 3};
  const auto big = ef::softmax(a + 1000.0, 0);
  const auto ref = ef::softmax(a, 0);
  for (index_t i = 0; i < 3; ++i) CHECK(big(i) == doctest::Approx(static_cast<double>(ref(i))).epsilon(1e-6));
  CHECK(ef::softmax(ef::Tensor<T, 1>{T(-1e30), T(1e30)}, 0).to_vector() == vec<T>({0, 1}));
  CHECK(ef::softmax(ef::Tensor<T, 1>{7}, 0).item() == T(1));
  CHECK(ef::log_softmax(ef::Tensor<T, 1>{7}, 0).item() == T(0));
  CHECK(ef::softmax(ef::zeros<T>(ef::Shape<2>{2, 0}), 1).numel() == 0);

  CHECK_THROWS_WITH_EXACTLY(ef::softmax(x, 3), "softmax: dim 3 is out of range for a tensor of rank 3 (expected -3 to 2)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(ef::log_softmax(x, -4), doctest::Contains("log_softmax: dim -4 is out of range"), ef::shape_error);
}

TEST_CASE_TEMPLATE("reduce: masked softmax: -inf entries give exactly 0, an all -inf row zeros (never NaN)", T, float,
                   double) {
  const T ninf = -inf<T>;
  const ef::Tensor<T, 2> x{{0.5, ninf, 1.5, ninf}, {ninf, ninf, ninf, ninf}, {2, ninf, ninf, ninf}};
  const auto y = ef::softmax(x, -1);
  for (T v : y.to_vector()) CHECK_FALSE(std::isnan(v));
  CHECK(y(0, 1) == T(0));
  CHECK(y(0, 3) == T(0));
  CHECK(y(0, 0) + y(0, 2) == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(y.select(0, 1).to_vector() == vec<T>({0, 0, 0, 0}));  // the all -inf row
  CHECK(y.select(0, 2).to_vector() == vec<T>({1, 0, 0, 0}));  // one finite entry: exactly one-hot
  const auto ly = ef::log_softmax(x, -1);
  CHECK(ly(0, 1) == ninf);
  CHECK(ly.select(0, 1).to_vector() == vec<T>({ninf, ninf, ninf, ninf}));
  CHECK(ly(2, 0) == T(0));
  // Along dim 0 (strided lanes): column 1 and 3 are all -inf.
  const auto y0 = ef::softmax(x, 0);
  CHECK(y0.select(1, 1).to_vector() == vec<T>({0, 0, 0}));
  CHECK(ef::log_softmax(x, 0).select(1, 3).to_vector() == vec<T>({ninf, ninf, ninf}));
  CHECK(y0(0, 2) == T(1));
  // A large negative (finite) mask value such as -1e9 also gives exact zeros.
  const auto z = ef::softmax(ef::Tensor<T, 1>{1, T(-1e9), 2}, 0);
  CHECK(z(1) == T(0));
}

TEST_CASE("reduce: worked examples softmax_examples (all cases and simple_normalization)") {
  const json& ex = worked_examples().at("softmax_examples");
  int cases = 0;
  for (const auto& c : ex.at("cases")) {
    std::vector<float> x;
    for (const auto& v : c.at("x")) x.push_back(static_cast<float>(number(v)));
    const auto expected = c.at("softmax").get<std::vector<double>>();
    const auto t = ef::from_vector(ef::Shape<1>{static_cast<index_t>(x.size())}, x);
    // The example values are rounded to 6 decimals.
    check_near(ef::softmax(t, 0), expected, 1e-6);
    check_near(ef::softmax(t.to<double>(), 0), expected, 1e-6);
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::isinf(x[i])) CHECK(ef::softmax(t, 0)(static_cast<index_t>(i)) == 0.0f);
    ++cases;
  }
  CHECK(cases == 5);
  // [2, -inf, -inf] -> exactly [1, 0, 0].
  CHECK(ef::softmax(ef::Tensor<float, 1>{2, -inf<float>, -inf<float>}, 0).to_vector() == std::vector<float>{1, 0, 0});

  // "Simple normalization" x / sum(x), the seed's motivating contrast to softmax.
  const json& sn = ex.at("simple_normalization");
  const auto x = ef::from_vector(ef::Shape<1>{4}, sn.at("x").get<std::vector<float>>());
  check_near(x / ef::sum(x), sn.at("out").get<std::vector<double>>(), 1e-6);
}

TEST_CASE("reduce: worked example causal_softmax (tril mask, -inf, softmax)") {
  const json& ex = worked_examples().at("causal_softmax");
  const auto scores = ef::from_vector(ef::Shape<2>{5, 5}, ex.at("scaled_scores").get<std::vector<float>>());
  const auto expected = ex.at("causal_weights").get<std::vector<double>>();
  // Listing 1.11: mask everything above the diagonal with -inf, then softmax over the last dim.
  const auto causal = ef::tril(ef::ones<float>({5, 5})) > 0;
  const auto masked = ef::masked_fill(scores, ~causal, -std::numeric_limits<double>::infinity());
  const auto w = ef::softmax(masked, -1);
  check_near(w, expected, 1e-6);  // rounded to 6 decimals in the example
  for (index_t i = 0; i < 5; ++i) {
    CHECK(ef::sum(w.select(0, i)).item() == doctest::Approx(1.0).epsilon(1e-6));
    for (index_t j = i + 1; j < 5; ++j) CHECK(w(i, j) == 0.0f);  // exactly zero above the diagonal
  }
  // The same in double and batched: [2, 5, 5] with the mask broadcast.
  check_near(ef::softmax(ef::masked_fill(scores.to<double>(), ~causal, -inf<double>), -1), expected, 1e-6);
  const auto batched = ef::softmax(ef::masked_fill(scores.unsqueeze(0).expand(ef::Shape<3>{2, 5, 5}), ~causal,
                                                   -std::numeric_limits<double>::infinity()),
                                   -1);
  CHECK(batched.select(0, 1).to_vector() == w.to_vector());
}
