// GPT-2's byte-level BPE tokenizer: text -> ids exactly as OpenAI's GPT-2 encoder and tiktoken's "gpt2"
// encoding, and back.
//
//   auto tok = GPT2Tokenizer::from_directory("../shared/data/gpt2");   // encoder.json + vocab.bpe
//   tok.encode("Hello world<|endoftext|>")     -> {15496, 995, 50256}
//   tok.tokenize("Hello world")                -> {"Hello", "Ġworld"}   (GPT-2's byte-to-unicode spelling)
//   tok.decode(ids)                            -> the original bytes
//
// The algorithm (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners" §2.2, and
// OpenAI's released encoder):
//   1. Pre-tokenisation splits the text with the pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      here a hand-written scanner over code points (pretokenize() below), with the Unicode letter and
//      number categories of utf8proc and \s = the White_Space property, which is what tiktoken's Rust regex
//      engine matches (JavaScript's \s differs on U+0085 and U+FEFF; js-tiktoken follows JavaScript).
//      Bytes that are not well-formed UTF-8 act as [^\s\p{L}\p{N}] characters, one per ill-formed subpart.
//   2. Each piece is a byte string. If it is a token, that token is the result (tiktoken's shortcut);
//      otherwise it starts as one token per byte and the adjacent pair whose concatenation was merged
//      earliest in vocab.bpe is merged, leftmost first among equals, until no pair is a token. "Whose
//      concatenation" makes this tiktoken's rule: a pair (x, y) also merges when x + y is a token made by
//      a different split (vocab.bpe lists "ab c", the text yields "a" "bc"); the merge list's rank of a
//      token is its line in vocab.bpe. For GPT-2's files this equals rank-by-id, which tiktoken uses.
//   3. Token ids come from encoder.json; bytes are spelled as printable code points (bytes_to_unicode:
//      printable Latin-1 bytes stand for themselves, the other 68 bytes map to U+0100.. in byte order).
//
// `encode` treats "<|endoftext|>" in the text as the special token (id 50256), like tiktoken's
// encode(text, allowed_special="all"); `encode_ordinary` encodes it as plain text. `decode` returns the raw
// bytes (std::string), so decode(encode(x)) == x for every byte string x, valid UTF-8 or not.
//
// Errors: a missing or malformed file throws vocab_error naming the file and the line (and column in
// encoder.json); an id outside the vocabulary throws token_id_error naming the id and the vocabulary size.
//
// Thread safety: a GPT2Tokenizer is immutable after loading; every const member function may be called
// from several threads at once. The merge cache (BPE results of pieces that are not tokens) is per call of
// encode/encode_ordinary/tokenize, so there is no shared mutable state and no lock: each call starts cold.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <queue>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "eigenformer/tokenizers/error.hpp"
#include "eigenformer/tokenizers/unicode.hpp"

namespace eigenformer::tokenizers {

namespace detail::gpt2 {

// ---------------------------------------------------------------------------------------------------
// GPT-2's byte <-> unicode spelling
// ---------------------------------------------------------------------------------------------------

// The code point that spells byte b in encoder.json / vocab.bpe: b itself for the printable bytes
// '!'..'~', 0xA1..0xAC and 0xAE..0xFF; the others (0x00-0x20, 0x7F-0xA0, 0xAD) get 0x100, 0x101, ... in
// increasing byte order (so ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
struct ByteSpelling {
  char32_t byte_to_cp[256];
  std::int16_t cp_to_byte[324];  // -1: not a byte's spelling

  constexpr ByteSpelling() : byte_to_cp{}, cp_to_byte{} {
    for (auto& v : cp_to_byte) v = -1;
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<std::int16_t>(b);
    }
  }
};
inline constexpr ByteSpelling byte_spelling{};

// Spelling (UTF-8 text of byte-spelling code points) -> raw bytes; nullopt when a code point is not a
// byte's spelling or the text is not UTF-8.
inline std::optional<std::string> spelling_to_bytes(std::string_view spelling) {
  std::string out;
  out.reserve(spelling.size());
  for (std::size_t i = 0; i < spelling.size();) {
    const auto d = unicode::decode(spelling, i);
    if (!d.valid || d.cp >= 324 || byte_spelling.cp_to_byte[d.cp] < 0) return std::nullopt;
    out += static_cast<char>(byte_spelling.cp_to_byte[d.cp]);
    i += d.length;
  }
  return out;
}

inline std::string bytes_to_spelling(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) unicode::append_utf8(out, byte_spelling.byte_to_cp[static_cast<unsigned char>(c)]);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Pre-tokenisation
// ---------------------------------------------------------------------------------------------------

enum class CharClass : std::uint8_t { letter, number, space, other };

// Classes of the ASCII bytes: letters, digits, White_Space (\t \n \v \f \r and ' '), everything else.
struct AsciiClasses {
  CharClass of[128];
  constexpr AsciiClasses() : of{} {
    for (int c = 0; c < 128; ++c) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) of[c] = CharClass::letter;
      else if (c >= '0' && c <= '9') of[c] = CharClass::number;
      else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) of[c] = CharClass::space;
      else of[c] = CharClass::other;
    }
  }
};
inline constexpr AsciiClasses ascii_classes{};

struct Classified {
  CharClass cls;
  std::uint32_t length;  // bytes
};

// The class of the code point (or ill-formed subpart, class `other`) at byte i < text.size().
inline Classified classify(std::string_view text, std::size_t i) noexcept {
  const auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) return {ascii_classes.of[b], 1};
  const auto d = unicode::decode(text, i);
  if (!d.valid) return {CharClass::other, d.length};
  if (unicode::is_white_space(d.cp)) return {CharClass::space, d.length};
  switch (unicode::category(d.cp)) {
    case unicode::Category::Lu:
    case unicode::Category::Ll:
    case unicode::Category::Lt:
    case unicode::Category::Lm:
    case unicode::Category::Lo:
      return {CharClass::letter, d.length};
    case unicode::Category::Nd:
    case unicode::Category::Nl:
    case unicode::Category::No:
      return {CharClass::number, d.length};
    default:
      return {CharClass::other, d.length};
  }
}

// End of the run of class `cls` that starts at byte i.
inline std::size_t run_end(std::string_view text, std::size_t i, CharClass cls) noexcept {
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      if (ascii_classes.of[b] != cls) break;
      ++i;
      continue;
    }
    const auto c = classify(text, i);
    if (c.cls != cls) break;
    i += c.length;
  }
  return i;
}

// Length of the piece that the GPT-2 pattern matches at byte i < text.size(). Alternatives in the
// pattern's order; the first that matches wins (a regex alternation is ordered, not longest-match).
inline std::size_t next_piece(std::string_view text, std::size_t i) noexcept {
  const std::size_t n = text.size();
  const char c = text[i];
  // 's 't 're 've 'm 'll 'd (ASCII apostrophe, lower case only)
  if (c == '\'' && i + 1 < n) {
    const char c1 = text[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 < n) {
      const char c2 = text[i + 2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    }
  }
  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+  with the optional space
  if (c == ' ' && i + 1 < n) {
    const auto next = classify(text, i + 1);
    if (next.cls != CharClass::space) return run_end(text, i + 1 + next.length, next.cls) - i;
  }
  const auto here = classify(text, i);
  if (here.cls != CharClass::space) return run_end(text, i + here.length, here.cls) - i;
  // \s+(?!\S) | \s+ : a whitespace run; when a non-space follows, the run gives up its last code point
  // (which then starts the next piece, e.g. as the optional space of " ?\p{L}+"), unless that would
  // leave the match empty.
  std::size_t last = i, j = i;
  while (j < n) {
    const auto k = classify(text, j);
    if (k.cls != CharClass::space) break;
    last = j;
    j += k.length;
  }
  if (j == n || last == i) return j - i;
  return last - i;
}

// ---------------------------------------------------------------------------------------------------
// Hash tables: byte strings -> id, (left id, right id) -> (rank, merged id)
// ---------------------------------------------------------------------------------------------------

inline std::uint64_t mix(std::uint64_t h) noexcept {
  h ^= h >> 31;
  h *= 0x7fb5d329728ea185ull;
  h ^= h >> 27;
  h *= 0x81dadef4bc2dd44dull;
  h ^= h >> 33;
  return h;
}

inline std::uint64_t hash_bytes(const char* p, std::size_t n) noexcept {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ w);
    p += 8;
    n -= 8;
  }
  std::uint64_t w = 0;
  std::memcpy(&w, p, n);
  return mix(h ^ w ^ (static_cast<std::uint64_t>(n) << 56));
}

// Open addressing, linear probing; the keys live in the tokenizer's byte arena.
class BytesTable {
 public:
  void build(const std::string& arena, const std::vector<std::uint32_t>& offsets,
             const std::vector<std::uint32_t>& lengths) {
    arena_ = &arena;
    std::size_t capacity = 16;
    while (capacity < offsets.size() * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (std::size_t id = 0; id < offsets.size(); ++id) {
      std::size_t s = hash_bytes(arena.data() + offsets[id], lengths[id]) & mask_;
      while (slots_[s].id >= 0) s = (s + 1) & mask_;
      slots_[s] = Slot{offsets[id], lengths[id], static_cast<std::int32_t>(id)};
    }
  }
  // The id of exactly these bytes, or -1.
  std::int32_t find(std::string_view key) const noexcept {
    std::size_t s = hash_bytes(key.data(), key.size()) & mask_;
    while (true) {
      const Slot& slot = slots_[s];
      if (slot.id < 0) return -1;
      if (slot.length == key.size() && std::memcmp(arena_->data() + slot.offset, key.data(), key.size()) == 0)
        return slot.id;
      s = (s + 1) & mask_;
    }
  }
  // Re-point at the arena after the owning tokenizer moved or was copied.
  void rebind(const std::string& arena) noexcept { arena_ = &arena; }

 private:
  struct Slot {
    std::uint32_t offset = 0, length = 0;
    std::int32_t id = -1;
  };
  const std::string* arena_ = nullptr;
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
};

struct Merge {
  std::int32_t rank = -1;  // line of vocab.bpe (0-based, header excluded); -1: no merge
  std::int32_t merged = -1;
};

// Open addressing, linear probing, at most half full.
class PairTable {
 public:
  void reserve(std::size_t n) {
    std::size_t capacity = 16;
    while (capacity < n * 2) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }
  // Inserts unless the pair is present; returns whether it inserted.
  bool insert(std::int32_t left, std::int32_t right, Merge m) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(std::max<std::size_t>(16, slots_.size() * 2));
    const std::uint64_t key = make_key(left, right);
    std::size_t s = mix(key) & mask_;
    while (slots_[s].key != empty) {
      if (slots_[s].key == key) return false;
      s = (s + 1) & mask_;
    }
    slots_[s] = Slot{key, m};
    ++size_;
    return true;
  }
  std::size_t size() const noexcept { return size_; }
  Merge find(std::int32_t left, std::int32_t right) const noexcept {
    const std::uint64_t key = make_key(left, right);
    std::size_t s = mix(key) & mask_;
    while (true) {
      const Slot& slot = slots_[s];
      if (slot.key == key) return slot.merge;
      if (slot.key == empty) return Merge{};
      s = (s + 1) & mask_;
    }
  }

 private:
  static constexpr std::uint64_t empty = ~std::uint64_t{0};
  static std::uint64_t make_key(std::int32_t left, std::int32_t right) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }
  struct Slot {
    std::uint64_t key = empty;
    Merge merge;
  };
  void rehash(std::size_t capacity) {
    std::vector<Slot> old(capacity, Slot{});
    old.swap(slots_);
    mask_ = capacity - 1;
    for (const Slot& slot : old) {
      if (slot.key == empty) continue;
      std::size_t s = mix(slot.key) & mask_;
      while (slots_[s].key != empty) s = (s + 1) & mask_;
      slots_[s] = slot;
    }
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, size_ = 0;
};

// ---------------------------------------------------------------------------------------------------
// File reading and the encoder.json parser
// ---------------------------------------------------------------------------------------------------

inline std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw vocab_error::at(path, 0, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw vocab_error::at(path, 0, "cannot open file");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw vocab_error::at(path, 0, "read error");
  return std::move(buf).str();
}

// encoder.json / vocab.json: one JSON object whose keys are token spellings and whose values are ids
// (non-negative integers). A parser for exactly that shape, so that errors can name the line and column
// and the tokenizer needs no JSON library (keeps eigenformer::tokenizers' dependencies to utf8proc).
class EncoderJsonParser {
 public:
  EncoderJsonParser(const std::filesystem::path& path, std::string_view text) : path_(path), text_(text) {}

  // Calls f(spelling, id, offset_of_key) for every member, in file order.
  template <typename F>
  void parse(F&& f) {
    skip_space();
    expect('{', "expected '{' (a JSON object of token -> id)");
    skip_space();
    if (peek() == '}') {
      ++pos_;
    } else {
      while (true) {
        skip_space();
        const std::size_t key_at = pos_;
        std::string key = parse_string();
        skip_space();
        expect(':', "expected ':' after the key");
        skip_space();
        const std::int64_t id = parse_id();
        f(key, id, key_at);
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}', "expected ',' or '}'");
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail(pos_, "unexpected text after the JSON object");
  }

  [[noreturn]] void fail(std::size_t at, const std::string& message) const {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw vocab_error::at(path_, line, "column " + std::to_string(column) + ": " + message);
  }

 private:
  int peek() const noexcept { return pos_ < text_.size() ? static_cast<unsigned char>(text_[pos_]) : -1; }

  void skip_space() noexcept {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c, const char* message) {
    if (peek() != static_cast<unsigned char>(c)) fail(pos_, peek() < 0 ? std::string(message) + ", got end of file" : message);
    ++pos_;
  }

  unsigned hex4(std::size_t at) const {
    if (at + 4 > text_.size()) fail(at, "truncated \\u escape");
    unsigned v = 0;
    for (std::size_t i = at; i < at + 4; ++i) {
      const char h = text_[i];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail(i, "bad hex digit in \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    expect('"', "expected a string key");
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail(pos_, "unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail(pos_, "control character in a string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      const std::size_t at = pos_;
      if (pos_ + 1 >= text_.size()) fail(at, "unterminated escape");
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          char32_t cp = hex4(pos_);
          pos_ += 4;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos_ + 6 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
              fail(at, "high surrogate without a low surrogate");
            const char32_t lo = hex4(pos_ + 2);
            if (lo < 0xDC00 || lo > 0xDFFF) fail(at, "high surrogate without a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            pos_ += 6;
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail(at, "lone low surrogate");
          }
          unicode::append_utf8(out, cp);
          break;
        }
        default:
          fail(at, std::string("unknown escape \\") + e);
      }
    }
  }

  std::int64_t parse_id() {
    const std::size_t at = pos_;
    if (peek() == '-') fail(at, "negative id");
    if (peek() < '0' || peek() > '9') fail(at, "expected an integer id");
    std::int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + (text_[pos_] - '0');
      if (v > std::numeric_limits<std::int32_t>::max()) fail(at, "id too large");
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      fail(at, "expected an integer id");
    return v;
  }

  const std::filesystem::path& path_;
  std::string_view text_;
  std::size_t pos_ = 0;
};

// Per-call scratch space and merge cache of the encoder.
struct EncodeState {
  std::vector<std::int32_t> symbols;
  std::vector<std::int32_t> ranks;
  std::vector<std::int32_t> next, prev;
  std::vector<std::uint32_t> starts;
  // piece bytes (views into the text being encoded) -> [offset, offset + count) in cached_ids
  std::unordered_map<std::string_view, std::pair<std::uint32_t, std::uint32_t>> cache;
  std::vector<std::int32_t> cached_ids;
};

// Pieces longer than this (in bytes) merge through a priority queue, O(n log n), instead of rescanning
// all pairs after each merge, O(n^2) (fast for the short pieces that make up ordinary text).
inline constexpr std::size_t long_piece = 64;

}  // namespace detail::gpt2

class GPT2Tokenizer {
 public:
  // Loads GPT-2's encoder.json (token spelling -> id) and vocab.bpe ("#version" line, then one merge
  // "left right" per line, earliest first). Hugging Face's vocab.json / merges.txt have the same formats.
  static GPT2Tokenizer from_files(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe) {
    GPT2Tokenizer t;
    t.load_encoder(encoder_json);
    t.load_merges(vocab_bpe);
    return t;
  }

  // `dir` holds encoder.json + vocab.bpe (OpenAI's names) or vocab.json + merges.txt (Hugging Face's).
  static GPT2Tokenizer from_directory(const std::filesystem::path& dir) {
    std::error_code ec;
    if (std::filesystem::exists(dir / "encoder.json", ec) || std::filesystem::exists(dir / "vocab.bpe", ec))
      return from_files(dir / "encoder.json", dir / "vocab.bpe");
    if (std::filesystem::exists(dir / "vocab.json", ec) || std::filesystem::exists(dir / "merges.txt", ec))
      return from_files(dir / "vocab.json", dir / "merges.txt");
    throw vocab_error::at(dir, 0,
                          std::filesystem::is_directory(dir, ec)
                              ? "no GPT-2 vocabulary here (expected encoder.json + vocab.bpe, or vocab.json + merges.txt)"
                              : "no such directory");
  }

  GPT2Tokenizer(const GPT2Tokenizer& other) { *this = other; }
  GPT2Tokenizer(GPT2Tokenizer&& other) noexcept { *this = std::move(other); }
  GPT2Tokenizer& operator=(const GPT2Tokenizer& other) {
    if (this != &other) {
      copy_members(other);
      by_bytes_.rebind(arena_);
    }
    return *this;
  }
  GPT2Tokenizer& operator=(GPT2Tokenizer&& other) noexcept {
    if (this != &other) {
      move_members(std::move(other));
      by_bytes_.rebind(arena_);
    }
    return *this;
  }
  ~GPT2Tokenizer() = default;

  // Ids of `text`, with every "<|endoftext|>" as the special token eot_id().
  std::vector<std::int64_t> encode(std::string_view text) const {
    std::vector<std::int64_t> ids;
    ids.reserve(text.size() / 3 + 4);
    detail::gpt2::EncodeState state;
    static constexpr std::string_view eot = "<|endoftext|>";
    std::size_t start = 0;
    while (true) {
      const std::size_t at = eot_id_ >= 0 ? text.find(eot, start) : std::string_view::npos;
      encode_ordinary_into(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start),
                           state, ids);
      if (at == std::string_view::npos) break;
      ids.push_back(eot_id_);
      start = at + eot.size();
    }
    return ids;
  }

  // Ids of `text` with no special tokens: "<|endoftext|>" is encoded as ordinary text.
  std::vector<std::int64_t> encode_ordinary(std::string_view text) const {
    std::vector<std::int64_t> ids;
    ids.reserve(text.size() / 3 + 4);
    detail::gpt2::EncodeState state;
    encode_ordinary_into(text, state, ids);
    return ids;
  }

  // The bytes of the tokens, concatenated. Not necessarily valid UTF-8: a prefix of an encoding may end
  // inside a character. Throws token_id_error for an id outside [0, vocab_size()).
  std::string decode(std::span<const std::int64_t> ids) const {
    std::string out;
    out.reserve(ids.size() * 4);
    for (const std::int64_t id : ids) {
      check_id(id);
      out.append(arena_, offsets_[static_cast<std::size_t>(id)], lengths_[static_cast<std::size_t>(id)]);
    }
    return out;
  }

  // The tokens of encode(text), spelled as in encoder.json ("Ġworld" for " world").
  std::vector<std::string> tokenize(std::string_view text) const {
    std::vector<std::string> tokens;
    for (const std::int64_t id : encode(text)) tokens.push_back(id_to_token(id));
    return tokens;
  }

  // The spelling of a token in encoder.json. Throws token_id_error for an id outside the vocabulary.
  std::string id_to_token(std::int64_t id) const {
    check_id(id);
    return detail::gpt2::bytes_to_spelling(token_bytes(id));
  }

  // The raw bytes of a token. Throws token_id_error for an id outside the vocabulary.
  std::string_view token_bytes(std::int64_t id) const {
    check_id(id);
    return std::string_view(arena_).substr(offsets_[static_cast<std::size_t>(id)],
                                           lengths_[static_cast<std::size_t>(id)]);
  }

  // The id of a token given in encoder.json's spelling, or nullopt.
  std::optional<std::int64_t> find_token(std::string_view spelling) const {
    const auto bytes = detail::gpt2::spelling_to_bytes(spelling);
    if (!bytes || bytes->empty()) return std::nullopt;
    const std::int32_t id = by_bytes_.find(*bytes);
    if (id < 0) return std::nullopt;
    return id;
  }

  // The id of a token given in encoder.json's spelling; throws std::invalid_argument when there is none.
  std::int64_t token_to_id(std::string_view spelling) const {
    if (const auto id = find_token(spelling)) return *id;
    throw std::invalid_argument("GPT2Tokenizer::token_to_id: \"" + std::string(spelling) +
                                "\" is not in the vocabulary (size " + std::to_string(vocab_size()) + ")");
  }

  std::size_t vocab_size() const noexcept { return offsets_.size(); }
  // Id of "<|endoftext|>" (50256 for GPT-2); -1 when the vocabulary has no such token.
  std::int64_t eot_id() const noexcept { return eot_id_; }
  std::size_t merges_size() const noexcept { return merge_count_; }
  // Pairs that merge: the listed ones plus every other split of a merged token into two tokens
  // (tiktoken's rule; GPT-2: 50,000 + 58,299 = 108,299).
  std::size_t merge_pairs() const noexcept { return pairs_.size(); }

  // The pre-tokenisation of `text` (views into it), in order; their concatenation is `text`.
  static std::vector<std::string_view> pretokenize(std::string_view text) {
    std::vector<std::string_view> pieces;
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t len = detail::gpt2::next_piece(text, i);
      pieces.push_back(text.substr(i, len));
      i += len;
    }
    return pieces;
  }

  // BPE of one piece (no pre-tokenisation, no whole-piece shortcut), the merge loop chosen by
  // `long_piece_threshold` (bytes): exposed so tests can check both loops agree.
  std::vector<std::int64_t> bpe(std::string_view piece,
                                std::size_t long_piece_threshold = detail::gpt2::long_piece) const {
    detail::gpt2::EncodeState state;
    std::vector<std::int64_t> out;
    if (piece.empty()) return out;
    if (piece.size() > long_piece_threshold) merge_long(piece, state);
    else merge_short(piece, state);
    out.assign(state.symbols.begin(), state.symbols.end());
    return out;
  }

 private:
  GPT2Tokenizer() = default;

  void copy_members(const GPT2Tokenizer& o) {
    arena_ = o.arena_;
    offsets_ = o.offsets_;
    lengths_ = o.lengths_;
    by_bytes_ = o.by_bytes_;
    pairs_ = o.pairs_;
    std::copy(std::begin(o.byte_ids_), std::end(o.byte_ids_), std::begin(byte_ids_));
    eot_id_ = o.eot_id_;
    merge_count_ = o.merge_count_;
  }
  void move_members(GPT2Tokenizer&& o) noexcept {
    arena_ = std::move(o.arena_);
    offsets_ = std::move(o.offsets_);
    lengths_ = std::move(o.lengths_);
    by_bytes_ = std::move(o.by_bytes_);
    pairs_ = std::move(o.pairs_);
    std::copy(std::begin(o.byte_ids_), std::end(o.byte_ids_), std::begin(byte_ids_));
    eot_id_ = o.eot_id_;
    merge_count_ = o.merge_count_;
  }

  void check_id(std::int64_t id) const {
    if (id < 0 || static_cast<std::uint64_t>(id) >= offsets_.size()) throw token_id_error::outside(id, vocab_size());
  }

  void load_encoder(const std::filesystem::path& path) {
    const std::string text = detail::gpt2::read_file(path);
    detail::gpt2::EncoderJsonParser parser(path, text);
    struct Entry {
      std::string bytes;
      std::int64_t id;
      std::size_t key_at;  // offset of the key in the file, for messages
    };
    std::vector<Entry> entries;
    parser.parse([&](const std::string& spelling, std::int64_t id, std::size_t key_at) {
      auto bytes = detail::gpt2::spelling_to_bytes(spelling);
      // Only special tokens may be spelled outside the byte alphabet (GPT-2's one special token,
      // "<|endoftext|>", is spelled inside it); such a token is kept as its UTF-8 text.
      if (!bytes) bytes = spelling;
      if (bytes->empty()) parser.fail(key_at, "empty token");
      entries.push_back({std::move(*bytes), id, key_at});
    });
    if (entries.empty()) throw vocab_error::at(path, 0, "empty vocabulary");
    // Ids must be 0..n-1, each once (checked before anything is sized by an id read from the file).
    const std::size_t n = entries.size();
    std::vector<std::pair<std::string, std::size_t>> by_id(n);  // bytes, key offset
    std::vector<bool> seen(n, false);
    for (auto& e : entries) {
      if (static_cast<std::uint64_t>(e.id) >= n)
        parser.fail(e.key_at, "id " + std::to_string(e.id) + " but " + std::to_string(n) +
                                  " tokens: ids must be 0.." + std::to_string(n - 1));
      const auto i = static_cast<std::size_t>(e.id);
      if (seen[i]) parser.fail(e.key_at, "id " + std::to_string(e.id) + " is given twice");
      seen[i] = true;
      by_id[i] = {std::move(e.bytes), e.key_at};
    }
    arena_.clear();
    offsets_.resize(by_id.size());
    lengths_.resize(by_id.size());
    for (std::size_t i = 0; i < by_id.size(); ++i) {
      offsets_[i] = static_cast<std::uint32_t>(arena_.size());
      lengths_[i] = static_cast<std::uint32_t>(by_id[i].first.size());
      arena_ += by_id[i].first;
    }
    by_bytes_.build(arena_, offsets_, lengths_);
    for (std::size_t i = 0; i < by_id.size(); ++i) {
      if (by_bytes_.find(by_id[i].first) != static_cast<std::int32_t>(i))
        parser.fail(by_id[i].second, "token \"" + detail::gpt2::bytes_to_spelling(by_id[i].first) +
                                         "\" appears twice (ids " + std::to_string(by_bytes_.find(by_id[i].first)) +
                                         " and " + std::to_string(i) + ")");
    }
    for (int b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      byte_ids_[b] = by_bytes_.find(std::string_view(&c, 1));
      if (byte_ids_[b] < 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        throw vocab_error::at(path, 0, std::string("no token for byte ") + hex + " (spelled \"" +
                                           detail::gpt2::bytes_to_spelling(std::string_view(&c, 1)) +
                                           "\"): a byte-level BPE needs all 256");
      }
    }
    eot_id_ = by_bytes_.find("<|endoftext|>");
  }

  void load_merges(const std::filesystem::path& path) {
    const std::string text = detail::gpt2::read_file(path);
    // First pass: the merges in order, each checked; rank = position in the list.
    struct Listed {
      std::int32_t left, right, merged;
    };
    std::vector<Listed> merges;
    std::size_t line_no = 0;
    for (std::size_t start = 0; start < text.size();) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + start, end - start);
      start = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line_no == 1 && line.starts_with("#version")) continue;
      if (line.empty()) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
          line.find(' ', space + 1) != std::string_view::npos)
        throw vocab_error::at(path, line_no,
                              "expected two tokens separated by one space, got \"" + std::string(line) + "\"");
      const auto left_bytes = detail::gpt2::spelling_to_bytes(line.substr(0, space));
      const auto right_bytes = detail::gpt2::spelling_to_bytes(line.substr(space + 1));
      const auto token_id = [&](const std::optional<std::string>& bytes, std::string_view spelling) {
        const std::int32_t id = bytes ? by_bytes_.find(*bytes) : -1;
        if (id < 0)
          throw vocab_error::at(path, line_no, "\"" + std::string(spelling) + "\" is not in the vocabulary");
        return id;
      };
      const std::int32_t left = token_id(left_bytes, line.substr(0, space));
      const std::int32_t right = token_id(right_bytes, line.substr(space + 1));
      const std::int32_t merged = by_bytes_.find(*left_bytes + *right_bytes);
      if (merged < 0)
        throw vocab_error::at(path, line_no, "the merge \"" + std::string(line) + "\" makes \"" +
                                                 detail::gpt2::bytes_to_spelling(*left_bytes + *right_bytes) +
                                                 "\", which is not in the vocabulary");
      merges.push_back({left, right, merged});
    }
    // The table: every listed pair, then every other split x + y of a merged token into two tokens, with
    // the rank of the line that made the token (tiktoken's rule: a pair's rank is its concatenation's).
    std::vector<std::int32_t> rank_of_token(offsets_.size(), -1);
    for (std::size_t r = 0; r < merges.size(); ++r)
      if (rank_of_token[static_cast<std::size_t>(merges[r].merged)] < 0)
        rank_of_token[static_cast<std::size_t>(merges[r].merged)] = static_cast<std::int32_t>(r);
    pairs_.reserve(merges.size() * 2);  // GPT-2: 50,000 listed pairs + 58,299 other splits
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const auto& m = merges[r];
      pairs_.insert(m.left, m.right, {rank_of_token[static_cast<std::size_t>(m.merged)], m.merged});
    }
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const auto merged = static_cast<std::size_t>(merges[r].merged);
      if (rank_of_token[merged] != static_cast<std::int32_t>(r)) continue;  // a token made twice: first line
      const std::string_view bytes(arena_.data() + offsets_[merged], lengths_[merged]);
      for (std::size_t k = 1; k < bytes.size(); ++k) {
        const std::int32_t x = by_bytes_.find(bytes.substr(0, k));
        if (x < 0) continue;
        const std::int32_t y = by_bytes_.find(bytes.substr(k));
        if (y < 0) continue;
        pairs_.insert(x, y, {static_cast<std::int32_t>(r), merges[r].merged});
      }
    }
    merge_count_ = merges.size();
  }

  void encode_ordinary_into(std::string_view text, detail::gpt2::EncodeState& state,
                            std::vector<std::int64_t>& ids) const {
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t len = detail::gpt2::next_piece(text, i);
      const std::string_view piece = text.substr(i, len);
      i += len;
      if (len == 1) {
        ids.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
        continue;
      }
      if (const std::int32_t id = by_bytes_.find(piece); id >= 0) {
        ids.push_back(id);
        continue;
      }
      if (const auto hit = state.cache.find(piece); hit != state.cache.end()) {
        const auto [offset, count] = hit->second;
        ids.insert(ids.end(), state.cached_ids.begin() + offset, state.cached_ids.begin() + offset + count);
        continue;
      }
      if (len > detail::gpt2::long_piece) merge_long(piece, state);
      else merge_short(piece, state);
      state.cache.emplace(piece, std::pair<std::uint32_t, std::uint32_t>(
                                     static_cast<std::uint32_t>(state.cached_ids.size()),
                                     static_cast<std::uint32_t>(state.symbols.size())));
      state.cached_ids.insert(state.cached_ids.end(), state.symbols.begin(), state.symbols.end());
      ids.insert(ids.end(), state.symbols.begin(), state.symbols.end());
    }
  }

  static constexpr std::int32_t no_rank = std::numeric_limits<std::int32_t>::max();

  std::int32_t rank_of(std::int32_t left, std::int32_t right) const noexcept {
    const auto m = pairs_.find(left, right);
    return m.rank < 0 ? no_rank : m.rank;
  }

  // Rescans all pairs after each merge: state.symbols <- the tokens of `piece`.
  void merge_short(std::string_view piece, detail::gpt2::EncodeState& state) const {
    auto& sym = state.symbols;
    auto& rank = state.ranks;
    const std::size_t n = piece.size();
    sym.resize(n);
    for (std::size_t i = 0; i < n; ++i) sym[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    rank.resize(n);
    for (std::size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(sym[i], sym[i + 1]);
    std::size_t count = n;
    while (count > 1) {
      std::size_t best = 0;
      std::int32_t best_rank = no_rank;
      for (std::size_t i = 0; i + 1 < count; ++i)
        if (rank[i] < best_rank) {
          best_rank = rank[i];
          best = i;
        }
      if (best_rank == no_rank) break;
      sym[best] = pairs_.find(sym[best], sym[best + 1]).merged;
      for (std::size_t i = best + 1; i + 1 < count; ++i) {
        sym[i] = sym[i + 1];
        rank[i] = rank[i + 1];
      }
      --count;
      if (best > 0) rank[best - 1] = rank_of(sym[best - 1], sym[best]);
      if (best + 1 < count) rank[best] = rank_of(sym[best], sym[best + 1]);
    }
    sym.resize(count);
  }

  // Priority queue of candidate pairs keyed by (rank, start byte), stale entries skipped when popped:
  // the same merges in the same order as merge_short.
  void merge_long(std::string_view piece, detail::gpt2::EncodeState& state) const {
    const std::size_t n = piece.size();
    auto& sym = state.symbols;
    auto& next = state.next;
    auto& prev = state.prev;
    sym.resize(n);
    next.resize(n);
    prev.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      sym[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
      next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
      prev[i] = static_cast<std::int32_t>(i) - 1;
    }
    struct Candidate {
      std::int32_t rank, left, right, left_sym, right_sym;
      bool operator>(const Candidate& o) const noexcept {
        return rank != o.rank ? rank > o.rank : left > o.left;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    const auto push = [&](std::int32_t left) {
      if (left < 0) return;
      const std::int32_t right = next[static_cast<std::size_t>(left)];
      if (right < 0) return;
      const std::int32_t r = rank_of(sym[static_cast<std::size_t>(left)], sym[static_cast<std::size_t>(right)]);
      if (r != no_rank)
        queue.push({r, left, right, sym[static_cast<std::size_t>(left)], sym[static_cast<std::size_t>(right)]});
    };
    for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int32_t>(i));
    std::vector<bool> dead(n, false);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      const auto l = static_cast<std::size_t>(c.left), r = static_cast<std::size_t>(c.right);
      if (dead[l] || dead[r] || next[l] != c.right || sym[l] != c.left_sym || sym[r] != c.right_sym) continue;
      sym[l] = pairs_.find(sym[l], sym[r]).merged;
      dead[r] = true;
      next[l] = next[r];
      if (next[r] >= 0) prev[static_cast<std::size_t>(next[r])] = c.left;
      push(prev[l]);
      push(c.left);
    }
    std::size_t count = 0;
    for (std::int32_t i = 0; i >= 0; i = next[static_cast<std::size_t>(i)]) sym[count++] = sym[static_cast<std::size_t>(i)];
    sym.resize(count);
  }

  std::string arena_;                    // the bytes of every token, by id
  std::vector<std::uint32_t> offsets_;   // id -> offset in arena_
  std::vector<std::uint32_t> lengths_;   // id -> byte length
  detail::gpt2::BytesTable by_bytes_;    // bytes -> id
  detail::gpt2::PairTable pairs_;        // (left, right) -> (rank, merged)
  std::int32_t byte_ids_[256] = {};
  std::int64_t eot_id_ = -1;
  std::size_t merge_count_ = 0;
};

}  // namespace eigenformer::tokenizers
