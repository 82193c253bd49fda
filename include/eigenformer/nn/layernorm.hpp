// nn.LayerNorm over the last dim: y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased
// variance (divide by C) of each row, as PyTorch computes it.
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/module.hpp"

namespace eigenformer::nn {

template <floating_element T>
class LayerNorm : public Module<T> {
 public:
  // normalized_shape is the size C of the last dim. With elementwise_affine, weight starts at ones and bias
  // at zeros (no random draws, as in PyTorch); without it the layer has no parameters.
  explicit LayerNorm(index_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true)
      : size_(normalized_shape), eps_(eps) {
    if (normalized_shape <= 0)
      throw std::invalid_argument("LayerNorm: normalized_shape must be positive, got " +
                                  std::to_string(normalized_shape));
    if (!(eps >= 0.0)) throw std::invalid_argument("LayerNorm: eps must be >= 0, got " + std::to_string(eps));
    if (elementwise_affine) {
      weight = Parameter<T, 1>(ones<T>(Shape<1>{size_}));
      bias = Parameter<T, 1>(zeros<T>(Shape<1>{size_}));
    }
  }

  std::optional<Parameter<T, 1>> weight;  // (C), gamma
  std::optional<Parameter<T, 1>> bias;    // (C), beta

  index_t normalized_shape() const noexcept { return size_; }
  double eps() const noexcept { return eps_; }

  // (..., C) -> (..., C). Training mode caches the input (a handle) and each row's mean and
  // rstd = 1 / sqrt(var + eps), which is what PyTorch's layer_norm saves for its backward.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) {
    static_assert(R >= 1, "LayerNorm.forward: the input needs at least one dim (the normalized one)");
    if (x.shape()[R - 1] != size_)
      throw shape_error("LayerNorm.forward: input " + shape_string(x.shape()) + " does not end in normalized_shape [" +
                        std::to_string(size_) + "] (the weight's shape)");
    const index_t n = x.numel() / size_, c = size_;
    const auto xc = x.reshape(Shape<2>{n, c});  // (N, C), contiguous
    auto y = Tensor<T, 2>::empty({n, c});
    auto mean = Tensor<T, 1>::empty({n});
    auto rstd = Tensor<T, 1>::empty({n});
    const T* w = weight ? weight->data.data() : nullptr;
    const T* b = bias ? bias->data.data() : nullptr;
    for (index_t i = 0; i < n; ++i) {
      const T* xr = xc.data() + i * c;
      // Two passes in double: the mean, then the mean squared deviation (no cancellation for large means).
      double m = 0;
      for (index_t j = 0; j < c; ++j) m += xr[j];
      m /= static_cast<double>(c);
      double v = 0;
      for (index_t j = 0; j < c; ++j) v += (xr[j] - m) * (xr[j] - m);
      v /= static_cast<double>(c);
      const T mu = static_cast<T>(m);
      const T rs = static_cast<T>(1.0 / std::sqrt(v + eps_));
      mean(i) = mu;
      rstd(i) = rs;
      T* yr = y.data() + i * c;
      for (index_t j = 0; j < c; ++j) {
        const T xhat = (xr[j] - mu) * rs;
        yr[j] = (w ? xhat * w[j] : xhat) + (b ? b[j] : T(0));
      }
    }
    cache_.reset();
    if (this->is_training()) {
      cache_ = Cache{xc, mean, rstd, std::vector<index_t>(x.shape().begin(), x.shape().end())};
    }
    return y.view(x.shape());
  }

  // With xhat = (x - mean) * rstd and g = grad_output * weight, per row:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight += sum grad_output * xhat,  dbias += sum grad_output.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    if (!cache_) Module<T>::throw_no_cache("LayerNorm");
    const Cache cache = std::move(*cache_);
    cache_.reset();
    detail::check_grad_shape("LayerNorm.backward", grad_output.shape(), cache.shape);
    const index_t n = cache.x.shape()[0], c = size_;
    const auto g2 = grad_output.reshape(Shape<2>{n, c});
    auto dx = Tensor<T, 2>::empty({n, c});
    const T* w = weight ? weight->data.data() : nullptr;
    T* dw = weight ? weight->grad.data() : nullptr;
    T* db = bias ? bias->grad.data() : nullptr;
    std::vector<double> dw_acc(w ? static_cast<std::size_t>(c) : 0, 0.0), db_acc(db ? static_cast<std::size_t>(c) : 0, 0.0);
    std::vector<T> xhat(static_cast<std::size_t>(c)), g(static_cast<std::size_t>(c));
    for (index_t i = 0; i < n; ++i) {
      const T* xr = cache.x.data() + i * c;
      const T* gr = g2.data() + i * c;
      const T mu = cache.mean(i), rs = cache.rstd(i);
      double sum_g = 0, sum_gx = 0;
      for (index_t j = 0; j < c; ++j) {
        const auto k = static_cast<std::size_t>(j);
        xhat[k] = (xr[j] - mu) * rs;
        g[k] = w ? gr[j] * w[j] : gr[j];
        sum_g += g[k];
        sum_gx += static_cast<double>(g[k]) * xhat[k];
        if (w) dw_acc[k] += static_cast<double>(gr[j]) * xhat[k];
        if (db) db_acc[k] += gr[j];
      }
      const T mean_g = static_cast<T>(sum_g / static_cast<double>(c));
      const T mean_gx = static_cast<T>(sum_gx / static_cast<double>(c));
      T* dr = dx.data() + i * c;
      for (index_t j = 0; j < c; ++j) {
        const auto k = static_cast<std::size_t>(j);
        dr[j] = rs * (g[k] - mean_g - xhat[k] * mean_gx);
      }
    }
    for (index_t j = 0; j < c; ++j) {
      if (dw) dw[j] += static_cast<T>(dw_acc[static_cast<std::size_t>(j)]);
      if (db) db[j] += static_cast<T>(db_acc[static_cast<std::size_t>(j)]);
    }
    return dx.view(grad_output.shape());
  }

  void collect_parameters(const std::string& prefix, ParameterList<T>& out) override {
    if (weight) add_parameter(out, prefix, "weight", *weight);
    if (bias) add_parameter(out, prefix, "bias", *bias);
  }

 private:
  struct Cache {
    Tensor<T, 2> x;     // (N, C) input
    Tensor<T, 1> mean;  // (N)
    Tensor<T, 1> rstd;  // (N)
    std::vector<index_t> shape;
  };
  index_t size_;
  double eps_;
  std::optional<Cache> cache_;  // training mode only
};

}  // namespace eigenformer::nn
