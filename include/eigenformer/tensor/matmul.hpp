// matmul with torch.matmul's rank rules, every product computed through backend::gemm's tiles (Eigen's
// GEMM per tile, threaded by backend::parallel_for), so there is one product path in the library.
//
//   1-D x 1-D  -> 0-d (dot)            2-D x 2-D -> 2-D
//   1-D x n-D  -> a row vector, squeezed    n-D x 1-D -> a column vector, squeezed
//   n-D x m-D  -> batched, leading (batch) dims broadcast
//
// Operands that are transposed views (x.transpose(-2, -1), weight.t()) are read in place through a
// column-major map: no copy. Only an operand whose last two dims are strided both ways is copied first.
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>
#include <vector>

#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/creation.hpp"

namespace eigenformer {

namespace detail {

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

  // b shared by every batch (a Linear layer's weight) and a contiguous: one GEMM over all batch rows.
  bool b_shared = true;
  for (std::size_t i = 0; i + 2 < R; ++i) b_shared = b_shared && (b.shape()[i] == 1 || b.strides()[i] == 0);
  bool a_fills_batch = a.is_contiguous();
  for (std::size_t i = 0; i + 2 < R; ++i) a_fills_batch = a_fills_batch && a.shape()[i] == out_shape[i];
  if (b_shared && a_fills_batch) {
    const index_t rows = out.numel() / n;
    Tensor<T, 2> a2(a.storage(), const_cast<T*>(a.data()), Shape<2>{rows, k}, Shape<2>{k, 1});
    Tensor<T, 2> b2(b.storage(), const_cast<T*>(b.data()), Shape<2>{k, n}, Shape<2>{b.strides()[R - 2], b.strides()[R - 1]});
    Tensor<T, 2> o2(out.storage(), out.data(), Shape<2>{rows, n}, Shape<2>{n, 1});
    backend::gemm(a2, b2, o2);
    return out;
  }

  // Batch entries in row-major order with their operand offsets, so that any thread can take any entry.
  const auto sa = broadcast_strides<R>(a.shape(), a.strides());
  const auto sb = broadcast_strides<R>(b.shape(), b.strides());
  Shape<R> batch_shape = out_shape;
  batch_shape[R - 2] = batch_shape[R - 1] = 1;
  const std::array<Shape<R>, 2> strides{sa, sb};
  std::vector<std::array<index_t, 2>> offsets;
  offsets.reserve(static_cast<std::size_t>(out.numel() / (m * n)));
  for_each_row<R, 2>(batch_shape, strides, [&](const std::array<index_t, 2>& off) { offsets.push_back(off); });

  // Work items are (batch entry, tile) pairs; small products are grouped so that each chunk is worth a
  // thread. Both the tiles and the grouping depend on the shapes only.
  const auto plan = backend::detail::plan_gemm<T>(m, n, k);
  const index_t tiles = plan.tiles();
  const index_t items = static_cast<index_t>(offsets.size()) * tiles;
  const index_t grain = std::max<index_t>(
      1, static_cast<index_t>(backend::detail::gemm_min_tile_work / (double(m) * double(n) * double(k) / double(tiles))));
  const backend::detail::MatrixOperand<T> ao{a.data(), ainfo}, bo{b.data(), binfo};
  backend::parallel_for(items, grain, [&](index_t begin, index_t end) {
    for (index_t item = begin; item < end; ++item) {
      const index_t batch = item / tiles;
      const auto& off = offsets[static_cast<std::size_t>(batch)];
      backend::detail::gemm_tile<T>(plan, item % tiles, k, {ao.data + off[0], ao.info}, {bo.data + off[1], bo.info},
                                    out.data() + batch * m * n, n, T(1), T(0), nullptr, backend::Activation::none);
    }
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
