// Where tensor storage comes from: the heap, through a cache of large freed blocks.
//
// Why a cache: a model's forward allocates the same large activations (a (batch * seq, 3072) FFN block is
// 12 MB at BERT-base b8) every layer and every call. glibc serves blocks that large with fresh mmap pages
// or trims them back to the OS when freed, so every forward page-faults its activations in again; on the
// 2-core VMs we measure on, the cache made a BERT-base forward 1.18-1.23x faster and a GPT-2 forward of 512
// tokens 1.95x (bench/README.md, "With the allocator's cache"). ONNX Runtime keeps an arena for the same reason. Freed blocks of at least
// cache_min_block_bytes go to a per-size free list and are handed to the next request of the same size
// class; smaller ones go back to malloc, whose own free lists already serve them without faults.
//
// Memory: what the cache holds is bounded by a limit (default 512 MiB, settable with
// set_allocator_cache_limit or the environment variable EIGENFORMER_ALLOCATOR_CACHE_BYTES, 0 turns the
// cache off); over the limit the least recently freed blocks are released first. release_cached_memory()
// gives everything back, like torch.cuda.empty_cache(). Sizes are rounded up to 8 classes per power of two
// (at most 12.5% more than asked), so varying sequence lengths share blocks; the rounding costs no resident
// memory, since pages of a block that are never written are never faulted in.
//
// Builds with AddressSanitizer bypass the cache, so a use after free still reaches freed memory that the
// sanitizer watches.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <list>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace eigenformer {

inline constexpr std::size_t tensor_alignment = 64;

namespace detail {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool allocator_cache_available = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool allocator_cache_available = false;
#else
inline constexpr bool allocator_cache_available = true;
#endif
#else
inline constexpr bool allocator_cache_available = true;
#endif

// glibc's default threshold for serving a block with its own mmap: below it blocks come from the heap's
// free lists, which fault nothing in once warm.
inline constexpr std::size_t cache_min_block_bytes = std::size_t{128} << 10;

inline constexpr std::size_t default_allocator_cache_limit = std::size_t{512} << 20;

// The size a block of `bytes` is allocated with: below the cache's minimum the request rounded to the
// alignment; from it up, rounded up to the next of 8 steps between consecutive powers of two.
inline std::size_t allocation_size_class(std::size_t bytes) {
  bytes = (bytes + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
  if (bytes < cache_min_block_bytes) return bytes;
  int top = 63;
  while (!(bytes >> top)) --top;
  const std::size_t step = std::size_t{1} << (top - 3);
  return (bytes + step - 1) / step * step;
}

class BlockCache {
 public:
  static BlockCache& instance() {
    // Never destroyed: tensors with static storage duration may free their storage after every other
    // static is gone.
    static BlockCache* const cache = new BlockCache(limit_from_environment());
    return *cache;
  }

  void* allocate(std::size_t bytes) {
    if (bytes >= cache_min_block_bytes) {
      const std::lock_guard<std::mutex> lock(mutex_);
      const auto found = by_size_.find(bytes);
      if (found != by_size_.end() && !found->second.empty()) {
        const auto block = found->second.back();
        found->second.pop_back();
        void* p = block->pointer;
        cached_bytes_ -= bytes;
        recency_.erase(block);
        return p;
      }
    }
    return ::operator new(bytes, std::align_val_t{tensor_alignment});
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (bytes >= cache_min_block_bytes) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (bytes <= limit_) {
        try {
          recency_.push_front(Block{p, bytes});
          by_size_[bytes].push_back(recency_.begin());
        } catch (...) {  // no memory for the bookkeeping: give the block back instead of caching it
          if (!recency_.empty() && recency_.front().pointer == p) recency_.pop_front();
          free_block(p);
          return;
        }
        cached_bytes_ += bytes;
        trim_to(limit_);
        return;
      }
    }
    free_block(p);
  }

  std::size_t cached_bytes() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }

  std::size_t release() {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t released = cached_bytes_;
    trim_to(0);
    return released;
  }

  void set_limit(std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    trim_to(limit_);
  }

  std::size_t limit() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return limit_;
  }

 private:
  struct Block {
    void* pointer;
    std::size_t bytes;
  };

  explicit BlockCache(std::size_t limit) : limit_(allocator_cache_available ? limit : 0) {}

  static std::size_t limit_from_environment() {
    const char* text = std::getenv("EIGENFORMER_ALLOCATOR_CACHE_BYTES");
    if (text == nullptr || *text == '\0') return default_allocator_cache_limit;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    // A malformed value keeps the default rather than throwing from inside the first allocation.
    return (end != nullptr && *end == '\0') ? static_cast<std::size_t>(value) : default_allocator_cache_limit;
  }

  static void free_block(void* p) noexcept { ::operator delete(p, std::align_val_t{tensor_alignment}); }

  // Releases the least recently cached blocks until at most `bytes` remain cached.
  void trim_to(std::size_t bytes) noexcept {
    while (cached_bytes_ > bytes && !recency_.empty()) {
      const Block oldest = recency_.back();
      auto& same_size = by_size_[oldest.bytes];
      // Blocks of one size are listed oldest first, so the oldest of all is the first of its size.
      same_size.erase(same_size.begin());
      recency_.pop_back();
      cached_bytes_ -= oldest.bytes;
      free_block(oldest.pointer);
    }
  }

  std::mutex mutex_;
  std::size_t limit_;
  std::size_t cached_bytes_ = 0;
  std::list<Block> recency_;  // most recently freed first
  std::unordered_map<std::size_t, std::vector<std::list<Block>::iterator>> by_size_;
};

}  // namespace detail

// Bytes of freed tensor storage the allocator holds for reuse.
inline std::size_t cached_memory_bytes() { return detail::BlockCache::instance().cached_bytes(); }

// Gives every cached block back to the system; returns how many bytes that was.
inline std::size_t release_cached_memory() { return detail::BlockCache::instance().release(); }

// The most freed storage the allocator keeps for reuse (0: none). Lowering it releases the excess now.
// Builds with AddressSanitizer never cache, whatever the limit.
inline void set_allocator_cache_limit(std::size_t bytes) {
  detail::BlockCache::instance().set_limit(detail::allocator_cache_available ? bytes : 0);
}

inline std::size_t allocator_cache_limit() { return detail::BlockCache::instance().limit(); }

}  // namespace eigenformer
