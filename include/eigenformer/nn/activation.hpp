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

namespace functional {

namespace detail {
template <floating_element T>
T gelu_erf(T x) {
  const T alpha = static_cast<T>(std::numbers::sqrt2 / 2);  // 1/sqrt(2)
  return x * T(0.5) * (T(1) + std::erf(x * alpha));
}
template <floating_element T>
T gelu_erf_grad(T x) {
  const T alpha = static_cast<T>(std::numbers::sqrt2 / 2);
  const T beta = static_cast<T>(std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2);  // 1/sqrt(2 pi)
  const T cdf = T(0.5) * (T(1) + std::erf(x * alpha));
  const T pdf = std::exp(T(-0.5) * x * x) * beta;
  return cdf + x * pdf;
}
template <floating_element T>
T gelu_tanh(T x) {
  const T beta = static_cast<T>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
  const T kappa = T(0.044715);
  const T inner = beta * (x + kappa * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}
template <floating_element T>
T gelu_tanh_grad(T x) {
  const T beta = static_cast<T>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
  const T kappa = T(0.044715);
  const T x_sq = x * x;
  const T t = std::tanh(beta * (x + kappa * x_sq * x));
  const T sech2 = T(1) - t * t;
  // Where tanh has saturated the second term is 0 (PyTorch gives 0 * inf = NaN once x^2 overflows).
  const T right = sech2 == T(0) ? T(0) : T(0.5) * x * sech2 * beta * (T(1) + T(3) * kappa * x_sq);
  return T(0.5) * (T(1) + t) + right;
}
template <floating_element T>
T relu(T x) {
  return (x > T(0) || x != x) ? x : T(0);  // NaN propagates, as torch.relu
}
template <floating_element T>
T relu_grad(T x) {
  return x > T(0) ? T(1) : T(0);  // threshold_backward: the subgradient at 0 is 0
}

template <floating_element T>
T activate(ActivationKind k, T x) {
  switch (k) {
    case ActivationKind::relu: return relu(x);
    case ActivationKind::gelu: return gelu_erf(x);
    case ActivationKind::gelu_tanh: return gelu_tanh(x);
  }
  return x;
}
template <floating_element T>
T activate_grad(ActivationKind k, T x) {
  switch (k) {
    case ActivationKind::relu: return relu_grad(x);
    case ActivationKind::gelu: return gelu_erf_grad(x);
    case ActivationKind::gelu_tanh: return gelu_tanh_grad(x);
  }
  return T(1);
}
}  // namespace detail

// The activation applied element-wise (any shape, any strides; the result is contiguous).
template <floating_element T, std::size_t R>
Tensor<T, R> activation(const Tensor<T, R>& x, ActivationKind kind) {
  return eigenformer::detail::scalar_unary(x, [kind](T v) { return detail::activate(kind, v); });
}

// grad_output * f'(x): the gradient of the input from the forward's input x.
template <floating_element T, std::size_t R>
Tensor<T, R> activation_backward(const Tensor<T, R>& grad_output, const Tensor<T, R>& x, ActivationKind kind) {
  nn::detail::check_grad_shape("activation_backward", grad_output.shape(), x.shape());
  return eigenformer::detail::broadcast_map<T>(
      "activation_backward", [kind](T g, T v) { return g * detail::activate_grad(kind, v); }, grad_output, x);
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
// Training-mode forward caches the input; backward returns grad_output * f'(x).
template <floating_element T>
class Activation : public Module<T> {
 public:
  explicit Activation(ActivationKind kind = ActivationKind::gelu) : kind_(kind) {}
  explicit Activation(std::string_view name) : kind_(activation_kind(name)) {}

  ActivationKind kind() const noexcept { return kind_; }

  // (...) -> (...)
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    if (has_cache_) cached_input_ = Tensor<T, 1>();  // a stale cache never outlives a newer forward
    has_cache_ = false;
    if (this->is_training()) {
      cached_input_ = x.reshape(Shape<1>{x.numel()});
      cached_shape_.assign(x.shape().begin(), x.shape().end());
      has_cache_ = true;
    }
    return functional::activation(x, kind_);
  }

  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    if (!has_cache_) Module<T>::throw_no_cache(layer_name());
    const auto cached = std::exchange(cached_input_, Tensor<T, 1>());
    has_cache_ = false;
    detail::check_grad_shape((std::string(layer_name()) + ".backward").c_str(), grad_output.shape(), cached_shape_);
    const auto x = cached.view(grad_output.shape());
    return functional::activation_backward(grad_output, x, kind_);
  }

  void collect_parameters(const std::string&, ParameterList<T>&) override {}

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
  ActivationKind kind_;
  // The forward input, flat; training mode only. (A flag rather than std::optional: GCC 12 warns
  // -Wmaybe-uninitialized when a module holding an empty optional<Tensor> is moved into a Sequential.)
  Tensor<T, 1> cached_input_;
  bool has_cache_ = false;
  std::vector<index_t> cached_shape_;
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

// nn.Softmax(dim): forward caches its output y in training mode; backward is y * (g - sum(g * y, dim)).
// A slice that is entirely -inf gives zeros (eigenformer's softmax), and so does its gradient.
template <floating_element T>
class Softmax : public Module<T> {
 public:
  explicit Softmax(index_t dim = -1) : dim_(dim) {}

  index_t dim() const noexcept { return dim_; }

  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    auto y = softmax(x, dim_);
    if (has_cache_) cached_output_ = Tensor<T, 1>();
    has_cache_ = false;
    if (this->is_training()) {
      cached_output_ = y.view(Shape<1>{y.numel()});
      cached_shape_.assign(y.shape().begin(), y.shape().end());
      has_cache_ = true;
    }
    return y;
  }

  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    if (!has_cache_) Module<T>::throw_no_cache("Softmax");
    const auto cached = std::exchange(cached_output_, Tensor<T, 1>());
    has_cache_ = false;
    detail::check_grad_shape("Softmax.backward", grad_output.shape(), cached_shape_);
    const auto y = cached.view(grad_output.shape());
    return functional::softmax_backward(grad_output, y, dim_);
  }

  void collect_parameters(const std::string&, ParameterList<T>&) override {}

 private:
  index_t dim_;
  Tensor<T, 1> cached_output_;  // the forward output, flat; training mode only (see Activation)
  bool has_cache_ = false;
  std::vector<index_t> cached_shape_;
};

}  // namespace eigenformer::nn
