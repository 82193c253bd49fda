// GPT-2's "Conv1D" (Hugging Face transformers.pytorch_utils.Conv1D): a fully connected layer y = x W + b whose
// weight is stored (in_features, out_features), the transpose of nn.Linear's. Despite the name it is no
// convolution; OpenAI's original TensorFlow code used a 1x1 convolution, and Hugging Face kept its weight
// layout so GPT-2 checkpoints load without transposes. eigenformer keeps it for the same reason: a GPT-2
// safetensors tensor maps onto `weight` byte for byte.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "eigenformer/nn/module.hpp"
#include "eigenformer/random.hpp"

namespace eigenformer::nn {

template <floating_element T>
class Conv1D : public Module<T> {
 public:
  // Initialised as Hugging Face's GPT-2 does (_init_weights): weight ~ N(0, weight_std) drawn from `gen`,
  // bias zeros. weight_std = 0 leaves the weight at zeros and draws nothing (for loading checkpoints).
  Conv1D(index_t in_features, index_t out_features, double weight_std = 0.02, Generator& gen = default_generator())
      : in_features_(in_features), out_features_(out_features) {
    if (in_features <= 0 || out_features <= 0)
      throw std::invalid_argument("Conv1D: in_features and out_features must be positive, got " +
                                  std::to_string(in_features) + " and " + std::to_string(out_features));
    weight = Parameter<T, 2>(zeros<T>(Shape<2>{in_features, out_features}));
    bias = Parameter<T, 1>(zeros<T>(Shape<1>{out_features}));
    if (weight_std > 0.0) normal_(weight.data, 0.0, weight_std, gen);
  }

  Parameter<T, 2> weight;  // (in, out): Hugging Face's layout
  Parameter<T, 1> bias;    // (out)

  index_t in_features() const noexcept { return in_features_; }
  index_t out_features() const noexcept { return out_features_; }

  // (..., in) -> (..., out). Training mode caches the input (a handle, not a copy).
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    static_assert(R >= 1, "Conv1D.forward: the input needs at least one dim (the features)");
    if (x.shape()[R - 1] != in_features_)
      throw shape_error("Conv1D.forward: input " + shape_string(x.shape()) + " x weight " +
                        shape_string(weight.shape()) + ": last dim of the input must be in_features " +
                        std::to_string(in_features_));
    const auto x2 = x.reshape(Shape<2>{x.numel() / in_features_, in_features_});  // (N, in)
    auto y = matmul(x2, weight.data);                                             // (N, out)
    as_matrix(y).rowwise() += as_matrix(bias.data.view(Shape<2>{1, out_features_})).row(0);
    cached_input_.reset();  // an eval-mode forward leaves nothing for backward, not an older training cache
    if (this->is_training()) {
      cached_input_ = x2;
      cached_shape_.assign(x.shape().begin(), x.shape().end());
    }
    Shape<R> out_shape = x.shape();
    out_shape[R - 1] = out_features_;
    return y.view(out_shape);
  }

  // dL/dx = g W^T; accumulates dL/dW += x^T g and dL/db += sum of g over all leading dims.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    if (!cached_input_) Module<T>::throw_no_cache("Conv1D");
    const auto x2 = *cached_input_;
    cached_input_.reset();
    const index_t n = x2.shape()[0];
    if (grad_output.shape()[R - 1] != out_features_ || grad_output.numel() != n * out_features_ ||
        cached_shape_.size() != R)
      throw shape_error("Conv1D.backward: grad_output " + shape_string(grad_output.shape()) +
                        " does not match the forward output for input " + shape_string(cached_shape_));
    const auto g = grad_output.reshape(Shape<2>{n, out_features_});  // (N, out)
    as_matrix(weight.grad).noalias() += as_matrix(x2).transpose() * as_matrix(g);
    auto bias_grad = bias.grad.view(Shape<2>{1, out_features_});
    as_matrix(bias_grad).row(0) += as_matrix(g).colwise().sum();
    Shape<R> in_shape{};
    for (std::size_t i = 0; i < R; ++i) in_shape[i] = cached_shape_[i];
    return matmul(g, weight.data.t()).view(in_shape);
  }

  void collect_parameters(const std::string& prefix, ParameterList<T>& out) override {
    add_parameter(out, prefix, "weight", weight);
    add_parameter(out, prefix, "bias", bias);
  }

 private:
  index_t in_features_, out_features_;
  std::optional<Tensor<T, 2>> cached_input_;  // (N, in), training mode only
  std::vector<index_t> cached_shape_;
};

}  // namespace eigenformer::nn
