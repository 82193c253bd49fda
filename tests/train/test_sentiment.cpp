// train/sentiment.hpp, the pieces of examples/train_sentiment.cpp: the data file reader and its errors,
// scikit-learn's report layout, a few training steps of a tiny classifier on a tiny in-test data set (the
// loss falls), and the save/load round trip (bit-exact weights, equal predictions). No tokenizer: the test
// maps words to ids itself.
#include <doctest/doctest.h>

#include <cstring>
#include <eigenformer/models/pretrained_bert.hpp>
#include <eigenformer/train/optimizers.hpp>
#include <eigenformer/train/sentiment.hpp>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "io/io_test_support.hpp"

namespace ef = eigenformer;
namespace train = eigenformer::train;
using Model = ef::models::BertForSequenceClassification<float>;

namespace {

std::string error_of(const std::string& text) {
  try {
    (void)train::parse_labeled_text(text, "data.txt");
  } catch (const train::data_error& e) {
    return e.what();
  }
  return "";
}

// [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3, then the words.
const std::vector<std::string> words = {"good", "great", "fine", "fun",  "bad", "awful", "dull", "boring",
                                        "the",  "movie", "a",    "film", "is",  "was",   "not",  "very"};

std::vector<std::int64_t> encode(std::string_view text) {
  std::vector<std::int64_t> ids{1};
  std::istringstream in{std::string(text)};
  for (std::string w; in >> w;) {
    const auto it = std::find(words.begin(), words.end(), w);
    ids.push_back(it == words.end() ? 3 : 4 + (it - words.begin()));
  }
  ids.push_back(2);
  return ids;
}

constexpr const char* tiny_data =
    "1 the movie is good\n1 a great film\n1 the film was fun\n1 very good\n1 a fine movie\n1 great fun\n"
    "1 the movie was very great\n1 good film\n0 the movie is bad\n0 a dull film\n0 the film was boring\n"
    "0 very awful\n0 a bad movie\n0 awful and dull\n0 the movie was very boring\n0 bad film\n";

ef::models::BertConfig tiny_config() {
  ef::models::BertConfig c;
  c.vocab_size = 4 + static_cast<ef::index_t>(words.size());
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  c.pad_token_id = 0;
  c.add_pooling_layer = false;
  return c;
}

}  // namespace

TEST_CASE("sentiment: data files: labels, sentences, CRLF, bytes that are not UTF-8") {
  const auto f = train::parse_labeled_text("1 a good film\r\n0  a bad \xff film \n12\tthird class\n", "x.txt");
  REQUIRE(f.examples.size() == 3);
  CHECK(f.examples[0].label == 1);
  CHECK(f.examples[0].text == "a good film");
  CHECK(f.examples[1].text == "a bad \xff film");
  CHECK(f.examples[1].line == 2);
  CHECK(f.examples[2].label == 12);
  CHECK(f.invalid_utf8_lines == 1);
  CHECK(f.first_invalid_utf8_line == 2);
  CHECK(train::parse_labeled_text("0 \xe2\x82\xac ok\n", "x").invalid_utf8_lines == 0);
  CHECK(train::parse_labeled_text("0 \xe2\x82 cut\n", "x").invalid_utf8_lines == 1);
}

TEST_CASE("sentiment: empty and malformed lines name the file and the line") {
  CHECK(error_of("1 fine\n\n0 ok\n").starts_with("data.txt:2: empty line"));
  CHECK(error_of("1 fine\n0 ok\npositive great\n").starts_with("data.txt:3: expected a label"));
  CHECK(error_of("1\n").starts_with("data.txt:1: a label but no sentence"));
  CHECK(error_of("1   \n").starts_with("data.txt:1: a label but no sentence"));
  CHECK(error_of("1x good\n").starts_with("data.txt:1: expected a space after the label"));
  CHECK(error_of("\n\n1 a\n").find("(and 1 more bad lines, the next at data.txt:2)") != std::string::npos);
  CHECK(error_of("").starts_with("data.txt: no examples"));
}

TEST_CASE("sentiment: classification_report is laid out as scikit-learn's") {
  const std::vector<std::int64_t> y_true{0, 0, 0, 1, 1}, y_pred{0, 1, 0, 1, 1};
  // sklearn.metrics.classification_report(y_true, y_pred, target_names=["negative", "positive"])
  const std::string expected =
      "              precision    recall  f1-score   support\n"
      "\n"
      "    negative       1.00      0.67      0.80         3\n"
      "    positive       0.67      1.00      0.80         2\n"
      "\n"
      "    accuracy                           0.80         5\n"
      "   macro avg       0.83      0.83      0.80         5\n"
      "weighted avg       0.87      0.80      0.80         5\n";
  CHECK(train::classification_report(y_true, y_pred, {"negative", "positive"}) == expected);
  const auto m = train::confusion_matrix(y_true, y_pred, 2);
  CHECK(m == std::vector<std::vector<std::int64_t>>{{2, 1}, {0, 2}});
  CHECK(train::confusion_matrix_text(y_true, y_pred, {"negative", "positive"}).find("        negative         2         1\n") !=
        std::string::npos);
}

TEST_CASE("sentiment: length_bucketed batches hold every example once") {
  std::vector<train::EncodedExample> data;
  for (int i = 0; i < 37; ++i) data.push_back({std::vector<std::int64_t>(static_cast<std::size_t>(1 + (i * 7) % 11), 1), 0});
  std::vector<std::vector<std::int64_t>> batches;
  for (std::int64_t i = 0; i < 37; i += 4) {
    batches.emplace_back();
    for (std::int64_t j = i; j < std::min<std::int64_t>(37, i + 4); ++j) batches.back().push_back(j);
  }
  ef::Generator gen(7);
  const auto out = train::length_bucketed(batches, data, 4, 3, gen);
  std::multiset<std::int64_t> seen;
  for (const auto& b : out) {
    CHECK(b.size() <= 4);
    seen.insert(b.begin(), b.end());
  }
  CHECK(seen.size() == 37);
  CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 37);
}

TEST_CASE("sentiment: a tiny classifier learns, and save / load is bit-exact") {
  const auto file = train::parse_labeled_text(tiny_data, "tiny.txt");
  const auto data = train::encode_examples(file.examples, encode);
  ef::Generator gen(123);
  Model model(tiny_config(), gen);
  auto params = model.named_parameters();
  train::AdamW<float> opt(params, {.lr = 1e-2}, train::decays_by_default<float>);

  const double before = train::predict(model, data, 8, 0).mean_loss;
  std::vector<double> losses;
  std::vector<std::int64_t> order(data.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  for (int step = 0; step < 30; ++step) {
    const std::span<const std::int64_t> idx(order.data() + (step % 2) * 8, 8);
    const auto batch = train::make_batch(data, idx, 0);
    const auto r = train::train_step(model, opt, params, batch, 1e-2, 1.0);
    CHECK(r.count == 8);
    CHECK(std::isfinite(r.grad_norm));
    losses.push_back(r.loss);
  }
  const auto after = train::predict(model, data, 8, 0);
  CHECK(losses.front() > 0.5);
  CHECK(losses.back() < losses.front() * 0.5);
  CHECK(after.mean_loss < before * 0.5);
  CHECK(after.accuracy() == doctest::Approx(1.0));

  // Best-epoch snapshot and restore give back the very same values.
  const auto snap = train::snapshot_parameters(model);
  eftest::ScratchDir dir;
  train::save_classifier(model, dir / "m", {{"recipe.json", "{\"recipe\": \"test\"}\n"}});
  train::save_classifier(model, dir / "m", {{"recipe.json", "{\"recipe\": \"test\"}\n"}});  // over an old one
  CHECK(dir.entries() == std::vector<std::string>{"m"});
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir / "m")) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"config.json", "model.safetensors", "recipe.json"});

  auto loaded = ef::models::bert_from_pretrained<Model>(dir / "m");
  const auto a = model.named_parameters(), b = loaded.named_parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].name);
    CHECK(a[i].name == b[i].name);
    const auto x = a[i].data.contiguous(), y = b[i].data.contiguous();
    REQUIRE(x.numel() == y.numel());
    CHECK(std::memcmp(x.data(), y.data(), sizeof(float) * static_cast<std::size_t>(x.numel())) == 0);
  }
  const auto p1 = train::predict(model, data, 5, 0), p2 = train::predict(loaded, data, 5, 0);
  CHECK(p1.predicted == p2.predicted);
  CHECK(p1.probabilities == p2.probabilities);

  // restore_parameters puts a snapshot back exactly.
  for (auto& p : model.named_parameters()) p.data.fill_(0.5f);
  train::restore_parameters(model, snap);
  CHECK(train::snapshot_parameters(model) == snap);
  CHECK(train::predict(model, data, 5, 0).probabilities == p1.probabilities);
}
