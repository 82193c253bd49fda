// bert: masked-word prediction, sentence classification and sentence vectors with a Hugging Face BERT
// directory (config.json, model.safetensors, vocab.txt and optionally tokenizer_config.json; e.g. a snapshot
// of google-bert/bert-base-uncased, or a fine-tuned BertForSequenceClassification).
//
//   bert --model DIR --fill-mask "the capital of france is [MASK] ." --top-k 5
//   bert --model DIR --classify "a great movie !" "not a good film"
//   bert --model DIR --classify --file sentences.txt
//   bert --model DIR --embed "paris is a big city ."
//   bert --model DIR --embed "the cat sat on the mat ." --svg attention.svg
//
// Usage: bert --model DIR (--fill-mask TEXT [--top-k K] | --classify TEXT... | --classify --file F | --embed TEXT)
//             [--svg FILE] [--dtype fp32|bf16] [--pack-weights]
//   --fill-mask TEXT  the K most probable tokens for the first [MASK] of TEXT, one per line as
//                     id<TAB>probability<TAB>token, most probable first (needs a masked-LM head: a
//                     BertForMaskedLM or BertForPreTraining checkpoint); "[MASK]" in the text is the mask token
//   --top-k K         how many (default 5)
//   --classify TEXT...  the class probabilities of each text, one line label<TAB>probability per label
//                     (labels from config.json's id2label, else LABEL_i), texts separated by a blank line; all
//                     texts run as one padded batch (needs a classifier: a BertForSequenceClassification
//                     checkpoint). --file F reads the texts from F, one per line (blank lines skipped).
//   --embed TEXT      the pooled [CLS] vector (BertModel's pooler_output), space-separated on one line (needs a
//                     checkpoint with the pooler, bert.pooler.dense.*)
//   --svg FILE        also draws the attention weights of every layer and head as heatmaps, one row of heads
//                     per layer, the tokens (with [CLS] and [SEP]) on both axes: rows the queries, columns the
//                     keys they attend to, as in bertviz's head view; the text is the --fill-mask or --embed
//                     text, or the first --classify text
//   --dtype fp32|bf16 how the weight matrices are stored (default fp32). bf16 holds every Linear weight and
//                     the word embeddings only as bfloat16, converted as they are read (about half the memory;
//                     the arithmetic stays float32, so the results are those of the rounded weights, as
//                     PyTorch's model.to(torch.bfloat16) rounds them)
//   --pack-weights    holds every Linear weight (float32) only in the order the matrix kernel reads it
//                     (pack_weights with FloatWeights::release): the same memory as the float weights, and no
//                     repacking of each weight on every forward, which makes batches of many tokens faster;
//                     results within float rounding of the default's. Not with --dtype bf16
// Probabilities and values are printed with 6 decimals. Exit status: 0 on success, 2 for a usage error
// (including no --model), 1 for any other error (one line on standard error, nothing on standard output).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <eigenformer/io/svg.hpp>
#include <eigenformer/models/pretrained_bert_tokenizer.hpp>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace models = eigenformer::models;
namespace tokenizers = eigenformer::tokenizers;
using eigenformer::index_t;

namespace {

constexpr const char* usage =
    "usage: bert --model DIR (--fill-mask TEXT [--top-k K] | --classify TEXT... | --classify --file F |\n"
    "            --embed TEXT) [--svg FILE] [--dtype fp32|bf16] [--pack-weights]";

constexpr const char* need_model =
    "bert: --model DIR is required: a Hugging Face BERT model directory holding config.json,\n"
    "model.safetensors and vocab.txt (tokenizer_config.json is read for do_lower_case when present), for\n"
    "example a download of https://huggingface.co/google-bert/bert-base-uncased for --fill-mask and --embed,\n"
    "or of a BertForSequenceClassification fine-tuned model for --classify.";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Mode { none, fill_mask, classify, embed };

struct Options {
  std::string model;
  Mode mode = Mode::none;
  std::string text;                  // --fill-mask, --embed
  std::vector<std::string> texts;    // --classify
  std::string file;                  // --classify --file
  std::string svg;                   // --svg: the attention pictures
  long long top_k = 5;
  bool bf16 = false;                 // --dtype bf16
  bool pack = false;                 // --pack-weights
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

Options parse(int argc, char** argv) {
  Options o;
  auto set_mode = [&](Mode m, const std::string& flag) {
    if (o.mode != Mode::none) throw usage_error(flag + ": choose one of --fill-mask, --classify and --embed");
    o.mode = m;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--fill-mask") set_mode(Mode::fill_mask, a), o.text = value();
    else if (a == "--embed") set_mode(Mode::embed, a), o.text = value();
    else if (a == "--top-k") o.top_k = integer(a, value(), 1);
    else if (a == "--file") o.file = value();
    else if (a == "--svg") o.svg = value();
    else if (a == "--dtype") {
      const std::string d = value();
      if (d != "fp32" && d != "bf16") throw usage_error("--dtype expects fp32 or bf16, got \"" + d + "\"");
      o.bf16 = d == "bf16";
    }
    else if (a == "--pack-weights") o.pack = true;
    else if (a == "--classify") {
      set_mode(Mode::classify, a);
      // Every following argument up to the next option is a text.
      while (i + 1 < argc && !std::string_view(argv[i + 1]).starts_with("--")) o.texts.emplace_back(argv[++i]);
    } else throw usage_error("unknown argument " + a);
  }
  if (o.mode == Mode::none && !o.model.empty()) throw usage_error("nothing to do: give --fill-mask, --classify or --embed");
  if (!o.file.empty() && o.mode != Mode::classify) throw usage_error("--file goes with --classify");
  if (o.pack && o.bf16) throw usage_error("--pack-weights packs float32 weights: not with --dtype bf16");
  if (o.mode == Mode::classify && o.texts.empty() && o.file.empty())
    throw usage_error("--classify needs at least one text (or --file F)");
  if (o.mode == Mode::classify && !o.texts.empty() && !o.file.empty())
    throw usage_error("--classify takes texts or --file, not both");
  return o;
}

// Throws unless `length` tokens fit the model's learned positions.
void check_length(std::size_t length, const models::BertConfig& c, const std::string& what) {
  if (static_cast<index_t>(length) > c.max_position_embeddings)
    throw std::runtime_error(what + " has " + std::to_string(length) + " tokens with [CLS] and [SEP], more than the model's " +
                             std::to_string(c.max_position_embeddings) + " positions (max_position_embeddings)");
}

// A head the checkpoint did not have would be random: refuse rather than print noise.
void require_loaded(const models::BertLoadReport& report, const std::string& head, const std::string& why) {
  if (report.newly_initialized.empty()) return;
  std::string names;
  for (const auto& n : report.newly_initialized) names += (names.empty() ? "" : ", ") + n;
  throw std::runtime_error(report.file + " has no " + head + " (" + names + " missing); " + why);
}

// --svg: the attention weights of every layer and head for one sequence, as heatmaps.
void write_attention_svg(const models::BertModel<float>& bert, const tokenizers::BertTokenizer& tok,
                         const std::vector<std::int64_t>& ids, const std::string& text, const std::string& file) {
  auto input = eigenformer::Tensor<std::int64_t, 2>::empty({1, static_cast<index_t>(ids.size())});
  std::copy(ids.begin(), ids.end(), input.data());
  const auto attentions = bert.forward(input, std::nullopt, std::nullopt, /*output_attentions=*/true).attentions;
  std::vector<std::string> tokens;
  for (const auto id : ids)
    tokens.push_back(id < static_cast<std::int64_t>(tok.vocab_size()) ? tok.id_to_token(id) : "#" + std::to_string(id));
  namespace svg = eigenformer::io::svg;
  svg::Figure fig("Attention weights (rows: queries, columns: keys) of \"" + text + "\"",
                  static_cast<std::size_t>(bert.config().num_attention_heads));
  svg::add_attention(fig, attentions, tokens).save(file);
}

std::string fixed6(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

int emit(const std::string& out) {
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// Softmax in double of one row of float logits.
std::vector<double> softmax(const float* logits, index_t n) {
  std::vector<double> p(static_cast<std::size_t>(n));
  double top = -INFINITY, sum = 0;
  for (index_t i = 0; i < n; ++i) top = std::max(top, static_cast<double>(logits[i]));
  for (index_t i = 0; i < n; ++i) sum += p[static_cast<std::size_t>(i)] = std::exp(static_cast<double>(logits[i]) - top);
  for (auto& v : p) v /= sum;
  return p;
}

int fill_mask(const Options& o) {
  using Model = models::BertForMaskedLM<float>;
  auto bert = models::PretrainedBert<Model>::from_pretrained(o.model, {.bf16_weights = o.bf16, .pack_weights = o.pack});
  require_loaded(bert.report, "masked-LM head", "--fill-mask needs a BertForMaskedLM checkpoint");
  const auto& tok = bert.tokenizer;
  // The WordPiece tokenizer reads "[MASK]" as text ("[", "mask", "]"): encode the pieces between the
  // markers and put the mask id in their place.
  static constexpr std::string_view marker = "[MASK]";
  std::vector<std::int64_t> ids{tok.cls_id()};
  std::size_t mask_at = 0;
  bool found = false;
  for (std::size_t pos = 0;;) {
    const std::size_t next = o.text.find(marker, pos);
    const auto piece = tok.encode(std::string_view(o.text).substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    ids.insert(ids.end(), piece.begin(), piece.end());
    if (next == std::string::npos) break;
    if (!found) mask_at = ids.size(), found = true;
    ids.push_back(tok.mask_id());
    pos = next + marker.size();
  }
  ids.push_back(tok.sep_id());
  if (!found) throw std::runtime_error("the --fill-mask text has no [MASK] to predict");
  check_length(ids.size(), bert.model.config(), "the --fill-mask text");

  auto input = eigenformer::Tensor<std::int64_t, 2>::empty({1, static_cast<index_t>(ids.size())});
  std::copy(ids.begin(), ids.end(), input.data());
  // The head at the [MASK] position alone: over every position it would multiply each by the (V, C) word
  // embeddings (a quarter of bert-base's arithmetic at 128 tokens) and hold (T, V) logits (15.6 MB) for one row.
  const auto& model = bert.model;
  const auto hidden = model.bert.forward(input).last_hidden_state.narrow(1, static_cast<index_t>(mask_at), 1).contiguous();
  const auto logits = model.cls.predictions.forward(hidden, model.bert.embeddings.word_embeddings.weight.data)
                          .select(0, 0)
                          .select(0, 0)
                          .contiguous();
  if (!o.svg.empty()) write_attention_svg(bert.model.bert, tok, ids, o.text, o.svg);
  const index_t vocab = logits.shape()[0];
  const auto p = softmax(logits.data(), vocab);
  std::vector<index_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), index_t{0});
  const auto k = static_cast<std::size_t>(std::min<long long>(o.top_k, vocab));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), [&](index_t a, index_t b) {
    const double pa = p[static_cast<std::size_t>(a)], pb = p[static_cast<std::size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  });
  std::string out;
  for (std::size_t r = 0; r < k; ++r) {
    const index_t id = order[r];
    // The model's vocabulary may be padded beyond vocab.txt: such ids have no spelling.
    const std::string token = id < static_cast<index_t>(tok.vocab_size()) ? tok.id_to_token(id) : "";
    out += std::to_string(id) + '\t' + fixed6(p[static_cast<std::size_t>(id)]) + '\t' + token + '\n';
  }
  return emit(out);
}

int classify(const Options& o) {
  std::vector<std::string> texts = o.texts;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw std::runtime_error(o.file + ": cannot open the file");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") != std::string::npos) texts.push_back(line);
    }
    if (in.bad()) throw std::runtime_error(o.file + ": read error");
    if (texts.empty()) throw std::runtime_error(o.file + ": no text in the file (one text per line expected)");
  }
  using Model = models::BertForSequenceClassification<float>;
  auto bert = models::PretrainedBert<Model>::from_pretrained(o.model, {.bf16_weights = o.bf16, .pack_weights = o.pack});
  require_loaded(bert.report, "classification head", "--classify needs a BertForSequenceClassification checkpoint");
  const auto& config = bert.model.config();
  for (std::size_t i = 0; i < texts.size(); ++i)
    check_length(bert.tokenizer.encode(texts[i]).size() + 2, config, "text " + std::to_string(i + 1));
  const auto batch = bert.tokenizer.encode_batch(texts);  // padded to the longest, with the attention mask
  const auto logits = bert.model.forward(batch.input_ids, batch.attention_mask, batch.token_type_ids).contiguous();
  const index_t labels = logits.shape()[1];
  if (!o.svg.empty()) write_attention_svg(bert.model.bert, bert.tokenizer, bert.tokenizer.encode(texts[0], true), texts[0], o.svg);
  std::string out;
  for (index_t b = 0; b < logits.shape()[0]; ++b) {
    if (b) out += '\n';
    std::vector<double> p;
    if (labels == 1) p = {1.0 / (1.0 + std::exp(-static_cast<double>(logits(b, 0))))};  // regression: the pipeline's sigmoid
    else p = softmax(logits.data() + b * labels, labels);
    for (index_t j = 0; j < labels; ++j) out += config.label(j) + '\t' + fixed6(p[static_cast<std::size_t>(j)]) + '\n';
  }
  return emit(out);
}

int embed(const Options& o) {
  using Model = models::BertModel<float>;
  auto bert = models::PretrainedBert<Model>::from_pretrained(o.model, {.bf16_weights = o.bf16, .pack_weights = o.pack});
  if (!bert.model.pooler)
    throw std::runtime_error(bert.report.file + " has no pooler (bert.pooler.dense.weight and .bias); --embed prints the "
                             "pooled [CLS] vector");
  require_loaded(bert.report, "complete pooler", "--embed prints the pooled [CLS] vector");
  const auto ids = bert.tokenizer.encode(o.text, true);
  check_length(ids.size(), bert.model.config(), "the --embed text");
  auto input = eigenformer::Tensor<std::int64_t, 2>::empty({1, static_cast<index_t>(ids.size())});
  std::copy(ids.begin(), ids.end(), input.data());
  const auto pooled = bert.model.forward(input).pooler_output.contiguous();
  if (!o.svg.empty()) write_attention_svg(bert.model, bert.tokenizer, ids, o.text, o.svg);
  std::string out;
  for (index_t j = 0; j < pooled.shape()[1]; ++j) out += (j ? " " : "") + fixed6(pooled(0, j));
  out += '\n';
  return emit(out);
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
    switch (o.mode) {
      case Mode::fill_mask: return fill_mask(o);
      case Mode::classify: return classify(o);
      case Mode::embed: return embed(o);
      case Mode::none: break;
    }
    return 2;
  } catch (const usage_error& e) {
    std::cerr << "bert: " << e.what() << '\n' << usage << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "bert: " << e.what() << '\n';
  }
  return 1;
}
