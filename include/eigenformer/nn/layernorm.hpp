// nn.LayerNorm over the last dim: y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased
// variance (divide by C) of each row, as PyTorch computes it.
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "eigenformer/nn/detail/checks.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/vector_math.hpp"

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

  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override {
    return "(" + std::to_string(size_) + ",), eps=" + this->py_float(eps_) +
           ", elementwise_affine=" + this->py_bool(weight.has_value());
  }
  void register_members(Members<T>& m) override {
    m.parameter("weight", weight);
    m.parameter("bias", bias);
  }

  // (..., C) -> (..., C). A recording forward saves the input (a handle) and each row's mean and
  // rstd = 1 / sqrt(var + eps), which is what PyTorch's layer_norm saves for its backward.
  template <std::size_t R>
  Tensor<T, R> forward(const Tensor<T, R>& x) const {
    static_assert(R >= 1, "LayerNorm.forward: the input needs at least one dim (the normalized one)");
    if (x.shape()[R - 1] != size_)
      throw shape_error("LayerNorm.forward: input " + shape_string(x.shape()) + " does not end in normalized_shape [" +
                        std::to_string(size_) + "] (the weight's shape)");
    const index_t n = x.numel() / size_, c = size_;
    const auto xc = x.reshape(Shape<2>{n, c});  // (N, C), contiguous
    auto y = Tensor<T, 2>::empty({n, c});
    // The row statistics are kept only for a recording forward's backward; inference skips the two buffers.
    const bool record = this->records_for_backward();
    std::optional<Tensor<T, 1>> mean, rstd;
    if (record) {
      mean = Tensor<T, 1>::empty({n});
      rstd = Tensor<T, 1>::empty({n});
    }
    T* mean_out = record ? mean->data() : nullptr;
    T* rstd_out = record ? rstd->data() : nullptr;
    const Kernel* kernel = row_kernel();
    backend::parallel_for(n, row_grain(c), [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i)
        normalize_row(kernel, xc.data() + i * c, y.data() + i * c, mean_out ? mean_out + i : nullptr,
                      rstd_out ? rstd_out + i : nullptr);
    });
    if (record)
      this->save_for_backward(Context{xc, *mean, *rstd, std::vector<index_t>(x.shape().begin(), x.shape().end())});
    return y.view(x.shape());
  }

  // The residual connection and this layer in one: x += residual in place, then forward(x) -- the post-LN
  // block's LayerNorm(sublayer + input) and a pre-LN block's h = x + sublayer, ln(h), with x the sublayer's
  // fresh output. Inference does it in one pass over each row (the sum, then its statistics while the row
  // is in cache); the sum is rounded to T before the statistics, as the separate add would, so the result
  // is the same bits as `x += residual; forward(x)`, which is what a recording forward runs. Throws
  // shape_error when the shapes differ.
  template <std::size_t R>
  Tensor<T, R> add_forward(Tensor<T, R>& x, const Tensor<T, R>& residual) const {
    return add_forward_to(x, residual, false);
  }
  // The same for an x the caller gives up (post-LN: LayerNorm(sublayer + input), the sum needed no more): in
  // inference the result is written over x's rows, which the sum has just brought into cache, instead of
  // into a fresh tensor; a view passed as x has the storage it views overwritten, as the sum already is. Same
  // bits. BERT-base forwards with packed weights on an Intel Xeon (bench/ab.py, 6 rounds a set): batch 1
  // 0.963x and 0.991x the time on 2 threads, 0.975x on 1; batch 8 0.987x and 0.981x.
  template <std::size_t R>
  Tensor<T, R> add_forward(Tensor<T, R>&& x, const Tensor<T, R>& residual) const {
    return add_forward_to(x, residual, true);
  }

  // With xhat = (x - mean) * rstd and g = grad_output * weight, per row:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight += sum grad_output * xhat,  dbias += sum grad_output.
  template <std::size_t R>
  Tensor<T, R> backward(const Tensor<T, R>& grad_output) {
    const auto ctx = this->template take_saved<Context>("LayerNorm");
    detail::check_grad_shape("LayerNorm.backward", grad_output.shape(), ctx.shape);
    const index_t n = ctx.x.shape()[0], c = size_;
    const auto g2 = grad_output.reshape(Shape<2>{n, c});
    auto dx = Tensor<T, 2>::empty({n, c});
    const T* w = weight ? weight->data.data() : nullptr;
    const Kernel* kernel = row_kernel();
    // Rows are independent: one chunk of rows per task.
    backend::parallel_for(n, row_grain(c), [&](index_t begin, index_t end) {
      if constexpr (std::is_same_v<T, float>)
        if (kernel) {
          for (index_t i = begin; i < end; ++i)
            kernel->layer_norm_backward(ctx.x.data() + i * c, g2.data() + i * c, w, ctx.mean(i), ctx.rstd(i),
                                        dx.data() + i * c, c);
          return;
        }
      std::vector<T> xhat(static_cast<std::size_t>(c)), g(static_cast<std::size_t>(c));
      for (index_t i = begin; i < end; ++i) {
        const T* xr = ctx.x.data() + i * c;
        const T* gr = g2.data() + i * c;
        const T mu = ctx.mean(i), rs = ctx.rstd(i);
        for (index_t j = 0; j < c; ++j) {
          const auto k = static_cast<std::size_t>(j);
          xhat[k] = (xr[j] - mu) * rs;
          g[k] = w ? gr[j] * w[j] : gr[j];
        }
        const T* gk = g.data();
        const T* xk = xhat.data();
        const double sum_g = backend::sum_in_double(c, [gk](index_t j) { return static_cast<double>(gk[j]); });
        const double sum_gx = backend::sum_in_double(
            c, [gk, xk](index_t j) { return static_cast<double>(gk[j]) * static_cast<double>(xk[j]); });
        const T mean_g = static_cast<T>(sum_g / static_cast<double>(c));
        const T mean_gx = static_cast<T>(sum_gx / static_cast<double>(c));
        T* dr = dx.data() + i * c;
        for (index_t j = 0; j < c; ++j) {
          const auto k = static_cast<std::size_t>(j);
          dr[j] = rs * (g[k] - mean_g - xhat[k] * mean_gx);
        }
      }
    });
    // The parameter gradients sum over rows: each column is summed whole (in double, in row order) by
    // one chunk, so the sums do not depend on how rows or columns are split between threads. Rows outer,
    // a chunk's columns inner: the running sums of neighbouring columns are independent, so they vectorise.
    const bool want_dw = weight && weight->requires_grad();
    const bool want_db = bias && bias->requires_grad();
    if (want_dw || want_db) {
      T* dw = want_dw ? weight->grad_buffer().data() : nullptr;
      T* db = want_db ? bias->grad_buffer().data() : nullptr;
      backend::parallel_for(c, backend::column_reduction_grain(c, n), [&](index_t begin, index_t end) {
        const auto width = static_cast<std::size_t>(end - begin);
        std::vector<double> dw_acc(dw ? width : 0), db_acc(db ? width : 0);
        for (index_t i = 0; i < n; ++i) {
          if constexpr (std::is_same_v<T, float>)
            if (kernel) {
              kernel->layer_norm_param_grads(g2.data() + i * c + begin, ctx.x.data() + i * c + begin, ctx.mean(i),
                                             ctx.rstd(i), dw ? dw_acc.data() : nullptr, db ? db_acc.data() : nullptr,
                                             end - begin);
              continue;
            }
          const T* gr = g2.data() + i * c + begin;
          const T* xr = ctx.x.data() + i * c + begin;
          const T mu = ctx.mean(i), rs = ctx.rstd(i);
          if (dw)
            for (std::size_t j = 0; j < width; ++j) dw_acc[j] += static_cast<double>(gr[j]) * ((xr[j] - mu) * rs);
          if (db)
            for (std::size_t j = 0; j < width; ++j) db_acc[j] += gr[j];
        }
        for (std::size_t j = 0; j < width; ++j) {
          if (dw) dw[begin + static_cast<index_t>(j)] += static_cast<T>(dw_acc[j]);
          if (db) db[begin + static_cast<index_t>(j)] += static_cast<T>(db_acc[j]);
        }
      });
    }
    return dx.view(grad_output.shape());
  }

 private:
  struct Context {
    Tensor<T, 2> x;     // (N, C) input
    Tensor<T, 1> mean;  // (N)
    Tensor<T, 1> rstd;  // (N)
    std::vector<index_t> shape;
  };
  // Float rows go to the element-wise kernels where this CPU has them (tensor/vector_math.hpp): the same
  // operations in the same order as the loops here, so the same bits (and the same on AVX-512 and AVX2),
  // where the compiler would vectorise these loops only as far as the build's flags allow (SSE2 without
  // any). Null for double, and under EIGENFORMER_MAX_CPU_ISA=baseline.
  using Kernel = backend::detail::VectorMathKernel;
  static const Kernel* row_kernel() { return backend::detail::vector_math_kernel_for_type<T>(); }

  // add_forward's work; over_x: the result written over x's rows (the rvalue form) rather than a fresh tensor.
  template <std::size_t R>
  Tensor<T, R> add_forward_to(Tensor<T, R>& x, const Tensor<T, R>& residual, bool over_x) const {
    if (x.shape() != residual.shape())
      throw shape_error("LayerNorm.add_forward: input " + shape_string(x.shape()) + " and residual " +
                        shape_string(residual.shape()) + " differ in shape");
    if (this->records_for_backward() || !x.is_contiguous() || !residual.is_contiguous() || x.shape()[R - 1] != size_) {
      using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
      if (x.is_contiguous() && residual.is_contiguous())
        Eigen::Map<Arr>(x.data(), x.numel()) += Eigen::Map<const Arr>(residual.data(), residual.numel());
      else
        x = x + residual;
      return forward(x);
    }
    const index_t n = x.numel() / size_, c = size_;
    // normalize_row reads a row whole before it writes any of it, so y may be x.
    auto y = over_x ? x : Tensor<T, R>::empty(x.shape());
    const Kernel* kernel = row_kernel();
    backend::parallel_for(n, row_grain(c), [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) {
        T* xr = x.data() + i * c;
        const T* rr = residual.data() + i * c;
        for (index_t j = 0; j < c; ++j) xr[j] += rr[j];
        normalize_row(kernel, xr, y.data() + i * c, nullptr, nullptr);
      }
    });
    return y;
  }

  // y = (x - mean) * rstd * weight + bias for one row of C values; mean and rstd stored when asked for.
  void normalize_row(const Kernel* kernel, const T* xr, T* yr, T* mean_out, T* rstd_out) const {
    const index_t c = size_;
    // Two passes in double: the mean, then the mean squared deviation (no cancellation for large means).
    double m = 0, v = 0;
    bool kernel_row = false;
    if constexpr (std::is_same_v<T, float>)
      if (kernel) {
        m = kernel->sum_double(xr, c) / static_cast<double>(c);
        v = kernel->sum_squared_deviation(xr, c, m) / static_cast<double>(c);
        kernel_row = true;
      }
    if (!kernel_row) {
      m = backend::sum_in_double(c, [xr](index_t j) { return static_cast<double>(xr[j]); }) / static_cast<double>(c);
      v = backend::sum_in_double(c, [xr, m](index_t j) {
            const double d = static_cast<double>(xr[j]) - m;
            return d * d;
          }) / static_cast<double>(c);
    }
    const T mu = static_cast<T>(m);
    const T rs = static_cast<T>(1.0 / std::sqrt(v + eps_));
    if (mean_out) {
      *mean_out = mu;
      *rstd_out = rs;
    }
    const T* w = weight ? weight->data.data() : nullptr;
    const T* b = bias ? bias->data.data() : nullptr;
    if constexpr (std::is_same_v<T, float>)
      if (kernel) return kernel->layer_norm(xr, yr, c, mu, rs, w, b);
    for (index_t j = 0; j < c; ++j) {
      const T xhat = (xr[j] - mu) * rs;
      yr[j] = (w ? xhat * w[j] : xhat) + (b ? b[j] : T(0));
    }
  }
  // Rows per chunk: about 16k elements, so a small batch stays in one chunk.
  static index_t row_grain(index_t c) { return std::max<index_t>(1, 16384 / std::max<index_t>(c, 1)); }

  index_t size_;
  double eps_;
};

}  // namespace eigenformer::nn
