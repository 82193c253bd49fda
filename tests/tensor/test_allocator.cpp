// Tensor storage's allocator (include/eigenformer/tensor/allocator.hpp): large freed blocks are reused by
// size class, smaller ones by the thread that freed them, the cache stays under its limit releasing the
// least recently freed first, and reused memory carries nothing into tensors that promise values (zeros,
// full, copies).
// Builds with AddressSanitizer never cache; there the tests check that nothing is held instead.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "support/cases.hpp"
#include "support/child_process.hpp"

namespace {

using namespace eftest;

// Restores the cache's limit a test changed, whatever way the test ends.
struct CacheLimitGuard {
  std::size_t saved = ef::allocator_cache_limit();
  ~CacheLimitGuard() { ef::set_allocator_cache_limit(saved); }
};

constexpr std::size_t large_floats = std::size_t{1} << 18;  // 1 MiB: above the 128 KiB the cache starts at

}  // namespace

TEST_CASE("allocator: size classes round up by at most an eighth, to whole alignment units, monotonically") {
  std::size_t checked = 0, previous = 0;
  // Every byte count near each power of two from 1 byte to 1 GiB, and the steps between them.
  for (int power = 0; power <= 30; ++power) {
    const std::size_t base = std::size_t{1} << power;
    for (std::size_t bytes : {base - 1, base, base + 1, base + base / 8, base + base / 8 + 1, base + base / 2 + 3}) {
      if (bytes == 0) continue;
      const std::size_t size = ef::detail::allocation_size_class(bytes);
      CHECK_MESSAGE(size >= bytes, bytes);
      CHECK_MESSAGE(size % ef::tensor_alignment == 0, bytes);
      if (bytes < ef::detail::cache_min_block_bytes) {
        CHECK_MESSAGE(size - bytes < ef::tensor_alignment, bytes);  // below the cache: alignment only
      } else {
        CHECK_MESSAGE(size - bytes <= bytes / 8, bytes);
      }
      ++checked;
    }
  }
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 24); bytes = bytes * 9 / 8 + 7) {
    const std::size_t size = ef::detail::allocation_size_class(bytes);
    CHECK_MESSAGE(size >= previous, bytes);  // a larger request never gets a smaller block
    previous = size;
  }
  check_ran_at_least(checked, 150, "size classes");
}

TEST_CASE("allocator: a freed large block serves the next tensor of its size class; small ones are not held") {
  const CacheLimitGuard guard;
  ef::set_allocator_cache_limit(std::size_t{64} << 20);
  const void* first = nullptr;
  {
    auto t = ef::Tensor<float, 1>::empty({static_cast<ef::index_t>(large_floats)});
    first = t.data();
  }
  const std::size_t held = ef::cached_memory_bytes();
  if constexpr (ef::detail::allocator_cache_available) {
    CHECK(held >= large_floats * sizeof(float));
    // A slightly smaller request falls in the same class and gets the same block back.
    auto again = ef::Tensor<float, 1>::empty({static_cast<ef::index_t>(large_floats - 100)});
    CHECK(static_cast<const void*>(again.data()) == first);
    CHECK(ef::cached_memory_bytes() == held - ef::detail::allocation_size_class(large_floats * sizeof(float)));
  } else {
    CHECK(held == 0);
  }
  const std::size_t before_small = ef::cached_memory_bytes();
  { auto small = ef::Tensor<float, 2>::empty({16, 16}); }
  CHECK(ef::cached_memory_bytes() == before_small);
}

TEST_CASE("allocator: a small block freed by a thread serves that thread's next request of its size class") {
  const CacheLimitGuard guard;
  ef::set_allocator_cache_limit(std::size_t{64} << 20);
  const void* first = nullptr;
  { first = ef::Tensor<float, 2>::empty({16, 16}).data(); }
  const auto again = ef::Tensor<float, 2>::empty({15, 17});  // 1020 bytes: the same 1024-byte class
  if constexpr (ef::detail::allocator_cache_available) {
    CHECK(static_cast<const void*>(again.data()) == first);
    // release_cached_memory empties the thread's lists, and a limit of zero holds nothing, small blocks
    // included: the freed blocks go back to the heap.
    ef::release_cached_memory();
    CHECK(ef::detail::SmallBlockCache::current()->held_bytes() == 0);
    ef::set_allocator_cache_limit(0);
    { auto t = ef::Tensor<float, 2>::empty({8, 8}); }
    CHECK(ef::detail::SmallBlockCache::current()->held_bytes() == 0);
    ef::set_allocator_cache_limit(std::size_t{64} << 20);
    { auto t = ef::Tensor<float, 2>::empty({8, 8}); }
    CHECK(ef::detail::SmallBlockCache::current()->held_bytes() > 0);
    ef::release_cached_memory();
    CHECK(ef::detail::SmallBlockCache::current()->held_bytes() == 0);
  }
}

TEST_CASE("allocator: the limit releases the least recently freed blocks first, and release empties the cache") {
  const CacheLimitGuard guard;
  ef::release_cached_memory();
  CHECK(ef::cached_memory_bytes() == 0);
  ef::set_allocator_cache_limit(std::size_t{64} << 20);
  const std::size_t block = ef::detail::allocation_size_class(large_floats * sizeof(float));
  const void* older = nullptr;
  const void* newer = nullptr;
  {
    auto a = ef::Tensor<float, 1>::empty({static_cast<ef::index_t>(large_floats)});
    auto b = ef::Tensor<float, 1>::empty({static_cast<ef::index_t>(large_floats)});
    older = a.data();
    newer = b.data();
    a = ef::Tensor<float, 1>();  // freed first
  }
  if constexpr (ef::detail::allocator_cache_available) {
    CHECK(ef::cached_memory_bytes() == 2 * block);
    ef::set_allocator_cache_limit(block);  // room for one: the older goes
    CHECK(ef::cached_memory_bytes() == block);
    auto c = ef::Tensor<float, 1>::empty({static_cast<ef::index_t>(large_floats)});
    CHECK(static_cast<const void*>(c.data()) == newer);
    CHECK(static_cast<const void*>(c.data()) != older);
    c = ef::Tensor<float, 1>();
    CHECK(ef::release_cached_memory() == block);
    CHECK(ef::cached_memory_bytes() == 0);
    // A limit of zero holds nothing.
    ef::set_allocator_cache_limit(0);
    { auto d = ef::Tensor<float, 1>::empty({static_cast<ef::index_t>(large_floats)}); }
    CHECK(ef::cached_memory_bytes() == 0);
  } else {
    CHECK(ef::cached_memory_bytes() == 0);
    CHECK(ef::release_cached_memory() == 0);
  }
}

TEST_CASE("allocator: reused blocks carry nothing into zeros, full, ones and clones") {
  const CacheLimitGuard guard;
  ef::set_allocator_cache_limit(std::size_t{64} << 20);
  const auto n = static_cast<ef::index_t>(large_floats);
  std::size_t checked = 0;
  // Each creation below gets the block the garbage-filled tensor just freed.
  auto dirty = [&] { (void)ef::full<float>({n}, -7.5f); };
  dirty();
  const auto zeros = ef::zeros<float>({n});
  CHECK(std::all_of(zeros.data(), zeros.data() + n, [](float x) { return x == 0.0f; }));
  ++checked;
  dirty();
  const auto ones = ef::ones<float>({n});
  CHECK(std::all_of(ones.data(), ones.data() + n, [](float x) { return x == 1.0f; }));
  ++checked;
  dirty();
  const auto copy = zeros.clone();
  CHECK(std::all_of(copy.data(), copy.data() + n, [](float x) { return x == 0.0f; }));
  ++checked;
  check_ran(checked, 3, "creations over reused blocks");
}

TEST_CASE("allocator: threads allocating and freeing large tensors at once keep their own contents") {
  const CacheLimitGuard guard;
  ef::set_allocator_cache_limit(std::size_t{16} << 20);  // small enough that blocks are released meanwhile
  constexpr int threads = 4, rounds = 50;
  std::vector<int> failures(threads, 0);
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id) {
    pool.emplace_back([id, &failures] {
      for (int r = 0; r < rounds; ++r) {
        // Sizes vary by thread and round so that classes are shared between threads.
        const auto n = static_cast<ef::index_t>(large_floats / 2 + std::size_t(((id + r) % 5)) * 40000);
        const float value = static_cast<float>(id * 1000 + r);
        const auto t = ef::full<float>({n}, value);
        std::this_thread::yield();
        if (!std::all_of(t.data(), t.data() + n, [value](float x) { return x == value; })) ++failures[id];
      }
    });
  }
  for (auto& t : pool) t.join();
  for (int id = 0; id < threads; ++id) CHECK_MESSAGE(failures[id] == 0, "thread " << id);
  CHECK(ef::cached_memory_bytes() <= (std::size_t{16} << 20));
}

#if defined(__unix__) || defined(__APPLE__)
// A child forked while another thread allocates and frees large blocks (the cache's lock taken and released
// all the time, and held while it gives blocks back to the system) must still allocate: without the fork
// handlers some of these children inherited the lock held and waited forever.
TEST_CASE("allocator: children forked while another thread uses the cache allocate large tensors and exit") {
  const CacheLimitGuard guard;
  // Room for one of the two sizes below: every free releases the other size's block, under the lock.
  ef::set_allocator_cache_limit(large_floats * sizeof(float) * 3 / 2);
  std::atomic<bool> stop{false};
  std::thread churn([&stop] {
    for (std::size_t i = 0; !stop.load(); ++i) {
      const auto n = static_cast<ef::index_t>(i % 2 ? large_floats : large_floats + large_floats / 4);
      const auto t = ef::Tensor<float, 1>::empty(ef::Shape<1>{n});
      (void)t;
    }
  });
  constexpr int children = 40;
  int exited = 0;
  for (int i = 0; i < children; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const auto t = ef::full<float>({static_cast<ef::index_t>(large_floats)}, 2.0f);
      _exit(t.data()[0] == 2.0f ? 0 : 1);
    }
    const auto status = wait_for_child(pid, std::chrono::milliseconds(5000));
    if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) ++exited;
  }
  stop = true;
  churn.join();
  CHECK_MESSAGE(exited == children, exited << " of " << children << " children allocated and exited within 5 s");
}
#endif

TEST_CASE("allocator: weight blocks are zero, 64-byte aligned, writable, and never cached") {
  // allocate_zeroed holds a model's weights (skip-init parameters, PackedMatrix, Bf16Matrix): from
  // mapped_weight_min_bytes up mapped on their own (map_weight_block), below from calloc.
  const CacheLimitGuard guard;
  ef::set_allocator_cache_limit(std::size_t{64} << 20);
  const std::size_t huge = ef::detail::huge_page_bytes;
  std::size_t checked = 0;
  for (std::size_t bytes : {std::size_t{4}, std::size_t{4096}, ef::detail::mapped_weight_min_bytes - 4,
                            ef::detail::mapped_weight_min_bytes, huge - 4, huge, huge + 4, 2 * huge + 4100,
                            std::size_t{9437184}}) {
    const std::size_t cached = ef::cached_memory_bytes();
    {
      const auto n = static_cast<ef::index_t>(bytes / sizeof(float));
      const auto block = ef::detail::allocate_zeroed<float>(n);
      CHECK_MESSAGE(reinterpret_cast<std::uintptr_t>(block.get()) % ef::tensor_alignment == 0, bytes);
      CHECK_MESSAGE(std::all_of(block.get(), block.get() + n, [](float x) { return x == 0.0f; }), bytes);
      std::fill(block.get(), block.get() + n, 1.5f);  // every byte writable
      CHECK(block.get()[n - 1] == 1.5f);
      const auto halves = ef::detail::allocate_zeroed<std::uint16_t>(static_cast<ef::index_t>(bytes / 2));
      const bool zero =
          std::all_of(halves.get(), halves.get() + bytes / 2, [](std::uint16_t x) { return x == 0; });
      CHECK_MESSAGE(zero, bytes);
    }
    CHECK_MESSAGE(ef::cached_memory_bytes() == cached, bytes);  // given back to the system, not to the cache
    ++checked;
  }
  check_ran_at_least(checked, 9, "block sizes");
}

#if defined(__linux__) && defined(MAP_FIXED_NOREPLACE)
namespace {
// Whether no page of [start, start + bytes) is mapped (mincore fails with ENOMEM on an unmapped page).
bool unmapped(std::uintptr_t start, std::size_t bytes) {
  unsigned char resident = 0;
  const auto page_bytes = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (std::uintptr_t page = start; page < start + bytes; page += page_bytes) {
    errno = 0;
    if (::mincore(reinterpret_cast<void*>(page), 1, &resident) == 0 || errno != ENOMEM) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("allocator: a weight block goes right below one not yet written, else on a 2 MiB boundary") {
  // So that a model's skip-init weights, all mapped before the checkpoint fills any, form one run of huge
  // pages, while a block mapped after the one before it was written (a loader packing each weight as it
  // reads it) starts a huge page of its own instead of sharing one already split into 4 KiB pages.
  const std::size_t huge = ef::detail::huge_page_bytes;
  const auto n = static_cast<ef::index_t>((3 * huge + 12344) / sizeof(float));
  const std::size_t length = ef::detail::mapped_length(static_cast<std::size_t>(n) * sizeof(float));
  const auto first = ef::detail::allocate_zeroed<float>(n);
  first.get()[0] = 1.0f;  // written: the next block gets a huge page boundary of its own
  const auto second = ef::detail::allocate_zeroed<float>(n);
  const auto at = reinterpret_cast<std::uintptr_t>(second.get());
  CHECK(at % huge == 0);
  // second is not written: the next block goes right below it, where nothing is mapped (checked first:
  // another thread's mapping could have taken the space).
  const bool room = unmapped(at - length, length);
  const auto third = ef::detail::allocate_zeroed<float>(n);
  if (room) {
    CHECK(reinterpret_cast<std::uintptr_t>(third.get()) + length == at);
  } else {
    MESSAGE("skipped the placement check: the space below the block was mapped by something else");
  }
  for (const auto* block : {&second, &third}) {
    CHECK(std::all_of(block->get(), block->get() + n, [](float x) { return x == 0.0f; }));
    std::fill(block->get(), block->get() + n, 2.0f);
  }
  CHECK(second.get()[n - 1] == 2.0f);
  CHECK(third.get()[n - 1] == 2.0f);  // both fully writable: neither overlaps the other
}
#endif
