// Bad input to the public functions whose errors no other test triggered (tools/audit_throws.py lists the
// throw sites and which test checks each): every case checks the exact exception type and that the message
// names the operation and what was wrong (the shapes, the value, the file, the tensor). The tokenizers'
// cases are in tokenizers/test_bad_input.cpp, built only with the tokenizers.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <eigenformer/eigenformer.hpp>
#include <eigenformer/io.hpp>
#include <eigenformer/io/svg.hpp>
#include <eigenformer/models.hpp>
#include <eigenformer/models/tied_lm_head.hpp>
#include <eigenformer/train.hpp>
#include <eigenformer/train/sentiment.hpp>

#include "io/io_test_support.hpp"
#include "support/throws.hpp"

namespace ef = eigenformer;
namespace nn = eigenformer::nn;
namespace io = eigenformer::io;
namespace models = eigenformer::models;
namespace train = eigenformer::train;
namespace svg = eigenformer::io::svg;
using doctest::Contains;

namespace {

const double k_nan = std::numeric_limits<double>::quiet_NaN();
const double k_inf = std::numeric_limits<double>::infinity();

models::GPT2Config tiny_gpt2() { return {.vocab_size = 10, .n_positions = 8, .n_embd = 4, .n_layer = 1, .n_head = 2}; }

// Assigned, not designated: BertConfig has members without initialisers, which -Wextra would name.
models::BertConfig tiny_bert() {
  models::BertConfig c;
  c.vocab_size = 10;
  c.hidden_size = 4;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 8;
  c.max_position_embeddings = 8;
  return c;
}

// A file of `tensors` written to `dir`, opened for reading.
io::SafeTensorsFile saved(const eftest::ScratchDir& dir, const io::TensorDict& tensors) {
  io::save_safetensors(dir / "model.safetensors", tensors);
  return io::SafeTensorsFile::from_file(dir / "model.safetensors");
}

// A module that registers two parameters under one name: a user's mistake state_dict must catch, since
// the second would silently overwrite the first in the file.
struct TwoOfAName : nn::Module<float> {
  nn::Parameter<float, 1> a{ef::zeros<float>(ef::Shape<1>{2})}, b{ef::zeros<float>(ef::Shape<1>{3})};
  std::string type_name() const override { return "TwoOfAName"; }
  void register_members(nn::Members<float>& m) override {
    m.parameter("w", a);
    m.parameter("w", b);
  }
};

}  // namespace

TEST_CASE("bad input: tensor creation and attention name the operation and the shapes") {
  CHECK_THROWS_WITH_EXACTLY(ef::arange<float>(0.0, 1.0, k_nan), "arange: step must be a number, got nan", std::invalid_argument);

  // q (1, 2, 4) against keys of another width, values of another length, another batch.
  const auto q = ef::zeros<float>({1, 2, 4});
  CHECK_THROWS_WITH_EXACTLY(nn::scaled_dot_product_attention(q, ef::zeros<float>({1, 3, 5}), ef::zeros<float>({1, 3, 4})),
                            "scaled_dot_product_attention: query [1, 2, 4], key [1, 3, 5], value [1, 3, 4]: query and key "
                            "differ in their last dim (4 vs 5)",
                            ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(nn::scaled_dot_product_attention(q, ef::zeros<float>({1, 3, 4}), ef::zeros<float>({1, 2, 4})),
                            Contains("key and value differ in their number of tokens (3 vs 2)"), ef::shape_error);
  CHECK_THROWS_WITH_EXACTLY(nn::scaled_dot_product_attention(q, ef::zeros<float>({2, 3, 4}), ef::zeros<float>({2, 3, 4})),
                            "scaled_dot_product_attention: query [1, 2, 4], key [2, 3, 4], value [2, 3, 4]: the leading "
                            "(batch, head) dims must be equal",
                            ef::shape_error);

  // qkv (1, 2, 12) with 2 heads has head_dim 2: a cache made for head_dim 3 is refused.
  nn::LayerKVCache<float> cache(1, 2, 8, 3);
  CHECK_THROWS_WITH_EXACTLY(nn::fused_attention(ef::zeros<float>({1, 2, 12}), {.num_heads = 2}, {.cache = &cache}),
                            "fused_attention: qkv [1, 2, 12] with 2 heads needs a cache of [1, 2, capacity, 2], got "
                            "[1, 2, 8, 3]",
                            ef::shape_error);
}

TEST_CASE("bad input: layers name the layer, the argument and its value") {
  CHECK_THROWS_WITH_EXACTLY(nn::GELU<float>("exact"), "GELU: approximate must be \"none\" or \"tanh\", got \"exact\"",
                            std::invalid_argument);

  nn::SinusoidalPositionalEncoding<float> pe(8, 6);
  CHECK_THROWS_WITH_EXACTLY(pe.forward(ef::zeros<float>({2, 3, 4})),
                            "SinusoidalPositionalEncoding.forward: input [2, 3, 4] x table [8, 6]: last dims differ",
                            ef::shape_error);

  models::TiedLMHead<float> head(4, 10);
  CHECK_THROWS_WITH_EXACTLY(head.forward(ef::zeros<float>({1, 2, 3}), ef::zeros<float>({10, 4})),
                            "TiedLMHead.forward: hidden [1, 2, 3] does not end in the 4 features of the tied weight [10, 4]",
                            ef::shape_error);
}

TEST_CASE("bad input: GPT-2 configuration and generation name the field and its value") {
  auto config = tiny_gpt2();
  config.n_inner = -1;
  CHECK_THROWS_WITH_EXACTLY(config.validate(), "GPT2Config: n_inner must be >= 0 (0 = 4 * n_embd), got -1",
                            std::invalid_argument);
  config = tiny_gpt2();
  config.n_head = 0;
  CHECK_THROWS_WITH_EXACTLY(config.validate(), "GPT2Config: n_head must be positive, got 0", std::invalid_argument);

  const models::GPT2LMHeadModel<float> model(tiny_gpt2());
  const std::vector<std::int64_t> prompt{1, 2};
  models::GenerationConfig g;
  g.do_sample = true;
  g.top_k = -1;
  CHECK_THROWS_WITH_EXACTLY(models::generate(model, prompt, g), "generate: top_k must be >= 0 (0 disables it), got -1",
                            std::invalid_argument);
  g.top_k = 0;
  g.top_p = 1.5;
  CHECK_THROWS_WITH_EXACTLY(models::generate(model, prompt, g), "generate: top_p must be between 0 and 1, got 1.500000",
                            std::invalid_argument);
  g.top_p = k_nan;
  CHECK_THROWS_WITH_EXACTLY(models::generate(model, prompt, g), Contains("generate: top_p must be between 0 and 1"),
                            std::invalid_argument);

  CHECK_THROWS_WITH_EXACTLY(models::top_tokens(ef::zeros<float>(ef::Shape<1>{5}), -1), "top_tokens: k must be >= 0, got -1",
                            std::invalid_argument);
}

TEST_CASE("bad input: config.json fields of the wrong JSON type name the file, the field and the type") {
  auto j = models::gpt2_config_to_json(tiny_gpt2());
  j["activation_function"] = 3;
  CHECK_THROWS_WITH_EXACTLY(models::gpt2_config_from_json(j, "dir/config.json"),
                            "dir/config.json: field \"activation_function\": expected a string, got the number 3",
                            io::checkpoint_error);
  j = models::gpt2_config_to_json(tiny_gpt2());
  j["scale_attn_weights"] = "yes";
  CHECK_THROWS_WITH_EXACTLY(models::gpt2_config_from_json(j, "dir/config.json"),
                            "dir/config.json: field \"scale_attn_weights\": expected true or false, got the string \"yes\"",
                            io::checkpoint_error);

  // A directory where config.json should be a file.
  eftest::ScratchDir dir;
  std::filesystem::create_directory(dir / "config.json");
  CHECK_THROWS_WITH_EXACTLY(models::gpt2_config_from_file(dir / "config.json"),
                            (dir / "config.json").string() + ": not a regular file", io::checkpoint_error);
}

TEST_CASE("bad input: a tied head that cannot be tied names the file and both tensors") {
  eftest::ScratchDir dir;
  const std::string file = (dir / "model.safetensors").string();

  // GPT-2: lm_head.weight without the token embeddings it is tied to, or of a dtype that holds no weights.
  models::GPT2LMHeadModel<float> gpt2(tiny_gpt2());
  CHECK_THROWS_WITH_EXACTLY(models::load_gpt2_state_dict(gpt2, saved(dir, {{"lm_head.weight", ef::zeros<float>({10, 4})}})),
                            file + ": tensor \"lm_head.weight\" is present but \"wte.weight\" is not (the head is tied to it)",
                            io::checkpoint_error);
  CHECK_THROWS_WITH_EXACTLY(
      models::load_gpt2_state_dict(gpt2, saved(dir, {{"lm_head.weight", ef::zeros<std::int64_t>({10, 4})},
                                                     {"wte.weight", ef::zeros<float>({10, 4})}})),
      file + ": tensor \"lm_head.weight\" has dtype I64, not a floating dtype", io::checkpoint_error);

  // BERT's masked-LM decoder bias is tied to cls.predictions.bias: missing, of another shape, not floating.
  models::BertForMaskedLM<float> bert(tiny_bert());
  const std::string what = file + ": tensor \"cls.predictions.decoder.bias\" ";
  CHECK_THROWS_WITH_EXACTLY(
      models::load_bert_state_dict(bert, saved(dir, {{"cls.predictions.decoder.bias", ef::zeros<float>({10})}})),
      what + "is present but \"cls.predictions.bias\" is not (the decoder's bias is cls.predictions.bias)",
      io::checkpoint_error);
  CHECK_THROWS_WITH_EXACTLY(
      models::load_bert_state_dict(bert, saved(dir, {{"cls.predictions.decoder.bias", ef::zeros<float>({11})},
                                                     {"cls.predictions.bias", ef::zeros<float>({10})}})),
      what + "has shape [11] but \"cls.predictions.bias\" has [10] (the decoder's bias is cls.predictions.bias)",
      io::checkpoint_error);
  CHECK_THROWS_WITH_EXACTLY(
      models::load_bert_state_dict(bert, saved(dir, {{"cls.predictions.decoder.bias", ef::zeros<std::int64_t>({10})},
                                                     {"cls.predictions.bias", ef::zeros<float>({10})}})),
      what + "or \"cls.predictions.bias\" has a dtype that is not floating", io::checkpoint_error);
}

TEST_CASE("bad input: checkpoint files and tensors name the file, the tensor and the numbers") {
  CHECK_THROWS_WITH_EXACTLY(io::SafeTensorsFile::from_file("/dev/null"), "/dev/null: cannot read: not a regular file",
                            io::checkpoint_error);

  CHECK_THROWS_WITH_EXACTLY(io::AnyTensor(ef::zeros<float>(ef::Shape<1>{5}), {2, 3}),
                            "AnyTensor: 5 elements do not fill shape [2, 3]", io::checkpoint_error);
  const io::AnyTensor floats(ef::zeros<float>({2, 3}));
  CHECK_THROWS_WITH_EXACTLY(floats.flat<std::int64_t>("tensor \"w\""),
                            Contains("tensor \"w\" has dtype F32; it cannot be read as"), io::checkpoint_error);

  TwoOfAName m;
  CHECK_THROWS_WITH_EXACTLY(io::state_dict(m), "state_dict: two entries are named \"w\"", io::checkpoint_error);
}

TEST_CASE("bad input: pictures name the picture and the option") {
  auto add = [](auto picture) {
    svg::Figure f;
    f.add(std::move(picture));
  };
  CHECK_THROWS_WITH_EXACTLY(add(svg::Heatmap{.rows = 1, .cols = 2, .values = {1, 2}, .options = {.vmax = k_inf}}),
                            "heatmap: vmin and vmax must be finite", svg::plot_error);
  CHECK_THROWS_WITH_EXACTLY(add(svg::Heatmap{.rows = 1, .cols = 2, .values = {1, 2}, .options = {.vmin = k_nan}}),
                            "heatmap: vmin and vmax must be finite", svg::plot_error);
  CHECK_THROWS_WITH_EXACTLY(
      add(svg::LineChart{.title = "loss", .series = {{.name = "train", .x = {1}, .y = {1}}}, .ymin = -k_inf}),
      "line chart \"loss\": ymin and ymax must be finite", svg::plot_error);
  CHECK_THROWS_WITH_EXACTLY(svg::Figure("", 0), "figure: columns must be at least 1", svg::plot_error);

  // A directory opens as a file on POSIX but cannot be read.
  eftest::ScratchDir dir;
  CHECK_THROWS_WITH_EXACTLY(svg::CsvLog::read(dir.path()), dir.path().string() + ": read error", svg::plot_error);
}

TEST_CASE("bad input: the sentiment trainer's helpers name the argument; a directory is not a data file") {
  eftest::ScratchDir dir;
  CHECK_THROWS_WITH_EXACTLY(train::read_labeled_file(dir.path()), dir.path().string() + ": is a directory, not a data file",
                            train::data_error);

  const std::vector<std::int64_t> three{0, 1, 2}, two{0, 1}, bad{0, 3, 1};
  CHECK_THROWS_WITH_EXACTLY(train::confusion_matrix(three, two, 3), "confusion_matrix: y_true and y_pred differ in length",
                            std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(train::confusion_matrix(three, bad, 3), "confusion_matrix: class out of range at 1",
                            std::out_of_range);

  nn::Linear<float> lin(2, 3);
  CHECK_THROWS_WITH_EXACTLY(train::restore_parameters(lin, std::vector<std::vector<float>>{{1}}),
                            "restore_parameters: the snapshot is of another model", std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(train::restore_parameters(lin, std::vector<std::vector<float>>{{1, 2}, {3}}),
                            "restore_parameters: weight differs in size from the snapshot", std::invalid_argument);

  auto config = tiny_bert();
  config.num_labels = 2;
  models::BertForSequenceClassification<float> model(config);
  const std::vector<train::EncodedExample> data;
  CHECK_THROWS_WITH_EXACTLY(train::ClassifierTrainer<float>(model, data, 0, {.epochs = 0}),
                            "ClassifierTrainer: epochs must be at least 1", std::invalid_argument);
}
