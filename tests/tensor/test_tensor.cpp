// Tensor<T, Rank> itself: construction, shape queries, element access, copies and fills, and every view
// (view/reshape/flatten/transpose/t/permute/slice/narrow/select/unsqueeze/squeeze/expand), each with the
// error it raises on bad input. Views must share storage with their base and write through to it.
#include <doctest/doctest.h>

#include <cstdint>
#include <type_traits>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;


}  // namespace

static_assert(std::is_base_of_v<std::invalid_argument, ef::shape_error>);
static_assert(ef::Tensor<float, 3>::rank == 3 && ef::Tensor<float, 3>::dim() == 3);
static_assert(std::is_same_v<ef::Tensor<double, 2>::value_type, double>);
static_assert(ef::tensor_element<float> && ef::tensor_element<double> && ef::tensor_element<std::int64_t> &&
              ef::tensor_element<bool> && !ef::tensor_element<int> && !ef::tensor_element<long double>);
static_assert(ef::floating_element<float> && ef::floating_element<double> && !ef::floating_element<bool> &&
              !ef::floating_element<std::int64_t>);
static_assert(std::is_same_v<ef::index_t, std::int64_t> && std::is_same_v<ef::Shape<3>, std::array<ef::index_t, 3>>);

// ---- construction ------------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("tensor: default, shape and scalar constructors", T, float, double) {
  const ef::Tensor<T, 2> empty2;
  CHECK(empty2.shape() == ef::Shape<2>{0, 0});
  CHECK(empty2.numel() == 0);
  const ef::Tensor<T, 0> zero0;  // rank 0: one element, 0
  CHECK(zero0.numel() == 1);
  CHECK(zero0.item() == T(0));

  const auto z = ef::zeros<T>(ef::Shape<3>{2, 3, 4});
  CHECK(z.shape() == ef::Shape<3>{2, 3, 4});
  CHECK(z.strides() == ef::Shape<3>{12, 4, 1});
  CHECK(z.numel() == 24);
  for (T v : z.to_vector()) CHECK(v == T(0));

  const ef::Tensor<T, 0> s(T(3.5));
  CHECK(s.item() == T(3.5));
  CHECK(ef::scalar_tensor(T(-2)).item() == T(-2));
  CHECK(std::is_same_v<decltype(ef::scalar_tensor(T(1))), ef::Tensor<T, 0>>);

  const auto e = ef::Tensor<T, 2>::empty({3, 5});
  CHECK(e.shape() == ef::Shape<2>{3, 5});
  CHECK(e.is_contiguous());

  CHECK_THROWS_WITH_EXACTLY((ef::zeros<T>(ef::Shape<2>{2, -1})), "tensor: negative size in shape [2, -1]",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::Tensor<T, 1>::empty({-3})), ef::shape_error);
}

TEST_CASE_TEMPLATE("tensor: nested braces, like torch.tensor", T, float, double) {
  const ef::Tensor<T, 1> a{1, 2, 3};
  CHECK(a.shape() == ef::Shape<1>{3});
  CHECK(a.to_vector() == vec<T>({1, 2, 3}));
  const ef::Tensor<T, 2> b{{1, 2, 3}, {4, 5, 6}};
  CHECK(b.shape() == ef::Shape<2>{2, 3});
  CHECK(b(1, 0) == T(4));
  const auto c = ef::tensor<T>({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}, {{9, 10}, {11, 12}}});
  CHECK(std::is_same_v<decltype(c), const ef::Tensor<T, 3>>);
  CHECK(c.shape() == ef::Shape<3>{3, 2, 2});
  CHECK(c(2, 1, 0) == T(11));
  const auto d = ef::tensor<T>({{{{1, 2}, {3, 4}}}});
  CHECK(std::is_same_v<decltype(d), const ef::Tensor<T, 4>>);
  CHECK(d.shape() == ef::Shape<4>{1, 1, 2, 2});
  // One-element innermost lists: {{1}, {2}} is a [2, 1] column, not a [2] vector.
  const auto column = ef::tensor<T>({{1}, {2}});
  CHECK(std::is_same_v<decltype(column), const ef::Tensor<T, 2>>);
  CHECK(column.shape() == ef::Shape<2>{2, 1});
  CHECK((ef::Tensor<T, 2>{{1}, {2}}.shape() == ef::Shape<2>{2, 1}));
  CHECK(ef::tensor<T>({1, 2}).shape() == ef::Shape<1>{2});
  CHECK(ef::tensor<T>({{1, 2}, {3, 4}}).to_vector() == vec<T>({1, 2, 3, 4}));
  // Empty inner lists give size-0 dims.
  const ef::Tensor<T, 2> e{{}, {}};
  CHECK(e.shape() == ef::Shape<2>{2, 0});
  const ef::Tensor<T, 3> f{{}};
  CHECK(f.shape() == ef::Shape<3>{1, 0, 0});
  // Boolean and integer tensors hold masks and indices.
  const ef::Tensor<bool, 1> mask{true, false};
  CHECK(mask(0));
  CHECK_FALSE(mask(1));
  const ef::Tensor<std::int64_t, 1> idx{4, -1};
  CHECK(idx(1) == -1);
}

TEST_CASE("tensor: ragged nested braces throw shape_error naming the depth") {
  CHECK_THROWS_WITH_EXACTLY((ef::Tensor<float, 2>{{1, 2}, {3}}), "tensor: nested initializer lists are ragged at depth 1 (1 vs 2)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::Tensor<float, 3>{{{1, 2}, {3, 4}}, {{5, 6}}}),
                       "tensor: nested initializer lists are ragged at depth 1 (1 vs 2)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::Tensor<float, 3>{{{1, 2}}, {{3}}}),
                       "tensor: nested initializer lists are ragged at depth 2 (1 vs 2)", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::Tensor<float, 2>{{}, {1}}), ef::shape_error);
  // An empty list first fixes its dim at 0: a later non-empty sibling is ragged, not a new shape.
  CHECK_THROWS_EXACTLY((ef::Tensor<float, 3>{{}, {{1}}}), ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::Tensor<float, 4>{{{}}, {{{1, 2}}}}), ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::Tensor<float, 4>{{{{1}}}, {{}}}), ef::shape_error);
}

TEST_CASE("tensor: a view onto external storage") {
  auto base = iota<float>(ef::Shape<1>{6});
  // Every other element, as a (3) tensor with stride 2, built through the public constructor.
  ef::Tensor<float, 1> odd(base.storage(), base.data() + 1, ef::Shape<1>{3}, ef::Shape<1>{2});
  CHECK(odd.to_vector() == std::vector<float>{1, 3, 5});
  CHECK(odd.shares_storage_with(base));
  CHECK_FALSE(odd.is_contiguous());
  odd(1) = 30;
  CHECK(base(3) == 30.0f);
}

TEST_CASE_TEMPLATE("tensor: fresh tensors are 64-byte aligned", T, float, double) {
  for (index_t n : {0, 1, 3, 7, 16, 17, 100}) {
    CAPTURE(n);
    CHECK(aligned64(ef::zeros<T>(ef::Shape<1>{n}).data()));
    CHECK(aligned64(ef::Tensor<T, 2>::empty({n, 3}).data()));
    const auto x = iota<T>(ef::Shape<2>{3, n});
    CHECK(aligned64(x.clone().data()));
    CHECK(aligned64(x.t().contiguous().data()));
    CHECK(aligned64(x.t().reshape({-1}).data()));
    CHECK(aligned64(x.template to<double>().data()));
  }
  CHECK(aligned64(ef::Tensor<T, 2>{{1, 2}, {3, 4}}.data()));
  CHECK(aligned64(ef::Tensor<T, 0>(T(1)).data()));
  CHECK(ef::tensor_alignment == 64);
}

// ---- shape queries -----------------------------------------------------------------------------------------

TEST_CASE("tensor: shape, strides, size, stride, dim, numel, is_contiguous") {
  const auto x = iota<float>(ef::Shape<3>{2, 3, 4});
  CHECK(x.dim() == 3);
  CHECK(x.numel() == 24);
  CHECK(x.size(0) == 2);
  CHECK(x.size(-1) == 4);
  CHECK(x.size(-3) == 2);
  CHECK(x.stride(0) == 12);
  CHECK(x.stride(-1) == 1);
  CHECK(x.is_contiguous());
  CHECK_FALSE(x.transpose(0, 2).is_contiguous());
  CHECK_FALSE(x.slice(2, 0, 4, 2).is_contiguous());
  CHECK(x.slice(0, 1, 2).is_contiguous());        // one outer row of a contiguous tensor
  CHECK(x.unsqueeze(1).is_contiguous());          // size-1 dims do not matter
  CHECK(x.narrow(1, 0, 1).transpose(0, 1).is_contiguous() == false);
  CHECK(ef::zeros<float>(ef::Shape<2>{1, 5}).t().is_contiguous());  // [5, 1]: still one run

  CHECK_THROWS_WITH_EXACTLY(x.size(3), "size: dim 3 is out of range for a tensor of rank 3 (expected -3 to 2)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(x.size(-4), "size: dim -4 is out of range for a tensor of rank 3 (expected -3 to 2)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(x.stride(5), doctest::Contains("stride: dim 5 is out of range"), ef::shape_error);
  CHECK(ef::shape_string(x.shape()) == "[2, 3, 4]");
  CHECK(ef::shape_string(ef::Shape<0>{}) == "[]");
}

// ---- element access ----------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("tensor: operator(), at() and item()", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{2, 3});
  CHECK(x(1, 2) == T(5));
  x(0, 1) = T(-1);
  CHECK(x.data()[1] == T(-1));
  CHECK(x.at(1, 0) == T(3));
  CHECK(x.at(-1, -1) == T(5));  // negative indices count from the end
  CHECK(x.at(-2, 0) == T(0));
  x.at(1, -2) = T(40);
  CHECK(x(1, 1) == T(40));
  const auto& cx = x;
  CHECK(cx.at(1, 1) == T(40));
  CHECK(cx(1, 1) == T(40));
  // Through a transposed view the indices follow the view's shape.
  CHECK(x.t().at(2, 1) == T(5));

  CHECK_THROWS_WITH_EXACTLY(x.at(2, 0), "at: index [2, 0] is out of range for shape [2, 3] (dim 0)", std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(x.at(0, 3), "at: index [0, 3] is out of range for shape [2, 3] (dim 1)", std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(x.at(0, -4), "at: index [0, -4] is out of range for shape [2, 3] (dim 1)", std::out_of_range);
  CHECK_THROWS_EXACTLY(cx.at(-3, 0), std::out_of_range);

  CHECK(ef::Tensor<T, 2>{{7}}.item() == T(7));
  CHECK(x.select(0, 1).select(0, 2).item() == T(5));  // a 0-d view
  CHECK(x.narrow(1, 2, 1).narrow(0, 1, 1).item() == T(5));
  CHECK_THROWS_WITH_EXACTLY(x.item(), "item: tensor of shape [2, 3] has 6 elements, expected exactly 1", ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::zeros<T>(ef::Shape<1>{0}).item()), ef::shape_error);
}

TEST_CASE("tensor: to_vector and for_each_value walk row-major order whatever the strides") {
  const auto x = iota<float>(ef::Shape<3>{2, 3, 2});
  CHECK(x.to_vector() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const auto p = x.permute({2, 0, 1});  // [2, 2, 3]
  CHECK(p.to_vector() == std::vector<float>{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11});
  std::vector<float> seen;
  p.for_each_value([&](float v) { seen.push_back(v); });
  CHECK(seen == p.to_vector());
  CHECK(ef::Tensor<float, 0>(2.5f).to_vector() == std::vector<float>{2.5f});
  CHECK(ef::zeros<float>(ef::Shape<2>{3, 0}).to_vector().empty());
}

// ---- handles, copies, fills ----------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("tensor: copying a Tensor copies the handle; clone copies the elements", T, float, double) {
  auto a = iota<T>(ef::Shape<2>{2, 2});
  auto b = a;  // same elements, as in libtorch
  b(0, 0) = T(9);
  CHECK(a(0, 0) == T(9));
  CHECK(b.shares_storage_with(a));

  auto c = a.clone();
  CHECK_FALSE(c.shares_storage_with(a));
  CHECK(c.data() != a.data());
  CHECK(c.to_vector() == a.to_vector());
  c(1, 1) = T(-5);
  CHECK(a(1, 1) == T(3));

  // clone of a strided view is contiguous and holds the view's elements.
  const auto ct = a.t().clone();
  CHECK(ct.is_contiguous());
  CHECK(ct.to_vector() == vec<T>({9, 2, 1, 3}));
}

TEST_CASE_TEMPLATE("tensor: contiguous() copies only when needed", T, float, double) {
  const auto x = iota<T>(ef::Shape<2>{3, 4});
  const auto same = x.contiguous();
  CHECK(same.shares_storage_with(x));
  CHECK(same.data() == x.data());
  const auto t = x.t();
  const auto tc = t.contiguous();
  CHECK_FALSE(tc.shares_storage_with(x));
  CHECK(tc.is_contiguous());
  CHECK(tc.shape() == ef::Shape<2>{4, 3});
  CHECK(tc.to_vector() == vec<T>({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // A contiguous slice is returned as is, offset included.
  const auto row = x.select(0, 2);
  CHECK(row.contiguous().data() == row.data());
}

TEST_CASE_TEMPLATE("tensor: fill_ and zero_ write through views", T, float, double) {
  auto x = ef::zeros<T>(ef::Shape<2>{3, 4});
  x.fill_(T(1.5));
  for (T v : x.to_vector()) CHECK(v == T(1.5));
  x.select(1, 2).fill_(T(7));  // a strided column
  CHECK(x.to_vector() == vec<T>({1.5, 1.5, 7, 1.5, 1.5, 1.5, 7, 1.5, 1.5, 1.5, 7, 1.5}));
  x.t().slice(0, 0, 4, 2).zero_();  // columns 0 and 2, through a transposed, strided view
  CHECK(x.to_vector() == vec<T>({0, 1.5, 0, 1.5, 0, 1.5, 0, 1.5, 0, 1.5, 0, 1.5}));
  CHECK(&x.zero_() == &x);  // returns *this, for chaining
  CHECK(ef::sum(x).item() == T(0));
}

TEST_CASE_TEMPLATE("tensor: copy_ broadcasts into the destination, in place", T, float, double) {
  auto dst = ef::zeros<T>(ef::Shape<2>{2, 3});
  dst.copy_(ef::Tensor<T, 1>{1, 2, 3});
  CHECK(dst.to_vector() == vec<T>({1, 2, 3, 1, 2, 3}));
  dst.copy_(ef::Tensor<T, 2>{{10}, {20}});
  CHECK(dst.to_vector() == vec<T>({10, 10, 10, 20, 20, 20}));
  dst.copy_(ef::Tensor<T, 0>(T(4)));
  CHECK(dst.to_vector() == vec<T>({4, 4, 4, 4, 4, 4}));
  // Into a transposed view: element (i, j) of the view is (j, i) of the base.
  auto base = ef::zeros<T>(ef::Shape<2>{2, 3});
  base.t().copy_(ef::Tensor<T, 2>{{1, 2}, {3, 4}, {5, 6}});
  CHECK(base.to_vector() == vec<T>({1, 3, 5, 2, 4, 6}));
  // From a strided source.
  auto col = ef::zeros<T>(ef::Shape<1>{2});
  col.copy_(base.select(1, 2));
  CHECK(col.to_vector() == vec<T>({5, 6}));
  // Overlapping source and destination: as if the source were copied out first.
  auto v = iota<T>(ef::Shape<1>{6});
  v.narrow(0, 1, 5).copy_(v.narrow(0, 0, 5));
  CHECK(v.to_vector() == vec<T>({0, 0, 1, 2, 3, 4}));
  auto w = iota<T>(ef::Shape<1>{6});
  w.narrow(0, 0, 5).copy_(w.narrow(0, 1, 5));
  CHECK(w.to_vector() == vec<T>({1, 2, 3, 4, 5, 5}));
  auto m = iota<T>(ef::Shape<2>{2, 2});
  m.copy_(m.t());
  CHECK(m.to_vector() == vec<T>({0, 2, 1, 3}));

  CHECK_THROWS_WITH_EXACTLY((dst.copy_(ef::Tensor<T, 1>{1, 2})), "copy_: shapes [2, 3] and [2] do not broadcast (size 3 vs 2 at dim 1)",
                       ef::shape_error);
  auto row = ef::zeros<T>(ef::Shape<2>{1, 3});
  CHECK_THROWS_WITH_EXACTLY(row.copy_(dst), "copy_: source of shape [2, 3] does not broadcast to destination shape [1, 3]",
                       ef::shape_error);
  CHECK(dst.to_vector() == vec<T>({4, 4, 4, 4, 4, 4}));  // unchanged by the failed copies
}

TEST_CASE("tensor: to<U>() converts element types into a fresh contiguous tensor") {
  const ef::Tensor<float, 2> x{{1.75f, -2.5f}, {0.0f, 3.0f}};
  const auto d = x.to<double>();
  CHECK(std::is_same_v<decltype(d), const ef::Tensor<double, 2>>);
  CHECK(d.to_vector() == std::vector<double>{1.75, -2.5, 0.0, 3.0});
  CHECK(x.t().to<double>().to_vector() == std::vector<double>{1.75, 0.0, -2.5, 3.0});
  CHECK(x.to<std::int64_t>().to_vector() == std::vector<std::int64_t>{1, -2, 0, 3});  // truncation, as static_cast
  CHECK(x.to<bool>().to_vector() == std::vector<bool>{true, true, false, true});
  CHECK(ef::Tensor<bool, 1>{true, false}.to<float>().to_vector() == std::vector<float>{1, 0});
  const auto same = x.to<float>();
  CHECK_FALSE(same.shares_storage_with(x));  // always a copy
}

// ---- views --------------------------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("tensor: view shares storage, infers -1 and needs contiguous data", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{2, 6});
  auto v = x.view({3, -1});
  CHECK(v.shape() == ef::Shape<2>{3, 4});
  CHECK(v.shares_storage_with(x));
  CHECK(v.data() == x.data());
  v(2, 3) = T(100);  // writes through to the base
  CHECK(x(1, 5) == T(100));
  CHECK(x.view({12}).shape() == ef::Shape<1>{12});
  CHECK(x.view(ef::Shape<4>{1, 2, 3, 2}).shape() == ef::Shape<4>{1, 2, 3, 2});
  CHECK(x.view({-1, 1, 2}).shape() == ef::Shape<3>{6, 1, 2});
  CHECK(ef::Tensor<T, 0>(T(5)).view({1, 1}).shape() == ef::Shape<2>{1, 1});
  CHECK(ef::Tensor<T, 2>{{5}}.view(ef::Shape<0>{}).item() == T(5));
  // A contiguous slice views from its own offset.
  const auto row = x.select(0, 1).view({2, 3});
  CHECK(row(0, 0) == T(6));

  CHECK_THROWS_WITH_EXACTLY((x.view({5, 3})), "view: shape [5, 3] is invalid for a tensor of shape [2, 6] (12 elements)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.view({5, -1})), "view: shape [5, -1] is invalid for a tensor of shape [2, 6] (12 elements)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.view({-1, -1})), "view: only one dim may be -1 in [-1, -1]", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.view({-2, -6})), "view: negative size in [-2, -6]", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.t().view({12})),
                       "view: tensor of shape [6, 2] is not contiguous; use reshape (which copies) or contiguous() first",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY((x.slice(1, 0, 6, 2).view({6})), ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::zeros<T>(ef::Shape<1>{0}).view({0, -1})), ef::shape_error);  // -1 is ambiguous
}

TEST_CASE_TEMPLATE("tensor: reshape is a view of contiguous data and a copy otherwise", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{3, 4});
  auto r = x.reshape({2, 2, 3});
  CHECK(r.shares_storage_with(x));
  r(0, 0, 0) = T(-1);
  CHECK(x(0, 0) == T(-1));
  const auto t = x.t().reshape({-1});
  CHECK_FALSE(t.shares_storage_with(x));
  CHECK(t.to_vector() == vec<T>({-1, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  CHECK(x.reshape(ef::Shape<1>{12}).shape() == ef::Shape<1>{12});
  CHECK(x.flatten().shape() == ef::Shape<1>{12});
  CHECK(x.flatten().shares_storage_with(x));
  CHECK(x.t().flatten().to_vector() == t.to_vector());
  CHECK(ef::Tensor<T, 0>(T(2)).flatten().shape() == ef::Shape<1>{1});

  CHECK_THROWS_WITH_EXACTLY((x.reshape({5, -1})), "reshape: shape [5, -1] is invalid for a tensor of shape [3, 4] (12 elements)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.reshape({2, 2, 2})), "reshape: shape [2, 2, 2] is invalid for a tensor of shape [3, 4] (12 elements)",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY((x.t().reshape({7})), ef::shape_error);
}

TEST_CASE_TEMPLATE("tensor: transpose, t and permute are views (no copy)", T, float, double) {
  auto x = iota<T>(ef::Shape<3>{2, 3, 4});
  const auto y = x.transpose(0, 2);
  CHECK(y.shape() == ef::Shape<3>{4, 3, 2});
  CHECK(y.strides() == ef::Shape<3>{1, 4, 12});
  CHECK(y.shares_storage_with(x));
  CHECK(y.data() == x.data());
  CHECK(y(3, 1, 1) == x(1, 1, 3));
  CHECK(x.transpose(-1, -2).shape() == ef::Shape<3>{2, 4, 3});
  CHECK(x.transpose(1, 1).strides() == x.strides());
  auto m = iota<T>(ef::Shape<2>{2, 3});
  m.t()(2, 0) = T(50);  // writes through
  CHECK(m(0, 2) == T(50));
  CHECK(m.t().t().strides() == m.strides());

  const auto p = x.permute({2, 0, 1});
  CHECK(p.shape() == ef::Shape<3>{4, 2, 3});
  CHECK(p.shares_storage_with(x));
  CHECK(p(3, 1, 2) == x(1, 2, 3));
  CHECK(x.permute({-1, 0, 1}).shape() == ef::Shape<3>{4, 2, 3});

  CHECK_THROWS_WITH_EXACTLY(x.transpose(0, 3), "transpose: dim 3 is out of range for a tensor of rank 3 (expected -3 to 2)",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(x.transpose(-4, 0), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.permute({0, 0, 1})), "permute: dims [0, 0, 1] repeat dim 0", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.permute({0, -3, 1})), "permute: dims [0, -3, 1] repeat dim 0", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((x.permute({0, 1, 3})), doctest::Contains("permute: dim 3 is out of range"), ef::shape_error);
}

TEST_CASE_TEMPLATE("tensor: slice is a strided view with Python's clamping", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{3, 6});
  const auto s = x.slice(1, 1, 5, 2);  // x[:, 1:5:2]
  CHECK(s.shape() == ef::Shape<2>{3, 2});
  CHECK(s.strides() == ef::Shape<2>{6, 2});
  CHECK(s.shares_storage_with(x));
  CHECK(s.to_vector() == vec<T>({1, 3, 7, 9, 13, 15}));
  CHECK(x.slice(0, 1, 3).to_vector() == x.narrow(0, 1, 2).to_vector());
  CHECK(x.slice(1, -2, 100).to_vector() == vec<T>({4, 5, 10, 11, 16, 17}));  // x[:, -2:100]
  CHECK(x.slice(1, -100, 1).to_vector() == vec<T>({0, 6, 12}));             // x[:, -100:1]
  CHECK(x.slice(1, 4, 2).shape() == ef::Shape<2>{3, 0});                     // empty, not negative
  CHECK(x.slice(1, 0, 6, 4).to_vector() == vec<T>({0, 4, 6, 10, 12, 16}));
  CHECK(x.slice(-1, 5, 6).to_vector() == vec<T>({5, 11, 17}));
  x.slice(1, 0, 6, 3).fill_(T(-1));  // writes through
  CHECK(x.select(0, 0).to_vector() == vec<T>({-1, 1, 2, -1, 4, 5}));

  CHECK_THROWS_WITH_EXACTLY(x.slice(1, 0, 6, 0), "slice: step must be positive, got 0", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(x.slice(1, 6, 0, -1), "slice: step must be positive, got -1", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(x.slice(2, 0, 1), "slice: dim 2 is out of range for a tensor of rank 2 (expected -2 to 1)",
                       ef::shape_error);
}

TEST_CASE_TEMPLATE("tensor: narrow is a view; out of range is an error", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{3, 5});
  const auto n = x.narrow(1, 1, 2);
  CHECK(n.shape() == ef::Shape<2>{3, 2});
  CHECK(n.shares_storage_with(x));
  CHECK(n.to_vector() == vec<T>({1, 2, 6, 7, 11, 12}));
  CHECK(x.narrow(-1, -2, 2).to_vector() == vec<T>({3, 4, 8, 9, 13, 14}));  // negative start counts from the end
  CHECK(x.narrow(0, 3, 0).shape() == ef::Shape<2>{0, 5});
  x.narrow(0, 2, 1).fill_(T(0));
  CHECK(ef::sum(x.select(0, 2)).item() == T(0));

  CHECK_THROWS_WITH_EXACTLY(x.narrow(1, 4, 2), "narrow: start 4 + length 2 exceeds size 5 of dim 1 in shape [3, 5]",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(x.narrow(0, 0, -1), "narrow: start 0 + length -1 exceeds size 3 of dim 0 in shape [3, 5]",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(x.narrow(1, -6, 1), ef::shape_error);
  CHECK_THROWS_EXACTLY(x.narrow(2, 0, 1), ef::shape_error);
}

TEST_CASE_TEMPLATE("tensor: select removes a dim; bad index is std::out_of_range", T, float, double) {
  auto x = iota<T>(ef::Shape<3>{2, 3, 4});
  const auto s = x.select(1, 2);
  CHECK(std::is_same_v<decltype(s), const ef::Tensor<T, 2>>);
  CHECK(s.shape() == ef::Shape<2>{2, 4});
  CHECK(s.shares_storage_with(x));
  CHECK(s.to_vector() == vec<T>({8, 9, 10, 11, 20, 21, 22, 23}));
  CHECK(x.select(0, -1).to_vector() == x.select(0, 1).to_vector());
  CHECK(x.select(-1, 0).shape() == ef::Shape<2>{2, 3});
  const auto scalar = x.select(0, 1).select(0, 0).select(0, 3);
  CHECK(std::is_same_v<decltype(scalar), const ef::Tensor<T, 0>>);
  CHECK(scalar.item() == T(15));
  x.select(2, 0).fill_(T(-7));  // writes through
  CHECK(x(1, 2, 0) == T(-7));

  CHECK_THROWS_WITH_EXACTLY(x.select(1, 3), "select: index 3 is out of range for dim 1 of size 3 in shape [2, 3, 4]",
                       std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(x.select(0, -3), "select: index -3 is out of range for dim 0 of size 2 in shape [2, 3, 4]",
                       std::out_of_range);
  CHECK_THROWS_EXACTLY(x.select(3, 0), ef::shape_error);
}

TEST_CASE_TEMPLATE("tensor: unsqueeze and squeeze", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{2, 3});
  CHECK(x.unsqueeze(0).shape() == ef::Shape<3>{1, 2, 3});
  CHECK(x.unsqueeze(1).shape() == ef::Shape<3>{2, 1, 3});
  CHECK(x.unsqueeze(2).shape() == ef::Shape<3>{2, 3, 1});
  CHECK(x.unsqueeze(-1).shape() == ef::Shape<3>{2, 3, 1});
  CHECK(x.unsqueeze(-3).shape() == ef::Shape<3>{1, 2, 3});
  const auto u = x.unsqueeze(1);
  CHECK(u.shares_storage_with(x));
  CHECK(u.is_contiguous());
  CHECK(u.to_vector() == x.to_vector());
  CHECK(x.t().unsqueeze(0).to_vector() == x.t().to_vector());
  CHECK(ef::Tensor<T, 0>(T(1)).unsqueeze(0).shape() == ef::Shape<1>{1});

  auto sq = u.squeeze(1);
  CHECK(sq.shape() == ef::Shape<2>{2, 3});
  CHECK(sq.shares_storage_with(x));
  sq(1, 1) = T(44);
  CHECK(x(1, 1) == T(44));
  CHECK(x.unsqueeze(-1).squeeze(-1).shape() == ef::Shape<2>{2, 3});
  CHECK(ef::Tensor<T, 1>{9}.squeeze(0).item() == T(9));

  CHECK_THROWS_WITH_EXACTLY(x.unsqueeze(3), "unsqueeze: dim 3 is out of range for a tensor of rank 3 (expected -3 to 2)",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY(x.unsqueeze(-4), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(x.squeeze(1), "squeeze: dim 1 of shape [2, 3] has size 3, expected 1", ef::shape_error);
  CHECK_THROWS_EXACTLY(x.squeeze(2), ef::shape_error);
}

TEST_CASE_TEMPLATE("tensor: expand broadcasts with stride 0 and no copy", T, float, double) {
  auto v = ef::Tensor<T, 1>{1, 2, 3};
  const auto e = v.expand(ef::Shape<2>{4, 3});
  CHECK(e.shape() == ef::Shape<2>{4, 3});
  CHECK(e.strides() == ef::Shape<2>{0, 1});
  CHECK(e.shares_storage_with(v));
  CHECK(e.to_vector() == vec<T>({1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));
  v(1) = T(20);
  CHECK(e(3, 1) == T(20));  // a view: sees later writes
  const auto col = ef::Tensor<T, 2>{{1}, {2}}.expand(ef::Shape<3>{2, 2, 3});
  CHECK(col.to_vector() == vec<T>({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));
  CHECK(v.expand(ef::Shape<1>{3}).strides() == ef::Shape<1>{1});
  CHECK(ef::Tensor<T, 0>(T(5)).expand(ef::Shape<2>{2, 2}).to_vector() == vec<T>({5, 5, 5, 5}));
  CHECK(e.contiguous().is_contiguous());
  CHECK(ef::sum(e).item() == T(4 * (1 + 20 + 3)));

  CHECK_THROWS_WITH_EXACTLY((v.expand(ef::Shape<2>{4, 2})), "expand: shapes [3] and [4, 2] do not broadcast (size 3 vs 2 at dim 1)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::Tensor<T, 2>{{1, 2}}.expand(ef::Shape<2>{3, 1})),
                       "expand: shape [1, 2] cannot be expanded to [3, 1]", ef::shape_error);
}

TEST_CASE("tensor: shares_storage_with compares storage across ranks") {
  const auto x = iota<float>(ef::Shape<2>{2, 2});
  CHECK(x.shares_storage_with(x.flatten()));
  CHECK(x.flatten().shares_storage_with(x));
  CHECK(x.select(0, 1).shares_storage_with(x.select(0, 0)));  // disjoint views, same storage
  CHECK_FALSE(x.shares_storage_with(x.clone()));
  CHECK_FALSE(x.shares_storage_with(iota<float>(ef::Shape<2>{2, 2})));
  CHECK(x.storage().get() != nullptr);
}
