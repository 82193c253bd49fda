// BERT's tokenizer: the basic tokenizer (cleaning, CJK spacing, lower-casing and accent stripping,
// punctuation splitting) followed by WordPiece (greedy longest-match-first with "##" continuations), with
// Hugging Face's encode_plus for model inputs: [CLS] A [SEP] B [SEP], token types, truncation, padding.
//
//   auto tok = BertTokenizer::from_file("bert-base-uncased/vocab.txt");
//   tok.encode("time flies like an arrow");           // {2051, 10029, 2066, 2019, 8612}
//   tok.tokenize("unaffable");                        // {"una", "##ffa", "##ble"}
//   auto enc = tok.encode_plus("a question", "an answer", {.max_length = 16, .padding = Padding::max_length,
//                                                          .truncation = true});
//   auto batch = tok.encode_batch(texts);             // Tensor<int64, 2> input_ids, token_type_ids, mask
//
// The algorithm is the one Google published with BERT's checkpoints (tokenization.py). Step by step:
//  1. Text is UTF-8. Each ill-formed byte sequence (maximal subpart, as Python's errors="replace") becomes
//     U+FFFD, which step 2 drops: invalid bytes vanish without splitting the word they are in. This is what
//     Google's convert_to_unicode(errors="ignore") does too, so invalid input never throws.
//  2. Cleaning: U+0000, U+FFFD and characters of category Cc or Cf are dropped (tab, newline and carriage
//     return excepted); those three and every Zs character become a space.
//  3. A space on each side of every CJK ideograph (unicode::is_cjk_ideograph).
//  4. Whitespace split (Python's str.split; after step 2 that is a space, U+2028 or U+2029).
//  5. do_lower_case: each word is lower-cased as Python's str.lower() (unicode::to_lower: final sigma,
//     U+0130), decomposed (NFD) and stripped of nonspacing marks (Mn): "Héllo" -> "hello".
//  6. Each punctuation character (unicode::is_bert_punctuation: ASCII 33-47, 58-64, 91-96, 123-126 and
//     category P*) becomes a word of its own.
//  7. WordPiece: a word of more than 100 code points is [UNK]. Otherwise the longest vocabulary entry that
//     prefixes the word is taken, then the longest "##"-prefixed entry that prefixes the rest, and so on;
//     if some position has no match the whole word is one [UNK].
// tools/reference/tokenizers/bert_reference.py is an independent Python implementation of the same steps;
// the tests compare all of SST-2, the hard-case file and every code point against it.
//
// Where tokenizers that call themselves BERT's differ, this follows Google's tokenization.py:
//  - Controls are Cc and Cf. Hugging Face's tokenizers drop every C* character, so they also drop private-use
//    (Co) and unassigned (Cn) code points, which here stay in their word (usually making it [UNK]).
//  - No NFC before splitting. Hugging Face's Python BertTokenizer composes first; with do_lower_case the
//    result is the same (step 5 decomposes again), without it composed and decomposed input differ.
//  - Final sigma: "ΟΔΟΣ" -> "οδος" as str.lower() gives (so does Hugging Face's Python BertTokenizer; its
//    Rust "fast" tokenizer lower-cases character by character and gives "οδοσ").
//  - Special-token strings in the text ("[CLS]", "[MASK]") are ordinary text: "[", "cl", "##s", "]".
//    Hugging Face keeps them whole. Put special ids in with add_special_tokens or by id.
//  - Character data is utf8proc's (Unicode 15.0 in utf8proc 2.8) where Python 3.11 has Unicode 14.0; only
//    characters assigned in 15.0 can differ.
// decode() joins tokens with spaces and glues "##" continuations, keeping special tokens, as Hugging Face's
// decode with clean_up_tokenization_spaces=False: "[CLS] hello , world [SEP]".
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eigenformer/tensor/creation.hpp"
#include "eigenformer/tokenizers/error.hpp"
#include "eigenformer/tokenizers/unicode.hpp"

namespace eigenformer::tokenizers {

// Steps 1-6 above: text to words, without a vocabulary.
class BasicTokenizer {
 public:
  explicit BasicTokenizer(bool do_lower_case = true) : do_lower_case_(do_lower_case) {}

  bool do_lower_case() const noexcept { return do_lower_case_; }

  std::vector<std::string> tokenize(std::string_view text) const {
    std::vector<std::string> out;
    tokenize_into(text, out);
    return out;
  }

  // Appends the words of `text` to `out` (reusing its capacity across calls).
  void tokenize_into(std::string_view text, std::vector<std::string>& out) const {
    std::string word;  // the current whitespace-separated word, cleaned, UTF-8
    auto flush = [&] {
      if (!word.empty()) split_word(word, out);
      word.clear();
    };
    for (std::size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c < 0x80) {  // ASCII fast path: the same rules, without the tables
        ++i;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') flush();
        else if (c >= 0x20 && c != 0x7F) word += static_cast<char>(c);
        // other ASCII controls (Cc, including NUL) are dropped
        continue;
      }
      const unicode::Decoded d = unicode::decode(text, i);
      i += d.length;
      const char32_t cp = d.cp;
      if (!d.valid || cp == unicode::replacement_character || unicode::is_bert_control(cp)) continue;
      if (unicode::is_bert_whitespace(cp) || unicode::is_white_space(cp)) {
        flush();  // Zs -> space (step 2); U+2028/U+2029 split in str.split (step 4)
      } else if (unicode::is_cjk_ideograph(cp)) {
        flush();
        unicode::append_utf8(word, cp);
        flush();
      } else {
        unicode::append_utf8(word, cp);
      }
    }
    flush();
  }

 private:
  // Steps 5 and 6 for one whitespace-separated word.
  void split_word(const std::string& raw, std::vector<std::string>& out) const {
    std::string normalized;
    std::string_view word = raw;
    if (do_lower_case_) {
      normalized = unicode::strip_accents(lower(raw));
      word = normalized;
    }
    std::size_t start = 0;  // start of the current non-punctuation run
    for (std::size_t i = 0; i < word.size();) {
      const auto c = static_cast<unsigned char>(word[i]);
      std::size_t len = 1;
      bool punct;
      if (c < 0x80) {
        punct = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
      } else {
        const unicode::Decoded d = unicode::decode(word, i);
        len = d.length;
        punct = d.valid && unicode::is_bert_punctuation(d.cp);
      }
      if (punct) {
        if (i > start) out.emplace_back(word.substr(start, i - start));
        out.emplace_back(word.substr(i, len));
        start = i + len;
      }
      i += len;
    }
    if (word.size() > start) out.emplace_back(word.substr(start));
  }

  // Python's str.lower() of one word.
  static std::string lower(std::string_view word) { return unicode::to_lower(word); }

  bool do_lower_case_;
};

// How encode_plus pads: not at all, to the longest sequence of the batch, or to max_length.
enum class Padding { none, longest, max_length };

// Hugging Face's encode_plus arguments. Truncation is "longest_first": tokens are removed from the end of the
// longer sequence of a pair (the second one when they are equally long) until the pair fits.
struct EncodeOptions {
  std::size_t max_length = 512;  // bert-base's model_max_length; used by truncation and Padding::max_length
  Padding padding = Padding::none;
  bool truncation = false;
  bool add_special_tokens = true;  // [CLS] A [SEP] (B [SEP])
};

// One encoded sequence (or pair): the three lists Hugging Face returns, all of the same length.
struct Encoding {
  std::vector<std::int64_t> input_ids;
  std::vector<std::int64_t> token_type_ids;  // 0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
  std::vector<std::int64_t> attention_mask;  // 1 for tokens, 0 for padding
};

// A batch as [batch, length] tensors (return_tensors="pt").
struct BatchEncoding {
  Tensor<std::int64_t, 2> input_ids;
  Tensor<std::int64_t, 2> token_type_ids;
  Tensor<std::int64_t, 2> attention_mask;
};

class BertTokenizer {
 public:
  static constexpr std::size_t max_word_chars = 100;  // longer words are [UNK] (max_input_chars_per_word)

  // Reads vocab.txt: one token per line, the line number (from 0) is the id. Throws vocab_error naming the
  // file (and line) when it cannot be read, is empty, holds invalid UTF-8, an empty line, a duplicate token,
  // or lacks one of [PAD], [UNK], [CLS], [SEP], [MASK].
  static BertTokenizer from_file(const std::filesystem::path& vocab_txt, bool do_lower_case = true) {
    // A directory opens as a stream on POSIX, and reading it throws std::ios_base::failure, not vocab_error.
    std::error_code ec;
    if (std::filesystem::is_directory(vocab_txt, ec))
      throw vocab_error::at(vocab_txt, 0, "is a directory, not a vocabulary file");
    std::ifstream in(vocab_txt, std::ios::binary);
    if (!in) throw vocab_error::at(vocab_txt, 0, "cannot open the vocabulary file");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw vocab_error::at(vocab_txt, 0, "cannot read the vocabulary file");
    return from_string(text, do_lower_case, vocab_txt);
  }

  // The same from the file's contents; `origin` names it in error messages.
  static BertTokenizer from_string(std::string_view text, bool do_lower_case = true,
                                   const std::filesystem::path& origin = "vocab.txt") {
    if (text.empty()) throw vocab_error::at(origin, 0, "empty file, expected one token per line");
    std::vector<std::string> tokens;
    std::size_t line = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t nl = text.find('\n', pos);
      const std::size_t end = nl == std::string_view::npos ? text.size() : nl;
      std::string_view token = text.substr(pos, end - pos);
      if (!token.empty() && token.back() == '\r') token.remove_suffix(1);  // CRLF files
      ++line;
      if (token.empty()) throw vocab_error::at(origin, line, "empty token (blank line)");
      if (const auto bad = unicode::first_invalid_utf8(token); bad != std::string_view::npos)
        throw vocab_error::at(origin, line, "invalid UTF-8 at byte " + std::to_string(bad) + " of the token");
      tokens.emplace_back(token);
      pos = end + 1;
    }
    return BertTokenizer(std::move(tokens), do_lower_case, origin);
  }

  // From a token list in id order (throws vocab_error on duplicates or missing special tokens).
  BertTokenizer(std::vector<std::string> tokens, bool do_lower_case = true,
                const std::filesystem::path& origin = "vocabulary")
      : basic_(do_lower_case), id_to_token_(std::move(tokens)) {
    index_.reserve(id_to_token_.size());
    for (std::size_t i = 0; i < id_to_token_.size(); ++i) {
      const std::int64_t first = index_.insert(id_to_token_, static_cast<std::int64_t>(i));
      if (first >= 0)
        throw vocab_error::at(origin, i + 1,
                              "duplicate token \"" + id_to_token_[i] + "\" (first on line " +
                                  std::to_string(first + 1) + ")");
      max_token_bytes_ = std::max(max_token_bytes_, id_to_token_[i].size());
    }
    auto special = [&](std::string_view name) {
      const auto id = token_to_id(name);
      if (!id)
        throw vocab_error::at(origin, 0,
                              "no " + std::string(name) +
                                  " token (a BERT vocabulary defines [PAD], [UNK], [CLS], [SEP] and [MASK])");
      return *id;
    };
    pad_id_ = special("[PAD]");
    unk_id_ = special("[UNK]");
    cls_id_ = special("[CLS]");
    sep_id_ = special("[SEP]");
    mask_id_ = special("[MASK]");
  }

  // ---- vocabulary ------------------------------------------------------------------------------------
  std::size_t vocab_size() const noexcept { return id_to_token_.size(); }
  bool do_lower_case() const noexcept { return basic_.do_lower_case(); }
  std::int64_t pad_id() const noexcept { return pad_id_; }
  std::int64_t unk_id() const noexcept { return unk_id_; }
  std::int64_t cls_id() const noexcept { return cls_id_; }
  std::int64_t sep_id() const noexcept { return sep_id_; }
  std::int64_t mask_id() const noexcept { return mask_id_; }

  std::optional<std::int64_t> token_to_id(std::string_view token) const {
    const std::int64_t id = index_.find(id_to_token_, token);
    if (id < 0) return std::nullopt;
    return id;
  }
  // Throws token_id_error naming the id and the vocabulary size when id is not in [0, vocab_size()).
  const std::string& id_to_token(std::int64_t id) const {
    if (id < 0 || static_cast<std::uint64_t>(id) >= id_to_token_.size())
      throw token_id_error::outside(id, id_to_token_.size());
    return id_to_token_[static_cast<std::size_t>(id)];
  }

  // ---- text to tokens and ids --------------------------------------------------------------------------
  // The basic tokenizer's words (steps 1-6), before WordPiece.
  std::vector<std::string> basic_tokenize(std::string_view text) const { return basic_.tokenize(text); }

  // WordPiece tokens: {"una", "##ffa", "##ble"}.
  std::vector<std::string> tokenize(std::string_view text) const {
    std::vector<std::string> out;
    for_each_piece(text, [&](std::int64_t id) { out.push_back(id_to_token_[static_cast<std::size_t>(id)]); });
    return out;
  }

  // Ids of the text; with add_special_tokens, [CLS] ... [SEP].
  std::vector<std::int64_t> encode(std::string_view text, bool add_special_tokens = false) const {
    std::vector<std::int64_t> ids;
    if (add_special_tokens) ids.push_back(cls_id_);
    for_each_piece(text, [&](std::int64_t id) { ids.push_back(id); });
    if (add_special_tokens) ids.push_back(sep_id_);
    return ids;
  }

  // Tokens joined by spaces, "##" continuations glued to the previous token, special tokens kept.
  std::string decode(std::span<const std::int64_t> ids) const {
    std::string out;
    for (const std::int64_t id : ids) {
      const std::string& token = id_to_token(id);
      if (token.size() > 2 && token.starts_with("##") && !out.empty()) {
        out.append(token, 2);
      } else if (token == "##" && !out.empty()) {
        // Hugging Face removes " ##": a bare "##" glues to its predecessor and vanishes.
      } else {
        if (!out.empty()) out += ' ';
        out += token;
      }
    }
    return out;
  }

  // ---- model inputs -------------------------------------------------------------------------------------
  // Hugging Face's encode_plus(text, text_pair, add_special_tokens, padding, truncation, max_length).
  // Throws std::invalid_argument when truncation cannot make room (max_length below the special tokens).
  Encoding encode_plus(std::string_view text, std::optional<std::string_view> text_pair = std::nullopt,
                       const EncodeOptions& options = {}) const {
    std::vector<std::int64_t> a = encode(text), b;
    if (text_pair) b = encode(*text_pair);
    Encoding e = assemble(std::move(a), text_pair ? std::optional(std::move(b)) : std::nullopt, options);
    if (options.padding == Padding::max_length) pad_to(e, options.max_length);
    return e;
  }

  // A batch of texts (or of pairs, when `pairs` is not empty: pairs[i] goes with texts[i]) as tensors.
  // Padding::none requires all encodings to have the same length (as a tensor must).
  BatchEncoding encode_batch(std::span<const std::string> texts, std::span<const std::string> pairs = {},
                             EncodeOptions options = {.padding = Padding::longest}) const {
    if (!pairs.empty() && pairs.size() != texts.size())
      throw std::invalid_argument("encode_batch: " + std::to_string(texts.size()) + " texts but " +
                                  std::to_string(pairs.size()) + " pairs");
    std::vector<Encoding> rows;
    rows.reserve(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      rows.push_back(encode_plus(texts[i], pairs.empty() ? std::nullopt : std::optional<std::string_view>(pairs[i]),
                                 options));
    }
    std::size_t length = 0;
    for (const auto& r : rows) length = std::max(length, r.input_ids.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (options.padding == Padding::longest) pad_to(rows[i], length);
      if (rows[i].input_ids.size() != length)
        throw std::invalid_argument("encode_batch: text " + std::to_string(i) + " has " +
                                    std::to_string(rows[i].input_ids.size()) + " ids where another has " +
                                    std::to_string(length) + "; use Padding::longest or Padding::max_length");
    }
    const Shape<2> shape{static_cast<index_t>(rows.size()), static_cast<index_t>(length)};
    BatchEncoding out{Tensor<std::int64_t, 2>::empty(shape), Tensor<std::int64_t, 2>::empty(shape),
                      Tensor<std::int64_t, 2>::empty(shape)};
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::copy(rows[i].input_ids.begin(), rows[i].input_ids.end(), out.input_ids.data() + i * length);
      std::copy(rows[i].token_type_ids.begin(), rows[i].token_type_ids.end(),
                out.token_type_ids.data() + i * length);
      std::copy(rows[i].attention_mask.begin(), rows[i].attention_mask.end(),
                out.attention_mask.data() + i * length);
    }
    return out;
  }

 private:
  // Token -> id: open addressing with linear probing over the ids, each token's hash stored, so a lookup
  // hashes the candidate once and compares strings only on a full hash match (WordPiece looks up many
  // candidates that are not in the vocabulary).
  class TokenIndex {
   public:
    void reserve(std::size_t n) {
      std::size_t capacity = 16;
      while (capacity < 2 * n) capacity *= 2;
      slots_.assign(capacity, -1);
      hashes_.reserve(n);
    }
    // Adds id (ids come in order 0, 1, ...); returns the id already holding the token, or -1.
    std::int64_t insert(const std::vector<std::string>& tokens, std::int64_t id) {
      const std::string& token = tokens[static_cast<std::size_t>(id)];
      const std::size_t h = hash(token);
      hashes_.push_back(h);
      const std::size_t mask = slots_.size() - 1;
      for (std::size_t i = h & mask;; i = (i + 1) & mask) {
        const std::int64_t other = slots_[i];
        if (other < 0) {
          slots_[i] = id;
          return -1;
        }
        if (hashes_[static_cast<std::size_t>(other)] == h && tokens[static_cast<std::size_t>(other)] == token)
          return other;
      }
    }
    std::int64_t find(const std::vector<std::string>& tokens, std::string_view token) const {
      if (slots_.empty()) return -1;
      const std::size_t h = hash(token);
      const std::size_t mask = slots_.size() - 1;
      for (std::size_t i = h & mask;; i = (i + 1) & mask) {
        const std::int64_t id = slots_[i];
        if (id < 0) return -1;
        if (hashes_[static_cast<std::size_t>(id)] == h && tokens[static_cast<std::size_t>(id)] == token) return id;
      }
    }

   private:
    static std::size_t hash(std::string_view s) noexcept { return std::hash<std::string_view>{}(s); }
    std::vector<std::int64_t> slots_;
    std::vector<std::size_t> hashes_;
  };

  // Calls f(id) for each WordPiece id of the text.
  template <typename F>
  void for_each_piece(std::string_view text, F&& f) const {
    std::vector<std::string> words;
    basic_.tokenize_into(text, words);
    std::vector<std::size_t> bounds;  // byte offset of each code point, then the word's size
    std::string candidate;
    std::vector<std::int64_t> pieces;
    for (const std::string& word : words) {
      bounds.clear();
      for (std::size_t i = 0; i < word.size(); ++i)
        if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) bounds.push_back(i);
      if (bounds.size() > max_word_chars) {
        f(unk_id_);
        continue;
      }
      bounds.push_back(word.size());
      const std::size_t n = bounds.size() - 1;
      pieces.clear();
      bool matched_all = true;
      for (std::size_t start = 0; start < n;) {
        const std::string_view prefix = start == 0 ? std::string_view() : std::string_view("##");
        std::size_t found_end = 0;
        std::int64_t found_id = -1;
        for (std::size_t end = n; end > start; --end) {
          const std::size_t bytes = bounds[end] - bounds[start];
          if (bytes + prefix.size() > max_token_bytes_) continue;  // longer than any entry
          candidate.assign(prefix);
          candidate.append(word, bounds[start], bytes);
          if (const std::int64_t id = index_.find(id_to_token_, candidate); id >= 0) {
            found_end = end;
            found_id = id;
            break;
          }
        }
        if (found_id < 0) {
          matched_all = false;
          break;
        }
        pieces.push_back(found_id);
        start = found_end;
      }
      if (!matched_all) {
        f(unk_id_);
      } else {
        for (const std::int64_t id : pieces) f(id);
      }
    }
  }

  // [CLS] a [SEP] (b [SEP]) with longest_first truncation to options.max_length.
  Encoding assemble(std::vector<std::int64_t> a, std::optional<std::vector<std::int64_t>> b,
                    const EncodeOptions& options) const {
    const std::size_t specials = options.add_special_tokens ? (b ? 3 : 2) : 0;
    const std::size_t total = a.size() + (b ? b->size() : 0) + specials;
    if (options.truncation && total > options.max_length) {
      if (options.max_length < specials)
        throw std::invalid_argument("encode_plus: max_length " + std::to_string(options.max_length) +
                                    " leaves no room for the " + std::to_string(specials) + " special tokens");
      std::size_t remove = total - options.max_length;
      if (!b) {
        a.resize(a.size() - remove);
      } else {
        // Equalise the two lengths first, then take from both, the extra one from the second sequence.
        const std::size_t la = a.size(), lb = b->size();
        const std::size_t gap = la > lb ? la - lb : lb - la;
        const std::size_t first = std::min(gap, remove), rest = remove - first;
        const std::size_t from_a = (la > lb ? first : 0) + rest / 2;
        const std::size_t from_b = (la > lb ? 0 : first) + (rest - rest / 2);
        a.resize(la - from_a);
        b->resize(lb - from_b);
      }
    }
    Encoding e;
    const std::size_t length = a.size() + (b ? b->size() : 0) + specials;
    e.input_ids.reserve(length);
    if (options.add_special_tokens) e.input_ids.push_back(cls_id_);
    e.input_ids.insert(e.input_ids.end(), a.begin(), a.end());
    if (options.add_special_tokens) e.input_ids.push_back(sep_id_);
    const std::size_t first_segment = e.input_ids.size();
    if (b) {
      e.input_ids.insert(e.input_ids.end(), b->begin(), b->end());
      if (options.add_special_tokens) e.input_ids.push_back(sep_id_);
    }
    e.token_type_ids.assign(e.input_ids.size(), 0);
    std::fill(e.token_type_ids.begin() + static_cast<std::ptrdiff_t>(first_segment), e.token_type_ids.end(), 1);
    e.attention_mask.assign(e.input_ids.size(), 1);
    return e;
  }

  // Right padding with [PAD], token type 0 and mask 0 (a longer encoding is left as it is).
  void pad_to(Encoding& e, std::size_t length) const {
    if (e.input_ids.size() >= length) return;
    e.input_ids.resize(length, pad_id_);
    e.token_type_ids.resize(length, 0);
    e.attention_mask.resize(length, 0);
  }

  BasicTokenizer basic_;
  std::vector<std::string> id_to_token_;
  TokenIndex index_;
  std::size_t max_token_bytes_ = 0;
  std::int64_t pad_id_ = 0, unk_id_ = 0, cls_id_ = 0, sep_id_ = 0, mask_id_ = 0;
};

}  // namespace eigenformer::tokenizers
