// models/pretrained.hpp: a Hugging Face GPT-2 directory (tests/data/gpt2_tiny_hf, written by
// tools/reference/make_gpt2_hf_fixtures.py in the official layout: keys without "transformer.", the
// attn.bias / attn.masked_bias buffers, no lm_head.weight, a config.json with fields to ignore) loads in one
// call and gives PyTorch's logits; save_pretrained -> gpt2_from_pretrained round trips bit for bit; bad
// directories throw io::checkpoint_error naming the file and the field or tensor.
//
// Tolerance: that of test_gpt2.cpp for the same computation (1e-5 relative + 1e-5 absolute on the logits,
// the float32 rounding of ~25 chained steps). Measured (EIGENFORMER_REPORT_ERRORS=1): max abs 2.1e-6 (float),
// 1.9e-6 (double: the fixture's own float32 rounding) at a logit scale of 5.8.
#include <doctest/doctest.h>

#include <bit>
#include <functional>
#include <map>

#include <eigenformer/models/generation.hpp>
#include <eigenformer/models/pretrained.hpp>

#include "io/io_test_support.hpp"
#include "support/bf16.hpp"
#include "support/cases.hpp"
#include "support/errors.hpp"
#include "support/gradcheck.hpp"
#include "support/nn_fixtures.hpp"
#include "support/paths.hpp"

using namespace eftest;
namespace models = ef::models;
namespace io = ef::io;

namespace {

const fs::path tiny_dir = fs::path(EIGENFORMER_TEST_DATA_DIR) / "gpt2_tiny_hf";

const json& hf_case(const std::string& name) {
  static const json file = load_fixture("gpt2_tiny_hf_reference.json");
  for (const auto& c : file.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("gpt2_tiny_hf_reference.json: no case named " + name);
}

// The tiny checkpoint's tensors as a TensorDict (float), to write altered copies.
io::TensorDict tiny_tensors() {
  const auto f = io::SafeTensorsFile::from_file(tiny_dir / "model.safetensors");
  io::TensorDict d;
  for (const auto& name : f.names()) d.emplace(name, io::AnyTensor(f.get_flat<float>(name), f.info(name).shape));
  return d;
}

// A copy of the tiny directory's config.json (optionally edited) with `tensors` as model.safetensors.
void write_dir(const ScratchDir& dir, const io::TensorDict& tensors, const json* config = nullptr) {
  if (config) write_bytes(dir / "config.json", config->dump(2));
  else fs::copy_file(tiny_dir / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  io::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
}

json tiny_config() { return json::parse(read_bytes(tiny_dir / "config.json")); }

}  // namespace

TEST_CASE_TEMPLATE("gpt2_from_pretrained: the official layout (no prefix, mask buffers, tied head) gives PyTorch's logits", T,
                   float, double) {
  auto model = models::gpt2_from_pretrained<T>(tiny_dir);
  const auto& c = hf_case("logits");
  const auto& cfg = model.config();
  CHECK(cfg.vocab_size == c.at("config").at("vocab_size").get<index_t>());
  CHECK(cfg.n_positions == 16);
  CHECK(cfg.n_embd == 8);
  CHECK(cfg.n_layer == 2);
  CHECK(cfg.n_head == 2);
  CHECK(cfg.n_inner == 0);
  CHECK(cfg.activation_function == "gelu_new");
  CHECK(cfg.layer_norm_epsilon == 1e-5);
  CHECK_FALSE(model.is_training());  // eval mode, as transformers' from_pretrained

  // Every parameter holds the file's value exactly (F32 -> T is exact).
  const auto file = io::SafeTensorsFile::from_file(tiny_dir / "model.safetensors");
  for (auto& p : model.named_parameters()) {
    const auto key = p.name.substr(std::string("transformer.").size());
    INFO(p.name);
    REQUIRE(file.contains(key));
    CHECK(p.data.to_vector() == file.get_flat<T>(key).to_vector());
  }

  const auto logits = model.forward(to_tensor<std::int64_t, 2>(c.at("input_ids")));
  check_fixture(logits, c.at("logits"), 1e-5, 1e-5, std::string("gpt2_tiny_hf logits") +
                                                       (std::is_same_v<T, float> ? " [float]" : " [double]"));

  // The next-token table of the CLI (`gpt2 --show-top 3` after "the cat").
  const auto& nt = hf_case("next_token");
  const auto table = models::next_token_table(model, nt.at("ids").get<std::vector<std::int64_t>>(), 3);
  REQUIRE(table.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(table[i].id == nt.at("top")[i].at("id").get<std::int64_t>());
    CHECK(table[i].probability == doctest::Approx(nt.at("top")[i].at("probability").get<double>()).epsilon(1e-5));
  }

  // forward(ids, &attentions): every block's attention weights (1, NH, T, T), what `gpt2 --svg` draws, at
  // the logits' tolerance (the same float32 computation, probabilities of scale 1). Measured: max abs 1.6e-7.
  const auto& at = hf_case("attentions");
  const auto& expected = at.at("attentions");
  REQUIRE(expected.size() == static_cast<std::size_t>(cfg.n_layer));
  std::vector<ef::Tensor<T, 4>> attentions;
  const auto ids = at.at("ids").get<std::vector<std::int64_t>>();
  const auto with = model.forward(ids, &attentions);
  REQUIRE(attentions.size() == expected.size());
  for (std::size_t l = 0; l < expected.size(); ++l)
    check_fixture(attentions[l], expected[l], 1e-5, 1e-5, "gpt2_tiny_hf attentions, layer " + std::to_string(l));
  // Without the weights the attention streams: the same logits to rounding, within the fixture tolerance.
  check_tensors_close(model.forward(ids), with, 1e-5, 1e-5, "forward without attentions");
}

TEST_CASE("gpt2_from_pretrained: keys with the \"transformer.\" prefix, F64 tensors, an lm_head.weight equal to wte") {
  ScratchDir dir;
  const auto file = io::SafeTensorsFile::from_file(tiny_dir / "model.safetensors");
  io::TensorDict d;
  for (const auto& name : file.names()) {
    // F64 in the file: loads into float rounded (exactly here, the values are float32's).
    d.emplace("transformer." + name, io::AnyTensor(file.get_flat<double>(name), file.info(name).shape));
  }
  d.emplace("lm_head.weight", io::AnyTensor(file.get_flat<double>("wte.weight"), file.info("wte.weight").shape));
  write_dir(dir, d);
  auto prefixed = models::gpt2_from_pretrained<float>(dir.path());
  auto official = models::gpt2_from_pretrained<float>(tiny_dir);
  CHECK(parameter_values(prefixed) == parameter_values(official));

  // A head that differs from wte by one element is refused, naming the tensor and where.
  auto bad = d;
  auto head = file.get_flat<double>("wte.weight");
  head(13) += 0.5;
  bad.erase("lm_head.weight");
  bad.emplace("lm_head.weight", io::AnyTensor(head, file.info("wte.weight").shape));
  write_dir(dir, bad);
  const auto msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
  CHECK(msg.find((dir / "model.safetensors").string()) != std::string::npos);
  CHECK(msg.find("\"lm_head.weight\"") != std::string::npos);
  CHECK(msg.find("\"transformer.wte.weight\"") != std::string::npos);
  CHECK(msg.find("[1, 5]") != std::string::npos);  // element 13 of rows of 8
  INFO(msg);
}

TEST_CASE_TEMPLATE("save_pretrained -> gpt2_from_pretrained round trips bit for bit", T, float, double) {
  auto model = models::gpt2_from_pretrained<T>(tiny_dir);
  // Perturb every parameter so the round trip is not of the file's own float32 values.
  for (auto& p : model.named_parameters())
    for (index_t i = 0; i < p.data.numel(); ++i) p.data(i) = p.data(i) * T(1.0001) + T(1e-7) * static_cast<T>(i);
  ScratchDir dir;
  models::save_pretrained(model, dir / "out");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "out")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"config.json", "model.safetensors"});  // no temporary left

  // transformers' GPT2LMHeadModel.save_pretrained names: prefixed, no buffers, no lm_head (tied).
  const auto saved = io::SafeTensorsFile::from_file(dir / "out" / "model.safetensors");
  CHECK(saved.contains("transformer.wte.weight"));
  CHECK(saved.contains("transformer.h.1.mlp.c_proj.weight"));
  CHECK_FALSE(saved.contains("lm_head.weight"));
  CHECK(saved.info("transformer.h.0.attn.c_attn.weight").shape == std::vector<index_t>{8, 24});  // (in, out)
  CHECK(saved.info("transformer.wte.weight").dtype == (std::is_same_v<T, float> ? io::Dtype::F32 : io::Dtype::F64));
  CHECK(saved.metadata().at("format") == "pt");
  const auto config = json::parse(read_bytes(dir / "out" / "config.json"));
  CHECK(config.at("model_type") == "gpt2");
  CHECK(config.at("architectures") == json::array({"GPT2LMHeadModel"}));
  CHECK(config.at("n_inner").is_null());

  auto loaded = models::gpt2_from_pretrained<T>(dir / "out");
  CHECK(parameter_values(loaded) == parameter_values(model));
  const auto& a = loaded.config();
  const auto& b = model.config();
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.n_positions == b.n_positions);
  CHECK(a.n_embd == b.n_embd);
  CHECK(a.n_layer == b.n_layer);
  CHECK(a.n_head == b.n_head);
  CHECK(a.n_inner == b.n_inner);
  CHECK(a.activation_function == b.activation_function);
  CHECK(a.resid_pdrop == b.resid_pdrop);
  CHECK(a.embd_pdrop == b.embd_pdrop);
  CHECK(a.attn_pdrop == b.attn_pdrop);
  CHECK(a.layer_norm_epsilon == b.layer_norm_epsilon);
  CHECK(a.initializer_range == b.initializer_range);
  const std::vector<std::int64_t> ids{3, 268, 261, 7};
  CHECK(loaded.forward(ids).to_vector() == model.forward(ids).to_vector());

  // Saving again over the directory writes the same bytes (deterministic, atomic replace).
  const auto first = read_bytes(dir / "out" / "model.safetensors");
  const auto first_config = read_bytes(dir / "out" / "config.json");
  models::save_pretrained(loaded, dir / "out");
  CHECK(read_bytes(dir / "out" / "model.safetensors") == first);
  CHECK(read_bytes(dir / "out" / "config.json") == first_config);
}

TEST_CASE("gpt2_from_pretrained: wrong shapes, missing and unexpected tensors name the file and the keys") {
  ScratchDir dir;
  const std::string weights = (dir / "model.safetensors").string();

  SUBCASE("a transposed Conv1D weight") {
    auto d = tiny_tensors();
    d.erase("h.0.attn.c_attn.weight");
    d.emplace("h.0.attn.c_attn.weight", io::AnyTensor(ef::zeros<float>(ef::Shape<2>{24, 8})));
    write_dir(dir, d);
    const auto msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
    INFO(msg);
    CHECK(msg.find(weights) == 0);
    CHECK(msg.find("\"h.0.attn.c_attn.weight\"") != std::string::npos);
    CHECK(msg.find("[24, 8]") != std::string::npos);
    CHECK(msg.find("[8, 24]") != std::string::npos);
  }
  SUBCASE("a vocabulary size that disagrees with config.json") {
    auto config = tiny_config();
    config["vocab_size"] = 300;
    write_dir(dir, tiny_tensors(), &config);
    const auto msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
    INFO(msg);
    CHECK(msg.find("\"wte.weight\"") != std::string::npos);
    CHECK(msg.find("[270, 8]") != std::string::npos);
  }
  SUBCASE("missing and unexpected tensors, strict; skipped when not strict") {
    auto d = tiny_tensors();
    d.erase("ln_f.bias");
    d.erase("h.1.mlp.c_fc.weight");
    d.emplace("h.1.extra.weight", io::AnyTensor(ef::zeros<float>(ef::Shape<1>{3})));
    write_dir(dir, d);
    const auto msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
    INFO(msg);
    CHECK(msg.find(weights) == 0);
    CHECK(msg.find("2 missing keys") != std::string::npos);
    CHECK(msg.find("\"ln_f.bias\"") != std::string::npos);
    CHECK(msg.find("\"h.1.mlp.c_fc.weight\"") != std::string::npos);
    CHECK(msg.find("1 unexpected key: \"h.1.extra.weight\"") != std::string::npos);
    CHECK(msg.find("attn.bias\"") == std::string::npos);  // the buffers are not reported

    models::PretrainedOptions lax;
    lax.strict = false;
    auto m = models::gpt2_from_pretrained<float>(dir.path(), lax);
    CHECK(m.transformer.ln_f.bias->data.to_vector() == std::vector<float>(8, 0.0f));  // kept its initial value
    auto designated = models::gpt2_from_pretrained<float>(dir.path(), {.strict = false});
    CHECK(parameter_values(designated) == parameter_values(m));
  }
  SUBCASE("no model.safetensors") {
    fs::copy_file(tiny_dir / "config.json", dir / "config.json");
    const auto msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
    CHECK(msg.find(weights + ": no such file") == 0);
  }
  SUBCASE("not a directory") {
    const auto msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir / "nowhere"); });
    CHECK(msg.find("no such directory") != std::string::npos);
  }
}

TEST_CASE("gpt2_from_pretrained: a bad config.json names the file and the field") {
  ScratchDir dir;
  const std::string config_path = (dir / "config.json").string();
  const auto tensors = tiny_tensors();
  const auto error_with = [&](const std::function<void(json&)>& edit) {
    auto config = tiny_config();
    edit(config);
    write_dir(dir, tensors, &config);
    return error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
  };
  const auto check = [&](const std::string& msg, const std::string& field) {
    INFO(msg);
    CHECK(msg.find(config_path) == 0);
    CHECK(msg.find(field) != std::string::npos);
  };
  check(error_with([](json& c) { c.erase("n_head"); }), "field \"n_head\": missing");
  check(error_with([](json& c) { c["n_embd"] = 8.5; }), "field \"n_embd\": expected a positive integer, got the number 8.5");
  check(error_with([](json& c) { c["n_layer"] = -2; }), "field \"n_layer\": expected a positive integer");
  check(error_with([](json& c) { c["vocab_size"] = "270"; }), "field \"vocab_size\"");
  check(error_with([](json& c) { c["activation_function"] = "swish"; }), "field \"activation_function\"");
  check(error_with([](json& c) { c["activation_function"] = "swish"; }), "gelu_new");  // lists the accepted names
  check(error_with([](json& c) { c["layer_norm_epsilon"] = "small"; }), "field \"layer_norm_epsilon\": expected a number");
  check(error_with([](json& c) { c["model_type"] = "bert"; }), "field \"model_type\"");
  check(error_with([](json& c) { c["scale_attn_weights"] = false; }), "field \"scale_attn_weights\"");
  check(error_with([](json& c) { c["scale_attn_by_inverse_layer_idx"] = true; }), "field \"scale_attn_by_inverse_layer_idx\"");
  check(error_with([](json& c) { c["n_head"] = 3; }), "n_embd 8 is not divisible by n_head 3");
  check(error_with([](json& c) { c.erase("n_positions"); c.erase("n_ctx"); }), "field \"n_positions\": missing");

  // Unknown fields are ignored; n_ctx stands in for a missing n_positions (older configs).
  auto config = tiny_config();
  config.erase("n_positions");
  config["something_new"] = {{"nested", true}};
  write_dir(dir, tensors, &config);
  CHECK(models::gpt2_from_pretrained<float>(dir.path()).config().n_positions == 16);

  // Not JSON at all, and not an object.
  write_bytes(dir / "config.json", "{\"n_embd\": 8,");
  auto msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
  CHECK(msg.find(config_path + ": not valid JSON") == 0);
  write_bytes(dir / "config.json", "[1, 2]");
  msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
  CHECK(msg.find(config_path + ": expected a JSON object") == 0);
  fs::remove(dir / "config.json");
  msg = error_of<io::checkpoint_error>([&] { (void)models::gpt2_from_pretrained<float>(dir.path()); });
  CHECK(msg.find(config_path + ": no such file") == 0);
}

TEST_CASE("gpt2_from_pretrained: a BF16 checkpoint (with a BF16 lm_head.weight equal to wte) converts to float and double") {
  // Every tensor of the tiny file truncated to bfloat16 (the top 16 bits of each float32), written by hand:
  // eigenformer's writer only writes F32 / F64.
  const auto file = io::SafeTensorsFile::from_file(tiny_dir / "model.safetensors");
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  std::map<std::string, std::vector<float>> expected;
  auto add = [&](const std::string& key, const std::string& source) {
    const auto values = file.get_flat<float>(source).to_vector();
    const std::size_t begin = data.size();
    for (const float v : values) {
      const auto bits = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
      data += static_cast<char>(bits & 0xff);
      data += static_cast<char>(bits >> 8);
      expected[key].push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16));
    }
    header[key] = {{"dtype", "BF16"}, {"shape", file.info(source).shape}, {"data_offsets", {begin, data.size()}}};
  };
  for (const auto& name : file.names()) add(name, name);
  add("lm_head.weight", "wte.weight");
  ScratchDir dir;
  fs::copy_file(tiny_dir / "config.json", dir / "config.json");
  write_bytes(dir / "model.safetensors", safetensors_bytes(header.dump(), data));

  auto f = models::gpt2_from_pretrained<float>(dir.path());
  auto d = models::gpt2_from_pretrained<double>(dir.path());
  for (auto& p : f.named_parameters()) {
    INFO(p.name);
    CHECK(p.data.to_vector() == expected.at(p.name.substr(std::string("transformer.").size())));
  }
  for (auto& p : d.named_parameters()) {
    const auto& e = expected.at(p.name.substr(std::string("transformer.").size()));
    CHECK(p.data.to_vector() == std::vector<double>(e.begin(), e.end()));
  }
}

TEST_CASE("gpt2_from_pretrained: dropout draws from the current generator; load_gpt2_state_dict loads in place") {
  // Training-mode forwards under equally seeded GeneratorGuards draw the same dropout masks (equal logits,
  // exactly: the same operations on the same values); another seed gives other masks.
  auto m1 = models::gpt2_from_pretrained<float>(tiny_dir);
  auto m3 = models::gpt2_from_pretrained<float>(tiny_dir);
  const std::vector<std::int64_t> ids = {1, 2, 3, 4};
  m1.train();
  m3.train();
  auto forward_with_seed = [&](const models::GPT2LMHeadModel<float>& m, std::uint64_t seed) {
    ef::Generator g(seed);
    ef::GeneratorGuard guard(g);
    return m.forward(ids).to_vector();
  };
  const auto a = forward_with_seed(m1, 7), b = forward_with_seed(m1, 7), c = forward_with_seed(m3, 8);
  CHECK(a == b);
  CHECK(a != c);

  // The weights of an open file into an existing model: its parameters keep their storage.
  const float* wte_storage = m3.transformer.wte.weight.data.data();
  auto zeroed = models::GPT2LMHeadModel<float>(models::gpt2_config_from_file(tiny_dir / "config.json"), models::no_init);
  models::load_gpt2_state_dict(zeroed, io::SafeTensorsFile::from_file(tiny_dir / "model.safetensors"));
  models::load_gpt2_state_dict(m3, io::SafeTensorsFile::from_file(tiny_dir / "model.safetensors"));
  CHECK(m3.transformer.wte.weight.data.data() == wte_storage);
  CHECK(parameter_values(zeroed) == parameter_values(m3));
  CHECK(parameter_values(zeroed) == parameter_values(m1));
}

// PretrainedOptions::bf16_weights: every Conv1D weight and wte converted to bfloat16 as it is read and its
// float values freed (what keeps `gpt2 --dtype bf16`'s peak near the bfloat16 model). The result must be the
// model that a float load followed by to_bf16_weights gives: the same bfloat16 bits in every copy, the same
// float values elsewhere, logits within the file's float tolerance (the many-row products widen the copies
// block by block, the float model reads its rounded float weights: another summation order), a one-token
// step bit for bit (both stream the same copies through the same kernel), and the attention weights that
// `gpt2 --svg` draws.
TEST_CASE("gpt2_from_pretrained: bf16_weights converts each weight as it is read, to the model to_bf16_weights makes") {
  auto held = models::gpt2_from_pretrained<float>(tiny_dir, {.bf16_weights = true});
  auto kept = models::gpt2_from_pretrained<float>(tiny_dir);
  kept.to_bf16_weights(ef::FloatWeights::keep);
  CHECK_FALSE(held.is_training());
  std::size_t copies = 0;
  const auto same_bits = [&](const ef::Bf16Matrix* a, const ef::Bf16Matrix* b, const std::string& what) {
    check_same_bf16_bits(a, b, what);
    ++copies;
  };
  same_bits(held.transformer.wte.bf16_weight(), kept.transformer.wte.bf16_weight(), "wte");
  for (std::size_t l = 0; l < held.transformer.h.size(); ++l) {
    auto &h = held.transformer.h[l], &k = kept.transformer.h[l];
    same_bits(h.attn.c_attn.bf16_weight(), k.attn.c_attn.bf16_weight(), "c_attn " + std::to_string(l));
    same_bits(h.attn.c_proj.bf16_weight(), k.attn.c_proj.bf16_weight(), "attn.c_proj " + std::to_string(l));
    same_bits(h.mlp.c_fc.bf16_weight(), k.mlp.c_fc.bf16_weight(), "c_fc " + std::to_string(l));
    same_bits(h.mlp.c_proj.bf16_weight(), k.mlp.c_proj.bf16_weight(), "mlp.c_proj " + std::to_string(l));
    CHECK(h.mlp.c_fc.weight.float_released());
  }
  check_ran(copies, 1 + 4 * held.transformer.h.size(), "bfloat16 copies");
  CHECK(held.transformer.wte.weight.float_released());
  // Everything else loaded as float, value for value.
  CHECK(held.transformer.wpe.weight.data.to_vector() == kept.transformer.wpe.weight.data.to_vector());
  CHECK(held.transformer.h[1].attn.c_attn.bias.data.to_vector() == kept.transformer.h[1].attn.c_attn.bias.data.to_vector());
  CHECK(held.transformer.ln_f.weight->data.to_vector() == kept.transformer.ln_f.weight->data.to_vector());

  const auto& at = hf_case("attentions");
  const auto ids = at.at("ids").get<std::vector<std::int64_t>>();
  std::vector<ef::Tensor<float, 4>> held_attentions, kept_attentions;
  check_tensors_close(held.forward(ids, &held_attentions), kept.forward(ids, &kept_attentions), 1e-5, 1e-5,
                      "bf16_weights against to_bf16_weights, logits");
  REQUIRE(held_attentions.size() == kept_attentions.size());
  for (std::size_t l = 0; l < held_attentions.size(); ++l)
    check_tensors_close(held_attentions[l], kept_attentions[l], 1e-5, 1e-5, "attentions, layer " + std::to_string(l));
  const std::vector<std::int64_t> one{ids.at(0)};
  CHECK(held.forward(one).to_vector() == kept.forward(one).to_vector());

  CHECK_THROWS_WITH_AS(models::gpt2_from_pretrained<double>(tiny_dir, {.bf16_weights = true}),
                       doctest::Contains("bf16_weights needs a float model"), std::invalid_argument);
}

// PretrainedOptions::pack_weights: every Conv1D weight packed as it is read and its float values freed, wte
// with the tied head's packed copy, which its lookups then read. The result must be the model that a float
// load followed by pack_weights(FloatWeights::release) gives: the same logits and attention weights bit for bit
// (the same kernel over the same panels), one-token steps too. With bf16_weights, or for a double model, it
// is refused.
TEST_CASE("gpt2_from_pretrained: pack_weights packs each weight as it is read, to the model pack_weights makes") {
  auto held = models::gpt2_from_pretrained<float>(tiny_dir, {.pack_weights = true});
  auto packed_after = models::gpt2_from_pretrained<float>(tiny_dir);
  packed_after.pack_weights(ef::FloatWeights::release);
  CHECK_FALSE(held.is_training());
  if (ef::backend::detail::packed_weights_supported()) {
    CHECK(held.transformer.wte.weight.float_released());
    CHECK(held.transformer.h[0].mlp.c_fc.weight.float_released());
    REQUIRE(held.transformer.h[0].mlp.c_fc.packed_weight() != nullptr);
  } else {
    MESSAGE("no packed kernel on this CPU: nothing is packed or released");
    CHECK_FALSE(held.transformer.wte.weight.float_released());
  }
  CHECK(held.transformer.wpe.weight.data.to_vector() == packed_after.transformer.wpe.weight.data.to_vector());
  const auto& at = hf_case("attentions");
  const auto ids = at.at("ids").get<std::vector<std::int64_t>>();
  std::vector<ef::Tensor<float, 4>> held_attentions, after_attentions;
  CHECK(held.forward(ids, &held_attentions).to_vector() == packed_after.forward(ids, &after_attentions).to_vector());
  REQUIRE(held_attentions.size() == after_attentions.size());
  std::size_t layers = 0;
  for (std::size_t l = 0; l < held_attentions.size(); ++l, ++layers)
    CHECK(held_attentions[l].to_vector() == after_attentions[l].to_vector());
  check_ran_at_least(layers, 1, "attention layers");
  const std::vector<std::int64_t> one{ids.at(0)};
  CHECK(held.forward(one).to_vector() == packed_after.forward(one).to_vector());

  CHECK_THROWS_WITH_AS(models::gpt2_from_pretrained<float>(tiny_dir, {.bf16_weights = true, .pack_weights = true}),
                       doctest::Contains("choose one"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(models::gpt2_from_pretrained<double>(tiny_dir, {.pack_weights = true}),
                       doctest::Contains("pack_weights needs a float model"), std::invalid_argument);
}
