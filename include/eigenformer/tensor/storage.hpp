// Owning buffers: 64-byte aligned so every row handed to Eigen starts on a cache line and AVX-512 loads
// stay aligned, shared between a tensor and its views; large ones are reused through the allocator's cache
// (allocator.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>

#include "eigenformer/tensor/allocator.hpp"
#include "eigenformer/tensor/shape.hpp"

namespace eigenformer {

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
  const std::size_t bytes = allocation_size_class(static_cast<std::size_t>(n) * sizeof(T));
  void* p = allocate_block(bytes);
  // Should the control block's allocation throw, shared_ptr hands p to the deleter itself.
  return std::shared_ptr<T[]>(static_cast<T*>(p), [bytes](T* q) { deallocate_block(q, bytes); },
                              ControlBlockAllocator<T>());
}

// Room for `n` elements, all zero; large blocks are fresh pages that the system commits only as they are
// written. For a model's weights, which a checkpoint overwrites next (the skip-init constructors) or
// which are packed or converted into it (PackedMatrix, Bf16Matrix), so that memory is committed tensor by
// tensor as the load writes it and a loader that converts each tensor as it arrives (to bfloat16) never
// holds the whole float model. Blocks of at least mapped_weight_min_bytes are mapped on their own
// (map_weight_block: huge pages), smaller ones come from calloc. Bypasses the allocator's cache: such
// blocks live as long as the model, and go back to the system when it is freed.
template <typename T>
std::shared_ptr<T[]> allocate_zeroed(index_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "tensor storage holds trivially copyable scalars only");
  if (n == 0) return allocate<T>(0);
  if (static_cast<std::size_t>(n) <= std::numeric_limits<std::size_t>::max() / 2 / sizeof(T)) {
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
    if (bytes >= mapped_weight_min_bytes) {
      if (void* mapped = map_weight_block(bytes))
        return std::shared_ptr<T[]>(static_cast<T*>(mapped), [bytes](T* p) { unmap_weight_block(p, bytes); });
    }
  }
  // calloc multiplies count by size itself, refusing a product that overflows; for large blocks it maps
  // fresh zero pages without writing them.
  void* raw = std::calloc(static_cast<std::size_t>(n) + tensor_alignment / sizeof(T) + 1, sizeof(T));
  if (raw == nullptr) throw std::bad_alloc();
  const auto address = (reinterpret_cast<std::uintptr_t>(raw) + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
  return std::shared_ptr<T[]>(reinterpret_cast<T*>(address), [raw](T*) { std::free(raw); });
}

}  // namespace detail
}  // namespace eigenformer
