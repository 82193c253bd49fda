// matmul with torch.matmul's rank rules, every product computed by Eigen's GEMM on maps of the operands.
//
//   1-D x 1-D  -> 0-d (dot)            2-D x 2-D -> 2-D
//   1-D x n-D  -> a row vector, squeezed    n-D x 1-D -> a column vector, squeezed
//   n-D x m-D  -> batched, leading (batch) dims broadcast
//
// Operands that are transposed views (x.transpose(-2, -1), weight.t()) are read in place through a
// column-major map: no copy. Only an operand whose last two dims are strided both ways is copied first.
#pragma once

#include <Eigen/Core>

#include "eigenformer/tensor/creation.hpp"

namespace eigenformer {

namespace detail {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

// How the last two dims of an operand lie in memory.
enum class matrix_layout { row_major, col_major, strided };

struct matrix_view_info {
  matrix_layout layout;
  index_t outer_stride;
};

inline matrix_view_info classify(index_t rows, index_t cols, index_t rs, index_t cs) {
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols))
    return {matrix_layout::row_major, rows == 1 ? std::max<index_t>(cols, 1) : rs};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows))
    return {matrix_layout::col_major, cols == 1 ? std::max<index_t>(rows, 1) : cs};
  return {matrix_layout::strided, 0};
}

// Calls f(map) with an Eigen map of the rows x cols matrix at p, of the given layout.
template <typename T, class F>
void with_matrix_map(const T* p, index_t rows, index_t cols, const matrix_view_info& info, F&& f) {
  using Stride = Eigen::OuterStride<>;
  if (info.layout == matrix_layout::row_major)
    f(Eigen::Map<const RowMajorMatrix<T>, 0, Stride>(p, rows, cols, Stride(info.outer_stride)));
  else
    f(Eigen::Map<const ColMajorMatrix<T>, 0, Stride>(p, rows, cols, Stride(info.outer_stride)));
}

// t viewed with R - Rt leading dims of size 1 (stride 0): a view, even of a transposed operand.
template <std::size_t R, typename T, std::size_t Rt>
Tensor<T, R> lift(const Tensor<T, Rt>& t) {
  Shape<R> s{}, st{};
  for (std::size_t i = 0; i < R; ++i) {
    s[i] = i < R - Rt ? 1 : t.shape()[i - (R - Rt)];
    st[i] = i < R - Rt ? 0 : t.strides()[i - (R - Rt)];
  }
  return Tensor<T, R>(t.storage(), const_cast<T*>(t.data()), s, st);
}

// Batched product of two rank-R (R >= 2) tensors: batch dims broadcast.
template <floating_element T, std::size_t R>
Tensor<T, R> batched_matmul(const Tensor<T, R>& a_in, const Tensor<T, R>& b_in, const std::string& shapes) {
  static_assert(R >= 2);
  const index_t m = a_in.shape()[R - 2], k = a_in.shape()[R - 1];
  const index_t k2 = b_in.shape()[R - 2], n = b_in.shape()[R - 1];
  if (k != k2)
    throw shape_error("matmul: " + shapes + ": inner dimensions differ (" + std::to_string(k) + " vs " +
                      std::to_string(k2) + ")");
  Shape<R> out_shape{};
  for (std::size_t i = 0; i + 2 < R; ++i) {
    const index_t da = a_in.shape()[i], db = b_in.shape()[i];
    if (da != db && da != 1 && db != 1)
      throw shape_error("matmul: " + shapes + ": batch dimensions do not broadcast (size " + std::to_string(da) +
                        " vs " + std::to_string(db) + " at dim " + std::to_string(i) + ")");
    out_shape[i] = da == 1 ? db : da;
  }
  out_shape[R - 2] = m;
  out_shape[R - 1] = n;
  auto out = Tensor<T, R>::empty(out_shape);
  if (out.numel() == 0) return out;
  if (k == 0) return out.zero_();

  auto prepare = [](const Tensor<T, R>& t, index_t rows, index_t cols) {
    auto info = classify(rows, cols, t.strides()[R - 2], t.strides()[R - 1]);
    if (info.layout != matrix_layout::strided) return std::pair{t, info};
    auto c = t.contiguous();
    return std::pair{c, classify(rows, cols, c.strides()[R - 2], c.strides()[R - 1])};
  };
  // Named variables, not structured bindings: Clang before 16 cannot capture bindings in the lambdas below.
  const auto a_prepared = prepare(a_in, m, k);
  const auto b_prepared = prepare(b_in, k, n);
  const Tensor<T, R>& a = a_prepared.first;
  const Tensor<T, R>& b = b_prepared.first;
  const auto ainfo = a_prepared.second;
  const auto binfo = b_prepared.second;

  using OutMap = Eigen::Map<RowMajorMatrix<T>, Eigen::Aligned64>;
  // b shared by every batch (a Linear layer's weight) and a contiguous: one GEMM over all batch rows.
  bool b_shared = true;
  for (std::size_t i = 0; i + 2 < R; ++i) b_shared = b_shared && (b.shape()[i] == 1 || b.strides()[i] == 0);
  bool a_fills_batch = a.is_contiguous();
  for (std::size_t i = 0; i + 2 < R; ++i) a_fills_batch = a_fills_batch && a.shape()[i] == out_shape[i];
  if (b_shared && a_fills_batch) {
    const index_t rows = out.numel() / n;
    OutMap o(out.data(), rows, n);
    with_matrix_map(b.data(), k, n, binfo, [&](const auto& bm) {
      o.noalias() = Eigen::Map<const RowMajorMatrix<T>>(a.data(), rows, k) * bm;
    });
    return out;
  }

  const auto sa = broadcast_strides<R>(a.shape(), a.strides());
  const auto sb = broadcast_strides<R>(b.shape(), b.strides());
  Shape<R> batch_shape = out_shape;
  batch_shape[R - 2] = batch_shape[R - 1] = 1;
  const std::array<Shape<R>, 2> strides{sa, sb};
  index_t batch = 0;
  // Each "row" of this walk is one batch entry (the last two dims are 1), so off = batch offsets.
  for_each_row<R, 2>(batch_shape, strides, [&](const std::array<index_t, 2>& off) {
    // Only the first batch entry starts on the 64-byte boundary of the buffer: this map is unaligned.
    Eigen::Map<RowMajorMatrix<T>> o(out.data() + batch * m * n, m, n);
    with_matrix_map(a.data() + off[0], m, k, ainfo, [&](const auto& am) {
      with_matrix_map(b.data() + off[1], k, n, binfo, [&](const auto& bm) { o.noalias() = am * bm; });
    });
    ++batch;
  });
  return out;
}

}  // namespace detail

template <floating_element T, std::size_t R1, std::size_t R2>
auto matmul(const Tensor<T, R1>& a, const Tensor<T, R2>& b) {
  static_assert(R1 >= 1 && R2 >= 1, "matmul: both operands need at least one dim (0-d tensors: use mul)");
  const std::string shapes = shape_string(a.shape()) + " x " + shape_string(b.shape());
  if constexpr (R1 == 1 && R2 == 1) {
    return detail::batched_matmul<T, 2>(a.unsqueeze(0), b.unsqueeze(1), shapes).reshape(Shape<0>{});
  } else if constexpr (R1 == 1) {  // [k] as a [1, k] row, the row dim dropped again; errors show [k]
    return detail::batched_matmul<T, R2>(detail::lift<R2>(a.unsqueeze(0)), b, shapes).squeeze(-2);
  } else if constexpr (R2 == 1) {  // [k] as a [k, 1] column
    return detail::batched_matmul<T, R1>(a, detail::lift<R1>(b.unsqueeze(1)), shapes).squeeze(-1);
  } else if constexpr (R1 < R2) {
    return detail::batched_matmul<T, R2>(detail::lift<R2>(a), b, shapes);
  } else if constexpr (R2 < R1) {
    return detail::batched_matmul<T, R1>(a, detail::lift<R1>(b), shapes);
  } else {
    return detail::batched_matmul<T, R1>(a, b, shapes);
  }
}

}  // namespace eigenformer
