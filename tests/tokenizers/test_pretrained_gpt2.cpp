// models/pretrained_gpt2.hpp: model + tokenizer from one Hugging Face directory (tests/data/gpt2_tiny_hf,
// whose vocab.json + merges.txt hold the 256 byte tokens, 13 merges and <|endoftext|>). Here rather than in
// tests/models because it needs eigenformer::tokenizers (this directory is left out without it).
#include <doctest/doctest.h>

#include <eigenformer/models/generation.hpp>
#include <eigenformer/models/pretrained_gpt2.hpp>
#include <string>
#include <vector>

#include "io/io_test_support.hpp"
#include "support/errors.hpp"
#include "support/fixtures.hpp"
#include "support/paths.hpp"

using namespace eftest;
namespace models = ef::models;

namespace {
const fs::path tiny_gpt2_dir = fs::path(EIGENFORMER_TEST_DATA_DIR) / "gpt2_tiny_hf";
}

TEST_CASE("PretrainedGPT2::from_pretrained: the model and its vocab.json + merges.txt tokenizer in one call") {
  auto gpt2 = models::PretrainedGPT2<float>::from_pretrained(tiny_gpt2_dir);
  CHECK(gpt2.tokenizer.vocab_size() == 270);
  CHECK(gpt2.tokenizer.eot_id() == 269);
  CHECK(gpt2.model.config().vocab_size == 270);

  // The prompt of the reference "next_token" case, tokenised as make_gpt2_hf_fixtures.py did by hand.
  static const json file = load_fixture("gpt2_tiny_hf_reference.json");
  const auto& nt = file.at("cases").at(1);
  REQUIRE(nt.at("name") == "next_token");
  const auto ids = gpt2.tokenizer.encode(nt.at("prompt").get<std::string>());
  CHECK(ids == nt.at("ids").get<std::vector<std::int64_t>>());
  CHECK(gpt2.tokenizer.tokenize("the cat sat on the mat") ==
        std::vector<std::string>{"the", "Ġcat", "Ġsat", "Ġon", "Ġthe", "Ġmat"});
  const auto table = models::next_token_table(gpt2.model, ids, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(table[i].id == nt.at("top")[i].at("id").get<std::int64_t>());
    CHECK(gpt2.tokenizer.id_to_token(table[i].id) == nt.at("top")[i].at("token").get<std::string>());
  }
}

TEST_CASE("PretrainedGPT2::from_pretrained: a tokenizer larger than the model's vocabulary is refused") {
  ScratchDir dir;
  for (const char* f : {"model.safetensors", "vocab.json", "merges.txt"}) fs::copy_file(tiny_gpt2_dir / f, dir / f);
  // A model of 260 embeddings: the file's wte must match, so write a config and a cut-down checkpoint.
  auto config = json::parse(read_bytes(tiny_gpt2_dir / "config.json"));
  config["vocab_size"] = 260;
  write_bytes(dir / "config.json", config.dump());
  const auto src = ef::io::SafeTensorsFile::from_file(tiny_gpt2_dir / "model.safetensors");
  ef::io::TensorDict d;
  for (const auto& name : src.names()) {
    auto t = src.get_flat<float>(name);
    auto shape = src.info(name).shape;
    if (name == "wte.weight") {
      t = t.narrow(0, 0, 260 * 8).contiguous();
      shape[0] = 260;
    }
    d.emplace(name, ef::io::AnyTensor(t, shape));
  }
  ef::io::save_safetensors(dir / "model.safetensors", d);
  const auto msg = error_of<ef::io::checkpoint_error>([&] { (void)models::PretrainedGPT2<float>::from_pretrained(dir.path()); });
  INFO(msg);
  CHECK(msg.find("the tokenizer has 270 tokens but config.json's vocab_size is 260") != std::string::npos);
  CHECK(msg.find(dir.path().string()) == 0);
}
