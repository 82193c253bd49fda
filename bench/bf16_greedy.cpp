// bf16_greedy: do bfloat16 weights (GPT2LMHeadModel::to_bf16_weights, what `examples/gpt2 --dtype bf16`
// decodes with) choose the same greedy tokens as fp32 on a trained model? Issue 11 asks it of the real GPT-2,
// whose checkpoint cannot be downloaded on our machines; a model of the same architecture trained here
// (train_char_gpt --save DIR, nanoGPT's character-level Shakespeare) is the stand-in. Random weights would
// say nothing: their logits are too flat for the greedy choice to mean anything.
//
//   bf16_greedy --checkpoint DIR --data FILE [--prompts N] [--prompt-chars N] [--new-tokens N] [--json FILE]
//
// Prompts are N windows of --prompt-chars characters spread evenly over the corpus's validation split (its
// last 10%, as training held it out); each is continued greedily by --new-tokens tokens (prompt plus new
// tokens at most the model's block size, so generate() runs its KV cache without cropping), once with the
// checkpoint's fp32 weights and once after to_bf16_weights(). Printed: per prompt, whether the tokens agree
// and where they first differ, with the fp32 logit margin (top 1 minus top 2) there; then the totals, the
// smallest fp32 margins seen, and how far bfloat16 moves the logits along the fp32 continuations. As a
// control, the same fp32 weights on Eigen's products instead of our kernels (EIGENFORMER_MAX_CPU_ISA=baseline:
// another summation order, differences in the last bits only): how many prompts that alone changes. Exit
// status 0 (whatever the agreement: this measures), 2 for a bad flag, 1 for other errors. --json writes the
// prompts and both continuations (token ids), which bench/torch_bf16_greedy.py compares with PyTorch's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <eigenformer/io/detail/atomic_file.hpp>
#include <eigenformer/models/generation.hpp>
#include <eigenformer/tensor/cpu_isa.hpp>
#include <eigenformer/train/char_lm.hpp>

namespace ef = eigenformer;

namespace {

struct Options {
  std::string checkpoint, data, json;
  long prompts = 20, prompt_chars = 16, new_tokens = 48;
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw usage_error(flag + " needs a value");
    const std::string value = argv[++i];
    auto count = [&](long min) {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v < min)
        throw usage_error(flag + " expects a whole number >= " + std::to_string(min) + ", got \"" + value + "\"");
      return v;
    };
    if (flag == "--checkpoint") o.checkpoint = value;
    else if (flag == "--data") o.data = value;
    else if (flag == "--json") o.json = value;
    else if (flag == "--prompts") o.prompts = count(1);
    else if (flag == "--prompt-chars") o.prompt_chars = count(1);
    else if (flag == "--new-tokens") o.new_tokens = count(1);
    else throw usage_error("unknown flag " + flag);
  }
  if (o.checkpoint.empty() || o.data.empty()) throw usage_error("--checkpoint and --data are required");
  return o;
}

// Greedy continuations of every prompt by the model as it stands.
std::vector<std::vector<std::int64_t>> continue_all(const ef::models::GPT2LMHeadModel<float>& model,
                                                    const std::vector<std::vector<std::int64_t>>& prompts,
                                                    long new_tokens) {
  ef::models::GenerationConfig g;
  g.max_new_tokens = new_tokens;
  g.do_sample = false;
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& p : prompts) out.push_back(ef::models::generate(model, p, g));
  return out;
}

// The logits that chose each new token of seq (positions from - 1 to the end - 2), one row of V per token: one
// forward over the whole sequence, as a causal model's position p sees only tokens up to p.
std::vector<std::vector<float>> choosing_logits(const ef::models::GPT2LMHeadModel<float>& model,
                                                const std::vector<std::int64_t>& seq, std::size_t from) {
  const auto logits = model.forward(seq);  // (1, T, V)
  const ef::index_t v = logits.shape()[2];
  std::vector<std::vector<float>> rows;
  for (std::size_t n = from; n < seq.size(); ++n) {
    const float* row = logits.data() + (static_cast<ef::index_t>(n) - 1) * v;
    rows.emplace_back(row, row + v);
  }
  return rows;
}

float margin(const std::vector<float>& row) {  // top 1 minus top 2
  float top1 = -std::numeric_limits<float>::infinity(), top2 = top1;
  for (float x : row) {
    if (x > top1) top2 = top1, top1 = x;
    else if (x > top2) top2 = x;
  }
  return top1 - top2;
}

long same_sequences(const std::vector<std::vector<std::int64_t>>& a, const std::vector<std::vector<std::int64_t>>& b) {
  long same = 0;
  for (std::size_t k = 0; k < a.size(); ++k) same += a[k] == b[k];
  return same;
}

int run(const Options& o) {
  const auto trainer = ef::train::CharLMTrainer<float>::load(o.checkpoint);
  auto& model = trainer->model();
  model.eval();
  ef::InferenceMode inference;
  const long block = static_cast<long>(trainer->config().block_size);
  if (o.prompt_chars + o.new_tokens > block)
    throw usage_error("--prompt-chars " + std::to_string(o.prompt_chars) + " + --new-tokens " +
                      std::to_string(o.new_tokens) + " exceed the model's block size " + std::to_string(block));
  std::ifstream in(o.data, std::ios::binary);
  if (!in) throw std::runtime_error(o.data + ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ids = trainer->tokenizer().encode(text);
  const auto val_begin = static_cast<std::size_t>(static_cast<double>(ids.size()) * 0.9);
  const std::size_t val = ids.size() - val_begin, width = static_cast<std::size_t>(o.prompt_chars);
  if (val < width * static_cast<std::size_t>(o.prompts))
    throw usage_error(o.data + ": the validation split has " + std::to_string(val) + " characters, fewer than --prompts x --prompt-chars");
  std::vector<std::vector<std::int64_t>> prompts;
  const std::size_t stride = val / static_cast<std::size_t>(o.prompts);
  for (long k = 0; k < o.prompts; ++k) {
    const auto from = ids.begin() + static_cast<std::ptrdiff_t>(val_begin + static_cast<std::size_t>(k) * stride);
    prompts.emplace_back(from, from + static_cast<std::ptrdiff_t>(width));
  }

  const auto fp32 = continue_all(model, prompts, o.new_tokens);
  const ef::backend::CpuIsa isa = ef::backend::cpu_isa();
  ef::backend::set_max_cpu_isa(ef::backend::CpuIsa::baseline);
  const auto fp32_eigen = continue_all(model, prompts, o.new_tokens);
  ef::backend::set_max_cpu_isa(isa);
  // Along the fp32 continuations: each choice's fp32 margin (how close it came to a tie), and the largest
  // change bfloat16 makes to any logit of that row.
  std::vector<std::vector<std::vector<float>>> fp32_logits;
  std::vector<float> margins;
  for (const auto& seq : fp32) {
    fp32_logits.push_back(choosing_logits(model, seq, width));
    for (const auto& row : fp32_logits.back()) margins.push_back(margin(row));
  }
  model.to_bf16_weights();
  const auto bf16 = continue_all(model, prompts, o.new_tokens);
  std::vector<float> moved;
  for (std::size_t k = 0; k < fp32.size(); ++k) {
    const auto rows = choosing_logits(model, fp32[k], width);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      float most = 0;
      for (std::size_t j = 0; j < rows[r].size(); ++j) most = std::max(most, std::abs(rows[r][j] - fp32_logits[k][r][j]));
      moved.push_back(most);
    }
  }

  long same_prompts = 0, same_tokens = 0, total_tokens = 0;
  for (std::size_t k = 0; k < prompts.size(); ++k) {
    std::size_t first = fp32[k].size();
    for (std::size_t n = width; n < fp32[k].size(); ++n) {
      ++total_tokens;
      if (fp32[k][n] == bf16[k][n]) ++same_tokens;
      else if (first == fp32[k].size()) first = n;
    }
    const std::string prompt = trainer->tokenizer().decode(prompts[k]);
    std::string shown;
    for (char c : prompt) shown += c == '\n' ? std::string("\\n") : std::string(1, c);
    if (first == fp32[k].size()) {
      ++same_prompts;
      std::printf("prompt %2zu \"%s\": same %ld tokens\n", k, shown.c_str(), o.new_tokens);
    } else {
      const float m = margins[k * static_cast<std::size_t>(o.new_tokens) + (first - width)];
      std::printf("prompt %2zu \"%s\": first differs at new token %zu (fp32 margin there %.4f)\n", k, shown.c_str(),
                  first - width, static_cast<double>(m));
    }
  }
  std::sort(margins.begin(), margins.end());
  std::sort(moved.begin(), moved.end());
  std::printf("checkpoint %s (step %lld): %ld of %ld prompts give the same %ld greedy tokens with bfloat16 weights; "
              "%ld of %ld tokens agree position by position\n",
              o.checkpoint.c_str(), static_cast<long long>(trainer->step()), same_prompts, o.prompts, o.new_tokens,
              same_tokens, total_tokens);
  std::printf("smallest fp32 margins (top 1 - top 2 logit) over the %zu generated positions:", margins.size());
  for (std::size_t i = 0; i < std::min<std::size_t>(5, margins.size()); ++i)
    std::printf(" %.4f", static_cast<double>(margins[i]));
  std::printf("; median %.4f\n", static_cast<double>(margins[margins.size() / 2]));
  std::printf("bfloat16 moves the logits (largest change in a row, along the fp32 continuations) by median %.4f, "
              "at most %.4f\n",
              static_cast<double>(moved[moved.size() / 2]), static_cast<double>(moved.back()));
  if (!o.json.empty()) {
    const nlohmann::json j = {{"checkpoint", o.checkpoint}, {"prompts", prompts}, {"fp32", fp32}, {"bf16", bf16}};
    const std::string text = j.dump() + "\n";
    ef::io::detail::AtomicFile out(o.json);
    out.write(text.data(), text.size());
    out.commit();
  }
  std::printf("control: fp32 on Eigen's products (baseline) against fp32 on %s: %ld of %ld prompts the same\n",
              ef::backend::cpu_isa_name(isa), same_sequences(fp32, fp32_eigen), o.prompts);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const usage_error& e) {
    std::fprintf(stderr, "bf16_greedy: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bf16_greedy: %s\n", e.what());
    return 1;
  }
}
