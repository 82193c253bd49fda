// train_sentiment: seed 000's BERT sentence classifier, trained from scratch on SST-2 (or fine-tuned from a
// Hugging Face BERT directory), with a progress bar, the best-dev epoch kept, scikit-learn's
// classification report and a confusion matrix on the test set.
//
//   train_sentiment                                   # default recipe on $EIGENFORMER_DATA_DIR/sst2
//   train_sentiment --save sst2-model --log run.csv --plot run.svg
//   train_sentiment --load sst2-model --predict "a gorgeous , witty film" "a dull mess"
//   train_sentiment --load sst2-model --eval
//   train_sentiment --recipe seed --max-steps 20       # the seed's configuration (GPT-2 ids, pre-LN, 256 wide)
//   train_sentiment --init DIR                        # fine-tune a Hugging Face BERT checkpoint
//   train_sentiment --recipe seed --dump-ids ids.txt  # the token ids for tools/reference/train_sentiment_twin.py
//
// Data: --data DIR holds train.txt, dev.txt and test.txt, one "LABEL<space>sentence" a line (default
// $EIGENFORMER_DATA_DIR/sst2). Empty or malformed lines stop the run naming file and line; bytes that are not
// UTF-8 are counted and passed on to the tokenizer, which drops them.
//
// Recipes (the flags below override their fields; recipe.json in a saved model records the one used):
//   default  WordPiece (bert-base-uncased's vocab.txt, lower-cased), post-LN BERT: 2 layers, hidden 128,
//            2 heads, feed-forward 512, GELU, dropout 0.2, no pooler (classifier on [CLS]), at most 64
//            tokens, batches of similar length padded to their longest sentence; AdamW lr 1e-3, weight
//            decay 0.01 on matrices, 10% linear warm-up then linear decay to 0, gradient norm clipped at 1,
//            batch 32, 2 epochs (README.md, "Training a sentiment classifier", has the experiment).
//   seed     seed 000's IMDB classifier: GPT-2 ids + [PAD]/[CLS]/[SEP] appended (vocabulary 50260), every
//            text padded to 256, pre-LN BERT hidden 256, 4 layers, 4 heads (the seed's 6 do not divide 256),
//            feed-forward 1024, dropout 0.1, LayerNorm eps 1e-5, no pooler, classifier on [CLS]; AdamW
//            3e-4 constant (torch's defaults: weight decay 0.01 on every parameter), no clipping, batch 16,
//            100 epochs. Not the seed's: Hugging Face's N(0, 0.02) initialisation instead of PyTorch's
//            defaults, and no dropout inside the feed-forward (BERT has none there).
//
// --plot FILE.svg draws the run as it goes (rewritten after every epoch): the loss and the accuracy of every
// training batch with the epoch means and the dev set's, and at the end the test set's confusion matrix. With
// --load DIR --eval it draws that confusion matrix alone. --plot FILE.svg --from-log FILE.csv draws the
// curves of a --log file instead (the confusion matrix is not in the log) and stops.
//
// --dump-ids FILE (not in --help: a tool for the PyTorch twin) writes the recipe's token ids of every split
// and stops: a line "pad P vocab V", then per sentence "split label id id ...", split train, dev or test, the
// ids with [CLS] and [SEP] and without padding, in file order. The twin reads them instead of tokenizing.
//
// Exit status: 0 success, 2 bad flags (one line on stderr), 1 any other error (one line on stderr).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <eigenformer/io/svg.hpp>
#include <eigenformer/models/pretrained_bert_tokenizer.hpp>
#include <eigenformer/tokenizers/gpt2.hpp>
#include <eigenformer/tokenizers/pipeline.hpp>
#include <eigenformer/tokenizers/wordpiece.hpp>
#include <eigenformer/train/optimizers.hpp>
#include <eigenformer/train/schedules.hpp>
#include <eigenformer/train/sentiment.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace ef = eigenformer;
namespace fs = std::filesystem;
namespace models = eigenformer::models;
namespace tokenizers = eigenformer::tokenizers;
namespace train = eigenformer::train;
namespace svg = eigenformer::io::svg;
using eigenformer::index_t;
using Model = models::BertForSequenceClassification<float>;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* usage =
    "usage: train_sentiment [--data DIR] [--recipe default|seed] [--vocab FILE] [--init HF_DIR] [--epochs N]\n"
    "         [--batch-size N] [--lr X] [--seed N] [--max-length N] [--max-steps N] [--layers N] [--hidden N]\n"
    "         [--heads N] [--ff N] [--dropout P] [--pre-ln] [--warmup-ratio R] [--weight-decay W] [--clip C]\n"
    "         [--log FILE.csv] [--plot FILE.svg] [--save DIR] [--quiet]\n"
    "       train_sentiment --load DIR (--predict TEXT... | --eval [--data DIR] [--plot FILE.svg])\n"
    "       train_sentiment --plot FILE.svg --from-log FILE.csv";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Recipe {
  std::string name = "default";
  std::string tokenizer = "wordpiece";  // wordpiece | gpt2
  bool lower_case = true;
  std::int64_t max_length = 64;
  bool pad_to_max_length = false;
  std::int64_t hidden = 128, layers = 2, heads = 2, ff = 512;
  double dropout = 0.2;
  double layer_norm_eps = 1e-12;
  bool pre_ln = false;
  std::int64_t epochs = 2, batch_size = 32;
  double lr = 1e-3, weight_decay = 0.01, warmup_ratio = 0.1, clip = 1.0;
  std::string schedule = "linear";  // linear | constant
  bool length_buckets = true;       // batches of similar length (train::length_bucketed); false: DataLoader's
  bool decay_all = false;           // weight decay on every parameter (torch's AdamW(model.parameters()))
  std::uint64_t seed = 42;
  std::vector<std::string> labels;
  std::string init;                 // the Hugging Face directory fine-tuned from, if any

  static Recipe seed_recipe() {
    Recipe r;
    r.name = "seed";
    r.tokenizer = "gpt2";
    r.lower_case = false;
    r.max_length = 256;
    r.pad_to_max_length = true;
    r.hidden = 256, r.layers = 4, r.heads = 4, r.ff = 1024;
    r.dropout = 0.1;
    r.layer_norm_eps = 1e-5;
    r.pre_ln = true;
    r.epochs = 100, r.batch_size = 16;
    r.lr = 3e-4, r.weight_decay = 0.01, r.warmup_ratio = 0, r.clip = 0;
    r.schedule = "constant";
    r.decay_all = true;
    r.length_buckets = false;
    return r;
  }

  nlohmann::json to_json() const {
    return {{"recipe", name}, {"tokenizer", tokenizer}, {"lower_case", lower_case}, {"max_length", max_length},
            {"pad_to_max_length", pad_to_max_length}, {"hidden_size", hidden}, {"num_hidden_layers", layers},
            {"num_attention_heads", heads}, {"intermediate_size", ff}, {"dropout", dropout},
            {"layer_norm_eps", layer_norm_eps}, {"pre_layer_norm", pre_ln}, {"epochs", epochs},
            {"batch_size", batch_size}, {"lr", lr}, {"weight_decay", weight_decay}, {"weight_decay_all", decay_all},
            {"warmup_ratio", warmup_ratio}, {"length_buckets", length_buckets}, {"schedule", schedule}, {"clip_grad_norm", clip}, {"seed", seed},
            {"labels", labels}, {"init", init}};
  }
  static Recipe from_json(const nlohmann::json& j) {
    Recipe r;
    r.name = j.value("recipe", r.name);
    r.tokenizer = j.value("tokenizer", r.tokenizer);
    r.lower_case = j.value("lower_case", r.lower_case);
    r.max_length = j.value("max_length", r.max_length);
    r.pad_to_max_length = j.value("pad_to_max_length", r.pad_to_max_length);
    r.labels = j.value("labels", r.labels);
    r.seed = j.value("seed", r.seed);
    return r;
  }
};

struct Options {
  std::string recipe = "default";
  std::optional<std::string> data, vocab, init, log, plot, from_log, save, load, dump_ids;
  std::optional<std::int64_t> epochs, batch_size, max_length, layers, hidden, heads, ff;
  std::optional<std::uint64_t> seed;
  std::optional<double> lr, dropout, warmup_ratio, weight_decay, clip;
  std::optional<bool> pre_ln;
  std::int64_t max_steps = -1;
  bool quiet = false, eval = false, predict = false;
  std::vector<std::string> texts;
};

std::int64_t parse_int(const std::string& flag, const std::string& v, std::int64_t min) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used != v.size() || v.empty() || x < min)
    throw usage_error(flag + " expects an integer >= " + std::to_string(min) + ", got \"" + v + "\"");
  return x;
}
double parse_double(const std::string& flag, const std::string& v, double min, double max) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !(x >= min && x <= max))
    throw usage_error(flag + " expects a number in [" + std::to_string(min) + ", " + std::to_string(max) + "], got \"" +
                      v + "\"");
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--data") o.data = value();
    else if (a == "--recipe") {
      o.recipe = value();
      if (o.recipe != "default" && o.recipe != "seed") throw usage_error("--recipe is default or seed, got \"" + o.recipe + "\"");
    } else if (a == "--vocab") o.vocab = value();
    else if (a == "--init") o.init = value();
    else if (a == "--log") o.log = value();
    else if (a == "--plot") o.plot = value();
    else if (a == "--from-log") o.from_log = value();
    else if (a == "--save") o.save = value();
    else if (a == "--dump-ids") o.dump_ids = value();
    else if (a == "--load") o.load = value();
    else if (a == "--epochs") o.epochs = parse_int(a, value(), 1);
    else if (a == "--batch-size") o.batch_size = parse_int(a, value(), 1);
    else if (a == "--max-length") o.max_length = parse_int(a, value(), 3);
    else if (a == "--max-steps") o.max_steps = parse_int(a, value(), 0);
    else if (a == "--layers") o.layers = parse_int(a, value(), 1);
    else if (a == "--hidden") o.hidden = parse_int(a, value(), 1);
    else if (a == "--heads") o.heads = parse_int(a, value(), 1);
    else if (a == "--ff") o.ff = parse_int(a, value(), 1);
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(parse_int(a, value(), 0));
    else if (a == "--lr") o.lr = parse_double(a, value(), 0, 10);
    else if (a == "--dropout") o.dropout = parse_double(a, value(), 0, 1);
    else if (a == "--warmup-ratio") o.warmup_ratio = parse_double(a, value(), 0, 1);
    else if (a == "--weight-decay") o.weight_decay = parse_double(a, value(), 0, 10);
    else if (a == "--clip") o.clip = parse_double(a, value(), 0, 1e9);
    else if (a == "--pre-ln") o.pre_ln = true;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--eval") o.eval = true;
    else if (a == "--predict") {
      o.predict = true;
      while (i + 1 < argc && std::string_view(argv[i + 1]).substr(0, 2) != "--") o.texts.emplace_back(argv[++i]);
      if (o.texts.empty()) throw usage_error("--predict needs at least one text");
    } else if (a == "-h" || a == "--help") {
      std::cout << usage << "\n";
      std::exit(0);
    } else throw usage_error("unknown argument \"" + a + "\"");
  }
  if ((o.predict || o.eval) && !o.load) throw usage_error("--predict and --eval need --load DIR");
  if (o.load && !o.predict && !o.eval) throw usage_error("--load DIR needs --predict TEXT... or --eval");
  if (o.load && o.init) throw usage_error("--load and --init cannot be combined");
  if (o.from_log && !o.plot) throw usage_error("--from-log FILE.csv draws --plot FILE.svg: add --plot");
  if (o.from_log && o.load) throw usage_error("--from-log draws a log; it does not go with --load");
  if (o.load && o.plot && !o.eval) throw usage_error("--plot with --load draws the --eval confusion matrix: add --eval");
  return o;
}

fs::path data_root() {
  const char* env = std::getenv("EIGENFORMER_DATA_DIR");
  return env && *env ? fs::path(env) : fs::path();
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot open the file");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Text -> ids with [CLS] first and [SEP] last, at most max_length, for either tokenizer.
struct TextEncoder {
  std::optional<tokenizers::BertTokenizer> wordpiece;
  std::unique_ptr<tokenizers::GPT2Tokenizer> gpt2;
  std::unique_ptr<tokenizers::ClassifierInput<tokenizers::GPT2Tokenizer>> seed_input;
  std::vector<std::pair<std::string, std::string>> files;  // what a saved model needs to tokenize again
  std::int64_t pad = 0;
  std::size_t max_length = 64;
  std::size_t vocab_size = 0;

  static TextEncoder open(const Recipe& r, const fs::path& source) {
    TextEncoder e;
    e.max_length = static_cast<std::size_t>(r.max_length);
    if (r.tokenizer == "wordpiece") {
      const fs::path vocab = fs::is_directory(source) ? source / "vocab.txt" : source;
      e.wordpiece = tokenizers::BertTokenizer::from_file(vocab, r.lower_case);
      e.pad = e.wordpiece->pad_id();
      e.vocab_size = e.wordpiece->vocab_size();
      e.files.emplace_back("vocab.txt", read_file(vocab));
    } else if (r.tokenizer == "gpt2") {
      const bool hf = fs::exists(source / "vocab.json");
      const fs::path enc = source / (hf ? "vocab.json" : "encoder.json"), bpe = source / (hf ? "merges.txt" : "vocab.bpe");
      e.gpt2 = std::make_unique<tokenizers::GPT2Tokenizer>(tokenizers::GPT2Tokenizer::from_files(enc, bpe));
      e.seed_input = std::make_unique<tokenizers::ClassifierInput<tokenizers::GPT2Tokenizer>>(*e.gpt2, e.max_length);
      e.pad = e.seed_input->pad_id();
      e.vocab_size = e.seed_input->vocab_size();
      e.files.emplace_back("encoder.json", read_file(enc));
      e.files.emplace_back("vocab.bpe", read_file(bpe));
    } else {
      throw std::runtime_error("recipe: unknown tokenizer \"" + r.tokenizer + "\" (wordpiece or gpt2)");
    }
    return e;
  }

  std::vector<std::int64_t> operator()(std::string_view text) const {
    if (wordpiece) {
      auto body = wordpiece->encode(text);
      std::vector<std::int64_t> ids;
      ids.reserve(std::min(body.size(), max_length - 2) + 2);
      ids.push_back(wordpiece->cls_id());
      ids.insert(ids.end(), body.begin(), body.begin() + static_cast<std::ptrdiff_t>(std::min(body.size(), max_length - 2)));
      ids.push_back(wordpiece->sep_id());
      return ids;
    }
    auto ids = seed_input->encode(text);  // padded to max_length: the padding goes, make_batch puts it back
    while (!ids.empty() && ids.back() == pad) ids.pop_back();
    return ids;
  }
};

std::vector<std::string> default_labels(std::int64_t n) {
  if (n == 2) return {"negative", "positive"};
  std::vector<std::string> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back("LABEL_" + std::to_string(i));
  return out;
}

train::LabeledFile read_split(const fs::path& dir, const char* name, bool quiet_warnings = false) {
  auto f = train::read_labeled_file(dir / name);
  if (f.invalid_utf8_lines && !quiet_warnings)
    std::cerr << "train_sentiment: warning: " << (dir / name).string() << ": " << f.invalid_utf8_lines
              << " line(s) hold bytes that are not UTF-8 (first: line " << f.first_invalid_utf8_line
              << "); the tokenizer drops those bytes\n";
  return f;
}

std::string hms(double s) {
  if (!(s >= 0) || s > 1e7) return "--:--";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

void print_test_report(train::Predictions& p, const std::vector<std::string>& labels) {
  std::printf("test accuracy: %.4f\n\n", p.accuracy());
  std::cout << train::classification_report(p.labels, p.predicted, labels, 4) << "\n"
            << train::confusion_matrix_text(p.labels, p.predicted, labels);
  std::cout.flush();
}

// --plot: what the run has measured so far.
struct Curves {
  svg::Series batch_loss{.name = "train batch"}, epoch_loss{.name = "train (epoch mean)"}, dev_loss{.name = "dev"};
  svg::Series batch_acc{.name = "train batch"}, epoch_acc{.name = "train (epoch mean)"}, dev_acc{.name = "dev"};
};

svg::Heatmap confusion_picture(const train::Predictions& p, const std::vector<std::string>& labels, const std::string& what) {
  char title[96];
  std::snprintf(title, sizeof title, "Confusion matrix, %s (accuracy %.4f)", what.c_str(), p.accuracy());
  return svg::confusion_matrix(train::confusion_matrix(p.labels, p.predicted, labels.size()), labels, title);
}

void draw(const std::string& file, const Curves& c, const train::Predictions* test, const std::vector<std::string>& labels) {
  svg::Figure fig("train_sentiment", 3);
  const auto light = [](svg::Series s) {
    s.color = "#a6c8e6";  // the noisy per-batch values in a pale colour behind the means
    return s;
  };
  auto chart = [&](const char* title, const char* y, const svg::Series& batch, const svg::Series& epoch, const svg::Series& dev,
                   std::optional<double> ymin, std::optional<double> ymax) {
    svg::LineChart ch{.title = title, .x_label = "step", .y_label = y, .ymin = ymin, .ymax = ymax};
    for (const auto* s : {&batch, &epoch, &dev})
      if (!s->x.empty()) ch.series.push_back(s == &batch ? light(*s) : *s);
    if (!ch.series.empty()) fig.add(ch);
  };
  chart("Loss", "cross-entropy", c.batch_loss, c.epoch_loss, c.dev_loss, std::nullopt, std::nullopt);
  chart("Accuracy", "accuracy", c.batch_acc, c.epoch_acc, c.dev_acc, 0.0, 1.0);
  if (test) fig.add(confusion_picture(*test, labels, "test set"));
  if (fig.size() > 0) fig.save(file);
}

// --from-log: the curves of a --log file (kind=step rows per batch, kind=epoch rows with the dev figures).
int plot_from_log(const Options& o) {
  const auto log = svg::CsvLog::read(*o.from_log);
  Curves c;
  c.batch_loss.set_points(log.series("", "step", "loss", "kind", "step"));
  c.batch_acc.set_points(log.series("", "step", "accuracy", "kind", "step"));
  c.epoch_loss.set_points(log.series("", "step", "loss", "kind", "epoch"));
  c.epoch_acc.set_points(log.series("", "step", "accuracy", "kind", "epoch"));
  c.dev_loss.set_points(log.series("", "step", "dev_loss", "kind", "epoch"));
  c.dev_acc.set_points(log.series("", "step", "dev_accuracy", "kind", "epoch"));
  if (c.batch_loss.x.empty() && c.epoch_loss.x.empty()) throw std::runtime_error(*o.from_log + ": no step or epoch rows to draw");
  draw(*o.plot, c, nullptr, {});
  std::fprintf(stderr, "train_sentiment: drew %zu steps and %zu epochs of %s in %s\n", c.batch_loss.x.size(),
               c.epoch_loss.x.size(), o.from_log->c_str(), o.plot->c_str());
  return 0;
}

void check_labels(const std::vector<train::EncodedExample>& d, std::int64_t n, const std::string& file) {
  for (const auto& e : d)
    if (e.label >= n)
      throw train::data_error(file + ": label " + std::to_string(e.label) + " but the model has " + std::to_string(n) +
                              " classes (0 to " + std::to_string(n - 1) + ")");
}

int run_loaded(const Options& o) {
  const fs::path dir = *o.load;
  const fs::path recipe_path = dir / "recipe.json";
  nlohmann::json rj;
  try {
    rj = nlohmann::json::parse(read_file(recipe_path));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(recipe_path.string() + ": not valid JSON: " + e.what());
  }
  Recipe r = Recipe::from_json(rj);
  auto model = models::bert_from_pretrained<Model>(dir);
  auto enc = TextEncoder::open(r, dir);
  if (r.labels.empty()) r.labels = default_labels(model.num_labels());
  if (static_cast<index_t>(r.labels.size()) != model.num_labels())
    throw std::runtime_error(recipe_path.string() + ": " + std::to_string(r.labels.size()) + " labels but the model has " +
                             std::to_string(model.num_labels()) + " classes");
  const std::size_t pad_to = r.pad_to_max_length ? static_cast<std::size_t>(r.max_length) : 0;
  if (o.predict) {
    std::vector<train::EncodedExample> data;
    for (const auto& t : o.texts) data.push_back({enc(t), 0});
    const auto p = train::predict(model, data, 64, enc.pad, pad_to);
    for (std::size_t i = 0; i < data.size(); ++i) {
      const auto k = static_cast<std::size_t>(p.predicted[i]);
      std::printf("%s\t%.6f\n", r.labels[k].c_str(), p.probabilities[i][k]);
    }
  }
  if (o.eval) {
    const fs::path data_dir = o.data ? fs::path(*o.data) : data_root() / "sst2";
    if (data_dir.empty() || data_dir == "sst2") throw std::runtime_error("no data: pass --data DIR or set EIGENFORMER_DATA_DIR");
    const auto test = train::encode_examples(read_split(data_dir, "test.txt").examples, std::cref(enc));
    check_labels(test, model.num_labels(), (data_dir / "test.txt").string());
    auto p = train::predict(model, test, 64, enc.pad, pad_to);
    print_test_report(p, r.labels);
    if (o.plot) {
      svg::Figure fig("train_sentiment --eval");
      fig.add(confusion_picture(p, r.labels, (data_dir / "test.txt").string()));
      fig.save(*o.plot);
    }
  }
  return 0;
}

std::string csv_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

int run_training(const Options& o) {
  Recipe r = o.recipe == "seed" ? Recipe::seed_recipe() : Recipe{};
  if (o.epochs) r.epochs = *o.epochs;
  if (o.batch_size) r.batch_size = *o.batch_size;
  if (o.max_length) r.max_length = *o.max_length;
  if (o.layers) r.layers = *o.layers;
  if (o.hidden) r.hidden = *o.hidden;
  if (o.heads) r.heads = *o.heads;
  if (o.ff) r.ff = *o.ff;
  if (o.seed) r.seed = *o.seed;
  if (o.lr) r.lr = *o.lr;
  if (o.dropout) r.dropout = *o.dropout;
  if (o.warmup_ratio) r.warmup_ratio = *o.warmup_ratio;
  if (o.weight_decay) r.weight_decay = *o.weight_decay;
  if (o.clip) r.clip = *o.clip;
  if (o.pre_ln) r.pre_ln = *o.pre_ln;
  if (o.init) {
    if (r.tokenizer != "wordpiece") throw usage_error("--init needs the default recipe's WordPiece tokenizer (not --recipe seed)");
    r.init = *o.init;
    r.lower_case = models::bert_do_lower_case(*o.init);  // tokenizer_config.json's, as PretrainedBert reads it
  }

  // Tokenizer and data.
  fs::path source;
  if (o.init) source = fs::path(*o.init) / "vocab.txt";
  else if (o.vocab) source = *o.vocab;
  else if (!data_root().empty()) source = r.tokenizer == "gpt2" ? data_root() / "gpt2" : data_root() / "bert-base-uncased" / "vocab.txt";
  else throw std::runtime_error("no vocabulary: pass --vocab (vocab.txt, or the GPT-2 directory for --recipe seed) or set EIGENFORMER_DATA_DIR");
  auto enc = TextEncoder::open(r, source);
  const fs::path data_dir = o.data ? fs::path(*o.data) : data_root() / "sst2";
  if (!o.data && data_root().empty()) throw std::runtime_error("no data: pass --data DIR or set EIGENFORMER_DATA_DIR");
  const auto t0 = Clock::now();
  const auto train_txt = read_split(data_dir, "train.txt"), dev_txt = read_split(data_dir, "dev.txt"),
             test_txt = read_split(data_dir, "test.txt");
  const auto train_set = train::encode_examples(train_txt.examples, std::cref(enc));
  const auto dev_set = train::encode_examples(dev_txt.examples, std::cref(enc));
  const auto test_set = train::encode_examples(test_txt.examples, std::cref(enc));
  std::int64_t num_labels = 2;
  for (const auto* s : {&train_set, &dev_set, &test_set})
    for (const auto& e : *s) num_labels = std::max(num_labels, e.label + 1);
  const double tokenize_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (o.dump_ids) {
    std::ofstream out(*o.dump_ids, std::ios::binary);
    if (!out) throw std::runtime_error(*o.dump_ids + ": cannot open the file for writing");
    out << "pad " << enc.pad << " vocab " << enc.vocab_size << "\n";
    for (const auto& [name, set] : {std::pair{"train", &train_set}, std::pair{"dev", &dev_set}, std::pair{"test", &test_set}})
      for (const auto& e : *set) {
        out << name << ' ' << e.label;
        for (const auto id : e.ids) out << ' ' << id;
        out << '\n';
      }
    if (!out.flush()) throw std::runtime_error(*o.dump_ids + ": cannot write the file");
    std::fprintf(stderr, "train_sentiment: wrote the token ids of %zu sentences to %s\n",
                 train_set.size() + dev_set.size() + test_set.size(), o.dump_ids->c_str());
    return 0;
  }

  // Model.
  ef::manual_seed(r.seed);
  std::optional<Model> model_storage;
  if (o.init) {
    models::BertLoadReport report;
    model_storage.emplace(models::bert_from_pretrained<Model>(*o.init, {}, &report));
    if (!report.newly_initialized.empty() || !report.unused.empty()) std::cerr << report.warnings();
    if (model_storage->num_labels() != num_labels)
      throw std::runtime_error(*o.init + "/config.json: num_labels " + std::to_string(model_storage->num_labels()) +
                               " but the data has " + std::to_string(num_labels) + " classes");
    const auto& c = model_storage->config();
    r.hidden = c.hidden_size, r.layers = c.num_hidden_layers, r.heads = c.num_attention_heads, r.ff = c.intermediate_size;
    r.dropout = c.hidden_dropout_prob, r.layer_norm_eps = c.layer_norm_eps, r.pre_ln = c.pre_layer_norm;
    if (r.max_length > c.max_position_embeddings) r.max_length = c.max_position_embeddings;
  } else {
    models::BertConfig c;
    c.vocab_size = static_cast<index_t>(enc.vocab_size);
    c.hidden_size = r.hidden;
    c.num_hidden_layers = r.layers;
    c.num_attention_heads = r.heads;
    c.intermediate_size = r.ff;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = r.dropout;
    c.max_position_embeddings = r.max_length;
    c.layer_norm_eps = r.layer_norm_eps;
    c.pad_token_id = enc.pad;
    c.num_labels = num_labels;
    c.pre_layer_norm = r.pre_ln;
    c.add_pooling_layer = false;
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
    ef::Generator init_gen(r.seed);
    model_storage.emplace(c, init_gen);
  }
  Model& model = *model_storage;
  r.labels = default_labels(num_labels);
  for (const auto* s : {&train_set, &dev_set, &test_set}) check_labels(*s, num_labels, data_dir.string());

  const std::size_t pad_to = r.pad_to_max_length ? static_cast<std::size_t>(r.max_length) : 0;
  train::ClassifierTrainer<float> trainer(model, train_set, enc.pad,
                                          {.batch_size = static_cast<std::size_t>(r.batch_size),
                                           .epochs = r.epochs,
                                           .max_steps = o.max_steps,
                                           .lr = r.lr,
                                           .weight_decay = r.weight_decay,
                                           .decay_all = r.decay_all,
                                           .warmup_ratio = r.warmup_ratio,
                                           .schedule = r.schedule,
                                           .clip = r.clip,
                                           .length_buckets = r.length_buckets,
                                           .pad_to = pad_to});
  auto& params = trainer.parameters();
  const std::int64_t steps_per_epoch = trainer.steps_per_epoch(), total_steps = trainer.total_steps(),
                     warmup = trainer.warmup_steps();

  std::size_t n_params = 0;
  for (const auto& p : params) n_params += static_cast<std::size_t>(p.data.numel());
  std::fprintf(stderr,
               "train_sentiment: recipe %s: %s BERT, %lld layers, hidden %lld, %lld heads, ff %lld, dropout %g, "
               "%zu parameters; vocabulary %zu (%s); max length %lld; batch %lld, lr %g (%s, warm-up %lld steps), "
               "%lld epochs x %lld steps%s\n",
               r.name.c_str(), r.pre_ln ? "pre-LN" : "post-LN", (long long)r.layers, (long long)r.hidden,
               (long long)r.heads, (long long)r.ff, r.dropout, n_params, enc.vocab_size, r.tokenizer.c_str(),
               (long long)r.max_length, (long long)r.batch_size, r.lr, r.schedule.c_str(), (long long)warmup,
               (long long)r.epochs, (long long)steps_per_epoch,
               o.max_steps >= 0 ? (", stopping after " + std::to_string(total_steps) + " steps").c_str() : "");
  std::fprintf(stderr, "train_sentiment: %zu train, %zu dev, %zu test sentences from %s (tokenized in %.1f s)\n",
               train_set.size(), dev_set.size(), test_set.size(), data_dir.string().c_str(), tokenize_s);

  std::ofstream log;
  if (o.log) {
    log.open(*o.log);
    if (!log) throw std::runtime_error(*o.log + ": cannot open the log file for writing");
    log << "kind,epoch,step,loss,accuracy,lr,grad_norm,examples_per_second,elapsed_seconds,dev_accuracy,dev_loss\n";
  }

  const bool bar = !o.quiet && ::isatty(2);
  Curves curves;
  double best_dev = -1;
  std::int64_t best_epoch = 0;
  std::vector<std::vector<float>> best;
  std::int64_t step = 0;
  const auto train_start = Clock::now();
  double train_seconds = 0;  // optimisation only, without the dev evaluations
  for (std::int64_t epoch = 1; epoch <= r.epochs && step < total_steps; ++epoch) {
    const auto batches = trainer.epoch_batches();
    const std::int64_t epoch_steps = std::min<std::int64_t>(static_cast<std::int64_t>(batches.size()), total_steps - step);
    double loss_sum = 0;
    std::int64_t correct = 0, seen = 0;
    const auto epoch_start = Clock::now();
    auto last_draw = epoch_start - std::chrono::seconds(1);
    const std::int64_t every = std::max<std::int64_t>(1, epoch_steps / 10);
    for (std::int64_t k = 0; k < epoch_steps; ++k, ++step) {
      const auto s = trainer.step(batches[static_cast<std::size_t>(k)]);
      const double lr = s.lr;
      loss_sum += s.loss * static_cast<double>(s.count);
      correct += s.correct;
      seen += s.count;
      const auto now = Clock::now();
      const double el = std::chrono::duration<double>(now - epoch_start).count();
      const double eps = static_cast<double>(seen) / std::max(el, 1e-9);
      const double eta = el / static_cast<double>(k + 1) * static_cast<double>(epoch_steps - k - 1);
      if (log.is_open())
        log << "step," << epoch << "," << step + 1 << "," << csv_num(s.loss) << ","
            << csv_num(static_cast<double>(s.correct) / static_cast<double>(s.count)) << "," << csv_num(lr) << ","
            << csv_num(s.grad_norm) << "," << csv_num(eps) << ","
            << csv_num(std::chrono::duration<double>(now - train_start).count()) << ",,\n" << std::flush;
      const double mean_loss = loss_sum / static_cast<double>(seen), acc = static_cast<double>(correct) / static_cast<double>(seen);
      if (o.plot && std::isfinite(s.loss)) {  // a diverged batch leaves a gap rather than stopping the run
        const auto x = static_cast<double>(step + 1);
        curves.batch_loss.x.push_back(x), curves.batch_loss.y.push_back(s.loss);
        curves.batch_acc.x.push_back(x);
        curves.batch_acc.y.push_back(static_cast<double>(s.correct) / static_cast<double>(std::max<std::int64_t>(s.count, 1)));
      }
      if (bar) {
        if (now - last_draw >= std::chrono::milliseconds(100) || k + 1 == epoch_steps) {
          last_draw = now;
          const int width = 24;
          const int filled = static_cast<int>(width * (k + 1) / epoch_steps);
          std::fprintf(stderr, "\repoch %lld [%s%s] %lld/%lld loss %.4f acc %.4f %.0f ex/s ETA %s \x1b[K", (long long)epoch,
                       std::string(static_cast<std::size_t>(filled), '#').c_str(),
                       std::string(static_cast<std::size_t>(width - filled), '.').c_str(), (long long)(k + 1),
                       (long long)epoch_steps, mean_loss, acc, eps, hms(eta).c_str());
          if (k + 1 == epoch_steps) std::fputc('\n', stderr);
        }
      } else if ((k + 1) % every == 0 || k + 1 == epoch_steps) {
        std::fprintf(stderr, "epoch %lld step %lld/%lld loss %.4f acc %.4f %.0f ex/s ETA %s\n", (long long)epoch,
                     (long long)(k + 1), (long long)epoch_steps, mean_loss, acc, eps, hms(eta).c_str());
      }
    }
    train_seconds += std::chrono::duration<double>(Clock::now() - epoch_start).count();
    const auto dev = train::predict(model, dev_set, 64, enc.pad, pad_to);
    const double dev_acc = dev.accuracy();
    const bool improved = dev_acc > best_dev;
    if (improved) {
      best_dev = dev_acc;
      best_epoch = epoch;
      best = train::snapshot_parameters(model);
    }
    const double train_loss = loss_sum / static_cast<double>(std::max<std::int64_t>(seen, 1));
    const double train_acc = static_cast<double>(correct) / static_cast<double>(std::max<std::int64_t>(seen, 1));
    std::printf("epoch %lld/%lld: train loss %.4f accuracy %.4f | dev loss %.4f accuracy %.4f%s | %.1f s\n",
                (long long)epoch, (long long)r.epochs, train_loss, train_acc, dev.mean_loss, dev_acc,
                improved ? " (best)" : "", std::chrono::duration<double>(Clock::now() - epoch_start).count());
    std::fflush(stdout);
    if (log.is_open())
      log << "epoch," << epoch << "," << step << "," << csv_num(train_loss) << "," << csv_num(train_acc) << ",,,"
          << csv_num(static_cast<double>(seen) / std::max(train_seconds, 1e-9)) << ","
          << csv_num(std::chrono::duration<double>(Clock::now() - train_start).count()) << "," << csv_num(dev_acc) << ","
          << csv_num(dev.mean_loss) << "\n" << std::flush;
    if (o.plot && std::isfinite(train_loss) && std::isfinite(dev.mean_loss)) {
      const auto x = static_cast<double>(step);
      curves.epoch_loss.x.push_back(x), curves.epoch_loss.y.push_back(train_loss);
      curves.epoch_acc.x.push_back(x), curves.epoch_acc.y.push_back(train_acc);
      curves.dev_loss.x.push_back(x), curves.dev_loss.y.push_back(dev.mean_loss);
      curves.dev_acc.x.push_back(x), curves.dev_acc.y.push_back(dev_acc);
      draw(*o.plot, curves, nullptr, r.labels);
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - train_start).count();
  if (!best.empty()) train::restore_parameters(model, best);
  std::printf("training: %lld steps in %.1f s (%.1f ms/step, %.1f s with the dev evaluations); best dev accuracy %.4f "
              "at epoch %lld\n",
              (long long)step, train_seconds, 1000.0 * train_seconds / static_cast<double>(std::max<std::int64_t>(step, 1)),
              wall, best_dev, (long long)best_epoch);
  auto test = train::predict(model, test_set, 64, enc.pad, pad_to);
  print_test_report(test, r.labels);
  if (log.is_open()) log << "test,,," << csv_num(test.mean_loss) << "," << csv_num(test.accuracy()) << ",,,,,,\n";
  if (o.plot) {
    draw(*o.plot, curves, &test, r.labels);
    std::fprintf(stderr, "train_sentiment: drew the curves and the confusion matrix in %s\n", o.plot->c_str());
  }
  if (o.save) {
    auto files = enc.files;
    files.emplace_back("recipe.json", r.to_json().dump(2) + "\n");
    model.eval();
    train::save_classifier(model, *o.save, files);
    std::fprintf(stderr, "train_sentiment: saved to %s (config.json, model.safetensors, %s, recipe.json)\n",
                 o.save->c_str(), r.tokenizer == "gpt2" ? "encoder.json, vocab.bpe" : "vocab.txt");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.from_log) return plot_from_log(o);
    return o.load ? run_loaded(o) : run_training(o);
  } catch (const usage_error& e) {
    std::cerr << "train_sentiment: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "train_sentiment: " << e.what() << "\n";
    return 1;
  }
}
