// Loss functions with their backward passes (torch.nn's losses, so they live in eigenformer::nn).
#pragma once

#include <limits>
#include <optional>
#include <vector>

#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

// nn.MSELoss() with reduction "mean": loss = mean((pred - target)^2) over all elements.
// forward(pred, target) returns a 0-d tensor; in training mode it caches pred - target, and backward()
// returns dloss/dpred = 2 (pred - target) / N, scaled by the gradient of the loss (1 by default).
// The target is not differentiated (as with a target that does not require grad).
template <floating_element T>
class MSELoss : public Module<T> {
 public:
  template <std::size_t R>
  Tensor<T, 0> forward(const Tensor<T, R>& pred, const Tensor<T, R>& target) {
    if (pred.shape() != target.shape())
      throw shape_error("MSELoss.forward: input " + shape_string(pred.shape()) + " and target " +
                        shape_string(target.shape()) + " differ in shape");
    const auto diff = sub(pred, target);
    const index_t n = diff.numel();
    // Accumulated in double: the mean of many float squares keeps its digits.
    double acc = 0;
    for (const T* p = diff.data(); p != diff.data() + n; ++p) acc += static_cast<double>(*p) * *p;
    cached_diff_.reset();
    if (this->is_training()) {
      cached_diff_ = diff.view(Shape<1>{n});
      cached_shape_.assign(pred.shape().begin(), pred.shape().end());
    }
    return Tensor<T, 0>(static_cast<T>(n == 0 ? std::numeric_limits<double>::quiet_NaN() : acc / n));
  }

  // dloss/dpred, shaped like pred. R is the rank of the forward's pred (checked): backward() for the usual
  // (N, out) predictions, backward<3>() for (B, T, out).
  template <std::size_t R = 2>
  Tensor<T, R> backward(T grad_output = T(1)) {
    if (!cached_diff_) Module<T>::throw_no_cache("MSELoss");
    const auto diff = *cached_diff_;
    cached_diff_.reset();
    if (cached_shape_.size() != R)
      throw shape_error("MSELoss.backward<" + std::to_string(R) + ">: the forward input " +
                        shape_string(cached_shape_) + " has rank " + std::to_string(cached_shape_.size()));
    const auto scale = static_cast<double>(grad_output) * 2.0 / static_cast<double>(diff.numel());
    Shape<R> shape{};
    for (std::size_t i = 0; i < R; ++i) shape[i] = cached_shape_[i];
    return (diff * scale).view(shape);
  }

  void collect_parameters(const std::string&, ParameterList<T>&) override {}

 private:
  std::optional<Tensor<T, 1>> cached_diff_;  // pred - target, flat; training mode only
  std::vector<index_t> cached_shape_;
};

}  // namespace eigenformer::nn
