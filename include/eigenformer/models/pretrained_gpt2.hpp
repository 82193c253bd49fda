// A Hugging Face GPT-2 directory in one call: the model (models/pretrained.hpp) and its tokenizer.
//
//   auto gpt2 = models::PretrainedGPT2<float>::from_pretrained("gpt2");   // config.json, model.safetensors,
//   auto ids = gpt2.tokenizer.encode("Hello, my dog");                     // vocab.json + merges.txt
//   auto out = models::generate(gpt2.model, ids, {});
//   std::cout << gpt2.tokenizer.decode(out);
//
// The tokenizer files are Hugging Face's vocab.json + merges.txt or OpenAI's encoder.json + vocab.bpe
// (tokenizers::GPT2Tokenizer::from_directory). A header of its own because the tokenizers need utf8proc:
// link eigenformer::tokenizers to use it; models/pretrained.hpp alone needs only eigenformer::eigenformer.
#pragma once

#include <filesystem>
#include <string>

#include "eigenformer/models/pretrained.hpp"
#include "eigenformer/tokenizers/gpt2.hpp"

namespace eigenformer::models {

// The model and the tokenizer of one directory, as transformers' pipeline("text-generation", model=dir)
// holds them.
template <floating_element T>
struct PretrainedGPT2 {
  GPT2LMHeadModel<T> model;
  tokenizers::GPT2Tokenizer tokenizer;

  // The model (gpt2_from_pretrained) and the tokenizer of `dir`. Throws io::checkpoint_error for the model
  // files, tokenizers::vocab_error for the vocabulary files, and io::checkpoint_error when the tokenizer
  // has more tokens than the model has embeddings (its ids could not all be fed to the model).
  static PretrainedGPT2 from_pretrained(const std::filesystem::path& dir, const PretrainedOptions& options = {}) {
    auto model = gpt2_from_pretrained<T>(dir, options);
    auto tokenizer = tokenizers::GPT2Tokenizer::from_directory(dir);
    // A smaller vocabulary is fine (models often pad vocab_size to a multiple of 64); a larger one is not.
    if (static_cast<index_t>(tokenizer.vocab_size()) > model.config().vocab_size)
      throw io::checkpoint_error(dir.string() + ": the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                                 " tokens but config.json's vocab_size is " + std::to_string(model.config().vocab_size) +
                                 "; the tokenizer files do not belong to this model");
    return PretrainedGPT2{std::move(model), std::move(tokenizer)};
  }
};

}  // namespace eigenformer::models
