// Loss functions with their backward passes. They are torch.nn's classes, so they keep the eigenformer::nn
// namespace, but they are part of training, not of a model: nn.hpp does not include this header, train.hpp does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "eigenformer/nn/module.hpp"
#include "eigenformer/tensor/backend.hpp"
#include "eigenformer/tensor/vector_math.hpp"

namespace eigenformer::nn {

// nn.MSELoss() with reduction "mean": loss = mean((pred - target)^2) over all elements.
// forward(pred, target) returns a 0-d tensor; a recording forward saves pred - target, and backward()
// returns dloss/dpred = 2 (pred - target) / N, scaled by the gradient of the loss (1 by default).
// The target is not differentiated (as with a target that does not require grad).
template <floating_element T>
class MSELoss : public Module<T> {
 public:
  std::string type_name() const override { return "MSELoss"; }

  template <std::size_t R>
  Tensor<T, 0> forward(const Tensor<T, R>& pred, const Tensor<T, R>& target) const {
    if (pred.shape() != target.shape())
      throw shape_error("MSELoss.forward: input " + shape_string(pred.shape()) + " and target " +
                        shape_string(target.shape()) + " differ in shape");
    const auto diff = sub(pred, target);
    const index_t n = diff.numel();
    // Accumulated in double: the mean of many float squares keeps its digits.
    double acc = 0;
    for (const T* p = diff.data(); p != diff.data() + n; ++p) acc += static_cast<double>(*p) * *p;
    if (this->records_for_backward())
      this->save_for_backward(Context{diff.view(Shape<1>{n}), std::vector<index_t>(pred.shape().begin(), pred.shape().end())});
    return Tensor<T, 0>(static_cast<T>(n == 0 ? std::numeric_limits<double>::quiet_NaN() : acc / n));
  }

  // dloss/dpred, shaped like pred. R is the rank of the forward's pred (checked): backward() for the usual
  // (N, out) predictions, backward<3>() for (B, T, out).
  template <std::size_t R = 2>
  Tensor<T, R> backward(T grad_output = T(1)) {
    const auto ctx = this->template take_saved<Context>("MSELoss");
    if (ctx.shape.size() != R)
      throw shape_error("MSELoss.backward<" + std::to_string(R) + ">: the forward input " +
                        shape_string(ctx.shape) + " has rank " + std::to_string(ctx.shape.size()));
    const auto scale = static_cast<double>(grad_output) * 2.0 / static_cast<double>(ctx.diff.numel());
    Shape<R> shape{};
    for (std::size_t i = 0; i < R; ++i) shape[i] = ctx.shape[i];
    return (ctx.diff * scale).view(shape);
  }

 private:
  struct Context {
    Tensor<T, 1> diff;  // pred - target, flat
    std::vector<index_t> shape;
  };
};


// How a loss over many targets is reduced to the scalar (the `reduction` argument of torch.nn losses).
enum class Reduction { mean, sum };

struct CrossEntropyOptions {
  std::int64_t ignore_index = -100;  // targets equal to it contribute nothing, to the loss or to the count
  double label_smoothing = 0.0;      // in [0, 1]: the target distribution is (1 - s) one-hot + s / C
  Reduction reduction = Reduction::mean;
};

// nn.CrossEntropyLoss (no class weights): logits (N, C) with targets (N), or (B, T, C) with targets (B, T)
// (the language-model layout; PyTorch wants the classes in dim 1, i.e. logits.transpose(1, 2), which is
// the same loss). With s = label_smoothing, for each kept target y (y != ignore_index):
//   loss_i = -(1 - s) log p_iy - (s / C) sum_c log p_ic,      log p = log_softmax(logits_i)
// summed, or averaged over the kept targets ("mean"; NaN when every target is ignored, as in PyTorch).
// backward returns dloss/dlogits = scale (softmax - (1 - s) onehot - s / C) on kept rows and 0 on ignored
// rows, scale = grad_output / kept ("mean") or grad_output ("sum").
template <floating_element T>
class CrossEntropyLoss : public Module<T> {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options_(options) {
    if (!(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0))
      throw std::invalid_argument("CrossEntropyLoss: label_smoothing must be in [0, 1], got " +
                                  std::to_string(options.label_smoothing));
  }

  const CrossEntropyOptions& options() const noexcept { return options_; }

  std::string type_name() const override { return "CrossEntropyLoss"; }

  Tensor<T, 0> forward(const Tensor<T, 2>& logits, const Tensor<std::int64_t, 1>& target) const {
    if (target.shape()[0] != logits.shape()[0])
      throw shape_error("CrossEntropyLoss.forward: logits " + shape_string(logits.shape()) + " and target " +
                        shape_string(target.shape()) + ": expected target (N) for logits (N, C)");
    return compute(logits.contiguous(), target.contiguous(), {logits.shape().begin(), logits.shape().end()});
  }

  Tensor<T, 0> forward(const Tensor<T, 3>& logits, const Tensor<std::int64_t, 2>& target) const {
    if (target.shape()[0] != logits.shape()[0] || target.shape()[1] != logits.shape()[1])
      throw shape_error("CrossEntropyLoss.forward: logits " + shape_string(logits.shape()) + " and target " +
                        shape_string(target.shape()) + ": expected target (B, T) for logits (B, T, C)");
    const auto flat = logits.contiguous();
    return compute(flat.view(Shape<2>{flat.shape()[0] * flat.shape()[1], flat.shape()[2]}),
                   target.contiguous().view(Shape<1>{target.numel()}), {logits.shape().begin(), logits.shape().end()});
  }

  // dloss/dlogits, shaped like the forward's logits: backward() after (N, C) logits, backward<3>() after
  // (B, T, C) logits (checked).
  template <std::size_t R = 2>
  Tensor<T, R> backward(T grad_output = T(1)) {
    auto ctx = this->template take_saved<Context>("CrossEntropyLoss");
    auto g = ctx.grad;
    if (ctx.shape.size() != R)
      throw shape_error("CrossEntropyLoss.backward<" + std::to_string(R) + ">: the forward logits " +
                        shape_string(ctx.shape) + " have rank " + std::to_string(ctx.shape.size()));
    // The saved tensor is the gradient for grad_output = 1; it is ours alone, so scale it in place.
    if (grad_output != T(1))
      for (T* p = g.data(); p != g.data() + g.numel(); ++p) *p *= grad_output;
    Shape<R> shape{};
    for (std::size_t i = 0; i < R; ++i) shape[i] = ctx.shape[i];
    return g.view(shape);
  }

 private:
  // logits (N, C) contiguous, target (N) contiguous; `shape` is the caller's logits shape, for messages and
  // for backward's result.
  Tensor<T, 0> compute(const Tensor<T, 2>& logits, const Tensor<std::int64_t, 1>& target, std::vector<index_t> shape) const {
    const index_t n = logits.shape()[0], c = logits.shape()[1];
    if (c == 0)
      throw shape_error("CrossEntropyLoss.forward: logits " + shape_string(shape) +
                        " have no classes");
    const std::int64_t* tgt = target.data();
    // Validate every target first, so a bad batch throws before anything is saved, and count the kept ones.
    index_t kept = 0;
    for (index_t i = 0; i < n; ++i) {
      if (tgt[i] == options_.ignore_index) continue;
      ++kept;
      if (tgt[i] < 0 || tgt[i] >= c)
        throw std::out_of_range("CrossEntropyLoss.forward: target id " + std::to_string(tgt[i]) + " at position " +
                                std::to_string(i) + " is out of range for " + std::to_string(c) +
                                " classes (valid: 0.." + std::to_string(c - 1) + ", or ignore_index " +
                                std::to_string(options_.ignore_index) + ")");
    }
    const double s = options_.label_smoothing;
    // The gradient is formed along with the loss, but only when a backward can come for it.
    const bool training = this->records_for_backward();
    auto grad = training ? Tensor<T, 2>::empty(logits.shape()) : Tensor<T, 2>{};
    const T* x = logits.data();
    const bool mean = options_.reduction == Reduction::mean;
    // The mean's 1 / kept is applied to each gradient element after its own rounding, as a pass over the
    // finished gradient would.
    const bool scale_grad = training && mean && kept > 1;
    const double inv = scale_grad ? 1.0 / static_cast<double>(kept) : 1.0;
    // Rows on the pool (a language model's logits are rows x vocabulary, 50257 wide for GPT-2); each row's
    // loss lands in row_loss and they are added in row order after, so the bits do not depend on the thread
    // count. Float rows go to the vector kernels where the CPU has them (exps in float, sums in double: the
    // loops below take two double exps an element, most of the time of a loss over GPT-2's classes).
    std::vector<double> row_loss(static_cast<std::size_t>(n), 0.0);
    const index_t grain = std::max<index_t>(1, (index_t{1} << 13) / c);
    const backend::detail::VectorMathKernel* kernel = backend::detail::vector_math_kernel_for_type<T>();
    backend::parallel_for(n, grain, [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) {
        const T* row = x + i * c;
        T* grow = training ? grad.data() + i * c : nullptr;
        if (tgt[i] == options_.ignore_index) {
          if (training) std::fill(grow, grow + c, T(0));
          continue;
        }
        // log_softmax = x - (max + log sum exp(x - max)): shifting by the max keeps exp from overflowing and
        // the largest term at exp(0) = 1, so the sum never underflows to log(0). The row's log-sum in double
        // keeps its digits for float logits. sum_logp: the sum of log_softmax over the row, for smoothing.
        double lse = 0, sum_logp = 0;
        bool vectorised = false;
        if constexpr (std::is_same_v<T, float>) {
          if (kernel) {
            vectorised = true;
            lse = kernel->log_sum_exp(row, c);
            if (s > 0) sum_logp = kernel->sum_double(row, c) - static_cast<double>(c) * lse;
            if (training)
              kernel->cross_entropy_grad(row, grow, c, lse, static_cast<float>(s / static_cast<double>(c)),
                                         tgt[i], static_cast<float>(1.0 - s),
                                         scale_grad ? static_cast<float>(inv) : 1.0f);
          }
        }
        if (!vectorised) {
          double mx = -std::numeric_limits<double>::infinity();
          for (index_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
          double se = 0;
          for (index_t j = 0; j < c; ++j) se += std::exp(static_cast<double>(row[j]) - mx);
          lse = mx + std::log(se);
          if (s > 0)
            for (index_t j = 0; j < c; ++j) sum_logp += static_cast<double>(row[j]) - lse;
          if (training) {
            for (index_t j = 0; j < c; ++j) {
              const double p = std::exp(static_cast<double>(row[j]) - lse);
              const T g = static_cast<T>(p - s / static_cast<double>(c) - (j == tgt[i] ? 1.0 - s : 0.0));
              grow[j] = scale_grad ? static_cast<T>(g * inv) : g;
            }
          }
        }
        double loss = -(static_cast<double>(row[tgt[i]]) - lse) * (1.0 - s);
        if (s > 0) loss -= s / static_cast<double>(c) * sum_logp;
        row_loss[static_cast<std::size_t>(i)] = loss;
      }
    });
    double total = 0;
    for (index_t i = 0; i < n; ++i)
      if (tgt[i] != options_.ignore_index) total += row_loss[static_cast<std::size_t>(i)];
    // Mean over no kept target is 0 / 0 = NaN, as in PyTorch; the gradient is then 0 (all rows ignored).
    const double value = mean ? (kept == 0 ? std::numeric_limits<double>::quiet_NaN() : total / static_cast<double>(kept))
                              : total;
    if (training) this->save_for_backward(Context{grad, std::move(shape)});
    return Tensor<T, 0>(static_cast<T>(value));
  }

  struct Context {
    Tensor<T, 2> grad;           // dloss/dlogits for grad_output = 1, (N, C)
    std::vector<index_t> shape;  // the caller's logits shape
  };
  CrossEntropyOptions options_;
};

}  // namespace eigenformer::nn
