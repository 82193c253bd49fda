// gpt2: text generation with a Hugging Face GPT-2 directory (config.json, model.safetensors and
// vocab.json + merges.txt, e.g. a snapshot of openai-community/gpt2), or the next-token table of a prompt.
//
//   gpt2 --model ../shared/data/gpt2-hf --prompt "Hello, my dog is" --max-new-tokens 20 --seed 1
//   gpt2 --model DIR --prompt "The capital of France is" --show-top 5
//   gpt2 --model DIR --prompt "The cat sat on the mat because it" --show-top 5 --svg attention.svg
//
// Usage: gpt2 --model DIR [--prompt TEXT] [--max-new-tokens N] [--temperature F] [--top-k K] [--top-p P]
//             [--seed S] [--greedy] [--show-top K] [--threads N] [--dtype fp32|bf16] [--pack-weights] [--compare-bf16]
//             [--svg FILE]
//   --prompt TEXT       the text to continue; empty (the default) starts from <|endoftext|>, as transformers'
//                       text-generation pipeline does for GPT-2
//   --max-new-tokens N  tokens to generate (default 30); stops early at <|endoftext|>
//   --temperature, --top-k, --top-p   the sampling warpers (defaults 1, 50, 1: transformers' defaults)
//   --seed S            the sampling seed (= torch.manual_seed(S), so the same tokens as transformers'
//                       generate(do_sample=True) on the same logits); default: a random seed
//   --greedy            argmax decoding instead of sampling (the warpers are then not used)
//   --show-top K        print the K most probable next tokens after the prompt, one per line as
//                       id<TAB>probability<TAB>token (token spelled as in vocab.json, "Ġthe" for " the"),
//                       most probable first, and exit
//   --threads N         threads for the products and loops (default: EIGENFORMER_NUM_THREADS, else the CPUs
//                       this process may use: its affinity mask, capped by a cgroup CPU quota)
//   --dtype fp32|bf16   how the weight matrices are stored (default fp32). bf16 rounds every Conv1D weight and
//                       the tied wte to bfloat16 (as model.to(torch.bfloat16) would) and keeps only those
//                       bfloat16 values: about half the memory once loaded, half the bytes to stream per token;
//                       the arithmetic stays float32
//   --pack-weights      holds every weight matrix (float32) only in the order the matrix kernel reads it
//                       (pack_weights with FloatWeights::release): the float model's memory, prompts faster (no
//                       repacking of each weight per forward), decoding steps about as fast; the logits within
//                       float rounding of the default's. Not with --dtype bf16
//   --compare-bf16      with --greedy: generate with fp32 weights, then again with bfloat16 ones, and print
//                       after the text one line saying whether the greedy tokens are the same, or which new
//                       token first differs and how far apart fp32's top two logits were there (bfloat16
//                       weights move the logits a little, so near ties can break the other way)
//   --svg FILE          also draws the attention weights of every layer and head over the prompt as heatmaps,
//                       one row of heads per layer, the prompt's tokens (spelled as in vocab.json) on both
//                       axes: rows the queries, columns the keys they attend to, as in bertviz's head view.
//                       GPT-2's attention is causal: everything right of the diagonal is 0. Written before
//                       anything is printed.
// After generating, one line on standard error gives the prompt's and the generation's speed in tokens/s
// (as llama.cpp's timings do): the prompt's forward pass, then the passes through the KV cache.
// Otherwise the prompt followed by the generated text is printed. Exit status: 0 on success, 2 for a usage
// error (including no --model), 1 for any other error (message on standard error).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <eigenformer/io/svg.hpp>
#include <eigenformer/models/generation.hpp>
#include <eigenformer/models/pretrained_gpt2.hpp>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace models = eigenformer::models;

namespace {

constexpr const char* usage =
    "usage: gpt2 --model DIR [--prompt TEXT] [--max-new-tokens N] [--temperature F] [--top-k K] [--top-p P]\n"
    "            [--seed S] [--greedy] [--show-top K] [--threads N] [--dtype fp32|bf16] [--pack-weights]\n"
    "            [--compare-bf16]\n"
    "            [--svg FILE]";

constexpr const char* need_model =
    "gpt2: --model DIR is required: a Hugging Face GPT-2 model directory holding config.json,\n"
    "model.safetensors and the tokenizer files vocab.json + merges.txt (or encoder.json + vocab.bpe),\n"
    "for example a download of https://huggingface.co/openai-community/gpt2 (those four files suffice).";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string model, prompt;
  std::string svg;  // --svg: the attention pictures
  models::GenerationConfig gen;
  bool greedy = false;
  long long show_top = -1;  // -1: generate
  int threads = 0;          // 0: the library's default
  bool bf16 = false;        // --dtype bf16
  bool compare_bf16 = false;
  bool pack = false;        // --pack-weights
};

long long integer(const std::string& flag, const std::string& s, long long min) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw usage_error(flag + " expects an integer, got \"" + s + "\"");
  if (v < min) throw usage_error(flag + " must be at least " + std::to_string(min) + ", got " + s);
  return v;
}

double real(const std::string& flag, const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw usage_error(flag + " expects a number, got \"" + s + "\"");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  o.gen.max_new_tokens = 30;
  o.gen.do_sample = true;  // GPT-2's config.json asks for sampling in text generation
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--prompt") o.prompt = value();
    else if (a == "--max-new-tokens") o.gen.max_new_tokens = integer(a, value(), 0);
    else if (a == "--temperature") o.gen.temperature = real(a, value());
    else if (a == "--top-k") o.gen.top_k = integer(a, value(), 0);
    else if (a == "--top-p") o.gen.top_p = real(a, value());
    else if (a == "--seed") o.gen.seed = static_cast<std::uint64_t>(integer(a, value(), 0));
    else if (a == "--greedy") o.greedy = true;
    else if (a == "--show-top") o.show_top = integer(a, value(), 1);
    else if (a == "--threads") o.threads = static_cast<int>(integer(a, value(), 1));
    else if (a == "--svg") o.svg = value();
    else if (a == "--compare-bf16") o.compare_bf16 = true;
    else if (a == "--pack-weights") o.pack = true;
    else if (a == "--dtype") {
      const std::string d = value();
      if (d != "fp32" && d != "bf16") throw usage_error("--dtype expects fp32 or bf16, got \"" + d + "\"");
      o.bf16 = d == "bf16";
    }
    else throw usage_error("unknown argument " + a);
  }
  if (o.greedy) o.gen.do_sample = false;
  if (o.pack && (o.bf16 || o.compare_bf16))
    throw usage_error("--pack-weights packs float32 weights: not with --dtype bf16 or --compare-bf16");
  if (o.compare_bf16 && (!o.greedy || o.bf16 || o.show_top > 0))
    throw usage_error("--compare-bf16 compares greedy generations: it needs --greedy, and not --dtype bf16 or --show-top");
  if (!(o.gen.temperature > 0)) throw usage_error("--temperature must be positive");
  if (!(o.gen.top_p >= 0 && o.gen.top_p <= 1)) throw usage_error("--top-p must be between 0 and 1");
  return o;
}

// --svg: the attention weights of every layer and head over the prompt, as heatmaps.
void write_attention_svg(const models::PretrainedGPT2<float>& gpt2, const std::vector<std::int64_t>& ids,
                         const std::string& prompt, const std::string& file) {
  std::vector<eigenformer::Tensor<float, 4>> attentions;
  gpt2.model.forward(ids, &attentions);
  std::vector<std::string> tokens;
  for (const auto id : ids)
    tokens.push_back(id < static_cast<std::int64_t>(gpt2.tokenizer.vocab_size()) ? gpt2.tokenizer.id_to_token(id)
                                                                                : std::string("#").append(std::to_string(id)));
  namespace svg = eigenformer::io::svg;
  svg::Figure fig("Causal attention weights (rows: queries, columns: keys) of \"" + prompt + "\"",
                  static_cast<std::size_t>(gpt2.model.config().n_head));
  svg::add_attention(fig, attentions, tokens).save(file);
}

// --compare-bf16: the greedy generation `fp32` (prompt ids, then the new tokens) against the same with the
// weights rounded to bfloat16 (which this converts the model to). One line of text.
std::string compare_with_bf16(models::GPT2LMHeadModel<float>& model, const std::vector<std::int64_t>& ids,
                              const std::vector<std::int64_t>& fp32, const models::GenerationConfig& gen) {
  if (fp32.size() <= ids.size()) return "bf16 weights: no new tokens to compare\n";
  // fp32's logits for every new token, before the weights change: one pass, row p predicting token p + 1.
  const std::vector<std::int64_t> inputs(fp32.begin(), fp32.end() - 1);
  const auto logits = model.forward(inputs);
  model.to_bf16_weights(eigenformer::FloatWeights::release);
  const auto bf16 = models::generate(model, ids, gen);
  const std::size_t new_fp32 = fp32.size() - ids.size(), new_bf16 = bf16.size() - ids.size();
  std::size_t first = ids.size();
  while (first < fp32.size() && first < bf16.size() && fp32[first] == bf16[first]) ++first;
  if (first == fp32.size() && first == bf16.size())
    return "bf16 weights: the same " + std::to_string(new_fp32) + " greedy tokens as fp32\n";
  if (first == fp32.size() || first == bf16.size())  // one stopped at <|endoftext|> where the other did not
    return "bf16 weights: " + std::to_string(new_bf16) + " greedy tokens against fp32's " + std::to_string(new_fp32) +
           ", the same up to the shorter\n";
  const eigenformer::index_t v = logits.shape()[2];
  const float* row = logits.data() + static_cast<eigenformer::index_t>(first - 1) * v;
  std::vector<float> top(row, row + v);
  std::partial_sort(top.begin(), top.begin() + std::min<eigenformer::index_t>(2, v), top.end(), std::greater<>());
  char margin[32];
  std::snprintf(margin, sizeof margin, "%.4f", v > 1 ? static_cast<double>(top[0] - top[1]) : 0.0);
  return "bf16 weights: new token " + std::to_string(first - ids.size() + 1) + " of " + std::to_string(new_fp32) +
         " differs from fp32's (id " + std::to_string(bf16[first]) + " against " + std::to_string(fp32[first]) +
         "; fp32's top two logits were " + margin + " apart there)\n";
}

int run(const Options& o) {
  if (o.threads > 0) eigenformer::set_num_threads(o.threads);
  // bf16: each weight matrix converted as it is read, so memory never holds the float model.
  auto gpt2 = models::PretrainedGPT2<float>::from_pretrained(o.model, {.bf16_weights = o.bf16, .pack_weights = o.pack});
  auto& tok = gpt2.tokenizer;
  std::vector<std::int64_t> ids = tok.encode(o.prompt);
  const std::int64_t eot = tok.eot_id();
  const bool eot_usable = eot >= 0 && eot < gpt2.model.config().vocab_size;
  if (ids.empty()) {
    if (!eot_usable) throw std::runtime_error("the prompt is empty and the vocabulary has no <|endoftext|> to start from");
    ids.push_back(eot);
  }
  if (!o.svg.empty()) write_attention_svg(gpt2, ids, o.prompt, o.svg);

  if (o.show_top > 0) {
    std::string out;
    for (const auto& row : models::next_token_table(gpt2.model, ids, static_cast<eigenformer::index_t>(o.show_top))) {
      char prob[32];
      std::snprintf(prob, sizeof prob, "%.6f", row.probability);
      // The vocabulary may be smaller than the model's (padded) one: such ids have no spelling.
      const std::string token = row.id < static_cast<std::int64_t>(tok.vocab_size()) ? tok.id_to_token(row.id) : "";
      out += std::to_string(row.id) + '\t' + prob + '\t' + token + '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }

  models::GenerationConfig gen = o.gen;
  if (eot_usable) gen.eos_token_id = eot;
  // The model has n_positions learned positions; every token but the last new one passes through it.
  const auto room = gpt2.model.config().n_positions - static_cast<eigenformer::index_t>(ids.size()) + 1;
  if (static_cast<eigenformer::index_t>(ids.size()) > gpt2.model.config().n_positions)
    throw std::runtime_error("the prompt has " + std::to_string(ids.size()) + " tokens, more than the model's " +
                             std::to_string(gpt2.model.config().n_positions) + " positions");
  if (gen.max_new_tokens > room) {
    std::cerr << "gpt2: --max-new-tokens " << gen.max_new_tokens << " lowered to " << room
              << " (the model has " << gpt2.model.config().n_positions << " positions)\n";
    gen.max_new_tokens = room;
  }
  if (gen.do_sample && !gen.seed) gen.seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  models::GenerationTimings timings;
  const auto out = models::generate(gpt2.model, ids, gen, eigenformer::default_generator(), &timings);
  std::fprintf(stderr,
               "gpt2: prompt %lld tokens in %.2f ms (%.1f tokens/s); generated %lld tokens, %lld passes in %.2f ms "
               "(%.1f tokens/s); %d thread%s, %s weights\n",
               static_cast<long long>(timings.prompt_tokens), 1e3 * timings.prompt_seconds,
               timings.prompt_tokens / std::max(timings.prompt_seconds, 1e-9), static_cast<long long>(timings.new_tokens),
               static_cast<long long>(timings.decode_passes), 1e3 * timings.decode_seconds,
               timings.decode_passes / std::max(timings.decode_seconds, 1e-9), eigenformer::get_num_threads(),
               eigenformer::get_num_threads() == 1 ? "" : "s", o.bf16 ? "bf16" : o.pack ? "fp32 packed" : "fp32");
  // The prompt as typed (decoding its ids gives the same bytes, but would show the <|endoftext|> added for
  // an empty prompt), then the new tokens up to an <|endoftext|>.
  std::string text = o.prompt;
  std::vector<std::int64_t> fresh;
  for (std::size_t i = ids.size(); i < out.size() && !(eot_usable && out[i] == eot); ++i) {
    if (out[i] >= static_cast<std::int64_t>(tok.vocab_size())) continue;  // padded ids: no text
    fresh.push_back(out[i]);
  }
  text += tok.decode(fresh);
  text += '\n';
  if (o.compare_bf16) text += compare_with_bf16(gpt2.model, ids, out, gen);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << usage << '\n';
    return 0;
  }
  try {
    const Options o = parse(argc, argv);
    if (o.model.empty()) {
      std::cerr << need_model << '\n' << usage << '\n';
      return 2;
    }
    return run(o);
  } catch (const usage_error& e) {
    std::cerr << "gpt2: " << e.what() << '\n' << usage << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gpt2: " << e.what() << '\n';
  }
  return 1;
}
