// models/pretrained_bert.hpp and pretrained_bert_tokenizer.hpp: the tiny Hugging Face BERT directories of
// tools/reference/make_bert_fixtures.py load in one call — tests/data/bert_tiny_mlm_hf (BertForMaskedLM:
// "bert." keys, LayerNorm gamma/beta, the int64 position_ids buffer, a pooler and the NSP head, no decoder
// weight) and tests/data/bert_tiny_cls_hf (BertForSequenceClassification: weight/bias names, id2label) — with
// every parameter equal to the file's tensor and PyTorch's outputs (bert_tiny_hf_reference.json); heads the
// file lacks are initialised and reported; bad files throw io::checkpoint_error naming the file and the
// field or tensor; save_pretrained round trips.
//
// Tolerance: 1e-5 relative + 1e-5 absolute on probabilities and pooled values (float32 through 2 layers).
#include <doctest/doctest.h>

#include <functional>
#include <set>

#include <eigenformer/models/pretrained_bert_tokenizer.hpp>

#include "io/io_test_support.hpp"
#include "support/bf16.hpp"
#include "support/errors.hpp"
#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"
#include "support/paths.hpp"
#include "support/throws.hpp"

using namespace eftest;
namespace models = ef::models;
namespace io = ef::io;

namespace {

const fs::path mlm_dir = fs::path(EIGENFORMER_TEST_DATA_DIR) / "bert_tiny_mlm_hf";
const fs::path cls_dir = fs::path(EIGENFORMER_TEST_DATA_DIR) / "bert_tiny_cls_hf";

const json& hf_bert_case(const std::string& name) {
  static const json file = load_fixture("bert_tiny_hf_reference.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("bert_tiny_hf_reference.json: no case named " + name);
}

bool contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

// The file key our parameter `name` must have come from (prefix kept, gamma/beta where the file has them).
std::string key_in(const io::SafeTensorsFile& f, const std::string& name) {
  if (f.contains(name)) return name;
  if (name.ends_with("LayerNorm.weight")) return name.substr(0, name.size() - 6) + "gamma";
  if (name.ends_with("LayerNorm.bias")) return name.substr(0, name.size() - 4) + "beta";
  return name;
}

// A directory's tensors as a TensorDict (floating ones as double, the int64 buffer as itself).
io::TensorDict tensors_of(const fs::path& dir) {
  const auto f = io::SafeTensorsFile::from_file(dir / "model.safetensors");
  io::TensorDict d;
  for (const auto& name : f.names()) {
    if (io::is_floating(f.info(name).dtype)) d.emplace(name, io::AnyTensor(f.get_flat<double>(name), f.info(name).shape));
    else d.emplace(name, io::AnyTensor(f.get_flat<std::int64_t>(name), f.info(name).shape));
  }
  return d;
}

// A copy of `from`'s config.json (or `config`) with `tensors` as model.safetensors.
void write_dir(const ScratchDir& dir, const fs::path& from, const io::TensorDict& tensors, const json* config = nullptr) {
  if (config) write_bytes(dir / "config.json", config->dump(2));
  else fs::copy_file(from / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  io::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
}

std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE_TEMPLATE("bert_from_pretrained<BertForMaskedLM>: bert. keys, gamma/beta, buffers skipped, other heads reported; "
                   "PyTorch's fill-mask probabilities", T, float, double) {
  models::BertLoadReport report;
  auto model = models::bert_from_pretrained<models::BertForMaskedLM<T>>(mlm_dir, {}, &report);
  const auto& cfg = model.config();
  CHECK(cfg.vocab_size == 60);
  CHECK(cfg.hidden_size == 12);
  CHECK(cfg.num_hidden_layers == 2);
  CHECK(cfg.num_attention_heads == 3);
  CHECK(cfg.intermediate_size == 20);
  CHECK(cfg.max_position_embeddings == 16);
  CHECK(cfg.hidden_act == "gelu");
  CHECK_FALSE(cfg.classifier_dropout.has_value());  // null in the file
  CHECK(cfg.pad_token_id == std::optional<ef::index_t>(0));
  CHECK_FALSE(model.is_training());

  const auto file = io::SafeTensorsFile::from_file(mlm_dir / "model.safetensors");
  for (auto& p : model.named_parameters()) {
    INFO(p.name);
    const auto key = key_in(file, p.name);
    REQUIRE(file.contains(key));
    CHECK(p.data.to_vector() == file.get_flat<T>(key).to_vector());
  }
  CHECK(file.contains("bert.embeddings.LayerNorm.gamma"));  // the mapping was exercised
  CHECK(report.architecture == "BertForMaskedLM");
  CHECK(report.newly_initialized.empty());
  CHECK(as_set(report.skipped) == std::set<std::string>{"bert.embeddings.position_ids"});
  CHECK(as_set(report.unused) == std::set<std::string>{"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                                                        "cls.seq_relationship.weight", "cls.seq_relationship.bias"});
  CHECK(contains(report.warnings(), "were not used when initializing BertForMaskedLM"));

  const auto& c = hf_bert_case("fill_mask");
  const auto ids = to_tensor<std::int64_t, 2>(c.at("ids"));
  const auto logits = model.forward(ids);
  const auto row = logits.select(0, 0).select(0, c.at("mask_position").get<ef::index_t>()).contiguous();
  auto probs = ef::Tensor<T, 1>::empty(row.shape());
  T top = row(0), sum = 0;
  for (ef::index_t i = 0; i < row.numel(); ++i) top = std::max(top, row(i));
  for (ef::index_t i = 0; i < row.numel(); ++i) sum += probs(i) = std::exp(row(i) - top);
  for (ef::index_t i = 0; i < row.numel(); ++i) probs(i) /= sum;
  check_fixture(probs, c.at("probs"), 1e-5, 1e-5, "bert_tiny_mlm_hf fill-mask probabilities");
}

TEST_CASE("bert_from_pretrained<BertForSequenceClassification>: weight/bias names, id2label, PyTorch's padded-batch logits") {
  models::BertLoadReport report;
  auto model = models::bert_from_pretrained<models::BertForSequenceClassification<float>>(cls_dir, {}, &report);
  CHECK(model.config().num_labels == 2);
  CHECK(model.config().label(0) == "NEGATIVE");
  CHECK(model.config().label(1) == "POSITIVE");
  CHECK(model.config().label_id("POSITIVE") == 1);
  REQUIRE(model.bert.pooler.has_value());
  const auto file = io::SafeTensorsFile::from_file(cls_dir / "model.safetensors");
  for (auto& p : model.named_parameters()) {
    INFO(p.name);
    REQUIRE(file.contains(p.name));
    CHECK(p.data.to_vector() == file.get_flat<float>(p.name).to_vector());
  }
  CHECK(report.newly_initialized.empty());
  CHECK(report.unused.empty());
  CHECK(report.skipped.empty());
  CHECK(report.warnings().empty());

  const auto& c = hf_bert_case("classify");
  const auto logits = model.forward(to_tensor<std::int64_t, 2>(c.at("ids")), to_tensor<std::int64_t, 2>(c.at("attention_mask")));
  check_fixture(logits, c.at("logits"), 1e-5, 1e-5, "bert_tiny_cls_hf logits");
}

TEST_CASE("BertModel.forward with output_attentions: every layer's weights of a padded batch, as PyTorch's") {
  auto model = models::bert_from_pretrained<models::BertForSequenceClassification<float>>(cls_dir);
  const auto& c = hf_bert_case("classify");
  const auto ids = to_tensor<std::int64_t, 2>(c.at("ids"));
  const auto mask = to_tensor<std::int64_t, 2>(c.at("attention_mask"));
  const auto& expected = c.at("attentions");  // the first sentence's (1, NH, T, T) per layer
  REQUIRE(expected.size() == static_cast<std::size_t>(model.config().num_hidden_layers));
  const auto out = model.bert.forward(ids, mask, std::nullopt, /*output_attentions=*/true);
  REQUIRE(out.attentions.size() == expected.size());
  for (std::size_t l = 0; l < expected.size(); ++l) {
    CHECK(ef::shape_string(out.attentions[l].shape()) ==
          ef::shape_string(ef::Shape<4>{ids.size(0), model.config().num_attention_heads, ids.size(1), ids.size(1)}));
    // Probabilities of the same float32 computation as the logits above: the same tolerance (measured: max
    // abs 4.8e-7).
    check_fixture(out.attentions[l].narrow(0, 0, 1), expected[l], 1e-5, 1e-5,
                  "bert_tiny_cls_hf attentions, layer " + std::to_string(l));
  }
  // The rest of the output is the same with or without them; without, there are none.
  const auto plain = model.bert.forward(ids, mask);
  CHECK(plain.attentions.empty());
  // Without the weights the attention streams: the same hidden states to rounding, within the fixture tolerance.
  check_tensors_close(plain.last_hidden_state, out.last_hidden_state, 1e-5, 1e-5, "last_hidden_state without attentions");
}

TEST_CASE("bert_from_pretrained<BertModel>: the pooler is loaded when the file has one, the heads are unused") {
  models::BertLoadReport report;
  auto model = models::bert_from_pretrained<models::BertModel<float>>(mlm_dir, {}, &report);
  REQUIRE(model.pooler.has_value());
  CHECK(report.newly_initialized.empty());
  CHECK(as_set(report.unused).count("cls.predictions.bias") == 1);
  CHECK(as_set(report.unused).count("cls.seq_relationship.weight") == 1);
  const auto& c = hf_bert_case("embed");
  const auto out = model.forward(to_tensor<std::int64_t, 2>(c.at("ids")));
  check_fixture(out.pooler_output, c.at("pooler_output"), 1e-5, 1e-5, "bert_tiny_mlm_hf pooler_output");

  // A file without a pooler gives a BertModel without one (not a random pooler).
  ScratchDir dir;
  auto d = tensors_of(mlm_dir);
  d.erase("bert.pooler.dense.weight");
  d.erase("bert.pooler.dense.bias");
  write_dir(dir, mlm_dir, d);
  auto bare = models::bert_from_pretrained<models::BertModel<float>>(dir.path());
  CHECK_FALSE(bare.pooler.has_value());
}

TEST_CASE("a pre-trained checkpoint loaded as a classifier: the classifier is initialised N(0, initializer_range) and reported") {
  const auto file = io::SafeTensorsFile::from_file(mlm_dir / "model.safetensors");
  const auto config = models::bert_config_from_file(mlm_dir / "config.json");
  models::BertForSequenceClassification<double> a(config, models::no_init), b(config, models::no_init);
  ef::Generator g1(7), g2(7);
  const auto report = models::load_bert_state_dict(a, file, {}, g1);
  (void)models::load_bert_state_dict(b, file, {}, g2);
  CHECK(report.newly_initialized == std::vector<std::string>{"classifier.weight", "classifier.bias"});
  CHECK(contains(report.warnings(), "Some weights of BertForSequenceClassification were not initialized from the model "
                                    "checkpoint at " + file.source() + " and are newly initialized: ['classifier.weight', "
                                    "'classifier.bias']"));
  CHECK(as_set(report.unused).count("cls.predictions.transform.dense.weight") == 1);
  // The pooler is the file's; the classifier is drawn from the generator given (same seed, same weights).
  CHECK(a.bert.pooler->dense.weight.data.to_vector() == file.get_flat<double>("bert.pooler.dense.weight").to_vector());
  CHECK(a.classifier.weight.data.to_vector() == b.classifier.weight.data.to_vector());
  const auto w = a.classifier.weight.data.to_vector();
  double sq = 0;
  for (double v : w) sq += v * v;
  CHECK(sq > 0);
  CHECK(std::sqrt(sq / static_cast<double>(w.size())) < 0.1);  // N(0, 0.02): small, not zeros
  for (double v : a.classifier.bias->data.to_vector()) CHECK(v == 0.0);

  // The MLM head missing from the classification directory.
  models::BertLoadReport r2;
  (void)models::bert_from_pretrained<models::BertForMaskedLM<float>>(cls_dir, {}, &r2);
  CHECK(as_set(r2.newly_initialized).count("cls.predictions.bias") == 1);
  CHECK(as_set(r2.newly_initialized).count("cls.predictions.transform.LayerNorm.weight") == 1);
  CHECK(as_set(r2.unused) == std::set<std::string>{"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                                                   "classifier.weight", "classifier.bias"});
}

TEST_CASE("bert_from_pretrained: keys without the prefix, F64 tensors, a decoder weight and bias equal to their ties") {
  ScratchDir dir;
  const auto original = tensors_of(mlm_dir);
  io::TensorDict d;
  for (const auto& [k, v] : original) d.emplace(k.starts_with("bert.") ? k.substr(5) : k, v);
  d.emplace("cls.predictions.decoder.weight", original.at("bert.embeddings.word_embeddings.weight"));
  d.emplace("cls.predictions.decoder.bias", original.at("cls.predictions.bias"));
  write_dir(dir, mlm_dir, d);
  models::BertLoadReport report;
  auto bare = models::bert_from_pretrained<models::BertForMaskedLM<float>>(dir.path(), {}, &report);
  auto official = models::bert_from_pretrained<models::BertForMaskedLM<float>>(mlm_dir);
  CHECK(parameter_values(bare) == parameter_values(official));
  CHECK(as_set(report.skipped) == std::set<std::string>{"embeddings.position_ids", "cls.predictions.decoder.weight",
                                                         "cls.predictions.decoder.bias"});

  // An untied decoder weight or a second bias is refused, naming the tensors.
  auto word = original.at("bert.embeddings.word_embeddings.weight").flat<double>().clone();
  word(5) += 0.25;
  auto untied = d;
  untied.erase("cls.predictions.decoder.weight");
  untied.emplace("cls.predictions.decoder.weight", io::AnyTensor(word, {60, 12}));
  write_dir(dir, mlm_dir, untied);
  auto msg = error_of<io::checkpoint_error>([&] { (void)models::bert_from_pretrained<models::BertForMaskedLM<float>>(dir.path()); });
  CHECK(contains(msg, (dir / "model.safetensors").string() + ": tensor \"cls.predictions.decoder.weight\""));
  CHECK(contains(msg, "\"embeddings.word_embeddings.weight\""));
  CHECK(contains(msg, "element 5"));

  auto bias = original.at("cls.predictions.bias").flat<double>().clone();
  bias(0) += 1;
  auto two_biases = d;
  two_biases.erase("cls.predictions.decoder.bias");
  two_biases.emplace("cls.predictions.decoder.bias", io::AnyTensor(bias, {60}));
  write_dir(dir, mlm_dir, two_biases);
  msg = error_of<io::checkpoint_error>([&] { (void)models::bert_from_pretrained<models::BertForMaskedLM<float>>(dir.path()); });
  CHECK(contains(msg, "\"cls.predictions.decoder.bias\""));
  CHECK(contains(msg, "\"cls.predictions.bias\""));
}

TEST_CASE("bert_from_pretrained: missing, misnamed and misshapen tensors name the file and the tensors") {
  ScratchDir dir;
  const auto original = tensors_of(cls_dir);
  const std::string file = (dir / "model.safetensors").string();
  const std::string t = "bert.encoder.layer.1.attention.self.key.weight";

  auto missing = original;
  missing.erase(t);
  write_dir(dir, cls_dir, missing);
  auto msg = error_of<io::checkpoint_error>([&] { (void)models::bert_from_pretrained<models::BertForSequenceClassification<float>>(dir.path()); });
  CHECK(contains(msg, file + ": tensor \"" + t + "\" is missing"));
  INFO(msg);

  // strict = false: the tensor is reported and keeps its initial value (zeros).
  models::BertLoadReport report;
  auto lenient = models::bert_from_pretrained<models::BertForSequenceClassification<float>>(dir.path(), {.strict = false}, &report);
  CHECK(report.missing == std::vector<std::string>{t});
  CHECK(contains(report.warnings(), t));
  for (float v : lenient.bert.encoder.layer[1].attention.self.key.weight.data.to_vector()) CHECK(v == 0.0f);

  auto misnamed = missing;
  misnamed.emplace("bert.encoder.layer.1.attention.self.kee.weight", original.at(t));
  write_dir(dir, cls_dir, misnamed);
  msg = error_of<io::checkpoint_error>([&] { (void)models::bert_from_pretrained<models::BertForSequenceClassification<float>>(dir.path()); });
  CHECK(contains(msg, "\"" + t + "\" is missing"));
  CHECK(contains(msg, "unexpected tensor \"bert.encoder.layer.1.attention.self.kee.weight\""));

  auto misshapen = original;
  misshapen.erase("bert.embeddings.position_embeddings.weight");
  misshapen.emplace("bert.embeddings.position_embeddings.weight",
                    io::AnyTensor(ef::zeros<double>(ef::Shape<1>{8 * 12}), {8, 12}));
  write_dir(dir, cls_dir, misshapen);
  msg = error_of<io::checkpoint_error>([&] { (void)models::bert_from_pretrained<models::BertForSequenceClassification<float>>(dir.path()); });
  CHECK(contains(msg, file));
  CHECK(contains(msg, "\"bert.embeddings.position_embeddings.weight\""));
  CHECK(contains(msg, "[8, 12]"));

  msg = error_of<io::checkpoint_error>([&] { (void)models::bert_from_pretrained<models::BertModel<float>>(dir / "nowhere"); });
  CHECK(contains(msg, "nowhere: no such directory"));
}

TEST_CASE("bert_config_from_file: a bad config.json names the file and the field") {
  ScratchDir dir;
  const json base = json::parse(read_bytes(cls_dir / "config.json"));
  const std::string file = (dir / "config.json").string();
  auto error_with = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    write_bytes(dir / "config.json", j.dump(2));
    return error_of<io::checkpoint_error>([&] { (void)models::bert_config_from_file(dir / "config.json"); });
  };
  auto msg = error_with([](json& j) { j["hidden_act"] = "swish"; });
  CHECK(contains(msg, file + ": field \"hidden_act\""));
  CHECK(contains(msg, "\"swish\""));
  CHECK(contains(msg, "relu, gelu, gelu_new, gelu_pytorch_tanh"));
  CHECK(contains(error_with([](json& j) { j["position_embedding_type"] = "relative_key"; }),
                 file + ": field \"position_embedding_type\": got the string \"relative_key\""));
  CHECK(contains(error_with([](json& j) { j["is_decoder"] = true; }), file + ": field \"is_decoder\""));
  CHECK(contains(error_with([](json& j) { j["model_type"] = "roberta"; }), file + ": field \"model_type\""));
  CHECK(contains(error_with([](json& j) { j.erase("hidden_size"); }), file + ": field \"hidden_size\": missing"));
  CHECK(contains(error_with([](json& j) { j["num_hidden_layers"] = 2.5; }), file + ": field \"num_hidden_layers\""));
  CHECK(contains(error_with([](json& j) { j["num_labels"] = 3; }), file + ": field \"num_labels\": 3 does not agree"));
  CHECK(contains(error_with([](json& j) { j["id2label"] = {{"0", "A"}, {"2", "B"}}; }), file + ": field \"id2label\": key \"2\""));
  CHECK(contains(error_with([](json& j) { j["label2id"] = {{"NEGATIVE", 1}, {"POSITIVE", 0}}; }), file + ": field \"label2id\""));
  CHECK(contains(error_with([](json& j) { j["hidden_size"] = 13; }), file + ": BertConfig: hidden_size 13 is not divisible"));

  // Defaults and the label forms that are fine.
  auto ok = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    write_bytes(dir / "config.json", j.dump(2));
    return models::bert_config_from_file(dir / "config.json");
  };
  const auto three = ok([](json& j) {
    j.erase("id2label");
    j.erase("label2id");
    j["num_labels"] = 3;
    j["classifier_dropout"] = 0.25;
    j["pad_token_id"] = nullptr;
  });
  CHECK(three.num_labels == 3);
  CHECK(three.label(2) == "LABEL_2");
  CHECK(three.classifier_dropout == std::optional<double>(0.25));
  CHECK_FALSE(three.pad_token_id.has_value());
  const auto from_label2id = ok([](json& j) { j.erase("id2label"); });
  CHECK(from_label2id.id2label == std::vector<std::string>{"NEGATIVE", "POSITIVE"});
  const auto defaults = ok([](json& j) {
    for (const char* f : {"hidden_act", "type_vocab_size", "layer_norm_eps", "id2label", "label2id", "model_type"}) j.erase(f);
  });
  CHECK(defaults.hidden_act == "gelu");
  CHECK(defaults.type_vocab_size == 2);
  CHECK(defaults.num_labels == 2);
  CHECK(defaults.label(1) == "LABEL_1");
}

TEST_CASE_TEMPLATE("save_pretrained -> bert_from_pretrained round trips the three classes", T, float, double) {
  ScratchDir dir;
  auto clf = models::bert_from_pretrained<models::BertForSequenceClassification<T>>(cls_dir);
  models::save_pretrained(clf, dir.path());
  const json saved = json::parse(read_bytes(dir / "config.json"));
  CHECK(saved.at("architectures") == json::array({"BertForSequenceClassification"}));
  CHECK(saved.at("model_type") == "bert");
  CHECK(saved.at("id2label") == json{{"0", "NEGATIVE"}, {"1", "POSITIVE"}});
  models::BertLoadReport report;
  auto back = models::bert_from_pretrained<models::BertForSequenceClassification<T>>(dir.path(), {}, &report);
  CHECK(parameter_values(back) == parameter_values(clf));
  CHECK(back.config().id2label == clf.config().id2label);
  CHECK(report.warnings().empty());

  auto mlm = models::bert_from_pretrained<models::BertForMaskedLM<T>>(mlm_dir);
  models::save_pretrained(mlm, dir.path());
  CHECK_FALSE(io::SafeTensorsFile::from_file(dir / "model.safetensors").contains("cls.predictions.decoder.weight"));
  auto mlm_back = models::bert_from_pretrained<models::BertForMaskedLM<T>>(dir.path());
  CHECK(parameter_values(mlm_back) == parameter_values(mlm));

  auto base = models::bert_from_pretrained<models::BertModel<T>>(mlm_dir);
  models::save_pretrained(base, dir.path());
  CHECK(io::SafeTensorsFile::from_file(dir / "model.safetensors").contains("pooler.dense.weight"));  // BertModel: no prefix
  auto base_back = models::bert_from_pretrained<models::BertModel<T>>(dir.path());
  CHECK(parameter_values(base_back) == parameter_values(base));
  CHECK(dir.entries() == std::vector<std::string>{"config.json", "model.safetensors"});  // no temporary files left
}

TEST_CASE("PretrainedBert: the model with vocab.txt and tokenizer_config.json's do_lower_case") {
  auto bert = models::PretrainedBert<models::BertForMaskedLM<float>>::from_pretrained(mlm_dir);
  CHECK(bert.tokenizer.do_lower_case());
  CHECK(bert.tokenizer.vocab_size() == 60);
  CHECK(bert.report.unused.size() == 4);
  const auto& c = hf_bert_case("embed");
  auto ids = bert.tokenizer.encode("Paris is a big city .", true);  // lower-cased as the file asks
  CHECK(ids == c.at("ids").at("data").get<std::vector<std::int64_t>>());

  ScratchDir dir;
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt"}) fs::copy_file(mlm_dir / f, dir / f);
  write_bytes(dir / "tokenizer_config.json", "{\"do_lower_case\": false}");
  CHECK_FALSE(models::PretrainedBert<models::BertModel<float>>::from_pretrained(dir.path()).tokenizer.do_lower_case());
  write_bytes(dir / "tokenizer_config.json", "{\"do_lower_case\": \"yes\"}");
  const auto msg = error_of<io::checkpoint_error>([&] { (void)models::PretrainedBert<models::BertModel<float>>::from_pretrained(dir.path()); });
  CHECK(contains(msg, (dir / "tokenizer_config.json").string() + ": field \"do_lower_case\""));
  write_bytes(dir / "tokenizer_config.json", "{\"do_lower_case\": true, \"strip_accents\": false}");
  CHECK(contains(error_of<io::checkpoint_error>([&] { (void)models::bert_do_lower_case(dir.path()); }), "field \"strip_accents\""));
  write_bytes(dir / "tokenizer_config.json", "{\"do_lower_case\": true, \"strip_accents\": null, \"tokenize_chinese_chars\": true}");
  CHECK(models::bert_do_lower_case(dir.path()));
  fs::remove(dir / "tokenizer_config.json");
  CHECK(models::PretrainedBert<models::BertModel<float>>::from_pretrained(dir.path()).tokenizer.do_lower_case());
  fs::remove(dir / "vocab.txt");
  CHECK_THROWS_EXACTLY((void)models::PretrainedBert<models::BertModel<float>>::from_pretrained(dir.path()), ef::tokenizers::vocab_error);
}

// PretrainedOptions::bf16_weights for BERT: every Linear weight and the word embeddings converted to bfloat16 as
// they are read and their float values freed; a head the file lacks (the classifier of a pre-trained
// checkpoint) is drawn, then converted. The result must be the model that a float load followed by
// to_bf16_weights(FloatWeights::release) gives: the same bfloat16 bits in every copy, the same float values
// elsewhere, and so the same logits bit for bit (the same products over the same copies); and within the
// float tolerance of the model that keeps its rounded float weights (another summation order).
TEST_CASE_TEMPLATE("bert_from_pretrained: bf16_weights converts each weight as it is read, to the model to_bf16_weights makes",
                   Model, models::BertForMaskedLM<float>, models::BertForSequenceClassification<float>) {
  for (const auto& dir : {mlm_dir, cls_dir}) {
    INFO(dir.filename().string());
    ef::manual_seed(5);  // a head the file lacks is drawn from the current generator
    auto held = models::bert_from_pretrained<Model>(dir, {.bf16_weights = true});
    ef::manual_seed(5);
    auto released = models::bert_from_pretrained<Model>(dir);
    released.to_bf16_weights(ef::FloatWeights::release);
    ef::manual_seed(5);
    auto kept = models::bert_from_pretrained<Model>(dir);
    kept.to_bf16_weights(ef::FloatWeights::keep);
    CHECK_FALSE(held.is_training());
    const auto held_modules = held.named_modules(), released_modules = released.named_modules();
    REQUIRE(held_modules.size() == released_modules.size());
    std::size_t copies = 0;
    for (std::size_t i = 0; i < held_modules.size(); ++i) {
      const ef::Bf16Matrix *a = nullptr, *b = nullptr;
      if (auto* l = dynamic_cast<ef::nn::Linear<float>*>(held_modules[i].second)) {
        a = l->bf16_weight();
        b = dynamic_cast<ef::nn::Linear<float>*>(released_modules[i].second)->bf16_weight();
        CHECK(l->weight.float_released());
      } else if (auto* e = dynamic_cast<ef::nn::Embedding<float>*>(held_modules[i].second)) {
        a = e->bf16_weight();
        b = dynamic_cast<ef::nn::Embedding<float>*>(released_modules[i].second)->bf16_weight();
        if (!held_modules[i].first.ends_with("word_embeddings")) {
          CHECK(a == nullptr);  // positions and token types stay float
          continue;
        }
      } else {
        continue;
      }
      check_same_bf16_bits(a, b, held_modules[i].first);
      ++copies;
    }
    // The word embeddings, 6 Linears a layer, and the head's: the pooler and the classifier, or the transform.
    check_ran(copies, 1 + 6 * std::size_t(held.config().num_hidden_layers) + (std::is_same_v<Model, models::BertForMaskedLM<float>> ? 1 : 2),
              "bfloat16 copies");
    const auto held_params = held.named_parameters(), kept_params = kept.named_parameters();
    REQUIRE(held_params.size() == kept_params.size());
    for (std::size_t i = 0; i < held_params.size(); ++i)
      if (!held_params[i].state->float_released()) CHECK(held_params[i].data.to_vector() == kept_params[i].data.to_vector());

    const auto& c = hf_bert_case("classify");  // a padded batch
    const auto ids = to_tensor<std::int64_t, 2>(c.at("ids")), mask = to_tensor<std::int64_t, 2>(c.at("attention_mask"));
    const auto logits = held.forward(ids, mask);
    CHECK(logits.to_vector() == released.forward(ids, mask).to_vector());
    check_tensors_close(logits, kept.forward(ids, mask), 1e-5, 1e-5, "bf16_weights against to_bf16_weights(keep)");
  }
  CHECK_THROWS_WITH_AS((void)models::bert_from_pretrained<models::BertForSequenceClassification<double>>(cls_dir, {.bf16_weights = true}),
                       doctest::Contains("bf16_weights needs a float model"), std::invalid_argument);
}

// PretrainedOptions::pack_weights for BERT: each weight packed as it is read and its float values freed, but
// query, key and value, packed side by side once all three are in (a head the file lacks is drawn, then
// packed). The same logits, bit for bit, as a float load followed by pack_weights(FloatWeights::release).
// Refused with bf16_weights.
TEST_CASE_TEMPLATE("bert_from_pretrained: pack_weights holds the weights only packed, as pack_weights makes them",
                   Model, models::BertForMaskedLM<float>, models::BertForSequenceClassification<float>) {
  std::size_t dirs = 0;
  for (const auto& dir : {mlm_dir, cls_dir}) {
    INFO(dir.filename().string());
    ef::manual_seed(5);
    auto held = models::bert_from_pretrained<Model>(dir, {.pack_weights = true});
    ef::manual_seed(5);
    auto packed_after = models::bert_from_pretrained<Model>(dir);
    packed_after.pack_weights(ef::FloatWeights::release);
    CHECK_FALSE(held.is_training());
    CHECK(held.bert.encoder.layer[0].output.dense.weight.float_released() ==
          ef::backend::detail::packed_weights_supported());
    const auto ids = ef::from_vector<std::int64_t, 2>({2, 5}, {2, 7, 9, 11, 3, 2, 4, 5, 6, 3});  // 10 rows, ids below 60
    CHECK(held.forward(ids).to_vector() == packed_after.forward(ids).to_vector());
    ++dirs;
  }
  check_ran(dirs, 2, "directories");
  CHECK_THROWS_WITH_AS((void)models::bert_from_pretrained<Model>(mlm_dir, {.bf16_weights = true, .pack_weights = true}),
                       doctest::Contains("choose one"), std::invalid_argument);
}
