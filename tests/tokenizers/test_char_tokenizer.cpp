// CharTokenizer (include/eigenformer/tokenizers/char_tokenizer.hpp): nanoGPT's shakespeare_char vocabulary.
// The tiny Shakespeare numbers (65 characters, "hii there" -> 46 47 47 1 58 46 43 56 43, 1,115,394 ids)
// are what nanoGPT's data/shakespeare_char/prepare.py computes with sorted(set(text)); they were rechecked
// with Python on ../shared/data.
#include <doctest/doctest.h>

#include <eigenformer/tokenizers/char_tokenizer.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "support/data_dir.hpp"
#include "support/errors.hpp"
#include "support/paths.hpp"
#include "support/throws.hpp"

using eftest::error_of;

namespace {

namespace tk = eigenformer::tokenizers;
using Ids = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("char tokenizer: sorted distinct code points, encode and decode") {
  const auto tok = tk::CharTokenizer::from_text("hello world");
  CHECK(tok.vocab_size() == 8);
  CHECK(tok.chars() == std::vector<char32_t>{' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w'});
  CHECK(tok.encode("hello") == Ids{3, 2, 4, 4, 5});
  CHECK(tok.decode(Ids{7, 5, 6, 4, 1}) == "world");
  CHECK(tok.decode(tok.encode("hello world")) == "hello world");
  CHECK(tok.encode("") == Ids{});
  CHECK(tok.id_to_token(0) == " ");
  CHECK(tok.char_to_id('w') == 7);
  CHECK_FALSE(tok.char_to_id('x').has_value());

  // Code points, sorted by value (as Python sorts str): 'a' < 'é' (U+00E9) < '€' (U+20AC) < '😀'.
  const auto u = tk::CharTokenizer::from_text("€é😀aé");
  CHECK(u.vocab_size() == 4);
  CHECK(u.chars() == std::vector<char32_t>{U'a', U'é', U'€', U'😀'});
  CHECK(u.encode("é😀") == Ids{1, 3});
  CHECK(u.decode(Ids{2, 0}) == "€a");
}

TEST_CASE("char tokenizer: bad input throws naming the character, byte or id") {
  const auto tok = tk::CharTokenizer::from_text("abc");
  CHECK(error_of<std::invalid_argument>([&] { tok.encode("abx"); }) ==
        "CharTokenizer::encode: U+0078 'x' at byte 2 is not in the vocabulary (3 characters)");
  CHECK(error_of<std::invalid_argument>([&] { tok.encode("a\xE2\x82\xAC"); }) ==
        "CharTokenizer::encode: U+20AC at byte 1 is not in the vocabulary (3 characters)");
  CHECK(error_of<std::invalid_argument>([&] { tok.encode("ab\xFF"); }) == "CharTokenizer::encode: invalid UTF-8 at byte 2");
  CHECK(error_of<std::invalid_argument>([&] { tk::CharTokenizer::from_text("ok\xC3"); }) == "CharTokenizer::from_text: invalid UTF-8 at byte 2");
  CHECK(error_of<tk::token_id_error>([&] { tok.decode(Ids{0, 3}); }) == "id 3 is outside the vocabulary (size 3)");
  CHECK(error_of<tk::token_id_error>([&] { tok.decode(Ids{-2}); }) == "id -2 is outside the vocabulary (size 3)");
  CHECK_THROWS_EXACTLY(tok.id_to_token(5), tk::token_id_error);
  CHECK(error_of<std::invalid_argument>([] { tk::CharTokenizer(std::vector<char32_t>{'a', 'b', 'a'}); }) ==
        "CharTokenizer: U+0061 'a' appears twice");
  CHECK(error_of<std::invalid_argument>([] { tk::CharTokenizer(std::vector<char32_t>{0xD800}); }) ==
        "CharTokenizer: U+D800 is not a Unicode scalar value");
}

TEST_SUITE("data") {
  TEST_CASE("char tokenizer: tiny Shakespeare as nanoGPT's shakespeare_char") {
    if (!eftest::data_dir_configured()) return;
    const std::string dir = EIGENFORMER_DATA_DIR;
    REQUIRE_MESSAGE(!dir.empty(), "EIGENFORMER_DATA_DIR is not set");
    const auto path = std::filesystem::path(dir) / "tinyshakespeare" / "input.txt";
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in, path.string() << " is missing");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto tok = tk::CharTokenizer::from_text(text);
    CHECK(tok.vocab_size() == 65);
    CHECK(tok.decode([&] {
      Ids all(65);
      for (std::int64_t i = 0; i < 65; ++i) all[static_cast<std::size_t>(i)] = i;
      return all;
    }()) == "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
    CHECK(tok.encode("hii there") == Ids{46, 47, 47, 1, 58, 46, 43, 56, 43});
    const auto ids = tok.encode(text);
    CHECK(ids.size() == 1115394);
    CHECK(Ids(ids.begin(), ids.begin() + 20) ==
          Ids{18, 47, 56, 57, 58, 1, 15, 47, 58, 47, 64, 43, 52, 10, 0, 14, 43, 44, 53, 56});
    CHECK(tok.decode(ids) == text);
  }
}
