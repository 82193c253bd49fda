// Tensor kernels at the sizes a GPT-2 / BERT-base forward pass uses (T = 128 tokens, C = 768 channels,
// NH = 12 heads of HS = 64). Each BM_ name has a twin in bench/torch_tensor.py timing the same workload
// in PyTorch, so `bench/compare.py` can print the two side by side from one run.
//
// The product and attention cases take their thread count as the last argument (.../1, .../2) and set it
// for their own run, so one run of the binary compares 1 and 2 threads; the others use the process
// setting (EIGENFORMER_NUM_THREADS, which compare.py --threads sets).
#include <benchmark/benchmark.h>

#include <eigenformer/nn/layernorm.hpp>
#include <eigenformer/random.hpp>
#include <eigenformer/tensor.hpp>

#include "threads.hpp"

namespace ef = eigenformer;

namespace {

// x (T, C) @ W^T with W stored (out, in) as nn.Linear does: the transposed operand is read in place.
void BM_linear_matmul(benchmark::State& state) {
  const bench::Threads threads(state.range(1));
  const ef::index_t T = 128, in = 768, out = state.range(0);
  ef::manual_seed(0);
  const auto x = ef::randn({T, in});
  const auto w = ef::randn({out, in});
  for (auto _ : state) benchmark::DoNotOptimize(ef::matmul(x, w.t()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * T * in * out, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_linear_matmul)
    ->ArgsProduct({{768, 2304, 3072}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// GPT-2's MLP up-projection, act(x W^T + b) with the tanh GELU: bias and activation fused into the product
// (backend::gemm's epilogue), against PyTorch's linear then gelu.
void BM_linear_bias_gelu(benchmark::State& state) {
  const bench::Threads threads(state.range(1));
  const ef::index_t T = 128, in = 768, out = state.range(0);
  ef::manual_seed(0);
  const auto x = ef::randn({T, in});
  const auto w = ef::randn({out, in});
  const auto b = ef::randn({out});
  for (auto _ : state)
    benchmark::DoNotOptimize(ef::backend::gemm(x, w.t(), {&b, ef::backend::Activation::gelu_tanh}));
}
BENCHMARK(BM_linear_bias_gelu)->ArgsProduct({{3072}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode step's projection: a single token's row through the fused qkv weight (a matrix-vector product).
void BM_decode_linear(benchmark::State& state) {
  const bench::Threads threads(state.range(1));
  const ef::index_t in = 768, out = state.range(0);
  ef::manual_seed(0);
  const auto x = ef::randn({1, in});
  const auto w = ef::randn({out, in});
  for (auto _ : state) benchmark::DoNotOptimize(ef::matmul(x, w.t()));
}
BENCHMARK(BM_decode_linear)->ArgsProduct({{2304}, {1, 2}})->Unit(benchmark::kMicrosecond)->UseRealTime();

// Attention scores q @ k^T for (B=1, NH, T, HS).
void BM_attention_scores(benchmark::State& state) {
  const bench::Threads threads(state.range(0));
  ef::manual_seed(0);
  const auto q = ef::randn({1, 12, 128, 64});
  const auto k = ef::randn({1, 12, 128, 64});
  for (auto _ : state) benchmark::DoNotOptimize(ef::matmul(q, k.transpose(-2, -1)));
}
BENCHMARK(BM_attention_scores)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_softmax_last_dim(benchmark::State& state) {
  const bench::Threads threads(state.range(0));
  ef::manual_seed(0);
  const auto s = ef::randn({1, 12, 128, 128});
  for (auto _ : state) benchmark::DoNotOptimize(ef::softmax(s, -1));
}
BENCHMARK(BM_softmax_last_dim)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// GELU over one FFN activation of BERT-base at 128 tokens (128 x 3072), one thread, no allocation:
// range(0) 0 = erf form, 1 = tanh form; range(1) 0 = forward, 1 = backward (the derivative times a gradient).
void BM_gelu(benchmark::State& state) {
  const auto kind = state.range(0) == 0 ? ef::backend::Activation::gelu_erf : ef::backend::Activation::gelu_tanh;
  ef::manual_seed(0);
  const auto x = ef::randn({128, 3072});
  const auto g = ef::randn({128, 3072});
  auto y = ef::Tensor<float, 2>::empty({128, 3072});
  for (auto _ : state) {
    if (state.range(1) == 0) ef::backend::activate(x.data(), y.data(), x.numel(), kind);
    else ef::backend::activate_backward(g.data(), x.data(), y.data(), x.numel(), kind);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_gelu)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond)->UseRealTime();

// nn.LayerNorm(768) over 512 rows (GPT-2 small at 512 tokens, BERT-base at batch 4 of 128): range(0) 0 =
// an inference forward, 1 = a training forward and backward (input and parameter gradients).
void BM_layer_norm(benchmark::State& state) {
  ef::manual_seed(0);
  ef::nn::LayerNorm<float> ln(768);
  ln.weight->data.copy_(ef::randn({768}));
  ln.bias->data.copy_(ef::randn({768}));
  const auto x = ef::randn({512, 768});
  const auto g = ef::randn({512, 768});
  if (state.range(0) == 0) ln.eval();
  for (auto _ : state) {
    auto y = ln.forward(x);
    if (state.range(0) == 1) {
      auto dx = ln.backward(g);
      benchmark::DoNotOptimize(dx.data());
    }
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_layer_norm)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_add_bias_broadcast(benchmark::State& state) {
  ef::manual_seed(0);
  const auto x = ef::randn({128, 3072});
  const auto b = ef::randn({3072});
  for (auto _ : state) benchmark::DoNotOptimize(x + b);
}
BENCHMARK(BM_add_bias_broadcast)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_sum_last_dim(benchmark::State& state) {
  ef::manual_seed(0);
  const auto x = ef::randn({128, 3072});
  for (auto _ : state) benchmark::DoNotOptimize(ef::sum(x, -1));
}
BENCHMARK(BM_sum_last_dim)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_randn(benchmark::State& state) {
  ef::manual_seed(0);
  for (auto _ : state) benchmark::DoNotOptimize(ef::randn({1 << 20}));
}
BENCHMARK(BM_randn)->Unit(benchmark::kMillisecond);

}  // namespace
