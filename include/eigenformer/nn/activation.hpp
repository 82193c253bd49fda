// Activations with their backward passes: ReLU, GELU (exact erf form and tanh approximation), an
// Activation chosen by its Hugging Face config name, and Softmax over a dim.
//
// The element-wise formulas are PyTorch's CPU kernels (aten/src/ATen/native/cpu/Activation.cpp), computed
// in the element type with libm's erf/tanh/exp, so float results agree with PyTorch to an ulp or two:
//   gelu(x)      = x/2 (1 + erf(x / sqrt 2))                           gelu'(x) = Phi(x) + x phi(x)
//   gelu_tanh(x) = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu_tanh'(x) = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Every layer here is element-wise over any rank except Softmax, which normalises along one dim.
#pragma once

#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/tensor/backend.hpp"

namespace eigenformer::nn {

// nn.GELU(approximate=...): "none" is the exact erf form, "tanh" the approximation of GPT-2 / BERT's TF code.
enum class GeluApproximate { none, tanh };

// The activations an Activation can be built from, and the Hugging Face `hidden_act` names that select
// them (transformers' ACT2FN): "gelu_new" (NewGELUActivation, written out with torch.tanh) and
// "gelu_pytorch_tanh" (F.gelu(approximate="tanh")) are the same function, computed here one way.
enum class ActivationKind { relu, gelu, gelu_tanh };

inline constexpr std::array<std::string_view, 4> activation_names{"relu", "gelu", "gelu_new", "gelu_pytorch_tanh"};

// The kind for a Hugging Face activation name; throws std::invalid_argument listing the accepted names.
inline ActivationKind activation_kind(std::string_view name) {
  if (name == "relu") return ActivationKind::relu;
  if (name == "gelu") return ActivationKind::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return ActivationKind::gelu_tanh;
  std::string accepted;
  for (auto n : activation_names) accepted += (accepted.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("activation: unknown activation \"" + std::string(name) + "\"; accepted names are " +
                              accepted);
}

// The backend's element-wise kernel for a kind: the layers below run it, and a gemm epilogue
// (backend::Epilogue) given it applies the same expression, so a fused dense + activation gives the bits of
// the two layers run one after the other.
inline backend::Activation epilogue_activation(ActivationKind k) {
  switch (k) {
    case ActivationKind::relu: return backend::Activation::relu;
    case ActivationKind::gelu: return backend::Activation::gelu_erf;
    case ActivationKind::gelu_tanh: return backend::Activation::gelu_tanh;
  }
  return backend::Activation::none;
}

namespace functional {

// Element-wise loops run in chunks of this many elements; a tensor smaller than that stays in one.
inline constexpr index_t elementwise_grain = 16384;

// The activation applied element-wise (any shape, any strides; the result is contiguous).
template <floating_element T, std::size_t R>
Tensor<T, R> activation(const Tensor<T, R>& x, ActivationKind kind) {
  const auto xc = x.contiguous();
  auto y = Tensor<T, R>::empty(x.shape());
  const T* in = xc.data();
  T* out = y.data();
  const auto act = epilogue_activation(kind);
  backend::parallel_for(x.numel(), elementwise_grain,
                        [&](index_t begin, index_t end) { backend::activate(in + begin, out + begin, end - begin, act); });
  return y;
}

// grad_output * f'(x): the gradient of the input from the forward's input x.
template <floating_element T, std::size_t R>
Tensor<T, R> activation_backward(const Tensor<T, R>& grad_output, const Tensor<T, R>& x, ActivationKind kind) {
  nn::detail::check_grad_shape("activation_backward", grad_output.shape(), x.shape());
  const auto gc = grad_output.contiguous();
  const auto xc = x.contiguous();
  auto dx = Tensor<T, R>::empty(x.shape());
  const T* g = gc.data();
  const T* in = xc.data();
  T* out = dx.data();
  const auto act = epilogue_activation(kind);
  backend::parallel_for(x.numel(), elementwise_grain, [&](index_t begin, index_t end) {
    backend::activate_backward(g + begin, in + begin, out + begin, end - begin, act);
  });
  return dx;
}

template <floating_element T, std::size_t R>
Tensor<T, R> relu(const Tensor<T, R>& x) { return activation(x, ActivationKind::relu); }

template <floating_element T, std::size_t R>
Tensor<T, R> gelu(const Tensor<T, R>& x, GeluApproximate approximate = GeluApproximate::none) {
  return activation(x, approximate == GeluApproximate::none ? ActivationKind::gelu : ActivationKind::gelu_tanh);
}

// dx = y * (g - sum(g * y, dim)) from the softmax output y: the Jacobian-vector product of softmax.
template <floating_element T, std::size_t R>
Tensor<T, R> softmax_backward(const Tensor<T, R>& grad_output, const Tensor<T, R>& y, index_t dim) {
  nn::detail::check_grad_shape("softmax_backward", grad_output.shape(), y.shape());
  const auto gy = mul(grad_output, y);
  return mul(y, sub(grad_output, sum(gy, dim, keepdim)));
}

}  // namespace functional

// An element-wise activation by kind or by Hugging Face name: Activation<float>("gelu_new").
// A recording forward saves the input; backward returns grad_output * f'(x).
//
// It prints as the module PyTorch would hold in its place: built from a Hugging Face `hidden_act` name it
// is that name's class in transformers' ACT2CLS ("gelu" -> GELUActivation(), "gelu_new" ->
// NewGELUActivation(), "gelu_pytorch_tanh" -> PytorchGELUTanh(), "relu" -> ReLU()); built from a kind it is
// torch.nn's ReLU() or GELU(approximate='none' | 'tanh').
template <floating_element T>
class Activation : public Module<T> {
 public:
  explicit Activation(ActivationKind kind = ActivationKind::gelu) : kind_(kind), hf_name_() {}
  explicit Activation(std::string_view name) : kind_(activation_kind(name)), hf_name_(name) {}

  ActivationKind kind() const noexcept { return kind_; }

  std::string type_name() const override {
    if (hf_name_ == "gelu") return "GELUActivation";
    if (hf_name_ == "gelu_new") return "NewGELUActivation";
    if (hf_name_ == "gelu_pytorch_tanh") return "PytorchGELUTanh";
    return kind_ == ActivationKind::relu ? "ReLU" : "GELU";
  }
  std::string extra_repr() const override {
    if (!hf_name_.empty() || kind_ == ActivationKind::relu) return {};
    return kind_ == ActivationKind::gelu ? "approximate='none'" : "approximate='tanh'";
  }

  // (...) -> (...), any rank.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    if (this->records_for_backward())
      this->save_for_backward(Context{x.reshape(Shape<1>{x.numel()}), std::vector<index_t>(x.shape().begin(), x.shape().end())});
    return functional::activation(x, kind_);
  }

  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>(layer_name());
    detail::check_grad_shape((std::string(layer_name()) + ".backward").c_str(), grad_output.shape(), ctx.shape);
    return functional::activation_backward(grad_output, ctx.x.view(grad_output.shape()), kind_);
  }

 protected:
  const char* layer_name() const noexcept {
    switch (kind_) {
      case ActivationKind::relu: return "ReLU";
      case ActivationKind::gelu: return "GELU";
      case ActivationKind::gelu_tanh: return "GELU(tanh)";
    }
    return "Activation";
  }

 private:
  struct Context {
    Tensor<T, 1> x;  // the forward input, flat
    std::vector<index_t> shape;
  };
  ActivationKind kind_;
  std::string hf_name_;  // the Hugging Face name it was built from, empty when built from a kind
};

// nn.ReLU: max(x, 0).
template <floating_element T>
class ReLU : public Activation<T> {
 public:
  ReLU() : Activation<T>(ActivationKind::relu) {}
};

// nn.GELU(approximate="none" | "tanh").
template <floating_element T>
class GELU : public Activation<T> {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::none)
      : Activation<T>(approximate == GeluApproximate::none ? ActivationKind::gelu : ActivationKind::gelu_tanh) {}
  // PyTorch's spelling: GELU<float>("tanh").
  explicit GELU(std::string_view approximate) : GELU(parse(approximate)) {}

  GeluApproximate approximate() const noexcept {
    return this->kind() == ActivationKind::gelu ? GeluApproximate::none : GeluApproximate::tanh;
  }

 private:
  static GeluApproximate parse(std::string_view a) {
    if (a == "none") return GeluApproximate::none;
    if (a == "tanh") return GeluApproximate::tanh;
    throw std::invalid_argument("GELU: approximate must be \"none\" or \"tanh\", got \"" + std::string(a) + "\"");
  }
};

// nn.Tanh: a recording forward saves its output y, since the derivative is 1 - y^2 (BERT's pooler).
template <floating_element T>
class Tanh : public Module<T> {
 public:
  std::string type_name() const override { return "Tanh"; }

  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    auto y = eigenformer::tanh(x);
    if (this->records_for_backward())
      this->save_for_backward(Context{y.reshape(Shape<1>{y.numel()}), std::vector<index_t>(y.shape().begin(), y.shape().end())});
    return y;
  }

  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>("Tanh");
    detail::check_grad_shape("Tanh.backward", grad_output.shape(), ctx.shape);
    const auto y = ctx.y.view(grad_output.shape());
    return grad_output * (1.0 - y * y);
  }

 private:
  struct Context {
    Tensor<T, 1> y;  // the forward output, flat
    std::vector<index_t> shape;
  };
};

// nn.Softmax(dim): a recording forward saves its output y; backward is y * (g - sum(g * y, dim)).
// A slice that is entirely -inf gives zeros (eigenformer's softmax), and so does its gradient.
template <floating_element T>
class Softmax : public Module<T> {
 public:
  explicit Softmax(index_t dim = -1) : dim_(dim) {}

  index_t dim() const noexcept { return dim_; }

  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }

  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    auto y = softmax(x, dim_);
    if (this->records_for_backward())
      this->save_for_backward(Context{y.view(Shape<1>{y.numel()}), std::vector<index_t>(y.shape().begin(), y.shape().end())});
    return y;
  }

  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>("Softmax");
    detail::check_grad_shape("Softmax.backward", grad_output.shape(), ctx.shape);
    return functional::softmax_backward(grad_output, ctx.y.view(grad_output.shape()), dim_);
  }

 private:
  struct Context {
    Tensor<T, 1> y;  // the forward output, flat
    std::vector<index_t> shape;
  };
  index_t dim_;
};

}  // namespace eigenformer::nn
