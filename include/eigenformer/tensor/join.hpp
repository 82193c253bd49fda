// Splitting and joining along a dim: chunk, split (views), cat and stack (copies).
#pragma once

#include <vector>

#include "eigenformer/tensor/creation.hpp"

namespace eigenformer {

// Views of consecutive pieces of `split_size` along dim; the last may be smaller (Tensor.split(int)).
template <typename T, std::size_t R>
std::vector<Tensor<T, R>> split(const Tensor<T, R>& x, index_t split_size, index_t dim = 0) {
  const auto d = detail::normalize_dim("split", dim, R);
  if (split_size <= 0) throw std::invalid_argument("split: split_size must be positive, got " + std::to_string(split_size));
  std::vector<Tensor<T, R>> out;
  for (index_t start = 0; start < x.shape()[d]; start += split_size)
    out.push_back(x.narrow(static_cast<index_t>(d), start, std::min(split_size, x.shape()[d] - start)));
  if (out.empty()) out.push_back(x);
  return out;
}

// Views of pieces with the given sizes along dim, which must add up to its size (Tensor.split(list)).
template <typename T, std::size_t R>
std::vector<Tensor<T, R>> split(const Tensor<T, R>& x, const std::vector<index_t>& sizes, index_t dim = 0) {
  const auto d = detail::normalize_dim("split", dim, R);
  index_t total = 0;
  for (auto s : sizes) total += s;
  if (total != x.shape()[d])
    throw shape_error("split: sizes " + shape_string(sizes) + " add up to " + std::to_string(total) +
                      ", not the size " + std::to_string(x.shape()[d]) + " of dim " + std::to_string(d) +
                      " in shape " + shape_string(x.shape()));
  std::vector<Tensor<T, R>> out;
  index_t start = 0;
  for (auto s : sizes) {
    out.push_back(x.narrow(static_cast<index_t>(d), start, s));
    start += s;
  }
  return out;
}

// `chunks` views of equal size ceil(n / chunks) along dim, the last smaller; fewer when n is small
// (Tensor.chunk).
template <typename T, std::size_t R>
std::vector<Tensor<T, R>> chunk(const Tensor<T, R>& x, index_t chunks, index_t dim = 0) {
  const auto d = detail::normalize_dim("chunk", dim, R);
  if (chunks <= 0) throw std::invalid_argument("chunk: number of chunks must be positive, got " + std::to_string(chunks));
  const index_t n = x.shape()[d];
  return split(x, std::max<index_t>((n + chunks - 1) / chunks, 1), static_cast<index_t>(d));
}

// Concatenation along an existing dim; all other dims must agree (torch.cat).
template <typename T, std::size_t R>
Tensor<T, R> cat(const std::vector<Tensor<T, R>>& xs, index_t dim = 0) {
  if (xs.empty()) throw std::invalid_argument("cat: expected a non-empty list of tensors");
  const auto d = detail::normalize_dim("cat", dim, R);
  Shape<R> shape = xs.front().shape();
  shape[d] = 0;
  for (const auto& x : xs) {
    for (std::size_t i = 0; i < R; ++i) {
      if (i != d && x.shape()[i] != xs.front().shape()[i])
        throw shape_error("cat: shapes " + shape_string(xs.front().shape()) + " and " + shape_string(x.shape()) +
                          " differ at dim " + std::to_string(i) + " (concatenating along dim " + std::to_string(d) + ")");
    }
    shape[d] += x.shape()[d];
  }
  auto out = Tensor<T, R>::empty(shape);
  index_t start = 0;
  for (const auto& x : xs) {
    out.narrow(static_cast<index_t>(d), start, x.shape()[d]).copy_(x);
    start += x.shape()[d];
  }
  return out;
}

// Joins equally shaped tensors along a new dim (torch.stack).
template <typename T, std::size_t R>
Tensor<T, R + 1> stack(const std::vector<Tensor<T, R>>& xs, index_t dim = 0) {
  if (xs.empty()) throw std::invalid_argument("stack: expected a non-empty list of tensors");
  const auto d = detail::normalize_dim("stack", dim, R + 1);
  std::vector<Tensor<T, R + 1>> lifted;
  lifted.reserve(xs.size());
  for (const auto& x : xs) {
    if (x.shape() != xs.front().shape())
      throw shape_error("stack: shapes " + shape_string(xs.front().shape()) + " and " + shape_string(x.shape()) +
                        " differ; stack needs equal shapes");
    lifted.push_back(x.unsqueeze(static_cast<index_t>(d)));
  }
  return cat(lifted, static_cast<index_t>(d));
}

}  // namespace eigenformer
