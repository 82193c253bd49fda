// matmul: torch.matmul's rank rules (1-D operands, batched with broadcast batch dims), operands that are
// views (transposed, sliced, expanded) against the same product of contiguous copies, the shape errors,
// and the worked example matmul_example.
#include <doctest/doctest.h>

#include <cstdint>
#include <type_traits>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;


// Small integers (exact in float whatever the summation order), varied so that transposition errors show.
template <typename T, std::size_t R>
ef::Tensor<T, R> ints(const ef::Shape<R>& shape, int seed = 0) {
  auto t = ef::Tensor<T, R>::empty(shape);
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<T>((i * 7 + seed * 3) % 11 - 5);
  return t;
}

// The textbook triple loop on [m, k] x [k, n].
template <typename T>
ef::Tensor<T, 2> naive(const ef::Tensor<T, 2>& a, const ef::Tensor<T, 2>& b) {
  auto out = ef::zeros<T>(ef::Shape<2>{a.size(0), b.size(1)});
  for (index_t i = 0; i < a.size(0); ++i)
    for (index_t j = 0; j < b.size(1); ++j)
      for (index_t p = 0; p < a.size(1); ++p) out(i, j) += a(i, p) * b(p, j);
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("matmul: 2-D x 2-D, against the triple loop", T, float, double) {
  const auto a = ints<T>(ef::Shape<2>{3, 4});
  const auto b = ints<T>(ef::Shape<2>{4, 5}, 1);
  const auto c = ef::matmul(a, b);
  CHECK(std::is_same_v<decltype(c), const ef::Tensor<T, 2>>);
  CHECK(c.shape() == ef::Shape<2>{3, 5});
  CHECK(c.to_vector() == naive(a, b).to_vector());
  CHECK(c.is_contiguous());
  CHECK(aligned64(c.data()));
  CHECK_FALSE(c.shares_storage_with(a));
  // Larger than one GEMM block, with awkward sizes.
  const auto big_a = ints<T>(ef::Shape<2>{37, 70}, 2);
  const auto big_b = ints<T>(ef::Shape<2>{70, 29}, 3);
  CHECK(ef::matmul(big_a, big_b).to_vector() == naive(big_a, big_b).to_vector());
}

TEST_CASE_TEMPLATE("matmul: transposed operands equal the product of contiguous copies (no copy needed)", T, float,
                   double) {
  const auto w = ints<T>(ef::Shape<2>{5, 4}, 1);  // a Linear weight [out, in]
  const auto x = ints<T>(ef::Shape<3>{2, 3, 4});  // [batch, seq, in]
  // x @ w.t(): w read column-major in place.
  const auto y = ef::matmul(x, w.t());
  CHECK(y.shape() == ef::Shape<3>{2, 3, 5});
  CHECK(y.to_vector() == ef::matmul(x, w.t().contiguous()).to_vector());
  // Attention scores q @ k.transpose(-2, -1), batched.
  const auto q = ints<T>(ef::Shape<3>{2, 3, 4}, 4);
  const auto k = ints<T>(ef::Shape<3>{2, 6, 4}, 5);
  const auto s = ef::matmul(q, k.transpose(-2, -1));
  CHECK(s.shape() == ef::Shape<3>{2, 3, 6});
  CHECK(s.to_vector() == ef::matmul(q, k.transpose(-2, -1).contiguous()).to_vector());
  for (index_t bi = 0; bi < 2; ++bi)
    CHECK(s.select(0, bi).to_vector() == naive(q.select(0, bi), k.select(0, bi).t()).to_vector());
  // Both operands transposed; the left one transposed.
  const auto a = ints<T>(ef::Shape<2>{4, 3}, 6);
  const auto b = ints<T>(ef::Shape<2>{5, 4}, 7);
  CHECK(ef::matmul(a.t(), b.t()).to_vector() == naive(a.t().contiguous(), b.t().contiguous()).to_vector());
  CHECK(ef::matmul(a.t(), ints<T>(ef::Shape<2>{4, 2})).to_vector() ==
        naive(a.t().contiguous(), ints<T>(ef::Shape<2>{4, 2})).to_vector());
  // The operands are not modified.
  CHECK(a.to_vector() == ints<T>(ef::Shape<2>{4, 3}, 6).to_vector());
}

TEST_CASE("matmul: 1-D operands follow torch.matmul") {
  const ef::Tensor<float, 1> v{1, 2, 3};
  const ef::Tensor<float, 1> u{4, -5, 6};
  const auto dot = ef::matmul(v, u);
  CHECK(std::is_same_v<decltype(dot), const ef::Tensor<float, 0>>);
  CHECK(dot.item() == 12.0f);
  const ef::Tensor<float, 2> m{{1, 2}, {3, 4}, {5, 6}};  // [3, 2]
  const auto vm = ef::matmul(v, m);                       // [3] x [3, 2] -> [2]
  CHECK(std::is_same_v<decltype(vm), const ef::Tensor<float, 1>>);
  CHECK(vm.to_vector() == std::vector<float>{22, 28});
  const auto mv = ef::matmul(m.t(), v);  // [2, 3] x [3] -> [2]
  CHECK(mv.to_vector() == std::vector<float>{22, 28});
  const auto bm = ints<float>(ef::Shape<3>{2, 3, 4});
  const auto vb = ef::matmul(v, bm);  // [3] x [2, 3, 4] -> [2, 4]
  CHECK(vb.shape() == ef::Shape<2>{2, 4});
  CHECK(vb.select(0, 1).to_vector() == ef::matmul(v, bm.select(0, 1)).to_vector());
  const auto bv = ef::matmul(bm.transpose(1, 2), v);  // [2, 4, 3] x [3] -> [2, 4]
  CHECK(bv.to_vector() == vb.to_vector());
  // A strided vector.
  const auto col = m.select(1, 1);  // [2, 4, 6], stride 2
  CHECK(ef::matmul(col, v).item() == 28.0f);
  CHECK(ef::matmul(ef::zeros<float>(ef::Shape<1>{0}), ef::zeros<float>(ef::Shape<1>{0})).item() == 0.0f);
}

TEST_CASE("matmul: batch dims broadcast, [2, 1, 3, 4] x [5, 4, 2] -> [2, 5, 3, 2]") {
  const auto a = ints<float>(ef::Shape<4>{2, 1, 3, 4});
  const auto b = ints<float>(ef::Shape<3>{5, 4, 2}, 1);
  const auto c = ef::matmul(a, b);
  CHECK(std::is_same_v<decltype(c), const ef::Tensor<float, 4>>);
  CHECK(c.shape() == ef::Shape<4>{2, 5, 3, 2});
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 5; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(c.select(0, i).select(0, j).to_vector() == naive(a.select(0, i).select(0, 0), b.select(0, j)).to_vector());
    }
  // Lower rank on the left: [3, 4] x [2, 4, 5] shares the left operand across the batch.
  const auto l = ints<float>(ef::Shape<2>{3, 4});
  const auto r = ints<float>(ef::Shape<3>{2, 4, 5}, 2);
  const auto lr = ef::matmul(l, r);
  CHECK(lr.shape() == ef::Shape<3>{2, 3, 5});
  CHECK(lr.select(0, 1).to_vector() == naive(l, r.select(0, 1)).to_vector());
  // A shared right operand (a Linear weight) on a 4-D input: one GEMM over all rows.
  const auto x = ints<float>(ef::Shape<4>{2, 3, 2, 4}, 3);
  const auto w = ints<float>(ef::Shape<2>{4, 6}, 4);
  const auto xw = ef::matmul(x, w);
  CHECK(xw.shape() == ef::Shape<4>{2, 3, 2, 6});
  CHECK(xw.select(0, 1).select(0, 2).to_vector() == naive(x.select(0, 1).select(0, 2), w).to_vector());
  // Expanded batch dims (stride 0) and size-1 batch dims on both sides.
  const auto e = ints<float>(ef::Shape<2>{3, 4}).unsqueeze(0).expand(ef::Shape<3>{4, 3, 4});
  CHECK(ef::matmul(e, r.select(0, 0)).select(0, 3).to_vector() == naive(ints<float>(ef::Shape<2>{3, 4}), r.select(0, 0)).to_vector());
  CHECK(ef::matmul(ints<float>(ef::Shape<3>{1, 2, 3}), ints<float>(ef::Shape<3>{3, 3, 1})).shape() == ef::Shape<3>{3, 2, 1});
}

TEST_CASE("matmul: sliced and strided operands equal the product of contiguous copies") {
  const auto base = ints<float>(ef::Shape<2>{6, 8});
  const auto rows = base.slice(0, 0, 6, 2);         // [3, 8], row stride 16
  const auto cols = base.narrow(1, 2, 4);           // [6, 4], row stride 8
  const auto both = base.slice(1, 0, 8, 2);         // [6, 4], column stride 2: copied internally
  const auto b = ints<float>(ef::Shape<2>{8, 3}, 1);
  const auto b4 = ints<float>(ef::Shape<2>{4, 5}, 2);
  CHECK(ef::matmul(rows, b).to_vector() == naive(rows.contiguous(), b).to_vector());
  CHECK(ef::matmul(cols, b4).to_vector() == naive(cols.contiguous(), b4).to_vector());
  CHECK(ef::matmul(both, b4).to_vector() == naive(both.contiguous(), b4).to_vector());
  CHECK(ef::matmul(b4.t(), both.t()).to_vector() == naive(b4.t().contiguous(), both.t().contiguous()).to_vector());
  // Batched operands whose batch stride is not rows * cols (a slice along the batch dim).
  const auto batch = ints<float>(ef::Shape<3>{4, 3, 2}, 5);
  const auto every_other = batch.slice(0, 0, 4, 2);  // [2, 3, 2]
  const auto rhs = ints<float>(ef::Shape<3>{2, 2, 3}, 6);
  const auto p = ef::matmul(every_other, rhs);
  for (index_t i = 0; i < 2; ++i)
    CHECK(p.select(0, i).to_vector() == naive(every_other.select(0, i).contiguous(), rhs.select(0, i)).to_vector());
  // Degenerate shapes: single row / column, empty inner dim (zeros), empty outer dims.
  CHECK(ef::matmul(ints<float>(ef::Shape<2>{1, 7}), ints<float>(ef::Shape<2>{7, 1}, 1)).item() ==
        naive(ints<float>(ef::Shape<2>{1, 7}), ints<float>(ef::Shape<2>{7, 1}, 1)).item());
  CHECK(ef::matmul(ef::zeros<float>(ef::Shape<2>{2, 0}), ef::zeros<float>(ef::Shape<2>{0, 3})).to_vector() ==
        std::vector<float>(6, 0.0f));
  CHECK(ef::matmul(ef::zeros<float>(ef::Shape<2>{0, 4}), b4).shape() == ef::Shape<2>{0, 5});
}

TEST_CASE("matmul: mismatched shapes throw shape_error naming both shapes") {
  const auto a = ef::zeros<float>({5, 4});
  CHECK_THROWS_WITH_EXACTLY(ef::matmul(a, a), "matmul: [5, 4] x [5, 4]: inner dimensions differ (4 vs 5)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::matmul(ef::zeros<float>({2, 3, 4}), ef::zeros<float>({3, 4, 5}))),
                       "matmul: [2, 3, 4] x [3, 4, 5]: batch dimensions do not broadcast (size 2 vs 3 at dim 0)",
                       ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::matmul(ef::zeros<float>({3}), ef::zeros<float>({4}))),
                       "matmul: [3] x [4]: inner dimensions differ (3 vs 4)", ef::shape_error);
  // 1-D operands: the message shows the shapes as passed, not the internal unsqueezed ones.
  CHECK_THROWS_WITH_EXACTLY((ef::matmul(ef::zeros<float>({4}), ef::zeros<float>({5, 3}))),
                       "matmul: [4] x [5, 3]: inner dimensions differ (4 vs 5)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY((ef::matmul(ef::zeros<float>({3, 5}), ef::zeros<float>({4}))),
                       "matmul: [3, 5] x [4]: inner dimensions differ (5 vs 4)", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(ef::matmul(a.t(), a.t()), "matmul: [4, 5] x [4, 5]: inner dimensions differ (5 vs 4)",
                       ef::shape_error);
  CHECK_THROWS_EXACTLY((ef::matmul(ef::zeros<float>({2, 3}), ef::zeros<float>({2, 4, 5}))), ef::shape_error);
}

TEST_CASE("matmul: worked example matmul_example") {
  const json& ex = worked_examples().at("matmul_example");
  const auto rows = ex.at("A").get<std::vector<std::vector<float>>>();
  const auto cols = ex.at("B").get<std::vector<std::vector<float>>>();
  auto a = ef::zeros<float>({3, 2});
  auto b = ef::zeros<float>({2, 3});
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 2; ++j) a(i, j) = rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j) b(i, j) = cols[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
  CHECK(ef::matmul(a, b).to_vector() == ex.at("AB").get<std::vector<float>>());
  CHECK(ef::matmul(a.to<double>(), b.to<double>()).to_vector() == ex.at("AB").get<std::vector<double>>());
}
