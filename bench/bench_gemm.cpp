// Single-precision products at the shapes the library's models run, in GFLOP/s: backend::gemm (Eigen, or
// oneDNN per tile when built with -DEIGENFORMER_BLAS=onednn) on 1 and 2 threads, with b as given and (for
// the forward's "nt" shapes, with the packed kernel) with b packed once as a layer's weight, against the libraries a
// user could link instead, each on 2 threads of its own: oneDNN's dnnl_sgemm and OpenBLAS's cblas_sgemm
// (registered when CMake finds them). bench/torch_gemm.py times torch.mm on the same shapes under the same
// names, so `bench/compare.py build/bench/bench/bench_gemm bench/torch_gemm.py` prints the two side by side.
//
// Layouts follow the layers: "nt" is x W^T with W stored (out, in) as nn.Linear stores it (the forward),
// "nn" is g W (the input gradient), "tn" is g^T x (the weight gradient).
#include <benchmark/benchmark.h>

#include <eigenformer/random.hpp>
#include <eigenformer/tensor.hpp>
#include <eigenformer/tensor/packed_matrix.hpp>

#include <string>

#if defined(EIGENFORMER_BENCH_WITH_ONEDNN) && !defined(EIGENFORMER_BLAS_ONEDNN)
#include <dnnl.h>
#endif
#if defined(EIGENFORMER_BENCH_WITH_OPENBLAS)
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace ef = eigenformer;

namespace {

struct GemmShape {
  const char* label;
  ef::index_t m, n, k;
  const char* layout;  // "nt", "nn" or "tn"
};

// Kept in step with SHAPES in bench/torch_gemm.py.
constexpr GemmShape shapes[] = {
    {"gpt2_qkv_s128", 128, 2304, 768, "nt"},     {"bert_attn_out_s128", 128, 768, 768, "nt"},
    {"bert_ffn_up_s128", 128, 3072, 768, "nt"},  {"bert_ffn_down_s128", 128, 768, 3072, "nt"},
    {"bert_ffn_up_b8", 1024, 3072, 768, "nt"},   {"decode_qkv", 1, 2304, 768, "nt"},
    {"chargpt_qkv", 768, 384, 128, "nt"},        {"chargpt_ffn_up", 768, 512, 128, "nt"},
    {"chargpt_ffn_down", 768, 128, 512, "nt"},   {"chargpt_ffn_down_dx", 768, 512, 128, "nn"},
    {"chargpt_ffn_up_dw", 512, 128, 768, "tn"},  {"seed_ffn_up_b16", 2048, 1024, 256, "nt"},
    {"seed_ffn_down_b16", 2048, 256, 1024, "nt"}, {"seed_ffn_up_dw_b16", 1024, 256, 2048, "tn"},
    {"bert_attn_dw_b8", 768, 768, 1024, "tn"},  {"bert_ffn_down_dw_b8", 768, 3072, 1024, "tn"},
    {"bert_qkv_b8", 1024, 2304, 768, "nt"},     {"bert_attn_out_b8", 1024, 768, 768, "nt"},
    {"bert_ffn_down_b8", 1024, 768, 3072, "nt"},
};

// a (M, K) and b (K, N) as views of tensors stored the way the layout's layer stores them.
struct Operands {
  ef::Tensor<float, 2> a_store, b_store;
  bool transpose_a, transpose_b;
  explicit Operands(const GemmShape& s)
      : transpose_a(s.layout[0] == 't'), transpose_b(s.layout[1] == 't') {
    ef::manual_seed(0);
    a_store = transpose_a ? ef::randn({s.k, s.m}) : ef::randn({s.m, s.k});
    b_store = transpose_b ? ef::randn({s.n, s.k}) : ef::randn({s.k, s.n});
  }
  ef::Tensor<float, 2> a() const { return transpose_a ? a_store.t() : a_store; }
  ef::Tensor<float, 2> b() const { return transpose_b ? b_store.t() : b_store; }
};

void set_flops(benchmark::State& state, const GemmShape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(s.m) * double(s.n) * double(s.k),
                                                 benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void ours(benchmark::State& state, GemmShape s, int threads) {
  const int saved = ef::get_num_threads();
  ef::set_num_threads(threads);
  const Operands op(s);
  const auto a = op.a(), b = op.b();
  auto c = ef::Tensor<float, 2>::empty({s.m, s.n});
  for (auto _ : state) {
    ef::backend::gemm(a, b, c);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, s);
  ef::set_num_threads(saved);
}

// The same product with b packed once beforehand (PackedMatrix), as a model's forward reads its layers'
// weights after pack_weights(): the per-call cost of copying b into panels is gone. Registered for the "nt"
// shapes, whose b is a layer's weight.
void ours_packed(benchmark::State& state, GemmShape s, int threads) {
  const int saved = ef::get_num_threads();
  ef::set_num_threads(threads);
  const Operands op(s);
  const auto a = op.a(), b = op.b();
  const ef::PackedMatrix packed(b);
  auto c = ef::Tensor<float, 2>::empty({s.m, s.n});
  for (auto _ : state) {
    ef::backend::gemm(a, b, &packed, c);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, s);
  ef::set_num_threads(saved);
}

#if defined(EIGENFORMER_BENCH_WITH_ONEDNN)
// oneDNN with its own OpenMP threads (OMP_NUM_THREADS, default: every core).
void onednn(benchmark::State& state, GemmShape s) {
  const Operands op(s);
  auto c = ef::Tensor<float, 2>::empty({s.m, s.n});
  const auto lda = op.a_store.shape()[1], ldb = op.b_store.shape()[1];
  for (auto _ : state) {
    dnnl_sgemm(op.transpose_a ? 'T' : 'N', op.transpose_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f, op.a_store.data(), lda,
               op.b_store.data(), ldb, 0.0f, c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, s);
}
#endif

#if defined(EIGENFORMER_BENCH_WITH_OPENBLAS)
// OpenBLAS on 2 threads. On Intel machines Debian's 0.3.21 detects "Prescott" and runs SSE3 kernels unless
// OPENBLAS_CORETYPE names the right one (../shared/tools/openblas-env.sh prints it).
void openblas(benchmark::State& state, GemmShape s) {
  openblas_set_num_threads(2);
  const Operands op(s);
  auto c = ef::Tensor<float, 2>::empty({s.m, s.n});
  const int lda = int(op.a_store.shape()[1]), ldb = int(op.b_store.shape()[1]);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, op.transpose_a ? CblasTrans : CblasNoTrans, op.transpose_b ? CblasTrans : CblasNoTrans,
                int(s.m), int(s.n), int(s.k), 1.0f, op.a_store.data(), lda, op.b_store.data(), ldb, 0.0f, c.data(),
                int(s.n));
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, s);
}
#endif

const bool registered = [] {
  benchmark::AddCustomContext("gemm_library", ef::backend::gemm_library());
  for (const auto& s : shapes) {
    const std::string name = std::string(s.label) + "_" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                             std::to_string(s.k) + "_" + s.layout;
    for (int threads : {1, 2})
      benchmark::RegisterBenchmark(("BM_gemm/" + name + "/" + std::to_string(threads)).c_str(), ours, s, threads)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    if (ef::backend::detail::packed_weights_supported() && std::string(s.layout) == "nt" &&
        ef::backend::detail::uses_sgemm_kernel<float>(s.m))
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark(("BM_gemm_packed/" + name + "/" + std::to_string(threads)).c_str(), ours_packed, s,
                                     threads)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
#if defined(EIGENFORMER_BENCH_WITH_ONEDNN)
    benchmark::RegisterBenchmark(("BM_onednn_sgemm/" + name + "/2").c_str(), onednn, s)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
#endif
#if defined(EIGENFORMER_BENCH_WITH_OPENBLAS)
    benchmark::RegisterBenchmark(("BM_openblas_sgemm/" + name + "/2").c_str(), openblas, s)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
#endif
  }
  return true;
}();

}  // namespace
