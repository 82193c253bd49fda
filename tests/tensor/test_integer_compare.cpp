// Comparisons, where and masked_fill on int64 tensors (token ids, labels), and the rule that braces hold
// values only. Expected values follow from the definitions (integer comparisons are exact), so they are
// computed here element by element rather than read from a fixture.
#include <doctest/doctest.h>

#include <type_traits>

#include "eigenformer/tensor.hpp"
#include "support/throws.hpp"

namespace ef = eigenformer;

// `Tensor<float, 2>({2, 3})` used to be a 2x3 of zeros while `Tensor<float, 1>({5})` was the value 5.
static_assert(!std::is_constructible_v<ef::Tensor<float, 2>, ef::Shape<2>>,
              "a shape must go through zeros/empty/full, never a constructor");
static_assert(!std::is_constructible_v<ef::Tensor<std::int64_t, 1>, ef::Shape<1>>);

TEST_CASE("int64 comparisons with a scalar and with a tensor give PyTorch's masks") {
  const auto ids = ef::tensor<std::int64_t>({{5, 0, 7, -3}, {0, 0, 2, 50257}});
  const std::int64_t pad = 0;
  const auto keep = ids != pad;  // the seed's (ids != PAD)
  const auto is_pad = ids == pad;
  const auto below = ids < 0.5;  // a fractional scalar compares in double: ids < 0.5, not ids < 0
  const auto big = ids >= std::int64_t{50257};
  REQUIRE(keep.shape() == ids.shape());
  int checked = 0;
  for (ef::index_t i = 0; i < 2; ++i)
    for (ef::index_t j = 0; j < 4; ++j, ++checked) {
      CHECK(keep(i, j) == (ids(i, j) != 0));
      CHECK(is_pad(i, j) == (ids(i, j) == 0));
      CHECK(below(i, j) == (ids(i, j) < 0.5));
      CHECK(big(i, j) == (ids(i, j) >= 50257));
    }
  CHECK(checked == 8);
  const auto other = ef::tensor<std::int64_t>({5, 1, 7, -3});  // broadcast over rows
  const auto same = ids == other;
  CHECK(same(0, 0));
  CHECK_FALSE(same(0, 1));
  CHECK(same(0, 3));
  CHECK_FALSE(same(1, 3));
  CHECK(ef::equal(keep.to<std::int64_t>(), ef::tensor<std::int64_t>({{1, 0, 1, 1}, {0, 0, 1, 1}})));
}

TEST_CASE("where and masked_fill keep int64 labels exact") {
  const auto labels = ef::tensor<std::int64_t>({3, 1, 4, 1, 5});
  const auto mask = labels == std::int64_t{1};
  const auto ignored = ef::masked_fill(labels, mask, -100);  // ignore_index for the loss
  const auto picked = ef::where(mask, labels, std::int64_t{9});
  for (ef::index_t i = 0; i < 5; ++i) {
    CHECK(ignored(i) == (labels(i) == 1 ? -100 : labels(i)));
    CHECK(picked(i) == (labels(i) == 1 ? 1 : 9));
  }
  CHECK_THROWS_WITH_EXACTLY(ef::masked_fill(labels, ef::tensor<bool>({true, false}), 0),
                       doctest::Contains("masked_fill"), ef::shape_error);
}

TEST_CASE("braces hold values: a one-element tensor and torch.equal") {
  const ef::Tensor<float, 1> five({5.0f});
  CHECK(five.numel() == 1);
  CHECK(five(0) == 5.0f);
  CHECK(ef::equal(ef::zeros<float>({2, 3}), ef::full<float>({2, 3}, 0.0f)));
  CHECK_FALSE(ef::equal(ef::zeros<float>({2, 3}), ef::zeros<float>({3, 2})));
}
