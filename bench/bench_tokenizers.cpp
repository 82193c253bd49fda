// Tokenizers (include/eigenformer/tokenizers/) on tiny Shakespeare ($EIGENFORMER_DATA_DIR, which the bench
// ctest passes). BM_gpt2_encode has a twin, bench/tiktoken_encode.mjs, timing the npm packages tiktoken
// (WASM) and js-tiktoken on the same file; both report MB/s = 10^6 input bytes per second, one thread.
//
// Every encode call starts with an empty merge cache (the cache lives for one call), so each iteration is
// a cold encode, as in tiktoken, which has no cache at all: no iteration profits from an earlier one.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <eigenformer/tokenizers/gpt2.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace tk = eigenformer::tokenizers;

namespace {

std::filesystem::path data_dir() {
  const char* dir = std::getenv("EIGENFORMER_DATA_DIR");
  return dir ? std::filesystem::path(dir) : std::filesystem::path();
}

// The text and the tokenizer, loaded once; nullptr (and a reason) when the data is missing.
struct Inputs {
  std::string text;
  std::unique_ptr<tk::GPT2Tokenizer> gpt2;
  std::string error;
};

const Inputs& inputs() {
  static const Inputs in = [] {
    Inputs r;
    if (data_dir().empty()) {
      r.error = "EIGENFORMER_DATA_DIR is not set";
      return r;
    }
    try {
      std::ifstream f(data_dir() / "tinyshakespeare/input.txt", std::ios::binary);
      if (!f) throw std::runtime_error("cannot open " + (data_dir() / "tinyshakespeare/input.txt").string());
      std::ostringstream buf;
      buf << f.rdbuf();
      r.text = buf.str();
      r.gpt2 = std::make_unique<tk::GPT2Tokenizer>(tk::GPT2Tokenizer::from_directory(data_dir() / "gpt2"));
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    return r;
  }();
  return in;
}

void set_throughput(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e6, benchmark::Counter::kIsIterationInvariantRate);
}

// The whole 1.1 MB file in one call (the twin's workload).
void BM_gpt2_encode(benchmark::State& state) {
  const auto& in = inputs();
  if (!in.gpt2) return state.SkipWithError(in.error.c_str());
  std::size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = in.gpt2->encode(in.text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  set_throughput(state, in.text.size());
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_gpt2_encode)->Unit(benchmark::kMillisecond);

// One call per line (40,000 short calls, as the tokenize command line does): per-call overhead.
void BM_gpt2_encode_lines(benchmark::State& state) {
  const auto& in = inputs();
  if (!in.gpt2) return state.SkipWithError(in.error.c_str());
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < in.text.size();) {
    const std::size_t nl = in.text.find('\n', start);
    const std::size_t end = nl == std::string::npos ? in.text.size() : nl + 1;
    lines.emplace_back(in.text.data() + start, end - start);
    start = end;
  }
  for (auto _ : state)
    for (const auto line : lines) benchmark::DoNotOptimize(in.gpt2->encode(line).data());
  set_throughput(state, in.text.size());
}
BENCHMARK(BM_gpt2_encode_lines)->Unit(benchmark::kMillisecond);

void BM_gpt2_decode(benchmark::State& state) {
  const auto& in = inputs();
  if (!in.gpt2) return state.SkipWithError(in.error.c_str());
  const auto ids = in.gpt2->encode(in.text);
  for (auto _ : state) benchmark::DoNotOptimize(in.gpt2->decode(ids).data());
  set_throughput(state, in.text.size());
}
BENCHMARK(BM_gpt2_decode)->Unit(benchmark::kMillisecond);

// Reading encoder.json + vocab.bpe and building the tables.
void BM_gpt2_load(benchmark::State& state) {
  if (!inputs().gpt2) return state.SkipWithError(inputs().error.c_str());
  for (auto _ : state) benchmark::DoNotOptimize(tk::GPT2Tokenizer::from_directory(data_dir() / "gpt2").vocab_size());
}
BENCHMARK(BM_gpt2_load)->Unit(benchmark::kMillisecond);

}  // namespace
