// The compute backend: gemm against a double-precision triple loop for every operand layout, alpha/beta,
// bias and activation; results bit-identical for every thread count (gemm, matmul, softmax, reductions);
// several user threads sharing the pool; parallel_for's ranges, nesting and exceptions; set_num_threads.
// The few-row products of decoding (gemv.hpp, support/gemv_check.hpp) on each instruction set, and float ->
// bfloat16 rounding against PyTorch's bits (tests/data/bf16.json, tools/reference/make_bf16_fixtures.py).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numbers>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "support/cases.hpp"
#include "support/child_process.hpp"
#include "support/fixtures.hpp"
#include "support/gemv_check.hpp"
#include "support/thread_counts.hpp"
#include "support/throws.hpp"

namespace {

using namespace eftest;
namespace be = ef::backend;

// Values in [-1, 1) from a fixed linear congruential stream: reproducible, no dependence on the library's
// own generators.
template <typename T, std::size_t R>
ef::Tensor<T, R> uniform(const ef::Shape<R>& shape, std::uint64_t seed) {
  auto t = ef::Tensor<T, R>::empty(shape);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (index_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    t.data()[i] = static_cast<T>(static_cast<double>(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return t;
}

// The bytes of a tensor's elements in row-major order: equal vectors mean bit-identical results (a NaN or
// a -0 would not hide behind ==).
template <typename T, std::size_t R>
std::vector<unsigned char> bits(const ef::Tensor<T, R>& t) {
  const auto v = t.contiguous();
  std::vector<unsigned char> out(static_cast<std::size_t>(v.numel()) * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

double act_ref(double x, be::Activation a) {
  switch (a) {
    case be::Activation::none: return x;
    case be::Activation::relu: return x > 0 ? x : 0;
    case be::Activation::gelu_erf: return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
    case be::Activation::gelu_tanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

const char* act_name(be::Activation a) {
  switch (a) {
    case be::Activation::none: return "none";
    case be::Activation::relu: return "relu";
    case be::Activation::gelu_erf: return "gelu_erf";
    case be::Activation::gelu_tanh: return "gelu_tanh";
  }
  return "?";
}

// The operand a (rows x cols) in one of three layouts with the same values: row-major, a transposed view
// of a column-major buffer (read in place), and a view strided both ways (copied by gemm).
enum class Layout { row_major, transposed, strided };
template <typename T>
ef::Tensor<T, 2> in_layout(const ef::Tensor<T, 2>& a, Layout layout) {
  const index_t rows = a.size(0), cols = a.size(1);
  switch (layout) {
    case Layout::row_major: return a;
    case Layout::transposed: return a.t().contiguous().t();
    case Layout::strided: {
      auto wide = ef::zeros<T>(ef::Shape<2>{rows * 2, cols * 3});
      auto view = wide.slice(0, 0, rows * 2, 2).slice(1, 0, cols * 3, 3);
      for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) view(i, j) = a(i, j);
      return view;
    }
  }
  return a;
}

}  // namespace

TEST_CASE("backend: Eigen does not thread products itself") {
  // Eigen's OpenMP path would split each tile a second time, across threads the pool does not manage.
  CHECK(Eigen::nbThreads() == 1);
}

// Error bound for an element: a K-term dot product in floating point (any summation order, FMA or not)
// is within gamma_{K+2} * sum_k |a_ik b_kj| of the exact value (Higham, Accuracy and Stability, 3.1), with
// gamma_n = n u / (1 - n u); +2 for alpha's scaling and the beta * c / bias additions, bounded by the same
// sum of magnitudes plus |beta c| + |bias|. The activations are at most 1.13-Lipschitz (GELU's slope
// peaks at 1.13) and libm's erf/tanh in T add a few ulp of the result. Any mistake in layout, scaling or
// epilogue order is O(1) and far outside this.
TEST_CASE_TEMPLATE("backend: gemm equals a double-precision product for every layout, alpha/beta, bias and activation",
                   T, float, double) {
  const RestoreThreadCount restore_threads;
  ef::set_num_threads(2);
  const double u = std::numeric_limits<T>::epsilon() / 2;
  // A small product (one tile) and one large enough to be cut into several tiles.
  // Plain variables, not structured bindings: CAPTURE takes them in a lambda, which clang before 16 does not
  // allow for a binding.
  for (const auto& mkn : {std::array<index_t, 3>{7, 5, 9}, std::array<index_t, 3>{131, 67, 97}}) {
    const index_t m = mkn[0], k = mkn[1], n = mkn[2];
    const auto a0 = uniform<T>(ef::Shape<2>{m, k}, 1);
    const auto b0 = uniform<T>(ef::Shape<2>{k, n}, 2);
    const auto c0 = uniform<T>(ef::Shape<2>{m, n}, 3);
    const auto bias = uniform<T>(ef::Shape<1>{n}, 4);
    for (auto la : {Layout::row_major, Layout::transposed, Layout::strided})
      for (auto lb : {Layout::row_major, Layout::transposed, Layout::strided})
        for (const auto& alpha_beta : {std::pair<T, T>{1, 0}, std::pair<T, T>{T(-0.75), T(1)}, std::pair<T, T>{2, T(0.5)}})
          for (bool with_bias : {false, true})
            for (auto act : {be::Activation::none, be::Activation::relu, be::Activation::gelu_erf,
                             be::Activation::gelu_tanh}) {
              const T alpha = alpha_beta.first, beta = alpha_beta.second;
              CAPTURE(m);
              CAPTURE(static_cast<int>(la));
              CAPTURE(static_cast<int>(lb));
              CAPTURE(alpha);
              CAPTURE(beta);
              CAPTURE(with_bias);
              CAPTURE(act_name(act));
              const auto a = in_layout(a0, la);
              const auto b = in_layout(b0, lb);
              auto c = c0.clone();
              be::gemm(a, b, c, alpha, beta, {with_bias ? &bias : nullptr, act});
              const double gamma = (k + 2) * u / (1 - (k + 2) * u);
              double worst = 0;  // the largest error as a fraction of its bound
              for (index_t i = 0; i < m; ++i)
                for (index_t j = 0; j < n; ++j) {
                  double dot = 0, mag = 0;
                  for (index_t p = 0; p < k; ++p) {
                    dot += double(a0(i, p)) * double(b0(p, j));
                    mag += std::abs(double(a0(i, p)) * double(b0(p, j)));
                  }
                  double pre = double(alpha) * dot + double(beta) * double(c0(i, j));
                  double pre_mag = std::abs(double(alpha)) * mag + std::abs(double(beta) * double(c0(i, j)));
                  if (with_bias) {
                    pre += double(bias(j));
                    pre_mag += std::abs(double(bias(j)));
                  }
                  const double ref = act_ref(pre, act);
                  const double bound = 1.13 * gamma * pre_mag + 4 * u * std::abs(ref) + 4 * std::numeric_limits<T>::min();
                  worst = std::max(worst, std::abs(double(c(i, j)) - ref) / bound);
                }
              CHECK(worst <= 1.0);
            }
  }
}

TEST_CASE("backend: gemm's fresh-result form, k = 0, and its shape errors") {
  const auto a = uniform<float>(ef::Shape<2>{3, 4}, 5);
  const auto b = uniform<float>(ef::Shape<2>{4, 2}, 6);
  const auto bias = ef::Tensor<float, 1>{0.5f, -0.25f};
  const auto c = be::gemm(a, b, {&bias, be::Activation::none});
  auto c2 = ef::Tensor<float, 2>::empty(ef::Shape<2>{3, 2});
  be::gemm(a, b, c2);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 2; ++j) CHECK(c(i, j) == c2(i, j) + bias(j));
  // An empty inner dimension: the product is zero, the epilogue still applies.
  const auto e = be::gemm(ef::Tensor<float, 2>::empty(ef::Shape<2>{3, 0}), ef::Tensor<float, 2>::empty(ef::Shape<2>{0, 2}),
                          {&bias, be::Activation::relu});
  CHECK(e.to_vector() == std::vector<float>{0.5f, 0, 0.5f, 0, 0.5f, 0});

  auto wrong = ef::Tensor<float, 2>::empty(ef::Shape<2>{3, 3});
  CHECK_THROWS_WITH_EXACTLY(be::gemm(a, b, wrong), "gemm: [3, 4] x [4, 2] -> [3, 3]: shapes do not agree", ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(be::gemm(a, a), "gemm: [3, 4] x [3, 4] -> [3, 4]: shapes do not agree", ef::shape_error);
  const auto bias3 = ef::Tensor<float, 1>{1, 2, 3};
  CHECK_THROWS_WITH_EXACTLY(be::gemm(a, b, {&bias3, be::Activation::none}),
                       "gemm: bias [3] does not match the 2 output columns", ef::shape_error);
  auto strided_out = ef::Tensor<float, 2>::empty(ef::Shape<2>{2, 3}).t();
  CHECK_THROWS_WITH_EXACTLY(be::gemm(a, b, strided_out), "gemm: the output [3, 2] needs unit column stride",
                       ef::shape_error);
}

TEST_CASE_TEMPLATE("backend: gemm, matmul, softmax and reductions are bit-identical for 1 to 4 threads", T, float,
                   double) {
  const RestoreThreadCount restore_threads;
  const auto a = uniform<T>(ef::Shape<2>{257, 129}, 7);
  const auto b = uniform<T>(ef::Shape<2>{129, 65}, 8);
  const auto wt = uniform<T>(ef::Shape<2>{65, 129}, 9);  // (out, in): used as wt.t(), read in place
  const auto bias = uniform<T>(ef::Shape<1>{65}, 10);
  const auto c_in = uniform<T>(ef::Shape<2>{257, 65}, 11);
  const auto x = uniform<T>(ef::Shape<3>{3, 67, 45}, 12);
  const auto qa = uniform<T>(ef::Shape<4>{3, 1, 67, 45}, 13);
  const auto qb = uniform<T>(ef::Shape<4>{1, 5, 71, 45}, 14);  // used transposed: (1, 5, 45, 71)
  const auto s = uniform<T>(ef::Shape<3>{5, 129, 257}, 15) * 20.0;
  const auto v = uniform<T>(ef::Shape<1>{129}, 16);
  const auto long_a = uniform<T>(ef::Shape<2>{97, 1031}, 17);
  const auto long_b = uniform<T>(ef::Shape<2>{1031, 83}, 18);

  auto run = [&] {
    std::vector<std::vector<unsigned char>> r;
    r.push_back(bits(be::gemm(a, b, {&bias, be::Activation::gelu_tanh})));
    r.push_back(bits(be::gemm(a, wt.t(), {&bias, be::Activation::gelu_erf})));
    auto c = c_in.clone();
    be::gemm(a.t().contiguous().t(), b, c, T(0.5), T(-1.5), {nullptr, be::Activation::relu});
    r.push_back(bits(c));
    r.push_back(bits(ef::matmul(a, b)));
    r.push_back(bits(ef::matmul(long_a, long_b)));                    // K long enough for Eigen to split it
    r.push_back(bits(ef::matmul(x, wt.narrow(1, 0, 45).t())));        // 3-D x 2-D: one gemm over all rows
    r.push_back(bits(ef::matmul(qa, qb.transpose(-2, -1))));          // batched, both batch dims broadcast
    r.push_back(bits(ef::matmul(x.transpose(-2, -1), x)));            // batched, transposed left operand
    r.push_back(bits(ef::matmul(v, b)));                              // 1-D x 2-D
    r.push_back(bits(ef::matmul(a, v)));                              // 2-D x 1-D
    r.push_back(bits(ef::softmax(s, -1)));
    r.push_back(bits(ef::softmax(s, 1)));                             // strided lanes
    r.push_back(bits(ef::log_softmax(s, -1)));
    r.push_back(bits(ef::sum(s, -1)));
    r.push_back(bits(ef::var(s, 1)));
    r.push_back(bits(s + v.narrow(0, 0, 129).unsqueeze(1)));          // broadcast rows
    r.push_back(bits(s.transpose(1, 2) - s.select(0, 0).t()));        // strided operands
    r.push_back(bits(ef::exp(s * 0.1)));                              // Eigen's vectorised path
    r.push_back(bits(ef::erf(s.transpose(0, 2))));                    // libm per element, strided input
    return r;
  };
  ef::set_num_threads(1);
  const auto serial = run();
  for (int threads : {2, 3, 4}) {
    CAPTURE(threads);
    ef::set_num_threads(threads);
    const auto threaded = run();
    REQUIRE(threaded.size() == serial.size());
    for (std::size_t i = 0; i < serial.size(); ++i) {
      CAPTURE(i);
      CHECK(threaded[i] == serial[i]);
    }
  }
  // Threaded matmul is still the product: the single-thread run equals the plain Eigen product to rounding.
  ef::set_num_threads(4);
  const auto p = ef::matmul(a, b);
  const auto ref = (ef::as_matrix(a) * ef::as_matrix(b)).eval();
  for (index_t i = 0; i < 257; i += 16)
    for (index_t j = 0; j < 65; j += 8) CHECK(double(p(i, j)) == doctest::Approx(double(ref(i, j))).epsilon(1e-4));
}

TEST_CASE("backend: parallel_for's ranges depend on n and grain only, and workers take part") {
  const RestoreThreadCount restore_threads;
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    ef::set_num_threads(threads);
    std::mutex mu;
    std::set<std::pair<index_t, index_t>> ranges;
    ef::backend::parallel_for(10, 3, [&](index_t begin, index_t end) {
      std::lock_guard<std::mutex> lock(mu);
      ranges.insert({begin, end});
    });
    CHECK(ranges == std::set<std::pair<index_t, index_t>>{{0, 3}, {3, 6}, {6, 9}, {9, 10}});
  }
  // Nothing to do, and a grain below 1 read as 1.
  int calls = 0;
  ef::backend::parallel_for(0, 4, [&](index_t, index_t) { ++calls; });
  CHECK(calls == 0);
  ef::set_num_threads(1);
  ef::backend::parallel_for(3, 0, [&](index_t b, index_t e) { calls += static_cast<int>(e - b); });
  CHECK(calls == 3);

  // With 4 threads and chunks that take a while, more than one thread runs them (the pool is used), and one
  // chunk runs on the calling thread with no pool at all.
  ef::set_num_threads(4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  ef::backend::parallel_for(32, 1, [&](index_t, index_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(ids.size() > 1);
  std::thread::id single;
  ef::backend::parallel_for(5, 8, [&](index_t, index_t) { single = std::this_thread::get_id(); });
  CHECK(single == std::this_thread::get_id());
}

TEST_CASE("backend: a parallel_for inside a chunk runs inline on that chunk's thread") {
  const RestoreThreadCount restore_threads;
  ef::set_num_threads(3);
  std::atomic<int> mismatches{0}, inner_total{0};
  ef::backend::parallel_for(12, 1, [&](index_t, index_t) {
    const auto outer = std::this_thread::get_id();
    ef::backend::parallel_for(40, 1, [&](index_t b, index_t e) {
      if (std::this_thread::get_id() != outer) ++mismatches;
      inner_total += static_cast<int>(e - b);
    });
  });
  CHECK(mismatches == 0);
  CHECK(inner_total == 12 * 40);
  // A gemm inside a chunk (the nn layers call gemm from their own loops) gives the usual bits.
  const auto a = uniform<float>(ef::Shape<2>{200, 150}, 17);
  const auto b = uniform<float>(ef::Shape<2>{150, 90}, 18);
  const auto outside = bits(be::gemm(a, b));
  std::vector<std::vector<unsigned char>> inside(4);
  ef::backend::parallel_for(4, 1, [&](index_t i, index_t) { inside[static_cast<std::size_t>(i)] = bits(be::gemm(a, b)); });
  for (const auto& r : inside) CHECK(r == outside);
}

TEST_CASE("backend: an exception thrown by a chunk reaches the caller, and the pool stays usable") {
  const RestoreThreadCount restore_threads;
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    ef::set_num_threads(threads);
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_EXACTLY(ef::backend::parallel_for(100, 1,
                                                   [&](index_t b, index_t) {
                                                     ++ran;
                                                     if (b == 37) throw std::runtime_error("chunk 37 failed");
                                                   }),
                         "chunk 37 failed", std::runtime_error);
    CHECK(ran >= 1);
    // Thrown from a nested parallel_for, on whichever thread.
    CHECK_THROWS_EXACTLY(ef::backend::parallel_for(8, 1,
                                              [&](index_t b, index_t) {
                                                ef::backend::parallel_for(8, 1, [&](index_t ib, index_t) {
                                                  if (b == 5 && ib == 3) throw std::out_of_range("nested");
                                                });
                                              }),
                    std::out_of_range);
    // Shape errors of a gemm called inside a chunk come out as they are.
    const auto a = uniform<float>(ef::Shape<2>{3, 4}, 19);
    CHECK_THROWS_EXACTLY(ef::backend::parallel_for(4, 1, [&](index_t, index_t) { (void)ef::matmul(a, a); }),
                    ef::shape_error);
    std::atomic<index_t> sum{0};
    ef::backend::parallel_for(1000, 7, [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) sum += i;
    });
    CHECK(sum == 999 * 1000 / 2);
  }
}

TEST_CASE("backend: set_num_threads rejects counts below 1 and get_num_threads reports the setting") {
  const RestoreThreadCount restore_threads;
  CHECK(ef::get_num_threads() >= 1);
  CHECK_THROWS_WITH_EXACTLY(ef::set_num_threads(0), "set_num_threads: expected a positive number of threads, got 0",
                       std::invalid_argument);
  CHECK_THROWS_EXACTLY(ef::set_num_threads(-3), std::invalid_argument);
  CHECK(ef::get_num_threads() == restore_threads.saved);
  ef::set_num_threads(3);
  CHECK(ef::get_num_threads() == 3);
}

// Four user threads share one pool (as four requests on one model would): whichever of them gets the pool,
// and whoever runs their chunks, each gets the single-thread bits. A fifth thread keeps changing the
// thread count meanwhile.
TEST_CASE("backend: four user threads computing at once get the single-thread bits") {
  const RestoreThreadCount restore_threads;
  const auto w = uniform<float>(ef::Shape<2>{384, 128}, 20);  // (out, in) as nn.Linear stores it
  const auto bias = uniform<float>(ef::Shape<1>{384}, 21);
  std::vector<ef::Tensor<float, 3>> xs;
  for (int t = 0; t < 4; ++t) xs.push_back(uniform<float>(ef::Shape<3>{2, 96, 128}, 22 + static_cast<std::uint64_t>(t)));

  // One user's work: a linear layer with fused GELU, attention scores, softmax, weighted sum.
  auto work = [&](const ef::Tensor<float, 3>& x) {
    std::vector<std::vector<unsigned char>> r;
    const auto x2 = x.reshape(ef::Shape<2>{2 * 96, 128});
    const auto h = be::gemm(x2, w.t(), {&bias, be::Activation::gelu_tanh});
    r.push_back(bits(h));
    const auto q = h.narrow(1, 0, 128).reshape(ef::Shape<3>{2, 96, 128});
    const auto k = h.narrow(1, 128, 128).contiguous().reshape(ef::Shape<3>{2, 96, 128});
    const auto scores = ef::matmul(q, k.transpose(-2, -1)) / 11.3;
    const auto weights = ef::softmax(scores, -1);
    r.push_back(bits(weights));
    r.push_back(bits(ef::matmul(weights, x)));
    return r;
  };
  ef::set_num_threads(1);
  std::vector<std::vector<std::vector<unsigned char>>> expected;
  for (const auto& x : xs) expected.push_back(work(x));

  ef::set_num_threads(4);
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0}, errors{0};
  std::thread changer([&] {
    for (int n = 0; !done; n = (n + 1) % 4) {
      ef::set_num_threads(n + 1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> users;
  for (int t = 0; t < 4; ++t)
    users.emplace_back([&, t] {
      try {
        for (int rep = 0; rep < 8; ++rep)
          if (work(xs[static_cast<std::size_t>(t)]) != expected[static_cast<std::size_t>(t)]) ++mismatches;
      } catch (...) {
        ++errors;
      }
    });
  for (auto& u : users) u.join();
  done = true;
  changer.join();
  CHECK(errors == 0);
  CHECK(mismatches == 0);
}

// ThreadSanitizer does not support a child that starts threads after a multi-threaded fork (the child dies
// with its own exit code), so its build (preset "tsan") leaves the fork test out.
#if defined(__SANITIZE_THREAD__)
#define EIGENFORMER_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EIGENFORMER_TEST_UNDER_TSAN 1
#endif
#endif

#if (defined(__unix__) || defined(__APPLE__)) && !defined(EIGENFORMER_TEST_UNDER_TSAN)
// How many distinct threads ran the chunks of a parallel_for whose 16 chunks each take 2 ms: with a pool of
// 2, both threads (the caller and one worker) take some.
static int threads_running_chunks() {
  std::mutex m;
  std::set<std::thread::id> ids;
  ef::backend::parallel_for(16, 1, [&](ef::index_t, ef::index_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  return static_cast<int>(ids.size());
}

TEST_CASE("backend: a child forked after the pool started runs its loops on the pool's threads and exits") {
  const RestoreThreadCount restore_threads;
  ef::set_num_threads(2);
  REQUIRE(threads_running_chunks() == 2);  // the pool and its worker exist before the fork
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: exit status 10 + the threads of its first loop, plus 50 if a product after it came out the
    // wrong shape.
    const auto a = uniform<float>(ef::Shape<2>{64, 96}, 31), b = uniform<float>(ef::Shape<2>{96, 80}, 32);
    const int threads = threads_running_chunks();
    const auto c = ef::matmul(a, b);
    std::fflush(nullptr);
    _exit(10 + threads + (c.numel() == 64 * 80 ? 0 : 50));
  }
  const auto waited = wait_for_child(pid, std::chrono::milliseconds(20000));
  REQUIRE_MESSAGE(waited.has_value(), "the child did not finish within 20 s");
  const int status = *waited;
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 12, "the child's first loop ran on " << WEXITSTATUS(status) - 10 << " threads");
  CHECK(threads_running_chunks() == 2);  // the parent's pool still works
}
#endif

// The chunked element-wise loops (used above 32768 elements) against the element-by-element definition,
// on operands that take each path: contiguous, broadcast, transposed.
TEST_CASE("backend: element-wise ops on large tensors equal the element-by-element result") {
  const RestoreThreadCount restore_threads;
  ef::set_num_threads(3);
  const auto a = uniform<float>(ef::Shape<2>{301, 257}, 30);
  const auto b = uniform<float>(ef::Shape<2>{257, 301}, 31);  // used as b.t()
  const auto row = uniform<float>(ef::Shape<1>{257}, 32);
  const auto sum = a + b.t();
  const auto biased = a * row;
  const auto shifted = 2.0 - a;
  const auto roots = ef::sqrt(ef::abs(a.t()));
  const auto erfs = ef::erf(a);
  const auto masked = ef::masked_fill(a, a > 0.5, -1.0);
  for (index_t i = 0; i < 301; ++i)
    for (index_t j = 0; j < 257; ++j) {
      CHECK(sum(i, j) == a(i, j) + b(j, i));
      CHECK(biased(i, j) == a(i, j) * row(j));
      CHECK(shifted(i, j) == 2.0f - a(i, j));
      CHECK(roots(j, i) == std::sqrt(std::abs(a(i, j))));
      CHECK(erfs(i, j) == std::erf(a(i, j)));
      CHECK(masked(i, j) == (a(i, j) > 0.5f ? -1.0f : a(i, j)));
    }
}

// A bias gradient's column sums split between threads by column_reduction_grain: each column is still summed
// whole, rows in order, so 1 to 4 threads give the same bits, and a strided view (one slice of a fused
// (N, 3C) gradient) read in place gives the bits of its contiguous copy. Against a double-precision sum:
// each of the 1000 float additions rounds by at most 2^-24 of its result, which is at most the sum of
// magnitudes, so the error is at most 1000 x 2^-24 (6e-5) of that sum; a row left out would move a column by
// ~0.5 against a bound of ~0.03.
TEST_CASE("backend: add_column_sums splits columns between threads, same bits for 1 to 4 threads and for views") {
  const RestoreThreadCount restore_threads;
  const index_t n = 1000, c = 200;
  const auto fused = uniform<float>(ef::Shape<2>{n, 3 * c}, 40);
  const auto g = fused.narrow(1, c, c);  // rows 3c apart
  REQUIRE(g.strides()[0] == 3 * c);
  const auto start = uniform<float>(ef::Shape<1>{c}, 41);
  // The split is real: more than one chunk on 2 threads, each a whole number of 64-byte lines.
  const index_t grain = be::column_reduction_grain(c, n, 2);
  REQUIRE(grain < c);
  CHECK(grain % 16 == 0);
  auto sums = [&](const ef::Tensor<float, 2>& x) {
    auto out = start.clone();
    be::add_column_sums(x, out.data());
    return out;
  };
  ef::set_num_threads(1);
  const auto serial = sums(g);
  CHECK(bits(sums(g.contiguous())) == bits(serial));
  for (int threads : {2, 3, 4}) {
    CAPTURE(threads);
    ef::set_num_threads(threads);
    CHECK(bits(sums(g)) == bits(serial));
    CHECK(bits(sums(g.contiguous())) == bits(serial));
  }
  for (index_t j = 0; j < c; ++j) {
    double ref = start(j), magnitude = std::abs(double(start(j)));
    for (index_t i = 0; i < n; ++i) ref += g(i, j), magnitude += std::abs(double(g(i, j)));
    CHECK(std::abs(double(serial(j)) - ref) <= double(n) * 0x1p-24 * magnitude);
  }
}

TEST_CASE("backend: zero_fill zeroes exactly its range on the pool") {
  const RestoreThreadCount restore_threads;
  ef::set_num_threads(3);
  const index_t n = (index_t{1} << 17) + 37;  // three runs of the pool's 2^16, the last partial
  std::vector<float> v(static_cast<std::size_t>(n), 1.5f);
  be::zero_fill(v.data() + 3, n - 6);
  index_t right = 0;  // zero inside the range, untouched outside it
  for (index_t i = 0; i < n; ++i) {
    const bool inside = i >= 3 && i < n - 3;
    if (v[static_cast<std::size_t>(i)] == (inside ? 0.0f : 1.5f)) ++right;
  }
  CHECK(right == n);
}

TEST_CASE("backend: products of 1-4 rows (gemv.hpp), float and bfloat16 weights, both layouts, 1-3 threads") {
  // Each instruction set this CPU has (AVX-512, AVX2, and the portable loops), chosen as a program would be.
  const be::CpuIsa saved = be::cpu_isa();
  std::size_t ran = 0;
  for (const be::CpuIsa isa : {be::CpuIsa::avx512, be::CpuIsa::avx2, be::CpuIsa::baseline}) {
    if (static_cast<int>(isa) > static_cast<int>(be::detected_cpu_isa())) continue;
    const std::string name = be::cpu_isa_name(isa);
    CAPTURE(name);
    REQUIRE(be::set_max_cpu_isa(isa) == isa);
    REQUIRE(be::detail::gemv_kernel().isa == isa);
    gemv_check::check_products();
    ++ran;
  }
  be::set_max_cpu_isa(saved);
  // The levels are ordered, baseline = 0: the detected one and every one below it.
  check_ran(ran, static_cast<std::size_t>(be::detected_cpu_isa()) + 1, "instruction sets");
}

TEST_CASE("bfloat16: float -> bfloat16 rounding equals PyTorch's bits, NaN, inf, ties and subnormals included (fixture)") {
  const json file = load_fixture("bf16.json");
  std::size_t ran = 0, values = 0;
  for (const auto& c : file.at("cases")) {
    if (c.at("kind") != "round") continue;
    const auto in = c.at("bits").get<std::vector<std::uint32_t>>();
    const auto out = c.at("bf16").get<std::vector<std::uint16_t>>();
    REQUIRE(in.size() == out.size());
    auto t = ef::Tensor<float, 2>::empty({1, static_cast<index_t>(in.size())});
    for (std::size_t i = 0; i < in.size(); ++i) {
      const float x = std::bit_cast<float>(in[i]);
      t.data()[i] = x;
      CHECK_MESSAGE(ef::bf16_bits_from_float(x) == out[i], c.at("name").get<std::string>() << ": bits " << in[i]);
      // Widening is exact: the bfloat16 bits are the float's upper half.
      CHECK(std::bit_cast<std::uint32_t>(ef::float_from_bf16_bits(out[i])) == std::uint32_t(out[i]) << 16);
    }
    // A Bf16Matrix stores the same bits, and round_to_bf16_ leaves each element at its widened bfloat16.
    const ef::Bf16Matrix stored(t);
    ef::round_to_bf16_(t);
    for (std::size_t i = 0; i < in.size(); ++i) {
      CHECK(stored.data()[i] == out[i]);
      CHECK(std::bit_cast<std::uint32_t>(t.data()[i]) == std::uint32_t(out[i]) << 16);
    }
    values += in.size();
    ++ran;
  }
  check_ran(ran, declared_cases(file, "bf16.json", "kind", "round"), "bf16.json round cases");
  CHECK(values > 1000);
  // A transposed view is stored column-major, element (i, j) where it was.
  const auto w = gemv_check::values(3, 5, 7);
  const ef::Bf16Matrix wt(w.t());
  CHECK(wt.col_major());
  CHECK((wt.rows() == 5 && wt.cols() == 3));
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 3; ++j) CHECK(wt.at(i, j) == ef::float_from_bf16_bits(ef::bf16_bits_from_float(w(j, i))));
  // Any other matrix in panels of 64 columns, the last one padded: every element's bits read back, across
  // panel boundaries and in the partial last panel. (That the panels lie where gemv_panel reads them is
  // checked by gemv_check, whose bfloat16 products must equal the float weight's bit for bit.)
  const auto wide = gemv_check::values(5, 150, 9);
  const ef::Bf16Matrix panels(wide);
  CHECK((panels.paneled() && !panels.col_major() && panels.rows() == 5 && panels.cols() == 150));
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 150; ++j) CHECK(panels.bits(i, j) == ef::bf16_bits_from_float(wide(i, j)));
  auto view = gemv_check::values(4, 4, 8).narrow(1, 0, 2);
  CHECK_THROWS_WITH_AS(ef::round_to_bf16_(view), doctest::Contains("strided view"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ef::backend::gemm(gemv_check::values(1, 5, 9), w.t(), ef::Bf16Matrix(w)),
                       doctest::Contains("not a copy of the float weight"), ef::shape_error);
}

// A weight held only as bfloat16 (FloatWeights::release): backend::gemm(a, Bf16Matrix) streams it for 1-4 rows
// and widens it a block of 512 columns at a time for more. Tolerance: gemv_check's bound (a K-term float dot
// product of the widened weights, whose widening is exact); a block or panel read from the wrong place is an
// O(1) error. Shapes: 1100 columns = two full blocks and a partial one, panels crossing the block edges, and
// k = 300 in several of the paneled layout's parts of k; both storage layouts.
TEST_CASE("bfloat16: a weight held only as bfloat16 gives the rounded weight's product for every row count, block by block") {
  const index_t k = 300, n = 1100;
  auto rounded = gemv_check::values(k, n, 21);
  ef::round_to_bf16_(rounded);
  const auto rounded_t = rounded.t().contiguous();  // (n, k): its .t() view is stored column-major
  const ef::Bf16Matrix paneled(rounded), col_major(rounded_t.t());
  REQUIRE((paneled.paneled() && col_major.col_major()));
  // widened_columns gives back the rounded values exactly, for a block that starts and ends inside panels.
  for (const auto* b : {&paneled, &col_major}) {
    const auto block = b->widened_columns(100, 130);
    REQUIRE((block.size(0) == k && block.size(1) == 130));
    std::size_t differ = 0;
    for (index_t i = 0; i < k; ++i)
      for (index_t j = 0; j < 130; ++j) differ += block(i, j) != rounded(i, 100 + j);
    CHECK(differ == 0);
  }
  const auto bias = gemv_check::values(1, n, 23).reshape(ef::Shape<1>{n});
  std::size_t ran = 0;
  for (const index_t m : {1, 3, 4, 5, 40}) {
    const auto a = gemv_check::values(m, k, 22 + static_cast<std::uint64_t>(m));
    for (const auto* b : {&paneled, &col_major}) {
      CAPTURE(m);
      const bool is_col_major = b->col_major();
      CAPTURE(is_col_major);
      const auto c = be::gemm(a, *b);
      REQUIRE((c.size(0) == m && c.size(1) == n));
      CHECK(gemv_check::worst_error(a, [&](index_t p, index_t j) { return rounded(p, j); }, c, c, 1.0, 0.0) <= 1.0);
      // The bias lands on its own column: the exact a b + bias, within the same bound with |bias| as one more
      // term (a kernel may start its sum at the bias or add it last).
      const auto cb = be::gemm(a, *b, be::Epilogue<float>{&bias, be::Activation::none});
      const double gamma = (k + 3) * std::ldexp(1.0, -24);
      double worst = 0;
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) {
          double dot = bias(j), mag = std::abs(double(bias(j)));
          for (index_t p = 0; p < k; ++p) {
            dot += double(a(i, p)) * double(rounded(p, j));
            mag += std::abs(double(a(i, p)) * double(rounded(p, j)));
          }
          worst = std::max(worst, std::abs(double(cb(i, j)) - dot) / (gamma * mag + 1e-37));
        }
      CHECK(worst <= 1.0);
      ++ran;
    }
  }
  check_ran(ran, 10, "row counts x layouts");
  CHECK_THROWS_WITH_AS(be::gemm(gemv_check::values(2, 7, 9), paneled), doctest::Contains("shapes do not agree"),
                       ef::shape_error);
  CHECK_THROWS_AS(paneled.widened_columns(1000, 200), std::out_of_range);
}

// Products of 8 rows or more widen the bfloat16 weight into the packed kernel's panels, a group of columns at a
// time: widen_into_panels writes exactly what PackedMatrix packs from the rounded float weight (a block starting
// inside one of the storage's 64-column panels and ending inside a kernel panel), and the products have the
// float product's bits (the kernel sees the same panels in the same order): 40 rows (one row block) and 300 (two),
// a (K, N) weight of 1100 columns whose k = 300 spans two k blocks and several of the paneled layout's parts of
// k, both layouts, with and without bias + GELU, on 1 and 2 threads. Needs the packed kernel (AVX2 + FMA).
TEST_CASE("bfloat16: a weight held only as bfloat16 widened into the packed kernel's panels gives the float product's bits") {
  const auto* kernel = be::detail::sgemm_kernel();
  if (kernel == nullptr || !be::reads_packed_weight(40)) {
    MESSAGE("skipped: no packed kernel on this CPU or build");
    return;
  }
  const index_t k = 300, n = 1100;
  auto rounded = gemv_check::values(k, n, 31);
  ef::round_to_bf16_(rounded);
  const auto rounded_t = rounded.t().contiguous();
  const ef::Bf16Matrix paneled(rounded), col_major(rounded_t.t());
  REQUIRE((paneled.paneled() && col_major.col_major()));
  const index_t j0 = 2 * kernel->nr, cols = 130;  // j0 + cols ends inside a panel of nr
  const ef::PackedMatrix reference(rounded.narrow(1, j0, cols));
  REQUIRE(!reference.empty());
  std::vector<float> widened(static_cast<std::size_t>(k * kernel->padded_cols(cols)), -1.0f);
  for (const auto* b : {&paneled, &col_major}) {
    std::fill(widened.begin(), widened.end(), -1.0f);
    b->widen_into_panels(*kernel, j0, cols, widened.data());
    CHECK(std::memcmp(widened.data(), reference.data(), widened.size() * sizeof(float)) == 0);
  }
  CHECK_THROWS_AS(paneled.widen_into_panels(*kernel, 1, 10, widened.data()), std::out_of_range);
  // What the products ask for ahead (storage_runs): inside the storage, and at least the columns' bytes.
  for (const auto* b : {&paneled, &col_major}) {
    const auto* begin = reinterpret_cast<const char*>(b->data());
    const auto* end = begin + 2 * k * (b->col_major() ? n : (n + 63) / 64 * 64);
    for (const index_t first : {index_t{0}, j0, n - 100}) {
      const auto runs = b->storage_runs(first, 100);
      REQUIRE(runs.count >= 1);
      index_t bytes = 0;
      for (int r = 0; r < runs.count; ++r) {
        CHECK((runs.start[r] >= begin && runs.start[r] + 64 * (runs.lines[r] - 1) < end));
        bytes += 64 * runs.lines[r];
      }
      CHECK(bytes >= 2 * k * 100);
    }
  }
  const auto bias = gemv_check::values(1, n, 33).reshape(ef::Shape<1>{n});
  std::size_t ran = 0;
  const RestoreThreadCount restore_threads;
  for (const int threads : {1, 2}) {
    ef::set_num_threads(threads);
    for (const index_t m : {40, 300}) {
      const auto a = gemv_check::values(m, k, 32 + static_cast<std::uint64_t>(m));
      for (const bool with_epilogue : {false, true}) {
        const be::Epilogue<float> epilogue{with_epilogue ? &bias : nullptr,
                                           with_epilogue ? be::Activation::gelu_tanh : be::Activation::none};
        const auto expected = be::gemm(a, rounded, epilogue);
        for (const auto* b : {&paneled, &col_major}) {
          CAPTURE(threads);
          CAPTURE(m);
          CAPTURE(with_epilogue);
          CHECK(be::gemm(a, *b, epilogue).to_vector() == expected.to_vector());
          ++ran;
        }
      }
    }
  }
  check_ran(ran, 16, "threads x row counts x epilogues x layouts");
}
