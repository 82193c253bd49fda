// GPT-2 and threads, on the tiny config (milliseconds per case):
//   (a) one eval-mode model shared by 4 std::threads at once, each with its own input (full forward and a
//       cached greedy generation with its own KV cache), looping: every result is bit-identical to the
//       single-thread result for that input. This holds because a non-recording forward only reads the
//       model; a forward that wrote a cache or flag into it would race, and the sanitizer presets (or the
//       mixed-up logits) would show it.
//   (b) training forward + backward with set_num_threads(1), 2 and 3 on a model big enough to be split across
//       threads: bit-identical logits and gradients
//       (the backend's contract: work split by size only, no reduction split across chunks). Dropout is on,
//       drawn from a GeneratorGuard seeded the same way for every run.
//       The same again after pack_weights(), the threads sharing the packed copies of the weights.
//   (c) inference holds no gradients: eval forwards, InferenceMode forwards of a training-mode model, cached
//       forwards and generate() leave every parameter's has_grad() false and nothing saved for backward.
// Tolerance: none; results are compared bit for bit.
#include <doctest/doctest.h>

#include <cstring>
#include <eigenformer/models/generation.hpp>
#include <eigenformer/models/gpt2.hpp>
#include <thread>
#include <vector>

#include "support/thread_counts.hpp"
#include "support/throws.hpp"

namespace ef = eigenformer;
namespace models = ef::models;
using ef::index_t;

namespace {

models::GPT2LMHeadModel<float> tiny_model(std::uint64_t seed) {
  ef::Generator gen(seed);
  models::GPT2LMHeadModel<float> m(models::GPT2Config::tiny(), gen);
  // Away from the 0.02 initialisation, so attention, GELU and LayerNorm all shape the logits.
  for (auto& p : m.named_parameters()) ef::normal_(p.data, 0.0, 0.3, gen);
  return m;
}

ef::Tensor<std::int64_t, 2> random_ids(index_t b, index_t t, std::uint64_t seed) {
  ef::Generator gen(seed);
  auto ids = ef::Tensor<std::int64_t, 2>::empty({b, t});
  for (index_t i = 0; i < b * t; ++i) ids.data()[i] = static_cast<std::int64_t>(gen.random() % 61);
  return ids;
}

// Bitwise equality of two float tensors' values (no tolerance; NaN payloads compared as bits too).
bool same_bits(const ef::Tensor<float, 3>& a, const ef::Tensor<float, 3>& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = a.to_vector(), y = b.to_vector();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("GPT-2 threads: one eval model shared by 4 threads gives each the single-thread bits") {
  auto m = tiny_model(11);
  m.eval();
  constexpr int threads = 4, rounds = 5;
  std::vector<ef::Tensor<std::int64_t, 2>> inputs;
  std::vector<ef::Tensor<float, 3>> expected_logits;
  std::vector<std::vector<std::int64_t>> expected_tokens;
  models::GenerationConfig g;
  g.max_new_tokens = 6;
  for (int i = 0; i < threads; ++i) {
    inputs.push_back(random_ids(2, 5 + i, 100 + static_cast<std::uint64_t>(i)));  // different lengths too
    expected_logits.push_back(m.forward(inputs.back()));
    expected_tokens.push_back(models::generate(m, inputs.back(), g).to_vector());
  }
  // Then again after pack_weights(): the threads share the packed copies too (tensor/packed_matrix.hpp),
  // which give the float weights' bits (in a build with the packed kernel; without it packing does nothing).
  for (const bool packed : {false, true}) {
    if (packed) m.pack_weights();
    std::vector<int> mismatches(threads, 0), errors(threads, 0);
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        try {
          for (int r = 0; r < rounds; ++r) {
            if (!same_bits(m.forward(inputs[i]), expected_logits[i])) ++mismatches[i];
            if (models::generate(m, inputs[i], g).to_vector() != expected_tokens[i]) ++mismatches[i];
          }
        } catch (...) {
          ++errors[i];
        }
      });
    for (auto& t : pool) t.join();
    for (int i = 0; i < threads; ++i) {
      INFO("thread " << i << (packed ? ", packed weights" : ""));
      CHECK(errors[i] == 0);
      CHECK(mismatches[i] == 0);
    }
  }
  // The shared model was only read: no gradient appeared, nothing was saved.
  for (const auto& p : m.named_parameters()) CHECK_MESSAGE(!p.has_grad(), p.name);
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({2, 5, 61})), std::logic_error);
}

TEST_CASE("GPT-2 threads: forward and backward give the same bits with 1, 2 and 3 threads") {
  const eftest::RestoreThreadCount restore_threads;
  // Larger than the tiny config, so that the work is actually split: the products of this model are cut into
  // several tiles (checked below) and the attention into 2 x 4 (batch, head) chunks; with the tiny config
  // every loop would be one chunk and the thread count could not matter.
  models::GPT2Config c;
  c.vocab_size = 1000;
  c.n_positions = 64;
  c.n_embd = 128;
  c.n_layer = 2;
  c.n_head = 4;
  ef::Generator init_gen(12);
  models::GPT2LMHeadModel<float> m(c, init_gen);
  for (auto& p : m.named_parameters()) ef::normal_(p.data, 0.0, 0.3, init_gen);
  m.train();  // dropout 0.1 on the embeddings, the attention weights and both residual branches
  auto ids = ef::Tensor<std::int64_t, 2>::empty({2, 48});
  for (index_t i = 0; i < ids.numel(); ++i) ids.data()[i] = static_cast<std::int64_t>(init_gen.random() % 1000);
  ef::Generator probe_gen(201);
  const auto probe = ef::randn<float>({2, 48, 1000}, probe_gen);
  // The LM head (96 x 128 x 1000) and c_fc (96 x 128 x 512) are split into tiles that threads share.
  REQUIRE(ef::backend::detail::plan_gemm<float>(96, 1000, 128).tiles() > 1);
  REQUIRE(ef::backend::detail::plan_gemm<float>(96, 512, 128).tiles() > 1);

  struct Run {
    ef::Tensor<float, 3> logits;
    std::vector<std::vector<float>> grads;
  };
  auto run = [&](int n) {
    ef::set_num_threads(n);
    for (auto& p : m.named_parameters()) p.state->grad = ef::zeros<float>(ef::Shape<1>{0});  // as set_to_none
    ef::Generator gen(202);
    ef::GeneratorGuard guard(gen);  // the same dropout masks for every thread count
    Run r{m.forward(ids), {}};
    m.backward(probe);
    for (const auto& p : m.named_parameters()) {
      REQUIRE_MESSAGE(p.has_grad(), p.name);
      r.grads.push_back(p.grad().to_vector());
    }
    return r;
  };
  const Run one = run(1);
  for (const int n : {2, 3}) {
    INFO(n << " threads");
    const Run other = run(n);
    CHECK(same_bits(other.logits, one.logits));
    const auto names = m.named_parameters();
    for (std::size_t i = 0; i < names.size(); ++i)
      CHECK_MESSAGE(std::memcmp(other.grads[i].data(), one.grads[i].data(), one.grads[i].size() * sizeof(float)) == 0,
                    "d" << names[i].name);
  }
  ef::set_num_threads(restore_threads.saved);
  // A different dropout seed changes the logits: the comparison above is not comparing constants.
  ef::Generator gen(203);
  ef::GeneratorGuard guard(gen);
  CHECK_FALSE(same_bits(m.forward(ids), one.logits));
}

TEST_CASE("GPT-2 inference holds no gradients and saves nothing") {
  auto m = tiny_model(13);
  const auto ids = random_ids(2, 7, 300);
  auto no_grads = [&](const char* what) {
    for (const auto& p : m.named_parameters()) CHECK_MESSAGE(!p.has_grad(), what << ": " << p.name);
  };
  m.eval();
  m.forward(ids);
  no_grads("eval forward");
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({2, 7, 61})), std::logic_error);

  // Training mode inside InferenceMode: dropout still applies (as torch.inference_mode), nothing is saved.
  m.train();
  {
    ef::InferenceMode inference;
    m.forward(ids);
  }
  no_grads("InferenceMode forward in training mode");
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({2, 7, 61})), std::logic_error);

  // Cached forwards and generation are inference by construction, in training mode too: no dropout
  // (the logits equal eval mode's), nothing saved, the flag untouched.
  auto cache = m.make_cache(2, 7);
  const auto cached = m.forward(ids, cache);
  CHECK(m.is_training());
  no_grads("cached forward in training mode");
  CHECK_THROWS_EXACTLY(m.backward(ef::zeros<float>({2, 7, 61})), std::logic_error);
  models::GenerationConfig g;
  g.max_new_tokens = 4;
  const auto tokens = models::generate(m, ids, g).to_vector();
  no_grads("generate in training mode");
  m.eval();
  auto eval_cache = m.make_cache(2, 7);
  CHECK(same_bits(m.forward(ids, eval_cache), cached));
  CHECK(models::generate(m, ids, g).to_vector() == tokens);

  // A recording forward, by contrast, is what allocates gradients once backward runs.
  m.train();
  m.forward(ids);
  m.backward(ef::ones<float>({2, 7, 61}));
  for (const auto& p : m.named_parameters()) CHECK_MESSAGE(p.has_grad(), p.name);
}
