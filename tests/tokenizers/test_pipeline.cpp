// Pipelines (include/eigenformer/tokenizers/pipeline.hpp): seed 000's classifier input (listings 1.24-1.27),
// sliding windows (figures 1.246-1.247) and DataLoader, whose batches and random draws are compared with
// PyTorch 1.13's torch.utils.data.DataLoader (tests/data/dataloader_reference.json, written by
// tools/reference/tokenizers/dataloader_reference.py). Exact equality throughout: these are integers.
#include <doctest/doctest.h>

#include <eigenformer/tokenizers/char_tokenizer.hpp>
#include <eigenformer/tokenizers/gpt2.hpp>
#include <eigenformer/tokenizers/pipeline.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/cases.hpp"
#include "support/data_dir.hpp"
#include "support/errors.hpp"
#include "support/fixtures.hpp"
#include "support/paths.hpp"
#include "support/throws.hpp"

using eftest::error_of;

namespace {

namespace ef = eigenformer;
namespace tk = eigenformer::tokenizers;
using eftest::json;
using Ids = std::vector<std::int64_t>;
using Batches = std::vector<std::vector<std::int64_t>>;

// A stand-in tokenizer: one id per space-separated word, the word's length.
struct WordLengths {
  std::size_t size = 100;
  std::vector<std::int64_t> encode(std::string_view text) const {
    std::vector<std::int64_t> ids;
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find(' ', start);
      if (end == std::string_view::npos) end = text.size();
      if (end > start) ids.push_back(static_cast<std::int64_t>(end - start));
      start = end + 1;
    }
    return ids;
  }
  std::size_t vocab_size() const { return size; }
};
static_assert(tk::TextEncoder<WordLengths>);
static_assert(tk::TextEncoder<tk::GPT2Tokenizer>);
static_assert(tk::TextEncoder<tk::CharTokenizer>);

Ids iota_ids(std::int64_t n) {
  Ids v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

}  // namespace

TEST_CASE("pipeline: classifier input special ids extend the vocabulary as listing 1.25 does") {
  const auto& we = eftest::worked_examples().at("gpt2_vocab");
  const WordLengths gpt2_sized{we.at("n_vocab").get<std::size_t>()};
  const tk::ClassifierInput input(gpt2_sized, we.at("MAX_LEN").get<std::size_t>());
  CHECK(input.pad_id() == we.at("PAD_ID").get<std::int64_t>());  // 50257
  CHECK(input.cls_id() == we.at("CLS_ID").get<std::int64_t>());  // 50258
  CHECK(input.sep_id() == we.at("SEP_ID").get<std::int64_t>());  // 50259
  CHECK(input.vocab_size() == we.at("VOCAB_SIZE").get<std::size_t>());  // 50260
  CHECK(input.max_len() == 256);
}

TEST_CASE("pipeline: classifier input truncates to max_len - 2, adds [CLS]/[SEP], pads, masks (listings 1.26-1.27)") {
  const WordLengths tok;  // PAD 100, CLS 101, SEP 102
  const tk::ClassifierInput input(tok, 8);
  CHECK(input.encode("a bb ccc") == Ids{101, 1, 2, 3, 102, 100, 100, 100});
  CHECK(input.encode("") == Ids{101, 102, 100, 100, 100, 100, 100, 100});
  CHECK(input.encode("a bb ccc dddd eeeee ffffff") == Ids{101, 1, 2, 3, 4, 5, 6, 102});  // exactly full: no PAD
  CHECK(input.encode("a bb ccc dddd eeeee ffffff g hh") == Ids{101, 1, 2, 3, 4, 5, 6, 102});  // head kept
  // Four 1s then four 0s, not written as the literal Ids{1, 1, 1, 1, 0, 0, 0, 0}: GCC 12.2 targeting AVX-512
  // (-march=native on such a machine, -O2 and up) builds that literal here as eight 1s (one vpbroadcastq;
  // its SLP vectoriser, -fno-tree-slp-vectorize or clang build it right), and the check failed on a right mask.
  Ids expected_mask(8, 0);
  std::fill_n(expected_mask.begin(), 4, 1);
  CHECK(input.attention_mask(input.encode("a bb")) == expected_mask);

  const std::vector<std::string> texts{"a bb", "a bb ccc dddd eeeee ffffff g"};
  const auto batch = input.encode_batch(texts);
  REQUIRE(batch.input_ids.shape() == ef::Shape<2>{2, 8});
  REQUIRE(batch.attention_mask.shape() == ef::Shape<2>{2, 8});
  CHECK(batch.input_ids.to_vector() == Ids{101, 1, 2, 102, 100, 100, 100, 100, 101, 1, 2, 3, 4, 5, 6, 102});
  CHECK(batch.attention_mask.to_vector() == Ids{1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1});

  CHECK(tk::ClassifierInput(tok, 2).encode("a bb") == Ids{101, 102});
  CHECK(error_of<std::invalid_argument>([&] { tk::ClassifierInput(tok, 1); }) == "ClassifierInput: max_len 1 leaves no room for [CLS] and [SEP]");
}

TEST_CASE("pipeline: sliding windows, target = input shifted by one, with stride (figures 1.246-1.247)") {
  const tk::SlidingWindowDataset every(iota_ids(10), 4, 1);
  CHECK(every.size() == 6);  // starts 0..5: the last target ends at id 9
  auto [x, y] = every[5];
  CHECK(Ids(x.begin(), x.end()) == Ids{5, 6, 7, 8});
  CHECK(Ids(y.begin(), y.end()) == Ids{6, 7, 8, 9});

  CHECK(tk::SlidingWindowDataset(iota_ids(10), 4, 2).size() == 3);  // starts 0, 2, 4
  CHECK(tk::SlidingWindowDataset(iota_ids(10), 4, 4).size() == 2);  // starts 0, 4 (range(0, 10 - 4, 4))
  CHECK(tk::SlidingWindowDataset(iota_ids(10), 4, 6).size() == 1);
  CHECK(tk::SlidingWindowDataset(iota_ids(5), 4, 1).size() == 1);
  CHECK(tk::SlidingWindowDataset(iota_ids(4), 4, 1).size() == 0);  // no room for the shifted target
  CHECK(tk::SlidingWindowDataset({}, 4, 1).size() == 0);

  const tk::SlidingWindowDataset strided(iota_ids(10), 4, 2);
  const auto b = strided.batch(Ids{2, 0});
  REQUIRE(b.inputs.shape() == ef::Shape<2>{2, 4});
  CHECK(b.inputs.to_vector() == Ids{4, 5, 6, 7, 0, 1, 2, 3});
  CHECK(b.targets.to_vector() == Ids{5, 6, 7, 8, 1, 2, 3, 4});

  CHECK(error_of<std::out_of_range>([&] { strided.batch(Ids{3}); }) == "SlidingWindowDataset: window 3 is outside [0, 3)");
  CHECK(error_of<std::out_of_range>([&] { strided.batch(Ids{-1}); }) == "SlidingWindowDataset: window -1 is outside [0, 3)");
  CHECK_THROWS_EXACTLY(strided[3], std::out_of_range);
  CHECK_THROWS_EXACTLY(tk::SlidingWindowDataset(iota_ids(5), 0, 1), std::invalid_argument);
  CHECK_THROWS_EXACTLY(tk::SlidingWindowDataset(iota_ids(5), 2, 0), std::invalid_argument);
}

TEST_CASE("pipeline: make_batches and shuffled_order (torch.randperm)") {
  CHECK(tk::make_batches(iota_ids(7), 3) == Batches{{0, 1, 2}, {3, 4, 5}, {6}});
  CHECK(tk::make_batches(iota_ids(7), 3, true) == Batches{{0, 1, 2}, {3, 4, 5}});
  CHECK(tk::make_batches(iota_ids(6), 3, true) == Batches{{0, 1, 2}, {3, 4, 5}});
  CHECK(tk::make_batches(Ids{}, 3).empty());
  CHECK_THROWS_EXACTLY(tk::make_batches(iota_ids(3), 0), std::invalid_argument);
  ef::manual_seed(0);
  CHECK(tk::shuffled_order(10) == Ids{4, 1, 7, 5, 3, 9, 0, 8, 6, 2});  // torch.manual_seed(0); torch.randperm(10)
}

TEST_CASE("pipeline: DataLoader equals torch.utils.data.DataLoader batch for batch and draw for draw") {
  const json fixture = eftest::load_fixture("dataloader_reference.json");
  ef::manual_seed(123);
  std::size_t draws = 0;
  for (const auto& expected : fixture.at("int64_draws_seed123")) {
    CHECK(tk::random_int64() == expected.get<std::int64_t>());
    ++draws;
  }
  eftest::check_ran_at_least(draws, 3, "int64 draws after manual_seed(123)");  // dataloader_reference.py records 3

  std::size_t ran = 0;
  for (const json& c : fixture.at("cases")) {
    ++ran;
    INFO(c.at("name").get<std::string>());
    ef::manual_seed(c.at("seed").get<std::uint64_t>());
    std::optional<ef::Generator> own;
    if (!c.at("generator_seed").is_null()) own.emplace(c.at("generator_seed").get<std::uint64_t>());
    const tk::DataLoader loader(c.at("n").get<std::size_t>(),
                                {.batch_size = c.at("batch_size").get<std::size_t>(),
                                 .shuffle = c.at("shuffle").get<bool>(),
                                 .drop_last = c.at("drop_last").get<bool>(),
                                 .generator = own ? &*own : nullptr});
    for (const json& epoch : c.at("epochs")) {
      const auto batches = loader.epoch();
      CHECK(batches.size() == loader.num_batches());
      CHECK(batches == epoch.get<Batches>());
    }
    // The next draw from the loader's generator: the epochs consumed exactly what PyTorch's did.
    CHECK(tk::random_int64(own ? *own : ef::default_generator()) == c.at("after").get<std::int64_t>());
  }
  eftest::check_ran(ran, 9, "DataLoader cases");  // dataloader_reference.py records 9
}

TEST_CASE("pipeline: DataLoader bad arguments") {
  CHECK(error_of<std::invalid_argument>([] { tk::DataLoader(10, {.batch_size = 0}); }) == "DataLoader: batch_size must be positive");
  CHECK_THROWS_EXACTLY(tk::DataLoader(0, {.batch_size = 2, .shuffle = true}), std::invalid_argument);
  CHECK(tk::DataLoader(0, {.batch_size = 2}).epoch().empty());
}

TEST_SUITE("data") {
  TEST_CASE("pipeline: seed 000's classifier input on GPT-2 ids") {
    if (!eftest::data_dir_configured()) return;
    const std::string dir = EIGENFORMER_DATA_DIR;
    REQUIRE_MESSAGE(!dir.empty(), "EIGENFORMER_DATA_DIR is not set");
    const auto gpt2 = tk::GPT2Tokenizer::from_directory(std::filesystem::path(dir) / "gpt2");
    const tk::ClassifierInput input(gpt2);  // MAX_LEN 256
    CHECK(input.pad_id() == 50257);
    CHECK(input.vocab_size() == 50260);
    const auto ids = input.encode("Hello world");
    REQUIRE(ids.size() == 256);
    CHECK(Ids(ids.begin(), ids.begin() + 5) == Ids{50258, 15496, 995, 50259, 50257});
    CHECK(std::count(ids.begin(), ids.end(), 50257) == 252);
    const auto mask = input.attention_mask(ids);
    CHECK(std::count(mask.begin(), mask.end(), 1) == 4);

    // A long text keeps its first 254 ids between [CLS] and [SEP] and gets no padding.
    std::ifstream in(std::filesystem::path(dir) / "tinyshakespeare" / "input.txt", std::ios::binary);
    std::string text(4000, '\0');
    in.read(text.data(), 4000);
    const Ids body = gpt2.encode(text);
    REQUIRE(body.size() > 254);
    const auto long_ids = input.encode(text);
    REQUIRE(long_ids.size() == 256);
    CHECK(long_ids.front() == 50258);
    CHECK(long_ids.back() == 50259);
    CHECK(Ids(long_ids.begin() + 1, long_ids.end() - 1) == Ids(body.begin(), body.begin() + 254));
    const auto long_mask = input.attention_mask(long_ids);
    CHECK(std::count(long_mask.begin(), long_mask.end(), 1) == 256);
  }

  TEST_CASE("pipeline: sliding windows over tiny Shakespeare's characters") {
    if (!eftest::data_dir_configured()) return;
    const std::string dir = EIGENFORMER_DATA_DIR;
    REQUIRE_MESSAGE(!dir.empty(), "EIGENFORMER_DATA_DIR is not set");
    std::ifstream in(std::filesystem::path(dir) / "tinyshakespeare" / "input.txt", std::ios::binary);
    REQUIRE(in);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto chars = tk::CharTokenizer::from_text(text);
    const tk::SlidingWindowDataset windows(chars.encode(text), 64, 32);
    CHECK(windows.size() == (1115394 - 64 + 31) / 32);
    const auto b = windows.batch(Ids{0, 1});
    REQUIRE(b.inputs.shape() == ef::Shape<2>{2, 64});
    const auto inputs = b.inputs.to_vector(), targets = b.targets.to_vector();
    CHECK(chars.decode(Ids(inputs.begin(), inputs.begin() + 14)) == "First Citizen:");
    CHECK(chars.decode(Ids(targets.begin(), targets.begin() + 14)) == "irst Citizen:\n");
    CHECK(chars.decode(Ids(inputs.begin() + 64, inputs.end())) == text.substr(32, 64));
  }
}
