// Byte-pair encoding training as seed 000 §1.4 teaches it (Sennrich et al. 2016's word-level BPE):
//
//   1. word frequencies ("old" 7, "older" 3, "finest" 9, "lowest" 4);
//   2. each word becomes its characters plus an end-of-word marker: o l d </w>;
//   3. count every adjacent pair, weighted by the word's frequency (e s 13, s t 13, o l 10, ...);
//   4. merge the most frequent pair everywhere (e s -> es), recount, repeat;
//   5. the merges, in order, are the model; the vocabulary is the characters plus one token per merge.
//
//   auto result = BpeTrainer({.merges = 10}).train(word_frequencies("old old older ..."));
//   result.model.encode_word("lowest");   // {"lo", "w", "est</w>"}
//
// Ties: when several pairs share the highest count, the one seen first wins, reading the words in their
// given order (first occurrence in the corpus for word_frequencies) and each word left to right, in the
// current segmentation. This is what Python's max() over a dict of pair counts built by such a scan returns,
// and it gives the seed's order: "es" before "st" (both 13), "ol" before "ld" (both 10).
// Merging a pair replaces its occurrences left to right without overlap ("a a a" + (a, a) -> "aa a").
// Characters are UTF-8 code points (an ill-formed byte is a character of its own). Training is incremental:
// after a merge only the words that contained the pair are recounted.
//
// Encoding a word applies the learned merges lowest rank first (the order they were learned), which
// reproduces the training segmentation of every training word; characters never seen in training stay
// single-character tokens (encode_ids throws for them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace eigenformer::tokenizers {

// A word and how often it occurs.
struct WordCount {
  std::string word;
  std::int64_t count;
};

// Whitespace-separated words (ASCII space, tab, newline, carriage return, vertical tab, form feed) with their
// counts, in order of first occurrence.
inline std::vector<WordCount> word_frequencies(std::string_view text) {
  std::vector<WordCount> out;
  std::unordered_map<std::string_view, std::size_t> index;
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  for (std::size_t i = 0; i < text.size();) {
    while (i < text.size() && is_space(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i == start) break;
    const std::string_view w = text.substr(start, i - start);
    const auto [it, inserted] = index.emplace(w, out.size());
    if (inserted) out.push_back({std::string(w), 0});
    ++out[it->second].count;
  }
  return out;
}

namespace detail {

// The UTF-8 characters of s: each well-formed sequence whole, each other byte alone.
inline std::vector<std::string> utf8_characters(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = b < 0x80 ? 1 : b >= 0xC2 && b < 0xE0 ? 2 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xF0 && b < 0xF5 ? 4 : 1;
    if (i + len > s.size()) len = 1;
    for (std::size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) len = 1;
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace detail

// A pair of adjacent symbols with its frequency-weighted count.
struct PairCount {
  std::string left, right;
  std::int64_t count;
  bool operator==(const PairCount&) const = default;
};

// Adjacent-pair counts of the words split into characters plus `end_of_word`, in first-seen order.
inline std::vector<PairCount> initial_pair_counts(const std::vector<WordCount>& words,
                                                  std::string_view end_of_word = "</w>") {
  std::vector<PairCount> out;
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  for (const auto& [word, count] : words) {
    auto symbols = detail::utf8_characters(word);
    symbols.emplace_back(end_of_word);
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto [it, inserted] = index.emplace(std::pair(symbols[i], symbols[i + 1]), out.size());
      if (inserted) out.push_back({symbols[i], symbols[i + 1], 0});
      out[it->second].count += count;
    }
  }
  return out;
}

// Learned merges and the encoder that applies them.
class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(std::vector<std::pair<std::string, std::string>> merges, std::vector<std::string> vocab,
           std::string end_of_word)
      : merges_(std::move(merges)), vocab_(std::move(vocab)), end_of_word_(std::move(end_of_word)) {
    for (std::size_t r = 0; r < merges_.size(); ++r) ranks_.emplace(merges_[r].first + '\0' + merges_[r].second, r);
    for (std::size_t i = 0; i < vocab_.size(); ++i) ids_.emplace(vocab_[i], static_cast<std::int64_t>(i));
  }

  // Merges in the order they were learned (rank 0 first).
  const std::vector<std::pair<std::string, std::string>>& merges() const noexcept { return merges_; }
  // The characters (first-seen order, the end-of-word marker where it first appears), then each merge's
  // result in merge order (a result already in the vocabulary is not repeated). Ids are positions.
  const std::vector<std::string>& vocab() const noexcept { return vocab_; }
  const std::string& end_of_word() const noexcept { return end_of_word_; }

  std::optional<std::int64_t> token_to_id(std::string_view token) const {
    const auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

  // One word: its characters and the end-of-word marker, merged by rank until no learned pair is left.
  std::vector<std::string> encode_word(std::string_view word) const {
    std::vector<std::string> symbols = detail::utf8_characters(word);
    symbols.push_back(end_of_word_);
    while (symbols.size() > 1) {
      std::size_t best = merges_.size();
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto it = ranks_.find(symbols[i] + '\0' + symbols[i + 1]);
        if (it != ranks_.end()) best = std::min(best, it->second);
      }
      if (best == merges_.size()) break;
      const auto& [left, right] = merges_[best];
      std::vector<std::string> next;
      next.reserve(symbols.size());
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          next.push_back(left + right);
          ++i;
        } else {
          next.push_back(std::move(symbols[i]));
        }
      }
      symbols = std::move(next);
    }
    return symbols;
  }

  // Whitespace-separated words, each encoded.
  std::vector<std::string> encode(std::string_view text) const {
    std::vector<std::string> out;
    for (const auto& wc : split_words(text)) {
      auto pieces = encode_word(wc);
      out.insert(out.end(), std::make_move_iterator(pieces.begin()), std::make_move_iterator(pieces.end()));
    }
    return out;
  }

  // Ids of encode(text); throws std::invalid_argument naming a token that is not in the vocabulary (a
  // character never seen in training).
  std::vector<std::int64_t> encode_ids(std::string_view text) const {
    std::vector<std::int64_t> ids;
    for (const auto& token : encode(text)) {
      const auto id = token_to_id(token);
      if (!id) throw std::invalid_argument("BpeModel::encode_ids: \"" + token + "\" is not in the vocabulary (" +
                                           std::to_string(vocab_.size()) + " tokens)");
      ids.push_back(*id);
    }
    return ids;
  }

 private:
  static std::vector<std::string> split_words(std::string_view text) {
    std::vector<std::string> words;
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    for (std::size_t i = 0; i < text.size();) {
      while (i < text.size() && is_space(text[i])) ++i;
      const std::size_t start = i;
      while (i < text.size() && !is_space(text[i])) ++i;
      if (i > start) words.emplace_back(text.substr(start, i - start));
    }
    return words;
  }

  std::vector<std::pair<std::string, std::string>> merges_;
  std::vector<std::string> vocab_;
  std::string end_of_word_ = "</w>";
  std::unordered_map<std::string, std::size_t> ranks_;  // "left\0right" -> rank
  std::unordered_map<std::string, std::int64_t> ids_;
};

// One training step: the pair merged and its count at that moment.
struct BpeMerge {
  std::string left, right;
  std::int64_t count;
  bool operator==(const BpeMerge&) const = default;
};

struct BpeTrainResult {
  BpeModel model;
  std::vector<BpeMerge> history;  // one entry per merge, in order
  // Each training word's final segmentation, in the order of the input.
  std::vector<std::pair<std::string, std::vector<std::string>>> segmentation;
};

class BpeTrainer {
 public:
  struct Options {
    std::size_t merges = 1000;      // stop after this many merges
    std::int64_t min_count = 1;     // or when the best pair occurs fewer times than this
    std::string end_of_word = "</w>";
  };

  BpeTrainer() = default;
  explicit BpeTrainer(Options options) : options_(std::move(options)) {
    if (options_.min_count < 1) throw std::invalid_argument("BpeTrainer: min_count must be at least 1");
  }

  // Words with non-positive counts are ignored; a word listed twice counts twice.
  BpeTrainResult train(const std::vector<WordCount>& words) const {
    State s(options_.end_of_word);
    for (const auto& [word, count] : words)
      if (count > 0) s.add_word(word, count);
    s.count_all();
    BpeTrainResult result;
    while (result.history.size() < options_.merges) {
      const auto best = s.best();
      if (!best || best->count < options_.min_count) break;
      result.history.push_back({s.symbol(best->left), s.symbol(best->right), best->count});
      s.merge(best->left, best->right);
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& m : result.history) merges.emplace_back(m.left, m.right);
    std::vector<std::string> vocab = s.initial_symbols();
    for (const auto& m : result.history)
      if (std::find(vocab.begin(), vocab.end(), m.left + m.right) == vocab.end()) vocab.push_back(m.left + m.right);
    result.model = BpeModel(std::move(merges), std::move(vocab), options_.end_of_word);
    result.segmentation = s.segmentation();
    return result;
  }

 private:
  // Symbols are interned as ints; pairs are keyed by (left << 32 | right).
  class State {
   public:
    struct Best {
      std::int32_t left, right;
      std::int64_t count;
    };

    explicit State(std::string end_of_word) : end_of_word_(std::move(end_of_word)) {}

    void add_word(std::string_view word, std::int64_t count) {
      Word w;
      w.text = std::string(word);
      w.count = count;
      for (const auto& c : detail::utf8_characters(word)) w.symbols.push_back(intern(c));
      w.symbols.push_back(intern(end_of_word_));
      words_.push_back(std::move(w));
    }

    void count_all() {
      for (std::size_t wi = 0; wi < words_.size(); ++wi) add_pairs(wi, +1);
      for (auto& [key, stat] : stats_) refresh(key, stat);
    }

    std::optional<Best> best() const {
      if (order_.empty()) return std::nullopt;
      const auto& [neg_count, word, pos, key] = *order_.begin();
      return Best{static_cast<std::int32_t>(key >> 32), static_cast<std::int32_t>(key & 0xFFFFFFFFu), -neg_count};
    }

    // Replaces (left, right) by their concatenation in every word that has the pair.
    void merge(std::int32_t left, std::int32_t right) {
      const std::uint64_t key = make_key(left, right);
      const std::int32_t merged = intern(symbols_[left] + symbols_[right]);
      std::vector<std::size_t> affected;
      for (const auto& [wi, n] : stats_.at(key).words) affected.push_back(wi);
      std::unordered_set<std::uint64_t> dirty;
      std::vector<std::pair<std::uint64_t, int>> delta;  // (pair, occurrences gained or lost) in one word
      for (const std::size_t wi : affected) {
        auto& syms = words_[wi].symbols;
        delta.clear();
        for (std::size_t i = 0; i + 1 < syms.size(); ++i) delta.emplace_back(make_key(syms[i], syms[i + 1]), -1);
        std::vector<std::int32_t> next;
        next.reserve(syms.size());
        for (std::size_t i = 0; i < syms.size(); ++i) {
          if (i + 1 < syms.size() && syms[i] == left && syms[i + 1] == right) {
            next.push_back(merged);
            ++i;
          } else {
            next.push_back(syms[i]);
          }
        }
        syms = std::move(next);
        for (std::size_t i = 0; i + 1 < syms.size(); ++i) delta.emplace_back(make_key(syms[i], syms[i + 1]), +1);
        // Every pair of the word is dirty (its first position may have moved); only changed counts touch stats.
        std::sort(delta.begin(), delta.end());
        for (std::size_t i = 0; i < delta.size();) {
          const std::uint64_t k = delta[i].first;
          int d = 0;
          for (; i < delta.size() && delta[i].first == k; ++i) d += delta[i].second;
          dirty.insert(k);
          if (d != 0) add_occurrences(k, wi, d);
        }
      }
      for (const std::uint64_t k : dirty) {
        auto it = stats_.find(k);
        if (it == stats_.end()) continue;
        if (it->second.count == 0) {
          order_.erase(it->second.position);
          stats_.erase(it);
        } else {
          refresh(k, it->second);
        }
      }
    }

    const std::string& symbol(std::int32_t id) const { return symbols_[static_cast<std::size_t>(id)]; }

    // The characters and the end-of-word marker, in first-seen order.
    std::vector<std::string> initial_symbols() const {
      return {symbols_.begin(), symbols_.begin() + static_cast<std::ptrdiff_t>(initial_count_)};
    }

    std::vector<std::pair<std::string, std::vector<std::string>>> segmentation() const {
      std::vector<std::pair<std::string, std::vector<std::string>>> out;
      for (const auto& w : words_) {
        std::vector<std::string> pieces;
        for (const auto s : w.symbols) pieces.push_back(symbols_[static_cast<std::size_t>(s)]);
        out.emplace_back(w.text, std::move(pieces));
      }
      return out;
    }

   private:
    struct Word {
      std::string text;
      std::int64_t count;
      std::vector<std::int32_t> symbols;
    };
    // (-count, first word, first position in that word, key): the set's first element is the pair to merge.
    using Rank = std::tuple<std::int64_t, std::size_t, std::size_t, std::uint64_t>;
    struct PairStat {
      std::int64_t count = 0;
      std::map<std::size_t, std::int64_t> words;  // word index -> occurrences
      bool ranked = false;
      std::set<Rank>::iterator position;
    };

    static std::uint64_t make_key(std::int32_t a, std::int32_t b) {
      return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
    }

    std::int32_t intern(const std::string& s) {
      const auto [it, inserted] = ids_.emplace(s, static_cast<std::int32_t>(symbols_.size()));
      if (inserted) {
        symbols_.push_back(s);
        if (!counting_started_) initial_count_ = symbols_.size();
      }
      return it->second;
    }

    void add_pairs(std::size_t wi, int sign) {
      const auto& w = words_[wi];
      for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) add_occurrences(make_key(w.symbols[i], w.symbols[i + 1]), wi, sign);
    }

    void add_occurrences(std::uint64_t key, std::size_t wi, int n) {
      counting_started_ = true;
      auto& st = stats_[key];
      st.count += n * words_[wi].count;
      auto& occurrences = st.words[wi];
      occurrences += n;
      if (occurrences == 0) st.words.erase(wi);
    }

    // Re-inserts the pair in the order with its current count and first occurrence.
    void refresh(std::uint64_t key, PairStat& st) {
      if (st.ranked) order_.erase(st.position);
      const std::size_t wi = st.words.begin()->first;
      const auto& syms = words_[wi].symbols;
      const auto a = static_cast<std::int32_t>(key >> 32), b = static_cast<std::int32_t>(key & 0xFFFFFFFFu);
      std::size_t pos = 0;
      while (pos + 1 < syms.size() && !(syms[pos] == a && syms[pos + 1] == b)) ++pos;
      st.position = order_.insert({-st.count, wi, pos, key}).first;
      st.ranked = true;
    }

    std::string end_of_word_;
    std::vector<Word> words_;
    std::vector<std::string> symbols_;
    std::unordered_map<std::string, std::int32_t> ids_;
    std::size_t initial_count_ = 0;
    bool counting_started_ = false;
    std::unordered_map<std::uint64_t, PairStat> stats_;
    std::set<Rank> order_;
  };

  Options options_;
};

}  // namespace eigenformer::tokenizers
