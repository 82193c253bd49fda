// Random streams that reproduce PyTorch's CPU generator bit for bit, so `manual_seed(123); rand({3, 2})`
// prints the digits a tutorial shows. The facts reproduced here (engine, float/double uniforms, the two
// normal paths, bernoulli, randperm) are checked against fixtures dumped from PyTorch 1.13's native
// kernels by tools/reference/make_fixtures.py (tests/data/rng.json).
//
// Like PyTorch there is one process-wide default generator (`default_generator()`, reseeded by
// `manual_seed`) and explicit `Generator` objects for independent streams; every function takes an optional
// generator as its last argument. A Generator is not thread-safe: use one per thread (layers draw from
// current_generator(), which a GeneratorGuard makes thread-local).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <optional>

#include "eigenformer/tensor/creation.hpp"
#include "eigenformer/tensor/vector_math.hpp"

namespace eigenformer {

namespace detail {

// MT19937 (Matsumoto and Nishimura's 32-bit Mersenne Twister, the engine of PyTorch's CPU generator and of
// std::mt19937), kept here instead of std::mt19937 because that one only hands out a word a call: filling
// a dropout mask then costs ~3.4 ns a word on these machines, against ~0.3 ns when a whole state block is
// regenerated and tempered in loops the compiler vectorises (random_block).
class MersenneTwister {
 public:
  static constexpr int state_size = 624;

  explicit MersenneTwister(std::uint32_t seed = 5489u) { seed_with(seed); }

  void seed_with(std::uint32_t seed) noexcept {
    state_[0] = seed;
    for (int i = 1; i < state_size; ++i)
      state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
    next_ = state_size;
  }

  std::uint32_t operator()() noexcept {
    if (next_ >= state_size) regenerate();
    return temper(state_[next_++]);
  }

  // The next n words of the stream, as n calls would return them.
  void fill(std::uint32_t* out, std::size_t n) noexcept {
    while (n > 0) {
      if (next_ >= state_size) regenerate();
      const std::size_t take = std::min<std::size_t>(n, static_cast<std::size_t>(state_size - next_));
      const std::uint32_t* s = state_ + next_;
      for (std::size_t i = 0; i < take; ++i) out[i] = temper(s[i]);
      next_ += static_cast<int>(take);
      out += take;
      n -= take;
    }
  }

 private:
  static constexpr int shift = 397;

  static std::uint32_t combine(std::uint32_t upper, std::uint32_t lower, std::uint32_t far) noexcept {
    const std::uint32_t y = (upper & 0x80000000u) | (lower & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
  }
  static std::uint32_t temper(std::uint32_t y) noexcept {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  // Three loops so that none reads a word it has already overwritten within a vector's reach.
  void regenerate() noexcept {
    int i = 0;
    for (; i < state_size - shift; ++i) state_[i] = combine(state_[i], state_[i + 1], state_[i + shift]);
    for (; i < state_size - 1; ++i) state_[i] = combine(state_[i], state_[i + 1], state_[i + shift - state_size]);
    state_[state_size - 1] = combine(state_[state_size - 1], state_[0], state_[shift - 1]);
    next_ = 0;
  }

  std::uint32_t state_[state_size];
  int next_ = state_size;
};

}  // namespace detail

class Generator {
 public:
  // PyTorch's default seed, used when no manual_seed call has been made.
  static constexpr std::uint64_t default_seed = 67280421310721ULL;

  explicit Generator(std::uint64_t seed = default_seed) { manual_seed(seed); }

  // Restarts the stream. As in PyTorch the Mersenne Twister takes the low 32 bits of the seed, and the
  // cached second Box-Muller value is dropped.
  Generator& manual_seed(std::uint64_t seed) {
    seed_ = seed;
    engine_.seed_with(static_cast<std::uint32_t>(seed));
    next_double_normal_.reset();
    return *this;
  }
  std::uint64_t initial_seed() const noexcept { return seed_; }

  // One 32-bit draw.
  std::uint32_t random() { return engine_(); }
  // The next n 32-bit draws at once (the words n calls of random() would return, far faster).
  void random_block(std::uint32_t* out, std::size_t n) { engine_.fill(out, n); }
  // Two draws, the first is the high word.
  std::uint64_t random64() {
    const std::uint64_t hi = random();
    const std::uint64_t lo = random();
    return (hi << 32) | lo;
  }

  // Uniform in [from, to): float from the low 24 bits of one draw, double from the low 53 bits of two,
  // scaled in the element type's own arithmetic (as at::uniform_real_distribution does).
  template <floating_element T>
  T uniform(T from = T(0), T to = T(1)) {
    if constexpr (std::is_same_v<T, float>) {
      const float x = static_cast<float>(random() & 0xFFFFFFu) * 0x1.0p-24f;
      return std::fma(x, to - from, from);
    } else {
      const double x = static_cast<double>(random64() & ((std::uint64_t{1} << 53) - 1)) * 0x1.0p-53;
      return std::fma(x, to - from, from);
    }
  }

  // Standard normal by double-precision Box-Muller, caching the second value of each pair
  // (at::normal_distribution<double>); used for tensors of fewer than 16 elements.
  double normal_double() {
    if (next_double_normal_) {
      const double v = *next_double_normal_;
      next_double_normal_.reset();
      return v;
    }
    const double u1 = uniform<double>();
    const double u2 = uniform<double>();
    const double r = std::sqrt(-2.0 * std::log1p(-u2));
    const double theta = 2.0 * std::numbers::pi * u1;
    next_double_normal_ = r * std::sin(theta);
    return r * std::cos(theta);
  }

 private:
  detail::MersenneTwister engine_;
  std::uint64_t seed_ = default_seed;
  std::optional<double> next_double_normal_;
};

// The process-wide generator behind manual_seed/rand/randn when none is passed.
inline Generator& default_generator() {
  static Generator g;
  return g;
}

// torch.manual_seed: reseeds the default generator.
inline void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

namespace detail {
inline Generator*& thread_generator() noexcept {
  thread_local Generator* g = nullptr;
  return g;
}
}  // namespace detail

// The generator that layers draw from while running (dropout masks): the innermost GeneratorGuard of this
// thread, else the default generator. Layers never store a generator, so none can dangle, and a thread that
// trains with its own generator does not race with others on the default one.
inline Generator& current_generator() noexcept {
  Generator* g = detail::thread_generator();
  return g ? *g : default_generator();
}

// Makes `gen` this thread's current_generator() for the guard's lifetime (scopes nest).
class GeneratorGuard {
 public:
  explicit GeneratorGuard(Generator& gen) noexcept : previous_(detail::thread_generator()) {
    detail::thread_generator() = &gen;
  }
  ~GeneratorGuard() { detail::thread_generator() = previous_; }
  GeneratorGuard(const GeneratorGuard&) = delete;
  GeneratorGuard& operator=(const GeneratorGuard&) = delete;

 private:
  Generator* previous_;
};

namespace detail {

// Box-Muller over blocks of 16 uniforms, pairing element j with j + 8 (PyTorch's normal_fill_16). For
// float, theta = float(2 pi) * u2 in float as PyTorch's AVX2 kernel computes it; for double, as its
// scalar kernel does, 2 pi * u2 in double.
template <floating_element T>
void normal_fill_16(T* d, T mean, T stdv) {
  for (int j = 0; j < 8; ++j) {
    const T u1 = T(1) - d[j];  // [0, 1) -> (0, 1] so the log is finite
    const T u2 = d[j + 8];
    const T radius = std::sqrt(T(-2) * std::log(u1));
    const T theta = static_cast<T>(2.0 * std::numbers::pi) * u2;
    d[j] = std::fma(radius * std::cos(theta), stdv, mean);
    d[j + 8] = std::fma(radius * std::sin(theta), stdv, mean);
  }
}

}  // namespace detail

// Fills t in place (row-major order, one draw per element) with uniforms in [from, to) (Tensor.uniform_).
template <floating_element T, std::size_t R>
Tensor<T, R>& uniform_(Tensor<T, R>& t, double from = 0.0, double to = 1.0, Generator& gen = default_generator()) {
  if (!(from <= to))
    throw std::invalid_argument("uniform_: expects from <= to, got from=" + std::to_string(from) +
                                " to=" + std::to_string(to));
  const T a = static_cast<T>(from), b = static_cast<T>(to);
  if (t.is_contiguous()) {
    T* p = t.data();
    for (index_t i = 0, n = t.numel(); i < n; ++i) p[i] = gen.uniform<T>(a, b);
  } else {
    t.copy_(uniform_(Tensor<T, R>::empty(t.shape()), from, to, gen));
  }
  return t;
}
template <floating_element T, std::size_t R>
Tensor<T, R>&& uniform_(Tensor<T, R>&& t, double from = 0.0, double to = 1.0, Generator& gen = default_generator()) {
  return std::move(uniform_(t, from, to, gen));
}

// Fills t in place with normal samples (Tensor.normal_). PyTorch takes two paths and so do we:
// 16 or more contiguous elements are filled by the blocked float/double Box-Muller of normal_fill (with
// the tail block redrawn), fewer (or a non-contiguous view) one element at a time from the cached
// double-precision Box-Muller.
template <floating_element T, std::size_t R>
Tensor<T, R>& normal_(Tensor<T, R>& t, double mean = 0.0, double stdv = 1.0, Generator& gen = default_generator()) {
  if (!(stdv >= 0.0)) throw std::invalid_argument("normal_: expects std >= 0.0, got std=" + std::to_string(stdv));
  const index_t n = t.numel();
  if (n >= 16 && t.is_contiguous()) {
    T* d = t.data();
    for (index_t i = 0; i < n; ++i) d[i] = gen.uniform<T>();
    const T m = static_cast<T>(mean), s = static_cast<T>(stdv);
    for (index_t i = 0; i + 16 <= n; i += 16) detail::normal_fill_16(d + i, m, s);
    if (n % 16 != 0) {
      T* tail = d + n - 16;  // redraw the last 16 (overlapping finished values), as PyTorch does
      for (int i = 0; i < 16; ++i) tail[i] = gen.uniform<T>();
      detail::normal_fill_16(tail, m, s);
    }
    return t;
  }
  auto tmp = Tensor<T, R>::empty(t.shape());
  T* p = tmp.data();
  for (index_t i = 0; i < n; ++i) p[i] = static_cast<T>(std::fma(gen.normal_double(), stdv, mean));
  t.copy_(tmp);
  return t;
}
template <floating_element T, std::size_t R>
Tensor<T, R>&& normal_(Tensor<T, R>&& t, double mean = 0.0, double stdv = 1.0, Generator& gen = default_generator()) {
  return std::move(normal_(t, mean, stdv, gen));
}

// torch.rand / torch.randn: `rand({3, 2})` is a float tensor, `rand<double>({3, 2})` a double one.
template <floating_element T = float, std::size_t N>
Tensor<T, N> rand(const Shape<N>& shape, Generator& gen = default_generator()) {
  auto t = Tensor<T, N>::empty(shape);
  return uniform_(t, 0.0, 1.0, gen);
}
template <floating_element T = float, std::size_t N>
Tensor<T, N> rand(const index_t (&shape)[N], Generator& gen = default_generator()) {
  return rand<T>(detail::to_shape(shape), gen);
}
template <floating_element T = float, std::size_t N>
Tensor<T, N> randn(const Shape<N>& shape, Generator& gen = default_generator()) {
  auto t = Tensor<T, N>::empty(shape);
  return normal_(t, 0.0, 1.0, gen);
}
template <floating_element T = float, std::size_t N>
Tensor<T, N> randn(const index_t (&shape)[N], Generator& gen = default_generator()) {
  return randn<T>(detail::to_shape(shape), gen);
}

namespace detail {
// out[i] = kept where the stream's next double uniform is below p, else 0: the draws of Tensor.bernoulli_(p)
// (two words an element; the uniform is v * 2^-53 with v the low 53 bits), compared as integers: scaling
// both sides by 2^53 is exact, so u < p exactly when v < ceil(p * 2^53). Dropout passes kept = 1 / (1 - p).
template <floating_element T>
void bernoulli_fill(T* out, index_t n, double p, T kept, Generator& gen) {
  const auto threshold = static_cast<std::uint64_t>(std::ceil(p * 0x1.0p53));
  [[maybe_unused]] const auto* kernel = backend::detail::vector_math_kernel_for_type<T>();
  constexpr index_t chunk = 1024;  // 8 KB of words: stays in L1 between drawing and comparing
  std::uint32_t words[2 * chunk];
  for (index_t start = 0; start < n; start += chunk) {
    const index_t len = std::min(chunk, n - start);
    gen.random_block(words, static_cast<std::size_t>(2 * len));
    T* o = out + start;
    if constexpr (std::is_same_v<T, float>) {
      // The same comparison by the vector kernel chosen at run time (tensor/vector_math.hpp): without it,
      // a build without -mavx2 has no 64-bit vector compare and runs this loop one element at a time.
      if (kernel) {
        kernel->bernoulli(words, o, len, threshold, kept);
        continue;
      }
    }
    for (index_t i = 0; i < len; ++i) {
      const std::uint64_t v = (std::uint64_t{words[2 * i] & 0x1FFFFFu} << 32) | words[2 * i + 1];
      o[i] = v < threshold ? kept : T(0);
    }
  }
}
}  // namespace detail

// Fills t with 1 where a double uniform is below p, else 0 (Tensor.bernoulli_(p)). This is the stream
// of PyTorch builds without MKL (such as Debian's); pip wheels built with MKL draw masks from MKL's own
// generator, which no other library reproduces.
template <floating_element T, std::size_t R>
Tensor<T, R>& bernoulli_(Tensor<T, R>& t, double p, Generator& gen = default_generator()) {
  if (!(p >= 0.0 && p <= 1.0)) throw std::invalid_argument("bernoulli_: expects 0 <= p <= 1, got p=" + std::to_string(p));
  if (t.is_contiguous()) {
    detail::bernoulli_fill(t.data(), t.numel(), p, T(1), gen);
  } else {
    auto tmp = Tensor<T, R>::empty(t.shape());
    detail::bernoulli_fill(tmp.data(), tmp.numel(), p, T(1), gen);
    t.copy_(tmp);
  }
  return t;
}

// A 0/1 tensor with P(out[i] = 1) = probs[i], one float uniform per element (torch.bernoulli(probs)).
template <floating_element T, std::size_t R>
Tensor<T, R> bernoulli(const Tensor<T, R>& probs, Generator& gen = default_generator()) {
  auto out = Tensor<T, R>::empty(probs.shape());
  T* d = out.data();
  index_t i = 0;
  probs.for_each_value([&](const T& p) {
    if (!(p >= T(0) && p <= T(1)))
      throw std::invalid_argument("bernoulli: probability " + std::to_string(p) + " at element " +
                                  std::to_string(i) + " is outside [0, 1]");
    d[i++] = gen.uniform<float>() < static_cast<float>(p) ? T(1) : T(0);
  });
  return out;
}

// A random permutation of 0..n-1 by Fisher-Yates on 32-bit draws (torch.randperm).
inline Tensor<std::int64_t, 1> randperm(index_t n, Generator& gen = default_generator()) {
  if (n < 0) throw std::invalid_argument("randperm: n must be non-negative, got " + std::to_string(n));
  auto r = Tensor<std::int64_t, 1>::empty({n});
  std::int64_t* p = r.data();
  for (index_t i = 0; i < n; ++i) p[i] = i;
  const bool small = n < static_cast<index_t>(std::numeric_limits<std::uint32_t>::max() / 20);
  for (index_t i = 0; i + 1 < n; ++i) {
    const auto span = static_cast<std::uint64_t>(n - i);
    const auto z = static_cast<index_t>((small ? gen.random() : gen.random64()) % span);
    std::swap(p[i], p[i + z]);
  }
  return r;
}

}  // namespace eigenformer
