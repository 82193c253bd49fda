// nn.Dropout: in training mode zeroes each element with probability p and scales survivors by 1/(1-p);
// in eval mode (or p = 0) it is the identity and draws nothing.
#pragma once

#include "eigenformer/nn/module.hpp"
#include "eigenformer/random.hpp"

namespace eigenformer::nn {

template <floating_element T>
class Dropout : public Module<T> {
 public:
  // Masks are drawn from `gen` (the default generator unless given), which must outlive the layer.
  explicit Dropout(double p = 0.5, Generator& gen = default_generator()) : p_(p), gen_(&gen) {
    if (!(p >= 0.0 && p <= 1.0))
      throw std::invalid_argument("Dropout: probability has to be between 0 and 1, but got " + std::to_string(p));
  }

  double p() const noexcept { return p_; }

  // Same draws as PyTorch's CPU dropout: mask = bernoulli_(1 - p) over the input's elements in row-major
  // order, mask /= (1 - p), out = x * mask. p = 1 gives zeros without drawing, as in PyTorch.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    cached_mask_.reset();  // an eval-mode forward leaves nothing for backward, not an older training mask
    if (!this->is_training() || p_ == 0.0 || x.numel() == 0) {
      if (this->is_training()) cached_mask_ = Tensor<T, 1>();  // identity: backward passes the gradient through
      return x;
    }
    auto mask = Tensor<T, R>::empty(x.shape());
    if (p_ == 1.0) {
      mask.zero_();
    } else {
      bernoulli_(mask, 1.0 - p_, *gen_);
      const T scale = T(1) / static_cast<T>(1.0 - p_);
      mask = mask * static_cast<double>(scale);
    }
    cached_mask_ = mask.view(Shape<1>{mask.numel()});
    return mul(x, mask);
  }

  // grad_input = grad_output * mask (the scaled mask of the last training-mode forward).
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    if (!cached_mask_) Module<T>::throw_no_cache("Dropout");
    const auto mask = *cached_mask_;
    cached_mask_.reset();
    if (mask.numel() == 0) return grad_output;  // the forward was the identity
    if (mask.numel() != grad_output.numel())
      throw shape_error("Dropout.backward: grad_output " + shape_string(grad_output.shape()) + " has " +
                        std::to_string(grad_output.numel()) + " elements, the forward input had " +
                        std::to_string(mask.numel()));
    return mul(grad_output, mask.view(grad_output.shape()));
  }

  // The scaled mask of the last training-mode forward (flat), for inspection and tests.
  const std::optional<Tensor<T, 1>>& last_mask() const noexcept { return cached_mask_; }

  void collect_parameters(const std::string&, ParameterList<T>&) override {}

 private:
  double p_;
  Generator* gen_;
  std::optional<Tensor<T, 1>> cached_mask_;
};

}  // namespace eigenformer::nn
