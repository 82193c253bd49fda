// nn.Dropout: in training mode zeroes each element with probability p and scales survivors by 1/(1-p);
// in eval mode (or p = 0) it is the identity and draws nothing.
#pragma once

#include <string>

#include "eigenformer/nn/module.hpp"
#include "eigenformer/random.hpp"

namespace eigenformer::nn {

template <floating_element T>
class Dropout : public Module<T> {
 public:
  // Masks are drawn at forward time from eigenformer::current_generator() (wrap the forward in a
  // GeneratorGuard to use a generator of your own).
  explicit Dropout(double p = 0.5) : p_(p) {
    if (!(p >= 0.0 && p <= 1.0))
      throw std::invalid_argument("Dropout: probability has to be between 0 and 1, but got " + std::to_string(p));
  }

  double p() const noexcept { return p_; }

  std::string type_name() const override { return "Dropout"; }
  // eigenformer never drops in place, so inplace is always False.
  std::string extra_repr() const override { return "p=" + this->py_float(p_) + ", inplace=False"; }

  // Same draws as PyTorch's CPU dropout: mask = bernoulli_(1 - p) over the input's elements in row-major
  // order, mask /= (1 - p), out = x * mask. p = 1 gives zeros without drawing, as in PyTorch. Dropping
  // depends on the training flag alone (torch.inference_mode in training mode still drops); saving the
  // mask also needs recording to be on.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    const bool record = this->records_for_backward();
    if (!this->is_training() || p_ == 0.0 || x.numel() == 0) {
      if (record) this->save_for_backward(Context{});  // the identity: backward passes the gradient through
      return x;
    }
    auto mask = Tensor<T, R>::empty(x.shape());
    if (p_ == 1.0) {
      mask.zero_();
    } else {
      // bernoulli_(1 - p) then the scaling, in one pass: a kept element is 1 * scale = scale exactly.
      const T scale = T(1) / static_cast<T>(1.0 - p_);
      eigenformer::detail::bernoulli_fill(mask.data(), mask.numel(), 1.0 - p_, scale, current_generator());
    }
    if (record) this->save_for_backward(Context{mask.view(Shape<1>{mask.numel()})});
    return mul(x, mask);
  }

  // grad_input = grad_output * mask (the scaled mask of the recording forward).
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto mask = this->template take_saved<Context>("Dropout").mask;
    if (mask.numel() == 0) return grad_output;  // the forward was the identity
    if (mask.numel() != grad_output.numel())
      throw shape_error("Dropout.backward: grad_output " + shape_string(grad_output.shape()) + " has " +
                        std::to_string(grad_output.numel()) + " elements, the forward input had " +
                        std::to_string(mask.numel()));
    return mul(grad_output, mask.view(grad_output.shape()));
  }

 private:
  struct Context {
    Tensor<T, 1> mask;  // flat, scaled; empty when the forward was the identity
  };
  double p_;
};

}  // namespace eigenformer::nn
