// GPT-2 small (124M, fp32) inference, the workloads of ROADMAP item 6, with a PyTorch twin under the same
// names in bench/torch_gpt2.py (run both with bench/compare.py). Weights are random: speed does not depend
// on their values, and no checkpoint is needed.
//   BM_gpt2_forward/128   one 128-token sequence through the whole model (logits for every position)
//   BM_gpt2_decode_step   one new token with a KV cache already holding 128 tokens
#include <benchmark/benchmark.h>

#include <cstdint>
#include <eigenformer/eigenformer.hpp>

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

void BM_gpt2_forward(benchmark::State& state) {
  auto& model = gpt2_small();
  const auto ids = token_ids(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(ids).data());
}
BENCHMARK(BM_gpt2_forward)->Arg(128)->Unit(benchmark::kMillisecond);

void BM_gpt2_decode_step(benchmark::State& state) {
  auto& model = gpt2_small();
  ef::models::KVCache<float> cache(model.config(), 1, 129);
  model.forward(token_ids(128), cache);
  const auto next = token_ids(1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.forward(next, cache).data());
    state.PauseTiming();
    cache.reset();  // back to 128 cached tokens: rerun the prompt untimed
    model.forward(token_ids(128), cache);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_gpt2_decode_step)->Unit(benchmark::kMillisecond);

}  // namespace
