// Learning-rate schedules as plain functions of the step (0-based: the step about to be taken), so a
// training loop calls optimizer.set_lr(base_lr * schedule(step)) before each optimizer.step().
//
// The *_with_warmup multipliers follow Hugging Face's get_{constant,linear,cosine}_schedule_with_warmup
// (the LambdaLR lambdas, multiplying the optimizer's base lr); nanogpt_lr is nanoGPT's get_lr, which
// returns the rate itself and floors it at min_lr. tests/train/test_optimizers.cpp compares them with the
// Python formulas in tests/data/train.json.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>

namespace eigenformer::train {

namespace detail {

inline void check_schedule(bool ok, const char* who, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
}

// step / warmup during warmup: from 0 at step 0 up towards 1 (a zero first rate, as Hugging Face has it).
inline double warmup_ramp(std::int64_t step, std::int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(warmup > 1 ? warmup : 1);
}

inline void check_step(std::int64_t step, std::int64_t warmup, const char* who) {
  check_schedule(step >= 0, who, "step must be >= 0, got " + std::to_string(step));
  check_schedule(warmup >= 0, who, "warmup must be >= 0, got " + std::to_string(warmup));
}

}  // namespace detail

// 1 after `warmup` steps of linear ramp (get_constant_schedule_with_warmup; warmup 0: constant 1).
inline double constant_with_warmup(std::int64_t step, std::int64_t warmup = 0) {
  detail::check_step(step, warmup, "constant_with_warmup");
  return step < warmup ? detail::warmup_ramp(step, warmup) : 1.0;
}

// Linear ramp to 1 over `warmup` steps, then linear decay to 0 at `total` steps, 0 after
// (get_linear_schedule_with_warmup).
inline double linear_with_warmup(std::int64_t step, std::int64_t warmup, std::int64_t total) {
  detail::check_step(step, warmup, "linear_with_warmup");
  if (step < warmup) return detail::warmup_ramp(step, warmup);
  const std::int64_t span = total - warmup > 1 ? total - warmup : 1;
  const double v = static_cast<double>(total - step) / static_cast<double>(span);
  return v > 0.0 ? v : 0.0;
}

// Linear ramp to 1 over `warmup` steps, then half a cosine down to 0 at `total` steps
// (get_cosine_schedule_with_warmup with num_cycles = 0.5; more cycles restart the cosine, as there).
// Past `total` the cosine climbs again, exactly as Hugging Face's does: stop training at `total`.
inline double cosine_with_warmup(std::int64_t step, std::int64_t warmup, std::int64_t total, double num_cycles = 0.5) {
  detail::check_step(step, warmup, "cosine_with_warmup");
  if (step < warmup) return detail::warmup_ramp(step, warmup);
  const std::int64_t span = total - warmup > 1 ? total - warmup : 1;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(span);
  const double v = 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress));
  return v > 0.0 ? v : 0.0;
}

// nanoGPT's get_lr(it): a linear warmup lr * (it + 1) / (warmup + 1) (never 0, so the first step moves),
// then a cosine from lr down to min_lr at decay_iters, and min_lr after it (the floor keeps long runs
// learning; Chinchilla suggests min_lr ~ lr / 10).
inline double nanogpt_lr(std::int64_t step, double lr, double min_lr, std::int64_t warmup, std::int64_t decay_iters) {
  detail::check_step(step, warmup, "nanogpt_lr");
  detail::check_schedule(decay_iters > warmup, "nanogpt_lr",
                         "decay_iters (" + std::to_string(decay_iters) + ") must be greater than warmup (" +
                             std::to_string(warmup) + ")");
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  if (step > decay_iters) return min_lr;
  const double ratio = static_cast<double>(step - warmup) / static_cast<double>(decay_iters - warmup);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace eigenformer::train
