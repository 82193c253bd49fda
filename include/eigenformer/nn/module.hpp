// The pieces every layer shares: Parameter (a tensor and its gradient), the flat NamedParameter view that
// optimizers and checkpoints walk, and the Module base with PyTorch's train/eval switch.
//
// Conventions of every layer in eigenformer::nn (one header each):
//   - forward(x) computes the output. In training mode it caches exactly what backward needs; in eval mode
//     it caches nothing, so inference holds no activations.
//   - backward(grad_output) returns the gradient of the input and ACCUMULATES (+=) into each parameter's
//     .grad, like loss.backward() in PyTorch; zero_grad() resets them. It consumes the cache: calling it
//     without a preceding training-mode forward throws std::logic_error.
//   - Parameters are public members named as in PyTorch / Hugging Face state dicts (weight, bias, qkv, ...),
//     and named_parameters() lists them with dotted names ("attn.qkv.weight"), so checkpoints load by name.
//   - Modules own their tensors and can be moved (std::vector<TransformerBlock<float>> is fine); copying a
//     module would alias parameters (tensors are handles), so copies are deleted.
// Dimension names in shape comments: B batch, T tokens, C channels, NH heads, HS head size, V vocabulary.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "eigenformer/tensor.hpp"

namespace eigenformer::nn {

// A trainable tensor and the gradient accumulated into it (nn.Parameter's .data and .grad).
template <floating_element T, std::size_t Rank>
struct Parameter {
  Tensor<T, Rank> data;
  Tensor<T, Rank> grad;

  Parameter() = default;
  explicit Parameter(Tensor<T, Rank> values) : data(std::move(values)), grad(zeros<T>(data.shape())) {}

  const Shape<Rank>& shape() const noexcept { return data.shape(); }
  void zero_grad() { grad.zero_(); }
};

// A parameter seen flat: data and grad are rank-1 views sharing the parameter's storage, so an optimizer
// step or a checkpoint load through them changes the layer itself.
template <floating_element T>
struct NamedParameter {
  std::string name;
  std::vector<index_t> shape;
  Tensor<T, 1> data;
  Tensor<T, 1> grad;
};

template <floating_element T>
using ParameterList = std::vector<NamedParameter<T>>;

template <floating_element T, std::size_t Rank>
void add_parameter(ParameterList<T>& out, const std::string& prefix, const std::string& name, Parameter<T, Rank>& p) {
  out.push_back(NamedParameter<T>{prefix + name, std::vector<index_t>(p.shape().begin(), p.shape().end()),
                                  p.data.view(Shape<1>{p.data.numel()}), p.grad.view(Shape<1>{p.grad.numel()})});
}

// Base of every layer: the training flag and the parameter walk. Subclasses list their own parameters and
// children in collect_parameters and forward train() to their children in set_children_training.
template <floating_element T>
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) noexcept = default;
  Module& operator=(Module&&) noexcept = default;
  virtual ~Module() = default;

  // nn.Module.train(mode) / eval(): switches this module and all its children.
  void train(bool mode = true) {
    training_ = mode;
    set_children_training(mode);
  }
  void eval() { train(false); }
  bool is_training() const noexcept { return training_; }

  // Every parameter with its dotted name, in registration order (PyTorch's named_parameters()).
  ParameterList<T> named_parameters() {
    ParameterList<T> out;
    collect_parameters("", out);
    return out;
  }
  index_t num_parameters() {
    index_t n = 0;
    for (const auto& p : named_parameters()) n += p.data.numel();
    return n;
  }
  void zero_grad() {
    for (auto& p : named_parameters()) p.grad.zero_();
  }

  // Appends this module's parameters, names prefixed by `prefix` (which ends in '.' unless empty).
  virtual void collect_parameters(const std::string& prefix, ParameterList<T>& out) = 0;

 protected:
  virtual void set_children_training(bool /*mode*/) {}

  // The error every backward raises when there is nothing cached to differentiate.
  [[noreturn]] static void throw_no_cache(const char* layer) {
    throw std::logic_error(std::string(layer) +
                           ".backward: nothing cached; call forward in training mode (train()) before backward, "
                           "once per backward");
  }

 private:
  bool training_ = true;  // PyTorch modules start in training mode
};

}  // namespace eigenformer::nn
