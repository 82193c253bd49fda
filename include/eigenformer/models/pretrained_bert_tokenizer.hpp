// A Hugging Face BERT directory in one call: the model (models/pretrained_bert.hpp) and its tokenizer.
//
//   auto bert = models::PretrainedBert<models::BertForMaskedLM<float>>::from_pretrained("bert-base-uncased");
//   auto batch = bert.tokenizer.encode_batch(texts);        // vocab.txt (+ tokenizer_config.json)
//   auto logits = bert.model.forward(batch.input_ids, batch.attention_mask, batch.token_type_ids);
//
// The tokenizer is tokenizers::BertTokenizer from vocab.txt; do_lower_case comes from tokenizer_config.json
// when the directory has one (Hugging Face's default, true, otherwise). A header of its own because the
// tokenizers need utf8proc: link eigenformer::tokenizers to use it; models/pretrained_bert.hpp alone needs
// only eigenformer::eigenformer.
#pragma once

#include <filesystem>
#include <string>
#include <utility>

#include "eigenformer/models/pretrained_bert.hpp"
#include "eigenformer/tokenizers/wordpiece.hpp"

namespace eigenformer::models {

// tokenizer_config.json's do_lower_case: true when the file or the field is absent (BertTokenizer's
// default); io::checkpoint_error naming the file and the field when it is not a JSON object, the field not a
// boolean, or strip_accents / tokenize_chinese_chars ask for what the tokenizer does not do.
inline bool bert_do_lower_case(const std::filesystem::path& dir) {
  const auto path = dir / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return true;
  const auto j = detail::pretrained::read_json_file(path);
  if (!j.is_object())
    throw io::checkpoint_error(path.string() + ": expected a JSON object, got " + detail::pretrained::type_name(j));
  bool lower = true;
  if (j.contains("do_lower_case")) {
    const auto& v = j.at("do_lower_case");
    if (!v.is_boolean())
      throw io::checkpoint_error(path.string() + ": field \"do_lower_case\": expected true or false, got " +
                                 detail::pretrained::type_name(v));
    lower = v.get<bool>();
  }
  // BertTokenizer strips accents exactly when it lower-cases and always spaces CJK characters: settings
  // that ask otherwise would tokenize differently, so they are refused rather than ignored.
  if (j.contains("strip_accents") && !j.at("strip_accents").is_null()) {
    const auto& v = j.at("strip_accents");
    if (!v.is_boolean() || v.get<bool>() != lower)
      throw io::checkpoint_error(path.string() + ": field \"strip_accents\": " + detail::pretrained::type_name(v) +
                                 " is not supported (accents are stripped exactly when do_lower_case is true; use null)");
  }
  if (j.contains("tokenize_chinese_chars") && j.at("tokenize_chinese_chars") != true)
    throw io::checkpoint_error(path.string() + ": field \"tokenize_chinese_chars\": " +
                               detail::pretrained::type_name(j.at("tokenize_chinese_chars")) +
                               " is not supported (CJK characters are always split off)");
  return lower;
}

// The model and the tokenizer of one directory, as transformers' pipeline("fill-mask", model=dir) holds them.
template <bert_model_class Model>
struct PretrainedBert {
  Model model;
  tokenizers::BertTokenizer tokenizer;
  BertLoadReport report;  // what the model's load left out or initialised (bert_from_pretrained)

  // Throws io::checkpoint_error for the model files and tokenizer_config.json, tokenizers::vocab_error for
  // vocab.txt, and io::checkpoint_error when the vocabulary has more tokens than the model has embeddings.
  static PretrainedBert from_pretrained(const std::filesystem::path& dir, const PretrainedOptions& options = {}) {
    BertLoadReport report;
    auto model = bert_from_pretrained<Model>(dir, options, &report);
    const bool lower = bert_do_lower_case(dir);
    auto tokenizer = tokenizers::BertTokenizer::from_file(dir / "vocab.txt", lower);
    if (static_cast<index_t>(tokenizer.vocab_size()) > model.config().vocab_size)
      throw io::checkpoint_error((dir / "vocab.txt").string() + ": " + std::to_string(tokenizer.vocab_size()) +
                                 " tokens but config.json's vocab_size is " + std::to_string(model.config().vocab_size) +
                                 "; the vocabulary does not belong to this model");
    return PretrainedBert{std::move(model), std::move(tokenizer), std::move(report)};
  }
};

}  // namespace eigenformer::models
