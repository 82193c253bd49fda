// GPT-2 small (124M, fp32) inference, the workloads of ROADMAP item 6, with a PyTorch twin under the same
// names in bench/torch_gpt2.py (run both with bench/compare.py). Weights are random: speed does not depend
// on their values, and no checkpoint is needed.
//   BM_gpt2_forward/<t>         one t-token sequence (128, 512) through the whole model (logits for every position)
//   BM_gpt2_forward_packed/<t>  the same with every weight matrix held only in the packed kernel's order
//                               (FloatWeights::release, packed as it is drawn, as loading with pack_weights does;
//                               wte's lookups read the tied head's packed copy): the products of pack_weights()
//                               with the float weights kept, at less memory
//   BM_gpt2_decode_step         one new token with a KV cache already holding 128 tokens
//   BM_gpt2_decode_step_packed  the same with BM_gpt2_forward_packed's model (weights held only packed)
//   BM_gpt2_greedy_decode/<n>   n greedy tokens after a 128-token prompt in the cache (the prompt untimed): the
//                               time of an iteration is n tokens' worth, so ms/token = time / n
//   BM_gpt2_decode_step_bf16   the same with the weights stored as bfloat16 (to_bf16_weights(FloatWeights::release):
//                              the float weights freed, as `gpt2 --dtype bf16` holds them; float arithmetic)
//   BM_gpt2_greedy_decode_bf16/<n>  BM_gpt2_greedy_decode with those bfloat16 weights (`gpt2 --dtype bf16`);
//                              issue 11 sets its goal against PyTorch's fp32 greedy decode, so bench/table.py
//                              puts it beside torch_gpt2.py's BM_gpt2_greedy_decode/<n>
//   BM_read_bandwidth/<MiB>    summing a buffer of that size over the thread pool with four SIMD sums a thread:
//                              the memory read bandwidth that bounds a decode step, which reads every weight
//                              once. The two sizes are GPT-2 small's weight matrices in float (471 MiB) and
//                              in bfloat16 (236 MiB)
//
// Counters: `allocs` is the number of global operator new calls per iteration (this binary replaces the
// global operator new to count them), measured after warm-up. The goal for a decode step is 0: a server
// decoding many streams should not go through the allocator per token. Tensor storage and its shared
// control block come from operator new the first time and from the allocator's caches after that
// (tensor/allocator.hpp); Eigen's own GEMM blocking buffers come from malloc and are not counted.
//
// Threads: the library's pool size comes from EIGENFORMER_NUM_THREADS (bench/compare.py sets
// OMP_NUM_THREADS for PyTorch; pass EIGENFORMER_NUM_THREADS=N along for the same count here).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <eigenformer/models/gpt2.hpp>
#include <new>
#include <vector>

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

ef::models::GPT2LMHeadModel<float> make_gpt2(const ef::models::GPT2Config& config) {
  ef::manual_seed(0);
  ef::models::GPT2LMHeadModel<float> m(config);
  m.eval();
  return m;
}

ef::models::GPT2LMHeadModel<float>& gpt2_small() {
  static ef::models::GPT2LMHeadModel<float> model = make_gpt2(ef::models::GPT2Config::gpt2_small());
  return model;
}

// GPT-2 small holding its weight matrices as bfloat16 alone (FloatWeights::release), as `gpt2 --dtype bf16`
// holds them, built without ever holding the float model, as that command loads it: each matrix is drawn
// (N(0, 0.02)) into zero pages that nothing has touched yet (no_init), then converted and freed, so that this
// process's peak RSS (bench/table.py's column) is that of the bfloat16 model, not of the float one.
ef::models::GPT2LMHeadModel<float>& gpt2_small_bf16() {
  static ef::models::GPT2LMHeadModel<float> model = [] {
    ef::manual_seed(0);
    ef::models::GPT2LMHeadModel<float> m(ef::models::GPT2Config::gpt2_small(), ef::models::no_init);
    // wte first, as the loader fills it first (registration order): its float table and its copy are then
    // all the memory there is.
    ef::normal_(m.transformer.wte.weight.data, 0.0, 0.02);
    m.transformer.wte.to_bf16_weights(ef::FloatWeights::release);
    ef::normal_(m.transformer.wpe.weight.data, 0.0, 0.02);
    for (auto& [name, module] : m.named_modules())
      if (auto* conv = dynamic_cast<ef::nn::Conv1D<float>*>(module)) {
        ef::normal_(conv->weight.data, 0.0, 0.02);
        conv->to_bf16_weights(ef::FloatWeights::release);
      }
    m.to_bf16_weights(ef::FloatWeights::release);  // the tied head, reading wte's copy
    m.eval();
    return m;
  }();
  return model;
}

// A GPT-2 holding its weight matrices only packed (FloatWeights::release), built the way
// load_pretrained(dir, {.pack_weights = true}) loads it and for gpt2_small_bf16's reason: each matrix drawn
// into untouched zero pages, packed, its float values freed. Packing the float model after building it held
// wte twice for a moment, and that moment was this process's peak RSS (642 MB where loading GPT-2 small peaks
// at 525).
ef::models::GPT2LMHeadModel<float> make_gpt2_packed(const ef::models::GPT2Config& config) {
  ef::manual_seed(0);
  ef::models::GPT2LMHeadModel<float> m(config, ef::models::no_init);
  ef::normal_(m.transformer.wte.weight.data, 0.0, 0.02);
  m.pack_tied_head(ef::FloatWeights::release);  // the head's packed copy becomes the only table
  ef::normal_(m.transformer.wpe.weight.data, 0.0, 0.02);
  for (auto& [name, module] : m.named_modules())
    if (auto* conv = dynamic_cast<ef::nn::Conv1D<float>*>(module)) {
      ef::normal_(conv->weight.data, 0.0, 0.02);
      conv->pack_weights(ef::FloatWeights::release);
    }
  m.eval();
  return m;
}
ef::models::GPT2LMHeadModel<float>& gpt2_small_packed() {
  static ef::models::GPT2LMHeadModel<float> model = make_gpt2_packed(ef::models::GPT2Config::gpt2_small());
  return model;
}
// GPT-2 medium: 1024 wide, so every product's input has rows 4 KiB apart (backend::detail::unaliased_left_operand).
ef::models::GPT2LMHeadModel<float>& gpt2_medium_packed() {
  static ef::models::GPT2LMHeadModel<float> model = make_gpt2_packed(ef::models::GPT2Config::gpt2_medium());
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

void run_forward(benchmark::State& state, ef::models::GPT2LMHeadModel<float>& model) {
  const auto ids = token_ids(state.range(0));
  benchmark::DoNotOptimize(model.forward(ids).data());  // warm-up
  const auto before = g_allocations.load();
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(ids).data());
  state.counters["allocs"] = benchmark::Counter(static_cast<double>(g_allocations.load() - before),
                                                benchmark::Counter::kAvgIterations);
}
void BM_gpt2_forward(benchmark::State& state) { run_forward(state, gpt2_small()); }
BENCHMARK(BM_gpt2_forward)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond);
// The same after model.pack_weights(FloatWeights::release): every weight in the packed kernel's order, read
// without repacking.
void BM_gpt2_forward_packed(benchmark::State& state) { run_forward(state, gpt2_small_packed()); }
BENCHMARK(BM_gpt2_forward_packed)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond);
// GPT-2 medium (24 layers, 1024 wide, 355M parameters), float weights and held only packed, as small above.
void BM_gpt2_medium_forward(benchmark::State& state) {
  static ef::models::GPT2LMHeadModel<float> model = make_gpt2(ef::models::GPT2Config::gpt2_medium());
  run_forward(state, model);
}
BENCHMARK(BM_gpt2_medium_forward)->Arg(128)->Unit(benchmark::kMillisecond);
void BM_gpt2_medium_forward_packed(benchmark::State& state) { run_forward(state, gpt2_medium_packed()); }
BENCHMARK(BM_gpt2_medium_forward_packed)->Arg(128)->Unit(benchmark::kMillisecond);

// The same with the weights held only as bfloat16 (gpt2 --dtype bf16): a prompt's forward, every product of
// 128 rows widening its weight a group of columns at a time. No PyTorch twin (its bfloat16 products are not
// this); it compares the library's two ways of holding the weights.
void BM_gpt2_forward_bf16(benchmark::State& state) { run_forward(state, gpt2_small_bf16()); }
BENCHMARK(BM_gpt2_forward_bf16)->Arg(128)->Unit(benchmark::kMillisecond);

void decode_step(benchmark::State& state, const ef::models::GPT2LMHeadModel<float>& model) {
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

void BM_gpt2_decode_step(benchmark::State& state) { decode_step(state, gpt2_small()); }
BENCHMARK(BM_gpt2_decode_step)->Unit(benchmark::kMillisecond);
// The same with the weights held only packed (BM_gpt2_forward_packed's model): each one-row product through
// the packed kernel's few-row path instead of the float decoding kernels. No PyTorch twin.
void BM_gpt2_decode_step_packed(benchmark::State& state) { decode_step(state, gpt2_small_packed()); }
BENCHMARK(BM_gpt2_decode_step_packed)->Unit(benchmark::kMillisecond);

// Generation as a user sees it: each step feeds the argmax of the previous step's last logits (the lowest id
// among equal maxima, as torch.argmax), so the loop includes reading the logits back.
std::int64_t argmax_last(const ef::Tensor<float, 3>& logits) {  // (1, 1, V)
  const float* row = logits.data();
  return std::max_element(row, row + logits.shape()[2]) - row;
}

void greedy_decode(benchmark::State& state, const ef::models::GPT2LMHeadModel<float>& model) {
  const ef::index_t n = state.range(0);
  auto cache = model.make_cache(1, 128 + n);
  const auto prompt = token_ids(128);
  auto next = token_ids(1);
  auto prefill = [&] {
    cache.reset();
    next(0, 0) = argmax_last(model.forward(prompt, cache, ef::models::LogitsFor::last));
  };
  auto greedy = [&] {
    for (ef::index_t i = 0; i < n; ++i) next(0, 0) = argmax_last(model.forward(next, cache, ef::models::LogitsFor::last));
  };
  prefill();  // warm-up
  greedy();
  std::int64_t counted = 0;
  for (auto _ : state) {
    state.PauseTiming();
    prefill();
    state.ResumeTiming();
    const auto before = g_allocations.load(std::memory_order_relaxed);
    greedy();
    counted += g_allocations.load(std::memory_order_relaxed) - before;
  }
  state.counters["allocs/token"] = benchmark::Counter(static_cast<double>(counted) / static_cast<double>(n),
                                                      benchmark::Counter::kAvgIterations);
}
void BM_gpt2_greedy_decode(benchmark::State& state) { greedy_decode(state, gpt2_small()); }
BENCHMARK(BM_gpt2_greedy_decode)->Arg(32)->Unit(benchmark::kMillisecond);

void BM_gpt2_decode_step_bf16(benchmark::State& state) { decode_step(state, gpt2_small_bf16()); }
BENCHMARK(BM_gpt2_decode_step_bf16)->Unit(benchmark::kMillisecond);

void BM_gpt2_greedy_decode_bf16(benchmark::State& state) { greedy_decode(state, gpt2_small_bf16()); }
BENCHMARK(BM_gpt2_greedy_decode_bf16)->Arg(32)->Unit(benchmark::kMillisecond);

// The floor a decode step is held to, so it must read as fast as the memory allows. A plain summing loop
// did not: the compiler's single vector sum read 15-17 GB/s on 2 threads of an AVX-512 Xeon where four
// independent SIMD sums over the same buffer read 17-20 (interleaved in one process, seven rounds). One
// chunk a thread, as the decode step's products split a row-major weight. bytes_per_second is the figure.
// (A build without AVX2 sums one float at a time, a dependent chain that understates the memory.)
void BM_read_bandwidth(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0)) << 20;
  const auto floats = static_cast<ef::index_t>(bytes / sizeof(float));
  std::vector<float> buffer(static_cast<std::size_t>(floats), 1.0f);
  const ef::index_t threads = ef::get_num_threads();
  const ef::index_t grain = (floats + threads - 1) / threads;
  std::vector<float> sums(static_cast<std::size_t>(threads), 0.0f);  // one a chunk: begin / grain < threads
  for (auto _ : state) {
    ef::backend::parallel_for(floats, grain, [&](ef::index_t begin, ef::index_t end) {
      const float* p = buffer.data();
      float s = 0.0f;
      ef::index_t i = begin;
#if defined(EIGENFORMER_SIMD_FLOAT)
      using V = ef::backend::detail::SimdFloat;
      V::reg s0 = V::zero(), s1 = V::zero(), s2 = V::zero(), s3 = V::zero();
      for (; i + 4 * V::width <= end; i += 4 * V::width) {
        s0 = V::add(s0, V::load(p + i));
        s1 = V::add(s1, V::load(p + i + V::width));
        s2 = V::add(s2, V::load(p + i + 2 * V::width));
        s3 = V::add(s3, V::load(p + i + 3 * V::width));
      }
      alignas(64) float lanes[V::width];
      V::store(lanes, V::add(V::add(s0, s1), V::add(s2, s3)));
      for (float x : lanes) s += x;
#endif
      for (; i < end; ++i) s += p[i];
      sums[static_cast<std::size_t>(begin / grain)] = s;
    });
    benchmark::DoNotOptimize(sums.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_read_bandwidth)->Arg(471)->Arg(236)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
