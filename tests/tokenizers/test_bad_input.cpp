// Bad input to the tokenizers, the data pipeline and the character-level trainer whose errors no other test
// triggered (tools/audit_throws.py): exact exception types, messages that name the file, line and column,
// the argument or the field. The library's other bad-input cases are in tests/test_bad_input.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <eigenformer/tokenizers.hpp>
#include <eigenformer/train/char_lm.hpp>

#include "io/io_test_support.hpp"
#include "support/throws.hpp"

namespace tk = eigenformer::tokenizers;
namespace train = eigenformer::train;
using doctest::Contains;

TEST_CASE("bad input: a malformed encoder.json names the file, line, column and the fault") {
  eftest::ScratchDir dir;
  const auto encoder = dir / "encoder.json";
  const auto merges = dir / "vocab.bpe";
  eftest::write_bytes(merges, "#version: 0.2\n");
  auto error_for = [&](const std::string& text) {
    eftest::write_bytes(encoder, text);
    return eftest::error_of<tk::vocab_error>([&] { (void)tk::GPT2Tokenizer::from_files(encoder, merges); });
  };
  const std::string at = encoder.string() + ":";
  CHECK(error_for("{\"a\": 0} x") == at + "1: column 10: unexpected text after the JSON object");
  CHECK(error_for("{\"\\u12G4\": 0}") == at + "1: column 7: bad hex digit in \\u escape");
  CHECK(error_for("{\n\"abc") == at + "2: column 5: unterminated string");
  CHECK(error_for("{\"a\tb\": 0}") == at + "1: column 4: control character in a string");
  CHECK(error_for("{\"a\\") == at + "1: column 4: unterminated escape");
  CHECK(error_for("{\"\\udc00\": 0}") == at + "1: column 3: lone low surrogate");
  CHECK(error_for("{\"\\q\": 0}") == at + "1: column 3: unknown escape \\q");
  CHECK(error_for("{}") == encoder.string() + ": empty vocabulary");
  CHECK(error_for(" {} ") == encoder.string() + ": empty vocabulary");

  // A directory where the file should be.
  std::filesystem::create_directory(dir / "vocab.json");
  CHECK_THROWS_WITH_EXACTLY(tk::GPT2Tokenizer::from_files(dir / "vocab.json", merges),
                            (dir / "vocab.json").string() + ": not a regular file", tk::vocab_error);
}

TEST_CASE("bad input: a BERT vocabulary without a special token names the token; a directory is not a vocabulary") {
  const std::vector<std::string> specials{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const auto& missing : specials) {
    std::string text = "the\n";
    for (const auto& s : specials)
      if (s != missing) text += s + "\n";
    CHECK_THROWS_WITH_EXACTLY(tk::BertTokenizer::from_string(text, true, "vocab.txt"),
                              "vocab.txt: no " + missing +
                                  " token (a BERT vocabulary defines [PAD], [UNK], [CLS], [SEP] and [MASK])",
                              tk::vocab_error);
  }
  // Reading a directory as a stream throws std::ios_base::failure on POSIX: refused first, by name.
  eftest::ScratchDir dir;
  CHECK_THROWS_WITH_EXACTLY(tk::BertTokenizer::from_file(dir.path()),
                            dir.path().string() + ": is a directory, not a vocabulary file", tk::vocab_error);
}

TEST_CASE("bad input: BPE training, batching and data loading name the option") {
  CHECK_THROWS_WITH_EXACTLY(tk::BpeTrainer({.min_count = 0}), "BpeTrainer: min_count must be at least 1",
                            std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(tk::DataLoader(0, {.shuffle = true}),
                            "DataLoader: shuffle needs a non-empty dataset (PyTorch's RandomSampler refuses num_samples=0)",
                            std::invalid_argument);
  CHECK_THROWS_WITH_EXACTLY(tk::DataLoader(3, {.batch_size = 0}), "DataLoader: batch_size must be positive",
                            std::invalid_argument);
}

TEST_CASE("bad input: CharLMConfig names the first bad field; sample refuses an empty prompt") {
  auto error_with = [](auto edit) {
    train::CharLMConfig c;
    edit(c);
    return eftest::error_of<std::invalid_argument>([&] { c.validate(); });
  };
  CHECK(error_with([](auto& c) { c.n_layer = 0; }) == "CharLMConfig: n_layer, n_head and n_embd must be positive");
  CHECK(error_with([](auto& c) { c.n_head = 3; }) == "CharLMConfig: n_embd 128 is not divisible by n_head 3");
  CHECK(error_with([](auto& c) { c.batch_size = 0; }) == "CharLMConfig: block_size and batch_size must be positive");
  CHECK(error_with([](auto& c) { c.dropout = 1; }) == "CharLMConfig: dropout must be in [0, 1)");
  CHECK(error_with([](auto& c) { c.min_lr = 2 * c.lr; }) == "CharLMConfig: need lr > 0 and 0 <= min_lr <= lr");
  CHECK(error_with([](auto& c) { c.warmup = c.iters; }) ==
        "CharLMConfig: need warmup >= 0 and iters > warmup (iters is also the lr decay length)");
  CHECK(error_with([](auto& c) { c.beta2 = 1; }) == "CharLMConfig: betas must be in [0, 1)");
  CHECK(error_with([](auto& c) { c.grad_clip = -1; }) == "CharLMConfig: weight_decay and grad_clip must be >= 0");

  const train::CharLMTrainer<float> trainer({.n_layer = 1, .n_head = 1, .n_embd = 4, .block_size = 4, .batch_size = 1},
                                            tk::CharTokenizer::from_text("abc"));
  CHECK_THROWS_WITH_EXACTLY(trainer.sample("", 3, 1.0, 0, 1), "sample: the prompt must not be empty", std::invalid_argument);

  eftest::ScratchDir dir;
  std::filesystem::create_directory(dir / "trainer.json");
  CHECK_THROWS_WITH_EXACTLY(train::CharLMTrainer<float>::load(dir.path()),
                            (dir / "trainer.json").string() + ": is a directory (not a checkpoint written by --save?)",
                            eigenformer::io::checkpoint_error);
}
