// The BERT family against PyTorch: tests/data/bert_tiny.json, written by tools/reference/make_bert_fixtures.py
// (Hugging Face's modeling_bert in plain torch on a tiny config: vocabulary 60, 12 channels, 3 heads, 2
// layers, intermediate 20; weights rounded to 4 decimals, so the fixture's decimals are exactly the float32
// values PyTorch computed with). Cases: BertModel on a padded batch with a sentence pair, each row alone;
// BertForMaskedLM with [MASK] probabilities and top 5; BertForSequenceClassification (3 labels, gelu_new)
// with its cross-entropy loss; the pre-LN variant without pooler (relu). For each: eval outputs, and a
// training-mode forward (dropout 0.1 everywhere, torch.manual_seed(forward_seed) before it, which our
// generator reproduces draw for draw) with its loss and every parameter's gradient.
//
// Tolerances. Both sides compute in float32 from the same float32 parameters; they differ in summation order
// (Eigen's blocking against ATen's), which over ~20 chained steps (GEMMs, LayerNorm with eps 1e-12, softmax,
// erf / tanh GELU) stays within a few ulps of O(1) values:
//   outputs and probabilities  1e-5 relative + 1e-5 absolute;
//   losses                      1e-5 relative;
//   gradients                   1e-5 relative + 2e-5 x the tensor's largest |entry| (entries that cancel to near
//                               zero carry the absolute error of their O(scale) terms);
//   the key biases' gradients   zero in exact arithmetic (see check_grads): below 1e-5 of the key weights'.
// Measured (EIGENFORMER_REPORT_ERRORS=1, GCC 12 -O1, AVX-512 Xeon): outputs max abs 3.8e-6 (logits of scale
// ~1); gradients max abs error 5.9e-6 of their tensor's scale; key-bias noise <= 4.4e-7 (ours) and 8.5e-7
// (PyTorch's) of the key-weight gradient scale. A wrong transpose, mask, LayerNorm placement, tie or dropout
// draw is off by O(0.1) or more.
#include <doctest/doctest.h>

#include <eigenformer/io/state_dict.hpp>
#include <eigenformer/models/bert.hpp>

#include "support/cases.hpp"
#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"
#include "support/parameters.hpp"

using namespace eftest;
namespace models = ef::models;

namespace {

constexpr double bert_rtol = 1e-5;
constexpr double bert_atol = 1e-5;
constexpr double bert_grad_scale = 2e-5;

const json& bert_case(const std::string& name) {
  static const json file = load_fixture("bert_tiny.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("bert_tiny.json: no case named " + name);
}

models::BertConfig config_of(const json& c) {
  const auto& j = c.at("config");
  models::BertConfig cfg;
  cfg.vocab_size = j.at("vocab_size").get<index_t>();
  cfg.hidden_size = j.at("hidden_size").get<index_t>();
  cfg.num_hidden_layers = j.at("num_hidden_layers").get<index_t>();
  cfg.num_attention_heads = j.at("num_attention_heads").get<index_t>();
  cfg.intermediate_size = j.at("intermediate_size").get<index_t>();
  cfg.hidden_act = j.at("hidden_act").get<std::string>();
  cfg.hidden_dropout_prob = j.at("hidden_dropout_prob").get<double>();
  cfg.attention_probs_dropout_prob = j.at("attention_probs_dropout_prob").get<double>();
  cfg.max_position_embeddings = j.at("max_position_embeddings").get<index_t>();
  cfg.type_vocab_size = j.at("type_vocab_size").get<index_t>();
  cfg.layer_norm_eps = j.at("layer_norm_eps").get<double>();
  cfg.pad_token_id = j.at("pad_token_id").get<index_t>();
  cfg.pre_layer_norm = j.at("pre_layer_norm").get<bool>();
  cfg.add_pooling_layer = j.at("add_pooling_layer").get<bool>();
  if (j.contains("id2label")) {
    cfg.num_labels = j.at("num_labels").get<index_t>();
    cfg.id2label.resize(static_cast<std::size_t>(cfg.num_labels));
    for (auto it = j.at("id2label").begin(); it != j.at("id2label").end(); ++it)
      cfg.id2label.at(std::stoul(it.key())) = it.value().get<std::string>();
  }
  return cfg;
}

template <typename T>
ef::Tensor<T, 2> t2(const json& t) { return to_tensor<T, 2>(t); }

ef::Tensor<std::int64_t, 2> input(const json& c, const char* name) {
  return to_tensor<std::int64_t, 2>(c.at("inputs").at(name));
}

void check_out(const auto& actual, const json& expected, const std::string& what) {
  check_fixture(actual, expected, bert_rtol, bert_atol, what);
}

void check_loss(double actual, const json& expected, const std::string& what) {
  INFO(what);
  const double e = static_cast<double>(static_cast<float>(values_of(expected).at(0)));
  CHECK(actual == doctest::Approx(e).epsilon(bert_rtol));
  if (std::getenv("EIGENFORMER_REPORT_ERRORS"))
    std::cout << "[fixture error] " << what << ": rel " << std::abs(actual - e) / std::abs(e) << "\n";
}

// Every recorded gradient against the parameter's .grad, at 1e-5 relative + 2e-5 x max |expected|.
void check_grads(ef::nn::Module<float>& m, const json& c) {
  const auto& grads = c.at("grads");
  REQUIRE(!grads.empty());
  std::size_t checked = 0;
  for (auto& p : m.named_parameters()) {
    REQUIRE_MESSAGE(grads.contains(p.name), p.name);
    REQUIRE(shape_of(grads.at(p.name)) == p.shape);
    json flat = grads.at(p.name);
    flat["shape"] = std::vector<index_t>{p.grad().numel()};
    if (p.name.ends_with("attention.self.key.bias")) {
      // Zero in exact arithmetic: the key bias adds q . b to every score of a query's row, which the softmax
      // cancels. Both sides hold only rounding noise, which is compared with the scale of the same layer's
      // key-weight gradient: within 1e-5 of it (measured: PyTorch's noise up to 8.5e-7 of it, ours 4.4e-7).
      const std::string weight = p.name.substr(0, p.name.size() - 4) + "weight";
      double ref = 0;
      for (const double e : values_of(grads.at(weight))) ref = std::max(ref, std::abs(e));
      double ours = 0, theirs = 0;
      for (const double a : p.grad().to_vector()) ours = std::max(ours, std::abs(a));
      for (const double e : values_of(flat)) theirs = std::max(theirs, std::abs(e));
      INFO(p.name << ": max |grad| " << ours << " (PyTorch " << theirs << "), key-weight gradient scale " << ref);
      CHECK(ours <= 1e-5 * ref);
      CHECK(theirs <= 1e-5 * ref);
      if (std::getenv("EIGENFORMER_REPORT_ERRORS"))
        std::cout << "[fixture zero] " << c.at("name").get<std::string>() << " d" << p.name << ": ours " << ours / ref
                  << ", PyTorch " << theirs / ref << " of the key-weight gradient scale\n";
      ++checked;
      continue;
    }
    double scale = 0;
    for (const double e : values_of(flat)) scale = std::max(scale, std::abs(e));
    check_fixture(p.grad(), flat, bert_rtol, bert_grad_scale * std::max(scale, 1e-6),
                  c.at("name").get<std::string>() + " d" + p.name);
    if (std::getenv("EIGENFORMER_REPORT_ERRORS") && scale > 0)
      std::cout << "[fixture scale] " << c.at("name").get<std::string>() << " d" << p.name << ": max abs error / scale "
                << errors_of(p.grad(), flat).max_abs / scale << "\n";
    ++checked;
  }
  CHECK(checked == grads.size());
}

}  // namespace

TEST_CASE("BertModel equals PyTorch: padded batch, sentence pair, rows alone, training gradients") {
  const auto& c = bert_case("bert_model");
  models::BertModel<float> m(config_of(c), models::no_init);
  load_params(m, c);
  const auto ids = input(c, "input_ids"), mask = input(c, "attention_mask"), types = input(c, "token_type_ids");
  m.eval();
  const auto out = m.forward(ids, mask, types);
  check_out(out.last_hidden_state, c.at("last_hidden_state"), "last_hidden_state");
  check_out(out.pooler_output, c.at("pooler_output"), "pooler_output");
  const auto lengths = c.at("inputs").at("lengths").get<std::vector<index_t>>();
  REQUIRE(lengths.size() == 3);
  for (index_t i = 0; i < 3; ++i) {
    const auto n = lengths[static_cast<std::size_t>(i)];
    const auto alone = m.forward(ids.narrow(0, i, 1).narrow(1, 0, n).contiguous(), std::nullopt,
                                 types.narrow(0, i, 1).narrow(1, 0, n).contiguous());
    const std::string key = "alone_" + std::to_string(i) + "_";
    check_out(alone.last_hidden_state, c.at(key + "last_hidden_state"), key + "last_hidden_state");
    check_out(alone.pooler_output, c.at(key + "pooler_output"), key + "pooler_output");
  }
  m.train();
  ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());
  const auto train = m.forward(ids, mask, types);
  check_out(train.last_hidden_state, c.at("train_last_hidden_state"), "train_last_hidden_state");
  check_out(train.pooler_output, c.at("train_pooler_output"), "train_pooler_output");
  const auto probe_last = to_tensor<float, 3>(c.at("probe_last"));
  const auto probe_pooled = t2<float>(c.at("probe_pooled"));
  const double loss = ef::sum(train.last_hidden_state * probe_last).item() + ef::sum(train.pooler_output * probe_pooled).item();
  check_loss(loss, c.at("loss"), "sum(last * probe_last) + sum(pooled * probe_pooled)");
  m.zero_grad();
  m.backward(probe_last, probe_pooled);
  check_grads(m, c);
}

TEST_CASE("BertForMaskedLM equals PyTorch: logits, [MASK] probabilities and top 5, gradients with the tied decoder") {
  const auto& c = bert_case("bert_mlm");
  models::BertForMaskedLM<float> m(config_of(c), models::no_init);
  load_params(m, c);
  const auto ids = input(c, "input_ids"), mask = input(c, "attention_mask");
  m.eval();
  const auto logits = m.forward(ids, mask);
  check_out(logits, c.at("logits"), "logits");
  const auto positions = c.at("mask_positions").get<std::vector<std::vector<index_t>>>();
  const auto top_ids = to_tensor<std::int64_t, 2>(c.at("top5_ids"));
  REQUIRE(!positions.empty());
  for (std::size_t k = 0; k < positions.size(); ++k) {
    const auto row = ef::softmax(logits.select(0, positions[k][0]).select(0, positions[k][1]).contiguous(), -1);  // (V)
    json expected = c.at("mask_probs");
    const auto all = values_of(expected);
    const auto v = static_cast<std::size_t>(row.numel());
    json one = {{"dtype", "float32"}, {"shape", {row.numel()}},
                {"data", std::vector<double>(all.begin() + k * v, all.begin() + (k + 1) * v)}};
    check_out(row, one, "[MASK] probabilities " + std::to_string(k));
    // The top 5 in PyTorch's order (the fixture's probabilities are more than 1e-5 apart, so rounding cannot swap them).
    std::vector<index_t> order(v);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return row(a) > row(b); });
    for (index_t j = 0; j < 5; ++j) CHECK(order[static_cast<std::size_t>(j)] == top_ids(static_cast<index_t>(k), j));
  }
  m.train();
  ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());
  const auto train_logits = m.forward(ids, mask);
  const auto probe = to_tensor<float, 3>(c.at("probe"));
  check_loss(ef::sum(train_logits * probe).item(), c.at("loss"), "sum(logits * probe)");
  m.zero_grad();
  m.backward(probe);
  check_grads(m, c);
}

TEST_CASE("BertForSequenceClassification equals PyTorch: post-LN with pooler and pre-LN without, loss and gradients") {
  for (const char* name : {"bert_seqcls", "bert_pre_ln_seqcls"}) {
    INFO(name);
    const auto& c = bert_case(name);
    const auto cfg = config_of(c);
    models::BertForSequenceClassification<float> m(cfg, models::no_init);
    load_params(m, c);
    CHECK(m.bert.pooler.has_value() == cfg.add_pooling_layer);
    const auto ids = input(c, "input_ids"), mask = input(c, "attention_mask");
    const auto types = c.at("inputs").contains("token_type_ids") ? std::optional(input(c, "token_type_ids")) : std::nullopt;
    m.eval();
    const auto logits = m.forward(ids, mask, types);
    check_out(logits, c.at("logits"), std::string(name) + " logits");
    check_out(ef::softmax(logits, -1), c.at("probs"), std::string(name) + " probabilities");
    const auto labels = to_tensor<std::int64_t, 1>(c.at("labels"));
    m.train();
    ef::manual_seed(c.at("forward_seed").get<std::uint64_t>());
    const auto train_logits = m.forward(ids, mask, types);
    check_out(train_logits, c.at("train_logits"), std::string(name) + " training logits");
    check_loss(m.loss(train_logits, labels), c.at("loss"), std::string(name) + " cross-entropy");
    m.zero_grad();
    m.backward(m.loss_backward());
    check_grads(m, c);
  }
}

namespace {

// Model with bert_tiny.json case `c`'s parameters, in eval mode, after `prepare(model)`: its logits on the
// case's inputs.
template <class Model, class Prepare>
auto bert_logits(const json& c, Prepare prepare) {
  Model m(config_of(c), models::no_init);
  load_params(m, c);
  m.eval();
  prepare(m);
  return m.forward(input(c, "input_ids"), input(c, "attention_mask"), input(c, "token_type_ids"));
}

// The bfloat16 checks of one model class on one case of bf16.json (see the test below).
template <class Model>
void check_bf16_bert(const json& b) {
  const auto& c = bert_case(b.at("model").get<std::string>());
  const std::string name = c.at("name").get<std::string>();
  const auto fp32 = bert_logits<Model>(c, [](Model&) {});
  const auto kept = bert_logits<Model>(c, [](Model& m) { m.to_bf16_weights(); });
  check_out(kept, b.at("logits"), name + ": bf16 weights kept beside the float ones");
  const auto packed = bert_logits<Model>(c, [](Model& m) {
    m.pack_weights();
    m.to_bf16_weights();  // packs the rounded weights again, q | k | v side by side included
    CHECK((m.bert.encoder.layer[0].attention.self.packed_qkv_weight() != nullptr) ==
          ef::backend::detail::packed_weights_supported());
  });
  check_out(packed, b.at("logits"), name + ": bf16 weights after pack_weights");
  const auto held = bert_logits<Model>(c, [](Model& m) {
    m.pack_weights();
    const index_t parameters = m.num_parameters();
    m.to_bf16_weights(ef::FloatWeights::release);
    CHECK(m.num_parameters() == parameters);
    CHECK(m.bert.embeddings.word_embeddings.weight.float_released());
    CHECK(m.bert.encoder.layer[1].attention.self.value.weight.float_released());
    CHECK(m.bert.encoder.layer[0].attention.self.packed_qkv_weight() == nullptr);
    CHECK_FALSE(m.bert.embeddings.position_embeddings.weight.float_released());  // these stay float
    CHECK_FALSE(m.bert.encoder.layer[0].output.dense.bias->float_released());
    m.to_bf16_weights(ef::FloatWeights::release);  // again: nothing left to do
  });
  check_out(held, b.at("logits"), name + ": bf16 weights held alone");
  const auto reference = fp32.to_vector(), rounded = kept.to_vector();
  double scale = 0, moved = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    scale = std::max(scale, std::abs(double(reference[i])));
    moved = std::max(moved, std::abs(double(rounded[i]) - double(reference[i])));
  }
  if (std::getenv("EIGENFORMER_REPORT_ERRORS"))
    std::cout << "[bf16 weights] " << name << ": logits moved by up to " << moved << " (max |logit| " << scale << ")\n";
  CHECK(moved <= 0.05 * scale);
  CHECK(moved >= 10 * bert_atol);

  // Training, saving and packing need the float values, and say so.
  Model m(config_of(c), models::no_init);
  load_params(m, c);
  m.to_bf16_weights(ef::FloatWeights::release);
  m.train();
  CHECK_THROWS_WITH_AS(m.forward(input(c, "input_ids")), doctest::Contains("held only as bfloat16"), std::logic_error);
  m.eval();
  CHECK_THROWS_WITH_AS(ef::io::state_dict(m), doctest::Contains("\"bert.embeddings.word_embeddings.weight\""),
                       ef::io::checkpoint_error);
  CHECK_THROWS_WITH_AS(m.pack_weights(), doctest::Contains("held only as bfloat16"), std::logic_error);
  CHECK(std::isnan(m.bert.encoder.layer[0].intermediate.dense.weight.data(0, 0)));  // never a plausible weight
}

}  // namespace

// bfloat16 weights (to_bf16_weights) against the "bert" cases of tests/data/bf16.json: PyTorch's run of the
// bert_mlm and bert_seqcls models above with every Linear weight and the word embeddings rounded to bfloat16,
// float32 arithmetic. Our models then compute with exactly those weights, so this file's float tolerances
// apply unchanged -- with FloatWeights::keep (products read the rounded float weights, or their packed
// copies), and with FloatWeights::release (the float weights freed; many-row products widen the bfloat16
// copies block by block, the lookup widens rows). Against the float model: each weight moves by at most 2^-9
// of itself, and about 15 products lie on the way to a logit (6 a layer, the embeddings and the head's one or
// two), so to first order the logits move by at most 15 x 2^-9 = 2.9% of their scale (max |logit|); checked at
// 5%, and at least 10x the float tolerance, or the rounding did not happen.
TEST_CASE("BERT with bfloat16 weights gives PyTorch's logits for the rounded model, kept or held alone (fixture)") {
  static const json file = load_fixture("bf16.json");
  std::size_t cases = 0;
  for (const auto& b : file.at("cases")) {
    if (b.at("kind") != "bert") continue;
    INFO(b.at("name").get<std::string>());
    if (b.at("model") == "bert_mlm") check_bf16_bert<models::BertForMaskedLM<float>>(b);
    else check_bf16_bert<models::BertForSequenceClassification<float>>(b);
    ++cases;
  }
  check_ran(cases, 2, "bert cases of bf16.json");
}

namespace {

// The packed-only checks of one model class on one bert_tiny.json case (see the test below).
template <class Model>
void check_packed_only_bert(const json& c) {
  const std::string name = c.at("name").get<std::string>();
  const auto kept = bert_logits<Model>(c, [](Model& m) { m.pack_weights(); });
  const auto held = bert_logits<Model>(c, [](Model& m) {
    const index_t parameters = m.num_parameters();
    m.pack_weights(ef::FloatWeights::release);
    CHECK(m.num_parameters() == parameters);
    CHECK(m.bert.encoder.layer[1].attention.self.value.weight.float_released());
    CHECK(m.bert.encoder.layer[0].output.dense.weight.float_released());
    CHECK(m.bert.encoder.layer[0].attention.self.packed_qkv_weight() != nullptr);
    // The masked-LM decoder's packed copy holds the word embeddings too; a classifier keeps them float.
    CHECK(m.bert.embeddings.word_embeddings.weight.float_released() ==
          std::is_same_v<Model, models::BertForMaskedLM<float>>);
    CHECK_FALSE(m.bert.embeddings.position_embeddings.weight.float_released());
    CHECK_FALSE(m.bert.encoder.layer[0].output.dense.bias->float_released());
    m.pack_weights(ef::FloatWeights::release);  // again: nothing left to do
  });
  check_out(held, c.at("logits"), name + ": weights held only packed");
  // The encoder's products have a row per token, 8 or more here: the same kernel reads the same panels, so the
  // same bits as the kept model's packed products. (A classifier's pooler and head have a row per sequence:
  // fewer than 8, which the kept model takes through the float weight's few-row kernels.)
  Model kept_model(config_of(c), models::no_init), held_model(config_of(c), models::no_init);
  load_params(kept_model, c);
  load_params(held_model, c);
  kept_model.eval();
  held_model.eval();
  kept_model.pack_weights();
  held_model.pack_weights(ef::FloatWeights::release);
  const auto ids_all = input(c, "input_ids"), mask_all = input(c, "attention_mask");
  REQUIRE(ids_all.numel() >= 8);
  const auto hidden_kept = kept_model.bert.forward(ids_all, mask_all).last_hidden_state;
  const auto hidden_held = held_model.bert.forward(ids_all, mask_all).last_hidden_state;
  CHECK(hidden_held.to_vector() == hidden_kept.to_vector());
  if (std::is_same_v<Model, models::BertForMaskedLM<float>>) CHECK(held.to_vector() == kept.to_vector());

  // Few rows (the first sequence's first 5 tokens): the packed kernel again where the kept model takes the
  // float weight's few-row kernels; the float tolerances of this file against the kept model.
  Model m(config_of(c), models::no_init), float_model(config_of(c), models::no_init);
  load_params(m, c);
  load_params(float_model, c);
  m.eval();
  float_model.eval();
  m.pack_weights(ef::FloatWeights::release);
  const auto ids = input(c, "input_ids").narrow(0, 0, 1).narrow(1, 0, 5).contiguous();
  check_tensors_close(m.forward(ids), float_model.forward(ids), bert_rtol, bert_atol, name + ": 5 tokens");

  // Training, saving and bfloat16 conversion need the float values, and say so.
  m.train();
  CHECK_THROWS_WITH_AS(m.forward(ids), doctest::Contains("held only as packed"), std::logic_error);
  m.eval();
  CHECK_THROWS_WITH_AS(ef::io::state_dict(m), doctest::Contains("held only as packed"), ef::io::checkpoint_error);
  CHECK_THROWS_WITH_AS(m.to_bf16_weights(), doctest::Contains("packed"), std::logic_error);
  CHECK(std::isnan(m.bert.encoder.layer[0].intermediate.dense.weight.data(0, 0)));  // never a plausible weight
  // The query Linear alone: its weight lives in its parent's side-by-side copy.
  const auto hidden = ef::zeros<float>({1, 3, config_of(c).hidden_size});
  CHECK_THROWS_WITH_AS(m.bert.encoder.layer[0].attention.self.query.forward(hidden), doctest::Contains("side by side"),
                       std::logic_error);

  // unpack_weights undoes it: every weight's float values back bit for bit (q, k and v out of their
  // side-by-side copy, a masked-LM model's word embeddings out of the decoder's), the float model's logits, and
  // a model that saves and trains again.
  m.unpack_weights();
  CHECK(m.bert.encoder.layer[0].attention.self.packed_qkv_weight() == nullptr);
  CHECK(m.bert.encoder.layer[0].output.dense.packed_weight() == nullptr);
  check_same_parameters(m, float_model, name + " after unpack_weights");
  CHECK(m.forward(ids).to_vector() == float_model.forward(ids).to_vector());
  CHECK_NOTHROW(ef::io::state_dict(m));
  m.train();
  CHECK_NOTHROW(m.forward(ids));
}

}  // namespace

// pack_weights(FloatWeights::release): every weight matrix held only in the packed kernel's order (the
// packed products at the float model's memory). With packed kernels the logits of the fixture's batch equal
// the model that keeps its float weights beside the packed copies, bit for bit, and PyTorch's within this
// file's tolerances; a forward of fewer than 8 rows reads the packed copies too. Where there is no packed
// kernel nothing is packed or released, which the first check covers.
TEST_CASE("BERT with weights held only packed: the packed model's logits, and what needs float values refuses") {
  if (!ef::backend::detail::packed_weights_supported()) {
    MESSAGE("skipped: no packed kernel on this CPU, so pack_weights packs nothing");
    models::BertForMaskedLM<float> m(config_of(bert_case("bert_mlm")), models::no_init);
    m.pack_weights(ef::FloatWeights::release);
    CHECK_FALSE(m.bert.encoder.layer[0].output.dense.weight.float_released());
    return;
  }
  std::size_t cases = 0;
  for (const char* name : {"bert_mlm", "bert_seqcls"}) {
    INFO(name);
    if (std::string(name) == "bert_mlm") check_packed_only_bert<models::BertForMaskedLM<float>>(bert_case(name));
    else check_packed_only_bert<models::BertForSequenceClassification<float>>(bert_case(name));
    ++cases;
  }
  check_ran(cases, 2, "bert cases");
}
