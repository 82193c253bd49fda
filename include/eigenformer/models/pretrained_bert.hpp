// Hugging Face model directories for BERT: config.json + model.safetensors in, and out again.
//
//   auto mlm = models::bert_from_pretrained<models::BertForMaskedLM<float>>("bert-base-uncased");
//   models::BertLoadReport report;
//   auto clf = models::bert_from_pretrained<models::BertForSequenceClassification<float>>(dir, {}, &report);
//   if (!report.newly_initialized.empty()) std::cerr << report.warnings();   // e.g. the classifier is new
//   models::save_pretrained(clf, "my-bert");                                 // config.json + model.safetensors
//
// One function template for the three classes, bert_from_pretrained<Model>(dir, options, report), Model being
// BertModel<T>, BertForMaskedLM<T> or BertForSequenceClassification<T>: the class says which parts are
// wanted, as choosing AutoModel / AutoModelForMaskedLM / AutoModelForSequenceClassification does in
// transformers. Like models/pretrained.hpp (GPT-2) it needs no tokenizer; models/pretrained_bert_tokenizer.hpp
// adds the vocabulary (PretrainedBert<Model>).
//
// config.json (bert_config_from_file): Hugging Face's BertConfig names. vocab_size, hidden_size,
// num_hidden_layers, num_attention_heads, intermediate_size and max_position_embeddings are required; the
// others default to BertConfig's (= Hugging Face's) defaults. hidden_act must be a name nn::activation_kind
// knows (the error lists them); position_embedding_type other than "absolute", is_decoder true and
// add_cross_attention true are refused by name, as is a model_type other than "bert". classifier_dropout and
// pad_token_id may be null. The labels: id2label (an object with the keys "0" .. "n-1"), label2id (its
// inverse) and num_labels must agree; num_labels defaults to id2label's size, else 2. eigenformer's own
// "pre_layer_norm" (bool; save_pretrained writes it only when true) is read too — transformers ignores it, so
// such a directory computes something else there. Every other field (architectures, use_cache, ...) is ignored.
//
// model.safetensors (load_bert_state_dict):
//   * keys with the "bert." prefix (what BertForMaskedLM / BertForSequenceClassification save) or without it
//     (BertModel's), detected from the keys; LayerNorm parameters named "weight"/"bias" or, in the older
//     TensorFlow-converted files, "gamma"/"beta".
//   * buffers ("embeddings.position_ids", "embeddings.token_type_ids") are skipped.
//   * "cls.predictions.decoder.weight" is the tied word embeddings: absent, or equal to them (else the load
//     throws naming it); "cls.predictions.decoder.bias", when present, must equal "cls.predictions.bias".
//   * tensors of heads the model does not have (the pooler for BertForMaskedLM, "cls.*" for the classifier,
//     the NSP head "cls.seq_relationship.*", "classifier.*" for the others) are not loaded and are listed in
//     BertLoadReport::unused.
//   * a head the file lacks (the pooler, "cls.predictions.*", "classifier.*": e.g. a pre-trained checkpoint
//     loaded as a classifier) is initialised as Hugging Face's _init_weights does — weights
//     N(0, initializer_range) drawn from `gen` (default: current_generator()), biases 0, LayerNorm 1 / 0 —
//     and listed in BertLoadReport::newly_initialized; report.warnings() words it as transformers does.
//   * a missing embeddings / encoder tensor, or a tensor of no known part, throws io::checkpoint_error naming
//     the file and the tensors (strict, the default); with PretrainedOptions{.strict = false} they are listed
//     in the report and the parameters keep their initial values (zeros, LayerNorm 1 / 0).
//   * shapes are checked against the config before anything is read; F16, BF16, F32 and F64 convert to T;
//     each tensor is read straight into its parameter (io::load_state_dict).
// BertModel gets a pooler when the file has one (and config.add_pooling_layer is not false); the
// classifier always has one, as in transformers.
//
// Saving (save_pretrained): config.json with "architectures" (the class) and "model_type": "bert", then
// model.safetensors with Hugging Face's names (the tied decoder weight is not written, as transformers drops
// tied tensors), F32 for float and F64 for double; each file written atomically (temporary file + rename),
// the weights first.
//
// Every error is an io::checkpoint_error whose message starts with the file and names the field or tensor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "eigenformer/io/detail/atomic_file.hpp"
#include "eigenformer/io/error.hpp"
#include "eigenformer/io/safetensors.hpp"
#include "eigenformer/io/state_dict.hpp"
#include "eigenformer/models/bert.hpp"
#include "eigenformer/models/pretrained.hpp"
#include "eigenformer/random.hpp"

namespace eigenformer::models {

// The classes bert_from_pretrained builds, with the name config.json's "architectures" gives each.
template <class Model>
struct bert_architecture;
template <floating_element T>
struct bert_architecture<BertModel<T>> {
  static constexpr const char* name = "BertModel";
  using value_type = T;
};
template <floating_element T>
struct bert_architecture<BertForMaskedLM<T>> {
  static constexpr const char* name = "BertForMaskedLM";
  using value_type = T;
};
template <floating_element T>
struct bert_architecture<BertForSequenceClassification<T>> {
  static constexpr const char* name = "BertForSequenceClassification";
  using value_type = T;
};

template <class Model>
concept bert_model_class = requires { bert_architecture<Model>::name; };

// What a load did besides copying tensors one to one (transformers logs the same as warnings).
struct BertLoadReport {
  std::string file;          // the safetensors file
  std::string architecture;  // the class loaded, "BertForSequenceClassification"
  // Parameters (the model's names) of heads the file lacks, initialised N(0, initializer_range) / 0 / 1.
  std::vector<std::string> newly_initialized;
  // Checkpoint keys of heads the model does not have (pooler, cls.*, classifier.*): not loaded.
  std::vector<std::string> unused;
  // Checkpoint keys that are no parameters: buffers and the tied decoder's copies (checked, not loaded).
  std::vector<std::string> skipped;
  // Non-strict loads only: embeddings / encoder parameters not in the file (kept at their initial values)
  // and checkpoint keys of no known part.
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;

  // transformers' wording, one paragraph per kind of finding; empty when every parameter came from the file
  // and nothing but buffers was left over.
  std::string warnings() const {
    auto list = [](const std::vector<std::string>& names) {
      std::string s = "[";
      for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", '" : "'") + names[i] + "'";
      return s + "]";
    };
    std::string out;
    if (!unused.empty())
      out += "Some weights of the model checkpoint at " + file + " were not used when initializing " + architecture +
             ": " + list(unused) + "\n";
    if (!newly_initialized.empty())
      out += "Some weights of " + architecture + " were not initialized from the model checkpoint at " + file +
             " and are newly initialized: " + list(newly_initialized) + "\n";
    if (!missing.empty())
      out += "Some weights of " + architecture + " were not in the model checkpoint at " + file +
             " and keep their initial values (strict = false): " + list(missing) + "\n";
    if (!unexpected.empty())
      out += "Some tensors of the model checkpoint at " + file + " belong to no part of " + architecture +
             " and were ignored (strict = false): " + list(unexpected) + "\n";
    return out;
  }
};

namespace detail::pretrained_bert {

using nlohmann::json;
using detail::pretrained::ConfigReader;
using detail::pretrained::type_name;

inline index_t non_negative_int(const ConfigReader& r, const char* field) {
  const json& v = r.j().at(field);
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(std::numeric_limits<index_t>::max())) return static_cast<index_t>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i >= 0) return static_cast<index_t>(i);
  }
  r.fail(field, "expected a non-negative integer, got " + type_name(v));
}

// id2label / label2id / num_labels, checked against each other.
inline void read_labels(const ConfigReader& r, BertConfig& c) {
  const json& j = r.j();
  std::optional<index_t> num_labels;
  if (r.has("num_labels")) num_labels = r.positive_int("num_labels");
  std::vector<std::string> names;
  if (r.has("id2label")) {
    const json& v = j.at("id2label");
    if (!v.is_object()) r.fail("id2label", "expected an object {\"0\": \"LABEL\", ...}, got " + type_name(v));
    const std::size_t n = v.size();
    if (n == 0) r.fail("id2label", "is empty; a classifier needs at least one label");
    names.resize(n);
    for (const auto& [key, label] : v.items()) {
      std::size_t id = 0, used = 0;
      bool ok = !key.empty() && key.size() <= 9 && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      if (ok) {
        id = std::stoul(key, &used);
        ok = used == key.size() && id < n && (key == "0" || key[0] != '0');
      }
      if (!ok)
        r.fail("id2label", "key \"" + key + "\" is not a class id; expected the keys \"0\" to \"" + std::to_string(n - 1) +
                               "\", one per label");
      if (!label.is_string()) r.fail("id2label", "label of class " + key + " is " + type_name(label) + ", expected a string");
      names[id] = label.get<std::string>();
    }
    // n distinct canonical keys, each below n: every id 0 .. n-1 occurs exactly once.
  }
  if (r.has("label2id")) {
    const json& v = j.at("label2id");
    if (!v.is_object()) r.fail("label2id", "expected an object {\"LABEL\": 0, ...}, got " + type_name(v));
    if (names.empty()) {
      // Only label2id: id2label is its inverse.
      names.resize(v.size());
      for (const auto& [label, id] : v.items()) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= static_cast<std::int64_t>(v.size()) ||
            !names[static_cast<std::size_t>(id.get<std::int64_t>())].empty())
          r.fail("label2id", "\"" + label + "\" maps to " + type_name(id) + "; expected the ids 0 to " +
                                 std::to_string(v.size() - 1) + ", each once");
        names[static_cast<std::size_t>(id.get<std::int64_t>())] = label;
      }
    } else {
      if (v.size() != names.size())
        r.fail("label2id", "has " + std::to_string(v.size()) + " labels but id2label has " + std::to_string(names.size()));
      for (const auto& [label, id] : v.items()) {
        const bool ok = id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                        id.get<std::int64_t>() < static_cast<std::int64_t>(names.size()) &&
                        names[static_cast<std::size_t>(id.get<std::int64_t>())] == label;
        if (!ok)
          r.fail("label2id", "\"" + label + "\" maps to " + type_name(id) + ", which does not agree with id2label");
      }
    }
  }
  if (!names.empty()) {
    if (num_labels && *num_labels != static_cast<index_t>(names.size()))
      r.fail("num_labels", std::to_string(*num_labels) + " does not agree with the " + std::to_string(names.size()) +
                               " labels of id2label");
    c.num_labels = static_cast<index_t>(names.size());
    c.id2label = std::move(names);
  } else if (num_labels) {
    c.num_labels = *num_labels;
  }
}

// Hugging Face's names for the parts of a BERT checkpoint (after the "bert." prefix, if any).
inline bool is_buffer(const std::string& body) {
  return body == "embeddings.position_ids" || body == "embeddings.token_type_ids";
}

}  // namespace detail::pretrained_bert

// BertConfig from the parsed contents of a config.json; `file` starts the error messages.
inline BertConfig bert_config_from_json(const nlohmann::json& j, const std::string& file = "config.json") {
  using detail::pretrained::type_name;
  using nlohmann::json;
  if (!j.is_object()) throw io::checkpoint_error(file + ": expected a JSON object, got " + type_name(j));
  const detail::pretrained::ConfigReader r(j, file);
  if (r.has("model_type")) {
    const auto& v = j.at("model_type");
    if (!v.is_string() || v.get<std::string>() != "bert")
      r.fail("model_type", "expected \"bert\", got " + type_name(v) + " (this loader builds BERT only)");
  }
  BertConfig c;
  for (const char* field : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                            "max_position_embeddings"})
    if (!r.has(field)) r.fail(field, "missing (a BERT config.json always has it)");
  c.vocab_size = r.positive_int("vocab_size");
  c.hidden_size = r.positive_int("hidden_size");
  c.num_hidden_layers = r.positive_int("num_hidden_layers");
  c.num_attention_heads = r.positive_int("num_attention_heads");
  c.intermediate_size = r.positive_int("intermediate_size");
  c.max_position_embeddings = r.positive_int("max_position_embeddings");
  if (r.has("type_vocab_size")) c.type_vocab_size = r.positive_int("type_vocab_size");
  c.hidden_act = r.activation("hidden_act", c.hidden_act);
  c.hidden_dropout_prob = r.number("hidden_dropout_prob", c.hidden_dropout_prob);
  c.attention_probs_dropout_prob = r.number("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  if (r.has("classifier_dropout") && !j.at("classifier_dropout").is_null())
    c.classifier_dropout = r.number("classifier_dropout", 0.0);
  c.initializer_range = r.number("initializer_range", c.initializer_range);
  c.layer_norm_eps = r.number("layer_norm_eps", c.layer_norm_eps);
  if (r.has("pad_token_id"))
    c.pad_token_id = j.at("pad_token_id").is_null() ? std::nullopt
                                                    : std::optional<index_t>(detail::pretrained_bert::non_negative_int(r, "pad_token_id"));
  if (r.has("position_embedding_type")) {
    const auto& v = j.at("position_embedding_type");
    if (!v.is_string() || v.get<std::string>() != "absolute")
      r.fail("position_embedding_type", "got " + type_name(v) +
                                            "; only \"absolute\" (learned positions added to the tokens) is supported");
  }
  r.require_bool("is_decoder", false,
                 "true is not supported (BERT here is an encoder; a decoder needs causal attention and a cache)");
  r.require_bool("add_cross_attention", false, "true is not supported (no cross-attention layers in this encoder)");
  if (r.has("pre_layer_norm")) {
    const auto& v = j.at("pre_layer_norm");
    if (!v.is_boolean()) r.fail("pre_layer_norm", "expected true or false, got " + type_name(v));
    c.pre_layer_norm = v.get<bool>();
  }
  if (r.has("add_pooling_layer")) {
    const auto& v = j.at("add_pooling_layer");
    if (!v.is_boolean()) r.fail("add_pooling_layer", "expected true or false, got " + type_name(v));
    c.add_pooling_layer = v.get<bool>();
  }
  detail::pretrained_bert::read_labels(r, c);
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw io::checkpoint_error(file + ": " + e.what());
  }
  return c;
}

// BertConfig from a config.json file (a directory's is bert_config_from_file(dir / "config.json")).
inline BertConfig bert_config_from_file(const std::filesystem::path& path) {
  return bert_config_from_json(detail::pretrained::read_json_file(path), path.string());
}

// The config.json contents save_pretrained writes: Hugging Face's BertConfig layout, keys sorted.
inline nlohmann::json bert_config_to_json(const BertConfig& c, const std::string& architecture = "BertModel",
                                          const std::string& torch_dtype = "float32") {
  nlohmann::json j;
  j["architectures"] = nlohmann::json::array({architecture});
  j["attention_probs_dropout_prob"] = c.attention_probs_dropout_prob;
  j["classifier_dropout"] = c.classifier_dropout ? nlohmann::json(*c.classifier_dropout) : nlohmann::json(nullptr);
  j["hidden_act"] = c.hidden_act;
  j["hidden_dropout_prob"] = c.hidden_dropout_prob;
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = c.initializer_range;
  j["intermediate_size"] = c.intermediate_size;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["model_type"] = "bert";
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["pad_token_id"] = c.pad_token_id ? nlohmann::json(*c.pad_token_id) : nlohmann::json(nullptr);
  j["position_embedding_type"] = c.position_embedding_type;
  j["torch_dtype"] = torch_dtype;
  j["type_vocab_size"] = c.type_vocab_size;
  j["vocab_size"] = c.vocab_size;
  if (!c.id2label.empty()) {
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (index_t i = 0; i < c.num_labels; ++i) {
      id2label[std::to_string(i)] = c.label(i);
      label2id[c.label(i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  } else if (c.num_labels != 2) {
    j["num_labels"] = c.num_labels;
  }
  if (c.pre_layer_norm) j["pre_layer_norm"] = true;  // eigenformer's own; transformers does not know it
  if (!c.add_pooling_layer && architecture == "BertForSequenceClassification") j["add_pooling_layer"] = false;
  return j;
}

namespace detail::pretrained_bert {

inline bool is_head(const std::string& body_or_name) {
  return body_or_name.starts_with("pooler.") || body_or_name.starts_with("cls.") ||
         body_or_name.starts_with("classifier.");
}

inline std::string quoted(const std::vector<std::string>& names, std::size_t at_most = 6) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < at_most; ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
  if (names.size() > at_most) s += " and " + std::to_string(names.size() - at_most) + " more";
  return s;
}

// Throws unless tensors `a` and `b` of the file hold the same values (compared as doubles, piece by piece).
inline void require_equal(const io::SafeTensorsFile& file, const std::string& a, const std::string& b,
                          const std::string& why) {
  const std::string what = file.source() + ": tensor \"" + a + "\" ";
  if (!file.contains(b)) throw io::checkpoint_error(what + "is present but \"" + b + "\" is not (" + why + ")");
  const auto& ai = file.info(a);
  const auto& bi = file.info(b);
  if (ai.shape != bi.shape)
    throw io::checkpoint_error(what + "has shape " + shape_string(ai.shape) + " but \"" + b + "\" has " +
                               shape_string(bi.shape) + " (" + why + ")");
  if (!io::is_floating(ai.dtype) || !io::is_floating(bi.dtype))
    throw io::checkpoint_error(what + "or \"" + b + "\" has a dtype that is not floating");
  const index_t n = ai.numel();
  constexpr index_t piece = index_t{1} << 16;
  std::vector<double> x(static_cast<std::size_t>(std::min(n, piece))), y(x.size());
  for (index_t at = 0; at < n; at += piece) {
    const auto m = static_cast<std::size_t>(std::min(piece, n - at));
    file.read_elements(a, at, std::span<double>(x.data(), m));
    file.read_elements(b, at, std::span<double>(y.data(), m));
    for (std::size_t k = 0; k < m; ++k)
      if (!(x[k] == y[k] || (std::isnan(x[k]) && std::isnan(y[k]))))
        throw io::checkpoint_error(what + "differs from \"" + b + "\" (first at element " +
                                   std::to_string(at + static_cast<index_t>(k)) + ": " + std::to_string(x[k]) + " vs " +
                                   std::to_string(y[k]) + "); " + why + ", so another value cannot be loaded");
  }
}

}  // namespace detail::pretrained_bert

// Reads a BERT safetensors file into `model` (see the top of this file for the key mapping and what is
// reported). Every key and shape is checked before anything is read. Heads the file lacks are initialised
// from `gen`.
template <bert_model_class Model>
BertLoadReport load_bert_state_dict(Model& model, const io::SafeTensorsFile& file, const PretrainedOptions& options = {},
                                    Generator& gen = current_generator()) {
  using T = typename bert_architecture<Model>::value_type;
  namespace d = detail::pretrained_bert;
  constexpr bool is_mlm = std::is_same_v<Model, BertForMaskedLM<T>>;
  constexpr bool bare = std::is_same_v<Model, BertModel<T>>;  // our names have no "bert." prefix
  if constexpr (!std::is_same_v<T, float>)
    if (options.bf16_weights || options.pack_weights)
      throw std::invalid_argument(std::string("load_bert_state_dict: ") +
                                  (options.bf16_weights ? "bf16_weights" : "pack_weights") +
                                  " needs a float model; this one holds double");
  if (options.bf16_weights && options.pack_weights)
    throw std::invalid_argument("load_bert_state_dict: bf16_weights and pack_weights both ask for the only copy of the "
                                "weights; choose one");
  BertLoadReport report;
  report.file = file.source();
  report.architecture = bert_architecture<Model>::name;

  const auto keys = file.names();
  const bool prefixed = std::any_of(keys.begin(), keys.end(), [](const std::string& k) { return k.starts_with("bert."); });
  const std::string prefix = prefixed ? "bert." : "";

  // Our parameter name -> the file's key: the prefix as the file has it, gamma/beta where the file uses them.
  auto key_of = [&](const std::string& name) {
    std::string key;
    if (bare) key = prefix + name;
    else if (name.starts_with("bert.")) key = prefix + name.substr(5);
    else key = name;  // cls.*, classifier.*: never prefixed
    if (!file.contains(key)) {
      if (key.ends_with(".LayerNorm.weight")) {
        const std::string old = key.substr(0, key.size() - 6) + "gamma";
        if (file.contains(old)) return old;
      } else if (key.ends_with(".LayerNorm.bias")) {
        const std::string old = key.substr(0, key.size() - 4) + "beta";
        if (file.contains(old)) return old;
      }
    }
    return key;
  };
  // The part of a name a head test looks at: without our "bert." prefix.
  auto body_of_name = [&](const std::string& name) { return !bare && name.starts_with("bert.") ? name.substr(5) : name; };

  std::set<std::string> used;
  std::vector<std::string> missing_body, new_heads;
  for (auto& p : model.named_parameters()) {
    const std::string key = key_of(p.name);
    if (file.contains(key)) {
      used.insert(key);
    } else if (d::is_head(body_of_name(p.name))) {
      new_heads.push_back(p.name);
    } else {
      missing_body.push_back(key);
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& key : keys) {
    if (used.count(key)) continue;
    const std::string body = key.starts_with(prefix) ? key.substr(prefix.size()) : key;
    if (d::is_buffer(body)) {
      report.skipped.push_back(key);
    } else if (is_mlm && (key == "cls.predictions.decoder.weight" || key == "cls.predictions.decoder.bias")) {
      if (key == "cls.predictions.decoder.weight")
        d::require_equal(file, key, prefix + "embeddings.word_embeddings.weight",
                         "BertForMaskedLM ties the decoder to the word embeddings");
      else
        d::require_equal(file, key, "cls.predictions.bias", "the decoder's bias is cls.predictions.bias");
      report.skipped.push_back(key);
    } else if (d::is_head(body) || d::is_head(key)) {
      report.unused.push_back(key);
    } else {
      unexpected.push_back(key);
    }
  }
  if (options.strict && (!missing_body.empty() || !unexpected.empty())) {
    std::string msg = file.source() + ": ";
    if (!missing_body.empty())
      msg += std::string(missing_body.size() == 1 ? "tensor " : std::to_string(missing_body.size()) + " tensors: ") +
             d::quoted(missing_body) + (missing_body.size() == 1 ? " is" : " are") + " missing (" + report.architecture +
             " needs every embeddings and encoder tensor)";
    if (!unexpected.empty())
      msg += std::string(missing_body.empty() ? "" : "; ") + "the file has " +
             (unexpected.size() == 1 ? "an unexpected tensor " : std::to_string(unexpected.size()) + " unexpected tensors ") +
             d::quoted(unexpected) + " that belongs to no part of " + report.architecture;
    throw io::checkpoint_error(msg);
  }

  io::LoadOptions lo;
  lo.strict = false;  // presence was checked above; load_state_dict checks shapes and dtypes
  lo.rename = key_of;
  lo.ignore = [](const std::string&) { return true; };
  // bfloat16 storage: each weight matrix converted as soon as it is read (see PretrainedOptions::bf16_weights).
  std::unordered_map<std::string, nn::Linear<T>*> linear_by_weight;
  if constexpr (std::is_same_v<T, float>) {
    if (options.bf16_weights) {
      nn::Embedding<T>* words = nullptr;
      if constexpr (bare) words = &model.embeddings.word_embeddings;
      else words = &model.bert.embeddings.word_embeddings;
      for (auto& [name, module] : model.named_modules())
        if (auto* linear = dynamic_cast<nn::Linear<T>*>(module)) linear_by_weight.emplace(name + ".weight", linear);
      const std::string words_name = bare ? "embeddings.word_embeddings.weight" : "bert.embeddings.word_embeddings.weight";
      lo.loaded = [&linear_by_weight, words, words_name](const std::string& name) {
        if (name == words_name) words->to_bf16_weights(FloatWeights::release);
        else if (const auto found = linear_by_weight.find(name); found != linear_by_weight.end())
          found->second->to_bf16_weights(FloatWeights::release);
      };
    } else if (options.pack_weights) {
      // Packed as read, but for query, key and value, which are packed side by side once all three are in
      // (model.pack_weights below), and a masked-LM model's word embeddings, whose only copy its decoder then holds.
      for (auto& [name, module] : model.named_modules())
        if (auto* linear = dynamic_cast<nn::Linear<T>*>(module))
          if (!name.ends_with(".self.query") && !name.ends_with(".self.key") && !name.ends_with(".self.value"))
            linear_by_weight.emplace(name + ".weight", linear);
      lo.loaded = [&](const std::string& name) {
        if constexpr (is_mlm)
          if (name == "bert.embeddings.word_embeddings.weight") return model.pack_tied_decoder(FloatWeights::release);
        if (const auto found = linear_by_weight.find(name); found != linear_by_weight.end())
          found->second->pack_weights(FloatWeights::release);
      };
    }
  }
  (void)io::load_state_dict(model, file, lo);

  // Heads the file lacks: Hugging Face's _init_weights.
  if (!new_heads.empty()) {
    const std::set<std::string> fresh(new_heads.begin(), new_heads.end());
    const double range = model.config().initializer_range;
    for (auto& p : model.named_parameters()) {
      if (!fresh.count(p.name)) continue;
      const bool layer_norm = p.name.find("LayerNorm.") != std::string::npos;
      const bool is_bias = p.name.ends_with(".bias") || p.name == "bias";
      if (layer_norm) p.data.fill_(is_bias ? T(0) : T(1));
      else if (is_bias) p.data.fill_(T(0));
      else normal_(p.data, 0.0, range, gen);
    }
  }
  // The weights the file lacked (a new classifier), the tied decoder and the side-by-side packed copies.
  if constexpr (std::is_same_v<T, float>) {
    if (options.bf16_weights) model.to_bf16_weights(FloatWeights::release);
    if (options.pack_weights) model.pack_weights(FloatWeights::release);
  }
  report.newly_initialized = std::move(new_heads);
  if (!options.strict) {
    report.missing = std::move(missing_body);
    report.unexpected = std::move(unexpected);
  }
  return report;
}

namespace detail::pretrained_bert {

inline void require_model_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw io::checkpoint_error(dir.string() + ": " +
                               (std::filesystem::exists(dir, ec) ? "not a directory" : "no such directory") +
                               " (expected a Hugging Face model directory with config.json and model.safetensors)");
}

inline io::SafeTensorsFile open_weights(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto weights = dir / "model.safetensors";
  if (!std::filesystem::exists(weights, ec)) {
    std::string hint;
    if (std::filesystem::exists(dir / "model.safetensors.index.json", ec))
      hint = " (the checkpoint is sharded: model.safetensors.index.json; only a single model.safetensors is read)";
    else if (std::filesystem::exists(dir / "pytorch_model.bin", ec))
      hint = " (only pytorch_model.bin, a pickle, is there; download model.safetensors instead)";
    else if (std::filesystem::exists(dir / "tf_model.h5", ec))
      hint = " (only tf_model.h5, a TensorFlow file, is there; download model.safetensors instead)";
    throw io::checkpoint_error(weights.string() + ": no such file" + hint);
  }
  return io::SafeTensorsFile::from_file(weights);
}

}  // namespace detail::pretrained_bert

// A Model (BertModel<T>, BertForMaskedLM<T> or BertForSequenceClassification<T>) from a Hugging Face model
// directory (config.json + model.safetensors), in eval mode. `report`, when given, receives what the load
// left out or initialised (BertLoadReport; report->warnings() is transformers' log text). Heads the file
// lacks are drawn from current_generator().
template <bert_model_class Model>
Model bert_from_pretrained(const std::filesystem::path& dir, const PretrainedOptions& options = {},
                           BertLoadReport* report = nullptr) {
  using T = typename bert_architecture<Model>::value_type;
  detail::pretrained_bert::require_model_dir(dir);
  BertConfig config = bert_config_from_file(dir / "config.json");
  // The header first: a malformed file is refused before the model's memory is allocated.
  const auto file = detail::pretrained_bert::open_weights(dir);
  if constexpr (std::is_same_v<Model, BertModel<T>>) {
    const auto keys = file.names();
    const bool has_pooler = std::any_of(keys.begin(), keys.end(), [](const std::string& k) {
      return k.starts_with("pooler.") || k.starts_with("bert.pooler.");
    });
    config.add_pooling_layer = config.add_pooling_layer && has_pooler;
  }
  Model model(config, no_init);
  auto r = load_bert_state_dict(model, file, options);
  model.eval();
  if (report) *report = std::move(r);
  return model;
}

// Writes `model` to `dir` (created if needed) as config.json + model.safetensors (see the top of this file),
// the weights first, so an interrupted save never leaves a new config.json describing old weights.
template <bert_model_class Model>
void save_pretrained(Model& model, const std::filesystem::path& dir) {
  using T = typename bert_architecture<Model>::value_type;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw io::checkpoint_error(dir.string() + ": cannot create the directory" + (ec ? ": " + ec.message() : ""));
  io::save_model(model, dir / "model.safetensors");
  const std::string text = bert_config_to_json(model.config(), bert_architecture<Model>::name,
                                               std::is_same_v<T, float> ? "float32" : "float64")
                               .dump(2) +
                           "\n";
  io::detail::AtomicFile out(dir / "config.json");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace eigenformer::models
