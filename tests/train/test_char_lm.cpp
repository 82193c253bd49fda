// train/char_lm.hpp (examples/train_char_gpt.cpp's training loop) on a tiny configuration: the loss falls,
// and a run saved after k steps and resumed for m more is bit-identical to k + m steps straight.
#include <doctest/doctest.h>

#include <cstring>
#include <eigenformer/train/char_lm.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "support/throws.hpp"

namespace ef = eigenformer;
namespace train = eigenformer::train;

namespace {

// A small repetitive text: learnable in a few dozen steps.
std::string corpus() {
  std::string s;
  const char* lines[] = {"To be, or not to be: that is the question.\n", "All the world's a stage.\n",
                         "The lady doth protest too much, methinks.\n", "Brevity is the soul of wit.\n"};
  for (int i = 0; i < 40; ++i) s += lines[i % 4];
  return s;
}

train::CharLMConfig tiny_char_lm_config() {
  train::CharLMConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.batch_size = 4;
  c.lr = 3e-3;
  c.min_lr = 3e-4;
  c.warmup = 3;
  c.iters = 30;
  c.seed = 7;
  return c;
}

std::vector<float> weights(train::CharLMTrainer<float>& t) {
  std::vector<float> out;
  for (const auto& p : t.model().named_parameters()) {
    const auto d = p.data.contiguous();
    out.insert(out.end(), d.data(), d.data() + d.numel());
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("char_lm: get_batch draws torch.randint offsets and shifts the targets by one") {
  std::vector<std::int64_t> data(100);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::int64_t>(i);
  ef::Generator g(1), h(1);
  const auto b = train::get_batch(data, 3, 5, g);
  for (ef::index_t i = 0; i < 3; ++i) {
    const auto at = static_cast<std::int64_t>(h.random() % 95u);
    for (ef::index_t j = 0; j < 5; ++j) {
      CHECK(b.x(i, j) == at + j);
      CHECK(b.y(i, j) == at + j + 1);
    }
  }
  CHECK_THROWS_EXACTLY(train::get_batch(data, 1, 100, g), std::invalid_argument);
}

TEST_CASE("char_lm: a tiny GPT learns, and save/resume is bit-exact") {
  const auto data = train::CharDataset::from_text(corpus());
  REQUIRE(data.val.size() > 17);
  const auto c = tiny_char_lm_config();

  // Straight: 30 steps.
  train::CharLMTrainer<float> straight(c, data.tokenizer);
  const double before = straight.estimate_loss(data.val, 4);
  std::vector<double> losses;
  while (straight.step() < c.iters) losses.push_back(straight.train_step(data.train).loss);
  const double after = straight.estimate_loss(data.val, 4);
  MESSAGE("val loss " << before << " -> " << after);
  CHECK(after < before - 0.5);
  CHECK(losses.back() < losses.front() - 0.5);

  // Interrupted: 12 steps, save, resume in a new trainer, 18 more.
  const auto dir = std::filesystem::temp_directory_path() / "eigenformer_test_char_lm";
  std::filesystem::remove_all(dir);
  {
    train::CharLMTrainer<float> first(c, data.tokenizer);
    while (first.step() < 12) first.train_step(data.train);
    first.save(dir);
  }
  CHECK(std::filesystem::exists(dir / "optimizer.safetensors"));
  CHECK_FALSE(std::filesystem::exists(dir.string() + ".partial"));
  auto resumed = train::CharLMTrainer<float>::load(dir);
  CHECK(resumed->step() == 12);
  CHECK(resumed->optimizer().steps_taken() == 12);
  CHECK(resumed->tokenizer().chars() == data.tokenizer.chars());
  std::vector<double> resumed_losses;
  while (resumed->step() < c.iters) resumed_losses.push_back(resumed->train_step(data.train).loss);
  CHECK(std::vector<double>(losses.begin() + 12, losses.end()) == resumed_losses);
  CHECK(same_bits(weights(*resumed), weights(straight)));
  CHECK(resumed->estimate_loss(data.val, 4) == after);

  // Saving over an existing checkpoint replaces it whole.
  resumed->save(dir);
  CHECK(train::CharLMTrainer<float>::load(dir)->step() == c.iters);
  std::filesystem::remove_all(dir);

  // Sampling: n characters from the vocabulary, reproducible by seed.
  const auto s = straight.sample("T", 20, 0.8, 200, 3);
  CHECK(s.size() == 20);
  CHECK(s == straight.sample("T", 20, 0.8, 200, 3));
}

TEST_CASE("char_lm: configuration and checkpoint errors") {
  auto c = tiny_char_lm_config();
  c.n_head = 3;
  CHECK_THROWS_EXACTLY(c.validate(), std::invalid_argument);
  c = tiny_char_lm_config();
  c.iters = c.warmup;
  CHECK_THROWS_EXACTLY(c.validate(), std::invalid_argument);
  CHECK_THROWS_EXACTLY(train::CharLMTrainer<float>::load("/nonexistent/eigenformer_ckpt"), ef::io::checkpoint_error);
}
