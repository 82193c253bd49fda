// The compute backend: every matrix product of the library (gemm) and every large loop (parallel_for) goes
// through this header, so threading, blocking and fused epilogues live in one place.
//
// Contract that callers rely on:
//   - gemm(a, b, c, alpha, beta, epilogue): c = act(alpha * a b + beta * c + bias), a (M, K) and b (K, N)
//     any 2-D views (a transposed view such as w.t() is read in place), c (M, N) with unit column stride.
//   - parallel_for(n, grain, body) calls body(begin, end) on disjoint ranges covering [0, n). The ranges
//     depend only on n and grain, never on the thread count, and no reduction is split across calls, so
//     results are bit-identical for every thread count.
//   - set_num_threads(n) / EIGENFORMER_NUM_THREADS choose the pool size (default: the CPUs this process may
//     use, available_cpus.hpp).
//
// Threads: one process-wide pool, started on first use, of get_num_threads() - 1 workers; the calling
// thread works too. Only one parallel_for owns the pool at a time. Another user thread that calls in
// meanwhile runs its chunks itself rather than queueing behind the owner, and a parallel_for inside a
// chunk runs inline, so no call ever waits on work it cannot see finishing: no deadlock by construction.
#pragma once

#include "eigenformer/tensor/intrinsics.hpp"  // first: see there
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>  // Eigen::ArrayBase::erf
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <numbers>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

#include "eigenformer/tensor/available_cpus.hpp"
#include "eigenformer/tensor/creation.hpp"
#include "eigenformer/tensor/environment.hpp"
#include "eigenformer/tensor/gemv.hpp"
#include "eigenformer/tensor/onednn_gemm.hpp"
#include "eigenformer/tensor/sgemm_kernel.hpp"
#include "eigenformer/tensor/vector_math.hpp"

// Eigen's own OpenMP threading inside a product would split each block's work a second time, across
// threads the pool does not know about, and make results depend on OMP_NUM_THREADS.
#if defined(EIGEN_HAS_OPENMP)
#error "eigenformer: Eigen was included with OpenMP threading enabled; define EIGEN_DONT_PARALLELIZE (eigenformer threads its products itself)"
#endif

namespace eigenformer {

namespace detail {
inline int default_num_threads() {
  // The pool makes a thread for each; far more than any machine has CPUs is a typo.
  if (const auto n = environment_integer("EIGENFORMER_NUM_THREADS", 1, 4096, "the CPUs this process may use"))
    return static_cast<int>(*n);
  return available_cpus();
}
// Atomic: set_num_threads may run on one thread while another is inside a parallel_for.
inline std::atomic<int>& num_threads_setting() {
  static std::atomic<int> n{default_num_threads()};
  return n;
}
}  // namespace detail

// The number of threads parallel_for and gemm may use (torch.get_num_threads()).
inline int get_num_threads() { return detail::num_threads_setting().load(std::memory_order_relaxed); }
// torch.set_num_threads(n); n >= 1. Results do not depend on it, only the speed does. Takes effect at the
// next parallel_for; one already running keeps the threads it started with.
inline void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: expected a positive number of threads, got " + std::to_string(n));
  detail::num_threads_setting().store(n, std::memory_order_relaxed);
}

// ---- 2-D operand layouts, shared by gemm and matmul -------------------------------------------------------
namespace detail {

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

// How the last two dims of an operand lie in memory.
enum class matrix_layout { row_major, col_major, strided };

struct matrix_view_info {
  matrix_layout layout;
  index_t outer_stride;
};

inline matrix_view_info classify(index_t rows, index_t cols, index_t rs, index_t cs) {
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols))
    return {matrix_layout::row_major, rows == 1 ? std::max<index_t>(cols, 1) : rs};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows))
    return {matrix_layout::col_major, cols == 1 ? std::max<index_t>(rows, 1) : cs};
  return {matrix_layout::strided, 0};
}

// Calls f(map) with an Eigen map of the rows x cols matrix at p, of the given layout.
template <typename T, class F>
void with_matrix_map(const T* p, index_t rows, index_t cols, const matrix_view_info& info, F&& f) {
  using Stride = Eigen::OuterStride<>;
  if (info.layout == matrix_layout::row_major)
    f(Eigen::Map<const RowMajorMatrix<T>, 0, Stride>(p, rows, cols, Stride(info.outer_stride)));
  else
    f(Eigen::Map<const ColMajorMatrix<T>, 0, Stride>(p, rows, cols, Stride(info.outer_stride)));
}

// Element (i, j) of a row- or column-major operand is at p + offset(i, j).
inline index_t matrix_offset(const matrix_view_info& info, index_t i, index_t j) {
  return info.layout == matrix_layout::row_major ? i * info.outer_stride + j : i + j * info.outer_stride;
}

}  // namespace detail

namespace backend {

// What computes float products of 8 rows or more now, for benchmark reports and `--version`-style lines (up
// to gemv_max_rows rows go to gemv.hpp's kernels; 5-7 rows, and all double products, to Eigen): "oneDNN",
// "eigenformer packed kernel (AVX-512)" or "(AVX2)" (cpu_isa()), or "Eigen".
inline const char* gemm_library() {
#if defined(EIGENFORMER_BLAS_ONEDNN)
  return "oneDNN";
#else
  const auto* kernel = detail::sgemm_kernel();
  if (kernel == nullptr) return "Eigen";
  return kernel->isa == CpuIsa::avx512 ? "eigenformer packed kernel (AVX-512)" : "eigenformer packed kernel (AVX2)";
#endif
}

// ---- the thread pool ---------------------------------------------------------------------------------------
namespace detail {

// How long a pool thread spins before it sleeps: a worker waiting for the next parallel_for, and a caller
// waiting for its helpers to finish. EIGENFORMER_SPIN_US (microseconds; 0 = sleep almost at once) overrides it.
// Why 10 ms: on a shared 2-vCPU VM a thread that sleeps lets its vCPU halt, and when the host is busy it hands
// the core to another guest and is slow to give it back. A forward pass has gaps of more than 1 ms now and
// then (a helper paused by the host, the caller's serial work between products); with a 1 ms spin, BERT-base
// b1 on 2 threads took 180 ms in quiet minutes and 280-680 ms in busy ones, with 15-31% of the CPU time stolen,
// while ONNX Runtime's pool in the same minutes lost 6-22% and took 200-380 ms; spinning 10, 30 or 100 ms gave
// medians of 200-209 ms against 395 (1 ms) and 260 (ONNX Runtime) (bench/README.md, "Spinning before sleeping").
// The price: after the last parallel_for a worker burns up to 10 ms of a core before it sleeps (libgomp, behind
// PyTorch's threads, spins 300,000 pause hints by default: 5 ms on that Intel Xeon; LLVM's OpenMP runtime 200 ms).
// 0 still spins one round of 64 pause hints.
inline constexpr long default_spin_microseconds = 10000;
inline std::chrono::microseconds spin_duration() {
  static const std::chrono::microseconds duration = [] {
    // At most an hour: a longer spin only burns the CPU.
    const auto us = eigenformer::detail::environment_integer("EIGENFORMER_SPIN_US", 0, 3'600'000'000LL, "10000 (10 ms)");
    return std::chrono::microseconds(us ? *us : default_spin_microseconds);
  }();
  return duration;
}

// True on pool workers, and on a user thread while it runs chunks of a parallel_for: a parallel_for called
// from there runs inline instead of waiting for a pool that this very call occupies.
inline thread_local bool in_parallel_region = false;

// One parallel_for as the pool sees it: chunks [0, chunks) handed out one at a time by `next`.
struct Job {
  void (*run)(const void* ctx, index_t chunk) = nullptr;
  const void* ctx = nullptr;
  index_t chunks = 0;
  std::atomic<index_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  // Takes chunks until none is left. After a failure the remaining chunks are skipped, not run: the caller
  // is about to throw, and the output is not meant to be read.
  void work() {
    for (index_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        run(ctx, c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  }
};

class ThreadPool {
 public:
  static ThreadPool& instance() {
    static ThreadPool pool;
    return pool;
  }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  ~ThreadPool() {
    alive().store(false);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  // Runs job on the calling thread and up to `helpers` workers. Returns false, having run nothing, when
  // another parallel_for owns the pool: the caller then runs the chunks itself.
  bool try_run(Job& job, int helpers) {
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) return false;
    struct Release {
      std::atomic<bool>& busy;
      ~Release() { busy.store(false, std::memory_order_release); }
    } release{busy_};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      start_workers(helpers);
      job_ = &job;
      helpers_wanted_ = std::min<index_t>(std::min<index_t>(helpers, static_cast<index_t>(workers_.size())),
                                          job.chunks - 1);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    {
      const bool outer = in_parallel_region;
      in_parallel_region = true;
      job.work();
      in_parallel_region = outer;
    }
    // The job lives on the caller's stack: no worker may still hold it when this returns. A helper that
    // took the last chunk usually finishes within microseconds, so the caller spins briefly before it
    // sleeps: a futex sleep and wake-up per product cost ~5% of a two-thread training step.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      helpers_wanted_ = 0;  // from here on no worker joins
    }
    spin_while([&] { return active_.load(std::memory_order_acquire) != 0; });
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
    job_ = nullptr;
    return true;
  }

 private:
  // Eigen asks for initParallel() before products run on several threads (it settles its cache-size statics).
  ThreadPool() {
    Eigen::initParallel();
#if defined(__unix__) || defined(__APPLE__)
    alive().store(true);
    pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);
#endif
  }

  // fork() copies this pool into the child but none of its workers: without the handlers below, the child
  // (a prefork server's worker, a daemon) ran every loop on its calling thread alone (a 1024 x 1024 x 1024
  // float product took 17.0-17.2 ms in the child against 8.5-8.7 in its parent on 2 threads, AMD Zen 5;
  // 8.5-9.3 in the child with them) and could inherit mutex_ locked by a worker. Before the fork the pool's
  // lock is taken, so that no worker holds it at the moment of the copy; in the child the pool forgets the
  // workers it had and starts new ones at its next parallel_for, as libgomp's and PyTorch's pools do. A fork
  // from inside a parallel_for's body is not supported: the child then keeps the pool as copied.
  static std::atomic<bool>& alive() {
    static std::atomic<bool> flag{false};
    return flag;
  }
  static void before_fork() {
    if (alive().load()) instance().mutex_.lock();
  }
  static void after_fork_in_parent() {
    if (alive().load()) instance().mutex_.unlock();
  }
  static void after_fork_in_child() {
    if (!alive().load()) return;
    ThreadPool& pool = instance();
    // The copy of the lock is held by this thread, the only one the child has; a fresh one is unlocked.
    new (&pool.mutex_) std::mutex();
    if (in_parallel_region) return;
    // Waiters recorded in the condition variables and the workers' thread handles belong to threads the
    // child does not have. A joinable std::thread cannot be destroyed, so the handles are leaked on purpose.
    new (&pool.wake_) std::condition_variable();
    new (&pool.idle_) std::condition_variable();
    new std::vector<std::thread>(std::move(pool.workers_));
    pool.workers_.clear();
    pool.job_ = nullptr;
    pool.helpers_wanted_ = 0;
    pool.active_.store(0);
    // A parallel_for that another thread of the parent was running has no thread left to finish it here.
    pool.busy_.store(false);
  }

  // Under mutex_. Workers are only ever added: a smaller set_num_threads leaves the extra ones asleep.
  void start_workers(int helpers) {
    while (static_cast<int>(workers_.size()) < helpers) {
      try {
        // The generation as of now, not as of when the thread first runs: the job about to be posted is new.
        workers_.emplace_back([this, seen = generation_.load(std::memory_order_relaxed)] { worker_main(seen); });
      } catch (const std::system_error&) {
        break;  // the system refuses more threads: run with those there are
      }
    }
  }

  void worker_main(std::uint64_t seen) {
    in_parallel_region = true;
    for (;;) {
      // Back-to-back products (the layers of a forward pass) follow each other within microseconds: spinning
      // (spin_duration) saves the futex wake-up and keeps the vCPU from halting between them.
      spin_while([&] { return generation_.load(std::memory_order_acquire) == seen; });
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      if (job_ == nullptr || helpers_wanted_ == 0) continue;
      --helpers_wanted_;
      active_.fetch_add(1, std::memory_order_relaxed);
      Job* job = job_;
      lock.unlock();
      job->work();
      // Decrement first, then notify under the lock: the caller checks active_ under the same lock before
      // it sleeps, so the wake-up cannot fall between its check and its wait.
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        lock.lock();
        idle_.notify_all();
      }
    }
  }

  // Spins (with the CPU's pause hint, no system call) while busy() holds, for at most spin_duration().
  template <class Busy>
  static void spin_while(Busy busy) {
    const auto until = std::chrono::steady_clock::now() + spin_duration();
    while (busy()) {
      for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#else
        std::this_thread::yield();
#endif
      }
      if (std::chrono::steady_clock::now() >= until) return;
    }
  }

  std::atomic<bool> busy_{false};
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  Job* job_ = nullptr;
  index_t helpers_wanted_ = 0;
  std::atomic<int> active_{0};
  bool stop_ = false;
};

}  // namespace detail

// body(begin, end) over the ranges [0, grain), [grain, 2 grain), ... [.., n), on up to get_num_threads()
// threads. Runs inline, with no thread involved, when there is one range, one thread, or when called from
// inside another parallel_for. An exception thrown by body reaches the caller (the first one, if several).
template <class F>
void parallel_for(index_t n, index_t grain, F&& body) {
  if (n <= 0) return;
  grain = std::max<index_t>(grain, 1);
  const index_t chunks = (n - 1) / grain + 1;
  const int threads = get_num_threads();
  if (chunks > 1 && threads > 1 && !detail::in_parallel_region) {
    struct Context {
      std::remove_reference_t<F>* body;
      index_t n, grain;
    } ctx{&body, n, grain};
    detail::Job job;
    job.ctx = &ctx;
    job.chunks = chunks;
    job.run = [](const void* p, index_t chunk) {
      const auto& c = *static_cast<const Context*>(p);
      const index_t begin = chunk * c.grain;
      (*c.body)(begin, std::min(c.n, begin + c.grain));
    };
    if (detail::ThreadPool::instance().try_run(job, threads - 1)) {
      if (job.error) std::rethrow_exception(job.error);
      return;
    }
  }
  for (index_t begin = 0; begin < n; begin += grain) body(begin, std::min(n, begin + grain));
}

// The grain for a parallel_for over the columns of a reduction down rows (a bias gradient's column sums,
// LayerNorm's parameter gradients, an embedding's scatter-add), where each column is reduced whole, rows in
// order, by one chunk, so that the bits do not depend on the chunks: an equal share of the columns a thread,
// in whole 64-byte lines of floats (16 columns) so that no two threads write one line of a row that starts
// on a line (a row that does not, as in an embedding whose width is no multiple of 16, only costs the line
// the two chunks share), and at least 2^17 elements a chunk, so that a small reduction stays on the calling
// thread. A fixed grain of 1024 or 4096 columns kept the 256-wide reductions of a small model's training step
// on one thread while the other waited. Column sums on 2 threads, AMD Zen 5 (throwaway driver, medians of
// 2001): 2048 x 1024 52.6 us against 86.0 in one chunk, 768 x 512 8.1 against 14.2; 768 x 128 took 5.7 us in
// two chunks against 3.6 in one, hence the minimum (2^15 still split it).
inline index_t column_reduction_grain(index_t cols, index_t rows, int threads = get_num_threads()) {
  constexpr index_t line = 16, min_elements = index_t{1} << 17;
  const auto round_up = [](index_t x) { return (std::max<index_t>(x, 1) + line - 1) / line * line; };
  const index_t share = round_up((cols + std::max(threads, 1) - 1) / std::max(threads, 1));
  return std::max(share, round_up(min_elements / std::max<index_t>(rows, 1)));
}

// data[0, n) = 0 on the pool, in runs of 2^16 elements (256 KiB of floats): a model's gradients, zeroed
// before each training step (zero_grad), are the largest writes of a step that would otherwise run on one
// thread (51 MB for a 50k-word embedding of width 256).
template <floating_element T>
void zero_fill(T* data, index_t n) {
  parallel_for(n, index_t{1} << 16, [data](index_t begin, index_t end) {
    std::memset(static_cast<void*>(data + begin), 0, sizeof(T) * static_cast<std::size_t>(end - begin));
  });
}

// out[i] = sqrt(in[i]) for n values, correctly rounded like std::sqrt (so bit-exact code may use it). A
// std::sqrt loop stays scalar, because the call may set errno, and Eigen's float sqrt is an rsqrt estimate
// under EIGEN_FAST_MATH; the x86 vector sqrt instructions are IEEE-exact, so they are used directly.
template <floating_element T>
void sqrt_exact(const T* in, T* out, index_t n) {
  index_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_sqrt_ps(_mm512_loadu_ps(in + i)));
  else
    for (; i + 8 <= n; i += 8) _mm512_storeu_pd(out + i, _mm512_sqrt_pd(_mm512_loadu_pd(in + i)));
#elif defined(__AVX__)
  if constexpr (std::is_same_v<T, float>)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_sqrt_ps(_mm256_loadu_ps(in + i)));
  else
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(out + i, _mm256_sqrt_pd(_mm256_loadu_pd(in + i)));
#elif defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(in + i)));
  else
    for (; i + 2 <= n; i += 2) _mm_storeu_pd(out + i, _mm_sqrt_pd(_mm_loadu_pd(in + i)));
#endif
  for (; i < n; ++i) out[i] = std::sqrt(in[i]);
}

// ---- gemm --------------------------------------------------------------------------------------------------
enum class Activation { none, relu, gelu_erf, gelu_tanh };

// Applied to each element of c after the product: bias (N) added to every row, then the activation.
template <floating_element T>
struct Epilogue {
  const Tensor<T, 1>* bias = nullptr;
  Activation activation = Activation::none;
};

namespace detail {

// Element-wise activations, the one implementation behind nn's layers and the gemm epilogue.
//
// float: erf and exp come from Eigen's vectorised approximations, a few ulp from libm (PyTorch's own CPU
// kernels vectorise the same way) and 20-35x faster than scalar tanhf / erff with AVX-512, whose GELU had
// been half of a small GPT's training step. Values go through fixed blocks padded to whole packets, so every
// element takes the packet path and its bits do not depend on where it sits in a buffer: a fused epilogue
// and the stand-alone layer agree bit for bit.
// double: libm, element by element, for the finite-difference checks that need every digit.
inline constexpr index_t activation_block = 64;

// out[i] = f(in[i]), or g[i] * f(in[i]) when g is given (a backward: f is then the derivative), through
// blocks of activation_block floats; in may equal out.
template <class F>
void map_float_blocks(const float* g, const float* in, float* out, index_t n, F&& f) {
  using Block = Eigen::Array<float, activation_block, 1>;
  Block x;
  Block y;
  for (index_t i = 0; i < n; i += activation_block) {
    const index_t len = std::min(activation_block, n - i);
    if (len < activation_block) x.setZero();
    x.head(len) = Eigen::Map<const Eigen::ArrayXf>(in + i, len);
    y = f(x);
    if (g) y.head(len) *= Eigen::Map<const Eigen::ArrayXf>(g + i, len);
    Eigen::Map<Eigen::ArrayXf>(out + i, len) = y.head(len);
  }
}

template <floating_element T>
constexpr T gelu_alpha = static_cast<T>(std::numbers::sqrt2 / 2);  // 1 / sqrt(2)
template <floating_element T>
constexpr T gelu_beta = static_cast<T>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2 / pi)
template <floating_element T>
constexpr T gelu_kappa = static_cast<T>(0.044715);
template <floating_element T>
constexpr T inv_sqrt_2pi = static_cast<T>(std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2);

// exp(-2u) for the tanh GELU's u = sqrt(2/pi) (x + 0.044715 x^3), capped below exp's overflow. The float
// blocks write 1 + tanh u = 2 s, s = 1 / (1 + exp(-2u)), and 1 - tanh^2 u = 4 s (exp(-2u) s): Eigen's exp
// is accurate to an ulp or two in relative terms, where 1 + tanh u from its fast tanh would cancel to an
// absolute error of 3e-7 in the negative tail (a derivative of 1.8e-6 came out as 0).
inline Eigen::Array<float, activation_block, 1> exp_minus_2u(const Eigen::Array<float, activation_block, 1>& x) {
  return (-2.0f * gelu_beta<float> * (x + gelu_kappa<float> * x.cube())).min(88.0f).exp();
}

// Scalar forms (double, and the definitions the float blocks follow):
//   gelu_erf(x)   = x/2 (1 + erf(x / sqrt 2))                gelu_erf'(x) = Phi(x) + x phi(x)
//   gelu_tanh(x)  = x/2 (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu_tanh'(x) = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <floating_element T>
T apply_activation(T x, Activation a) {
  switch (a) {
    case Activation::none: return x;
    case Activation::relu: return (x > T(0) || x != x) ? x : T(0);  // NaN propagates, as torch.relu
    case Activation::gelu_erf: return x * T(0.5) * (T(1) + std::erf(x * gelu_alpha<T>));
    case Activation::gelu_tanh: return T(0.5) * x * (T(1) + std::tanh(gelu_beta<T> * (x + gelu_kappa<T> * x * x * x)));
  }
  return x;
}
template <floating_element T>
T activation_derivative(T x, Activation a) {
  switch (a) {
    case Activation::none: return T(1);
    case Activation::relu: return x > T(0) ? T(1) : T(0);  // threshold_backward: the subgradient at 0 is 0
    case Activation::gelu_erf:
      return T(0.5) * (T(1) + std::erf(x * gelu_alpha<T>)) + x * std::exp(T(-0.5) * x * x) * inv_sqrt_2pi<T>;
    case Activation::gelu_tanh: {
      const T x_sq = x * x;
      const T t = std::tanh(gelu_beta<T> * (x + gelu_kappa<T> * x_sq * x));
      const T sech2 = T(1) - t * t;
      // Where tanh has saturated the second term is 0 (PyTorch gives 0 * inf = NaN once x^2 overflows).
      const T right = sech2 == T(0) ? T(0) : T(0.5) * x * sech2 * gelu_beta<T> * (T(1) + T(3) * gelu_kappa<T> * x_sq);
      return T(0.5) * (T(1) + t) + right;
    }
  }
  return T(1);
}

}  // namespace detail

// out[i] = act(in[i]) for i < n (in may equal out). One thread: callers split the work.
template <floating_element T>
void activate(const T* in, T* out, index_t n, Activation a) {
  if constexpr (std::is_same_v<T, float>) {
    if (const detail::VectorMathKernel* kernel = detail::vector_math_kernel()) {
      if (a == Activation::gelu_erf) return kernel->gelu_erf(in, out, n);
      if (a == Activation::gelu_tanh) return kernel->gelu_tanh(in, out, n);
    }
    // Without the kernels (no AVX2, or another compiler): Eigen's exp and erf at the flags' vector width.
    using A = Eigen::Array<float, detail::activation_block, 1>;
    switch (a) {
      case Activation::gelu_erf:
        detail::map_float_blocks(nullptr, in, out, n, [](const A& x) -> A {
          return x * 0.5f * (1.0f + (x * detail::gelu_alpha<float>).erf());
        });
        return;
      case Activation::gelu_tanh:
        detail::map_float_blocks(nullptr, in, out, n, [](const A& x) -> A { return x / (1.0f + detail::exp_minus_2u(x)); });
        return;
      default: break;
    }
  }
  if (a == Activation::none) {
    if (in != out) std::copy(in, in + n, out);
    return;
  }
  if (a == Activation::relu) {  // its own loop, so that it vectorises
    for (index_t i = 0; i < n; ++i) out[i] = detail::apply_activation(in[i], Activation::relu);
    return;
  }
  for (index_t i = 0; i < n; ++i) out[i] = detail::apply_activation(in[i], a);
}

// out[i] = g[i] * act'(x[i]) for i < n: the activation's backward from its forward input.
template <floating_element T>
void activate_backward(const T* g, const T* x, T* out, index_t n, Activation a) {
  if constexpr (std::is_same_v<T, float>) {
    if (const detail::VectorMathKernel* kernel = detail::vector_math_kernel()) {
      if (a == Activation::gelu_erf) return kernel->gelu_erf_backward(g, x, out, n);
      if (a == Activation::gelu_tanh) return kernel->gelu_tanh_backward(g, x, out, n);
    }
    using A = Eigen::Array<float, detail::activation_block, 1>;
    switch (a) {
      case Activation::gelu_erf:
        detail::map_float_blocks(g, x, out, n, [](const A& v) -> A {
          return 0.5f * (1.0f + (v * detail::gelu_alpha<float>).erf()) +
                 v * (-0.5f * v.square()).exp() * detail::inv_sqrt_2pi<float>;
        });
        return;
      case Activation::gelu_tanh:
        detail::map_float_blocks(g, x, out, n, [](const A& v) -> A {
          const A e = detail::exp_minus_2u(v);
          const A s = 1.0f / (1.0f + e);       // (1 + tanh u) / 2
          const A sech2 = 4.0f * s * (e * s);  // 1 - tanh^2 u = 4 s (1 - s), 1 - s = e s without cancelling
          const A right = 0.5f * v * sech2 * detail::gelu_beta<float> * (1.0f + 3.0f * detail::gelu_kappa<float> * v.square());
          // Saturated (|x| > ~10): the term is below float's range, but x^2 may have overflowed to inf.
          return s + (sech2 < 1e-30f).select(A::Zero(), right);
        });
        return;
      default: break;
    }
  }
  for (index_t i = 0; i < n; ++i) out[i] = g[i] * detail::activation_derivative(x[i], a);
}

namespace detail {

// Below this many multiply-adds a product, or one tile of it, is not worth a thread: waking a worker costs
// a few microseconds, about what Eigen needs for this much work.
inline constexpr double gemm_min_tile_work = 1 << 18;
// Enough tiles to balance a handful of threads of any count. Each tile is its own Eigen product, which packs
// its rows of a and its columns of b afresh: with 16 row tiles, a small GPT's training step spent 22% of its
// time packing (the weights once per tile), so fewer tiles, cut to pack the least.
inline constexpr index_t gemm_max_tiles = 8;
// With the packed kernel, whose bits do not depend on where tiles start, the tiles follow the thread count
// instead: one a thread. Every tile packs its own rows of a and columns of b, so a second tile a thread
// packs a or b once more; on a 2-core AMD EPYC (Zen 5) one tile a thread was 2-8.5% faster at every model
// shape measured on 2 threads (bench_gemm, 4 interleaved rounds) and 5-10% on BERT-base's forward (on an
// Intel Xeon, a char GPT training step was within noise either way).
inline constexpr index_t sgemm_tiles_per_thread = 1;

// The packed kernel (sgemm_kernel.hpp) a product of m rows takes: float products of at least 8 rows, when
// this CPU has a kernel (sgemm_kernel()); else null, and Eigen, oneDNN or gemv.hpp computes it. Fewer rows,
// such as one decoding step's single row, are matrix-vector work that gemv.hpp (up to gemv_max_rows rows) or
// Eigen's GEMV streams without packing. Read once a product, so that every tile of it takes the same path.
template <floating_element T>
const SgemmKernel* packed_product_kernel(index_t m) {
  if constexpr (std::is_same_v<T, float> && !onednn_gemm_enabled<T>) return m >= 8 ? sgemm_kernel() : nullptr;
  else return nullptr;
}
template <floating_element T>
bool uses_sgemm_kernel(index_t m) {
  return packed_product_kernel<T>(m) != nullptr;
}

// How the (M, N) output is cut into tiles, each computed over the whole K by one thread. For Eigen's
// products a function of (M, N, K) alone: whichever thread computes a tile, and however many there are,
// every element of c comes from the same Eigen call on the same operands, hence the same bits. The packed
// kernel's bits depend on K alone, so its tiles may follow `threads`.
struct GemmPlan {
  index_t m = 0, n = 0, mb = 0, nb = 0, row_blocks = 1, col_blocks = 1;
  const SgemmKernel* kernel = nullptr;  // packed_product_kernel: null when Eigen (or oneDNN) computes the tiles
  index_t tiles() const { return row_blocks * col_blocks; }
  double tile_work(index_t k) const { return double(mb) * double(nb) * double(std::max<index_t>(k, 1)); }
};

template <floating_element T>
GemmPlan plan_gemm(index_t m, index_t n, index_t k, int threads = get_num_threads()) {
  const SgemmKernel* kernel = packed_product_kernel<T>(m);
  const bool packed = kernel != nullptr;
  // Rows per tile: a multiple of the rows the micro-kernel computes at once, so that no tile ends in a
  // partial register block that the whole product would not have had. Columns: whole 64-byte lines of a
  // row-major c, so that two threads never write the same cache line (the packed kernel's register block
  // is a whole number of lines wide).
  index_t row_multiple = Eigen::internal::gebp_traits<T, T>::mr;
  index_t col_multiple = 64 / static_cast<index_t>(sizeof(T));
  index_t max_tiles = gemm_max_tiles;
  if (packed) {
    row_multiple = kernel->mr;
    col_multiple = kernel->nr;
    max_tiles = sgemm_tiles_per_thread * std::max(threads, 1);
  }
  GemmPlan p{m, n, m, n, 1, 1, kernel};
  const double work = double(m) * double(n) * double(std::max<index_t>(k, 1));
  if (m == 0 || n == 0 || work < 2 * gemm_min_tile_work || (packed && threads <= 1)) return p;
  const index_t wanted = std::min<index_t>(max_tiles, static_cast<index_t>(work / gemm_min_tile_work));
  const index_t max_rows = (m + row_multiple - 1) / row_multiple, max_cols = (n + col_multiple - 1) / col_multiple;
  // r row blocks by c column blocks pack a c times and b r times: among the splits with the most tiles (up
  // to `wanted`), the one that packs the fewest elements, a (M x K) against b (K x N).
  index_t best_r = 1, best_c = 1;
  double best_cost = 0;
  for (index_t r = 1; r <= std::min(wanted, max_rows); ++r) {
    const index_t c = std::min(wanted / r, max_cols);
    const double cost = double(c) * double(m) + double(r) * double(n);  // both times K
    if (r * c > best_r * best_c || (r * c == best_r * best_c && cost < best_cost)) best_r = r, best_c = c, best_cost = cost;
  }
  p.mb = ((m + best_r - 1) / best_r + row_multiple - 1) / row_multiple * row_multiple;
  p.row_blocks = (m + p.mb - 1) / p.mb;
  p.nb = ((n + best_c - 1) / best_c + col_multiple - 1) / col_multiple * col_multiple;
  p.col_blocks = (n + p.nb - 1) / p.nb;
  return p;
}

// The whole product as one tile, for the calling thread.
template <floating_element T>
GemmPlan whole_product_plan(index_t m, index_t n) {
  return GemmPlan{m, n, m, n, 1, 1, packed_product_kernel<T>(m)};
}

// A row- or column-major 2-D operand in place.
template <typename T>
struct MatrixOperand {
  const T* data;
  eigenformer::detail::matrix_view_info info;
};

// The tile rows [r0, r0 + rows) x cols [c0, c0 + cols) with the plan's packed kernel, when it has one;
// false when Eigen is to compute it.
template <floating_element T>
bool packed_kernel_tile(const GemmPlan& p, index_t r0, index_t c0, index_t rows, index_t cols, index_t k,
                        const MatrixOperand<T>& a, const MatrixOperand<T>& b, T* c, index_t ldc, T alpha, T beta) {
  if constexpr (std::is_same_v<T, float>) {
    if (p.kernel == nullptr) return false;
    using eigenformer::detail::matrix_layout;
    p.kernel->packed(a.info.layout == matrix_layout::col_major, b.info.layout == matrix_layout::col_major, rows, cols,
                     k, alpha, a.data + eigenformer::detail::matrix_offset(a.info, r0, 0), a.info.outer_stride,
                     b.data + eigenformer::detail::matrix_offset(b.info, 0, c0), b.info.outer_stride, beta,
                     c + r0 * ldc + c0, ldc);
    return true;
  } else {
    return false;
  }
}

// rows x cols of c (row stride ldc) += bias (per column, may be null), then the activation.
template <floating_element T>
void apply_epilogue(T* c, index_t ldc, index_t rows, index_t cols, const T* bias, Activation act) {
  if (bias == nullptr && act == Activation::none) return;
  for (index_t i = 0; i < rows; ++i) {
    T* row = c + i * ldc;
    if (bias)
      for (index_t j = 0; j < cols; ++j) row[j] += bias[j];
    activate(row, row, cols, act);
  }
}

// Where the partial sums of a gemv cut along k go (gemv_k_parts x m x n floats): one buffer a calling thread,
// grown when a larger product needs it and kept, so that decoding allocates nothing per step.
inline float* gemv_part_sums(index_t floats) {
  thread_local std::vector<float> sums;
  if (static_cast<index_t>(sums.size()) < floats) {
    sums.clear();
    sums.shrink_to_fit();
    sums.resize(static_cast<std::size_t>(floats));
  }
  return sums.data();
}

// c (m <= gemv_max_rows rows, row stride ldc) = act(alpha a b + beta c + bias) by the kernels of gemv.hpp, a
// row-major (row stride lda); the bits do not depend on the thread count. A small or column-major b: the
// columns split over the pool. A large row-major or paneled b: its parts of k (gemv_k_parts) and, with more
// threads than parts, its columns too, each part's sums into its own buffer, then the parts added in order.
template <class W>
void gemv_product(index_t m, index_t n, index_t k, const float* a, index_t lda, const GemvWeight<W>& b, float* c,
                  index_t ldc, float alpha, float beta, const float* bias, Activation act) {
  const int threads = get_num_threads();
  const GemvColumns<W> gemv_columns = gemv_kernel().columns<W>();
  const index_t part_rows = b.layout == GemvLayout::col_major ? k : gemv_k_part_rows(k, n);
  if (part_rows >= k) {
    const index_t chunk = gemv_chunk_cols(m, n, k, threads, b.layout == GemvLayout::col_major);
    parallel_for(n, chunk, [&](index_t j0, index_t j1) {
      gemv_columns(m, k, a, lda, b, c, ldc, alpha, beta, j0, j1);
      apply_epilogue(c + j0, ldc, m, j1 - j0, bias ? bias + j0 : nullptr, act);
    });
    return;
  }
  const index_t parts = (k + part_rows - 1) / part_rows;
  // Columns a chunk: all of them unless the threads outnumber the parts (whole panels of 64 columns).
  const index_t column_chunks = std::min<index_t>((threads + parts - 1) / parts, (n + 63) / 64);
  const index_t chunk_cols =
      column_chunks <= 1 ? n : ((n + column_chunks - 1) / column_chunks + 63) / 64 * 64;
  const index_t chunks_per_part = (n + chunk_cols - 1) / chunk_cols;
  float* sums = gemv_part_sums(parts * m * n);  // part q, row i: sums + (q * m + i) * n
  // Elements from row k to row k + 1 of b; of a paneled b, row k0 is where its part starts (GemvWeight).
  const index_t row_stride =
      b.layout == GemvLayout::paneled ? (n + gemv_panel_cols - 1) / gemv_panel_cols * gemv_panel_cols : b.ld;
  parallel_for(parts * chunks_per_part, 1, [&](index_t begin, index_t end) {
    for (index_t t = begin; t < end; ++t) {
      const index_t q = t / chunks_per_part, j0 = (t % chunks_per_part) * chunk_cols;
      const index_t k0 = q * part_rows, rows = std::min(part_rows, k - k0);
      const GemvWeight<W> part{b.data + k0 * row_stride, b.ld, b.layout};
      gemv_columns(m, rows, a + k0, lda, part, sums + q * m * n, n, 1.0f, 0.0f, j0,
                   std::min(n, j0 + chunk_cols));
    }
  });
  // The parts added in order, into part 0's sums: a few microseconds for the calling thread.
  for (index_t i = 0; i < m; ++i) {
    float* total = sums + i * n;
    for (index_t q = 1; q < parts; ++q) {
      const float* part = sums + (q * m + i) * n;
      for (index_t j = 0; j < n; ++j) total[j] += part[j];
    }
    float* out = c + i * ldc;
    for (index_t j = 0; j < n; ++j) out[j] = gemv_finish(total[j], alpha, beta, out[j]);
  }
  apply_epilogue(c, ldc, m, n, bias, act);
}

// c tile `tile` of plan: c = act(alpha * a b + beta * c + bias) on rows [r0, r1) x cols [c0, c1), while
// the tile is in cache.
template <floating_element T>
void gemm_tile(const GemmPlan& p, index_t tile, index_t k, const MatrixOperand<T>& a, const MatrixOperand<T>& b,
               T* c, index_t ldc, T alpha, T beta, const T* bias, Activation act) {
  const index_t r0 = (tile / p.col_blocks) * p.mb, r1 = std::min(p.m, r0 + p.mb);
  const index_t c0 = (tile % p.col_blocks) * p.nb, c1 = std::min(p.n, c0 + p.nb);
  const index_t rows = r1 - r0, cols = c1 - c0;
  using Out = Eigen::Map<eigenformer::detail::RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;
  Out o(c + r0 * ldc + c0, rows, cols, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (beta == T(0)) o.setZero();
    else if (beta != T(1)) o *= beta;
  } else if constexpr (onednn_gemm_enabled<T>) {
    using eigenformer::detail::matrix_layout;
    const bool ta = a.info.layout == matrix_layout::col_major, tb = b.info.layout == matrix_layout::col_major;
    onednn_sgemm(ta, tb, rows, cols, k, alpha, a.data + eigenformer::detail::matrix_offset(a.info, r0, 0),
                 a.info.outer_stride, b.data + eigenformer::detail::matrix_offset(b.info, 0, c0), b.info.outer_stride,
                 beta, c + r0 * ldc + c0, ldc);
  } else if (!packed_kernel_tile(p, r0, c0, rows, cols, k, a, b, c, ldc, alpha, beta)) {
    eigenformer::detail::with_matrix_map(a.data + eigenformer::detail::matrix_offset(a.info, r0, 0), rows, k, a.info,
                                         [&](const auto& am) {
      eigenformer::detail::with_matrix_map(b.data + eigenformer::detail::matrix_offset(b.info, 0, c0), k, cols,
                                           b.info, [&](const auto& bm) {
        if (beta == T(0)) {
          if (alpha == T(1)) o.noalias() = am * bm;
          else o.noalias() = alpha * (am * bm);
        } else {
          if (beta != T(1)) o *= beta;
          if (alpha == T(1)) o.noalias() += am * bm;
          else o.noalias() += alpha * (am * bm);
        }
      });
    });
  }
  apply_epilogue(c + r0 * ldc + c0, ldc, rows, cols, bias ? bias + c0 : nullptr, act);
}

// A row- or column-major view of t, or of a contiguous copy when t is strided both ways. `keep` holds the
// copy alive.
template <typename T>
MatrixOperand<T> matrix_operand(const Tensor<T, 2>& t, Tensor<T, 2>& keep) {
  auto info = eigenformer::detail::classify(t.shape()[0], t.shape()[1], t.strides()[0], t.strides()[1]);
  if (info.layout != eigenformer::detail::matrix_layout::strided) return {t.data(), info};
  keep = t.contiguous();
  return {keep.data(), eigenformer::detail::classify(t.shape()[0], t.shape()[1], keep.strides()[0], keep.strides()[1])};
}

// Rows a multiple of aliasing_row_floats floats (4 KiB) apart fall in one set of the L1 cache, whose index
// comes from the address's bits below 4 KiB. Laid row_spacing_floats further apart, twelve consecutive rows
// fall in twelve sets. nn's feed-forward layers write their hidden layer that way (nn::detail::dense_hidden_product).
inline constexpr index_t aliasing_row_floats = 1024;
inline constexpr index_t row_spacing_floats = 16;

// An empty rows x cols matrix whose rows lie cols + row_spacing_floats floats apart when cols is a multiple of
// aliasing_row_floats (a view of a wider tensor), else a contiguous one.
template <typename T>
Tensor<T, 2> empty_unaliased_rows(index_t rows, index_t cols) {
  if (cols % aliasing_row_floats != 0) return Tensor<T, 2>::empty(Shape<2>{rows, cols});
  return Tensor<T, 2>::empty(Shape<2>{rows, cols + row_spacing_floats}).narrow(1, 0, cols);
}

// Columns of c below which a product reads such rows of a where they lie: in a throwaway driver on the AMD
// Zen 5 the copy of a cost what 23 (2048 x 256 x 1024) to 110 (128 x 3072 x 1024) of the product's columns
// did, and the aliasing up to a third of the product (below).
inline constexpr index_t unaliasing_min_cols = 256;

// Whether products copy a left operand whose rows lie a multiple of 4 KiB apart into spaced rows first. At
// each step of k the register block reads its mr rows of a, all in one set of the L1 cache (whose sets repeat
// every 4 KiB on these CPUs), while the panel of b it multiplies them with (sgemm_kc x nr floats) keeps
// sgemm_kc * nr / 1024 lines in every set; with more lines than the set has ways they evict each other.
// AVX-512's 12 + 8 lines do so on the 12-way L1 of an AMD Zen 5 and the products ran up to 1.3x slower there
// (below), and on the 8-way L1 of an AMD Zen 4 1.10-1.39x (the copy 1.01-1.12x). AVX2's 6 + 4 lines ran as
// fast either way on the Zen 5, and on the Zen 4's 8 ways, where the count says they would evict each other,
// reading the rows in place took 0.95-1.08x the time of spaced rows while the copy took 1.00-1.14x (2048 x
// 256 x 1024, 128 x 1024 x 1024 and 512 x 1024 x 1024 with a packed weight on 1 and 2 threads, the two
// operands alternating in one process, three runs; bench/README.md, "fifty-first session"), so the AVX2
// kernel reads them in place. On an Intel Xeon of the Sapphire Rapids kind, whose L1 has the same 48 KB in 12
// ways, the AVX-512 kernel's evictions cost nothing measurable and the copy did: 2048 x 256 x 1024 with a
// packed weight took 0.91x the time on 1 and on 2 threads read in place, per call 0.93x, the seed
// classifier's training step 0.98-0.99x, GPT-2 medium's forward the same either way (bench/ab.py, 3-4
// interleaved rounds; bench/README.md, "forty-fifth session"), so Intel's 12-way L1s are read in place.
// Intel's 8-way L1s (Skylake) were not measured; the AVX-512 kernel copies there. A C library that does not
// say how many ways there are: 12.
inline bool copies_rows_4k_apart(const SgemmKernel& kernel) {
  const int ways = l1_data_ways() > 0 ? l1_data_ways() : 12;
  if (kernel.isa != CpuIsa::avx512 || (cpu_is_intel() && ways >= 12)) return false;
  return kernel.mr + sgemm_kc * kernel.nr / 1024 > ways;
}

// Rows [0, m) x k of a row-major a copied into keep, made by empty_unaliased_rows (rows spaced when k is a
// multiple of 4 KiB), on the pool unless on_pool is false; returns the copy as an operand.
inline MatrixOperand<float> spaced_rows_copy(const MatrixOperand<float>& a, index_t m, index_t k,
                                             bool on_pool, Tensor<float, 2>& keep) {
  using eigenformer::detail::matrix_layout;
  keep = empty_unaliased_rows<float>(m, k);
  const index_t ld = keep.strides()[0];
  auto copy_rows = [&](index_t i0, index_t i1) {
    for (index_t i = i0; i < i1; ++i)
      std::memcpy(keep.data() + i * ld, a.data + i * a.info.outer_stride,
                  sizeof(float) * static_cast<std::size_t>(k));
  };
  const index_t grain = std::max<index_t>(1, (index_t{1} << 14) / std::max<index_t>(k, 1));
  if (on_pool) parallel_for(m, grain, copy_rows);
  else copy_rows(0, m);
  return {keep.data(), {matrix_layout::row_major, ld}};
}

// A row-major left operand (m x k) whose rows lie a multiple of 4 KiB apart, copied into rows that do not
// (empty_unaliased_rows), for a product with the packed kernel that computes n >= unaliasing_min_cols
// columns, where copies_rows_4k_apart; else a itself. On an AMD Zen 5 with the AVX-512 kernel (bench/ab.py,
// 5-7 interleaved rounds; bench/README.md, "thirty-sixth session"): 2048 x 256 x 1024, the seed classifier's
// second feed-forward layer, 0.79x the time on 1 thread and 0.85x on 2, its train step 0.94x on 2; GPT-2
// medium's forward of 128 tokens (every product reading 1024-wide rows) 0.80x on 1 thread and 0.96x on 2. How
// much the aliasing costs varies from process to process (0-30% for the same product), the copy's cost does
// not. The copy changes no bits: the kernel's depend on K alone. On the pool unless on_pool is false (a
// caller that runs many products in parallel itself).
inline MatrixOperand<float> unaliased_left_operand(const SgemmKernel* kernel, const MatrixOperand<float>& a, index_t m,
                                                   index_t k, index_t n, bool on_pool, Tensor<float, 2>& keep) {
  using eigenformer::detail::matrix_layout;
  if (kernel == nullptr || a.info.layout != matrix_layout::row_major || m <= 1 ||
      a.info.outer_stride % aliasing_row_floats != 0 || n < unaliasing_min_cols ||
      !copies_rows_4k_apart(*kernel))
    return a;
  return spaced_rows_copy(a, m, k, on_pool, keep);
}

}  // namespace detail

// The sum of term(0) ... term(n - 1) in double, by eight running sums combined in a fixed order: one
// running sum waits on each add's latency, eight independent ones vectorise (float-to-double conversions
// and adds). The order depends on n alone, so the result does not depend on threads.
template <class Term>
double sum_in_double(index_t n, Term&& term) {
  double acc[8] = {};
  index_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (index_t u = 0; u < 8; ++u) acc[u] += term(j + u);
  double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < n; ++j) s += term(j);
  return s;
}

// out[j] += sum_i g(i, j) for g (N, C): the bias gradient of every dense layer. Each column is summed whole
// by one chunk, rows in order, so the bits do not depend on the thread count. Rows of a view whose columns
// lie side by side (the query, key and value slices of a fused (N, 3C) gradient) are read in place: copying
// them first took about as long as the sums, on the calling thread alone (perf of a small BERT's training
// step).
template <floating_element T>
void add_column_sums(const Tensor<T, 2>& g, T* out) {
  const bool in_place = g.strides()[1] == 1 || g.shape()[1] <= 1;
  const auto gc = in_place ? g : g.contiguous();
  const index_t n = gc.shape()[0], c = gc.shape()[1], ld = gc.strides()[0];
  parallel_for(c, column_reduction_grain(c, n), [&](index_t begin, index_t end) {
    for (index_t i = 0; i < n; ++i) {
      const T* row = gc.data() + i * ld;
      for (index_t j = begin; j < end; ++j) out[j] += row[j];
    }
  });
}

// How gemm cuts its output: into tiles for the pool (plan_gemm), or whole on the calling thread, for a caller
// that already runs many small products in parallel (the attention core's streaming units): there the tiles
// run one after another anyway, and each would pack its operands once more.
enum class Tiling { pool, calling_thread };

// c = act(alpha * a b + beta * c + bias). Throws shape_error naming all three shapes when they disagree.
// c must not overlap a or b. With beta == 0, c's old contents are ignored (NaN included), as in BLAS.
template <floating_element T>
void gemm(const Tensor<T, 2>& a, const Tensor<T, 2>& b, Tensor<T, 2>& c, T alpha = T(1), T beta = T(0),
          const Epilogue<T>& epilogue = {}, Tiling tiling = Tiling::pool) {
  const index_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (b.shape()[0] != k || c.shape()[0] != m || c.shape()[1] != n)
    throw shape_error("gemm: " + shape_string(a.shape()) + " x " + shape_string(b.shape()) + " -> " +
                      shape_string(c.shape()) + ": shapes do not agree");
  if (epilogue.bias && epilogue.bias->numel() != n)
    throw shape_error("gemm: bias " + shape_string(epilogue.bias->shape()) + " does not match the " +
                      std::to_string(n) + " output columns");
  if (n > 1 && c.strides()[1] != 1)
    throw shape_error("gemm: the output " + shape_string(c.shape()) + " needs unit column stride");
  if (m == 0 || n == 0) return;
  Tensor<T, 2> a_copy, b_copy;
  const auto ao = detail::matrix_operand(a, a_copy);
  const auto bo = detail::matrix_operand(b, b_copy);
  const auto bias_values = epilogue.bias ? epilogue.bias->contiguous() : Tensor<T, 1>();
  const T* bias = epilogue.bias ? bias_values.data() : nullptr;
  const index_t ldc = m == 1 ? n : c.strides()[0];
  if constexpr (std::is_same_v<T, float>) {
    using eigenformer::detail::matrix_layout;
    if (m <= detail::gemv_max_rows && ao.info.layout == matrix_layout::row_major) {  // decoding: stream b once
      const detail::GemvWeight<float> w{bo.data, bo.info.outer_stride,
                                        bo.info.layout == matrix_layout::col_major ? detail::GemvLayout::col_major
                                                                                   : detail::GemvLayout::row_major};
      return detail::gemv_product(m, n, k, ao.data, ao.info.outer_stride, w, c.data(), ldc, alpha, beta, bias,
                                  epilogue.activation);
    }
  }
  const auto plan = tiling == Tiling::pool ? detail::plan_gemm<T>(m, n, k) : detail::whole_product_plan<T>(m, n);
  Tensor<T, 2> a_spaced;
  auto a_in = ao;
  if constexpr (std::is_same_v<T, float>)
    a_in = detail::unaliased_left_operand(plan.kernel, ao, m, k, n, plan.tiles() > 1, a_spaced);
  parallel_for(plan.tiles(), 1, [&](index_t begin, index_t end) {
    for (index_t t = begin; t < end; ++t)
      detail::gemm_tile(plan, t, k, a_in, bo, c.data(), ldc, alpha, beta, bias, epilogue.activation);
  });
}

// A fresh (M, N) result.
template <floating_element T>
Tensor<T, 2> gemm(const Tensor<T, 2>& a, const Tensor<T, 2>& b, const Epilogue<T>& epilogue = {}) {
  auto c = Tensor<T, 2>::empty(Shape<2>{a.shape()[0], b.shape()[1]});
  gemm(a, b, c, T(1), T(0), epilogue);
  return c;
}

}  // namespace backend
}  // namespace eigenformer
