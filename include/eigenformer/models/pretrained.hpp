// Hugging Face model directories for GPT-2: config.json + model.safetensors in, and out again.
//
//   auto model = models::gpt2_from_pretrained<float>("gpt2");  // a snapshot of openai-community/gpt2
//   models::save_pretrained(model, "my-gpt2");                 // config.json + model.safetensors
//
// Names follow transformers: *_from_pretrained(dir) reads a model directory, *_from_file(path) one file
// (gpt2_config_from_file; io::SafeTensorsFile::from_file), save_pretrained(model, dir) writes a directory,
// and options come as a struct (PretrainedOptions), like from_pretrained's keyword arguments. Free
// functions rather than GPT2LMHeadModel::from_pretrained, so that models/gpt2.hpp stays free of the JSON
// and file code and a model can be built without them.
//
// Loading (gpt2_from_pretrained; load_gpt2_state_dict for the weights of an open file):
//   * config.json: Hugging Face's GPT2Config fields. vocab_size, n_embd, n_layer, n_head and n_positions
//     (or the older n_ctx) are required; n_inner (null = 4 n_embd), activation_function (a name
//     nn::activation_kind knows: gelu_new, gelu_pytorch_tanh, gelu, relu), the dropouts,
//     layer_norm_epsilon and initializer_range default to GPT2Config's defaults, which are Hugging Face's.
//     Fields that would change the computation in ways this model does not implement are refused rather
//     than silently ignored: scale_attn_weights false, scale_attn_by_inverse_layer_idx true, a model_type
//     other than "gpt2". Every other field (bos/eos ids, summary_*, task_specific_params, ...) is ignored.
//   * model.safetensors: keys with the "transformer." prefix (what GPT2LMHeadModel.save_pretrained writes)
//     or without it (the official gpt2 files, saved from GPT2Model); the prefix is detected from the keys.
//     The causal-mask buffers "h.{i}.attn.bias" and "h.{i}.attn.masked_bias" are not parameters and are
//     skipped. "lm_head.weight", when present, must equal wte (the head is tied), else the load throws.
//     F16, BF16, F32 and F64 tensors convert to T. Conv1D weights are stored (in, out), as our model keeps
//     them, so nothing is transposed.
//     Every key and shape is checked against the header first; then each tensor is read straight into its
//     parameter's storage (io::load_state_dict), so loading needs the model's memory and no copy of the file.
//   * strict (the default): a missing or unexpected tensor throws io::checkpoint_error listing all of them.
// Every error is an io::checkpoint_error whose message starts with the file and names the field or tensor.
//
// Saving (save_pretrained): config.json in Hugging Face's layout ("architectures": ["GPT2LMHeadModel"],
// "model_type": "gpt2", the GPT2Config fields) and model.safetensors with our parameter names, which are
// GPT2LMHeadModel.save_pretrained's ("transformer.wte.weight", ...; no lm_head.weight, as transformers drops
// tied tensors), dtype F32 for float and F64 for double, metadata {"format": "pt"}. Each file is written
// atomically (temporary file + rename). Loading what was saved gives the same bits and the same config.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "eigenformer/io/detail/atomic_file.hpp"
#include "eigenformer/io/error.hpp"
#include "eigenformer/io/safetensors.hpp"
#include "eigenformer/io/state_dict.hpp"
#include "eigenformer/models/gpt2.hpp"

namespace eigenformer::models {

// How gpt2_from_pretrained (and PretrainedGPT2::from_pretrained) build the model; transformers'
// from_pretrained keyword arguments, as a struct: `models::gpt2_from_pretrained<float>(dir, {.strict = false})`.
struct PretrainedOptions {
  // Missing or unexpected tensors throw (listing them) when true; when false they are skipped and the
  // parameters not in the file keep their initial values (zero weights, LayerNorm 1 / 0).
  bool strict = true;
  // Hold the weight matrices (GPT-2: every Conv1D weight and the tied wte; BERT: every Linear weight and the
  // word embeddings) only as bfloat16, as to_bf16_weights(FloatWeights::release) does (tensor/bf16.hpp),
  // converting each as it is read, so that memory never holds the float model (the peak is about the
  // bfloat16 model plus one float tensor, the token embeddings: 154 MB for GPT-2 small, 94 MB for
  // bert-base-uncased). The model then serves inference only. transformers' torch_dtype=torch.bfloat16, with
  // float arithmetic.
  bool bf16_weights = false;
  // Hold the weight matrices only in the packed kernel's order, float32, as pack_weights(FloatWeights::release)
  // does (tensor/packed_matrix.hpp): the packed products in the float model's memory, inference only. GPT-2
  // packs each matrix as it is read (its wte with the tied head's copy, which the lookups then read), so that
  // memory never holds the float model and a packed copy of its largest matrix at once; BERT too, but for
  // query, key and value, packed side by side once loaded. Not with bf16_weights.
  bool pack_weights = false;
  // (No generator: a model draws its dropout masks from eigenformer::current_generator() while it runs, so
  // training with a generator of one's own is a GeneratorGuard around the forward, not a loading option.)
};

namespace detail::pretrained {

using nlohmann::json;

inline std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer() || v.is_number_unsigned() || v.is_number_float()) return "the number " + v.dump();
  if (v.is_string()) return "the string " + v.dump();
  if (v.is_array()) return "an array";
  return "an object";
}

// Reads config field by field so that every error names the file and the field.
class ConfigReader {
 public:
  ConfigReader(const json& j, std::string file) : j_(j), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw io::checkpoint_error(file_ + ": field \"" + field + "\": " + what);
  }

  bool has(const char* field) const { return j_.contains(field); }

  index_t positive_int(const char* field) const {
    const json& v = j_.at(field);
    // Integers only: 768.0 is rejected rather than truncated, as is anything beyond index_t.
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > 0 && u <= static_cast<std::uint64_t>(std::numeric_limits<index_t>::max())) return static_cast<index_t>(u);
    } else if (v.is_number_integer()) {
      const auto i = v.get<std::int64_t>();
      if (i > 0) return static_cast<index_t>(i);
    }
    fail(field, "expected a positive integer, got " + type_name(v));
  }

  double number(const char* field, double fallback) const {
    if (!j_.contains(field)) return fallback;
    const json& v = j_.at(field);
    if (!v.is_number()) fail(field, "expected a number, got " + type_name(v));
    return v.get<double>();
  }

  // An activation name nn::activation_kind knows (the error lists them), or `fallback` when absent.
  std::string activation(const char* field, const std::string& fallback) const {
    if (!j_.contains(field)) return fallback;
    const json& v = j_.at(field);
    if (!v.is_string()) fail(field, "expected a string, got " + type_name(v));
    const auto name = v.get<std::string>();
    try {
      (void)nn::activation_kind(name);
    } catch (const std::invalid_argument& e) {
      fail(field, e.what());
    }
    return name;
  }

  // A boolean field that must have the value `supported` (absent means `supported`, Hugging Face's default).
  void require_bool(const char* field, bool supported, const std::string& why) const {
    if (!j_.contains(field)) return;
    const json& v = j_.at(field);
    if (!v.is_boolean()) fail(field, "expected true or false, got " + type_name(v));
    if (v.get<bool>() != supported) fail(field, why);
  }

  const json& j() const { return j_; }
  const std::string& file() const { return file_; }

 private:
  const json& j_;
  std::string file_;
};

inline json read_json_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw io::checkpoint_error(path.string() + ": " +
                               (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io::checkpoint_error(path.string() + ": cannot open the file");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw io::checkpoint_error(path.string() + ": read error");
  try {
    return json::parse(buf.str());
  } catch (const json::exception& e) {
    throw io::checkpoint_error(path.string() + ": not valid JSON: " + e.what());
  }
}

inline bool is_mask_buffer(const std::string& key) {
  // GPT2Attention's registered buffers: the causal mask (bias) and the fill value (masked_bias). The char
  // before "attn" is a '.', so "h.0.attn.c_attn.bias" does not match.
  return key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias");
}

}  // namespace detail::pretrained

// GPT2Config from the parsed contents of a config.json; `file` starts the error messages.
inline GPT2Config gpt2_config_from_json(const nlohmann::json& j, const std::string& file = "config.json") {
  using detail::pretrained::type_name;
  if (!j.is_object()) throw io::checkpoint_error(file + ": expected a JSON object, got " + type_name(j));
  const detail::pretrained::ConfigReader r(j, file);
  if (r.has("model_type")) {
    const auto& v = j.at("model_type");
    if (!v.is_string() || v.get<std::string>() != "gpt2")
      r.fail("model_type", "expected \"gpt2\", got " + type_name(v) + " (this loader builds GPT-2 only)");
  }
  GPT2Config c;
  for (const char* field : {"vocab_size", "n_embd", "n_layer", "n_head"})
    if (!r.has(field)) r.fail(field, "missing (a GPT-2 config.json always has it)");
  c.vocab_size = r.positive_int("vocab_size");
  c.n_embd = r.positive_int("n_embd");
  c.n_layer = r.positive_int("n_layer");
  c.n_head = r.positive_int("n_head");
  // n_ctx is the name configs written before transformers 4 used; Hugging Face reads n_positions.
  if (r.has("n_positions")) c.n_positions = r.positive_int("n_positions");
  else if (r.has("n_ctx")) c.n_positions = r.positive_int("n_ctx");
  else r.fail("n_positions", "missing (the number of learned positions; older files call it n_ctx)");
  if (r.has("n_inner") && !j.at("n_inner").is_null()) c.n_inner = r.positive_int("n_inner");
  c.activation_function = r.activation("activation_function", c.activation_function);
  c.resid_pdrop = r.number("resid_pdrop", c.resid_pdrop);
  c.embd_pdrop = r.number("embd_pdrop", c.embd_pdrop);
  c.attn_pdrop = r.number("attn_pdrop", c.attn_pdrop);
  c.layer_norm_epsilon = r.number("layer_norm_epsilon", c.layer_norm_epsilon);
  c.initializer_range = r.number("initializer_range", c.initializer_range);
  r.require_bool("scale_attn_weights", true,
                 "false (unscaled attention scores) is not supported: GPT2LMHeadModel divides by sqrt(head_dim)");
  r.require_bool("scale_attn_by_inverse_layer_idx", false,
                 "true (scores also divided by layer_idx + 1) is not supported by GPT2LMHeadModel");
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw io::checkpoint_error(file + ": " + e.what());
  }
  return c;
}

// GPT2Config from a config.json file (a directory's is gpt2_config_from_file(dir / "config.json")).
inline GPT2Config gpt2_config_from_file(const std::filesystem::path& path) {
  return gpt2_config_from_json(detail::pretrained::read_json_file(path), path.string());
}

// The config.json contents save_pretrained writes: Hugging Face's GPT2Config layout (keys sorted, as
// transformers writes them).
inline nlohmann::json gpt2_config_to_json(const GPT2Config& c, const std::string& torch_dtype = "float32") {
  nlohmann::json j;
  j["activation_function"] = c.activation_function;
  j["architectures"] = nlohmann::json::array({"GPT2LMHeadModel"});
  j["attn_pdrop"] = c.attn_pdrop;
  j["embd_pdrop"] = c.embd_pdrop;
  j["initializer_range"] = c.initializer_range;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["model_type"] = "gpt2";
  j["n_embd"] = c.n_embd;
  j["n_head"] = c.n_head;
  j["n_inner"] = c.n_inner > 0 ? nlohmann::json(c.n_inner) : nlohmann::json(nullptr);
  j["n_layer"] = c.n_layer;
  j["n_positions"] = c.n_positions;
  j["resid_pdrop"] = c.resid_pdrop;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = torch_dtype;
  j["vocab_size"] = c.vocab_size;
  return j;
}

// Reads the tensors of a GPT-2 safetensors file into `model`'s parameters, each straight into its storage
// (see the top of this file for the key mapping). Every key, shape and
// dtype is checked first, so a bad file leaves the model unchanged.
template <floating_element T>
void load_gpt2_state_dict(GPT2LMHeadModel<T>& model, const io::SafeTensorsFile& file,
                          const PretrainedOptions& options = {}) {
  const auto keys = file.names();
  // Prefixed keys (GPT2LMHeadModel's state dict) or bare ones (GPT2Model's): whichever the file uses.
  const bool prefixed = std::any_of(keys.begin(), keys.end(), [](const std::string& k) { return k.starts_with("transformer."); });
  const std::string prefix = prefixed ? "transformer." : "";
  static const std::string ours = "transformer.";
  constexpr const char* head = "lm_head.weight";

  io::LoadOptions lo;
  lo.strict = options.strict;
  lo.rename = [&](const std::string& name) { return prefix + name.substr(ours.size()); };
  lo.ignore = [&](const std::string& key) {
    return key == head || (key.starts_with(prefix) && detail::pretrained::is_mask_buffer(key.substr(prefix.size())));
  };

  // The tied head: checked before anything is copied, so a mismatch leaves the model unchanged.
  if (file.contains(head)) {
    const std::string wte_key = prefix + "wte.weight";
    const auto& hi = file.info(head);
    const std::string what = file.source() + ": tensor \"lm_head.weight\" ";
    if (!file.contains(wte_key))
      throw io::checkpoint_error(what + "is present but \"" + wte_key + "\" is not (the head is tied to it)");
    const auto& wi = file.info(wte_key);
    if (hi.shape != wi.shape)
      throw io::checkpoint_error(what + "has shape " + shape_string(hi.shape) + " but \"" + wte_key + "\" has " +
                                 shape_string(wi.shape) + "; GPT2LMHeadModel ties the head to the token embeddings");
    if (!io::is_floating(hi.dtype))
      throw io::checkpoint_error(what + "has dtype " + std::string(io::dtype_name(hi.dtype)) + ", not a floating dtype");
    // Compared as doubles (exact for every floating dtype), so an F16 head equals an F16 wte bit for bit and
    // a head saved in another precision is compared by value. Piece by piece: the two tensors are the
    // model's largest, and holding both as doubles would cost four times the embeddings.
    const index_t n = hi.numel(), cols = hi.shape.size() == 2 ? hi.shape[1] : 1;
    constexpr index_t piece = index_t{1} << 16;
    std::vector<double> a(static_cast<std::size_t>(std::min(n, piece))), b(a.size());
    for (index_t at = 0; at < n; at += piece) {
      const auto m = static_cast<std::size_t>(std::min(piece, n - at));
      file.read_elements(head, at, std::span<double>(a.data(), m));
      file.read_elements(wte_key, at, std::span<double>(b.data(), m));
      for (std::size_t k = 0; k < m; ++k)
        if (!(a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k])))) {
          const index_t i = at + static_cast<index_t>(k);
          throw io::checkpoint_error(what + "differs from \"" + wte_key + "\" (first at [" + std::to_string(i / cols) +
                                     ", " + std::to_string(i % cols) + "]: " + std::to_string(a[k]) + " vs " +
                                     std::to_string(b[k]) +
                                     "); GPT2LMHeadModel ties the LM head to the token embeddings, so an untied head "
                                     "cannot be loaded");
        }
    }
  }
  // bfloat16 or packed storage: each weight matrix converted as soon as it is read (see
  // PretrainedOptions::bf16_weights, pack_weights).
  if (options.bf16_weights && options.pack_weights)
    throw std::invalid_argument("load_gpt2_state_dict: bf16_weights and pack_weights both ask for the only copy of the "
                                "weights; choose one");
  std::unordered_map<std::string, nn::Conv1D<T>*> conv1d_by_weight;
  if (options.bf16_weights || options.pack_weights) {
    if constexpr (!std::is_same_v<T, float>) {
      throw std::invalid_argument(std::string("load_gpt2_state_dict: ") +
                                  (options.bf16_weights ? "bf16_weights" : "pack_weights") +
                                  " needs a float model; this one holds double");
    } else {
      for (auto& [name, module] : model.named_modules())
        if (auto* conv = dynamic_cast<nn::Conv1D<T>*>(module)) conv1d_by_weight.emplace(name + ".weight", conv);
      lo.loaded = [&](const std::string& name) {
        if (name == "transformer.wte.weight") {
          if (options.bf16_weights) {
            model.transformer.wte.to_bf16_weights(FloatWeights::release);
          } else {
            model.pack_tied_head(FloatWeights::release);
          }
        } else if (const auto found = conv1d_by_weight.find(name); found != conv1d_by_weight.end()) {
          if (options.bf16_weights) found->second->to_bf16_weights(FloatWeights::release);
          else found->second->pack_weights(FloatWeights::release);
        }
      };
    }
  }
  io::load_state_dict(model, file, lo);
  if constexpr (std::is_same_v<T, float>) {  // the tied head; weights not in the file
    if (options.bf16_weights) model.to_bf16_weights(FloatWeights::release);
    if (options.pack_weights) model.pack_weights(FloatWeights::release);
  }
}

// A GPT2LMHeadModel<T> from a Hugging Face model directory (config.json + model.safetensors), in eval mode
// (as transformers' from_pretrained returns it). A free function rather than GPT2LMHeadModel::from_pretrained
// so that models/gpt2.hpp stays free of JSON and files.
//
// Memory: the model is built without initialisation (zeros; LayerNorm 1 / 0) and each tensor is read from
// the file straight into its parameter, so the peak is the model's own size plus the header, not a copy of
// the file. (Each nn::Parameter's gradient is the model's business, not the loader's.)
template <floating_element T>
GPT2LMHeadModel<T> gpt2_from_pretrained(const std::filesystem::path& dir, const PretrainedOptions& options = {}) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw io::checkpoint_error(dir.string() + ": " +
                               (std::filesystem::exists(dir, ec) ? "not a directory" : "no such directory") +
                               " (expected a Hugging Face model directory with config.json and model.safetensors)");
  const GPT2Config config = gpt2_config_from_file(dir / "config.json");
  const auto weights = dir / "model.safetensors";
  if (!std::filesystem::exists(weights, ec)) {
    std::string hint;
    if (std::filesystem::exists(dir / "model.safetensors.index.json", ec))
      hint = " (the checkpoint is sharded: model.safetensors.index.json; only a single model.safetensors is read)";
    else if (std::filesystem::exists(dir / "pytorch_model.bin", ec))
      hint = " (only pytorch_model.bin, a pickle, is there; download model.safetensors instead)";
    throw io::checkpoint_error(weights.string() + ": no such file" + hint);
  }
  // The header first: a malformed file is refused before the model's memory is allocated.
  const auto file = io::SafeTensorsFile::from_file(weights);
  GPT2LMHeadModel<T> model(config, no_init);
  load_gpt2_state_dict(model, file, options);
  model.eval();
  return model;
}

// Writes `model` to `dir` (created if needed) as config.json + model.safetensors (see the top of this
// file). model.safetensors is written first, so an interrupted save never leaves a new config.json
// describing old weights of another shape.
template <floating_element T>
void save_pretrained(GPT2LMHeadModel<T>& model, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw io::checkpoint_error(dir.string() + ": cannot create the directory" + (ec ? ": " + ec.message() : ""));
  io::save_model(model, dir / "model.safetensors");
  const std::string text =
      gpt2_config_to_json(model.config(), std::is_same_v<T, float> ? "float32" : "float64").dump(2) + "\n";
  io::detail::AtomicFile out(dir / "config.json");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace eigenformer::models
