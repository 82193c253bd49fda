// GPT-2 small (124M, fp32) inference, the workloads of ROADMAP item 6, with a PyTorch twin under the same
// names in bench/torch_gpt2.py (run both with bench/compare.py). Weights are random: speed does not depend
// on their values, and no checkpoint is needed.
//   BM_gpt2_forward/128   one 128-token sequence through the whole model (logits for every position)
//   BM_gpt2_decode_step   one new token with a KV cache already holding 128 tokens
//
// Counters: `allocs` is the number of global operator new calls per iteration (this binary replaces the
// global operator new to count them), measured after warm-up. The goal for a decode step is 0: a server
// decoding many streams should not go through the allocator per token. Tensor storage comes from operator
// new (one call for the buffer, one for its shared control block); Eigen's own GEMM blocking buffers come
// from malloc and are not counted.
//
// Threads: the library's pool size comes from EIGENFORMER_NUM_THREADS (bench/compare.py sets
// OMP_NUM_THREADS for PyTorch; pass EIGENFORMER_NUM_THREADS=N along for the same count here).
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <eigenformer/models/gpt2.hpp>
#include <new>

namespace {
std::atomic<std::int64_t> g_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

// Every form of the global operator new, counted; the matching deletes free with std::free (aligned_alloc
// memory is freed by free too).
void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace ef = eigenformer;

namespace {

ef::models::GPT2LMHeadModel<float>& gpt2_small() {
  static ef::models::GPT2LMHeadModel<float> model = [] {
    ef::manual_seed(0);
    ef::models::GPT2LMHeadModel<float> m(ef::models::GPT2Config::gpt2_small());
    m.eval();
    return m;
  }();
  return model;
}

ef::Tensor<std::int64_t, 2> token_ids(ef::index_t t) {
  auto ids = ef::Tensor<std::int64_t, 2>::empty({1, t});
  for (ef::index_t i = 0; i < t; ++i) ids(0, i) = (i * 7919) % 50257;  // any in-vocabulary ids
  return ids;
}

// BM_gpt2_attention/T/W: the attention core alone on one layer's (1, T, 2304) projections, causal, 12 heads.
// W = 0 streams (what inference runs), W = 1 forms the weights (what a forward returning them runs). No
// PyTorch twin: it compares the library's two paths.
void BM_gpt2_attention(benchmark::State& state) {
  ef::manual_seed(1);
  const auto qkv = ef::randn<float>({1, state.range(0), 3 * 768});
  const bool weights = state.range(1) != 0;
  for (auto _ : state) {
    ef::Tensor<float, 4> w;
    const auto y = ef::nn::fused_attention(qkv, {.num_heads = 12, .causal = true}, {.weights = weights ? &w : nullptr});
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_gpt2_attention)->ArgsProduct({{128, 512}, {0, 1}})->Unit(benchmark::kMillisecond);

void BM_gpt2_forward(benchmark::State& state) {
  auto& model = gpt2_small();
  const auto ids = token_ids(state.range(0));
  benchmark::DoNotOptimize(model.forward(ids).data());  // warm-up
  const auto before = g_allocations.load();
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(ids).data());
  state.counters["allocs"] = benchmark::Counter(static_cast<double>(g_allocations.load() - before),
                                                benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_gpt2_forward)->Arg(128)->Unit(benchmark::kMillisecond);

void BM_gpt2_decode_step(benchmark::State& state) {
  auto& model = gpt2_small();
  auto cache = model.make_cache(1, 129);
  const auto prompt = token_ids(128);
  const auto next = token_ids(1);
  for (int warm = 0; warm < 2; ++warm) {
    cache.reset();
    model.forward(prompt, cache);
    benchmark::DoNotOptimize(model.forward(next, cache).data());
  }
  std::int64_t counted = 0;
  for (auto _ : state) {
    state.PauseTiming();
    cache.reset();  // back to 128 cached tokens: rerun the prompt untimed
    model.forward(prompt, cache, ef::models::LogitsFor::last);
    state.ResumeTiming();
    const auto before = g_allocations.load(std::memory_order_relaxed);
    benchmark::DoNotOptimize(model.forward(next, cache).data());
    counted += g_allocations.load(std::memory_order_relaxed) - before;
  }
  state.counters["allocs"] = benchmark::Counter(static_cast<double>(counted), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_gpt2_decode_step)->Unit(benchmark::kMillisecond);

}  // namespace
