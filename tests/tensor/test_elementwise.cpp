// Element-wise ops: arithmetic with broadcasting (named and operators), tensor-scalar arithmetic, unary
// math, comparisons and logical ops on masks, where, masked_fill, tril/triu; with their errors.
// Results are fresh tensors: operands (also strided views) are never modified.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;



template <typename T>
constexpr T qnan = std::numeric_limits<T>::quiet_NaN();

}  // namespace

// ---- binary arithmetic with broadcasting -------------------------------------------------------------------

TEST_CASE_TEMPLATE("elementwise: add, sub, mul, div and their operators", T, float, double) {
  const ef::Tensor<T, 2> a{{1, 2, 3}, {4, 5, 6}};
  const ef::Tensor<T, 2> b{{6, 5, 4}, {3, 2, 1}};
  CHECK((a + b).to_vector() == vec<T>({7, 7, 7, 7, 7, 7}));
  CHECK((a - b).to_vector() == vec<T>({-5, -3, -1, 1, 3, 5}));
  CHECK((a * b).to_vector() == vec<T>({6, 10, 12, 12, 10, 6}));
  CHECK((a / b).to_vector() == std::vector<T>{T(1) / 6, T(2) / 5, T(3) / 4, T(4) / 3, T(5) / 2, T(6)});
  CHECK(ef::add(a, b).to_vector() == (a + b).to_vector());
  CHECK(ef::sub(a, b).to_vector() == (a - b).to_vector());
  CHECK(ef::mul(a, b).to_vector() == (a * b).to_vector());
  CHECK(ef::div(a, b).to_vector() == (a / b).to_vector());
  // Fresh, aligned results; operands untouched.
  const auto s = a + b;
  CHECK_FALSE(s.shares_storage_with(a));
  CHECK(aligned64(s.data()));
  CHECK(a.to_vector() == vec<T>({1, 2, 3, 4, 5, 6}));
  // IEEE semantics: division by zero gives inf / nan, as in PyTorch.
  const auto q = ef::Tensor<T, 1>{1, -1, 0} / ef::Tensor<T, 1>{0, 0, 0};
  CHECK(q(0) == inf<T>);
  CHECK(q(1) == -inf<T>);
  CHECK(std::isnan(q(2)));
}

TEST_CASE_TEMPLATE("elementwise: broadcasting aligns shapes at the right", T, float, double) {
  const auto a = iota<T>(ef::Shape<3>{2, 1, 3});     // [2, 1, 3]
  const auto b = iota<T>(ef::Shape<2>{4, 1}, 100);   // [4, 1]
  const auto c = a + b;                              // [2, 4, 3]
  CHECK(std::is_same_v<decltype(c), const ef::Tensor<T, 3>>);
  CHECK(c.shape() == ef::Shape<3>{2, 4, 3});
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 4; ++j)
      for (index_t k = 0; k < 3; ++k) CHECK(c(i, j, k) == a(i, 0, k) + b(j, 0));
  // Lower rank on the left, 0-d operands, size-1 dims on both sides.
  CHECK((ef::Tensor<T, 1>{1, 2} * iota<T>(ef::Shape<2>{2, 2})).to_vector() == vec<T>({0, 2, 2, 6}));
  CHECK((iota<T>(ef::Shape<1>{3}) - ef::Tensor<T, 0>(T(1))).to_vector() == vec<T>({-1, 0, 1}));
  CHECK((ef::Tensor<T, 0>(T(2)) * ef::Tensor<T, 0>(T(3))).item() == T(6));
  CHECK((ef::Tensor<T, 2>{{1}, {2}} + ef::Tensor<T, 2>{{10, 20}}).to_vector() == vec<T>({11, 21, 12, 22}));
  // Empty dims broadcast to empty results.
  CHECK((ef::zeros<T>(ef::Shape<2>{0, 3}) + ef::Tensor<T, 1>{1, 2, 3}).shape() == ef::Shape<2>{0, 3});
}

TEST_CASE("elementwise: strided operands (transposed, sliced, expanded) read correctly") {
  using T = float;  // float only: the code is type-independent (compile time)
  const auto x = iota<T>(ef::Shape<2>{3, 4});
  const auto xt = x.t();                      // [4, 3], strides [1, 4]
  const auto y = iota<T>(ef::Shape<2>{4, 3}, 50);
  const auto r = xt + y;
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) CHECK(r(i, j) == x(j, i) + y(i, j));
  CHECK((xt + y).to_vector() == (xt.contiguous() + y).to_vector());
  CHECK((x.slice(1, 0, 4, 2) * x.slice(1, 1, 4, 2)).to_vector() == vec<T>({0, 6, 20, 42, 72, 110}));
  const auto e = ef::Tensor<T, 1>{1, 2, 3}.expand(ef::Shape<2>{2, 3});
  CHECK((e - ef::Tensor<T, 2>{{1}, {2}}).to_vector() == vec<T>({0, 1, 2, -1, 0, 1}));
  CHECK((xt * xt).to_vector() == (xt.contiguous() * xt.contiguous()).to_vector());
}

TEST_CASE("elementwise: shapes that do not broadcast throw shape_error naming op and shapes") {
  using T = float;  // float only: the code is type-independent (compile time)
  const auto a = iota<T>(ef::Shape<2>{3, 5});
  const auto b = iota<T>(ef::Shape<1>{4});
  CHECK_THROWS_WITH_EXACTLY(ef::add(a, b), "add: shapes [3, 5] [4] do not broadcast (size 5 vs 4 at dim 1)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((a + b), "add: shapes [3, 5] [4] do not broadcast (size 5 vs 4 at dim 1)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((b - a), "sub: shapes [4] [3, 5] do not broadcast (size 4 vs 5 at dim 1)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((a * b), doctest::Contains("mul: shapes [3, 5] [4]"), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((a / b), doctest::Contains("div: shapes [3, 5] [4]"), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::maximum(a, b)), doctest::Contains("maximum: shapes [3, 5] [4]"), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::minimum(a, b)), doctest::Contains("minimum: shapes"), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::pow(a, b)), doctest::Contains("pow: shapes"), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((iota<T>(ef::Shape<3>{2, 3, 1}) + iota<T>(ef::Shape<3>{3, 3, 4})),
                       "add: shapes [2, 3, 1] [3, 3, 4] do not broadcast (size 2 vs 3 at dim 0)", ef::shape_error);
  // A shape_error is a std::invalid_argument.
  CHECK_THROWS_AS((a + b), std::invalid_argument);
}

TEST_CASE_TEMPLATE("elementwise: maximum, minimum (NaN propagates) and pow", T, float, double) {
  const ef::Tensor<T, 1> a{1, 5, -2, qnan<T>};
  const ef::Tensor<T, 1> b{3, 4, -2, 0};
  const auto mx = ef::maximum(a, b);
  const auto mn = ef::minimum(a, b);
  CHECK(mx(0) == T(3));
  CHECK(mx(1) == T(5));
  CHECK(mx(2) == T(-2));
  CHECK(std::isnan(mx(3)));
  CHECK(mn(0) == T(1));
  CHECK(mn(1) == T(4));
  CHECK(std::isnan(mn(3)));
  CHECK(std::isnan(ef::maximum(b, a)(3)));  // in either position
  CHECK(ef::maximum(ef::Tensor<T, 2>{{1}, {5}}, ef::Tensor<T, 1>{2, 3}).to_vector() == vec<T>({2, 3, 5, 5}));

  const ef::Tensor<T, 1> base{2, 9, 0.5};
  CHECK(ef::pow(base, ef::Tensor<T, 1>{3, 0.5, -1}).to_vector() == vec<T>({8, 3, 2}));
  CHECK(ef::pow(base, ef::Tensor<T, 0>(T(2))).to_vector() == vec<T>({4, 81, 0.25}));
  // pow with a scalar exponent: 2 is an exact square; others go through std::pow.
  CHECK(ef::pow(base, 2.0).to_vector() == vec<T>({4, 81, 0.25}));
  CHECK(ef::pow(base, 0.5)(1) == T(3));
  CHECK(ef::pow(base, 3.0).to_vector() == vec<T>({8, 729, 0.125}));
  CHECK(ef::pow(base, 0.0).to_vector() == vec<T>({1, 1, 1}));
  CHECK(ef::pow(ef::Tensor<T, 1>{2}, 2.5)(0) == std::pow(T(2), T(2.5)));
  CHECK(std::isnan(ef::pow(ef::Tensor<T, 1>{-8}, 1.0 / 3)(0)));
}

// ---- scalars ------------------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("elementwise: arithmetic with a scalar on either side", T, float, double) {
  const auto x = ef::Tensor<T, 2>{{1, 2}, {3, 4}}.t();  // strided: the result is in the view's order
  CHECK((x + 1.5).to_vector() == vec<T>({2.5, 4.5, 3.5, 5.5}));
  CHECK((1.5 + x).to_vector() == vec<T>({2.5, 4.5, 3.5, 5.5}));
  CHECK((x - 1).to_vector() == vec<T>({0, 2, 1, 3}));
  CHECK((10 - x).to_vector() == vec<T>({9, 7, 8, 6}));
  CHECK((x * -2).to_vector() == vec<T>({-2, -6, -4, -8}));
  CHECK((0.5 * x).to_vector() == vec<T>({0.5, 1.5, 1, 2}));
  CHECK((x / 4).to_vector() == vec<T>({0.25, 0.75, 0.5, 1}));
  CHECK((12 / x).to_vector() == vec<T>({12, 4, 6, 3}));
  CHECK((-x).to_vector() == vec<T>({-1, -3, -2, -4}));
  CHECK(ef::neg(x).to_vector() == (-x).to_vector());
  CHECK(std::signbit(ef::neg(ef::Tensor<T, 1>{0})(0)));  // -0.0
  // The scalar is rounded to T first (as PyTorch does for a Python number): 0.1 + 0.2 in float.
  if constexpr (std::is_same_v<T, float>) CHECK((ef::Tensor<float, 1>{0.1f} + 0.2)(0) == 0.1f + 0.2f);
  const auto r = x * 3;
  CHECK(r.is_contiguous());
  CHECK(aligned64(r.data()));
}

// ---- unary math ---------------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("elementwise: exp, log, sqrt, rsqrt, tanh, abs, square, erf, sigmoid", T, float, double) {
  const ef::Tensor<T, 1> x{-2, -0.5, 0, 0.5, 1, 3};
  const auto approx = [](T v) { return doctest::Approx(static_cast<double>(v)).epsilon(1e-6); };
  for (index_t i = 0; i < x.numel(); ++i) {
    const T v = x(i);
    CAPTURE(v);
    CHECK(ef::exp(x)(i) == approx(std::exp(v)));
    CHECK(ef::tanh(x)(i) == approx(std::tanh(v)));
    CHECK(ef::abs(x)(i) == std::abs(v));
    CHECK(ef::square(x)(i) == v * v);
    CHECK(ef::erf(x)(i) == std::erf(v));  // libm, element by element
    CHECK(ef::sigmoid(x)(i) == approx(T(1) / (T(1) + std::exp(-v))));
  }
  const ef::Tensor<T, 1> p{0.25, 1, 2, 9, 1e-3};
  for (index_t i = 0; i < p.numel(); ++i) {
    const T v = p(i);
    CHECK(ef::log(p)(i) == approx(std::log(v)));
    CHECK(ef::sqrt(p)(i) == std::sqrt(v));  // correctly rounded, as PyTorch's
    CHECK(ef::rsqrt(p)(i) == T(1) / std::sqrt(v));
  }
  // Strided input: results in the view's order.
  const auto m = ef::Tensor<T, 2>{{1, 4}, {9, 16}};
  CHECK(ef::sqrt(m.t()).to_vector() == vec<T>({1, 3, 2, 4}));
  CHECK(ef::exp(m.t()).to_vector() == ef::exp(m.t().contiguous()).to_vector());
  CHECK(ef::log(m.t()).to_vector() == ef::log(m.t().contiguous()).to_vector());
  CHECK(ef::abs(ef::Tensor<T, 1>{-3, 3}.expand(ef::Shape<2>{2, 2})).to_vector() == vec<T>({3, 3, 3, 3}));
  CHECK(ef::exp(ef::Tensor<T, 0>(T(0))).item() == T(1));
}

TEST_CASE_TEMPLATE("elementwise: unary math at the edges of the range matches libm / PyTorch", T, float, double) {
  // exp(-inf) is exactly 0 and very negative arguments underflow gradually, not to ~1e-38.
  const ef::Tensor<T, 1> lo{-inf<T>, T(-1e9), T(-745), T(-100), T(-87.5), T(-20)};
  const auto e = ef::exp(lo);
  const T smallest_normal_arg = std::log(std::numeric_limits<T>::min());
  for (index_t i = 0; i < lo.numel(); ++i) {
    CAPTURE(lo(i));
    CHECK(e(i) == doctest::Approx(std::exp(lo(i))).epsilon(1e-6));
    if (lo(i) < smallest_normal_arg) CHECK(e(i) == std::exp(lo(i)));  // 0 or a denormal, exactly
  }
  CHECK(e(0) == T(0));
  CHECK(e(1) == T(0));
  CHECK(ef::exp(ef::Tensor<T, 1>{inf<T>})(0) == inf<T>);
  CHECK(std::isnan(ef::exp(ef::Tensor<T, 1>{qnan<T>})(0)));
  // The same through a strided view (the fix-up walks the view in row-major order).
  const auto st = ef::Tensor<T, 2>{{0, -inf<T>}, {-inf<T>, 1}}.t();
  CHECK(ef::exp(st)(0, 1) == T(0));
  CHECK(ef::exp(st)(1, 0) == T(0));

  // log: 0 -> -inf, inf -> inf, negative -> nan, denormals exact.
  const T denorm = std::numeric_limits<T>::denorm_min() * 1000;
  const auto l = ef::log(ef::Tensor<T, 1>{0, inf<T>, -1, denorm});
  CHECK(l(0) == -inf<T>);
  CHECK(l(1) == inf<T>);
  CHECK(std::isnan(l(2)));
  CHECK(l(3) == std::log(denorm));

  // sqrt: inf -> inf (not NaN), -0 -> -0, denormals not flushed; rsqrt(0) = inf.
  const auto s = ef::sqrt(ef::Tensor<T, 1>{inf<T>, T(-0.0), denorm, -1, 0, 2});
  CHECK(s(0) == inf<T>);
  CHECK((s(1) == T(0) && std::signbit(s(1))));
  CHECK(s(2) == std::sqrt(denorm));
  CHECK(std::isnan(s(3)));
  CHECK(s(5) == std::sqrt(T(2)));
  const auto rs = ef::rsqrt(ef::Tensor<T, 1>{0, inf<T>, denorm});
  CHECK(rs(0) == inf<T>);
  CHECK(rs(1) == T(0));
  CHECK(rs(2) == T(1) / std::sqrt(denorm));

  // tanh saturates to +-1, keeps -0.
  const auto t = ef::tanh(ef::Tensor<T, 1>{-inf<T>, inf<T>, T(-0.0), T(30)});
  CHECK(t(0) == T(-1));
  CHECK(t(1) == T(1));
  CHECK(std::signbit(t(2)));
  CHECK(t(3) == T(1));
  CHECK(ef::sigmoid(ef::Tensor<T, 1>{-inf<T>, inf<T>}).to_vector() == vec<T>({0, 1}));
  CHECK(ef::erf(ef::Tensor<T, 1>{-inf<T>, inf<T>}).to_vector() == vec<T>({-1, 1}));
}

// ---- comparisons and masks ----------------------------------------------------------------------------------

TEST_CASE("elementwise: comparisons give bool tensors, with broadcasting and scalars") {
  using T = float;  // float only: the code is type-independent (compile time)
  const ef::Tensor<T, 2> a{{1, 2, 3}, {4, 5, 6}};
  const ef::Tensor<T, 1> b{1, 5, 4};
  using B = std::vector<bool>;
  CHECK(std::is_same_v<decltype(ef::eq(a, b)), ef::Tensor<bool, 2>>);
  CHECK(ef::eq(a, b).to_vector() == B{1, 0, 0, 0, 1, 0});
  CHECK(ef::ne(a, b).to_vector() == B{0, 1, 1, 1, 0, 1});
  CHECK(ef::lt(a, b).to_vector() == B{0, 1, 1, 0, 0, 0});
  CHECK(ef::le(a, b).to_vector() == B{1, 1, 1, 0, 1, 0});
  CHECK(ef::gt(a, b).to_vector() == B{0, 0, 0, 1, 0, 1});
  CHECK(ef::ge(a, b).to_vector() == B{1, 0, 0, 1, 1, 1});
  CHECK((a < b).to_vector() == ef::lt(a, b).to_vector());
  CHECK((a <= b).to_vector() == ef::le(a, b).to_vector());
  CHECK((a > b).to_vector() == ef::gt(a, b).to_vector());
  CHECK((a >= b).to_vector() == ef::ge(a, b).to_vector());
  CHECK(ef::eq(a, 5).to_vector() == B{0, 0, 0, 0, 1, 0});
  CHECK(ef::ne(a, 5).to_vector() == B{1, 1, 1, 1, 0, 1});
  CHECK(ef::lt(a, 2.5).to_vector() == B{1, 1, 0, 0, 0, 0});
  CHECK(ef::le(a, 2).to_vector() == B{1, 1, 0, 0, 0, 0});
  CHECK(ef::gt(a, 4).to_vector() == B{0, 0, 0, 0, 1, 1});
  CHECK(ef::ge(a, 4).to_vector() == B{0, 0, 0, 1, 1, 1});
  CHECK((a < 2.5).to_vector() == ef::lt(a, 2.5).to_vector());
  CHECK((a <= 2).to_vector() == ef::le(a, 2).to_vector());
  CHECK((a > 4).to_vector() == ef::gt(a, 4).to_vector());
  CHECK((a >= 4).to_vector() == ef::ge(a, 4).to_vector());
  // NaN compares unequal to everything, including itself.
  const ef::Tensor<T, 1> n{qnan<T>};
  CHECK_FALSE(ef::eq(n, n)(0));
  CHECK(ef::ne(n, n)(0));
  CHECK_FALSE(ef::lt(n, 0)(0));
  CHECK_THROWS_WITH_EXACTLY((ef::eq(a, ef::Tensor<T, 1>{1, 2})), "eq: shapes [2, 3] [2] do not broadcast (size 3 vs 2 at dim 1)",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY((a < ef::Tensor<T, 2>{{1, 2}, {3, 4}, {5, 6}}), ef::shape_error);
}

TEST_CASE("elementwise: logical_and, logical_or, logical_not and ~ on masks") {
  const ef::Tensor<bool, 2> a{{true, true}, {false, false}};
  const ef::Tensor<bool, 1> b{true, false};
  using B = std::vector<bool>;
  CHECK(ef::logical_and(a, b).to_vector() == B{1, 0, 0, 0});
  CHECK(ef::logical_or(a, b).to_vector() == B{1, 1, 1, 0});
  CHECK(ef::logical_not(a).to_vector() == B{0, 0, 1, 1});
  CHECK((~a).to_vector() == B{0, 0, 1, 1});
  CHECK((~a.t()).to_vector() == B{0, 1, 0, 1});
  CHECK_THROWS_WITH_EXACTLY((ef::logical_and(a, ef::Tensor<bool, 1>{true, false, true})),
                       "logical_and: shapes [2, 2] [3] do not broadcast (size 2 vs 3 at dim 1)", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::logical_or(a, ef::zeros<bool>(ef::Shape<2>{3, 1}))), ef::shape_error);
}

TEST_CASE("elementwise: where broadcasts condition and both branches") {
  using T = float;  // float only: the code is type-independent (compile time)
  const ef::Tensor<bool, 2> cond{{true, false, true}};            // [1, 3]
  const ef::Tensor<T, 2> x{{1}, {2}};                             // [2, 1]
  const ef::Tensor<T, 1> y{-1, -2, -3};                           // [3]
  const auto w = ef::where(cond, x, y);
  CHECK(w.shape() == ef::Shape<2>{2, 3});
  CHECK(w.to_vector() == vec<T>({1, -2, 1, 2, -2, 2}));
  CHECK(ef::where(cond, x, 0.5).to_vector() == vec<T>({1, 0.5, 1, 2, 0.5, 2}));
  CHECK(ef::where(cond, y, -inf<double>).to_vector() == vec<T>({-1, -inf<double>, -3}));
  CHECK(ef::where(ef::Tensor<bool, 0>(true), y, ef::Tensor<T, 0>(T(9))).to_vector() == vec<T>({-1, -2, -3}));
  CHECK_THROWS_WITH_EXACTLY((ef::where(ef::Tensor<bool, 1>{true, false}, y, y)),
                       "where: shapes [2] [3] [3] do not broadcast (size 2 vs 3 at dim 0)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::where(cond, ef::zeros<T>(ef::Shape<2>{2, 2}), y)),
                       "where: shapes [1, 3] [2, 2] [3] do not broadcast (size 3 vs 2 at dim 1)", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::where(cond, x, ef::Tensor<T, 1>{1, 2})), ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::where(cond, ef::Tensor<T, 1>{1, 2}, 0.0)), ef::shape_error);
}

TEST_CASE("elementwise: masked_fill") {
  using T = float;  // float only: the code is type-independent (compile time)
  const auto x = iota<T>(ef::Shape<2>{2, 3});
  const ef::Tensor<bool, 1> row{false, true, true};
  const auto m = ef::masked_fill(x, row, -inf<T>);
  CHECK(m.to_vector() == vec<T>({0, -inf<double>, -inf<double>, 3, -inf<double>, -inf<double>}));
  CHECK(x.to_vector() == vec<T>({0, 1, 2, 3, 4, 5}));  // untouched
  CHECK(ef::masked_fill(x, ef::Tensor<bool, 2>{{true}, {false}}, -1e9).to_vector() ==
        vec<T>({-1e9, -1e9, -1e9, 3, 4, 5}));
  CHECK(ef::masked_fill(x.t(), ef::Tensor<bool, 2>{{true, false}, {false, false}, {false, true}}, 7).to_vector() ==
        vec<T>({7, 3, 1, 4, 2, 7}));
  CHECK(ef::masked_fill(x, ef::Tensor<bool, 0>(false), 1).to_vector() == x.to_vector());

  CHECK_THROWS_WITH_EXACTLY((ef::masked_fill(x, ef::Tensor<bool, 1>{true, false}, 0)),
                       "masked_fill: shapes [2, 3] and [2] do not broadcast (size 3 vs 2 at dim 1)", ef::shape_error);
  // A mask that broadcasts with x but would enlarge it.
  CHECK_THROWS_WITH_EXACTLY((ef::masked_fill(x.narrow(0, 0, 1), ef::Tensor<bool, 2>{{true, false, true}, {false, true, false}}, 0)),
                       "masked_fill: mask of shape [2, 3] does not broadcast to tensor shape [1, 3]", ef::shape_error);
}

// ---- tril / triu --------------------------------------------------------------------------------------------

TEST_CASE("elementwise: tril and triu keep a triangle of the last two dims") {
  using T = float;  // float only: the code is type-independent (compile time)
  const auto x = iota<T>(ef::Shape<2>{3, 4}, 1);  // [[1..4], [5..8], [9..12]]
  CHECK(ef::tril(x).to_vector() == vec<T>({1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}));
  CHECK(ef::tril(x, 1).to_vector() == vec<T>({1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12}));
  CHECK(ef::tril(x, -1).to_vector() == vec<T>({0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}));
  CHECK(ef::tril(x, -5).to_vector() == std::vector<T>(12, T(0)));
  CHECK(ef::tril(x, 10).to_vector() == x.to_vector());
  CHECK(ef::triu(x).to_vector() == vec<T>({1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}));
  CHECK(ef::triu(x, 1).to_vector() == vec<T>({0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}));
  CHECK(ef::triu(x, -1).to_vector() == vec<T>({1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}));
  CHECK(ef::triu(x, 4).to_vector() == std::vector<T>(12, T(0)));
  CHECK((ef::tril(x) + ef::triu(x, 1)).to_vector() == x.to_vector());
  CHECK(x(0, 1) == T(2));  // input untouched
  // Batched: every [rows, cols] matrix; strided input.
  const auto b = iota<T>(ef::Shape<3>{2, 2, 2});
  CHECK(ef::tril(b).to_vector() == vec<T>({0, 0, 2, 3, 4, 0, 6, 7}));
  CHECK(ef::triu(b.transpose(1, 2)).to_vector() == vec<T>({0, 2, 0, 3, 4, 6, 0, 7}));
  CHECK(ef::tril(ef::zeros<T>(ef::Shape<2>{0, 3})).numel() == 0);
  CHECK(aligned64(ef::tril(x).data()));
}

TEST_CASE("elementwise: worked example tril_example (a 3x3 lower triangle)") {
  const json& ex = worked_examples().at("tril_example");
  const auto a = ef::from_vector(ef::Shape<2>{3, 3}, ex.at("A").get<std::vector<float>>());
  CHECK(ef::tril(a).to_vector() == ex.at("tril").get<std::vector<float>>());
  // The causal mask it builds: ones on and below the diagonal.
  const auto mask = ef::tril(ef::ones<float>({3, 3})) > 0;
  CHECK(mask.to_vector() == std::vector<bool>{1, 0, 0, 1, 1, 0, 1, 1, 1});
}
