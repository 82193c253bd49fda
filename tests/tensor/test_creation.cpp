// Factories: empty, full, zeros, ones (Shape and braced-list forms), the *_like variants, from_vector,
// arange and eye, with their errors. Every factory returns a fresh, contiguous, 64-byte aligned tensor.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;


template <typename T, std::size_t R>
void check_fresh(const ef::Tensor<T, R>& t) {
  CHECK(t.is_contiguous());
  CHECK(aligned64(t.data()));
}

}  // namespace

TEST_CASE_TEMPLATE("creation: zeros, ones, full, empty from braces and from a Shape", T, float, double) {
  const auto z = ef::zeros<T>({2, 3});
  CHECK(std::is_same_v<decltype(z), const ef::Tensor<T, 2>>);
  CHECK(z.shape() == ef::Shape<2>{2, 3});
  CHECK(z.to_vector() == std::vector<T>(6, T(0)));
  check_fresh(z);

  const auto o = ef::ones<T>(ef::Shape<3>{1, 2, 2});
  CHECK(o.shape() == ef::Shape<3>{1, 2, 2});
  CHECK(o.to_vector() == std::vector<T>(4, T(1)));
  check_fresh(o);
  CHECK(ef::ones<T>({5}).to_vector() == std::vector<T>(5, T(1)));

  const auto f = ef::full<T>({3}, T(7.5));
  CHECK(f.to_vector() == std::vector<T>(3, T(7.5)));
  check_fresh(f);
  CHECK(ef::full(ef::Shape<2>{2, 2}, T(-1)).to_vector() == std::vector<T>(4, T(-1)));
  const T inf = std::numeric_limits<T>::infinity();
  CHECK(ef::full<T>({2}, -inf).to_vector() == std::vector<T>(2, -inf));

  const auto e = ef::empty<T>({4, 0, 2});
  CHECK(e.shape() == ef::Shape<3>{4, 0, 2});
  CHECK(e.numel() == 0);
  check_fresh(ef::empty<T>(ef::Shape<2>{3, 3}));

  // A 0-d tensor from an empty Shape; zero-size dims are allowed.
  CHECK(ef::zeros<T>(ef::Shape<0>{}).item() == T(0));
  CHECK(ef::ones<T>({0}).numel() == 0);

  // Different calls never share storage.
  CHECK_FALSE(ef::zeros<T>({2}).shares_storage_with(ef::zeros<T>({2})));

  CHECK_THROWS_WITH_EXACTLY((ef::zeros<T>({2, -3})), "tensor: negative size in shape [2, -3]", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::ones<T>({-1})), ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::full<T>({-1, 2}, T(1))), ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::empty<T>({-2})), ef::shape_error);
}

TEST_CASE_TEMPLATE("creation: zeros_like, ones_like, empty_like, full_like take the shape, not the strides", T, float,
                   double) {
  const auto base = ef::arange<T>(6).reshape({2, 3});
  const auto view = base.t();  // [3, 2], strided
  for (const auto& t : {ef::zeros_like(view), ef::ones_like(view), ef::empty_like(view), ef::full_like(view, T(2))}) {
    CHECK(t.shape() == ef::Shape<2>{3, 2});
    CHECK_FALSE(t.shares_storage_with(base));
    check_fresh(t);
  }
  CHECK(ef::zeros_like(view).to_vector() == std::vector<T>(6, T(0)));
  CHECK(ef::ones_like(view).to_vector() == std::vector<T>(6, T(1)));
  CHECK(ef::full_like(view, T(2)).to_vector() == std::vector<T>(6, T(2)));
  CHECK(ef::zeros_like(ef::Tensor<T, 0>(T(3))).item() == T(0));
}

TEST_CASE_TEMPLATE("creation: from_vector fills row-major; the count must match", T, float, double) {
  const auto t = ef::from_vector(ef::Shape<2>{2, 2}, std::vector<T>{1, 2, 3, 4});
  CHECK(t(1, 0) == T(3));
  check_fresh(t);
  CHECK(ef::from_vector(ef::Shape<0>{}, std::vector<T>{5}).item() == T(5));
  CHECK_THROWS_WITH_EXACTLY((ef::from_vector(ef::Shape<2>{2, 3}, std::vector<T>{1, 2})),
                       "from_vector: 2 values do not fill shape [2, 3] (6 elements)", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::from_vector(ef::Shape<1>{1}, std::vector<T>{})), ef::shape_error);
}

TEST_CASE("creation: from_vector and full also build int64 and bool tensors") {
  const auto idx = ef::from_vector(ef::Shape<1>{3}, std::vector<std::int64_t>{2, 0, 1});
  CHECK(idx(0) == 2);
  const auto mask = ef::full<bool>({2, 2}, true);
  CHECK(mask.to_vector() == std::vector<bool>(4, true));
  CHECK(ef::zeros<std::int64_t>({3}).to_vector() == std::vector<std::int64_t>(3, 0));
}

TEST_CASE("creation: arange has PyTorch's length and values") {
  CHECK(ef::arange<float>(5).to_vector() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(ef::arange<std::int64_t>(2, 11, 3).to_vector() == std::vector<std::int64_t>{2, 5, 8});
  CHECK(ef::arange<double>(5.0, 0.0, -1.5).to_vector() == std::vector<double>{5.0, 3.5, 2.0, 0.5});
  // Length ceil((end - start) / step) in double: 0.3 / 0.1 is 2.9999999999999996 -> 3, but
  // (1.3 - 1.0) / 0.1 is 3.0000000000000004 -> 4, as in torch.arange.
  CHECK(ef::arange<float>(0.0, 0.3, 0.1).numel() == 3);
  CHECK(ef::arange<float>(1.0, 1.3, 0.1).numel() == 4);
  CHECK(ef::arange<float>(0.0, 1.0, 0.1).numel() == 10);
  // Values start + i * step in double, then rounded: 0.1 * 3 = 0.30000000000000004 -> 0.3f.
  CHECK(ef::arange<float>(0.0, 1.0, 0.1)(3) == 0.3f);
  CHECK(ef::arange<double>(0.0, 1.0, 0.1)(3) == 0.1 * 3);
  CHECK(ef::arange<float>(3, 3).numel() == 0);  // empty, not an error
  CHECK(ef::arange<float>(0).numel() == 0);
  check_fresh(ef::arange<float>(17));
  check_fresh(ef::arange<std::int64_t>(3));
}

TEST_CASE("creation: arange with a bad step or bounds throws std::invalid_argument") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_EXACTLY((ef::arange<float>(0, 5, 0)), "arange: step must be nonzero", std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY((ef::arange<float>(0, 5, -1)), doctest::Contains("inconsistent with step sign"),
                       std::invalid_argument);
  CHECK_THROWS_EXACTLY((ef::arange<float>(5, 0, 1)), std::invalid_argument);
  CHECK_THROWS_EXACTLY(ef::arange<float>(-1), std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY((ef::arange<float>(0, inf, 1)), "arange: start and end must be finite", std::invalid_argument);
  CHECK_THROWS_EXACTLY((ef::arange<float>(nan, 1, 1)), std::invalid_argument);
  CHECK_THROWS_EXACTLY((ef::arange<float>(0, 1, nan)), std::invalid_argument);
  // Shapes and indices are errors of a kind std::invalid_argument handlers catch too.
  CHECK_THROWS_EXACTLY((ef::arange<double>(0, 1, 0)), std::invalid_argument);
}

TEST_CASE_TEMPLATE("creation: eye", T, float, double) {
  const auto i3 = ef::eye<T>(3);
  CHECK(i3.shape() == ef::Shape<2>{3, 3});
  CHECK(i3.to_vector() == std::vector<T>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  check_fresh(i3);
  CHECK(ef::eye<T>(2, 4).to_vector() == std::vector<T>{1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(ef::eye<T>(3, 1).to_vector() == std::vector<T>{1, 0, 0});
  CHECK(ef::eye<T>(0).numel() == 0);
  CHECK_THROWS_EXACTLY(ef::eye<T>(-2), ef::shape_error);
  CHECK(ef::eye<T>(2, -1).shape() == ef::Shape<2>{2, 2});  // m < 0 means m = n
}
