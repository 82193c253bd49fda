// Optimizers over a flat ParameterList (Module::named_parameters()): AdamW and SGD as torch.optim computes
// them, and clip_grad_norm (torch.nn.utils.clip_grad_norm_).
//
// Which parameters a step touches. Gradients are allocated by the first backward that reaches a parameter,
// so an optimizer may be built before any backward. Like torch.optim, which skips every p whose p.grad is
// None, a step leaves a parameter without a gradient alone: no weight decay, no moment update, and its step
// count (for AdamW's bias corrections) and state start with its first gradient. A frozen parameter
// (requires_grad() false) is skipped as well, even when it still holds a gradient from before it was frozen.
//
// Bit-exactness. In float32, AdamW and SGD reproduce PyTorch 1.13's single-tensor path (foreach=False, the
// default on CPU) bit for bit, because they do the same float operations in the same order:
//   - python-float hyper-parameters (lr * wd, 1 - beta1, bias corrections, lr / bias_correction1) are
//     computed in double, exactly as Python does, and rounded to float once when they meet a float tensor
//     (ATen casts a Scalar to the tensor's float "opmath" type);
//   - every tensor operation is one rounding per op: a + alpha * b is a float multiply then a float add,
//     addcmul's value * t1 * t2 is (value * t1) * t2, addcdiv's value * t1 / t2 is (value * t1) / t2.
// A compiler allowed to fuse a * b + c into one FMA (GCC's default -ffp-contract=fast once FMA is enabled,
// e.g. -march=native) would round once instead of twice; detail::rounded() stops that fusion, so the bits
// do not depend on the build flags. tests/train/test_optimizers.cpp checks them against
// tests/data/train.json (tools/reference/make_train_fixtures.py, which also replays the order in numpy).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "eigenformer/nn/module.hpp"

namespace eigenformer::train {

using nn::NamedParameter;
using nn::ParameterList;

namespace detail {

// The value x, rounded to T and opaque to the optimizer: a product passed through here cannot be fused
// with the following addition into an FMA (which would skip the product's rounding and change the bits).
// An empty asm statement costs nothing but keeps the value in a register the compiler must treat as changed.
template <typename T>
inline T rounded(T x) noexcept {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
  __asm__("" : "+x"(x));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(x));
#elif defined(__GNUC__)
  __asm__("" : "+m"(x));
#else
  volatile T v = x;  // MSVC contracts only under /fp:fast or /fp:contract; this covers the rest
  x = v;
#endif
  return x;
}

// The length of the runs clip_grad_norm sums on the pool, each in a double of its own (256 KiB of floats):
// fixed, so that the norm has the same bits for every thread count.
inline constexpr index_t grad_norm_run = index_t{1} << 16;

// Keeps the compiler from carrying values in registers across this point: every array passed is written
// to memory before it and read back after, so a product stored before cannot meet an addition after it in
// one FMA. Unlike rounded(), which pins one scalar, this lets both sides be vectorised.
template <typename T>
inline void products_to_memory(T* array) noexcept {
#if defined(__GNUC__)
  __asm__ volatile("" : : "r"(array) : "memory");
#else
  volatile T* escaped = array;  // other compilers: the address escapes, the fence orders the accesses
  static_cast<void>(escaped);
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}
template <typename T, typename... More>
inline void products_to_memory(T* first, More*... more) noexcept {
  products_to_memory(first);
  (products_to_memory(more), ...);
}

template <typename T>
struct AdamWScalars {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size, bc2_sqrt;
};

inline constexpr index_t adamw_block = 256;

// AdamW on n <= adamw_block elements in torch's single-tensor order (see the top of this file), written as
// passes over small arrays so that each vectorises: first every product, then (after products_to_memory)
// the sums, then the square roots (backend::sqrt_exact, vectorised and correctly rounded). The scalar form of the same update ran at ~5 ns an
// element and took 6% of a char-GPT training step.
template <typename T>
void adamw_update(index_t n, T* x, const T* g, T* m, T* v, T* vmax, const AdamWScalars<T>& c) {
  alignas(64) T decayed[adamw_block], m_part[adamw_block], g_part[adamw_block], v_part[adamw_block],
      g2_part[adamw_block];
  for (index_t i = 0; i < n; ++i) {
    decayed[i] = x[i] * c.decay;                    // param.mul_(1 - lr * wd)
    m_part[i] = m[i] * c.beta1;                     // exp_avg.mul_(beta1)
    g_part[i] = c.one_minus_beta1 * g[i];           // .add_(grad, alpha=1 - beta1)
    v_part[i] = v[i] * c.beta2;                     // exp_avg_sq.mul_(beta2)
    g2_part[i] = (c.one_minus_beta2 * g[i]) * g[i];  // .addcmul_(grad, grad, value=1 - beta2)
  }
  products_to_memory(decayed, m_part, g_part, v_part, g2_part);
  T* second = v_part;  // reused: the moment the denominator is taken from
  for (index_t i = 0; i < n; ++i) {
    m[i] = m_part[i] + g_part[i];
    v[i] = v_part[i] + g2_part[i];
    second[i] = v[i];
  }
  if (vmax)
    for (index_t i = 0; i < n; ++i) {
      if (v[i] > vmax[i]) vmax[i] = v[i];  // torch.maximum: the running max of v (amsgrad)
      second[i] = vmax[i];
    }
  T* root = g2_part;
  backend::sqrt_exact(second, root, n);
  for (index_t i = 0; i < n; ++i) {
    const T denom = root[i] / c.bc2_sqrt + c.eps;         // division then add: nothing to fuse
    x[i] = decayed[i] + (c.neg_step_size * m[i]) / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

inline void check_hyper(bool ok, const char* who, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
}

// Whether an optimizer step updates p (see the top of this file).
template <typename T>
bool steps(const NamedParameter<T>& p) {
  return p.requires_grad() && p.has_grad();
}

template <typename T>
void check_parameter(const NamedParameter<T>& p, const char* who) {
  if (!p.state)
    throw std::invalid_argument(std::string(who) + ": parameter " + p.name +
                                " has no gradient state (build the list with Module::named_parameters())");
  if (p.state->float_released())
    throw std::invalid_argument(std::string(who) + ": parameter " + p.name +
                                " is held only as " + p.state->held_as + ", so there is "
                                "no float value to update; train a model that keeps its float weights");
  if (!p.data.is_contiguous())
    throw std::invalid_argument(std::string(who) + ": parameter " + p.name + " is not a contiguous flat view");
}

}  // namespace detail

// nanoGPT's rule for which parameters get weight decay: matrices (embeddings, Linear weights; dim >= 2)
// do, vectors (biases, LayerNorm weight and bias) do not, since shrinking a gain or an offset towards 0
// regularises nothing useful.
template <floating_element T>
bool decays_by_default(const NamedParameter<T>& p) {
  return p.shape.size() >= 2;
}

// torch.optim.AdamW's hyper-parameters and defaults.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

// torch.optim.AdamW: decoupled weight decay (the parameter shrinks by lr * weight_decay before the Adam
// update, instead of weight_decay * p being added to the gradient as in Adam + L2), bias-corrected moments,
// eps added to sqrt(v_hat). Parameters are grouped like torch's param_groups, each with its own options;
// the step count (for the bias corrections) is per parameter, as in torch: it counts the steps that found
// the parameter with a gradient.
template <floating_element T>
class AdamW {
 public:
  struct Group {
    ParameterList<T> params;
    AdamWOptions options;
  };

  // One group: every parameter with `options`.
  explicit AdamW(ParameterList<T> params, AdamWOptions options = {}) : AdamW(std::vector<Group>{{std::move(params), options}}) {}

  // Two groups, nanoGPT-style: parameters for which `decays(p)` is true get options.weight_decay, the others
  // 0 (decays_by_default: matrices decay, biases and LayerNorm parameters do not).
  AdamW(ParameterList<T> params, AdamWOptions options, const std::function<bool(const NamedParameter<T>&)>& decays)
      : AdamW(split(std::move(params), options, decays)) {}

  explicit AdamW(std::vector<Group> groups) : groups_(std::move(groups)) {
    for (const auto& g : groups_) {
      validate(g.options);
      for (const auto& p : g.params) {
        detail::check_parameter(p, "AdamW");
        state_.emplace_back();  // the moments are allocated by the first step that finds a gradient
      }
    }
  }

  // One parameter's moments and step count (torch's optimizer.state[p]), for checkpoints.
  struct State {
    Tensor<T, 1> exp_avg, exp_avg_sq, max_exp_avg_sq;  // empty until the parameter's first step
    std::int64_t step = 0;                             // steps that found this parameter with a gradient
  };
  // Every parameter's state, in group order (groups()[0].params, then groups()[1].params, ...). Writable, so a
  // resumed run can restore what a checkpoint saved; the moments must keep their parameter's size.
  std::vector<State>& state() noexcept { return state_; }
  const std::vector<State>& state() const noexcept { return state_; }
  void set_steps_taken(std::int64_t steps) noexcept { step_ = steps; }

  std::vector<Group>& groups() noexcept { return groups_; }
  const std::vector<Group>& groups() const noexcept { return groups_; }
  // The number of step() calls.
  std::int64_t steps_taken() const noexcept { return step_; }

  // Sets the learning rate of every group (what a schedule does before each step).
  void set_lr(double lr) {
    detail::check_hyper(lr >= 0, "AdamW", "lr must be >= 0, got " + std::to_string(lr));
    for (auto& g : groups_) g.options.lr = lr;
  }

  // Zeroes every existing gradient (torch's zero_grad(set_to_none=False)); allocates none.
  void zero_grad() {
    for (auto& g : groups_)
      for (auto& p : g.params)
        if (p.has_grad()) nn::detail::zero_gradient(p.grad());
  }

  // One update of every parameter that has a gradient (a zero gradient still decays the parameter and the
  // moments, as in torch).
  void step() {
    ++step_;
    std::size_t k = 0;
    for (auto& g : groups_) {
      const auto& o = g.options;
      // Each scalar rounded to T once, as ATen does when a Python float multiplies a float tensor.
      const T decay = static_cast<T>(1.0 - o.lr * o.weight_decay);
      const T beta1 = static_cast<T>(o.beta1), one_minus_beta1 = static_cast<T>(1.0 - o.beta1);
      const T beta2 = static_cast<T>(o.beta2), one_minus_beta2 = static_cast<T>(1.0 - o.beta2);
      const T eps = static_cast<T>(o.eps);
      for (auto& p : g.params) {
        auto& s = state_[k++];
        if (!detail::steps(p)) continue;
        const index_t n = p.data.numel();
        if (s.step == 0) {
          s.exp_avg = zeros<T>(Shape<1>{n});
          s.exp_avg_sq = zeros<T>(Shape<1>{n});
          if (o.amsgrad) s.max_exp_avg_sq = zeros<T>(Shape<1>{n});
        }
        ++s.step;
        // Python-float arithmetic (double), as torch computes these scalars before meeting the tensors.
        const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(s.step));
        const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(s.step));
        const T neg_step_size = static_cast<T>(-(o.lr / bias_correction1));
        const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
        const auto grad = p.grad();
        T* x = p.data.data();
        const T* gr = grad.data();
        T* m = s.exp_avg.data();
        T* v = s.exp_avg_sq.data();
        T* vmax = o.amsgrad ? s.max_exp_avg_sq.data() : nullptr;
        // Element-wise, so any split between threads gives the same bits. For float, the vector kernel of
        // the instruction set chosen at run time where there is one (tensor/vector_math.hpp; the same bits).
        const auto* kernel = backend::detail::vector_math_kernel_for_type<T>();
        backend::parallel_for(n, adamw_grain, [&](index_t begin, index_t end) {
          if constexpr (std::is_same_v<T, float>)
            if (kernel)
              return kernel->adamw(end - begin, x + begin, gr + begin, m + begin, v + begin,
                                   vmax ? vmax + begin : nullptr,
                                   {decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size,
                                    bc2_sqrt});
          for (index_t b = begin; b < end; b += detail::adamw_block)
            detail::adamw_update(std::min(detail::adamw_block, end - b), x + b, gr + b, m + b, v + b,
                                 vmax ? vmax + b : nullptr, {decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                                                             eps, neg_step_size, bc2_sqrt});
        });
      }
    }
  }

 private:
  // Elements per task of the update: the scalar update costs a few nanoseconds an element, so 16k of them
  // are worth waking a thread for.
  static constexpr index_t adamw_grain = 1 << 14;

  static void validate(const AdamWOptions& o) {
    detail::check_hyper(o.lr >= 0, "AdamW", "lr must be >= 0, got " + std::to_string(o.lr));
    detail::check_hyper(o.eps >= 0, "AdamW", "eps must be >= 0, got " + std::to_string(o.eps));
    detail::check_hyper(o.beta1 >= 0 && o.beta1 < 1, "AdamW", "beta1 must be in [0, 1), got " + std::to_string(o.beta1));
    detail::check_hyper(o.beta2 >= 0 && o.beta2 < 1, "AdamW", "beta2 must be in [0, 1), got " + std::to_string(o.beta2));
    detail::check_hyper(o.weight_decay >= 0, "AdamW", "weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
  }

  static std::vector<Group> split(ParameterList<T> params, AdamWOptions options,
                                  const std::function<bool(const NamedParameter<T>&)>& decays) {
    Group decay{{}, options}, no_decay{{}, options};
    no_decay.options.weight_decay = 0.0;
    for (auto& p : params) (decays(p) ? decay : no_decay).params.push_back(std::move(p));
    return {std::move(decay), std::move(no_decay)};
  }

  std::vector<Group> groups_;
  std::vector<State> state_;  // one per parameter, in group order
  std::int64_t step_ = 0;
};

// torch.optim.SGD's hyper-parameters (lr has no default there either).
struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2: weight_decay * p is added to the gradient (coupled, unlike AdamW)
  bool nesterov = false;
};

// torch.optim.SGD with momentum: d = g + wd p; buf = d on the parameter's first step (with a gradient), then
// momentum buf + (1 - dampening) d; the step uses buf (or d + momentum buf with nesterov); p -= lr * step.
// Bit-exact in float32 as AdamW is.
template <floating_element T>
class SGD {
 public:
  explicit SGD(ParameterList<T> params, SGDOptions options = {}) : params_(std::move(params)), options_(options) {
    const auto& o = options_;
    detail::check_hyper(o.lr >= 0, "SGD", "lr must be >= 0, got " + std::to_string(o.lr));
    detail::check_hyper(o.momentum >= 0, "SGD", "momentum must be >= 0, got " + std::to_string(o.momentum));
    detail::check_hyper(o.weight_decay >= 0, "SGD", "weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
    detail::check_hyper(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
                        "nesterov needs momentum > 0 and dampening 0");
    for (const auto& p : params_) detail::check_parameter(p, "SGD");
    buffers_.resize(params_.size());  // torch's momentum_buffer None: created by the parameter's first step
  }

  SGDOptions& options() noexcept { return options_; }
  void set_lr(double lr) {
    detail::check_hyper(lr >= 0, "SGD", "lr must be >= 0, got " + std::to_string(lr));
    options_.lr = lr;
  }
  // Zeroes every existing gradient (torch's zero_grad(set_to_none=False)); allocates none.
  void zero_grad() {
    for (auto& p : params_)
      if (p.has_grad()) nn::detail::zero_gradient(p.grad());
  }

  void step() {
    const auto& o = options_;
    const T wd = static_cast<T>(o.weight_decay), momentum = static_cast<T>(o.momentum);
    const T one_minus_dampening = static_cast<T>(1.0 - o.dampening), neg_lr = static_cast<T>(-o.lr);
    for (std::size_t k = 0; k < params_.size(); ++k) {
      auto& p = params_[k];
      if (!detail::steps(p)) continue;
      const auto grad = p.grad();
      T* x = p.data.data();
      const T* gr = grad.data();
      const bool first = buffers_[k].numel() == 0;
      if (o.momentum != 0 && first) buffers_[k] = Tensor<T, 1>::empty(Shape<1>{p.data.numel()});
      T* buf = o.momentum != 0 ? buffers_[k].data() : nullptr;
      for (index_t i = 0; i < p.data.numel(); ++i) {
        T d = o.weight_decay != 0 ? gr[i] + detail::rounded(wd * x[i]) : gr[i];  // grad.add(param, alpha=wd)
        if (buf) {
          buf[i] = first ? d : detail::rounded(buf[i] * momentum) + detail::rounded(one_minus_dampening * d);
          d = o.nesterov ? d + detail::rounded(momentum * buf[i]) : buf[i];
        }
        x[i] = x[i] + detail::rounded(neg_lr * d);  // param.add_(d, alpha=-lr)
      }
    }
  }

 private:
  ParameterList<T> params_;
  SGDOptions options_;
  std::vector<Tensor<T, 1>> buffers_;  // momentum buffers, empty until the parameter's first step
};

// torch.nn.utils.clip_grad_norm_(params, max_norm) with the 2-norm: the norm of all existing gradients (a
// parameter without one is left out, as torch filters p.grad is None) taken as one vector; if it exceeds max_norm every gradient is scaled by max_norm / (norm + 1e-6) (the 1e-6 keeps a zero
// norm from dividing by zero). Returns the norm before clipping. The sum of squares is accumulated in double
// (PyTorch reduces in float, so the norm can differ from torch's in the last float bit); the coefficient is
// then formed as torch forms it in float: (1 / (norm + 1e-6)) * max_norm, clamped to 1.
template <floating_element T>
T clip_grad_norm(ParameterList<T>& params, double max_norm) {
  if (!(max_norm >= 0)) throw std::invalid_argument("clip_grad_norm: max_norm must be >= 0, got " + std::to_string(max_norm));
  // Every gradient cut into runs of a fixed length (not a share a thread), each run's sum of squares its own
  // double, then the runs' sums added in order: on the pool, with the same bits for every thread count. On
  // one thread the norm of a small BERT's gradients (51 MB of them its word embeddings') took 3 ms of a
  // 180 ms step.
  struct Run {
    T* g;
    index_t n;
  };
  std::vector<Run> runs;
  for (const auto& p : params) {
    if (!p.has_grad()) continue;
    auto grad = p.grad();
    for (index_t i = 0; i < grad.numel(); i += detail::grad_norm_run)
      runs.push_back({grad.data() + i, std::min(detail::grad_norm_run, grad.numel() - i)});
  }
  std::vector<double> run_sums(runs.size());
  backend::parallel_for(static_cast<index_t>(runs.size()), 1, [&](index_t begin, index_t end) {
    for (index_t r = begin; r < end; ++r) {
      const T* g = runs[static_cast<std::size_t>(r)].g;
      const index_t n = runs[static_cast<std::size_t>(r)].n;
      double& sum = run_sums[static_cast<std::size_t>(r)];
      // For float, the LayerNorm kernel's sum of squared deviations from 0: the same terms in the same order.
      if constexpr (std::is_same_v<T, float>)
        if (const auto* kernel = backend::detail::vector_math_kernel()) {
          sum = kernel->sum_squared_deviation(g, n, 0.0);
          continue;
        }
      sum = backend::sum_in_double(n, [g](index_t i) { return static_cast<double>(g[i]) * g[i]; });
    }
  });
  double sq = 0;
  for (const double s : run_sums) sq += s;
  const T total = static_cast<T>(std::sqrt(sq));
  // max_norm / tensor in Python is tensor.reciprocal() * max_norm.
  T coef = (T(1) / (total + static_cast<T>(1e-6))) * static_cast<T>(max_norm);
  if (coef > T(1)) coef = T(1);  // torch.clamp(max=1): NaN stays NaN and poisons the gradients, as in torch
  if (coef != T(1)) {
    auto scale = [&](index_t begin, index_t end) {
      for (index_t r = begin; r < end; ++r) {
        T* g = runs[static_cast<std::size_t>(r)].g;
        for (index_t i = 0, n = runs[static_cast<std::size_t>(r)].n; i < n; ++i) g[i] *= coef;
      }
    };
    // A gradient listed twice (the same parameter passed twice) is scaled twice, as torch's loop does; its
    // runs must then not run on two threads at once.
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
    for (const auto& r : runs)
      spans.emplace_back(reinterpret_cast<std::uintptr_t>(r.g), reinterpret_cast<std::uintptr_t>(r.g + r.n));
    std::sort(spans.begin(), spans.end());
    bool overlap = false;
    for (std::size_t i = 1; i < spans.size(); ++i) overlap = overlap || spans[i].first < spans[i - 1].second;
    if (overlap) scale(0, static_cast<index_t>(runs.size()));
    else backend::parallel_for(static_cast<index_t>(runs.size()), 1, scale);
  }
  return total;
}

}  // namespace eigenformer::train
