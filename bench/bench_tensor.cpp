// Tensor kernels at the sizes a GPT-2 / BERT-base forward pass uses (T = 128 tokens, C = 768 channels,
// NH = 12 heads of HS = 64). Each BM_ name has a twin in bench/torch_tensor.py timing the same workload
// in PyTorch, so `bench/compare.py` can print the two side by side from one run.
#include <benchmark/benchmark.h>

#include <eigenformer/eigenformer.hpp>

namespace ef = eigenformer;

namespace {

// x (T, C) @ W^T with W stored (out, in) as nn.Linear does: the transposed operand is read in place.
void BM_linear_matmul(benchmark::State& state) {
  const ef::index_t T = 128, in = 768, out = state.range(0);
  ef::manual_seed(0);
  const auto x = ef::randn({T, in});
  const auto w = ef::randn({out, in});
  for (auto _ : state) benchmark::DoNotOptimize(ef::matmul(x, w.t()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * T * in * out, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_linear_matmul)->Arg(768)->Arg(2304)->Arg(3072)->Unit(benchmark::kMillisecond);

// Attention scores q @ k^T for (B=1, NH, T, HS).
void BM_attention_scores(benchmark::State& state) {
  ef::manual_seed(0);
  const auto q = ef::randn({1, 12, 128, 64});
  const auto k = ef::randn({1, 12, 128, 64});
  for (auto _ : state) benchmark::DoNotOptimize(ef::matmul(q, k.transpose(-2, -1)));
}
BENCHMARK(BM_attention_scores)->Unit(benchmark::kMicrosecond);

void BM_softmax_last_dim(benchmark::State& state) {
  ef::manual_seed(0);
  const auto s = ef::randn({1, 12, 128, 128});
  for (auto _ : state) benchmark::DoNotOptimize(ef::softmax(s, -1));
}
BENCHMARK(BM_softmax_last_dim)->Unit(benchmark::kMicrosecond);

void BM_add_bias_broadcast(benchmark::State& state) {
  ef::manual_seed(0);
  const auto x = ef::randn({128, 3072});
  const auto b = ef::randn({3072});
  for (auto _ : state) benchmark::DoNotOptimize(x + b);
}
BENCHMARK(BM_add_bias_broadcast)->Unit(benchmark::kMicrosecond);

void BM_sum_last_dim(benchmark::State& state) {
  ef::manual_seed(0);
  const auto x = ef::randn({128, 3072});
  for (auto _ : state) benchmark::DoNotOptimize(ef::sum(x, -1));
}
BENCHMARK(BM_sum_last_dim)->Unit(benchmark::kMicrosecond);

void BM_randn(benchmark::State& state) {
  ef::manual_seed(0);
  for (auto _ : state) benchmark::DoNotOptimize(ef::randn({1 << 20}));
}
BENCHMARK(BM_randn)->Unit(benchmark::kMillisecond);

}  // namespace
