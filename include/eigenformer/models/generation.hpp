// Text generation for any causal language model (the CausalLM concept below; GPT2LMHeadModel is one), as
// Hugging Face's GenerationMixin.generate does it for greedy search and multinomial sampling, plus the
// next-token table of `--show-top K`.
//
//   greedy (do_sample = false): the argmax of the last position's logits (the lowest id among equal maxima,
//       as torch.argmax); the warpers are not applied, as in transformers.
//   sampling (do_sample = true): the logits pass the warpers in transformers' order -- temperature
//       (scores / t), top-k, top-p -- then softmax, then one draw per sequence.
//   eos_token_id: a sequence that produced it is finished; later steps append pad_token_id (default: the eos
//       id, as transformers does for GPT-2) and generation stops once every sequence is finished.
//
// The draw reproduces torch.multinomial(probs, 1) on CPU in PyTorch 1.13 builds without MKL (Debian's), so
// `seed = s` gives the tokens of `torch.manual_seed(s); model.generate(..., do_sample=True)` when the logits
// agree: multinomial with one sample is argmax(probs / E) (the Gumbel/exponential race), E filled by
// exponential_(1) over the (B, V) probabilities in row-major order, each E = -log(1 - u) with u a 53-bit
// double uniform (two 32-bit draws), cast to the element type. Builds with MKL fill E from MKL's generator.
// tools/reference/make_gpt2_fixtures.py checks this against torch.multinomial on every recorded step.
//
// The warpers follow transformers' TopKLogitsWarper / TopPLogitsWarper exactly, ties included:
//   top-k keeps every score >= the k-th largest (ties with it are all kept, so possibly more than k);
//   top-p sorts ascending, takes the cumulative softmax and removes the entries whose cumulative probability
//   is <= 1 - p, always keeping the last (most probable) min_tokens_to_keep: the kept set is the smallest
//   whose probability exceeds p. Which of several exactly tied scores fall on either side of the cut is
//   decided by the sort; torch.sort is not stable on CPU and we reproduce its order (see top_p_filter).
// Removed entries become -inf.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "eigenformer/random.hpp"
#include "eigenformer/tensor.hpp"

namespace eigenformer::models {

// Which positions a cached forward computes logits for: every new one, or only the last of each sequence
// (all that generation reads; for a prompt of T tokens it skips T - 1 rows of the LM head).
enum class LogitsFor { all, last };

// A decoder that generate() can drive: a vocabulary and a position limit, a KV cache made by the model, and
// a cached forward that takes the new tokens (B, Tn), appends them to the cache and returns logits
// (B, Tn, V), or (B, 1, V) for LogitsFor::last. The forward is const: generation only reads the model.
template <class M>
concept CausalLM = requires(const M& model, const Tensor<std::int64_t, 2>& ids, index_t n,
                            typename M::cache_type& cache) {
  typename M::value_type;
  requires floating_element<typename M::value_type>;
  { model.vocab_size() } -> std::convertible_to<index_t>;
  { model.max_positions() } -> std::convertible_to<index_t>;
  { model.make_cache(n, n) } -> std::same_as<typename M::cache_type>;
  { cache.length() } -> std::convertible_to<index_t>;
  { model.forward(ids, cache, LogitsFor::last) } -> std::same_as<Tensor<typename M::value_type, 3>>;
};

// Hugging Face's GenerationConfig fields that greedy search and sampling use, with its defaults (top_k 50
// applies only when sampling; 0 disables it, as does top_p 1).
struct GenerationConfig {
  index_t max_new_tokens = 20;
  bool do_sample = false;
  double temperature = 1.0;
  index_t top_k = 50;
  double top_p = 1.0;
  std::optional<std::int64_t> eos_token_id;  // GPT-2's is 50256
  std::optional<std::int64_t> pad_token_id;  // fills finished sequences; default eos_token_id
  std::optional<std::uint64_t> seed;         // sampling: a Generator seeded with it (= torch.manual_seed(seed));
                                             // unset: the generator passed to generate (default_generator())
};

// Where a generate() call spent its time, for tokens/s figures: the prompt's forward pass (prefill), then
// the steps that each choose a token and feed it back through the KV cache (decode). A token chosen after
// the last forward is counted in new_tokens but needs no decode pass of its own.
struct GenerationTimings {
  index_t prompt_tokens = 0;  // per sequence
  double prompt_seconds = 0;
  index_t new_tokens = 0;     // per sequence
  index_t decode_passes = 0;  // forward passes after the prompt's
  double decode_seconds = 0;  // those passes and every token choice
};

// scores / temperature (TemperatureLogitsWarper). Throws std::invalid_argument unless temperature > 0.
template <floating_element T>
Tensor<T, 2> temperature_warp(const Tensor<T, 2>& scores, double temperature) {
  if (!(temperature > 0.0) || !std::isfinite(temperature))
    throw std::invalid_argument("temperature_warp: temperature must be a strictly positive float, got " +
                                std::to_string(temperature));
  return scores / temperature;  // in the element type: x / T(temperature), as PyTorch's float division
}

// Keeps, per row of scores (B, V), the entries >= the k-th largest; the others become -inf (TopKLogitsWarper).
// k is raised to min_tokens_to_keep and capped at V. Throws std::invalid_argument unless k > 0.
template <floating_element T>
Tensor<T, 2> top_k_filter(const Tensor<T, 2>& scores, index_t top_k, index_t min_tokens_to_keep = 1) {
  if (top_k <= 0) throw std::invalid_argument("top_k_filter: top_k must be a positive integer, got " + std::to_string(top_k));
  if (min_tokens_to_keep < 1)
    throw std::invalid_argument("top_k_filter: min_tokens_to_keep must be positive, got " + std::to_string(min_tokens_to_keep));
  auto out = scores.clone();
  const index_t b = out.shape()[0], v = out.shape()[1];
  if (v == 0) return out;
  const index_t k = std::min(std::max(top_k, min_tokens_to_keep), v);
  std::vector<T> row(static_cast<std::size_t>(v));
  for (index_t i = 0; i < b; ++i) {
    T* r = out.data() + i * v;
    std::copy(r, r + v, row.begin());
    // Descending with NaN first, as torch.topk ranks NaN highest (and a strict weak order even with NaN).
    std::nth_element(row.begin(), row.begin() + (k - 1), row.end(),
                     [](T a, T c) { return (std::isnan(a) && !std::isnan(c)) || a > c; });
    const T kth = row[static_cast<std::size_t>(k - 1)];
    for (index_t j = 0; j < v; ++j)
      if (r[j] < kth) r[j] = -std::numeric_limits<T>::infinity();
  }
  return out;
}

// Nucleus filtering per row of scores (B, V) (TopPLogitsWarper): see the top of this file. top_p 1 keeps all;
// top_p 0 keeps min_tokens_to_keep. Throws std::invalid_argument unless 0 <= top_p <= 1.
template <floating_element T>
Tensor<T, 2> top_p_filter(const Tensor<T, 2>& scores, double top_p, index_t min_tokens_to_keep = 1) {
  if (!(top_p >= 0.0 && top_p <= 1.0))
    throw std::invalid_argument("top_p_filter: top_p must be between 0 and 1, got " + std::to_string(top_p));
  if (min_tokens_to_keep < 1)
    throw std::invalid_argument("top_p_filter: min_tokens_to_keep must be positive, got " + std::to_string(min_tokens_to_keep));
  auto out = scores.clone();
  const index_t b = out.shape()[0], v = out.shape()[1];
  // The comparison is PyTorch's: a float tensor against the Python float 1 - top_p, rounded to the tensor's type.
  const T threshold = static_cast<T>(1.0 - top_p);
  std::vector<index_t> order(static_cast<std::size_t>(v));
  std::vector<std::pair<T, index_t>> keyed(static_cast<std::size_t>(v));
  auto sorted = Tensor<T, 1>::empty({v});
  for (index_t i = 0; i < b; ++i) {
    T* r = out.data() + i * v;
    // torch.sort(descending=False) on CPU is std::sort of (value, index) pairs comparing values (NaN last):
    // not stable, so tied scores come out in introsort's order. The same std::sort on the same pairs gives
    // the same order (with libstdc++, which PyTorch's Linux builds use), hence the same tied entries removed.
    for (index_t j = 0; j < v; ++j) keyed[static_cast<std::size_t>(j)] = {r[j], j};
    std::sort(keyed.begin(), keyed.end(), [](const std::pair<T, index_t>& a, const std::pair<T, index_t>& c) {
      return (!std::isnan(a.first) && std::isnan(c.first)) || a.first < c.first;
    });
    for (index_t j = 0; j < v; ++j) {
      order[static_cast<std::size_t>(j)] = keyed[static_cast<std::size_t>(j)].second;
      sorted(j) = keyed[static_cast<std::size_t>(j)].first;
    }
    const auto probs = softmax(sorted, 0);
    // torch.cumsum accumulates float in double on CPU and rounds each partial sum to the element type.
    double cum = 0;
    std::vector<index_t> remove;
    for (index_t j = 0; j + min_tokens_to_keep < v; ++j) {
      cum += static_cast<double>(probs(j));
      if (static_cast<T>(cum) <= threshold) remove.push_back(order[static_cast<std::size_t>(j)]);
    }
    for (const index_t j : remove) r[j] = -std::numeric_limits<T>::infinity();
  }
  return out;
}

// The warpers generate applies when sampling: temperature (if != 1), top-k (if > 0), top-p (if < 1).
template <floating_element T>
Tensor<T, 2> warp_logits(const Tensor<T, 2>& scores, const GenerationConfig& c) {
  Tensor<T, 2> s = scores;
  if (c.temperature != 1.0) s = temperature_warp(s, c.temperature);
  if (c.top_k != 0) s = top_k_filter(s, c.top_k);
  if (c.top_p < 1.0) s = top_p_filter(s, c.top_p);
  return s;
}

// One index per row of probs (B, V), as torch.multinomial(probs, 1) draws it on CPU (see the top of this
// file). Rows need not sum to 1. Throws std::invalid_argument for a negative, infinite or NaN entry, or a row
// summing to 0, naming the row.
template <floating_element T>
Tensor<std::int64_t, 1> sample_multinomial(const Tensor<T, 2>& probs, Generator& gen = default_generator()) {
  const auto p = probs.contiguous();
  const index_t b = p.shape()[0], v = p.shape()[1];
  for (index_t i = 0; i < b; ++i) {
    double total = 0;
    for (index_t j = 0; j < v; ++j) {
      const T x = p(i, j);
      if (!(x >= T(0)) || !std::isfinite(x))
        throw std::invalid_argument("sample_multinomial: probability " + std::to_string(x) + " at [" + std::to_string(i) +
                                    ", " + std::to_string(j) + "] is negative, infinite or NaN");
      total += x;
    }
    if (!(total > 0))
      throw std::invalid_argument("sample_multinomial: row " + std::to_string(i) + " of the probabilities sums to 0");
  }
  // All exponentials first, in row-major order (exponential_ over the whole tensor), then the race.
  auto e = Tensor<T, 2>::empty({b, v});
  for (index_t k = 0, n = b * v; k < n; ++k) e.data()[k] = static_cast<T>(-1.0 * std::log(1.0 - gen.uniform<double>()));
  auto out = Tensor<std::int64_t, 1>::empty({b});
  for (index_t i = 0; i < b; ++i) {
    index_t best = 0;
    T best_q = p(i, 0) / e(i, 0);
    for (index_t j = 1; j < v; ++j) {
      const T q = p(i, j) / e(i, j);
      if (q > best_q) {
        best_q = q;
        best = j;
      }
    }
    out(i) = best;
  }
  return out;
}

// The id of the largest entry of each row (the first among equal maxima), as torch.argmax.
template <floating_element T>
Tensor<std::int64_t, 1> greedy_next(const Tensor<T, 2>& scores) {
  return argmax(scores, -1);
}

// Generates up to config.max_new_tokens tokens after each prompt of input_ids (B, T), with the KV cache,
// and returns the prompts followed by the new tokens (B, T + n), as transformers' generate. Runs as
// inference whatever the model's mode. Sampling draws from a Generator seeded with config.seed if set,
// else from `gen`. Throws std::invalid_argument for an invalid config or when the prompt and the new tokens
// need more than n_positions positions (every token but the last new one passes through the model).
// `timings`, when given, receives where the time went.
template <CausalLM M>
Tensor<std::int64_t, 2> generate(const M& model, const Tensor<std::int64_t, 2>& input_ids,
                                 const GenerationConfig& config, Generator& gen = default_generator(),
                                 GenerationTimings* timings = nullptr) {
  const index_t b = input_ids.shape()[0], t = input_ids.shape()[1];
  const index_t n_positions = model.max_positions(), vocab = model.vocab_size();
  if (config.max_new_tokens < 0)
    throw std::invalid_argument("generate: max_new_tokens must be >= 0, got " + std::to_string(config.max_new_tokens));
  if (config.do_sample) {  // the warpers' own checks, up front rather than at the first step
    if (!(config.temperature > 0.0) || !std::isfinite(config.temperature))
      throw std::invalid_argument("generate: temperature must be a strictly positive float, got " +
                                  std::to_string(config.temperature));
    if (config.top_k < 0) throw std::invalid_argument("generate: top_k must be >= 0 (0 disables it), got " + std::to_string(config.top_k));
    if (!(config.top_p >= 0.0 && config.top_p <= 1.0))
      throw std::invalid_argument("generate: top_p must be between 0 and 1, got " + std::to_string(config.top_p));
  }
  for (const auto& [name, id] : {std::pair{"eos_token_id", config.eos_token_id}, std::pair{"pad_token_id", config.pad_token_id}})
    if (id && (*id < 0 || *id >= vocab))
      throw std::invalid_argument(std::string("generate: ") + name + " " + std::to_string(*id) +
                                  " is out of range for vocab_size " + std::to_string(vocab));
  if (t == 0 || b == 0)
    throw std::invalid_argument("generate: input_ids " + shape_string(input_ids.shape()) + " is empty (a prompt is needed)");
  const index_t needed = t + std::max<index_t>(config.max_new_tokens - 1, 0);
  if (needed > n_positions)
    throw std::invalid_argument("generate: a prompt of " + std::to_string(t) + " tokens and max_new_tokens " +
                                std::to_string(config.max_new_tokens) + " need " + std::to_string(needed) +
                                " positions, more than n_positions " + std::to_string(n_positions));
  std::optional<Generator> own;
  if (config.seed) own.emplace(*config.seed);
  Generator& g = own ? *own : gen;
  const std::optional<std::int64_t> pad = config.pad_token_id ? config.pad_token_id : config.eos_token_id;

  std::vector<std::vector<std::int64_t>> seqs(static_cast<std::size_t>(b));
  for (index_t i = 0; i < b; ++i)
    for (index_t j = 0; j < t; ++j) seqs[static_cast<std::size_t>(i)].push_back(input_ids(i, j));
  std::vector<bool> unfinished(static_cast<std::size_t>(b), true);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto cache = model.make_cache(b, needed);
  auto logits = model.forward(input_ids, cache, LogitsFor::last);  // (B, 1, V)
  const auto prefilled = Clock::now();
  index_t new_tokens = 0, passes = 0;
  for (index_t step = 0; step < config.max_new_tokens; ++step) {
    const auto scores = logits.select(1, logits.shape()[1] - 1).contiguous();  // (B, V)
    const auto next = config.do_sample ? sample_multinomial(softmax(warp_logits(scores, config), -1), g)
                                       : greedy_next(scores);
    auto fed = Tensor<std::int64_t, 2>::empty({b, 1});
    bool any_unfinished = false;
    for (index_t i = 0; i < b; ++i) {
      const auto ui = static_cast<std::size_t>(i);
      const std::int64_t id = unfinished[ui] || !pad ? next(i) : *pad;
      seqs[ui].push_back(id);
      fed(i, 0) = id;
      if (config.eos_token_id && id == *config.eos_token_id) unfinished[ui] = false;
      any_unfinished = any_unfinished || unfinished[ui];
    }
    ++new_tokens;
    if (!any_unfinished || step + 1 == config.max_new_tokens) break;
    logits = model.forward(fed, cache, LogitsFor::last);
    ++passes;
  }
  if (timings) {
    const auto done = Clock::now();
    *timings = {t, std::chrono::duration<double>(prefilled - start).count(), new_tokens, passes,
                std::chrono::duration<double>(done - prefilled).count()};
  }
  const index_t total = static_cast<index_t>(seqs[0].size());
  auto out = Tensor<std::int64_t, 2>::empty({b, total});
  for (index_t i = 0; i < b; ++i)
    std::copy(seqs[static_cast<std::size_t>(i)].begin(), seqs[static_cast<std::size_t>(i)].end(), out.data() + i * total);
  return out;
}

// One prompt: returns the prompt followed by the new tokens.
template <CausalLM M>
std::vector<std::int64_t> generate(const M& model, const std::vector<std::int64_t>& prompt,
                                   const GenerationConfig& config, Generator& gen = default_generator(),
                                   GenerationTimings* timings = nullptr) {
  auto ids = Tensor<std::int64_t, 2>::empty({1, static_cast<index_t>(prompt.size())});
  std::copy(prompt.begin(), prompt.end(), ids.data());
  return generate(model, ids, config, gen, timings).to_vector();
}

struct TokenProbability {
  std::int64_t id;
  double probability;
};

// The k most probable entries of softmax(logits) for one logits vector (V), most probable first (lower id
// first among equals). k is capped at V.
template <floating_element T>
std::vector<TokenProbability> top_tokens(const Tensor<T, 1>& logits, index_t k) {
  if (k < 0) throw std::invalid_argument("top_tokens: k must be >= 0, got " + std::to_string(k));
  const auto probs = softmax(logits.contiguous(), 0);
  const index_t v = probs.numel();
  std::vector<index_t> order(static_cast<std::size_t>(v));
  std::iota(order.begin(), order.end(), index_t{0});
  const auto kk = static_cast<std::size_t>(std::min(k, v));
  // Most probable first, lower id first among equals; NaN (from NaN logits) ranks first, as in torch.topk,
  // which also keeps the comparison a strict weak order.
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kk), order.end(),
                    [&probs](index_t a, index_t b) {
                      const T pa = probs(a), pb = probs(b);
                      if (std::isnan(pa) || std::isnan(pb)) return std::isnan(pa) && (!std::isnan(pb) || a < b);
                      return pa > pb || (pa == pb && a < b);
                    });
  std::vector<TokenProbability> out;
  for (std::size_t i = 0; i < kk; ++i) out.push_back({order[i], static_cast<double>(probs(order[i]))});
  return out;
}

// The next-token table after a prompt (the `--show-top K` listing): the k most probable next tokens and their
// probabilities under the model (no temperature or filtering). Runs as inference.
template <CausalLM M>
std::vector<TokenProbability> next_token_table(const M& model, const std::vector<std::int64_t>& prompt, index_t k) {
  const auto len = static_cast<index_t>(prompt.size());  // bad lengths are reported by forward
  auto cache = model.make_cache(1, std::clamp<index_t>(len, 1, model.max_positions()));
  auto ids = Tensor<std::int64_t, 2>::empty({1, len});
  std::copy(prompt.begin(), prompt.end(), ids.data());
  const auto logits = model.forward(ids, cache, LogitsFor::last);  // (1, 1, V)
  return top_tokens(logits.select(0, 0).select(0, 0), k);
}

}  // namespace eigenformer::models
