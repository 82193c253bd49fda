// Parameter initialisers with torch.nn's defaults, drawing from the PyTorch-exact stream so a model
// built after manual_seed(s) starts from the same weights as its PyTorch twin.
#pragma once

#include <cmath>
#include <optional>

#include "eigenformer/random.hpp"

namespace eigenformer::nn {

// Construction tag: a layer's parameters start as zeros and nothing is drawn from any generator
// (torch.nn.utils.skip_init), for layers whose values come from a checkpoint next.
struct skip_init_t {
  explicit skip_init_t() = default;
};
inline constexpr skip_init_t skip_init{};
}  // namespace eigenformer::nn

namespace eigenformer::nn::init {

// torch.nn.init.calculate_gain("leaky_relu", a).
inline double leaky_relu_gain(double a) { return std::sqrt(2.0 / (1.0 + a * a)); }

// U(-bound, bound) with bound = gain * sqrt(3 / fan_in), fan_in = size of dim 1 (torch.nn.init.kaiming_uniform_
// for a weight of shape (out, in)). Computed in double exactly as PyTorch's Python code does, so the
// float bound rounds the same way.
template <floating_element T>
Tensor<T, 2>& kaiming_uniform_(Tensor<T, 2>& w, double a = 0.0, Generator& gen = default_generator()) {
  const auto fan_in = static_cast<double>(w.shape()[1]);
  if (fan_in == 0.0) return w;  // PyTorch warns and leaves the empty tensor alone
  const double stdv = leaky_relu_gain(a) / std::sqrt(fan_in);
  const double bound = std::sqrt(3.0) * stdv;
  return uniform_(w, -bound, bound, gen);
}

// nn.Linear's reset_parameters: weight (out, in) by kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in),
// 1/sqrt(in)), then the bias (if any) from U(-1/sqrt(in), 1/sqrt(in)) — in that order.
template <floating_element T>
void linear_(Tensor<T, 2>& weight, Tensor<T, 1>* bias = nullptr, Generator& gen = default_generator()) {
  kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (bias != nullptr) {
    const auto fan_in = static_cast<double>(weight.shape()[1]);
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(fan_in) : 0.0;
    uniform_(*bias, -bound, bound, gen);
  }
}

// nn.Embedding's reset_parameters: N(0, 1), then the padding_idx row (if any) set to zero.
template <floating_element T>
void embedding_(Tensor<T, 2>& weight, std::optional<index_t> padding_idx = std::nullopt,
                Generator& gen = default_generator()) {
  normal_(weight, 0.0, 1.0, gen);
  if (padding_idx) {
    const index_t n = weight.shape()[0];
    index_t row = *padding_idx < 0 ? *padding_idx + n : *padding_idx;
    if (row < 0 || row >= n)
      throw std::out_of_range("embedding init: padding_idx " + std::to_string(*padding_idx) +
                              " is out of range for " + std::to_string(n) + " embeddings");
    weight.select(0, row).zero_();
  }
}

}  // namespace eigenformer::nn::init
