// Owning buffers: 64-byte aligned so every row handed to Eigen starts on a cache line and AVX-512 loads
// stay aligned, shared between a tensor and its views.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "eigenformer/tensor/shape.hpp"

namespace eigenformer {

inline constexpr std::size_t tensor_alignment = 64;

// The element types a tensor may hold. Arithmetic ops need float or double; int64 holds indices
// (argmax, randperm, token ids) and bool holds masks (comparisons, masked_fill).
template <typename T>
concept tensor_element = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                         std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>;

template <typename T>
concept floating_element = std::is_same_v<T, float> || std::is_same_v<T, double>;

// Elements that compare and select by value: the floating types and int64 (token ids, labels), so
// `ids != pad` and `where(mask, ids, -100)` work as in PyTorch.
template <typename T>
concept numeric_element = floating_element<T> || std::is_same_v<T, std::int64_t>;

namespace detail {

struct aligned_deleter {
  void operator()(void* p) const noexcept { ::operator delete(p, std::align_val_t{tensor_alignment}); }
};

// Allocates room for `n` elements, uninitialised. Elements are trivial types, so no constructors run.
template <typename T>
std::shared_ptr<T[]> allocate(index_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "tensor storage holds trivially copyable scalars only");
  if (n == 0) {
    // Every empty tensor (a default-constructed context member, a zero-size shape) shares one never-written
    // block: holding one costs no heap allocation, which keeps inference steps free of them.
    static const std::shared_ptr<T[]> empty = allocate<T>(1);
    return empty;
  }
  std::size_t bytes = static_cast<std::size_t>(std::max<index_t>(n, 1)) * sizeof(T);
  bytes = (bytes + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
  void* p = ::operator new(bytes, std::align_val_t{tensor_alignment});
  return std::shared_ptr<T[]>(static_cast<T*>(p), [](T* q) { aligned_deleter{}(q); });
}

}  // namespace detail
}  // namespace eigenformer
