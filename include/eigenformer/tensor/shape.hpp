// Shapes, strides and the small index arithmetic every tensor operation shares.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "eigenformer/tensor/error.hpp"

namespace eigenformer {

// Signed like PyTorch's sizes and strides, so negative dims and `-1` in reshape read naturally.
using index_t = std::int64_t;

template <std::size_t Rank>
using Shape = std::array<index_t, Rank>;

// Formats a shape the way error messages and printing show it: `[5, 4]`.
template <class Container>
std::string shape_string(const Container& dims) {
  std::string s = "[";
  bool first = true;
  for (auto d : dims) {
    if (!first) s += ", ";
    s += std::to_string(d);
    first = false;
  }
  return s + "]";
}

namespace detail {

// "(rows, cols)": how the packed and bfloat16 copies of a weight name their shape. Appended piece by piece:
// "(" + std::to_string(...) sends GCC 12 at -O3 into a false -Wrestrict warning in programs built with -Wall.
inline std::string rows_cols_string(index_t rows, index_t cols) {
  std::string s = "(";
  s += std::to_string(rows);
  s += ", ";
  s += std::to_string(cols);
  s += ')';
  return s;
}

template <std::size_t Rank>
constexpr index_t numel_of(const Shape<Rank>& shape) {
  index_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

template <std::size_t Rank>
constexpr Shape<Rank> contiguous_strides(const Shape<Rank>& shape) {
  Shape<Rank> strides{};
  index_t s = 1;
  for (std::size_t i = Rank; i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

// Maps a possibly negative dim (PyTorch style, -1 = last) into [0, rank).
inline std::size_t normalize_dim(std::string_view op, index_t dim, std::size_t rank) {
  const auto r = static_cast<index_t>(rank);
  if (dim < -r || dim >= r || (rank == 0)) {
    std::ostringstream msg;
    msg << op << ": dim " << dim << " is out of range for a tensor of rank " << rank;
    if (rank > 0) msg << " (expected -" << rank << " to " << rank - 1 << ")";
    throw shape_error(msg.str());
  }
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

template <std::size_t Rank>
void check_nonnegative_shape(std::string_view op, const Shape<Rank>& shape) {
  for (auto d : shape)
    if (d < 0) throw shape_error(std::string(op) + ": negative size in shape " + shape_string(shape));
}

// PyTorch broadcasting: align shapes at the right; each pair of sizes must be equal or one of them 1.
template <std::size_t R1, std::size_t R2>
Shape<(R1 > R2 ? R1 : R2)> broadcast_shapes(std::string_view op, const Shape<R1>& a, const Shape<R2>& b) {
  constexpr std::size_t R = R1 > R2 ? R1 : R2;
  Shape<R> out{};
  for (std::size_t i = 0; i < R; ++i) {
    const index_t da = i < R - R1 ? 1 : a[i - (R - R1)];
    const index_t db = i < R - R2 ? 1 : b[i - (R - R2)];
    if (da != db && da != 1 && db != 1) {
      throw shape_error(std::string(op) + ": shapes " + shape_string(a) + " and " + shape_string(b) +
                        " do not broadcast (size " + std::to_string(da) + " vs " + std::to_string(db) +
                        " at dim " + std::to_string(i) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Strides that read a tensor of `shape`/`strides` as if it had the (broadcast) shape `target`:
// size-1 and missing leading dims get stride 0.
template <std::size_t R, std::size_t Rin>
Shape<R> broadcast_strides(const Shape<Rin>& shape, const Shape<Rin>& strides) {
  static_assert(R >= Rin);
  Shape<R> out{};
  for (std::size_t i = 0; i < Rin; ++i) {
    out[i + (R - Rin)] = shape[i] == 1 ? 0 : strides[i];
  }
  return out;
}

}  // namespace detail
}  // namespace eigenformer
