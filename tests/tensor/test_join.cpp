// split (by size and by a list of sizes) and chunk return views; cat and stack copy. Each with its errors.
#include <doctest/doctest.h>

#include <type_traits>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;

}  // namespace

TEST_CASE_TEMPLATE("join: split by size gives views, the last piece smaller", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{5, 2});
  auto parts = ef::split(x, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == ef::Shape<2>{2, 2});
  CHECK(parts[2].shape() == ef::Shape<2>{1, 2});
  CHECK(parts[1].to_vector() == vec<T>({4, 5, 6, 7}));
  CHECK(parts[2].to_vector() == vec<T>({8, 9}));
  for (const auto& p : parts) CHECK(p.shares_storage_with(x));
  parts[1].fill_(T(-1));  // views: writes reach x
  CHECK(x(2, 0) == T(-1));
  const auto by_col = ef::split(x, 1, -1);
  REQUIRE(by_col.size() == 2);
  CHECK(by_col[1].to_vector() == vec<T>({1, 3, -1, -1, 9}));
  CHECK(ef::split(x, 5).size() == 1);
  CHECK(ef::split(x, 7).front().shape() == x.shape());  // larger than the dim: one piece
  CHECK(ef::split(ef::zeros<T>(ef::Shape<2>{0, 3}), 2).size() == 1);  // an empty dim: one empty piece

  CHECK_THROWS_WITH_EXACTLY(ef::split(x, 0), "split: split_size must be positive, got 0", std::invalid_argument);
  CHECK_THROWS_EXACTLY(ef::split(x, -2, 1), std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(ef::split(x, 1, 2), "split: dim 2 is out of range for a tensor of rank 2 (expected -2 to 1)",
                       ef::shape_error);
}

TEST_CASE_TEMPLATE("join: split by a list of sizes must add up to the dim", T, float, double) {
  const auto x = iota<T>(ef::Shape<2>{5, 3});
  const auto parts = ef::split(x, std::vector<index_t>{1, 3, 1});
  REQUIRE(parts.size() == 3);
  CHECK(parts[1].shape() == ef::Shape<2>{3, 3});
  CHECK(parts[2].to_vector() == vec<T>({12, 13, 14}));
  CHECK(parts[1].shares_storage_with(x));
  const auto cols = ef::split(x, std::vector<index_t>{2, 0, 1}, 1);
  CHECK(cols[1].shape() == ef::Shape<2>{5, 0});
  CHECK(cols[2].to_vector() == vec<T>({2, 5, 8, 11, 14}));

  CHECK_THROWS_WITH_EXACTLY((ef::split(x, std::vector<index_t>{2, 2})),
                       "split: sizes [2, 2] add up to 4, not the size 5 of dim 0 in shape [5, 3]", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::split(x, std::vector<index_t>{1, 1, 2}, -1)),
                       "split: sizes [1, 1, 2] add up to 4, not the size 3 of dim 1 in shape [5, 3]", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::split(x, std::vector<index_t>{6, -1})), ef::shape_error);  // adds up, but a size is negative
  CHECK_THROWS_EXACTLY((ef::split(x, std::vector<index_t>{}, 0)), ef::shape_error);
}

TEST_CASE_TEMPLATE("join: chunk into equal pieces, the last smaller", T, float, double) {
  const auto x = iota<T>(ef::Shape<2>{2, 7});
  const auto c = ef::chunk(x, 3, 1);  // sizes 3, 3, 1 (as torch.chunk)
  REQUIRE(c.size() == 3);
  CHECK(c[0].shape() == ef::Shape<2>{2, 3});
  CHECK(c[2].shape() == ef::Shape<2>{2, 1});
  CHECK(c[2].to_vector() == vec<T>({6, 13}));
  CHECK(c[1].shares_storage_with(x));
  CHECK(ef::chunk(x, 2).size() == 2);             // dim 0 by default
  CHECK(ef::chunk(x, 5, 0).size() == 2);          // fewer chunks than asked when the dim is small
  CHECK(ef::chunk(x, 7, -1).size() == 7);
  CHECK(ef::chunk(x, 4, 1).size() == 4);          // 2, 2, 2, 1

  CHECK_THROWS_WITH_EXACTLY(ef::chunk(x, 0), "chunk: number of chunks must be positive, got 0", std::invalid_argument);
  CHECK_THROWS_EXACTLY(ef::chunk(x, 2, 2), ef::shape_error);
}

TEST_CASE_TEMPLATE("join: cat copies along an existing dim", T, float, double) {
  const auto a = iota<T>(ef::Shape<2>{2, 3});
  const auto b = iota<T>(ef::Shape<2>{1, 3}, 100);
  const auto c = ef::cat(std::vector{a, b});
  CHECK(c.shape() == ef::Shape<2>{3, 3});
  CHECK(c.to_vector() == vec<T>({0, 1, 2, 3, 4, 5, 100, 101, 102}));
  CHECK_FALSE(c.shares_storage_with(a));
  CHECK(c.is_contiguous());
  const auto d = ef::cat(std::vector{a, a.slice(1, 0, 3, 2)}, 1);  // a strided input
  CHECK(d.shape() == ef::Shape<2>{2, 5});
  CHECK(d.to_vector() == vec<T>({0, 1, 2, 0, 2, 3, 4, 5, 3, 5}));
  CHECK(ef::cat(std::vector{a, a.slice(1, 0, 3, 2)}, -1).to_vector() == d.to_vector());
  CHECK(ef::cat(std::vector{a.t(), a.t()}, 1).to_vector() == vec<T>({0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5}));
  const auto single = ef::cat(std::vector{a});
  CHECK(single.to_vector() == a.to_vector());
  CHECK_FALSE(single.shares_storage_with(a));
  CHECK(ef::cat(std::vector{a, ef::zeros<T>(ef::Shape<2>{0, 3})}).to_vector() == a.to_vector());

  CHECK_THROWS_WITH_EXACTLY((ef::cat(std::vector{a, iota<T>(ef::Shape<2>{2, 4})})),
                       "cat: shapes [2, 3] and [2, 4] differ at dim 1 (concatenating along dim 0)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::cat(std::vector{a, b}, 1)),
                       "cat: shapes [2, 3] and [1, 3] differ at dim 0 (concatenating along dim 1)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::cat(std::vector<ef::Tensor<T, 2>>{})), "cat: expected a non-empty list of tensors",
                       std::invalid_argument);
  CHECK_THROWS_EXACTLY((ef::cat(std::vector{a, b}, 2)), ef::shape_error);
}

TEST_CASE_TEMPLATE("join: stack joins equal shapes along a new dim", T, float, double) {
  const auto a = iota<T>(ef::Shape<2>{2, 3});
  const auto b = iota<T>(ef::Shape<2>{2, 3}, 10);
  const auto s0 = ef::stack(std::vector{a, b});
  CHECK(std::is_same_v<decltype(s0), const ef::Tensor<T, 3>>);
  CHECK(s0.shape() == ef::Shape<3>{2, 2, 3});
  CHECK(s0.select(0, 1).to_vector() == b.to_vector());
  const auto s1 = ef::stack(std::vector{a, b}, 1);
  CHECK(s1.shape() == ef::Shape<3>{2, 2, 3});
  CHECK(s1.select(1, 0).to_vector() == a.to_vector());
  const auto s2 = ef::stack(std::vector{a, b}, -1);
  CHECK(s2.shape() == ef::Shape<3>{2, 3, 2});
  CHECK(s2.to_vector() == vec<T>({0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
  CHECK(ef::stack(std::vector{a, b}, 2).to_vector() == s2.to_vector());
  CHECK(ef::stack(std::vector{a.t(), b.t()}, 0).select(0, 1).to_vector() == b.t().to_vector());
  CHECK(ef::stack(std::vector{ef::Tensor<T, 0>(T(1)), ef::Tensor<T, 0>(T(2))}).to_vector() == vec<T>({1, 2}));

  CHECK_THROWS_WITH_EXACTLY((ef::stack(std::vector{a, a.t()})), "stack: shapes [2, 3] and [3, 2] differ; stack needs equal shapes",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::stack(std::vector<ef::Tensor<T, 2>>{})), "stack: expected a non-empty list of tensors",
                       std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY((ef::stack(std::vector{a, b}, 3)),
                       "stack: dim 3 is out of range for a tensor of rank 3 (expected -3 to 2)", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::stack(std::vector{a, b}, -4)), ef::shape_error);
}
