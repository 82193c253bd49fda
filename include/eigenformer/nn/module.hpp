// The module tree every layer and model is built on: Parameter (a tensor, its lazily allocated gradient and
// requires_grad), the flat NamedParameter view that optimizers and checkpoints walk, InferenceMode, and the
// Module base with PyTorch's train/eval switch, named_parameters/named_buffers/named_modules, apply and repr.
//
// Conventions of every layer in eigenformer::nn (one header each):
//   - A module lists its parameters, buffers and children ONCE, in register_members(), one line each:
//         void register_members(nn::Members<T>& m) override {
//           m.parameter("weight", weight);   // a Parameter or std::optional<Parameter>
//           m.child("attn", attn);           // a child module; its names get the "attn." prefix
//         }
//     Everything else is derived from that list: named_parameters() ("attn.qkv.weight", Hugging Face's
//     state-dict keys), named_buffers(), named_modules(), train()/eval(), zero_grad(), requires_grad_(),
//     apply(), state dicts and the PyTorch-style repr printed by `std::cout << module`.
//   - forward(x) is const and reads the module only, unless the module is in training mode outside an
//     InferenceMode scope: then it saves what backward needs through save_for_backward(), the one caching
//     mechanism of the library. So an eval-mode model can be shared by any number of threads at once.
//   - backward(grad_output) returns the gradient of the input and ACCUMULATES (+=) into each parameter's
//     gradient, like loss.backward(); gradients are allocated (as zeros) by the first backward that reaches
//     them, and parameters with requires_grad() false are skipped. It consumes the saved context: calling it
//     without a preceding recording forward throws std::logic_error.
//   - Random draws (dropout) come from eigenformer::current_generator(): the thread's GeneratorGuard if one
//     is active, else the process-wide default generator. No layer stores a generator.
//   - Modules own their tensors and can be moved (std::vector<Block> is fine); copying a module would alias
//     parameters (tensors are handles), so copies are deleted.
// Dimension names in shape comments: B batch, T tokens, C channels, NH heads, HS head size, V vocabulary.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "eigenformer/tensor.hpp"

namespace eigenformer {

// torch.inference_mode(): while one is alive on a thread, no forward on that thread saves anything for
// backward, whatever the modules' training flags. Nestable; `InferenceMode off(false)` re-enables recording
// inside an inference scope.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true) noexcept : previous_(flag()) { flag() = enabled; }
  ~InferenceMode() { flag() = previous_; }
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

  static bool is_enabled() noexcept { return flag(); }

 private:
  static bool& flag() noexcept {
    thread_local bool enabled = false;
    return enabled;
  }
  bool previous_;
};

}  // namespace eigenformer

namespace eigenformer::nn {

template <floating_element T>
class Module;

namespace detail {
// Zeroes a gradient (zero_grad) on the pool: a small model's word embeddings alone (50k x 256) have a 51 MB
// gradient, zeroed before every training step.
template <floating_element T>
void zero_gradient(Tensor<T, 1> grad) {
  if (grad.is_contiguous()) backend::zero_fill(grad.data(), grad.numel());
  else grad.zero_();
}

// What a Parameter shares with every NamedParameter view of it: the flat gradient (empty until the first
// backward reaches it) and the requires_grad flag. Shared, so an optimizer built before the first backward
// sees the gradients that backward allocates.
template <floating_element T>
struct ParameterState {
  index_t numel = 0;
  bool requires_grad = true;
  // How the layer holds the values once it released the float ones (for messages), "" while it has not.
  const char* held_as = "";
  bool float_released() const noexcept { return held_as[0] != '\0'; }  // see Parameter::float_released
  Tensor<T, 1> grad{zeros<T>(Shape<1>{0})};
  bool has_grad() const noexcept { return grad.numel() == numel && numel > 0; }
  Tensor<T, 1>& grad_buffer() {
    if (!has_grad()) grad = zeros<T>(Shape<1>{numel});
    return grad;
  }
};
}  // namespace detail

// A trainable tensor (nn.Parameter): .data, and a gradient that costs nothing until a backward needs it.
template <floating_element T, std::size_t Rank>
class Parameter {
 public:
  Tensor<T, Rank> data;

  Parameter() : state_(std::make_shared<detail::ParameterState<T>>()) {}
  explicit Parameter(Tensor<T, Rank> values)
      : data(std::move(values)), state_(std::make_shared<detail::ParameterState<T>>()) {
    state_->numel = data.numel();
  }

  const Shape<Rank>& shape() const noexcept { return data.shape(); }
  index_t numel() const noexcept { return data.numel(); }

  bool requires_grad() const noexcept { return state_->requires_grad; }
  // Freezes (false) or unfreezes the parameter; a frozen parameter's backward contributions are skipped.
  Parameter& requires_grad_(bool enabled = true) noexcept {
    state_->requires_grad = enabled;
    return *this;
  }

  // True once a backward has written the gradient (p.grad is not None).
  bool has_grad() const noexcept { return state_->has_grad(); }
  // The accumulated gradient, shaped like data; an empty tensor (numel 0) before the first backward.
  Tensor<T, Rank> grad() const {
    if (!has_grad()) return Tensor<T, Rank>::empty(Shape<Rank>{});
    return state_->grad.view(data.shape());
  }
  // What backward accumulates into: the gradient, allocated as zeros on first use.
  Tensor<T, Rank> grad_buffer() { return state_->grad_buffer().view(data.shape()); }
  // Zeroes an existing gradient (allocates nothing), like zero_grad(set_to_none=False).
  void zero_grad() {
    if (has_grad()) detail::zero_gradient(state_->grad);
  }
  // Frees the gradient (zero_grad(set_to_none=True)).
  void clear_grad() { state_->grad = zeros<T>(Shape<1>{0}); }

  // True once the layer that owns this parameter keeps its values only in another form: as bfloat16
  // (to_bf16_weights with FloatWeights::release, tensor/bf16.hpp) or in the packed kernel's order
  // (pack_weights with FloatWeights::release, tensor/packed_matrix.hpp). data then keeps the shape (so numel,
  // printing and parameter counts are unchanged) but holds no values: a broadcast NaN, so that nothing can
  // mistake it for the weight. What needs the float values refuses such a parameter with a message that says
  // so: a recording (training) forward, state_dict and load_state_dict, optimizers, a second conversion.
  bool float_released() const noexcept { return state_->float_released(); }
  // How the values are held once released, for messages: "bfloat16 (to_bf16_weights with FloatWeights::release)"
  // or the packed one; empty while the float values are there.
  const char* held_as() const noexcept { return state_->held_as; }
  // Frees data's storage (see float_released); for the layer that holds the values elsewhere, which says how
  // (a static string, quoted by held_as()).
  void release_float_(const char* held_as) {
    Shape<Rank> one;
    one.fill(1);
    data = full<T>(one, std::numeric_limits<T>::quiet_NaN()).expand(data.shape());
    state_->held_as = held_as;
  }
  // Gives a released parameter its float values back (values of its shape), as the layer that held them
  // elsewhere reads them out; the parameter is then an ordinary one again.
  void restore_float_(Tensor<T, Rank> values) {
    if (values.shape() != data.shape())
      throw shape_error("Parameter::restore_float_: values " + shape_string(values.shape()) + " for a parameter of " +
                        shape_string(data.shape()));
    data = std::move(values);
    state_->held_as = "";
  }

  const std::shared_ptr<detail::ParameterState<T>>& state() const noexcept { return state_; }

 private:
  std::shared_ptr<detail::ParameterState<T>> state_;
};

// A parameter seen flat, under its dotted name: data is a rank-1 view sharing the parameter's storage, so an
// optimizer step or a checkpoint load through it changes the layer itself; grad() shares its gradient.
// `offset` places a view of a slice of a larger parameter (MultiHeadAttention's per-head names).
template <floating_element T>
struct NamedParameter {
  std::string name;
  std::vector<index_t> shape;
  Tensor<T, 1> data;
  std::shared_ptr<detail::ParameterState<T>> state;
  index_t offset = 0;

  bool requires_grad() const noexcept { return state->requires_grad; }
  void requires_grad_(bool enabled = true) const noexcept { state->requires_grad = enabled; }
  bool has_grad() const noexcept { return state->has_grad(); }
  // The flat gradient; empty (numel 0) before the first backward reached the parameter.
  Tensor<T, 1> grad() const {
    if (!state->has_grad()) return zeros<T>(Shape<1>{0});
    return state->grad.narrow(0, offset, data.numel());
  }
  // The flat gradient, allocated as zeros when there is none yet.
  Tensor<T, 1> grad_buffer() const { return state->grad_buffer().narrow(0, offset, data.numel()); }
};

template <floating_element T>
using ParameterList = std::vector<NamedParameter<T>>;

// A buffer (state that is not trained, e.g. a causal mask or running statistics) seen flat under its name.
template <floating_element T>
struct NamedBuffer {
  std::string name;
  std::vector<index_t> shape;
  Tensor<T, 1> data;
  bool persistent = true;  // part of the state dict
};

// The visitor a module's register_members() speaks to. What it does with each entry (collect names, switch
// training, print) is up to the walk that created it.
template <floating_element T>
class Members {
 public:
  struct Sink {
    virtual ~Sink() = default;
    virtual bool wants_tensors() const { return true; }
    virtual void on_parameter(std::string_view /*name*/, NamedParameter<T>&& /*p*/) {}
    virtual void on_buffer(std::string_view /*name*/, NamedBuffer<T>&& /*b*/) {}
    virtual void on_child(std::string_view /*name*/, Module<T>& /*m*/) {}
  };
  explicit Members(Sink& sink) : sink_(sink) {}

  template <std::size_t R>
  void parameter(std::string_view name, Parameter<T, R>& p) {
    if (!sink_.wants_tensors()) return;
    auto data = p.float_released() ? released_flat(p.numel()) : flat(p.data);
    sink_.on_parameter(name, NamedParameter<T>{std::string(name), dims(p.shape()), std::move(data), p.state(), 0});
  }
  template <std::size_t R>
  void parameter(std::string_view name, std::optional<Parameter<T, R>>& p) {
    if (p) parameter(name, *p);
  }
  // Rows [row, row + rows) of p (dim 0), listed under a name of their own: a view sharing p's data and
  // gradient (MultiHeadAttention's per-head q/k/v names over one fused matrix).
  template <std::size_t R>
  void parameter_rows(std::string_view name, Parameter<T, R>& p, index_t row, index_t rows) {
    if (!sink_.wants_tensors()) return;
    const auto part = p.data.narrow(0, row, rows);
    const index_t row_size = rows == 0 ? 0 : part.numel() / rows;
    auto data = p.float_released() ? released_flat(part.numel()) : flat(part);
    sink_.on_parameter(name, NamedParameter<T>{std::string(name), dims(part.shape()), std::move(data), p.state(),
                                               row * row_size});
  }
  template <typename U, std::size_t R>
  void buffer(std::string_view name, Tensor<U, R>& b, bool persistent = true) {
    static_assert(std::is_same_v<U, T>, "Members::buffer: buffers hold the module's element type");
    if (!sink_.wants_tensors()) return;
    sink_.on_buffer(name, NamedBuffer<T>{std::string(name), dims(b.shape()), flat(b), persistent});
  }
  void child(std::string_view name, Module<T>& m) { sink_.on_child(name, m); }

 private:
  template <std::size_t R>
  static std::vector<index_t> dims(const Shape<R>& s) {
    return std::vector<index_t>(s.begin(), s.end());
  }
  template <std::size_t R>
  static Tensor<T, 1> flat(const Tensor<T, R>& t) {
    if (!t.is_contiguous())
      throw std::logic_error("Members: a registered tensor of shape " + shape_string(t.shape()) +
                             " is not contiguous, so it has no flat view");
    return t.view(Shape<1>{t.numel()});
  }
  // What a released parameter (Parameter::float_released) shows flat: no storage to view, the same
  // broadcast NaN as its data.
  static Tensor<T, 1> released_flat(index_t numel) {
    return full<T>(Shape<1>{1}, std::numeric_limits<T>::quiet_NaN()).expand(Shape<1>{numel});
  }
  Sink& sink_;
};

// Base of every layer and model.
template <floating_element T>
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) noexcept = default;
  Module& operator=(Module&&) noexcept = default;
  virtual ~Module() = default;

  // The class name PyTorch / Hugging Face print ("Linear", "GPT2Block").
  virtual std::string type_name() const = 0;
  // The part inside the parentheses of the repr ("in_features=768, out_features=3072, bias=True").
  virtual std::string extra_repr() const { return {}; }
  // Lists parameters, buffers and children once each, in PyTorch's registration order.
  virtual void register_members(Members<T>& /*m*/) {}

  // nn.Module.train(mode) / eval(): switches this module and every descendant, and drops anything saved
  // for a backward that can no longer come.
  void train(bool mode = true) {
    for (auto& entry : named_modules()) {
      entry.second->training_ = mode;
      entry.second->saved_.reset();
    }
  }
  void eval() { train(false); }
  bool is_training() const noexcept { return training_; }

  // Every parameter with its dotted name, in registration order (PyTorch's named_parameters()).
  ParameterList<T> named_parameters() {
    ParameterList<T> out;
    walk_tensors("", &out, nullptr);
    return out;
  }
  std::vector<NamedBuffer<T>> named_buffers() {
    std::vector<NamedBuffer<T>> out;
    walk_tensors("", nullptr, &out);
    return out;
  }
  // This module (name "") and every descendant, depth first in registration order.
  std::vector<std::pair<std::string, Module<T>*>> named_modules() {
    std::vector<std::pair<std::string, Module<T>*>> out;
    out.emplace_back("", this);
    collect_modules("", out);
    return out;
  }
  std::vector<std::pair<std::string, Module<T>*>> named_children() {
    struct Children : Members<T>::Sink {
      std::vector<std::pair<std::string, Module<T>*>> list;
      bool wants_tensors() const override { return false; }
      void on_child(std::string_view name, Module<T>& m) override { list.emplace_back(std::string(name), &m); }
    } sink;
    Members<T> members(sink);
    register_members(members);
    return std::move(sink.list);
  }
  // fn on every descendant, then on this module (PyTorch's order).
  void apply(const std::function<void(Module<T>&)>& fn) {
    for (auto& c : named_children()) c.second->apply(fn);
    fn(*this);
  }

  index_t num_parameters() {
    index_t n = 0;
    for (const auto& p : named_parameters()) n += p.data.numel();
    return n;
  }
  // Zeroes every existing gradient (allocates none).
  void zero_grad() {
    for (auto& p : named_parameters())
      if (p.has_grad()) detail::zero_gradient(p.state->grad);
  }
  // Freezes (false) or unfreezes every parameter of this subtree.
  Module& requires_grad_(bool enabled = true) {
    for (auto& p : named_parameters()) p.requires_grad_(enabled);
    return *this;
  }

  // PyTorch's module repr: Name(extra) for a leaf, children indented two spaces per level.
  std::string repr() const {
    auto& self = const_cast<Module<T>&>(*this);
    std::vector<std::string> lines;
    const std::string extra = extra_repr();
    std::vector<std::string> extra_lines;
    if (!extra.empty()) {
      std::istringstream in(extra);
      for (std::string line; std::getline(in, line);) extra_lines.push_back(line);
    }
    std::vector<std::string> child_lines;
    for (auto& c : self.named_children()) child_lines.push_back("(" + c.first + "): " + indent(c.second->repr()));
    std::string out = type_name() + "(";
    lines = extra_lines;
    lines.insert(lines.end(), child_lines.begin(), child_lines.end());
    if (!lines.empty()) {
      if (extra_lines.size() == 1 && child_lines.empty()) {
        out += extra_lines[0];
      } else {
        out += "\n";
        for (const auto& l : lines) out += "  " + l + "\n";
      }
    }
    return out + ")";
  }

 protected:
  // True when a forward must save what backward needs: training mode, outside InferenceMode.
  bool records_for_backward() const noexcept { return training_ && !InferenceMode::is_enabled(); }

  // The one caching mechanism: a recording forward stores its context here (replacing an older one) and
  // backward takes it out. Not touched by non-recording forwards, which is what makes them read-only.
  template <class Context>
  void save_for_backward(Context context) const {
    saved_ = std::make_shared<Saved<Context>>(std::move(context));
  }
  template <class Context>
  Context take_saved(const char* layer) {
    auto* s = dynamic_cast<Saved<Context>*>(saved_.get());
    if (!s) throw_no_cache(layer);
    Context c = std::move(s->value);
    saved_.reset();
    return c;
  }
  bool has_saved() const noexcept { return saved_ != nullptr; }

  // The error every backward raises when there is nothing saved to differentiate.
  [[noreturn]] static void throw_no_cache(const char* layer) {
    throw std::logic_error(std::string(layer) +
                           ".backward: nothing saved; call forward in training mode (train(), outside "
                           "InferenceMode) before backward, once per backward");
  }

  // Python's bool / float spelling inside extra_repr ("True", "1e-05", "0.1").
  static std::string py_bool(bool b) { return b ? "True" : "False"; }
  static std::string py_float(double v) {
    // Python's repr: the shortest string that round-trips; %g at increasing precision finds it.
    for (int p = 1; p <= 17; ++p) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*g", p, v);
      if (std::strtod(buf, nullptr) == v) {
        std::string r = buf;
        // Python writes 1e-05 as "1e-05" (two-digit exponent, like %g) and 0.1 as "0.1", but 1.0 as "1.0".
        if (r.find_first_of(".einn") == std::string::npos) r += ".0";
        return r;
      }
    }
    return std::to_string(v);
  }

 private:
  struct SavedBase {
    virtual ~SavedBase() = default;
  };
  template <class Context>
  struct Saved : SavedBase {
    explicit Saved(Context c) : value(std::move(c)) {}
    Context value;
  };

  static std::string indent(const std::string& s) {
    std::string out;
    for (char ch : s) {
      out += ch;
      if (ch == '\n') out += "  ";
    }
    return out;
  }

  void walk_tensors(const std::string& prefix, ParameterList<T>* params, std::vector<NamedBuffer<T>>* buffers) {
    struct Walk : Members<T>::Sink {
      const std::string& prefix;
      ParameterList<T>* params;
      std::vector<NamedBuffer<T>>* buffers;
      Walk(const std::string& p, ParameterList<T>* pa, std::vector<NamedBuffer<T>>* bu)
          : prefix(p), params(pa), buffers(bu) {}
      void on_parameter(std::string_view, NamedParameter<T>&& p) override {
        if (!params) return;
        p.name.insert(0, prefix);
        params->push_back(std::move(p));
      }
      void on_buffer(std::string_view, NamedBuffer<T>&& b) override {
        if (!buffers) return;
        b.name.insert(0, prefix);
        buffers->push_back(std::move(b));
      }
      void on_child(std::string_view name, Module<T>& m) override {
        m.walk_tensors(prefix + std::string(name) + ".", params, buffers);
      }
    } sink(prefix, params, buffers);
    Members<T> members(sink);
    register_members(members);
  }

  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module<T>*>>& out) {
    for (auto& c : named_children()) {
      const std::string name = prefix + c.first;
      out.emplace_back(name, c.second);
      c.second->collect_modules(name + ".", out);
    }
  }

  bool training_ = true;                        // PyTorch modules start in training mode
  mutable std::shared_ptr<SavedBase> saved_;    // the context of the last recording forward
};

template <floating_element T>
std::ostream& operator<<(std::ostream& os, const Module<T>& m) {
  return os << m.repr();
}

}  // namespace eigenformer::nn
