// Tests of the float element-wise kernels chosen at run time (include/eigenformer/tensor/vector_math.hpp),
// once for each instruction set they are compiled for that this CPU runs: each kernel against the same
// function computed in double, the special values, and AVX-512 against AVX2 bit for bit. The layers'
// PyTorch fixtures (test_activation.cpp, the models' tests) run through them too, and again under
// EIGENFORMER_MAX_CPU_ISA=avx2 and =baseline (ctest's unit_avx2 and unit_baseline), where Eigen computes.
// This file is compiled alone at -O2 (tests/CMakeLists.txt): from -O2 on GCC fuses a product with the sum
// that takes it, and the bit comparisons must see a kernel that lets that happen.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "eigenformer/nn/layernorm.hpp"
#include "eigenformer/tensor.hpp"
#include "eigenformer/train/optimizers.hpp"
#include "support/cases.hpp"

namespace ef = eigenformer;
using ef::index_t;
using ef::backend::CpuIsa;
using ef::backend::detail::VectorMathKernel;

namespace {

constexpr double unit_roundoff = 0x1p-24;  // half an ulp of 1: float's unit roundoff
constexpr float float_inf = std::numeric_limits<float>::infinity();

// The kernels this CPU runs, widest first; empty where there are none (and a line saying so).
std::vector<const VectorMathKernel*> vector_kernels_on_this_cpu() {
  std::vector<const VectorMathKernel*> kernels;
  const CpuIsa detected = ef::backend::detected_cpu_isa();
  for (CpuIsa isa : {CpuIsa::avx512, CpuIsa::avx2})
    if (static_cast<int>(isa) <= static_cast<int>(detected))
      if (const auto* kernel = ef::backend::detail::vector_math_kernel_for(isa)) kernels.push_back(kernel);
  if (kernels.empty()) MESSAGE("left out: this CPU (or this build) has no vector kernels; Eigen computes");
  return kernels;
}

// x from -30 to 30 in steps that are not a power of two (so that they hit no special values by design),
// plus the special ones.
std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (double v = -30; v <= 30; v += 0.00037) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, 3.9f, -3.9f, 13.2f, -13.2f, 1e10f, -1e10f})
    x.push_back(v);
  return x;
}

// GELU and its derivative in double, written so that nothing cancels: Phi(x) = erfc(-x / sqrt 2) / 2, and
// for the tanh form (1 + tanh u) / 2 = 1 / (1 + exp(-2u)). `scale` is the sum of the terms' magnitudes,
// which bounds their rounding where the derivative crosses 0 (GELU' vanishes near x = -0.75).
struct GeluReference {
  double value, derivative, scale;
};
GeluReference gelu_erf_reference(double x) {
  const double phi = 0.5 * std::erfc(-x / std::numbers::sqrt2);
  const double slope = x * std::exp(-0.5 * x * x) * 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;
  return {x * phi, phi + slope, phi + std::abs(slope)};
}
GeluReference gelu_tanh_reference(double x) {
  const double beta = std::numbers::sqrt2 * std::numbers::inv_sqrtpi, kappa = 0.044715;
  const double e = std::exp(-2 * beta * (x + kappa * x * x * x));
  const double s = 1 / (1 + e);
  const double right = 0.5 * x * 4 * s * (e * s) * beta * (1 + 3 * kappa * x * x);
  return {x * s, s + right, s + std::abs(right)};
}

// A kernel's output against its reference, at every x where the reference is finite.
struct WorstError {
  double error = 0;
  float at = 0;
  void see(double e, float x) {
    if (e > error) error = e, at = x;
  }
};

}  // namespace

// Bounds, in units of float's unit roundoff u = 2^-24 and from the steps each kernel takes:
// - GELU (erf): R(a) evaluated in float is 3.8e-7 = 6.4 u off (tools/fit_erfc_scaled.py), exp ~2.5 u, the
//   products and the square's exact split a few more: 16 u relative (2.5x the measured 3.9e-7). Where
//   exp(-x^2 / 2) is below float's normal range (|x| > 13.2) the kernel gives Phi's tail as 0 (x < 0) or
//   1: an absolute error below 1e-36.
// - the tanh form: exp(-2u) of an argument rounded to ~4 u relative, so its relative error grows with
//   |2u|: (16 + 4 |2u|) u. Only where -2u <= 88 (x > -9.7): below, exp(-2u) is capped at exp(88), as in
//   backend.hpp's Eigen form, and the result is only checked to be below |x| e^-88 (6e-39 |x|).
// - derivatives: the same bounds relative to `scale`; the tanh one drops its second term once 1 - tanh^2
//   is below 1e-30 (backend.hpp's form), an absolute error below 1e-26 at |x| ~ 9.
TEST_CASE(
    "vector math: GELU (erf and tanh forms) and its derivative against double, on each instruction set") {
  const std::vector<float> x = gelu_inputs();
  const auto n = static_cast<index_t>(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  std::size_t checked = 0;
  for (const VectorMathKernel* kernel : vector_kernels_on_this_cpu()) {
    const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
    CAPTURE(isa);
    std::vector<float> y(x.size()), dy(x.size()), yt(x.size()), dyt(x.size());
    kernel->gelu_erf(x.data(), y.data(), n);
    kernel->gelu_erf_backward(ones.data(), x.data(), dy.data(), n);
    kernel->gelu_tanh(x.data(), yt.data(), n);
    kernel->gelu_tanh_backward(ones.data(), x.data(), dyt.data(), n);
    WorstError erf_value, erf_derivative, tanh_value, tanh_derivative;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double xi = x[i];
      const GeluReference e = gelu_erf_reference(xi);
      erf_value.see(std::abs(y[i] - e.value) / (16 * unit_roundoff * std::abs(e.value) + 1e-36), x[i]);
      erf_derivative.see(std::abs(dy[i] - e.derivative) / (16 * unit_roundoff * e.scale + 1e-36), x[i]);
      const double two_u =
          2 * std::numbers::sqrt2 * std::numbers::inv_sqrtpi * (xi + 0.044715 * xi * xi * xi);
      const GeluReference t = gelu_tanh_reference(xi);
      if (-two_u <= 88) {
        const double bound = (16 + 4 * std::abs(two_u)) * unit_roundoff;
        tanh_value.see(std::abs(yt[i] - t.value) / (bound * std::abs(t.value) + 1e-36), x[i]);
        tanh_derivative.see(std::abs(dyt[i] - t.derivative) / (bound * t.scale + 1e-26), x[i]);
      } else {
        CHECK_MESSAGE(std::abs(yt[i]) <= 1e-38f * std::abs(x[i]), "gelu_tanh(" << x[i] << ") = " << yt[i]);
        CHECK_MESSAGE(std::abs(dyt[i]) <= 1e-25f, "gelu_tanh'(" << x[i] << ") = " << dyt[i]);
      }
      ++checked;
    }
    // Each is the largest error over the bound: at most 1.
    CHECK_MESSAGE(erf_value.error <= 1, "gelu_erf at x = " << erf_value.at);
    CHECK_MESSAGE(erf_derivative.error <= 1, "gelu_erf' at x = " << erf_derivative.at);
    CHECK_MESSAGE(tanh_value.error <= 1, "gelu_tanh at x = " << tanh_value.at);
    CHECK_MESSAGE(tanh_derivative.error <= 1, "gelu_tanh' at x = " << tanh_derivative.at);
    // The backward multiplies by the incoming gradient.
    std::vector<float> g(x.size()), gdy(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) g[i] = static_cast<float>(i % 7) - 3.0f;
    kernel->gelu_erf_backward(g.data(), x.data(), gdy.data(), n);
    for (std::size_t i = 0; i < x.size(); i += 97) CHECK(gdy[i] == g[i] * dy[i]);
  }
  eftest::check_ran_at_least(checked, vector_kernels_on_this_cpu().empty() ? 0 : x.size(), "GELU inputs");
}

TEST_CASE("vector math: GELU's special values, and ranges that end in a partial register") {
  for (const VectorMathKernel* kernel : vector_kernels_on_this_cpu()) {
    const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
    CAPTURE(isa);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> x = {nan, float_inf, -float_inf, 0.0f, -0.0f, 100.0f, -100.0f};
    std::vector<float> y(x.size()), yt(x.size()), dy(x.size()), ones(x.size(), 1.0f);
    kernel->gelu_erf(x.data(), y.data(), static_cast<index_t>(x.size()));
    kernel->gelu_tanh(x.data(), yt.data(), static_cast<index_t>(x.size()));
    kernel->gelu_erf_backward(ones.data(), x.data(), dy.data(), static_cast<index_t>(x.size()));
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(yt[0]));
    CHECK(std::isnan(dy[0]));
    CHECK(y[1] == float_inf);  // float_inf Phi(float_inf) = float_inf; -float_inf Phi(-float_inf) =
                               // -float_inf * 0 is NaN, as in PyTorch
    CHECK(std::isnan(y[2]));
    CHECK(yt[1] == float_inf);
    CHECK(y[3] == 0.0f);
    CHECK(dy[3] == 0.5f);  // Phi(0): R(0) is 1 in float
    CHECK(y[5] == 100.0f);
    CHECK(y[6] == 0.0f);
    CHECK(yt[5] == 100.0f);
    // Lengths around the register widths: the elements past n are neither read into the result nor written.
    for (index_t len = 0; len <= 40; ++len) {
      std::vector<float> in(48), out(48, 7.0f);
      for (index_t i = 0; i < 48; ++i) in[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i) - 3.0f;
      kernel->gelu_erf(in.data(), out.data(), len);
      std::vector<float> whole(48);
      kernel->gelu_erf(in.data(), whole.data(), 48);
      for (index_t i = 0; i < 48; ++i) {
        const auto k = static_cast<std::size_t>(i);
        CHECK_MESSAGE(out[k] == (i < len ? whole[k] : 7.0f), "n = " << len << ", element " << i);
      }
    }
  }
}

// exp_shifted's exp: ~1.25 ulp measured on [log(FLT_MIN), 88]; bound 2 ulps of the result (4 u relative).
TEST_CASE("vector math: exp to 2 ulps on float's normal range, 0 below it, NaN kept") {
  std::size_t checked = 0;
  for (const VectorMathKernel* kernel : vector_kernels_on_this_cpu()) {
    const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
    CAPTURE(isa);
    std::vector<float> x;
    for (double v = -87.33; v <= 88; v += 0.00131) x.push_back(static_cast<float>(v));
    std::vector<float> y = x;
    kernel->exp_shifted(y.data(), static_cast<index_t>(y.size()), 0.0f);
    WorstError worst;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(static_cast<double>(x[i]));
      worst.see(std::abs(y[i] - e) / (4 * unit_roundoff * e), x[i]);
      ++checked;
    }
    CHECK_MESSAGE(worst.error <= 1, "exp at x = " << worst.at);
    std::vector<float> special = {-87.4f, -100.0f, -float_inf, std::numeric_limits<float>::quiet_NaN(),
                                  0.0f,   3.0f};
    kernel->exp_shifted(special.data(), static_cast<index_t>(special.size()), 1.0f);  // exp(x - 1)
    CHECK(special[0] == 0.0f);
    CHECK(special[1] == 0.0f);
    CHECK(special[2] == 0.0f);
    CHECK(std::isnan(special[3]));
    CHECK(std::abs(special[4] - std::exp(-1.0)) <= 4 * unit_roundoff * std::exp(-1.0));
    CHECK(std::abs(special[5] - std::exp(2.0)) <= 4 * unit_roundoff * std::exp(2.0));
  }
  eftest::check_ran_at_least(checked, vector_kernels_on_this_cpu().empty() ? 0 : 100000, "exp inputs");
}

// softmax rows against double. Bound: exp's 4 u and the division's 1 u per element, and the sum's
// rounding, which grows with the additions each of its 16 lanes makes (n / 16) and the final 4: relative
// (8 + n / 16 + 4) u.
TEST_CASE("vector math: softmax rows against double, masked and fully masked rows, NaN") {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::size_t checked = 0;
  for (const VectorMathKernel* kernel : vector_kernels_on_this_cpu()) {
    const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
    CAPTURE(isa);
    for (index_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1000, 5000}) {
      for (int masked = 0; masked < 2; ++masked) {
        CAPTURE(n);
        CAPTURE(masked);
        std::vector<float> in(static_cast<std::size_t>(n)), out(in.size(), 9.0f);
        for (float& v : in) v = normal(gen);
        if (masked) {  // a causal row's tail, and keys 90 below the maximum (their exp is a denormal, from
                       // libm)
          float top = -float_inf;
          for (index_t i = 0; i <= n / 2; ++i) top = std::max(top, in[static_cast<std::size_t>(i)]);
          for (index_t i = n / 2 + 1; i < n; ++i)
            in[static_cast<std::size_t>(i)] = i % 5 == 0 ? top - 90.0f : -float_inf;
        }
        kernel->softmax(in.data(), out.data(), n);
        double m = -float_inf, total = 0;
        for (float v : in) m = std::max(m, static_cast<double>(v));
        for (float v : in) total += std::exp(v - m);
        const double bound = (12 + static_cast<double>(n) / 16) * unit_roundoff;
        for (std::size_t i = 0; i < in.size(); ++i) {
          const double expected = std::exp(in[i] - m) / total;
          if (in[i] == -float_inf) {
            CHECK(out[i] == 0.0f);
          } else if (expected < std::numeric_limits<float>::min()) {
            // A denormal, on a grid of 2^-149: exp's result and the division each round to it.
            CHECK_MESSAGE(out[i] > 0.0f, "element " << i);
            CHECK_MESSAGE(std::abs(out[i] - expected) <= bound * expected + 2 * 0x1p-149, "element " << i);
          } else {
            CHECK_MESSAGE(std::abs(out[i] - expected) <= bound * expected, "element " << i);
          }
          ++checked;
        }
      }
    }
    std::vector<float> all_masked = {-float_inf, -float_inf, -float_inf}, out(3, 9.0f);
    kernel->softmax(all_masked.data(), out.data(), 3);
    CHECK(out == std::vector<float>{0.0f, 0.0f, 0.0f});
    std::vector<float> with_nan = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
    kernel->softmax(with_nan.data(), out.data(), 3);
    for (float v : out) CHECK(std::isnan(v));
  }
  eftest::check_ran_at_least(checked, vector_kernels_on_this_cpu().empty() ? 0 : 12000, "softmax elements");
}

TEST_CASE("vector math: the AVX-512 and AVX2 kernels give the same bits") {
  const auto kernels = vector_kernels_on_this_cpu();
  if (kernels.size() < 2) {
    MESSAGE("left out: this CPU runs one instruction set's kernels at most");
    return;
  }
  std::mt19937 gen(9);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> x(4099), g(x.size());
  for (float& v : x) v = normal(gen);
  for (float& v : g) v = normal(gen);
  auto bits = [](const std::vector<float>& v) {
    std::vector<std::uint32_t> b;
    for (float f : v) b.push_back(std::bit_cast<std::uint32_t>(f));
    return b;
  };
  auto outputs = [&](const VectorMathKernel& k) {
    const auto n = static_cast<index_t>(x.size());
    std::vector<std::vector<float>> out(6, std::vector<float>(x.size()));
    k.gelu_erf(x.data(), out[0].data(), n);
    k.gelu_erf_backward(g.data(), x.data(), out[1].data(), n);
    k.gelu_tanh(x.data(), out[2].data(), n);
    k.gelu_tanh_backward(g.data(), x.data(), out[3].data(), n);
    // Every row length's output is kept (one after another): the short rows end inside AVX2's second
    // register of a 16-lane group, where the two sets' sums could part if the lane order differed.
    out[4].clear();
    for (index_t len : {1, 5, 8, 9, 15, 16, 17, 31, 100, 4096}) {  // from x[3]: not 64-byte aligned
      std::vector<float> row(static_cast<std::size_t>(len));
      k.softmax(x.data() + 3, row.data(), len);
      out[4].insert(out[4].end(), row.begin(), row.end());
    }
    out[5] = x;
    k.exp_shifted(out[5].data(), n, 2.0f);
    out[5].push_back(k.sum(x.data(), n));
    out[5].push_back(k.sum(x.data(), 23));
    // Cross-entropy's rows: the log-sum-exp (a double, kept as its two halves' bits in floats' places) and
    // the gradient, at lengths ending in either of AVX2's registers of a 16-lane group.
    out.emplace_back();
    for (index_t len : {1, 9, 17, 4096}) {
      const double lse = k.log_sum_exp(x.data() + 3, len);
      const auto lse_bits = std::bit_cast<std::uint64_t>(lse);
      out[6].push_back(std::bit_cast<float>(static_cast<std::uint32_t>(lse_bits)));
      out[6].push_back(std::bit_cast<float>(static_cast<std::uint32_t>(lse_bits >> 32)));
      std::vector<float> row(static_cast<std::size_t>(len));
      k.cross_entropy_grad(x.data() + 3, row.data(), len, lse, 0.001f, len - 1, 0.9f, 0.125f);
      out[6].insert(out[6].end(), row.begin(), row.end());
    }
    return out;
  };
  const auto wide = outputs(*kernels[0]), narrow = outputs(*kernels[1]);
  const char* names[] = {"gelu_erf", "gelu_erf_backward", "gelu_tanh",    "gelu_tanh_backward",
                         "softmax",  "exp, sum",          "cross-entropy"};
  for (std::size_t i = 0; i < wide.size(); ++i) CHECK_MESSAGE(bits(wide[i]) == bits(narrow[i]), names[i]);
}

TEST_CASE("vector math: the layers use the kernels when the CPU has them, and Eigen's code under baseline") {
  const CpuIsa saved = ef::backend::cpu_isa();
  ef::backend::set_max_cpu_isa(CpuIsa::baseline);
  CHECK(ef::backend::detail::vector_math_kernel() == nullptr);
  ef::manual_seed(4);
  const auto x = ef::randn<float>({3, 37}) * 3.0f;
  const auto eigen_softmax = ef::softmax(x, -1);
  ef::backend::set_max_cpu_isa(saved);
  const auto* kernel = ef::backend::detail::vector_math_kernel();
  if (!kernel) {
    MESSAGE("left out: this CPU (or this build) has no vector kernels");
    return;
  }
  CHECK(kernel == ef::backend::detail::vector_math_kernel_for(ef::backend::cpu_isa()));
  const auto ours = ef::softmax(x, -1);
  std::vector<float> row(37);
  kernel->softmax(x.data() + 37, row.data(), 37);
  for (index_t j = 0; j < 37; ++j) {
    CHECK(ours(1, j) == row[static_cast<std::size_t>(j)]);  // the tensor op takes the kernel's path
    CHECK(std::abs(ours(1, j) - eigen_softmax(1, j)) <= 1e-6f * eigen_softmax(1, j));
  }
}

// The AdamW kernel against the portable loops of train/optimizers.hpp (themselves checked bit for bit
// against torch.optim.AdamW in tests/train/test_optimizers.cpp): the same bits, with and without amsgrad,
// over a length that ends in a partial register, with gradients that include zeros and large values.
TEST_CASE("vector math: the AdamW update gives the portable loops' bits") {
  std::mt19937 gen(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const index_t n = 1003;
  std::vector<float> x0(n), g(n), m0(n), v0(n), vmax0(n);
  for (index_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    x0[k] = normal(gen);
    g[k] = i % 11 == 0 ? 0.0f : normal(gen) * (i % 7 == 0 ? 1e3f : 1e-2f);
    m0[k] = normal(gen) * 1e-2f;
    v0[k] = std::abs(normal(gen)) * 1e-4f;
    vmax0[k] = i % 3 == 0 ? 0.0f : v0[k] * 2.0f;
  }
  const ef::backend::detail::AdamWStep step{0.999f, 0.9f, 0.1f, 0.999f, 1e-3f, 1e-8f, -1.2e-3f, 0.0316f};
  const ef::train::detail::AdamWScalars<float> scalars{step.decay, step.beta1, step.one_minus_beta1, step.beta2,
                                                       step.one_minus_beta2, step.eps, step.neg_step_size,
                                                       step.bc2_sqrt};
  std::size_t compared = 0;
  for (const VectorMathKernel* kernel : vector_kernels_on_this_cpu()) {
    const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
    CAPTURE(isa);
    for (const bool amsgrad : {false, true}) {
      CAPTURE(amsgrad);
      auto x = x0, m = m0, v = v0, vmax = vmax0;
      auto xr = x0, mr = m0, vr = v0, vmaxr = vmax0;
      for (int t = 0; t < 3; ++t) {
        kernel->adamw(n, x.data(), g.data(), m.data(), v.data(), amsgrad ? vmax.data() : nullptr, step);
        for (index_t b = 0; b < n; b += ef::train::detail::adamw_block)
          ef::train::detail::adamw_update(std::min(ef::train::detail::adamw_block, n - b), xr.data() + b, g.data() + b,
                                          mr.data() + b, vr.data() + b, amsgrad ? vmaxr.data() + b : nullptr, scalars);
      }
      for (index_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        CHECK_MESSAGE(std::bit_cast<std::uint32_t>(x[k]) == std::bit_cast<std::uint32_t>(xr[k]), "x at " << i);
        CHECK_MESSAGE(std::bit_cast<std::uint32_t>(m[k]) == std::bit_cast<std::uint32_t>(mr[k]), "m at " << i);
        CHECK_MESSAGE(std::bit_cast<std::uint32_t>(v[k]) == std::bit_cast<std::uint32_t>(vr[k]), "v at " << i);
        CHECK_MESSAGE(std::bit_cast<std::uint32_t>(vmax[k]) == std::bit_cast<std::uint32_t>(vmaxr[k]), "vmax at " << i);
        ++compared;
      }
    }
  }
  eftest::check_ran_at_least(compared, vector_kernels_on_this_cpu().empty() ? 0 : 2 * n, "AdamW elements");
}

// Dropout's mask kernel against the scalar comparison of random.hpp (itself checked against torch's masks
// in the dropout tests): the same values for thresholds from 0 (p = 0) to 2^53 (p = 1), for lengths that end
// in a partial register, and words with every bit pattern the generator can give.
TEST_CASE("vector math: dropout's mask kernel gives the scalar comparison's values") {
  std::mt19937 gen(21);
  std::vector<std::uint32_t> words(2 * 300);
  for (auto& w : words) w = static_cast<std::uint32_t>(gen());
  words[0] = 0xFFFFFFFFu, words[1] = 0xFFFFFFFFu;  // the largest number, 2^53 - 1
  words[2] = 0x00200000u, words[3] = 0u;           // bits above the 53 ignored: the number 0
  std::size_t compared = 0;
  for (const VectorMathKernel* kernel : vector_kernels_on_this_cpu()) {
    const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
    CAPTURE(isa);
    for (const double p : {0.0, 1e-9, 0.1, 0.5, 0.9, 1.0}) {
      const auto threshold = static_cast<std::uint64_t>(std::ceil(p * 0x1.0p53));
      for (index_t n : {1, 7, 8, 9, 15, 16, 17, 33, 300}) {
        CAPTURE(p);
        CAPTURE(n);
        std::vector<float> out(static_cast<std::size_t>(n) + 1, 7.0f);
        kernel->bernoulli(words.data(), out.data(), n, threshold, 1.25f);
        for (index_t i = 0; i < n; ++i) {
          const auto k = static_cast<std::size_t>(i);
          const std::uint64_t v = (std::uint64_t{words[2 * k] & 0x1FFFFFu} << 32) | words[2 * k + 1];
          CHECK_MESSAGE(out[k] == (v < threshold ? 1.25f : 0.0f), "element " << i);
          ++compared;
        }
        CHECK(out[static_cast<std::size_t>(n)] == 7.0f);  // nothing written past n
      }
    }
  }
  eftest::check_ran_at_least(compared, vector_kernels_on_this_cpu().empty() ? 0 : 6 * 404, "mask elements");
}

// LayerNorm's kernels against its portable loops (nn/layernorm.hpp, run under the baseline cap): the
// forward with its saved statistics, the input and parameter gradients, and inference's add_forward, for
// rows that end in every position of a group of eight and of a register, with and without the affine
// parameters, and with means far from 0 (the variance's two passes). The same bits, where this file is built
// without FMA as by default (the portable loops are then what a build without -march runs); built with FMA
// (EIGENFORMER_NATIVE_TESTS), the compiler may fuse the loops' products, and they are compared to 1e-5
// relative to 1 + |value|: a fused product skips one float rounding (2^-24) in xhat, g' or their sums, and
// dx's subtraction g' - mean(g') - xhat mean(g' xhat) can cancel, so a few ulps of its terms' size (~1) is
// what the two orders may differ by.
TEST_CASE("vector math: LayerNorm's kernels give the portable loops' bits") {
  const auto kernels = vector_kernels_on_this_cpu();
  struct Case {
    index_t c;
    bool affine;
    float offset;
  };
  const std::vector<Case> cases = {{1, true, 0.0f},     {7, true, 0.0f},     {8, true, 100.0f},
                                   {9, false, 0.0f},    {16, true, -3.0f},   {23, true, 1e4f},
                                   {31, true, 1000.0f}, {768, true, 100.0f}, {768, false, 0.0f},
                                   {1027, true, 5.0f}};
  const CpuIsa saved = ef::backend::cpu_isa();
  std::size_t compared = 0;
  for (const Case& k : cases) {
    CAPTURE(k.c);
    CAPTURE(k.affine);
    ef::manual_seed(static_cast<std::uint64_t>(k.c));
    const auto x = ef::randn<float>({5, k.c}) * 3.0f + k.offset;
    const auto residual = ef::randn<float>({5, k.c});
    const auto g = ef::randn<float>({5, k.c});
    const auto weight = ef::randn<float>({k.c}), bias = ef::randn<float>({k.c});
    // y, dx, dweight, dbias and add_forward's output, one after another.
    auto run = [&](CpuIsa isa) {
      ef::backend::set_max_cpu_isa(isa);
      ef::nn::LayerNorm<float> ln(k.c, 1e-5, k.affine);
      if (k.affine) {
        ln.weight->data.copy_(weight);
        ln.bias->data.copy_(bias);
      }
      std::vector<float> out;
      auto keep = [&out](const float* p, index_t n) { out.insert(out.end(), p, p + n); };
      ln.train();
      const auto y = ln.forward(x);
      const auto dx = ln.backward(g);
      keep(y.data(), y.numel());
      keep(dx.data(), dx.numel());
      if (k.affine) {
        keep(ln.weight->grad().data(), k.c);
        keep(ln.bias->grad().data(), k.c);
      }
      ln.eval();
      auto sum = x.clone();
      const auto fused = ln.add_forward(sum, residual);
      keep(fused.data(), fused.numel());
      return out;
    };
    const auto portable = run(CpuIsa::baseline);
    for (const VectorMathKernel* kernel : kernels) {
      const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
      CAPTURE(isa);
      const auto ours = run(kernel->isa);
      REQUIRE(ours.size() == portable.size());
      for (std::size_t i = 0; i < ours.size(); ++i) {
#if defined(__FMA__)
        CHECK_MESSAGE(std::abs(ours[i] - portable[i]) <= 1e-5f * (1.0f + std::abs(portable[i])), "output " << i);
#else
        CHECK_MESSAGE(std::bit_cast<std::uint32_t>(ours[i]) == std::bit_cast<std::uint32_t>(portable[i]),
                      "output " << i << ": " << ours[i] << " against " << portable[i]);
#endif
        ++compared;
      }
    }
  }
  ef::backend::set_max_cpu_isa(saved);
  eftest::check_ran_at_least(compared, kernels.empty() ? 0 : 8 * 5 * 768, "LayerNorm outputs");

  // The two sums alone against backend::sum_in_double, every length up to 40 (the empty sum included) and a
  // long one; the squares' sum with mean 0 is clip_grad_norm's. The mean has all of double's bits, as a row's
  // mean has, so that the squares are not exact (with a short mean such as 9.5 they are, and a fused
  // multiply-add in the kernel would go unseen).
  const double mean = 9.5 + 1.0 / 3.0;
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(10.0f, 3.0f);
  std::vector<float> p(1001);
  for (float& v : p) v = normal(gen);
  std::vector<index_t> lengths(41);
  for (index_t n = 0; n <= 40; ++n) lengths[static_cast<std::size_t>(n)] = n;
  lengths.push_back(1000);
  std::size_t sums = 0;
  for (const VectorMathKernel* kernel : kernels)
    for (index_t n : lengths) {
      CAPTURE(n);
      const float* q = p.data() + 1;  // not 32-byte aligned
      const double plain = ef::backend::sum_in_double(n, [q](index_t j) { return static_cast<double>(q[j]); });
      const double squares = ef::backend::sum_in_double(n, [q, mean](index_t j) {
        const double d = static_cast<double>(q[j]) - mean;
        return d * d;
      });
      CHECK(std::bit_cast<std::uint64_t>(kernel->sum_double(q, n)) == std::bit_cast<std::uint64_t>(plain));
#if !defined(__FMA__)
      CHECK(std::bit_cast<std::uint64_t>(kernel->sum_squared_deviation(q, n, mean)) ==
            std::bit_cast<std::uint64_t>(squares));
#endif
      // Built with FMA (the bits unchecked above), a fused square skips one double rounding a term: 2^-53
      // relative each, so the sums of positive terms agree to far better than 1e-12.
      CHECK(std::abs(kernel->sum_squared_deviation(q, n, mean) - squares) <= 1e-12 * squares);
      ++sums;
    }
  eftest::check_ran_at_least(sums, kernels.empty() ? 0 : 41, "sums");
}

// Cross-entropy's row kernels against double. log_sum_exp: each exp(x - m) has about 2.5 u of its own error
// plus u |x - m| from rounding its argument, and the sum in double adds nothing at float's scale, so the
// error of log(sum) is at most the exps' relative errors weighted by their terms: u (3 + |x - m|) averaged
// with weights exp(x - m). The gradient from a given lse: p = exp((x - hi) - lo) has at most (3 + 2 |x - lse|) u
// relative error (two argument roundings and exp's own), and the subtractions and the scaling one rounding
// each of what they give. Half the rows sit near -80, as GPT-2's logits do: there lse rounded to one float
// alone would be off by up to 32 u, which the split into hi + lo keeps out of every p.
TEST_CASE("vector math: cross-entropy's rows against double; masked classes, inf and NaN") {
  std::mt19937 gen(23);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float off = 0.01f, on_target = 0.9f, scale = 0.25f;
  std::size_t checked = 0;
  for (const VectorMathKernel* kernel : vector_kernels_on_this_cpu()) {
    const std::string isa = ef::backend::cpu_isa_name(kernel->isa);
    CAPTURE(isa);
    for (index_t n : {1, 2, 7, 15, 16, 17, 33, 1000, 50257}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool masked = variant % 2 == 1;
        const float shift = variant < 2 ? 0.0f : -80.0f;
        CAPTURE(n);
        CAPTURE(masked);
        CAPTURE(shift);
        std::vector<float> x(static_cast<std::size_t>(n)), grad(x.size(), 9.0f);
        for (float& v : x) v = normal(gen) + shift;
        if (masked)  // classes a model rules out (-inf logits) and one far below the rest (exp below float's range)
          for (index_t j = 1; j < n; j += 3) x[static_cast<std::size_t>(j)] = j % 2 ? -float_inf : x[0] - 120.0f;
        double m = -float_inf, total = 0, weighted = 0;
        for (float v : x) m = std::max(m, static_cast<double>(v));
        for (float v : x)
          if (v != -float_inf) total += std::exp(v - m), weighted += std::exp(v - m) * (3 + std::abs(v - m));
        const double lse = m + std::log(total);
        const double got = kernel->log_sum_exp(x.data(), n);
        CHECK(std::abs(got - lse) <= weighted / total * unit_roundoff + 1e-12 * std::abs(lse));
        const index_t target = n / 2;
        kernel->cross_entropy_grad(x.data(), grad.data(), n, got, off, target, on_target, scale);
        for (index_t j = 0; j < n; ++j) {
          const float v = x[static_cast<std::size_t>(j)];
          const double p = std::exp(static_cast<double>(v) - got);
          const double hot = j == target ? on_target : 0.0;
          const double expected = (p - off - hot) * scale;
          const double p_error = p == 0 ? 0 : (3 + 2 * std::abs(v - got)) * p;
          const double bound = scale * unit_roundoff * (p_error + 2 * (off + hot)) + unit_roundoff * std::abs(expected);
          CHECK_MESSAGE(std::abs(grad[static_cast<std::size_t>(j)] - expected) <= bound, "element " << j);
          if (v == -float_inf && j != target) CHECK(grad[static_cast<std::size_t>(j)] == -off * scale);
          ++checked;
        }
      }
    }
    // As PyTorch's log_softmax: an infinite max gives NaN (inf - inf), and so does a NaN anywhere.
    for (const std::vector<float>& row : {std::vector<float>{-float_inf, -float_inf, -float_inf},
                                          std::vector<float>{1.0f, float_inf, 0.0f},
                                          std::vector<float>{0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f}})
      CHECK(std::isnan(kernel->log_sum_exp(row.data(), static_cast<index_t>(row.size()))));
  }
  eftest::check_ran_at_least(checked, vector_kernels_on_this_cpu().empty() ? 0 : 200000, "cross-entropy elements");
}
