// From token ids to training batches: seed 000's classifier input (listings 1.24-1.27), a sliding-window
// dataset for next-token prediction (figures 1.246-1.247), and batching with PyTorch's shuffles. Every batch
// is a Tensor<std::int64_t, 2> of shape [batch, length].
//
//   auto gpt2 = GPT2Tokenizer::from_directory(dir / "gpt2");
//   ClassifierInput input(gpt2, 256);                 // PAD 50257, CLS 50258, SEP 50259, vocabulary 50260
//   auto [ids, mask] = input.encode_batch(texts);     // [B, 256] each
//
//   SlidingWindowDataset windows(ids, 256, 128);      // (input, target = input shifted by one) pairs
//   DataLoader loader(windows.size(), {.batch_size = 8, .shuffle = true});
//   manual_seed(123);
//   for (const auto& batch : loader.epoch()) { auto [x, y] = windows.batch(batch); ... }
//
// DataLoader reproduces torch.utils.data.DataLoader(..., shuffle=True) after torch.manual_seed, batch for
// batch, and consumes the same random numbers, so dropout masks drawn during training line up with PyTorch's
// too (tests/data/dataloader_reference.json, from tools/reference/tokenizers/dataloader_reference.py). In
// PyTorch 1.13 each epoch (each iter(loader)) first draws one int64 from the loader's generator (a base seed
// for worker processes, drawn even when shuffle=False); then a shuffled loader without generator= draws a
// second int64 from the global generator, seeds a fresh generator with it and takes randperm(n) from that,
// while a loader with generator=g takes randperm(n, g) and, when the epoch runs out, one more randperm(n, g)
// that it throws away. So the order is not torch.randperm(n) after manual_seed; shuffled_order() gives that
// simpler shuffle (one randperm from the generator, nothing else drawn).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eigenformer/random.hpp"

namespace eigenformer::tokenizers {

// Anything that turns text into ids and knows its vocabulary size: GPT2Tokenizer, BertTokenizer, CharTokenizer.
template <class T>
concept TextEncoder = requires(const T& t, std::string_view s) {
  { t.encode(s) } -> std::convertible_to<std::vector<std::int64_t>>;
  { t.vocab_size() } -> std::convertible_to<std::size_t>;
};

// ---------------------------------------------------------------------------------------------------
// Seed 000's BERT-style classifier input on GPT-2 ids
// ---------------------------------------------------------------------------------------------------

struct ClassifierBatch {
  Tensor<std::int64_t, 2> input_ids;       // [batch, max_len]
  Tensor<std::int64_t, 2> attention_mask;  // 1 where input_ids != pad_id
};

// Listings 1.25-1.27: the base tokenizer's vocabulary is extended by PAD_ID = base size, CLS_ID = base + 1,
// SEP_ID = base + 2 (50257, 50258, 50259 and 50260 in all for GPT-2); a text becomes
// [CLS] + its first max_len - 2 ids + [SEP], padded with PAD to max_len; the mask is (ids != PAD).
// Holds a reference to the tokenizer, which must outlive it.
template <TextEncoder Tokenizer>
class ClassifierInput {
 public:
  explicit ClassifierInput(const Tokenizer& tokenizer, std::size_t max_len = 256)
      : tokenizer_(&tokenizer),
        base_(static_cast<std::int64_t>(tokenizer.vocab_size())),
        max_len_(max_len) {
    if (max_len < 2) throw std::invalid_argument("ClassifierInput: max_len " + std::to_string(max_len) +
                                                 " leaves no room for [CLS] and [SEP]");
  }

  std::int64_t pad_id() const noexcept { return base_; }
  std::int64_t cls_id() const noexcept { return base_ + 1; }
  std::int64_t sep_id() const noexcept { return base_ + 2; }
  std::size_t vocab_size() const noexcept { return static_cast<std::size_t>(base_) + 3; }
  std::size_t max_len() const noexcept { return max_len_; }

  // Listing 1.26: exactly max_len ids.
  std::vector<std::int64_t> encode(std::string_view text) const {
    std::vector<std::int64_t> body = tokenizer_->encode(text);
    std::vector<std::int64_t> ids;
    ids.reserve(max_len_);
    ids.push_back(cls_id());
    ids.insert(ids.end(), body.begin(), body.begin() + static_cast<std::ptrdiff_t>(std::min(body.size(), max_len_ - 2)));
    ids.push_back(sep_id());
    ids.resize(max_len_, pad_id());
    return ids;
  }

  // Listing 1.27: 1 for every id that is not PAD, 0 for padding.
  std::vector<std::int64_t> attention_mask(std::span<const std::int64_t> ids) const {
    std::vector<std::int64_t> mask(ids.size());
    std::transform(ids.begin(), ids.end(), mask.begin(), [&](std::int64_t id) { return id != pad_id() ? 1 : 0; });
    return mask;
  }

  // Listing 1.28's (ids, mask) for several texts, stacked.
  ClassifierBatch encode_batch(std::span<const std::string> texts) const {
    const Shape<2> shape{static_cast<index_t>(texts.size()), static_cast<index_t>(max_len_)};
    ClassifierBatch out{Tensor<std::int64_t, 2>::empty(shape), Tensor<std::int64_t, 2>::empty(shape)};
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const auto ids = encode(texts[i]);
      std::copy(ids.begin(), ids.end(), out.input_ids.data() + i * max_len_);
      const auto mask = attention_mask(ids);
      std::copy(mask.begin(), mask.end(), out.attention_mask.data() + i * max_len_);
    }
    return out;
  }

 private:
  const Tokenizer* tokenizer_;
  std::int64_t base_;
  std::size_t max_len_;
};

// ---------------------------------------------------------------------------------------------------
// Sliding windows for next-token prediction
// ---------------------------------------------------------------------------------------------------

struct WindowBatch {
  Tensor<std::int64_t, 2> inputs;   // [batch, context_length]
  Tensor<std::int64_t, 2> targets;  // the same windows shifted one token to the right
};

// Figures 1.246-1.247: window i starts at i * stride and holds context_length ids; its target is the window
// one position further. Every window whose target fits is included: starts 0, stride, 2 * stride, ... below
// ids.size() - context_length (so size() = ceil((ids.size() - context_length) / stride), 0 for short input).
class SlidingWindowDataset {
 public:
  SlidingWindowDataset(std::vector<std::int64_t> ids, std::size_t context_length, std::size_t stride)
      : ids_(std::move(ids)), context_(context_length), stride_(stride) {
    if (context_length == 0) throw std::invalid_argument("SlidingWindowDataset: context_length must be positive");
    if (stride == 0) throw std::invalid_argument("SlidingWindowDataset: stride must be positive");
  }

  std::size_t size() const noexcept {
    return ids_.size() > context_ ? (ids_.size() - context_ + stride_ - 1) / stride_ : 0;
  }
  std::size_t context_length() const noexcept { return context_; }
  std::size_t stride() const noexcept { return stride_; }
  const std::vector<std::int64_t>& ids() const noexcept { return ids_; }

  // Window i as views into the ids: {input, target}.
  std::pair<std::span<const std::int64_t>, std::span<const std::int64_t>> operator[](std::size_t i) const {
    check(static_cast<std::int64_t>(i));
    const std::span<const std::int64_t> all(ids_);
    return {all.subspan(i * stride_, context_), all.subspan(i * stride_ + 1, context_)};
  }

  // Windows `indices` stacked into [indices.size(), context_length] tensors.
  WindowBatch batch(std::span<const std::int64_t> indices) const {
    const Shape<2> shape{static_cast<index_t>(indices.size()), static_cast<index_t>(context_)};
    WindowBatch out{Tensor<std::int64_t, 2>::empty(shape), Tensor<std::int64_t, 2>::empty(shape)};
    for (std::size_t row = 0; row < indices.size(); ++row) {
      check(indices[row]);
      const auto [input, target] = (*this)[static_cast<std::size_t>(indices[row])];
      std::copy(input.begin(), input.end(), out.inputs.data() + row * context_);
      std::copy(target.begin(), target.end(), out.targets.data() + row * context_);
    }
    return out;
  }

 private:
  void check(std::int64_t i) const {
    if (i < 0 || static_cast<std::uint64_t>(i) >= size())
      throw std::out_of_range("SlidingWindowDataset: window " + std::to_string(i) + " is outside [0, " +
                              std::to_string(size()) + ")");
  }

  std::vector<std::int64_t> ids_;
  std::size_t context_, stride_;
};

// ---------------------------------------------------------------------------------------------------
// Shuffling and batching
// ---------------------------------------------------------------------------------------------------

// One int64 as random_() on an int64 tensor draws it: 64 bits (two 32-bit draws, high word first) mod 2^63.
inline std::int64_t random_int64(Generator& gen = default_generator()) {
  return static_cast<std::int64_t>(gen.random64() & ((std::uint64_t{1} << 63) - 1));
}

// torch.randperm(n, generator=gen): a shuffle that draws nothing else.
inline std::vector<std::int64_t> shuffled_order(std::size_t n, Generator& gen = default_generator()) {
  return randperm(static_cast<index_t>(n), gen).to_vector();
}

// Consecutive slices of `order` of batch_size (the last one shorter, or dropped with drop_last).
inline std::vector<std::vector<std::int64_t>> make_batches(std::span<const std::int64_t> order,
                                                           std::size_t batch_size, bool drop_last = false) {
  if (batch_size == 0) throw std::invalid_argument("make_batches: batch_size must be positive");
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t start = 0; start < order.size(); start += batch_size) {
    const std::size_t end = std::min(order.size(), start + batch_size);
    if (drop_last && end - start < batch_size) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start), order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

// Index batches as torch.utils.data.DataLoader(range(size), batch_size, shuffle, drop_last, generator) yields
// them with num_workers=0, drawing the same random numbers (see the top of this file).
class DataLoader {
 public:
  struct Options {
    std::size_t batch_size = 1;
    bool shuffle = false;
    bool drop_last = false;
    Generator* generator = nullptr;  // DataLoader(generator=g); nullptr: PyTorch's global generator
  };

  DataLoader(std::size_t dataset_size, Options options) : size_(dataset_size), options_(options) {
    if (options.batch_size == 0) throw std::invalid_argument("DataLoader: batch_size must be positive");
    if (options.shuffle && dataset_size == 0)
      throw std::invalid_argument("DataLoader: shuffle needs a non-empty dataset (PyTorch's RandomSampler refuses "
                                  "num_samples=0)");
  }

  std::size_t size() const noexcept { return size_; }
  // Batches per epoch (len(loader)).
  std::size_t num_batches() const noexcept {
    return options_.drop_last ? size_ / options_.batch_size : (size_ + options_.batch_size - 1) / options_.batch_size;
  }

  // One full pass, as `for batch in loader` runs it; every call is a new epoch with a new order.
  std::vector<std::vector<std::int64_t>> epoch() const {
    Generator& gen = options_.generator ? *options_.generator : default_generator();
    random_int64(gen);  // _BaseDataLoaderIter's _base_seed
    std::vector<std::int64_t> order;
    if (!options_.shuffle) {
      order.resize(size_);
      for (std::size_t i = 0; i < size_; ++i) order[i] = static_cast<std::int64_t>(i);
    } else if (!options_.generator) {
      Generator sampler(static_cast<std::uint64_t>(random_int64(gen)));  // RandomSampler's own generator
      order = shuffled_order(size_, sampler);
    } else {
      order = shuffled_order(size_, gen);
      randperm(static_cast<index_t>(size_), gen);  // the sampler's empty tail randperm, drawn at exhaustion
    }
    return make_batches(order, options_.batch_size, options_.drop_last);
  }

 private:
  std::size_t size_;
  Options options_;
};

}  // namespace eigenformer::tokenizers
