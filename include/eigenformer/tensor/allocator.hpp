// Where tensor storage comes from: the heap, through a cache of large freed blocks; a model's weights
// (allocate_zeroed) are mapped on their own instead, for huge pages (map_weight_block).
//
// Why a cache: a model's forward allocates the same large activations (a (batch * seq, 3072) FFN block is
// 12 MB at BERT-base b8) every layer and every call. glibc serves blocks that large with fresh mmap pages
// or trims them back to the OS when freed, so every forward page-faults its activations in again; on the
// 2-core VMs we measure on, the cache made a BERT-base forward 1.18-1.23x faster and a GPT-2 forward of 512
// tokens 1.95x (bench/README.md, "With the allocator's cache"). ONNX Runtime keeps an arena for the same
// reason. Freed blocks of at least cache_min_block_bytes go to a per-size free list and are handed to the
// next request of the same size class. Smaller ones (and every tensor's shared control block) wait in a small
// per-thread cache (SmallBlockCache below), so that a decoding step, whose tensors are all small, makes no
// heap allocation once warm (llama.cpp's and ONNX Runtime's decoders allocate nothing per token either).
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

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "eigenformer/tensor/environment.hpp"

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

// Transparent huge pages are this size on x86-64 and most arm64 Linux systems.
inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
// Weight blocks of at least this many bytes are mapped on their own for transparent huge pages
// (map_weight_block): smaller than a huge page, such a block still joins the run of blocks around it (BERT's
// 1.5 MB position table, a bfloat16 768 x 768 matrix), and the few pages a mapping rounds up to cost nothing
// next to it.
inline constexpr std::size_t mapped_weight_min_bytes = std::size_t{1} << 20;

// A weight block of `bytes` straight from the system (Linux): zero pages, committed only as they are written,
// advised for transparent huge pages, and placed so that as little of it as possible falls in 4 KiB pages.
// Why: a block from malloc starts wherever its chunk does, and the 4 KiB pages before its first and after its
// last whole 2 MiB page were most of the 32,500 page faults of loading GPT-2 small. Those pages
// cost more than their faults on the shared VMs we measure on: data that the kernel wrote into them (pread)
// was slow to reach from the program the first time, page by page, with no fault counted (a first read of
// 480 MB written by pread took 670-780 ms against 22-28 ms for the next reads, and 26-28 ms the first time
// with huge pages), which made the first forward of a float GPT-2 0.15-0.2 s slower than the next. And each
// fault costs ~15 us there: first writes to 48 MB took 185-195 ms with 4 KiB pages and 3.4 ms with huge pages
// once the kernel had some (114 ms the first time). Weights only: the allocator's cache faults activations
// in once per process anyway, and a huge page would commit the whole 2 MiB where a block's tail (its size
// class rounds up) stays untouched.
//
// Where: right below the previous weight block when that one has not been written yet (a model built with
// skip-init weights maps all of them before the checkpoint fills any): the two mappings merge into one, and
// the huge pages that straddle their boundary are whole huge pages too, so a model's float weights are 4 KiB
// pages only at the two ends of the run (GPT-2 small: 5,400 faults a load instead of 14,600 with each block
// on its own). Otherwise (the previous block written already, as when a loader packs or converts each weight
// as it reads it: a huge page half written in 4 KiB pages stays so) on a 2 MiB boundary of its own, so that
// only its last partial 2 MiB is in 4 KiB pages. Null when mapping is not available or fails; free with
// unmap_weight_block(p, bytes).
#if defined(__linux__) && defined(MAP_ANONYMOUS)
// Whole pages of this system's size (4 KiB on x86-64, 4, 16 or 64 KiB on arm64) for the mappings' lengths.
inline std::size_t mapped_length(std::size_t bytes) noexcept {
  static const std::size_t page = [] {
    const long size = ::sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<std::size_t>(size) : std::size_t{4096};
  }();
  return (bytes + page - 1) / page * page;
}
// The start of the weight block mapped last, below which the next one is asked to go: Linux hands out
// mappings from the top down, so the space below the lowest one is usually free, and above it is not. A hint
// only: threads racing for it, or a block freed since, at worst cost the next block its place there.
inline std::atomic<std::uintptr_t>& last_weight_block() noexcept {
  static std::atomic<std::uintptr_t> start{0};
  return start;
}
// The block of `length` bytes right below `above`, if that space is free (MAP_FIXED_NOREPLACE; a kernel
// before 4.17 takes the address as a hint only, and a block it puts elsewhere is given back), else null.
inline void* map_right_below([[maybe_unused]] std::uintptr_t above,
                             [[maybe_unused]] std::size_t length) noexcept {
#if defined(MAP_FIXED_NOREPLACE)
  if (above <= length) return nullptr;
  const std::uintptr_t want = above - length;
  void* at = ::mmap(reinterpret_cast<void*>(want), length, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (at == MAP_FAILED) return nullptr;
  if (reinterpret_cast<std::uintptr_t>(at) != want) {
    (void)::munmap(at, length);
    return nullptr;
  }
  return at;
#else
  return nullptr;
#endif
}
#endif
inline void* map_weight_block([[maybe_unused]] std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
  const std::size_t length = mapped_length(bytes);
  void* block = nullptr;
  const std::uintptr_t previous = last_weight_block().load(std::memory_order_relaxed);
  // Its first page not yet written (mincore: not resident; an error, as for a block unmapped since, says no).
  unsigned char resident = 1;
  if (previous != 0 && ::mincore(reinterpret_cast<void*>(previous), 1, &resident) == 0 && (resident & 1) == 0)
    block = map_right_below(previous, length);
  if (block == nullptr) {
    // Mapped with a huge page to spare, then trimmed to the aligned part (munmap takes any page boundary, and
    // 2 MiB is a whole number of pages of every size above).
    void* raw =
        ::mmap(nullptr, length + huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto address = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t start = (address + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    if (start > address) (void)::munmap(raw, start - address);
    const std::uintptr_t end = address + length + huge_page_bytes;
    if (end > start + length) (void)::munmap(reinterpret_cast<void*>(start + length), end - (start + length));
    block = reinterpret_cast<void*>(start);
  }
  // The whole block, not only the whole 2 MiB pages inside it: a huge page can straddle two merged blocks.
#if defined(MADV_HUGEPAGE)
  (void)::madvise(block, length, MADV_HUGEPAGE);
#endif
  last_weight_block().store(reinterpret_cast<std::uintptr_t>(block), std::memory_order_relaxed);
  return block;
#else
  return nullptr;
#endif
}
inline void unmap_weight_block([[maybe_unused]] void* p, [[maybe_unused]] std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
  (void)::munmap(p, mapped_length(bytes));
#endif
}

// The heap behind both caches: 64-byte aligned blocks.
inline void* heap_allocate(std::size_t bytes) {
  return ::operator new(bytes, std::align_val_t{tensor_alignment});
}
inline void heap_free(void* p) noexcept { ::operator delete(p, std::align_val_t{tensor_alignment}); }

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
        FreeBlock* block = found->second.back();
        found->second.pop_back();
        unlink(block);
        cached_bytes_ -= bytes;
        return block;
      }
    }
    return heap_allocate(bytes);
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (bytes >= cache_min_block_bytes) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (bytes <= limit_) {
        try {
          // Allocates only the first time a size class is cached, or when its list outgrows its capacity.
          by_size_[bytes].push_back(static_cast<FreeBlock*>(p));
        } catch (...) {  // no memory for the bookkeeping: give the block back instead of caching it
          heap_free(p);
          return;
        }
        // The bookkeeping lives in the freed block itself: caching a block allocates nothing.
        auto* block = new (p) FreeBlock{bytes, nullptr, newest_};
        if (newest_) newest_->newer = block;
        newest_ = block;
        if (!oldest_) oldest_ = block;
        cached_bytes_ += bytes;
        trim_to(limit_);
        return;
      }
    }
    heap_free(p);
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
    published_limit_.store(bytes, std::memory_order_relaxed);
    trim_to(limit_);
  }

  std::size_t limit() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return limit_;
  }
  // The same without the lock, for the small blocks' caches, which read it on every free.
  std::size_t limit_unlocked() const noexcept { return published_limit_.load(std::memory_order_relaxed); }

 private:
  // The header a cached block carries in its own first bytes: the list of cached blocks by recency.
  struct FreeBlock {
    std::size_t bytes;
    FreeBlock* newer;
    FreeBlock* older;
  };

  explicit BlockCache(std::size_t limit)
      : limit_(allocator_cache_available ? limit : 0), published_limit_(limit_) {
#if defined(__unix__) || defined(__APPLE__)
    // fork() while another thread holds the lock would leave the child's copy locked for good, and its next
    // large allocation waiting forever: the lock is taken around the fork (as glibc's malloc does with its
    // own), and the child, whose only thread is the one that forked, gets a fresh one.
    pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                   [] { new (&instance().mutex_) std::mutex(); });
#endif
  }

  static std::size_t limit_from_environment() {
    const auto bytes = environment_integer("EIGENFORMER_ALLOCATOR_CACHE_BYTES", 0, std::numeric_limits<long long>::max(),
                                           "the default, 536870912 (512 MiB)");
    return bytes ? static_cast<std::size_t>(*bytes) : default_allocator_cache_limit;
  }


  void unlink(FreeBlock* block) noexcept {
    (block->newer ? block->newer->older : newest_) = block->older;
    (block->older ? block->older->newer : oldest_) = block->newer;
  }

  // Releases the least recently cached blocks until at most `bytes` remain cached.
  void trim_to(std::size_t bytes) noexcept {
    while (cached_bytes_ > bytes && oldest_) {
      FreeBlock* const block = oldest_;
      const std::size_t size = block->bytes;
      auto& same_size = by_size_[size];
      // Blocks of one size are listed oldest first, so the oldest of all is the first of its size.
      same_size.erase(same_size.begin());
      unlink(block);
      cached_bytes_ -= size;
      heap_free(block);
    }
  }

  std::mutex mutex_;
  std::size_t limit_;
  std::atomic<std::size_t> published_limit_;
  std::size_t cached_bytes_ = 0;
  FreeBlock* newest_ = nullptr;
  FreeBlock* oldest_ = nullptr;
  std::unordered_map<std::size_t, std::vector<FreeBlock*>> by_size_;  // oldest first
};

// Small blocks (below cache_min_block_bytes: a decoding step's activations, every tensor's shared control
// block) freed by a thread wait in that thread's own lists, one a size class, for its next request of the
// class: no lock, and an inference step that frees what the previous one allocated makes no heap call at
// all. At most small_cache_bytes a thread are held (the rest go back to the heap), none when the cache's
// limit is 0 (and never under AddressSanitizer); a thread's blocks are freed when it exits, or by
// release_cached_memory() on that thread.
inline constexpr std::size_t small_cache_bytes = std::size_t{4} << 20;

class SmallBlockCache {
 public:
  // The calling thread's cache, or null once its thread is exiting (storage freed from thread-exit code
  // then goes straight back to the heap).
  static SmallBlockCache* current() noexcept;

  void* allocate(std::size_t bytes) {
    Link*& head = heads_[bytes / tensor_alignment];
    if (Link* block = head) {
      head = block->next;
      held_ -= bytes;
      return block;
    }
    return heap_allocate(bytes);
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (held_ + bytes > std::min(small_cache_bytes, BlockCache::instance().limit_unlocked())) {
      heap_free(p);
      return;
    }
    heads_[bytes / tensor_alignment] = new (p) Link{heads_[bytes / tensor_alignment]};
    held_ += bytes;
  }

  std::size_t held_bytes() const noexcept { return held_; }

  void release() noexcept {
    for (Link*& head : heads_)
      while (Link* block = head) {
        head = block->next;
        heap_free(block);
      }
    held_ = 0;
  }

 private:
  struct Link {
    Link* next;
  };
  // Trivially destructible, so still readable while the thread's other thread_locals are destroyed.
  static inline thread_local bool exited_ = false;
  friend struct SmallBlockCacheOwner;

  Link* heads_[cache_min_block_bytes / tensor_alignment] = {};
  std::size_t held_ = 0;
};

struct SmallBlockCacheOwner {
  SmallBlockCache cache;
  ~SmallBlockCacheOwner() {
    SmallBlockCache::exited_ = true;
    cache.release();
  }
};

inline SmallBlockCache* SmallBlockCache::current() noexcept {
  if (exited_) return nullptr;
  thread_local SmallBlockCacheOwner owner;
  return &owner.cache;
}

// Every allocation of tensor storage and of its control block goes through these two.
inline void* allocate_block(std::size_t bytes) {
  if (bytes < cache_min_block_bytes && allocator_cache_available)
    if (SmallBlockCache* small = SmallBlockCache::current()) return small->allocate(bytes);
  return BlockCache::instance().allocate(bytes);
}
inline void deallocate_block(void* p, std::size_t bytes) noexcept {
  if (bytes < cache_min_block_bytes && allocator_cache_available)
    if (SmallBlockCache* small = SmallBlockCache::current()) return small->deallocate(p, bytes);
  BlockCache::instance().deallocate(p, bytes);
}

// The allocator of a tensor storage's shared_ptr control block: a small block like any other.
template <class U>
struct ControlBlockAllocator {
  using value_type = U;
  ControlBlockAllocator() = default;
  template <class V>
  ControlBlockAllocator(const ControlBlockAllocator<V>&) noexcept {}
  static std::size_t bytes(std::size_t n) { return allocation_size_class(n * sizeof(U)); }
  U* allocate(std::size_t n) {
    static_assert(alignof(U) <= tensor_alignment);
    return static_cast<U*>(allocate_block(bytes(n)));
  }
  void deallocate(U* p, std::size_t n) noexcept { deallocate_block(p, bytes(n)); }
  template <class V>
  bool operator==(const ControlBlockAllocator<V>&) const noexcept {
    return true;
  }
};

}  // namespace detail

// Bytes of freed large blocks (cache_min_block_bytes and up) the allocator holds for reuse; each thread's
// small blocks, at most detail::small_cache_bytes a thread, are not counted.
inline std::size_t cached_memory_bytes() { return detail::BlockCache::instance().cached_bytes(); }

// Gives every cached large block, and the calling thread's small ones, back to the system; returns how many
// bytes of large blocks that was.
inline std::size_t release_cached_memory() {
  if (detail::allocator_cache_available)
    if (detail::SmallBlockCache* small = detail::SmallBlockCache::current()) small->release();
  return detail::BlockCache::instance().release();
}

// The most freed storage the allocator keeps for reuse (0: none). Lowering it releases the excess now.
// Builds with AddressSanitizer never cache, whatever the limit.
inline void set_allocator_cache_limit(std::size_t bytes) {
  detail::BlockCache::instance().set_limit(detail::allocator_cache_available ? bytes : 0);
}

inline std::size_t allocator_cache_limit() { return detail::BlockCache::instance().limit(); }

}  // namespace eigenformer
