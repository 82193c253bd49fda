// A character-level vocabulary, as nanoGPT's shakespeare_char: the sorted distinct characters of a corpus,
// id = position. On tiny Shakespeare that is 65 characters, "\n" = 0, " " = 1, ..., "z" = 64.
//
//   auto chars = CharTokenizer::from_text(corpus);
//   chars.encode("hii there");                       // {46, 47, 47, 1, 58, 46, 43, 56, 43}
//   chars.decode(ids);
//
// Characters are Unicode code points (Python's str items), sorted by code point as Python's sorted(set(text))
// sorts them. The corpus and the encoded text must be valid UTF-8 (std::invalid_argument names the byte
// offset), and encode throws for a character outside the vocabulary (naming it and its offset): nanoGPT
// would raise KeyError there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "eigenformer/tokenizers/error.hpp"
#include "eigenformer/tokenizers/unicode.hpp"

namespace eigenformer::tokenizers {

class CharTokenizer {
 public:
  // The distinct characters of `corpus`, sorted.
  static CharTokenizer from_text(std::string_view corpus) {
    std::vector<bool> seen_ascii(128, false);
    std::vector<char32_t> chars;
    for (std::size_t i = 0; i < corpus.size();) {
      const unicode::Decoded d = decode_or_throw(corpus, i, "CharTokenizer::from_text");
      if (d.cp < 128) {
        if (!seen_ascii[d.cp]) chars.push_back(d.cp);
        seen_ascii[d.cp] = true;
      } else {
        chars.push_back(d.cp);
      }
      i += d.length;
    }
    std::sort(chars.begin(), chars.end());
    chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
    return CharTokenizer(std::move(chars));
  }

  // From an explicit character list (id = position); throws std::invalid_argument on repeats or non-scalar
  // values.
  explicit CharTokenizer(std::vector<char32_t> chars) : chars_(std::move(chars)) {
    for (std::size_t i = 0; i < chars_.size(); ++i) {
      const char32_t c = chars_[i];
      if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        throw std::invalid_argument("CharTokenizer: " + code_point_name(c) + " is not a Unicode scalar value");
      if (!ids_.emplace(c, static_cast<std::int64_t>(i)).second)
        throw std::invalid_argument("CharTokenizer: " + code_point_name(c) + " appears twice");
    }
  }

  std::size_t vocab_size() const noexcept { return chars_.size(); }
  const std::vector<char32_t>& chars() const noexcept { return chars_; }

  std::optional<std::int64_t> char_to_id(char32_t c) const {
    const auto it = ids_.find(c);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  // The character of an id, UTF-8; token_id_error when outside [0, vocab_size()).
  std::string id_to_token(std::int64_t id) const { return unicode::to_utf8(char_of(id)); }

  std::vector<std::int64_t> encode(std::string_view text) const {
    std::vector<std::int64_t> ids;
    ids.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      const unicode::Decoded d = decode_or_throw(text, i, "CharTokenizer::encode");
      const auto it = ids_.find(d.cp);
      if (it == ids_.end())
        throw std::invalid_argument("CharTokenizer::encode: " + code_point_name(d.cp) + " at byte " +
                                    std::to_string(i) + " is not in the vocabulary (" +
                                    std::to_string(chars_.size()) + " characters)");
      ids.push_back(it->second);
      i += d.length;
    }
    return ids;
  }

  std::string decode(std::span<const std::int64_t> ids) const {
    std::string out;
    out.reserve(ids.size());
    for (const std::int64_t id : ids) unicode::append_utf8(out, char_of(id));
    return out;
  }

 private:
  char32_t char_of(std::int64_t id) const {
    if (id < 0 || static_cast<std::uint64_t>(id) >= chars_.size()) throw token_id_error::outside(id, chars_.size());
    return chars_[static_cast<std::size_t>(id)];
  }

  static unicode::Decoded decode_or_throw(std::string_view s, std::size_t i, const char* where) {
    const unicode::Decoded d = unicode::decode(s, i);
    if (!d.valid) throw std::invalid_argument(std::string(where) + ": invalid UTF-8 at byte " + std::to_string(i));
    return d;
  }

  // "U+0041 'A'" (the character itself only when printable ASCII).
  static std::string code_point_name(char32_t c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
    std::string name = buf;
    if (c >= 0x20 && c < 0x7F) name += std::string(" '") + static_cast<char>(c) + "'";
    return name;
  }

  std::vector<char32_t> chars_;
  std::unordered_map<char32_t, std::int64_t> ids_;
};

}  // namespace eigenformer::tokenizers
