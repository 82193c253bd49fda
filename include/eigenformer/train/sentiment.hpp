// Sentence classification training pieces shared by examples/train_sentiment.cpp and its unit test:
// reading "LABEL<space>sentence" files (SST-2 as /work/shared/data/sst2 holds it), padded batches, one
// training step of a BertForSequenceClassification, batched prediction, and scikit-learn's
// classification_report and confusion matrix as text.
//
//   auto train = train::read_labeled_file("sst2/train.txt");              // throws train::data_error file:line
//   auto enc = train::encode_examples(train, [&](std::string_view s) { return ids_with_cls_sep(s); });
//   auto batch = train::make_batch(enc, indices, pad_id);                 // padded to the longest row
//   auto r = train::train_step(model, opt, params, batch, lr, 1.0);        // loss, correct, grad norm
//   train::ClassifierTrainer trainer(model, enc, pad_id, {.batch_size = 32, .epochs = 2});  // or the whole loop
//   for (const auto& b : trainer.epoch_batches()) trainer.step(b);
//   auto pred = train::predict(model, enc_test, 64, pad_id);               // argmax + probabilities
//   std::cout << train::classification_report(pred.labels, pred.predicted, {"negative", "positive"});
//
// Not part of <eigenformer/train.hpp>: it brings the checkpoint code (nlohmann/json) with save_classifier.
// This header needs no tokenizer: the caller turns text into ids (with [CLS] first, which the classifier
// reads). Text bytes are kept as they are; lines that are not valid UTF-8 are counted so a caller can say so
// (the BERT tokenizer replaces ill-formed bytes, it never throws on them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "eigenformer/io/detail/atomic_file.hpp"
#include "eigenformer/models/bert.hpp"
#include "eigenformer/models/pretrained_bert.hpp"
#include "eigenformer/nn/module.hpp"
#include "eigenformer/random.hpp"
#include "eigenformer/tensor.hpp"
#include "eigenformer/tokenizers/pipeline.hpp"
#include "eigenformer/train/optimizers.hpp"
#include "eigenformer/train/schedules.hpp"

namespace eigenformer::train {

// A data file that cannot be used; the message starts with "file:line: ".
struct data_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LabeledText {
  std::int64_t label = 0;
  std::string text;
  std::size_t line = 0;  // 1-based line in its file
};

struct LabeledFile {
  std::vector<LabeledText> examples;
  std::size_t invalid_utf8_lines = 0;  // lines holding bytes that are not UTF-8 (kept; the tokenizer replaces them)
  std::size_t first_invalid_utf8_line = 0;
};

namespace detail::sentiment {

// Whether s is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    const unsigned c = byte(i);
    std::size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else return false;
    if (n > 0 && i + n >= s.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const unsigned b = byte(i + k);
      const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (b < l || b > h) return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace detail::sentiment

// Parses "LABEL<space>sentence" lines: LABEL a non-negative integer (at most 999), one space or tab, then
// the sentence (not empty after trimming). A CR before the newline is dropped, and so is a final newline.
// Any empty or malformed line throws data_error "name:line: ..." (the first one; the count of others too).
inline LabeledFile parse_labeled_text(std::string_view text, const std::string& name) {
  LabeledFile out;
  std::vector<std::string> problems;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t nl = text.find('\n', pos);
    const std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto problem = [&](const std::string& what) {
      problems.push_back(name + ":" + std::to_string(line_no) + ": " + what);
    };
    if (line.find_first_not_of(" \t") == std::string_view::npos) {
      problem("empty line (expected LABEL<space>sentence)");
      continue;
    }
    std::size_t i = 0;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
    if (i == 0 || i > 3) {
      problem("expected a label (a number such as 0 or 1) at the start of the line, got \"" +
              std::string(line.substr(0, std::min<std::size_t>(line.size(), 20))) + "\"");
      continue;
    }
    if (i == line.size() || (line[i] != ' ' && line[i] != '\t')) {
      problem(i == line.size() ? "a label but no sentence" : "expected a space after the label");
      continue;
    }
    std::string_view sentence = line.substr(i + 1);
    const auto first = sentence.find_first_not_of(" \t");
    if (first == std::string_view::npos) {
      problem("a label but no sentence");
      continue;
    }
    sentence.remove_prefix(first);
    while (!sentence.empty() && (sentence.back() == ' ' || sentence.back() == '\t')) sentence.remove_suffix(1);
    if (!detail::sentiment::valid_utf8(sentence)) {
      if (out.invalid_utf8_lines++ == 0) out.first_invalid_utf8_line = line_no;
    }
    out.examples.push_back({std::stoll(std::string(line.substr(0, i))), std::string(sentence), line_no});
  }
  if (!problems.empty()) {
    std::string msg = problems.front();
    if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more bad lines, the next at " +
                                    problems[1].substr(0, problems[1].find(": ")) + ")";
    throw data_error(msg);
  }
  if (out.examples.empty()) throw data_error(name + ": no examples (the file is empty)");
  return out;
}

inline LabeledFile read_labeled_file(const std::filesystem::path& path) {
  // A directory opens as a stream on POSIX, and reading it throws std::ios_base::failure, not data_error.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw data_error(path.string() + ": is a directory, not a data file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw data_error(path.string() + ": cannot open the file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw data_error(path.string() + ": cannot read the file");
  return parse_labeled_text(text, path.string());
}

// One example as ids ([CLS] first) and its class.
struct EncodedExample {
  std::vector<std::int64_t> ids;
  std::int64_t label = 0;
};

inline std::vector<EncodedExample> encode_examples(const std::vector<LabeledText>& examples,
                                                   const std::function<std::vector<std::int64_t>(std::string_view)>& encode) {
  std::vector<EncodedExample> out;
  out.reserve(examples.size());
  for (const auto& e : examples) out.push_back({encode(e.text), e.label});
  return out;
}

struct ClassifierBatch {
  Tensor<std::int64_t, 2> input_ids;       // (B, T)
  Tensor<std::int64_t, 2> attention_mask;  // (B, T), 1 = token, 0 = padding
  Tensor<std::int64_t, 1> labels;          // (B)
};

// Rows `indices` of `data`, padded with pad_id to the longest of them, or to pad_to when it is larger (the
// seed pads every row to MAX_LEN).
inline ClassifierBatch make_batch(const std::vector<EncodedExample>& data, std::span<const std::int64_t> indices,
                                  std::int64_t pad_id, std::size_t pad_to = 0) {
  std::size_t t = pad_to;
  for (const auto i : indices) t = std::max(t, data.at(static_cast<std::size_t>(i)).ids.size());
  if (t == 0) throw std::invalid_argument("make_batch: every example is empty");
  const auto b = static_cast<index_t>(indices.size());
  ClassifierBatch out{Tensor<std::int64_t, 2>::empty({b, static_cast<index_t>(t)}),
                      Tensor<std::int64_t, 2>::empty({b, static_cast<index_t>(t)}), Tensor<std::int64_t, 1>::empty({b})};
  for (index_t r = 0; r < b; ++r) {
    const auto& e = data[static_cast<std::size_t>(indices[static_cast<std::size_t>(r)])];
    std::int64_t* ids = out.input_ids.data() + r * static_cast<index_t>(t);
    std::int64_t* mask = out.attention_mask.data() + r * static_cast<index_t>(t);
    for (std::size_t j = 0; j < t; ++j) {
      const bool tok = j < e.ids.size();
      ids[j] = tok ? e.ids[j] : pad_id;
      mask[j] = tok ? 1 : 0;
    }
    out.labels(r) = e.label;
  }
  return out;
}

// Batches of similar length, for speed: the shuffled `batches` (a DataLoader epoch) are joined, cut into
// pools of `pool` batches, each pool sorted by sentence length and cut into batches again, and the new
// batches put in random order (torch.randperm from `gen`). Every example still appears once per epoch; the
// padding a batch computes shrinks from its longest sentence against a random mix to nearly none.
inline std::vector<std::vector<std::int64_t>> length_bucketed(const std::vector<std::vector<std::int64_t>>& batches,
                                                              const std::vector<EncodedExample>& data,
                                                              std::size_t batch_size, std::size_t pool, Generator& gen) {
  std::vector<std::int64_t> order;
  for (const auto& b : batches) order.insert(order.end(), b.begin(), b.end());
  const std::size_t span = std::max<std::size_t>(1, pool) * batch_size;
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t start = 0; start < order.size(); start += span) {
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(start);
    const auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + span));
    std::stable_sort(first, last, [&](std::int64_t a, std::int64_t b) {
      return data[static_cast<std::size_t>(a)].ids.size() < data[static_cast<std::size_t>(b)].ids.size();
    });
    for (auto it = first; it < last; it += static_cast<std::ptrdiff_t>(std::min<std::size_t>(batch_size, static_cast<std::size_t>(last - it))))
      out.emplace_back(it, it + static_cast<std::ptrdiff_t>(std::min<std::size_t>(batch_size, static_cast<std::size_t>(last - it))));
  }
  const auto perm = randperm(static_cast<index_t>(out.size()), gen);
  std::vector<std::vector<std::int64_t>> shuffled;
  shuffled.reserve(out.size());
  for (index_t i = 0; i < perm.numel(); ++i) shuffled.push_back(std::move(out[static_cast<std::size_t>(perm(i))]));
  return shuffled;
}

struct StepResult {
  double loss = 0;          // the batch's mean cross-entropy
  double lr = 0;            // the learning rate of the step (set by ClassifierTrainer::step)
  index_t correct = 0;      // argmax == label, in training mode (dropout on)
  index_t count = 0;
  double grad_norm = 0;     // before clipping
};

inline index_t argmax_row(const float* row, index_t n) { return static_cast<index_t>(std::max_element(row, row + n) - row); }
inline index_t argmax_row(const double* row, index_t n) { return static_cast<index_t>(std::max_element(row, row + n) - row); }

// One optimisation step: zero_grad, forward in training mode, cross-entropy, backward, clip_grad_norm
// (clip <= 0: none, the norm is still reported), lr set, AdamW step.
template <floating_element T>
StepResult train_step(models::BertForSequenceClassification<T>& model, AdamW<T>& opt, ParameterList<T>& params,
                      const ClassifierBatch& batch, double lr, double clip) {
  model.train();
  opt.zero_grad();
  const auto logits = model.forward(batch.input_ids, batch.attention_mask);
  StepResult r;
  r.loss = static_cast<double>(model.loss(logits, batch.labels));
  const index_t b = logits.shape()[0], c = logits.shape()[1];
  const auto lc = logits.contiguous();
  for (index_t i = 0; i < b; ++i) r.correct += argmax_row(lc.data() + i * c, c) == batch.labels(i) ? 1 : 0;
  r.count = b;
  model.backward(model.loss_backward());
  r.grad_norm = static_cast<double>(clip > 0 ? clip_grad_norm(params, clip)
                                             : clip_grad_norm(params, std::numeric_limits<double>::infinity()));
  opt.set_lr(lr);
  opt.step();
  return r;
}

// How examples/train_sentiment.cpp trains: its recipes' optimisation fields.
struct ClassifierTrainingOptions {
  std::size_t batch_size = 32;
  std::int64_t epochs = 2;
  std::int64_t max_steps = -1;        // < 0: every step of every epoch; else at most this many in all
  double lr = 1e-3;
  double weight_decay = 0.01;
  bool decay_all = false;             // weight decay on every parameter (torch's AdamW(model.parameters()));
                                      // false: on matrices only (decays_by_default)
  double warmup_ratio = 0.1;          // warm-up steps: round(ratio x total steps)
  std::string schedule = "linear";    // linear (warm-up, then decay to 0) | constant (after the warm-up)
  double clip = 1.0;                  // gradient-norm clipping; <= 0: none
  bool length_buckets = true;         // batches of similar length (length_bucketed); false: the DataLoader's
  std::size_t bucket_pool = 50;       // batches per length-sorted pool
  std::size_t pad_to = 0;             // pad every batch to at least this length (the seed pads to MAX_LEN)
};

// The training loop of examples/train_sentiment.cpp without its printing, shared with the unit test that
// replays it against PyTorch (tools/reference/train_sentiment_twin.py): AdamW, the shuffled (and
// length-bucketed) batches of each epoch, the learning-rate schedule, and one step. Holds references to the
// model and the data, which must outlive it.
//
// Randomness. Batches and dropout masks come from the default generator, as in PyTorch's loop after
// torch.manual_seed: each epoch_batches() draws what iter(DataLoader(shuffle=True)) draws and then, with
// length buckets, one randperm; each step's forward draws its dropout masks. Nothing else draws, so a seeded
// run is reproducible and PyTorch's twin sees the same batches and masks.
template <floating_element T>
class ClassifierTrainer {
 public:
  ClassifierTrainer(models::BertForSequenceClassification<T>& model, const std::vector<EncodedExample>& data,
                    std::int64_t pad_id, ClassifierTrainingOptions options)
      : model_(&model),
        data_(&data),
        pad_id_(pad_id),
        options_(checked(std::move(options))),
        params_(model.named_parameters()),
        optimizer_(make_optimizer(params_, options_)),
        loader_(data.size(), {.batch_size = options_.batch_size, .shuffle = true}) {
    steps_per_epoch_ = static_cast<std::int64_t>(loader_.num_batches());
    total_steps_ = steps_per_epoch_ * options_.epochs;
    if (options_.max_steps >= 0) total_steps_ = std::min(total_steps_, options_.max_steps);
    warmup_steps_ = static_cast<std::int64_t>(std::llround(options_.warmup_ratio * static_cast<double>(total_steps_)));
  }
  ClassifierTrainer(const ClassifierTrainer&) = delete;
  ClassifierTrainer& operator=(const ClassifierTrainer&) = delete;

  const ClassifierTrainingOptions& options() const noexcept { return options_; }
  ParameterList<T>& parameters() noexcept { return params_; }
  AdamW<T>& optimizer() noexcept { return optimizer_; }
  std::int64_t steps_per_epoch() const noexcept { return steps_per_epoch_; }
  std::int64_t total_steps() const noexcept { return total_steps_; }
  std::int64_t warmup_steps() const noexcept { return warmup_steps_; }
  // Steps taken so far: the next step() is step number steps_taken() (0-based).
  std::int64_t steps_taken() const noexcept { return step_; }
  bool done() const noexcept { return step_ >= total_steps_; }

  // The next epoch's batches (indices into the data), in training order.
  std::vector<std::vector<std::int64_t>> epoch_batches() {
    auto batches = loader_.epoch();
    if (!options_.length_buckets) return batches;
    return length_bucketed(batches, *data_, options_.batch_size, options_.bucket_pool, default_generator());
  }

  // The learning rate of step s: lr x the schedule's multiplier.
  double lr_at(std::int64_t s) const {
    const double mult = options_.schedule == "constant" ? constant_with_warmup(s, warmup_steps_)
                                                        : linear_with_warmup(s, warmup_steps_, total_steps_);
    return options_.lr * mult;
  }

  // One optimisation step on the rows `indices` (train_step at this step's learning rate).
  StepResult step(std::span<const std::int64_t> indices) {
    const auto batch = make_batch(*data_, indices, pad_id_, options_.pad_to);
    const double lr = lr_at(step_);
    auto r = train_step(*model_, optimizer_, params_, batch, lr, options_.clip);
    r.lr = lr;
    ++step_;
    return r;
  }

 private:
  static ClassifierTrainingOptions checked(ClassifierTrainingOptions o) {
    if (o.batch_size == 0) throw std::invalid_argument("ClassifierTrainer: batch_size must be positive");
    if (o.epochs < 1) throw std::invalid_argument("ClassifierTrainer: epochs must be at least 1");
    if (o.schedule != "linear" && o.schedule != "constant")
      throw std::invalid_argument("ClassifierTrainer: schedule \"" + o.schedule + "\" (linear or constant)");
    return o;
  }
  static AdamW<T> make_optimizer(const ParameterList<T>& params, const ClassifierTrainingOptions& o) {
    const AdamWOptions ao{.lr = o.lr, .weight_decay = o.weight_decay};
    return o.decay_all ? AdamW<T>(params, ao) : AdamW<T>(params, ao, decays_by_default<T>);
  }

  models::BertForSequenceClassification<T>* model_;
  const std::vector<EncodedExample>* data_;
  std::int64_t pad_id_;
  ClassifierTrainingOptions options_;
  ParameterList<T> params_;
  AdamW<T> optimizer_;
  tokenizers::DataLoader loader_;
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0, warmup_steps_ = 0, step_ = 0;
};

struct Predictions {
  std::vector<std::int64_t> labels;     // the true classes
  std::vector<std::int64_t> predicted;  // argmax
  std::vector<std::vector<double>> probabilities;  // softmax per example
  double mean_loss = 0;                 // cross-entropy of the true classes
  double accuracy() const {
    if (labels.empty()) return 0;
    std::size_t ok = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) ok += labels[i] == predicted[i];
    return static_cast<double>(ok) / static_cast<double>(labels.size());
  }
};

// Eval-mode predictions in batches of `batch_size`, in the order of `data` (rows are grouped by length
// internally so little padding is computed; padded keys are hidden, so the result does not depend on it).
template <floating_element T>
Predictions predict(models::BertForSequenceClassification<T>& model, const std::vector<EncodedExample>& data,
                    std::size_t batch_size, std::int64_t pad_id, std::size_t pad_to = 0) {
  const bool was_training = model.is_training();
  model.eval();
  InferenceMode no_record;
  std::vector<std::int64_t> order(data.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return data[static_cast<std::size_t>(a)].ids.size() < data[static_cast<std::size_t>(b)].ids.size();
  });
  Predictions p;
  const index_t c = model.num_labels();
  p.labels.resize(data.size());
  p.predicted.resize(data.size());
  p.probabilities.assign(data.size(), std::vector<double>(static_cast<std::size_t>(c)));
  double loss = 0;
  for (std::size_t start = 0; start < order.size(); start += batch_size) {
    const std::size_t end = std::min(order.size(), start + batch_size);
    const std::span<const std::int64_t> idx(order.data() + start, end - start);
    const auto batch = make_batch(data, idx, pad_id, pad_to);
    const auto logits = model.forward(batch.input_ids, batch.attention_mask).contiguous();
    for (std::size_t r = 0; r < idx.size(); ++r) {
      const auto k = static_cast<std::size_t>(idx[r]);
      const T* row = logits.data() + static_cast<index_t>(r) * c;
      double mx = row[0];
      for (index_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
      double z = 0;
      for (index_t j = 0; j < c; ++j) z += std::exp(static_cast<double>(row[j]) - mx);
      for (index_t j = 0; j < c; ++j) p.probabilities[k][static_cast<std::size_t>(j)] = std::exp(static_cast<double>(row[j]) - mx) / z;
      p.predicted[k] = argmax_row(row, c);
      p.labels[k] = data[k].label;
      if (data[k].label >= 0 && data[k].label < c) loss += -(static_cast<double>(row[data[k].label]) - mx - std::log(z));
    }
  }
  p.mean_loss = data.empty() ? 0 : loss / static_cast<double>(data.size());
  model.train(was_training);
  return p;
}

// counts[true][predicted] over classes 0 .. n-1.
inline std::vector<std::vector<std::int64_t>> confusion_matrix(std::span<const std::int64_t> y_true,
                                                               std::span<const std::int64_t> y_pred, std::size_t n) {
  if (y_true.size() != y_pred.size()) throw std::invalid_argument("confusion_matrix: y_true and y_pred differ in length");
  std::vector<std::vector<std::int64_t>> m(n, std::vector<std::int64_t>(n, 0));
  for (std::size_t i = 0; i < y_true.size(); ++i) {
    if (y_true[i] < 0 || static_cast<std::size_t>(y_true[i]) >= n || y_pred[i] < 0 || static_cast<std::size_t>(y_pred[i]) >= n)
      throw std::out_of_range("confusion_matrix: class out of range at " + std::to_string(i));
    ++m[static_cast<std::size_t>(y_true[i])][static_cast<std::size_t>(y_pred[i])];
  }
  return m;
}

namespace detail::sentiment {
inline std::string fmt(const char* f, double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, digits, v);
  return buf;
}
inline std::string pad_left(const std::string& s, std::size_t w) { return s.size() >= w ? s : std::string(w - s.size(), ' ') + s; }
}  // namespace detail::sentiment

// scikit-learn's classification_report(y_true, y_pred, target_names=names, digits=digits) text, laid out
// as it lays it out (zero_division gives 0). Classes are 0 .. names.size() - 1.
inline std::string classification_report(std::span<const std::int64_t> y_true, std::span<const std::int64_t> y_pred,
                                         const std::vector<std::string>& names, int digits = 2) {
  using detail::sentiment::pad_left;
  const std::size_t n = names.size();
  const auto m = confusion_matrix(y_true, y_pred, n);
  std::size_t width = std::string("weighted avg").size();
  for (const auto& s : names) width = std::max(width, s.size());
  width = std::max(width, static_cast<std::size_t>(digits));
  const auto num = [&](double v) { return " " + pad_left(detail::sentiment::fmt("%.*f", v, digits), 9); };
  const auto intcol = [&](std::int64_t v) { return " " + pad_left(std::to_string(v), 9); };
  std::string out = pad_left("", width) + " ";
  for (const char* h : {"precision", "recall", "f1-score", "support"}) out += " " + pad_left(h, 9);
  out += "\n\n";
  double mp = 0, mr = 0, mf = 0, wp = 0, wr = 0, wf = 0;
  std::int64_t total = 0, correct = 0;
  for (std::size_t k = 0; k < n; ++k) {
    std::int64_t tp = m[k][k], pred = 0, sup = 0;
    for (std::size_t j = 0; j < n; ++j) {
      pred += m[j][k];
      sup += m[k][j];
    }
    const double p = pred ? static_cast<double>(tp) / static_cast<double>(pred) : 0.0;
    const double r = sup ? static_cast<double>(tp) / static_cast<double>(sup) : 0.0;
    const double f = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
    out += pad_left(names[k], width) + " " + num(p) + num(r) + num(f) + intcol(sup) + "\n";
    mp += p;
    mr += r;
    mf += f;
    wp += p * static_cast<double>(sup);
    wr += r * static_cast<double>(sup);
    wf += f * static_cast<double>(sup);
    total += sup;
    correct += tp;
  }
  out += "\n";
  const double acc = total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
  out += pad_left("accuracy", width) + " " + " " + pad_left("", 9) + " " + pad_left("", 9) + num(acc) + intcol(total) + "\n";
  const double dn = n ? static_cast<double>(n) : 1.0, dt = total ? static_cast<double>(total) : 1.0;
  out += pad_left("macro avg", width) + " " + num(mp / dn) + num(mr / dn) + num(mf / dn) + intcol(total) + "\n";
  out += pad_left("weighted avg", width) + " " + num(wp / dt) + num(wr / dt) + num(wf / dt) + intcol(total) + "\n";
  return out;
}

// The confusion matrix as a table: rows the true classes, columns the predicted ones.
inline std::string confusion_matrix_text(std::span<const std::int64_t> y_true, std::span<const std::int64_t> y_pred,
                                         const std::vector<std::string>& names) {
  using detail::sentiment::pad_left;
  const auto m = confusion_matrix(y_true, y_pred, names.size());
  std::size_t w = std::string("true \\ predicted").size(), cw = 9;
  for (const auto& s : names) {
    w = std::max(w, s.size());
    cw = std::max(cw, s.size());
  }
  std::string out = "confusion matrix (rows: true class, columns: predicted class)\n";
  out += pad_left("true \\ predicted", w);
  for (const auto& s : names) out += " " + pad_left(s, cw);
  out += "\n";
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += pad_left(names[i], w);
    for (std::size_t j = 0; j < names.size(); ++j) out += " " + pad_left(std::to_string(m[i][j]), cw);
    out += "\n";
  }
  return out;
}

// ---- weights in memory and on disk ------------------------------------------------------------------

// A copy of every parameter's values (named_parameters() order): the best-dev epoch's weights.
template <floating_element T>
std::vector<std::vector<T>> snapshot_parameters(nn::Module<T>& model) {
  std::vector<std::vector<T>> out;
  for (auto& p : model.named_parameters()) {
    const auto d = p.data.contiguous();
    out.emplace_back(d.data(), d.data() + d.numel());
  }
  return out;
}
template <floating_element T>
void restore_parameters(nn::Module<T>& model, const std::vector<std::vector<T>>& values) {
  auto params = model.named_parameters();
  if (params.size() != values.size()) throw std::invalid_argument("restore_parameters: the snapshot is of another model");
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& d = params[i].data;
    if (static_cast<std::size_t>(d.numel()) != values[i].size())
      throw std::invalid_argument("restore_parameters: " + params[i].name + " differs in size from the snapshot");
    for (index_t j = 0; j < d.numel(); ++j) d(j) = values[i][static_cast<std::size_t>(j)];
  }
}

// Writes `model` (save_pretrained: config.json + model.safetensors) and `files` (name, contents: vocab.txt,
// recipe.json, ...) to `dir` so that `dir` is either the old directory or the complete new one: everything
// goes to a fresh sibling directory first, which then takes dir's place (the old one is removed after).
template <floating_element T>
void save_classifier(models::BertForSequenceClassification<T>& model, const std::filesystem::path& dir,
                     const std::vector<std::pair<std::string, std::string>>& files) {
  namespace fs = std::filesystem;
  const fs::path target = dir.has_filename() ? dir : dir.parent_path();
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  const std::string tag = std::to_string(std::random_device{}());
  const fs::path tmp = parent / ("." + target.filename().string() + ".tmp-" + tag);
  const fs::path old = parent / ("." + target.filename().string() + ".old-" + tag);
  fs::remove_all(tmp, ec);
  try {
    models::save_pretrained(model, tmp);
    for (const auto& [name, contents] : files) {
      io::detail::AtomicFile f(tmp / name);
      f.write(contents.data(), contents.size());
      f.commit();
    }
    const bool had = fs::exists(target, ec);
    if (had) fs::rename(target, old);
    fs::rename(tmp, target);
    if (had) fs::remove_all(old, ec);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw io::checkpoint_error(target.string() + ": cannot save: " + e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace eigenformer::train
