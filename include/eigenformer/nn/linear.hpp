// nn.Linear: y = x W^T + b over the last dim, with weight stored (out_features, in_features) as in
// PyTorch so checkpoints load without transposes.
#pragma once

#include <optional>

#include "eigenformer/nn/init.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

template <floating_element T>
class Linear : public Module<T> {
 public:
  // Initialised exactly as nn.Linear(in_features, out_features, bias): weight by kaiming_uniform_(a=sqrt(5)),
  // then bias, both U(-1/sqrt(in), 1/sqrt(in)), drawn from `gen` in that order.
  Linear(index_t in_features, index_t out_features, bool bias = true, Generator& gen = default_generator())
      : in_features_(in_features), out_features_(out_features) {
    if (in_features <= 0 || out_features <= 0)
      throw std::invalid_argument("Linear: in_features and out_features must be positive, got " +
                                  std::to_string(in_features) + " and " + std::to_string(out_features));
    weight = Parameter<T, 2>(Tensor<T, 2>::empty({out_features, in_features}));
    if (bias) {
      this->bias = Parameter<T, 1>(Tensor<T, 1>::empty({out_features}));
      init::linear_(weight.data, &this->bias->data, gen);
    } else {
      init::linear_<T>(weight.data, nullptr, gen);
    }
  }

  Parameter<T, 2> weight;                 // (out, in)
  std::optional<Parameter<T, 1>> bias;    // (out)

  index_t in_features() const noexcept { return in_features_; }
  index_t out_features() const noexcept { return out_features_; }

  // (..., in) -> (..., out). Caches the input (a handle, not a copy) in training mode.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    static_assert(R >= 1, "Linear.forward: the input needs at least one dim (the features)");
    if (x.shape()[R - 1] != in_features_)
      throw shape_error("Linear.forward: input " + shape_string(x.shape()) + " x weight " +
                        shape_string(weight.shape()) + ": last dim of the input must be in_features " +
                        std::to_string(in_features_));
    const auto x2 = x.reshape(Shape<2>{x.numel() / in_features_, in_features_});  // (N, in)
    auto y = matmul(x2, weight.data.t());                                         // (N, out)
    if (bias) as_matrix(y).rowwise() += as_matrix(bias->data.view(Shape<2>{1, out_features_})).row(0);
    cached_input_.reset();  // an eval-mode forward leaves nothing for backward, not an older training cache
    if (this->is_training()) {
      cached_input_ = x2;
      cached_shape_.assign(x.shape().begin(), x.shape().end());
    }
    Shape<R> out_shape = x.shape();
    out_shape[R - 1] = out_features_;
    return y.view(out_shape);
  }

  // dL/dx = g W; accumulates dL/dW += g^T x and dL/db += sum of g over all leading dims.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    if (!cached_input_) Module<T>::throw_no_cache("Linear");
    const auto x2 = *cached_input_;
    cached_input_.reset();
    const index_t n = x2.shape()[0];
    if (grad_output.shape()[R - 1] != out_features_ || grad_output.numel() != n * out_features_ ||
        cached_shape_.size() != R)
      throw shape_error("Linear.backward: grad_output " + shape_string(grad_output.shape()) +
                        " does not match the forward output for input " + shape_string(cached_shape_));
    const auto g = grad_output.reshape(Shape<2>{n, out_features_});  // (N, out)
    as_matrix(weight.grad).noalias() += as_matrix(g).transpose() * as_matrix(x2);
    if (bias) {
      auto bias_grad = bias->grad.view(Shape<2>{1, out_features_});
      as_matrix(bias_grad).row(0) += as_matrix(g).colwise().sum();
    }
    Shape<R> in_shape{};
    for (std::size_t i = 0; i < R; ++i) in_shape[i] = cached_shape_[i];
    return matmul(g, weight.data).view(in_shape);
  }

  void collect_parameters(const std::string& prefix, ParameterList<T>& out) override {
    add_parameter(out, prefix, "weight", weight);
    if (bias) add_parameter(out, prefix, "bias", *bias);
  }

 private:
  index_t in_features_, out_features_;
  std::optional<Tensor<T, 2>> cached_input_;  // (N, in), training mode only
  std::vector<index_t> cached_shape_;
};

}  // namespace eigenformer::nn
