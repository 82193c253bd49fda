// Module checkpoints by parameter name, as PyTorch's state_dict() / load_state_dict() and Hugging Face's
// model.safetensors: parameters are named as in those checkpoints ("qkv.weight", "h.0.ln_1.bias"), so
// loading is a copy by name.
//
//   io::save_model(model, "model.safetensors");           // every parameter, metadata {"format": "pt"}
//   io::load_model(model, "model.safetensors");           // strict: same names, same shapes
//   io::LoadOptions hf;                                   // a Hugging Face GPT-2 checkpoint:
//   hf.rename = [](const std::string& n) { return "h.0." + n; };  // our name -> the checkpoint's key
//   hf.transpose = io::gpt2_conv1d_weight;                // Conv1D stores (in, out), Linear (out, in)
//   hf.ignore = [](const std::string& k) { return k.ends_with(".attn.bias"); };  // causal-mask buffers
//   io::load_model(block, "gpt2/model.safetensors", hf);
//
// A load checks every parameter (presence, shape, dtype) before it copies any, so a failed load throws
// checkpoint_error listing every problem, like PyTorch's "Error(s) in loading state_dict", and leaves the
// module unchanged. Then each tensor is read from the file straight into its parameter, one at a time:
// loading costs no memory beyond the module's own. The names are those of safetensors.torch
// (save_model / load_model) and torch.nn.Module (state_dict / load_state_dict).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "eigenformer/io/safetensors.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::io {

namespace detail {
// One state-dict entry seen flat: a parameter or a persistent buffer, sharing the module's storage.
template <floating_element T>
struct StateEntry {
  std::string name;
  std::vector<index_t> shape;
  Tensor<T, 1> data;
};

// What PyTorch's state_dict() holds: every parameter, then every persistent buffer, by dotted name. Both
// lists come from the module tree's register_members, so a module never lists them twice.
template <floating_element T>
std::vector<StateEntry<T>> state_entries(nn::Module<T>& module) {
  std::vector<StateEntry<T>> out;
  for (auto& p : module.named_parameters()) {
    if (p.state->float_released())
      throw checkpoint_error("state dict: parameter " + quote_name(p.name) + " " + shape_string(p.shape) +
                             " is held only as " + p.state->held_as +
                             ", which freed its float values, so it can be neither saved nor loaded; use a model that "
                             "keeps its float weights");
    out.push_back({std::move(p.name), std::move(p.shape), p.data});
  }
  for (auto& b : module.named_buffers())
    if (b.persistent) out.push_back({std::move(b.name), std::move(b.shape), b.data});
  return out;
}
}  // namespace detail

// Every parameter and persistent buffer of `module` under its dotted name (PyTorch's state_dict()). The
// tensors share storage with the module, so saving them right away writes the current values without a copy.
template <floating_element T>
TensorDict state_dict(nn::Module<T>& module) {
  TensorDict out;
  for (auto& e : detail::state_entries(module)) {
    if (!out.emplace(e.name, AnyTensor(e.data, e.shape)).second)
      throw checkpoint_error("state_dict: two entries are named " + detail::quote_name(e.name));
  }
  return out;
}

struct LoadOptions {
  // PyTorch's strict: every parameter must be in the checkpoint and every checkpoint tensor must be used.
  // When false, missing and unexpected keys are only reported in the returned LoadReport. Shape and dtype
  // mismatches throw either way.
  bool strict = true;
  // Maps a parameter name of the module to the checkpoint key holding it (identity when empty), e.g. to
  // add a prefix such as "transformer." or to rename layers.
  std::function<std::string(const std::string&)> rename;
  // Checkpoint keys whose 2-D tensor is stored transposed: (in, out) for a parameter of shape (out, in), as
  // Hugging Face GPT-2's Conv1D stores what is our Linear weight. See gpt2_conv1d_weight.
  std::function<bool(const std::string&)> transpose;
  // Checkpoint keys that are neither loaded nor reported as unexpected (buffers such as GPT-2's causal
  // mask "h.0.attn.bias").
  std::function<bool(const std::string&)> ignore;
  // Called with each parameter's name right after it is filled, in the module's registration order: for a
  // caller that converts each weight as it arrives (to bfloat16, freeing the float values) so that memory
  // never holds them all at once.
  std::function<void(const std::string&)> loaded;
};

// What a non-strict load left out (checkpoint keys, after renaming). Both empty after a strict load.
struct LoadReport {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// True for the weights Hugging Face's GPT-2 keeps in Conv1D layers (stored (in, out)): attn.c_attn,
// attn.c_proj, mlp.c_fc and mlp.c_proj. Their biases have the same shape either way.
inline bool gpt2_conv1d_weight(const std::string& key) {
  for (const char* suffix : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
    if (key.ends_with(suffix)) return true;
  return false;
}

namespace detail {

// A checkpoint seen by name: a safetensors file or an in-memory TensorDict.
struct SafeTensorsSource {
  const SafeTensorsFile& file;
  std::string label() const { return file.source(); }
  std::vector<std::string> keys() const { return file.names(); }
  bool contains(const std::string& key) const { return file.contains(key); }
  std::vector<index_t> shape(const std::string& key) const { return file.info(key).shape; }
  std::string dtype(const std::string& key) const { return std::string(dtype_name(file.info(key).dtype)); }
  bool floating(const std::string& key) const { return is_floating(file.info(key).dtype); }
  void check_unchanged() const { file.check_unchanged(); }
  // Straight from the file into the parameter's storage (see SafeTensorsFile::read_into).
  template <floating_element T>
  void read_flat_into(const std::string& key, Tensor<T, 1>& dst) const { file.read_flat_into(key, dst); }
  template <floating_element T>
  void read_into(const std::string& key, Tensor<T, 2>&& dst) const { file.read_into(key, dst); }
};

struct DictSource {
  const TensorDict& dict;
  std::string label() const { return "state dict"; }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : dict) out.push_back(k);
    return out;
  }
  bool contains(const std::string& key) const { return dict.count(key) != 0; }
  std::vector<index_t> shape(const std::string& key) const { return dict.at(key).shape(); }
  std::string dtype(const std::string& key) const { return std::string(dtype_name(dict.at(key).dtype())); }
  bool floating(const std::string& key) const {
    const Dtype d = dict.at(key).dtype();
    return d == Dtype::F32 || d == Dtype::F64;
  }
  void check_unchanged() const {}
  template <floating_element T>
  void read_flat_into(const std::string& key, Tensor<T, 1>& dst) const { dst.copy_(values<T>(key)); }
  template <floating_element T>
  void read_into(const std::string& key, Tensor<T, 2>&& dst) const { dst.copy_(values<T>(key).view(dst.shape())); }
  template <floating_element T>
  Tensor<T, 1> values(const std::string& key) const { return dict.at(key).flat<T>("state dict: tensor " + quote_name(key)); }
};

inline std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) {
    if (!s.empty()) s += ", ";
    s += quote_name(n);
  }
  return s;
}

template <floating_element T, class Source>
LoadReport load_state_dict_from(nn::Module<T>& module, const Source& source, const LoadOptions& options) {
  struct Plan {
    StateEntry<T> param;
    std::string key;
    bool transposed;
  };
  std::vector<Plan> plans;
  std::vector<std::string> problems;
  LoadReport report;
  std::set<std::string> used;
  for (auto& p : state_entries(module)) {
    std::string key = options.rename ? options.rename(p.name) : p.name;
    const std::string label = quote_name(key) + (key == p.name ? "" : " (parameter " + quote_name(p.name) + ")");
    if (!source.contains(key)) {
      report.missing_keys.push_back(key);
      continue;
    }
    used.insert(key);
    const bool transposed = options.transpose && options.transpose(key);
    const std::vector<index_t> stored = source.shape(key);
    std::vector<index_t> expected = p.shape;
    if (transposed) {
      if (expected.size() != 2) {
        problems.push_back("cannot transpose into " + label + ": the parameter has shape " + shape_string(p.shape) +
                           ", not 2-D");
        continue;
      }
      std::swap(expected[0], expected[1]);
    }
    if (stored != expected) {
      problems.push_back("shape mismatch for " + label + ": " + shape_string(stored) + " in the checkpoint, " +
                         shape_string(p.shape) + " in the module" +
                         (transposed ? " (stored transposed, so " + shape_string(expected) + " was expected)" : ""));
      continue;
    }
    if (!source.floating(key)) {
      problems.push_back("dtype mismatch for " + label + ": " + source.dtype(key) +
                         " in the checkpoint, a floating dtype (F16, BF16, F32, F64) is needed");
      continue;
    }
    plans.push_back({p, std::move(key), transposed});
  }
  for (const auto& key : source.keys())
    if (!used.count(key) && !(options.ignore && options.ignore(key))) report.unexpected_keys.push_back(key);

  if (options.strict) {
    if (!report.missing_keys.empty())
      problems.insert(problems.begin(), std::to_string(report.missing_keys.size()) + " missing key" +
                                            (report.missing_keys.size() == 1 ? "" : "s") + ": " +
                                            quoted_list(report.missing_keys));
    if (!report.unexpected_keys.empty())
      problems.push_back(std::to_string(report.unexpected_keys.size()) + " unexpected key" +
                         (report.unexpected_keys.size() == 1 ? "" : "s") + ": " + quoted_list(report.unexpected_keys));
  }
  if (!problems.empty()) {
    std::string msg = source.label() + ": cannot load the state dict: ";
    for (std::size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw checkpoint_error(msg);
  }

  // Everything checked. Each tensor now goes from the source straight into its parameter's storage, one at
  // a time, so a load needs no memory beyond the module's. Only the file itself can still fail us (an I/O
  // error, a file truncated or rewritten since it was opened); that is checked once more here so that the
  // common case, a file changed between opening and loading, still leaves the module untouched.
  source.check_unchanged();
  std::size_t loaded = 0;
  try {
    for (auto& plan : plans) {
      if (plan.transposed) {
        // Stored (in, out) for our (out, in): read into the transposed view of the parameter.
        const index_t out = plan.param.shape[0], in = plan.param.shape[1];
        source.template read_into<T>(plan.key, plan.param.data.view(Shape<2>{out, in}).t());
      } else {
        source.template read_flat_into<T>(plan.key, plan.param.data);
      }
      ++loaded;
      plan.param.data = Tensor<T, 1>();  // the plan's handle on the storage: a callback may free it
      if (options.loaded) options.loaded(plan.param.name);
    }
  } catch (const checkpoint_error& e) {
    throw checkpoint_error(std::string(e.what()) + " (" + std::to_string(loaded) + " of " +
                           std::to_string(plans.size()) + " parameters had been loaded: the module is partly "
                           "overwritten)");
  }
  if (options.strict) report = {};
  return report;
}

}  // namespace detail

// Copies the checkpoint's tensors into `module`'s parameters by name (see LoadOptions). F16, BF16, F32
// and F64 tensors load into float or double parameters (rounded like torch's copy_); from a file, each is
// read straight into the parameter's storage. Throws checkpoint_error naming the file and every
// missing/unexpected key (strict) and every shape or dtype mismatch with both shapes; the module is
// unchanged then. A read that fails after those checks (an I/O error, a file rewritten since it was
// opened) throws too, saying how many parameters had been loaded.
template <floating_element T>
LoadReport load_state_dict(nn::Module<T>& module, const SafeTensorsFile& file, const LoadOptions& options = {}) {
  return detail::load_state_dict_from(module, detail::SafeTensorsSource{file}, options);
}
template <floating_element T>
LoadReport load_state_dict(nn::Module<T>& module, const TensorDict& dict, const LoadOptions& options = {}) {
  return detail::load_state_dict_from(module, detail::DictSource{dict}, options);
}

// save_safetensors(path, state_dict(module), metadata), as safetensors.torch.save_model. The default
// metadata {"format": "pt"} is what Hugging Face transformers checks for before it loads a safetensors
// checkpoint.
template <floating_element T>
void save_model(nn::Module<T>& module, const std::filesystem::path& path, const Metadata& metadata = {{"format", "pt"}}) {
  save_safetensors(path, state_dict(module), metadata);
}

// load_state_dict(module, SafeTensorsFile::from_file(path), options), as safetensors.torch.load_model:
// the header is checked against every parameter first, then each tensor is read into its parameter.
template <floating_element T>
LoadReport load_model(nn::Module<T>& module, const std::filesystem::path& path, const LoadOptions& options = {}) {
  return load_state_dict(module, SafeTensorsFile::from_file(path), options);
}

}  // namespace eigenformer::io
