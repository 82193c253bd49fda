// Eigen interop: as_matrix / as_vector map a tensor's elements (writable, no copy), from_eigen copies any
// Eigen dense expression (either storage order) into a new tensor.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;

template <typename T>
using ColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

TEST_CASE_TEMPLATE("eigen interop: as_matrix maps a rank-2 tensor in place and writes through", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{3, 4});
  auto m = ef::as_matrix(x);
  CHECK(std::is_same_v<decltype(m), ef::MatrixMap<T>>);
  CHECK(m.rows() == 3);
  CHECK(m.cols() == 4);
  CHECK(m.data() == x.data());
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) CHECK(m(i, j) == x(i, j));
  m(1, 2) = T(-7);  // writes through
  CHECK(x(1, 2) == T(-7));
  m.row(0).setZero();
  CHECK(x.select(0, 0).to_vector() == std::vector<T>(4, T(0)));
  // Eigen arithmetic on the map equals the tensor op.
  CHECK(ef::from_eigen(m.array() * T(2) + T(1)).to_vector() == (x * 2 + 1).to_vector());
  CHECK(m.rowwise().sum()(2) == ef::sum(x, 1)(2));

  // Read-only: a const tensor gives a const map.
  const auto& cx = x;
  const auto cm = ef::as_matrix(cx);
  CHECK(std::is_same_v<std::remove_const_t<decltype(cm)>, ef::ConstMatrixMap<T>>);
  CHECK(cm.sum() == m.sum());
}

TEST_CASE_TEMPLATE("eigen interop: as_matrix of row-major views (slices) uses their row stride", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{4, 6});
  auto cols = x.narrow(1, 1, 3);  // [4, 3], row stride 6
  auto mc = ef::as_matrix(cols);
  CHECK(mc.outerStride() == 6);
  CHECK(mc(2, 0) == T(13));
  mc(3, 2) = T(100);
  CHECK(x(3, 3) == T(100));
  auto rows = x.slice(0, 1, 4, 2);  // rows 1 and 3, row stride 12
  const auto mr = ef::as_matrix(rows);
  CHECK(mr.rows() == 2);
  CHECK(mr(1, 0) == T(18));
  // A single row or a single column (stride along it irrelevant).
  auto one_row = x.select(0, 2).unsqueeze(0);  // [1, 6]
  CHECK(ef::as_matrix(one_row)(0, 5) == T(17));
  auto col = x.narrow(1, 4, 1);  // [4, 1]
  CHECK(ef::as_matrix(col)(2, 0) == T(16));
  auto col_t = x.select(1, 5).unsqueeze(0).t();  // [4, 1] with stride 6 along the rows
  CHECK(ef::as_matrix(col_t)(3, 0) == x(3, 5));
  // An expanded tensor: every row is the same storage (row stride 0).
  auto v = ef::Tensor<T, 1>{1, 2, 3};
  auto e = v.unsqueeze(0).expand(ef::Shape<2>{4, 3});
  const auto me = ef::as_matrix(e);
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) CHECK(me(i, j) == v(j));
}

TEST_CASE_TEMPLATE("eigen interop: as_matrix of a transposed (column-major) view throws", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{2, 3});
  auto t = x.t();
  CHECK_THROWS_WITH_EXACTLY(ef::as_matrix(t),
                       "as_matrix: tensor of shape [3, 2] with strides [1, 3] is not row-major; call contiguous() first",
                       ef::shape_error);
  const auto& ct = t;
  CHECK_THROWS_EXACTLY(ef::as_matrix(ct), ef::shape_error);
  auto strided = x.slice(1, 0, 3, 2);  // column stride 2
  CHECK_THROWS_EXACTLY(ef::as_matrix(strided), ef::shape_error);
  auto tc = t.contiguous();
  CHECK(ef::as_matrix(tc)(2, 1) == x(1, 2));
}

TEST_CASE_TEMPLATE("eigen interop: as_vector maps a rank-1 tensor with any stride", T, float, double) {
  auto x = iota<T>(ef::Shape<2>{3, 4});
  auto col = x.select(1, 2);  // [2, 6, 10], stride 4
  auto v = ef::as_vector(col);
  CHECK(std::is_same_v<decltype(v), ef::VectorMap<T>>);
  CHECK(v.size() == 3);
  CHECK(v(1) == T(6));
  v *= T(2);  // writes through
  CHECK(x(2, 2) == T(20));
  auto row = x.select(0, 1);
  CHECK(ef::as_vector(row).sum() == T(4 + 5 + 12 + 7));
  auto flat = ef::arange<T>(5);
  CHECK(ef::as_vector(flat).dot(ef::as_vector(flat)) == T(30));
}

TEST_CASE_TEMPLATE("eigen interop: from_eigen copies any storage order and expression", T, float, double) {
  ColMajor<T> cm(2, 3);
  cm << 1, 2, 3, 4, 5, 6;  // comma initialiser fills row by row
  const auto a = ef::from_eigen(cm);
  CHECK(std::is_same_v<decltype(a), const ef::Tensor<T, 2>>);
  CHECK(a.shape() == ef::Shape<2>{2, 3});
  CHECK(a.to_vector() == std::vector<T>{1, 2, 3, 4, 5, 6});  // values, not the column-major memory order
  CHECK(a.is_contiguous());
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
  CHECK(a.data() != cm.data());  // a copy
  cm(0, 0) = 100;
  CHECK(a(0, 0) == T(1));

  RowMajor<T> rm(2, 2);
  rm << 1, 2, 3, 4;
  CHECK(ef::from_eigen(rm).to_vector() == std::vector<T>{1, 2, 3, 4});
  // Expressions: transpose, arithmetic, blocks, fixed-size and vectors.
  CHECK(ef::from_eigen(rm.transpose()).to_vector() == std::vector<T>{1, 3, 2, 4});
  CHECK(ef::from_eigen(rm * T(2) + RowMajor<T>::Identity(2, 2)).to_vector() == std::vector<T>{3, 4, 6, 9});
  CHECK(ef::from_eigen(cm.block(0, 1, 2, 2)).to_vector() == std::vector<T>{2, 3, 5, 6});
  CHECK(ef::from_eigen(Eigen::Matrix<T, 2, 2>::Constant(T(7))).to_vector() == std::vector<T>(4, T(7)));
  const Eigen::Matrix<T, Eigen::Dynamic, 1> col = Eigen::Matrix<T, Eigen::Dynamic, 1>::LinSpaced(3, 0, 2);
  CHECK(ef::from_eigen(col).shape() == ef::Shape<2>{3, 1});
  CHECK(ef::from_eigen(col.transpose()).shape() == ef::Shape<2>{1, 3});
  CHECK(ef::from_eigen(ColMajor<T>(0, 4)).shape() == ef::Shape<2>{0, 4});

  // Round trip tensor -> map -> tensor.
  auto x = iota<T>(ef::Shape<2>{3, 2});
  CHECK(ef::from_eigen(ef::as_matrix(x)).to_vector() == x.to_vector());
  CHECK(ef::from_eigen(ef::as_matrix(x).transpose()).to_vector() == x.t().contiguous().to_vector());
}
