// BERT-base (bert-base-uncased's shape, 110M parameters, fp32) inference, with a PyTorch twin under the same
// names in bench/torch_bert.py (run both with bench/compare.py) and an ONNX Runtime one in bench/ort_bert.mjs.
// Weights are random (Hugging Face's initialisation, N(0, 0.02)): speed does not depend on their values, and
// no checkpoint is needed. BertModel::forward as a classifier or an embedder calls it: the whole encoder and
// the pooler, eval mode, inside InferenceMode.
//   BM_bert_forward/<batch>/<seq>/<threads>          random in-vocabulary ids, attention_mask all ones
//   BM_bert_forward_packed/<batch>/<seq>/<threads>   the same after model.pack_weights(FloatWeights::release)
//                                                    (weights held only in the packed kernel's order: no
//                                                    repacking per forward; the products, and their bits, of
//                                                    pack_weights() keeping the float weights, at less memory)
//   BM_bert_forward_padded/<batch>/<seq>/<threads>   the same with sequence i of the batch padded to
//                                                    seq - 16 i real tokens (128, 112, ..., 16 at batch 8)
//   BM_bert_forward_bf16/<batch>/<seq>/<threads>     the same as BM_bert_forward with the weight matrices held
//                                                    only as bfloat16 (to_bf16_weights(FloatWeights::release):
//                                                    `bert --dtype bf16`), widened to float block by block
// Every case sets its own thread count (the last part of its name) and restores the process setting after
// it, as the twins do, so one run compares 1 and 2 threads.
//
// Counters: `allocs` is the number of global operator new calls per iteration (this binary replaces the
// global operator new to count them), measured after warm-up, as in bench/bench_gpt2.cpp.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <eigenformer/models/bert.hpp>
#include <new>
#include <random>

#include "threads.hpp"

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

ef::models::BertModel<float> make_bert_base() {
  ef::manual_seed(0);
  ef::models::BertModel<float> m(ef::models::BertConfig::bert_base_uncased());
  m.eval();
  return m;
}

ef::models::BertModel<float>& bert_base(bool packed, bool bf16 = false) {
  if (bf16) {
    static ef::models::BertModel<float> model = [] {
      auto m = make_bert_base();
      m.to_bf16_weights(ef::FloatWeights::release);
      return m;
    }();
    return model;
  }
  if (packed) {
    static ef::models::BertModel<float> model = [] {
      auto m = make_bert_base();
      m.pack_weights(ef::FloatWeights::release);
      return m;
    }();
    return model;
  }
  static ef::models::BertModel<float> model = make_bert_base();
  return model;
}

ef::Tensor<std::int64_t, 2> token_ids(ef::index_t b, ef::index_t t) {
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<std::int64_t> id(0, ef::models::BertConfig::bert_base_uncased().vocab_size - 1);
  auto ids = ef::Tensor<std::int64_t, 2>::empty({b, t});
  for (ef::index_t i = 0; i < b; ++i)
    for (ef::index_t j = 0; j < t; ++j) ids(i, j) = id(rng);
  return ids;
}

// 1 for the first `t - 16 i` positions of sequence i (at least 1), 0 after: a padded batch.
ef::Tensor<std::int64_t, 2> attention_mask(ef::index_t b, ef::index_t t, bool padded) {
  auto mask = ef::Tensor<std::int64_t, 2>::empty({b, t});
  for (ef::index_t i = 0; i < b; ++i) {
    const ef::index_t real = padded ? std::max<ef::index_t>(1, t - 16 * i) : t;
    for (ef::index_t j = 0; j < t; ++j) mask(i, j) = j < real ? 1 : 0;
  }
  return mask;
}

void run_forward(benchmark::State& state, bool padded, bool packed = false, bool bf16 = false) {
  const bench::Threads threads(state.range(2));
  const ef::InferenceMode inference;
  auto& model = bert_base(packed, bf16);
  const ef::index_t b = state.range(0), t = state.range(1);
  const auto ids = token_ids(b, t);
  const std::optional<ef::Tensor<std::int64_t, 2>> mask = attention_mask(b, t, padded);
  benchmark::DoNotOptimize(model.forward(ids, mask).last_hidden_state.data());  // warm-up
  const auto before = g_allocations.load();
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(ids, mask).last_hidden_state.data());
  state.counters["allocs"] = benchmark::Counter(static_cast<double>(g_allocations.load() - before),
                                                benchmark::Counter::kAvgIterations);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(b * t), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_bert_forward(benchmark::State& state) { run_forward(state, false); }
BENCHMARK(BM_bert_forward)
    ->ArgsProduct({{1, 8}, {128}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_bert_forward_packed(benchmark::State& state) { run_forward(state, false, true); }
BENCHMARK(BM_bert_forward_packed)
    ->ArgsProduct({{1, 8}, {128}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_bert_forward_bf16(benchmark::State& state) { run_forward(state, false, false, true); }
BENCHMARK(BM_bert_forward_bf16)
    ->ArgsProduct({{1, 8}, {128}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_bert_forward_padded(benchmark::State& state) { run_forward(state, true); }
BENCHMARK(BM_bert_forward_padded)->ArgsProduct({{8}, {128}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
