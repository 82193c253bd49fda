// The seed chapters that the tour, attention, shortcut and encoder examples do not walk through, one
// subcommand each, printed as tables a reader of the tutorial recognises:
//
//   chapters bpe-toy              BERT from scratch §1.4: byte-pair encoding trained on the toy corpus
//                                 ("old" 7, "older" 3, "finest" 9, "lowest" 4), merge by merge
//   chapters tokenize [--vocab DIR] [--text TEXT]
//                                 §1.3: one sentence as words, characters and GPT-2 subwords; DIR holds
//                                 GPT-2's vocabulary (encoder.json + vocab.bpe, or vocab.json + merges.txt),
//                                 by default $EIGENFORMER_DATA_DIR/gpt2
//   chapters positions            §1.5: integer, binary and sinusoidal position encodings
//   chapters mask-leak            §1.13: zeroing the future after the softmax and renormalising, against
//                                 -inf before it, and the zeros-before-softmax mistake
//   chapters layernorm-gelu       §1.17-1.18: LayerNorm of six activations, GELU against ReLU, the
//                                 feed-forward network's shapes
//   chapters exercise-3-1         LLMs from scratch, exercise 3.1: SelfAttention_v2's weights copied into
//                                 SelfAttention_v1 give the same output
//   chapters next-token --model DIR [--prompt TEXT] [--top K]
//                                 §1.1: the K (default 10) most probable next tokens of a GPT-2 directory
//                                 (config.json, model.safetensors, vocab.json, merges.txt) after the prompt
//                                 (default: the section's "After years of hard work, your effort will take you")
//
// Every number is what PyTorch (plain Python for the tokenizers) gives for the same computation:
// tools/reference/make_chapter_outputs.py writes the expected outputs (tests/data/chapters/), and the
// ctests chapters_* compare them.
// Exit status: 0, 2 for a usage error, 1 for any other error (one line on standard error).
//
// Build and run: cmake --preset release && cmake --build --preset release --target chapters
//                build/release/examples/chapters bpe-toy
#include <eigenformer/models/generation.hpp>
#include <eigenformer/models/pretrained_gpt2.hpp>
#include <eigenformer/nn/activation.hpp>
#include <eigenformer/nn/feedforward.hpp>
#include <eigenformer/nn/layernorm.hpp>
#include <eigenformer/nn/positional_encoding.hpp>
#include <eigenformer/nn/tutorial/self_attention.hpp>
#include <eigenformer/random.hpp>
#include <eigenformer/tensor.hpp>
#include <eigenformer/tokenizers/bpe_trainer.hpp>
#include <eigenformer/tokenizers/char_tokenizer.hpp>
#include <eigenformer/tokenizers/gpt2.hpp>
#include <eigenformer/tokenizers/wordpiece.hpp>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ef = eigenformer;
namespace nn = ef::nn;
namespace tok = ef::tokenizers;

namespace {

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// printf into a std::string: the reference script prints with the same format strings.
[[gnu::format(printf, 1, 2)]] std::string fmt(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  va_end(args);
  return out;
}

void line(const std::string& s = "") { std::cout << s << '\n'; }

// "%.Nf", except that a NaN is "nan" whatever its sign bit (0 / 0 sets it on x86, where printf says "-nan").
std::string num(double x, int decimals = 4) { return std::isnan(x) ? "nan" : fmt("%.*f", decimals, x); }

template <class Range, class F>
std::string join(const Range& items, F&& each, const char* sep = " ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += each(item);
  }
  return out;
}

// A token between double quotes: \" and \\ escaped, control characters as \u00XX, and each byte that is
// not part of a whole UTF-8 character (GPT-2 tokens can end inside one) as \xNN.
std::string in_quotes(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto d = tok::unicode::decode(s, i);
    if (!d.valid) {
      for (std::size_t k = 0; k < d.length; ++k) out += fmt("\\x%02x", static_cast<unsigned char>(s[i + k]));
    } else if (d.cp == '"' || d.cp == '\\') {
      out += '\\', out += static_cast<char>(d.cp);
    } else if (d.cp < 0x20 || d.cp == 0x7F) {
      out += fmt("\\u%04x", static_cast<unsigned>(d.cp));
    } else {
      out.append(s.substr(i, d.length));
    }
    i += d.length;
  }
  return out + "\"";
}

template <class T, std::size_t R>
std::string torch_size(const ef::Tensor<T, R>& t) {
  return "torch.Size([" + join(t.shape(), [](ef::index_t d) { return std::to_string(d); }, ", ") + "])";
}

// The last component of a directory given with or without a trailing slash.
std::string dir_name(const std::string& dir) {
  auto p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// ---------------------------------------------------------------------------------------------------
// §1.4: BPE on the toy corpus
// ---------------------------------------------------------------------------------------------------

void bpe_toy() {
  const std::vector<tok::WordCount> corpus{{"old", 7}, {"older", 3}, {"finest", 9}, {"lowest", 4}};
  const auto segmentation_after = [&](std::size_t merges) {
    return tok::BpeTrainer({.merges = merges}).train(corpus).segmentation;
  };
  const auto symbols = [](const std::vector<std::string>& s) { return join(s, [](const std::string& x) { return x; }); };

  line("BPE on the toy corpus (BERT from scratch 1.4)");
  line();
  line("Steps 1-2: each word becomes its characters plus the end-of-word token </w>");
  line(fmt("%-8s %5s  %s", "word", "count", "symbols"));
  const auto start = segmentation_after(0);
  for (std::size_t w = 0; w < corpus.size(); ++w)
    line(fmt("%-8s %5lld  %s", corpus[w].word.c_str(), static_cast<long long>(corpus[w].count),
             symbols(start[w].second).c_str()));
  line();

  line("Step 3: adjacent pairs counted with the word frequencies (most frequent first, ties in first-seen order)");
  line(fmt("%-10s %5s", "pair", "count"));
  auto pairs = tok::initial_pair_counts(corpus);
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.count > b.count; });
  for (const auto& pc : pairs)
    line(fmt("%-10s %5lld", (pc.left + " " + pc.right).c_str(), static_cast<long long>(pc.count)));
  line();

  const std::size_t merges = 10;
  line(fmt("Merge the most frequent pair everywhere, count again, repeat (%zu merges)", merges));
  const auto result = tok::BpeTrainer({.merges = merges}).train(corpus);
  for (std::size_t k = 0; k < result.history.size(); ++k) {
    const auto& m = result.history[k];
    line(fmt("merge %zu: %s + %s -> %s (count %lld)", k + 1, m.left.c_str(), m.right.c_str(), (m.left + m.right).c_str(),
             static_cast<long long>(m.count)));
    // Training again with k + 1 merges shows the words as the trainer holds them after this merge.
    for (const auto& [word, segments] : segmentation_after(k + 1))
      line(fmt("  %-8s %s", word.c_str(), symbols(segments).c_str()));
  }
  line();

  const auto& vocab = result.model.vocab();
  const std::size_t characters = tok::BpeTrainer({.merges = 0}).train(corpus).model.vocab().size();
  line(fmt("Step 4: the vocabulary, %zu symbols and %zu merged tokens (%zu in all)", characters,
           vocab.size() - characters, vocab.size()));
  line(symbols(vocab));
  line();
  line("New words, encoded with the merges in the order they were learned");
  for (const char* word : {"oldest", "newest", "finer"})
    line(fmt("  %-8s %s", word, symbols(result.model.encode_word(word)).c_str()));
}

// ---------------------------------------------------------------------------------------------------
// §1.3: word, character and subword tokens
// ---------------------------------------------------------------------------------------------------

void tokenize(const std::string& vocab_dir, const std::string& text) {
  const auto words = tok::BasicTokenizer(/*do_lower_case=*/false).tokenize(text);
  const auto chars = tok::CharTokenizer::from_text(text);
  const auto gpt2 = tok::GPT2Tokenizer::from_directory(vocab_dir);
  const auto ids = gpt2.encode(text);
  const auto char_ids = chars.encode(text);

  line("Words, characters and subwords of one sentence (BERT from scratch 1.3)");
  line("text: " + in_quotes(text));
  line();
  line(fmt("%-9s %6s  %s", "method", "tokens", "pieces"));
  line(fmt("%-9s %6zu  ", "word", words.size()) + join(words, [](const std::string& w) { return in_quotes(w); }));
  line(fmt("%-9s %6zu  ", "character", char_ids.size()) +
       join(char_ids, [&](std::int64_t id) { return in_quotes(chars.id_to_token(id)); }));
  line(fmt("%-9s %6zu  ", "subword", ids.size()) +
       join(ids, [&](std::int64_t id) { return in_quotes(gpt2.token_bytes(id)); }));
  line();
  line(fmt("vocabulary sizes: %zu distinct words, %zu distinct characters, %zu subword tokens (%s, %zu merges)",
           std::set<std::string>(words.begin(), words.end()).size(), chars.vocab_size(), gpt2.vocab_size(),
           dir_name(vocab_dir).c_str(), gpt2.merges_size()));
  line("subword ids: " + join(ids, [](std::int64_t id) { return std::to_string(id); }));
}

// ---------------------------------------------------------------------------------------------------
// §1.5: position encodings
// ---------------------------------------------------------------------------------------------------

void positions() {
  line("Position encodings (BERT from scratch 1.5)");
  line();
  line("Integer positions: every one of the 8 dimensions holds the position");
  line(fmt("%8s  %s", "position", "encoding"));
  for (const ef::index_t pos : {0, 1, 2, 300}) {
    const auto row = nn::integer_positional_encoding<float>(1, 8, pos).select(0, 0);
    std::vector<float> values(row.data(), row.data() + row.numel());
    line(fmt("%8lld  ", static_cast<long long>(pos)) + join(values, [](float v) { return fmt("%d", static_cast<int>(v)); }));
  }
  // Token embeddings are small numbers around 0; an integer position added to them is hundreds of times
  // larger, so two different words at one position look almost the same.
  ef::manual_seed(123);
  const auto dog = ef::randn({8});
  const auto cat = ef::randn({8});
  const auto values = [](const ef::Tensor<float, 1>& t) {
    std::vector<float> v(t.data(), t.data() + t.numel());
    return join(v, [](float x) { return num(x); });
  };
  const auto cosine = [](const ef::Tensor<float, 1>& a, const ef::Tensor<float, 1>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (ef::index_t i = 0; i < a.numel(); ++i) ab += double(a(i)) * b(i), aa += double(a(i)) * a(i), bb += double(b(i)) * b(i);
    return ab / (std::sqrt(aa) * std::sqrt(bb));
  };
  line("Token embeddings \"dog\" and \"cat\": torch.randn(8) twice after torch.manual_seed(123)");
  line(fmt("  %-18s ", "dog") + values(dog));
  line(fmt("  %-18s ", "cat") + values(cat));
  line(fmt("  %-18s ", "dog + position 300") + values(dog + 300.0f));
  line(fmt("  %-18s ", "cat + position 300") + values(cat + 300.0f));
  line(fmt("cosine similarity of dog and cat: %s alone, %s both at position 300 (the position drowns the word)",
           num(cosine(dog, cat)).c_str(), num(cosine(dog + 300.0f, cat + 300.0f)).c_str()));
  line();

  line("Binary positions 64-75 in 8 bits (i=8 the most significant bit, i=1 the least)");
  line(fmt("%8s  i=8 i=7 i=6 i=5 i=4 i=3 i=2 i=1", "position"));
  const auto bits = nn::binary_positional_encoding<float>(12, 8, 64);
  for (ef::index_t p = 0; p < bits.size(0); ++p) {
    std::string row = fmt("%8lld  ", static_cast<long long>(64 + p));
    for (ef::index_t j = 0; j < 8; ++j) row += fmt(j ? " %3d" : "%3d", static_cast<int>(bits(p, j)));
    line(row);
  }
  line();

  line("Sinusoidal positions, d_model 768: PE(pos, 2i) = sin(pos / 10000^(2i/768)), PE(pos, 2i+1) = cos(...)");
  const ef::index_t d_model = 768;
  const auto pe = nn::sinusoidal_positional_encoding<float>(1024, d_model);
  const std::vector<ef::index_t> dims{0, 1, 2, 3, 766, 767};
  line(fmt("%8s  ", "position") + join(dims, [](ef::index_t d) { return fmt("%8s", ("dim " + std::to_string(d)).c_str()); }));
  for (const ef::index_t pos : {0, 1, 2, 3, 100, 1023})
    line(fmt("%8lld  ", static_cast<long long>(pos)) +
         join(dims, [&](ef::index_t d) { return fmt("%8s", num(pe(pos, d)).c_str()); }));
  line();

  // Figure 1.33's four dimension pairs: pair i turns once every 2 pi 10000^(2i/768) positions.
  line("The pairs of figure 1.33: the wavelength grows from 2 pi to 10000 * 2 pi positions");
  const std::vector<ef::index_t> pairs{1, 50, 150, 250};
  line(fmt("%6s  %10s  %s", "pair i", "dimensions", "wavelength in positions"));
  for (const ef::index_t i : pairs)
    line(fmt("%6lld  %10s  %s", static_cast<long long>(i), fmt("%lld, %lld", static_cast<long long>(2 * i), static_cast<long long>(2 * i + 1)).c_str(),
             num(2 * M_PI * std::pow(10000.0, 2.0 * i / d_model), 1).c_str()));
  line(fmt("%8s  ", "position") + join(pairs, [](ef::index_t i) {
         return fmt("%9s %9s", ("sin i=" + std::to_string(i)).c_str(), ("cos i=" + std::to_string(i)).c_str());
       }));
  for (const ef::index_t pos : {0, 1, 10, 100, 500, 1023})
    line(fmt("%8lld  ", static_cast<long long>(pos)) + join(pairs, [&](ef::index_t i) {
           return fmt("%9s %9s", num(pe(pos, 2 * i)).c_str(), num(pe(pos, 2 * i + 1)).c_str());
         }));
}

// ---------------------------------------------------------------------------------------------------
// §1.13: zeros after the softmax and renormalising, against -inf before it
// ---------------------------------------------------------------------------------------------------

const std::vector<std::string> words_1_13{"computer", "science", "is", "the", "study"};

void matrix(const std::string& title, const ef::Tensor<float, 2>& m) {
  line(title);
  line(fmt("%-9s ", "") + join(words_1_13, [](const std::string& w) { return fmt("%9s", w.c_str()); }));
  for (ef::index_t i = 0; i < m.size(0); ++i) {
    std::string row = fmt("%-9s", words_1_13[static_cast<std::size_t>(i)].c_str());
    for (ef::index_t j = 0; j < m.size(1); ++j) row += fmt(" %9s", num(m(i, j)).c_str());
    line(row);
  }
}

void mask_leak() {
  const ef::index_t n = static_cast<ef::index_t>(words_1_13.size());
  auto scores = ef::zeros<float>({n, n});  // listing 1.11: row i is 0.5 + 0.25 i + 0.5 j
  for (ef::index_t i = 0; i < n; ++i)
    for (ef::index_t j = 0; j < n; ++j) scores(i, j) = 0.5f + 0.25f * i + 0.5f * j;
  const auto causal = ef::tril(ef::ones<bool>({n, n}));
  const auto keep = ef::tril(ef::ones<float>({n, n}));  // the same mask as 1 / 0
  const float inf = std::numeric_limits<float>::infinity();

  // The section's steps 1-3: the softmax sees the whole row, then the future is zeroed and each row divided
  // by what is left.
  const auto zeroed = [&](const ef::Tensor<float, 2>& s) { return ef::softmax(s, -1) * keep; };
  const auto renormalised = [&](const ef::Tensor<float, 2>& s) {
    const auto w = zeroed(s);
    return w / ef::sum(w, -1, ef::keepdim);
  };
  const auto neg_inf = [&](const ef::Tensor<float, 2>& s) { return ef::softmax(ef::masked_fill(s, ~causal, -inf), -1); };

  line("Causal attention: zeros after the softmax, or -inf before it (BERT from scratch 1.13)");
  line();
  matrix("Scaled scores of listing 1.11 (rows: queries, columns: keys)", scores);
  line();
  const auto w = zeroed(scores);
  matrix("Steps 1-3 of the section: softmax over the whole row, zero the future, ...", w);
  const auto sums = ef::sum(w, -1);
  std::string row = "row sums:";
  for (ef::index_t i = 0; i < n; ++i) row += " " + num(sums(i));
  line(row);
  const auto a = renormalised(scores);
  matrix("... and divide each row by its sum", a);
  line();
  const auto b = neg_inf(scores);
  matrix("Listing 1.12: -inf above the diagonal, then the softmax", b);
  // softmax(x)_j / sum_{k <= i} softmax(x)_k = exp(x_j) / sum_{k <= i} exp(x_k): the future's share of the
  // denominator divides out, so in exact arithmetic the two agree.
  line("largest difference between the two: " + num(ef::max(ef::abs(a - b)).item(), 6) +
       " (the future cancels out of the renormalised ratio)");
  line();

  // In float it does not always: a future score far above the past ones makes every past weight underflow
  // to 0 in the first softmax, and the renormalisation divides 0 by 0. The -inf mask never computes them.
  auto future = scores.clone();
  for (ef::index_t i = 0; i < n; ++i) future(i, n - 1) += 200.0f;
  line("A future key that scores high: 200 added to the column of \"study\"");
  matrix("zeros after the softmax, renormalised: the first four rows underflow to 0 / 0", renormalised(future));
  matrix("-inf before the softmax: those rows never see the future", neg_inf(future));
  line();

  // Zeros are not a mask before the softmax: exp(0) = 1 gives every future token weight.
  const auto wrong = ef::softmax(scores * keep, -1);
  matrix("The mistake the -inf avoids: zeros instead of -inf before the softmax (exp(0) = 1)", wrong);
  const auto leaked = ef::sum(wrong * (ef::ones_like(keep) - keep), -1);
  row = "weight on future tokens per row:";
  for (ef::index_t i = 0; i < n; ++i) row += " " + num(leaked(i));
  line(row);
}

// ---------------------------------------------------------------------------------------------------
// §1.17-1.18: LayerNorm, GELU against ReLU, the feed-forward shapes
// ---------------------------------------------------------------------------------------------------

std::string values(const ef::Tensor<float, 1>& t) {
  std::vector<float> v(t.data(), t.data() + t.numel());
  return join(v, [](float x) { return num(x); });
}

void layernorm_gelu() {
  const auto x = ef::tensor<float>({0.78f, 1.05f, 0.44f, 0.73f, 0.65f, 0.28f});
  const float mean = ef::mean(x).item();
  const auto var = ef::var(x, false);  // biased, divided by n, as LayerNorm normalises
  line("Layer normalisation of six activations (BERT from scratch 1.17)");
  line(fmt("%-32s ", "x") + values(x));
  line(fmt("%-32s ", "mean") + num(mean));
  line(fmt("%-32s ", "variance (divided by 6)") + num(var.item()));
  line(fmt("%-32s ", "(x - mean) / sqrt(variance)") + values((x - mean) / std::sqrt(var.item())));
  nn::LayerNorm<float> ln(6);  // eps 1e-5, gamma 1, beta 0
  const auto y = ln.forward(x);
  line(fmt("%-32s ", "nn.LayerNorm(6), eps 1e-5") + values(y));
  line(fmt("%-32s ", "its mean and variance") + num(ef::mean(y).item()) + " " + num(ef::var(y, false).item()));
  // gamma and beta are learned: the network can scale and shift the normalised values back.
  ln.weight->data.fill_(2.0f);
  ln.bias->data.fill_(0.5f);
  line(fmt("%-32s ", "gamma = 2, beta = 0.5") + values(ln.forward(x)));
  line();

  line("GELU against ReLU (1.18): GELU keeps small negative values and is smooth at 0");
  line(fmt("%6s %8s %12s %12s", "x", "ReLU", "GELU", "GELU (tanh)"));
  const auto xs = ef::tensor<float>({-3.0f, -2.0f, -1.0f, -0.5f, -0.1f, 0.0f, 0.1f, 0.5f, 1.0f, 2.0f, 3.0f});
  const auto relu = nn::ReLU<float>().forward(xs);
  const auto gelu = nn::GELU<float>().forward(xs);
  const auto gelu_tanh = nn::GELU<float>(nn::GeluApproximate::tanh).forward(xs);
  for (ef::index_t i = 0; i < xs.numel(); ++i)
    line(fmt("%6s %8s %12s %12s", num(xs(i), 1).c_str(), num(relu(i)).c_str(), num(gelu(i)).c_str(),
             num(gelu_tanh(i)).c_str()));
  line();

  line("The feed-forward network (1.18): every token's 768 numbers go through the same two Linears");
  ef::manual_seed(123);
  nn::FeedForward<float> ff(768, 3072, /*dropout=*/0.0, "gelu");
  auto h = ef::randn({2, 3, 768});
  line(fmt("%-30s ", "input (batch, tokens, 768)") + torch_size(h));
  h = ff.fc1.forward(h);
  line(fmt("%-30s ", "after Linear(768 -> 3072)") + torch_size(h));
  h = ff.act.forward(h);
  line(fmt("%-30s ", "after GELU") + torch_size(h));
  h = ff.fc2.forward(h);
  line(fmt("%-30s ", "after Linear(3072 -> 768)") + torch_size(h));
  long long parameters = 0;
  for (const auto& p : ff.named_parameters()) parameters += p.data.numel();
  line(fmt("parameters: %lld (768 x 3072 + 3072 + 3072 x 768 + 768)", parameters));
}

// ---------------------------------------------------------------------------------------------------
// LLMs from scratch, exercise 3.1
// ---------------------------------------------------------------------------------------------------

void exercise_3_1() {
  const auto inputs = ef::tensor<float>({{0.43f, 0.15f, 0.89f}, {0.55f, 0.87f, 0.66f}, {0.57f, 0.85f, 0.64f},
                                         {0.22f, 0.58f, 0.33f}, {0.77f, 0.25f, 0.10f}, {0.05f, 0.80f, 0.55f}});
  line("Exercise 3.1 (LLMs from scratch, chapter 3): SelfAttention_v2's weights in SelfAttention_v1");
  line();
  ef::manual_seed(789);
  nn::tutorial::SelfAttentionV2<float> sa_v2(3, 2);
  const auto out_v2 = sa_v2.forward(inputs);
  line("sa_v2 = SelfAttention_v2(3, 2) after torch.manual_seed(789); sa_v2(inputs):");
  std::cout << out_v2 << '\n';
  ef::manual_seed(123);
  nn::tutorial::SelfAttentionV1<float> sa_v1(3, 2);
  line("sa_v1 = SelfAttention_v1(3, 2) after torch.manual_seed(123), its own rand weights; sa_v1(inputs):");
  std::cout << sa_v1.forward(inputs) << '\n';
  line();
  // nn.Linear computes x W^T with W stored (d_out, d_in); SelfAttention_v1 computes x W with W (d_in, d_out).
  const auto& w = sa_v2.W_query.weight.shape();
  line(fmt("nn.Linear stores its weight as (d_out, d_in) = (%lld, %lld): sa_v1 needs the transpose",
           static_cast<long long>(w[0]), static_cast<long long>(w[1])));
  sa_v1.W_query.data.copy_(sa_v2.W_query.weight.data.t());
  sa_v1.W_key.data.copy_(sa_v2.W_key.weight.data.t());
  sa_v1.W_value.data.copy_(sa_v2.W_value.weight.data.t());
  const auto out_v1 = sa_v1.forward(inputs);
  line("sa_v1.W_query = sa_v2.W_query.weight.T (likewise W_key, W_value); sa_v1(inputs):");
  std::cout << out_v1 << '\n';
  line("largest |sa_v1(inputs) - sa_v2(inputs)|: " + num(ef::max(ef::abs(out_v1 - out_v2)).item(), 6));
}

// ---------------------------------------------------------------------------------------------------
// §1.1: the next-token table
// ---------------------------------------------------------------------------------------------------

void next_token(const std::string& model_dir, const std::string& prompt, long long top) {
  auto gpt2 = ef::models::PretrainedGPT2<float>::from_pretrained(model_dir);
  const auto& t = gpt2.tokenizer;
  const auto ids = t.encode(prompt);
  if (ids.empty()) throw usage_error("--prompt is empty");
  const auto positions = gpt2.model.config().n_positions;
  if (static_cast<ef::index_t>(ids.size()) > positions)
    throw std::runtime_error("the prompt has " + std::to_string(ids.size()) + " tokens, more than the model's " +
                             std::to_string(positions) + " positions");
  // Ids past the tokenizer's vocabulary (a model may pad its embedding table) have no text.
  const auto text = [&](std::int64_t id) {
    return in_quotes(id < static_cast<std::int64_t>(t.vocab_size()) ? t.token_bytes(id) : std::string_view());
  };
  const auto table = ef::models::next_token_table(gpt2.model, ids, static_cast<ef::index_t>(top));

  line("The next token after a prompt (BERT from scratch 1.1), GPT-2 from " + dir_name(model_dir));
  line("prompt: " + in_quotes(prompt) + fmt(", %zu tokens: ", ids.size()) + join(ids, text));
  line();
  line(fmt("%4s  %-14s %6s  %11s", "rank", "next token", "id", "probability"));
  double shown = 0;
  for (std::size_t r = 0; r < table.size(); ++r) {
    line(fmt("%4zu  %-14s %6lld  %10s%%", r + 1, text(table[r].id).c_str(), static_cast<long long>(table[r].id),
             num(100 * table[r].probability, 2).c_str()));
    shown += table[r].probability;
  }
  line(fmt("the %zu tokens shown hold %s%% of the probability", table.size(), num(100 * shown, 2).c_str()));
}

// ---------------------------------------------------------------------------------------------------

constexpr const char* usage =
    "usage: chapters CHAPTER [OPTIONS]\n"
    "  bpe-toy                 BERT from scratch 1.4: BPE on the toy corpus, step by step\n"
    "  tokenize [--vocab DIR] [--text TEXT]\n"
    "                          1.3: words, characters and GPT-2 subwords of one sentence\n"
    "                          (DIR: GPT-2's vocabulary, default $EIGENFORMER_DATA_DIR/gpt2)\n"
    "  positions               1.5: integer, binary and sinusoidal position encodings\n"
    "  mask-leak               1.13: zeros after the softmax and renormalising, against -inf before it\n"
    "  layernorm-gelu          1.17-1.18: LayerNorm, GELU against ReLU, the feed-forward shapes\n"
    "  exercise-3-1            LLMs from scratch exercise 3.1: SelfAttention_v2's weights in SelfAttention_v1\n"
    "  next-token --model DIR [--prompt TEXT] [--top K]\n"
    "                          1.1: the K (default 10) most probable next tokens of a Hugging Face GPT-2\n"
    "                          directory (config.json, model.safetensors, vocab.json, merges.txt)";

// --flag VALUE pairs after the chapter's name; every flag must be one the chapter knows.
std::map<std::string, std::string> flags(int argc, char** argv, const std::set<std::string>& known) {
  std::map<std::string, std::string> out;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (!known.count(a)) throw usage_error(std::string(argv[1]) + ": unknown argument " + a);
    if (i + 1 >= argc) throw usage_error(a + " needs a value");
    out[a] = argv[++i];
  }
  return out;
}

int run(int argc, char** argv) {
  const std::string chapter = argv[1];
  const auto none = [&] { flags(argc, argv, {}); };
  if (chapter == "bpe-toy") none(), bpe_toy();
  else if (chapter == "positions") none(), positions();
  else if (chapter == "mask-leak") none(), mask_leak();
  else if (chapter == "layernorm-gelu") none(), layernorm_gelu();
  else if (chapter == "exercise-3-1") none(), exercise_3_1();
  else if (chapter == "tokenize") {
    auto f = flags(argc, argv, {"--vocab", "--text"});
    if (!f.count("--vocab")) {
      const char* data = std::getenv("EIGENFORMER_DATA_DIR");
      if (!data || !*data)
        throw usage_error("tokenize needs GPT-2's vocabulary: --vocab DIR (encoder.json + vocab.bpe, or "
                          "vocab.json + merges.txt), or EIGENFORMER_DATA_DIR with gpt2/ in it");
      f["--vocab"] = (std::filesystem::path(data) / "gpt2").string();
    }
    tokenize(f["--vocab"], f.count("--text") ? f["--text"] : "Hello, world! Tokenization splits unhappiness into subwords.");
  } else if (chapter == "next-token") {
    auto f = flags(argc, argv, {"--model", "--prompt", "--top"});
    if (!f.count("--model"))
      throw usage_error("next-token needs --model DIR: a Hugging Face GPT-2 directory (config.json, "
                        "model.safetensors, vocab.json, merges.txt), e.g. a download of openai-community/gpt2");
    long long top = 10;
    if (f.count("--top")) {
      std::size_t used = 0;
      try {
        top = std::stoll(f["--top"], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != f["--top"].size() || top < 1)
        throw usage_error("--top expects a positive integer, got \"" + f["--top"] + "\"");
    }
    next_token(f["--model"], f.count("--prompt") ? f["--prompt"] : "After years of hard work, your effort will take you",
               top);
  } else {
    throw usage_error("unknown chapter \"" + chapter + "\"");
  }
  return std::fflush(stdout) == 0 && std::cout.flush() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "chapters: which chapter?\n" << usage << '\n';
    return 2;
  }
  if (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << usage << '\n';
    return 0;
  }
  try {
    return run(argc, argv);
  } catch (const usage_error& e) {
    std::cerr << "chapters: " << e.what() << " (chapters --help lists the chapters and their options)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "chapters: " << e.what() << '\n';
  }
  return 1;
}
