// nanoGPT's character-level language-model training (train.py with config/train_shakespeare_char.py) on
// models::GPT2LMHeadModel: the corpus split 90/10, random blocks as get_batch draws them, AdamW in two
// parameter groups (weight decay on matrices only), nanoGPT's warm-up + cosine learning rate, gradient
// clipping, estimate_loss, and checkpoints that resume bit for bit. examples/train_char_gpt.cpp is the
// command line; tests/train/test_char_lm.cpp runs a tiny configuration.
//
//   auto data = train::CharDataset::from_text(text);             // vocabulary, train and val ids
//   train::CharLMTrainer trainer(config, data.tokenizer);         // model, optimizer, loss
//   while (trainer.step() < config.iters) trainer.train_step(data.train);
//   trainer.estimate_loss(data.val, config.eval_iters);
//   trainer.save("out");  ...  auto again = train::CharLMTrainer::load("out");
//
// Randomness. Every draw comes from eigenformer's Generator, never from the default one. Step s draws its
// batch offsets (torch.randint, as get_batch: `random() % (len - block)`) and then its dropout masks from a
// Generator seeded with mix(seed, s); an evaluation at step s from one seeded with mix(seed, s, eval). So
// the training trajectory depends only on (config, seed), not on how often or how long one evaluates, and
// a resumed run needs no generator state: it is bit-identical to an uninterrupted one (nanoGPT itself does
// not restore its RNG on resume). Within a step the draws are those of torch's CPU generator.
//
// Checkpoint directory (save / load):
//   config.json, model.safetensors   models::save_pretrained: loadable by gpt2_from_pretrained and by
//                                    transformers' GPT2LMHeadModel.from_pretrained
//   optimizer.safetensors            per parameter "<name>.exp_avg", "<name>.exp_avg_sq" (F32/F64, flat) and
//                                    "<name>.step" (I64 [1]); metadata: the optimizer's step count
//   trainer.json                     step, the training configuration, the vocabulary (its characters)
// The directory is written as a whole: into "<dir>.partial", then renamed over <dir> (the previous one is
// moved to "<dir>.old" for the instant of the swap and then removed), so a crash never leaves a model of one
// step beside an optimizer state of another.
//
// Optimizer state: AdamW::state() (each parameter's moments and step count, in group order) is saved as
// optimizer.safetensors under "<parameter>.exp_avg" / ".exp_avg_sq" / ".step", and set_steps_taken restores
// the optimizer's own count.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eigenformer/io/detail/atomic_file.hpp"
#include "eigenformer/io/error.hpp"
#include "eigenformer/io/safetensors.hpp"
#include "eigenformer/models/generation.hpp"
#include "eigenformer/models/gpt2.hpp"
#include "eigenformer/models/pretrained.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/tokenizers/char_tokenizer.hpp"
#include "eigenformer/train/losses.hpp"
#include "eigenformer/train/optimizers.hpp"
#include "eigenformer/train/schedules.hpp"

namespace eigenformer::train {

// nanoGPT's config/train_shakespeare_char.py with its CPU settings (README: "baby GPT" on a laptop):
// 4 layers, 4 heads, 128 channels, block 64, batch 12, no dropout, 2000 iterations with lr decaying to 1e-4.
struct CharLMConfig {
  index_t n_layer = 4;
  index_t n_head = 4;
  index_t n_embd = 128;
  index_t block_size = 64;
  index_t batch_size = 12;
  double dropout = 0.0;
  double lr = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup = 100;
  std::int64_t iters = 2000;  // max_iters = lr_decay_iters
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 disables clipping
  std::uint64_t seed = 1337;

  // Throws std::invalid_argument naming the first bad field.
  void validate() const {
    auto need = [](bool ok, const std::string& what) {
      if (!ok) throw std::invalid_argument("CharLMConfig: " + what);
    };
    need(n_layer > 0 && n_head > 0 && n_embd > 0, "n_layer, n_head and n_embd must be positive");
    need(n_embd % n_head == 0, "n_embd " + std::to_string(n_embd) + " is not divisible by n_head " + std::to_string(n_head));
    need(block_size > 0 && batch_size > 0, "block_size and batch_size must be positive");
    need(dropout >= 0 && dropout < 1, "dropout must be in [0, 1)");
    need(lr > 0 && min_lr >= 0 && min_lr <= lr, "need lr > 0 and 0 <= min_lr <= lr");
    need(warmup >= 0 && iters > warmup, "need warmup >= 0 and iters > warmup (iters is also the lr decay length)");
    need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "betas must be in [0, 1)");
    need(weight_decay >= 0 && grad_clip >= 0, "weight_decay and grad_clip must be >= 0");
  }

  models::GPT2Config gpt2(index_t vocab_size) const {
    models::GPT2Config c;
    c.vocab_size = vocab_size;
    c.n_positions = block_size;
    c.n_embd = n_embd;
    c.n_layer = n_layer;
    c.n_head = n_head;
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = dropout;
    return c;
  }
};

inline nlohmann::json to_json(const CharLMConfig& c) {
  return {{"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}, {"block_size", c.block_size},
          {"batch_size", c.batch_size}, {"dropout", c.dropout}, {"lr", c.lr}, {"min_lr", c.min_lr},
          {"warmup", c.warmup}, {"iters", c.iters}, {"beta1", c.beta1}, {"beta2", c.beta2},
          {"weight_decay", c.weight_decay}, {"grad_clip", c.grad_clip}, {"seed", c.seed}};
}
inline CharLMConfig char_lm_config_from_json(const nlohmann::json& j) {
  CharLMConfig c;
  c.n_layer = j.at("n_layer");
  c.n_head = j.at("n_head");
  c.n_embd = j.at("n_embd");
  c.block_size = j.at("block_size");
  c.batch_size = j.at("batch_size");
  c.dropout = j.at("dropout");
  c.lr = j.at("lr");
  c.min_lr = j.at("min_lr");
  c.warmup = j.at("warmup");
  c.iters = j.at("iters");
  c.beta1 = j.at("beta1");
  c.beta2 = j.at("beta2");
  c.weight_decay = j.at("weight_decay");
  c.grad_clip = j.at("grad_clip");
  c.seed = j.at("seed");
  return c;
}

// The corpus as nanoGPT's data/shakespeare_char/prepare.py makes it: the sorted characters, the first
// train_fraction of the ids for training, the rest for validation.
struct CharDataset {
  tokenizers::CharTokenizer tokenizer;
  std::vector<std::int64_t> train, val;

  static CharDataset from_text(std::string_view text, double train_fraction = 0.9) {
    auto tok = tokenizers::CharTokenizer::from_text(text);
    auto ids = tok.encode(text);
    const auto n = static_cast<std::size_t>(static_cast<double>(ids.size()) * train_fraction);  // int(n * 0.9)
    CharDataset d{std::move(tok), {}, {}};
    d.train.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
    d.val.assign(ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end());
    return d;
  }
};

// torch.randint(high, ()) on the CPU generator: one 32-bit draw modulo the range (64-bit when the range
// needs it), as at::uniform_int_from_to_distribution.
inline std::int64_t randint(Generator& gen, std::int64_t high) {
  if (high <= 0) throw std::invalid_argument("randint: high must be positive, got " + std::to_string(high));
  const auto range = static_cast<std::uint64_t>(high);
  return static_cast<std::int64_t>(range >= (std::uint64_t{1} << 32) ? gen.random64() % range : gen.random() % range);
}

struct Batch {
  Tensor<std::int64_t, 2> x, y;  // (B, T): y is x shifted by one
};

// nanoGPT's get_batch: ix = torch.randint(len(data) - block_size, (batch_size,)); x = data[i : i+block],
// y = data[i+1 : i+1+block].
inline Batch get_batch(const std::vector<std::int64_t>& data, index_t batch, index_t block, Generator& gen) {
  const auto len = static_cast<std::int64_t>(data.size());
  if (len <= block)
    throw std::invalid_argument("get_batch: the split has " + std::to_string(len) + " tokens; blocks of " +
                                std::to_string(block) + " need at least " + std::to_string(block + 1));
  Batch b{Tensor<std::int64_t, 2>::empty({batch, block}), Tensor<std::int64_t, 2>::empty({batch, block})};
  for (index_t i = 0; i < batch; ++i) {
    const std::int64_t at = randint(gen, len - block);
    std::copy_n(data.begin() + at, block, b.x.data() + i * block);
    std::copy_n(data.begin() + at + 1, block, b.y.data() + i * block);
  }
  return b;
}

namespace detail {

// splitmix64: distinct, well-mixed seeds for (seed, step, purpose).
inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t step, std::uint64_t purpose) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ULL + step * 0xBF58476D1CE4E5B9ULL + purpose * 0x94D049BB133111EBULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z & 0xFFFFFFFFULL;  // the generator keeps the low 32 bits, as torch.manual_seed
}

inline void write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  io::detail::AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace detail

// The model, its optimizer and loss, and the step count: one training run.
template <floating_element T = float>
class CharLMTrainer {
 public:
  CharLMTrainer(const CharLMConfig& config, tokenizers::CharTokenizer tokenizer)
      : config_(checked(config)), tokenizer_(std::move(tokenizer)) {
    Generator init(config_.seed);  // the weights, as torch.manual_seed(seed) before building the model
    model_ = std::make_unique<models::GPT2LMHeadModel<T>>(config_.gpt2(static_cast<index_t>(tokenizer_.vocab_size())), init);
    build_optimizer();
  }
  CharLMTrainer(const CharLMTrainer&) = delete;
  CharLMTrainer& operator=(const CharLMTrainer&) = delete;

  const CharLMConfig& config() const noexcept { return config_; }
  const tokenizers::CharTokenizer& tokenizer() const noexcept { return tokenizer_; }
  models::GPT2LMHeadModel<T>& model() noexcept { return *model_; }
  const models::GPT2LMHeadModel<T>& model() const noexcept { return *model_; }
  AdamW<T>& optimizer() noexcept { return *optimizer_; }
  // Steps taken so far (nanoGPT's iter_num): the next train_step is step().
  std::int64_t step() const noexcept { return step_; }
  // The learning rate of step s (nanoGPT's get_lr with lr_decay_iters = iters).
  double lr_at(std::int64_t s) const { return nanogpt_lr(s, config_.lr, config_.min_lr, config_.warmup, config_.iters); }

  struct StepResult {
    double loss = 0, lr = 0, grad_norm = 0;
  };

  // One optimizer step on a random batch of `data`: lr, forward, backward, clip, AdamW.
  StepResult train_step(const std::vector<std::int64_t>& data) {
    Generator gen(detail::mix_seed(config_.seed, static_cast<std::uint64_t>(step_), 0));
    GeneratorGuard dropout_draws(gen);  // dropout masks, after the batch offsets
    const auto batch = get_batch(data, config_.batch_size, config_.block_size, gen);
    StepResult r;
    r.lr = lr_at(step_);
    optimizer_->set_lr(r.lr);
    model_->train();
    optimizer_->zero_grad();
    const auto logits = model_->forward(batch.x);  // (B, T, V)
    r.loss = static_cast<double>(loss_.forward(logits, batch.y).item());
    model_->backward(loss_.template backward<3>());
    if (config_.grad_clip > 0) r.grad_norm = static_cast<double>(clip_grad_norm(params_, config_.grad_clip));
    optimizer_->step();
    ++step_;
    return r;
  }

  // nanoGPT's estimate_loss for one split: the mean loss over `iters` random batches, in eval mode under
  // InferenceMode. `purpose` separates the splits' draws (0 train, 1 val); the draws depend on the step.
  double estimate_loss(const std::vector<std::int64_t>& data, std::int64_t iters, std::uint64_t purpose = 1) {
    if (iters <= 0) throw std::invalid_argument("estimate_loss: iters must be positive");
    Generator gen(detail::mix_seed(config_.seed, static_cast<std::uint64_t>(step_), 1000 + purpose));
    const bool was_training = model_->is_training();
    model_->eval();
    InferenceMode inference;
    double sum = 0;
    for (std::int64_t k = 0; k < iters; ++k) {
      const auto batch = get_batch(data, config_.batch_size, config_.block_size, gen);
      sum += static_cast<double>(loss_.forward(model_->forward(batch.x), batch.y).item());
    }
    model_->train(was_training);
    return sum / static_cast<double>(iters);
  }

  // nanoGPT's sample.py loop: each new character is sampled (temperature, top-k) from the model's
  // prediction for the last block_size characters -- models::generate with one new token on the cropped
  // context, since a block-64 model has only 64 positions. Returns the n new characters.
  std::string sample(std::string_view prompt, index_t n, double temperature, index_t top_k, std::uint64_t seed) const {
    std::vector<std::int64_t> ids = tokenizer_.encode(prompt);
    if (ids.empty()) throw std::invalid_argument("sample: the prompt must not be empty");
    const std::size_t start = ids.size();
    Generator gen(seed);
    models::GenerationConfig g;
    g.max_new_tokens = 1;
    g.do_sample = true;
    g.temperature = temperature;
    g.top_k = top_k;
    const auto block = static_cast<std::size_t>(config_.block_size);
    for (index_t i = 0; i < n; ++i) {
      const std::size_t from = ids.size() > block ? ids.size() - block : 0;
      const std::vector<std::int64_t> context(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
      ids.push_back(models::generate(*model_, context, g, gen).back());
    }
    return tokenizer_.decode(std::span<const std::int64_t>(ids).subspan(start));
  }

  // Writes the checkpoint directory (see the top of this file).
  void save(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    const fs::path partial = dir.string() + ".partial", old = dir.string() + ".old";
    std::error_code ec;
    fs::remove_all(partial, ec);
    models::save_pretrained(*model_, partial);
    io::TensorDict tensors;
    auto& state = optimizer_->state();
    std::size_t k = 0;
    for (auto& group : optimizer_->groups())
      for (auto& p : group.params) {
        auto& s = state[k++];
        if (s.step > 0) {
          tensors.emplace(p.name + ".exp_avg", s.exp_avg);
          tensors.emplace(p.name + ".exp_avg_sq", s.exp_avg_sq);
        }
        auto count = Tensor<std::int64_t, 1>::empty(Shape<1>{1});
        count(0) = s.step;
        tensors.emplace(p.name + ".step", count);
      }
    io::save_safetensors(partial / "optimizer.safetensors", tensors,
                         {{"format", "pt"}, {"steps", std::to_string(optimizer_->steps_taken())}});
    std::string chars;
    for (char32_t c : tokenizer_.chars()) tokenizers::unicode::append_utf8(chars, c);
    const nlohmann::json trainer = {{"step", step_}, {"config", to_json(config_)}, {"vocabulary", chars}};
    detail::write_text_atomically(partial / "trainer.json", trainer.dump(2) + "\n");
    fs::remove_all(old, ec);
    if (fs::exists(dir)) fs::rename(dir, old);
    fs::rename(partial, dir);
    fs::remove_all(old, ec);
  }

  // Resumes from a directory written by save(): model, optimizer state, step, configuration and vocabulary.
  static std::unique_ptr<CharLMTrainer> load(const std::filesystem::path& dir) {
    const auto trainer_json = dir / "trainer.json";
    // A directory opens as a stream on POSIX, and reading it throws std::ios_base::failure from the parser.
    std::error_code ec;
    if (std::filesystem::is_directory(trainer_json, ec))
      throw io::checkpoint_error(trainer_json.string() + ": is a directory (not a checkpoint written by --save?)");
    std::ifstream in(trainer_json);
    if (!in) throw io::checkpoint_error(trainer_json.string() + ": cannot open (not a checkpoint written by --save?)");
    nlohmann::json j;
    CharLMConfig config;
    std::string chars;
    std::int64_t step = 0;
    try {
      in >> j;
      config = char_lm_config_from_json(j.at("config"));
      chars = j.at("vocabulary").get<std::string>();
      step = j.at("step").get<std::int64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw io::checkpoint_error(trainer_json.string() + ": " + e.what());
    }
    std::vector<char32_t> cps;
    for (std::size_t i = 0; i < chars.size();) {
      const auto d = tokenizers::unicode::decode(chars, i);
      if (!d.valid) throw io::checkpoint_error(trainer_json.string() + ": the vocabulary is not valid UTF-8");
      cps.push_back(d.cp);
      i += d.length;
    }
    auto t = std::unique_ptr<CharLMTrainer>(new CharLMTrainer(config, tokenizers::CharTokenizer(std::move(cps)), no_weights));
    const auto model_file = io::SafeTensorsFile::from_file(dir / "model.safetensors");
    models::load_gpt2_state_dict(*t->model_, model_file);
    if (models::gpt2_config_from_file(dir / "config.json").n_embd != config.n_embd)
      throw io::checkpoint_error((dir / "config.json").string() + ": does not match trainer.json");
    const auto opt = io::SafeTensorsFile::from_file(dir / "optimizer.safetensors");
    auto& state = t->optimizer_->state();
    std::size_t k = 0;
    for (auto& group : t->optimizer_->groups())
      for (auto& p : group.params) {
        auto& s = state[k++];
        s.step = opt.get<std::int64_t, 1>(p.name + ".step")(0);
        if (s.step > 0) {
          s.exp_avg = opt.get<T, 1>(p.name + ".exp_avg");
          s.exp_avg_sq = opt.get<T, 1>(p.name + ".exp_avg_sq");
          if (s.exp_avg.numel() != p.data.numel() || s.exp_avg_sq.numel() != p.data.numel())
            throw io::checkpoint_error((dir / "optimizer.safetensors").string() + ": " + p.name + " has the wrong size");
        }
      }
    const auto& meta = opt.metadata();
    const auto it = meta.find("steps");
    t->optimizer_->set_steps_taken(it != meta.end() ? std::stoll(it->second) : step);
    t->step_ = step;
    return t;
  }

 private:
  struct no_weights_t {};
  static constexpr no_weights_t no_weights{};
  CharLMTrainer(const CharLMConfig& config, tokenizers::CharTokenizer tokenizer, no_weights_t)
      : config_(checked(config)), tokenizer_(std::move(tokenizer)) {
    model_ = std::make_unique<models::GPT2LMHeadModel<T>>(config_.gpt2(static_cast<index_t>(tokenizer_.vocab_size())),
                                                          models::no_init);
    build_optimizer();
  }

  static const CharLMConfig& checked(const CharLMConfig& c) {
    c.validate();
    return c;
  }

  void build_optimizer() {
    params_ = model_->named_parameters();
    AdamWOptions o;
    o.lr = config_.lr;
    o.beta1 = config_.beta1;
    o.beta2 = config_.beta2;
    o.weight_decay = config_.weight_decay;
    // nanoGPT's configure_optimizers: decay the 2-D tensors (embeddings, matmul weights), not the biases and
    // LayerNorm parameters.
    optimizer_ = std::make_unique<AdamW<T>>(model_->named_parameters(), o, decays_by_default<T>);
  }

  CharLMConfig config_;
  tokenizers::CharTokenizer tokenizer_;
  std::unique_ptr<models::GPT2LMHeadModel<T>> model_;
  ParameterList<T> params_;
  std::unique_ptr<AdamW<T>> optimizer_;
  nn::CrossEntropyLoss<T> loss_;
  std::int64_t step_ = 0;
};

}  // namespace eigenformer::train
