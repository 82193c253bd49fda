// BpeTrainer (include/eigenformer/tokenizers/bpe_trainer.hpp) against seed 000 §1.4's worked example
// (bpe_toy_corpus in tests/data/worked_examples.json): the initial pair counts, the merges with
// first-seen tie-breaking and the final segmentation after ten merges.
#include <doctest/doctest.h>

#include <eigenformer/tokenizers/bpe_trainer.hpp>
#include <map>
#include <string>
#include <vector>

#include "support/errors.hpp"
#include "support/fixtures.hpp"
#include "support/throws.hpp"

namespace {

namespace tk = eigenformer::tokenizers;
using Words = std::vector<std::string>;

const eftest::json& toy_corpus() { return eftest::worked_examples().at("bpe_toy_corpus"); }

}  // namespace

TEST_CASE("bpe trainer: the worked example's corpus is old, older, finest, lowest in that order") {
  // nlohmann::json keeps objects sorted by key, so the order above would be alphabetical; the seed's order
  // matters for ties, so the test states it and checks the counts against the fixture.
  const std::vector<tk::WordCount> seed_order{{"old", 7}, {"older", 3}, {"finest", 9}, {"lowest", 4}};
  for (const auto& [word, count] : seed_order) CHECK(toy_corpus().at("corpus").at(word).get<std::int64_t>() == count);
  CHECK(toy_corpus().at("corpus").size() == 4);
  CHECK(toy_corpus().at("end_of_word").get<std::string>() == "</w>");
}

TEST_CASE("bpe trainer: initial pair counts weighted by word frequency (e s 13, s t 13, o l 10, ...)") {
  const std::vector<tk::WordCount> corpus{{"old", 7}, {"older", 3}, {"finest", 9}, {"lowest", 4}};
  const auto counts = tk::initial_pair_counts(corpus);
  std::map<std::string, std::int64_t> got;
  for (const auto& p : counts) got[p.left + " " + p.right] = p.count;
  std::map<std::string, std::int64_t> expected;
  for (const auto& [pair, count] : toy_corpus().at("initial_pair_counts").items()) expected[pair] = count.get<std::int64_t>();
  CHECK(got == expected);
  CHECK(expected.size() == 15);
  // First-seen order: o l is the first pair of the first word.
  REQUIRE(counts.size() == 15);
  CHECK(counts[0] == tk::PairCount{"o", "l", 10});
  CHECK(counts[9] == tk::PairCount{"e", "s", 13});
}

TEST_CASE("bpe trainer: merges with first-seen tie-breaking and the final segmentation match the seed") {
  const std::vector<tk::WordCount> corpus{{"old", 7}, {"older", 3}, {"finest", 9}, {"lowest", 4}};
  const auto& expected_merges = toy_corpus().at("merges_first_seen_tiebreak");
  const auto result = tk::BpeTrainer({.merges = expected_merges.size()}).train(corpus);
  REQUIRE(result.history.size() == expected_merges.size());
  for (std::size_t i = 0; i < expected_merges.size(); ++i) {
    INFO("merge " << i);
    CHECK(result.history[i] == tk::BpeMerge{expected_merges[i][0].get<std::string>(),
                                            expected_merges[i][1].get<std::string>(),
                                            expected_merges[i][2].get<std::int64_t>()});
  }
  CHECK(result.history[0].left + result.history[0].right == "es");   // es before st, both 13
  CHECK(result.history[1].left + result.history[1].right == "est");

  const auto& expected_segmentation = toy_corpus().at("final_segmentation");
  REQUIRE(result.segmentation.size() == 4);
  // Not a structured binding: INFO captures its argument in a lambda, which clang 14 refuses for bindings.
  for (const auto& entry : result.segmentation) {
    const auto& [word, pieces] = entry;
    INFO(entry.first);
    CHECK(pieces == expected_segmentation.at(word).get<Words>());
    CHECK(result.model.encode_word(word) == pieces);  // applying merges by rank reproduces training
  }

  // Vocabulary: the characters and </w> in first-seen order, then one token per merge.
  const Words initial{"o", "l", "d", "</w>", "e", "r", "f", "i", "n", "s", "t", "w"};
  const auto& vocab = result.model.vocab();
  REQUIRE(vocab.size() == initial.size() + 10);
  CHECK(Words(vocab.begin(), vocab.begin() + 12) == initial);
  CHECK(Words(vocab.begin() + 12, vocab.end()) ==
        Words{"es", "est", "est</w>", "ol", "old", "fi", "fin", "finest</w>", "old</w>", "lo"});
}

TEST_CASE("bpe trainer: encoder on unseen words, ids, stopping rules") {
  const std::vector<tk::WordCount> corpus{{"old", 7}, {"older", 3}, {"finest", 9}, {"lowest", 4}};
  const auto model = tk::BpeTrainer({.merges = 10}).train(corpus).model;
  CHECK(model.encode_word("oldest") == Words{"old", "est</w>"});
  CHECK(model.encode_word("fold") == Words{"f", "old</w>"});
  CHECK(model.encode_word("lowest") == Words{"lo", "w", "est</w>"});
  CHECK(model.encode("old  finest\nlow") == Words{"old</w>", "finest</w>", "lo", "w", "</w>"});
  CHECK(model.encode_ids("old finest") == std::vector<std::int64_t>{20, 19});
  CHECK(model.encode_word("xyz") == Words{"x", "y", "z", "</w>"});
  CHECK(eftest::error_of<std::invalid_argument>([&] { model.encode_ids("oxo"); }) ==
        "BpeModel::encode_ids: \"x\" is not in the vocabulary (22 tokens)");

  // min_count stops before merging pairs that occur fewer times: the first nine merges have counts >= 7.
  CHECK(tk::BpeTrainer({.merges = 100, .min_count = 7}).train(corpus).history.size() == 9);
  // Without limits training ends when every word is one symbol.
  const auto all = tk::BpeTrainer({.merges = 100}).train(corpus);
  for (const auto& [word, pieces] : all.segmentation) CHECK(pieces == Words{word + "</w>"});
  CHECK_THROWS_EXACTLY(tk::BpeTrainer({.min_count = 0}), std::invalid_argument);
}

TEST_CASE("bpe trainer: word_frequencies counts in first-occurrence order; overlapping pairs; UTF-8") {
  const auto words = tk::word_frequencies("low lower low\tnewest  low\nnewest");
  REQUIRE(words.size() == 3);
  CHECK((words[0].word == "low" && words[0].count == 3));
  CHECK((words[1].word == "lower" && words[1].count == 1));
  CHECK((words[2].word == "newest" && words[2].count == 2));
  CHECK(tk::word_frequencies("  \n ").empty());

  // "aaa": the pair (a, a) occurs twice; merging replaces left to right without overlap.
  const auto r = tk::BpeTrainer({.merges = 1}).train({{"aaa", 1}});
  CHECK(r.history[0] == tk::BpeMerge{"a", "a", 2});
  CHECK(r.segmentation[0].second == Words{"aa", "a", "</w>"});

  // Characters are code points: "éé" has the pair (é, é), not byte pairs; a stray byte is a symbol alone.
  const auto u = tk::BpeTrainer({.merges = 1}).train({{"éé", 5}, {"a\xFF", 1}});
  CHECK(u.history[0] == tk::BpeMerge{"é", "é", 5});
  CHECK(u.model.vocab() == Words{"é", "</w>", "a", "\xFF", "éé"});
}

namespace {

// The trainer written the obvious way: recount every pair of every word before each merge, scanning the
// words in order and each word left to right, and take the first pair with the highest count.
std::vector<tk::BpeMerge> naive_bpe(const std::vector<tk::WordCount>& words, std::size_t merges) {
  std::vector<std::vector<std::string>> segs;
  for (const auto& w : words) {
    std::vector<std::string> s;
    for (const char c : w.word) s.emplace_back(1, c);  // ASCII corpus
    s.emplace_back("</w>");
    segs.push_back(std::move(s));
  }
  std::vector<tk::BpeMerge> history;
  while (history.size() < merges) {
    std::vector<std::pair<std::string, std::string>> order;
    std::map<std::pair<std::string, std::string>, std::int64_t> counts;
    for (std::size_t w = 0; w < segs.size(); ++w)
      for (std::size_t i = 0; i + 1 < segs[w].size(); ++i) {
        const auto key = std::pair(segs[w][i], segs[w][i + 1]);
        if (!counts.count(key)) order.push_back(key);
        counts[key] += words[w].count;
      }
    if (order.empty()) break;
    auto best = order.front();
    for (const auto& key : order)
      if (counts[key] > counts[best]) best = key;
    history.push_back({best.first, best.second, counts[best]});
    for (auto& s : segs) {
      std::vector<std::string> next;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best.first && s[i + 1] == best.second) {
          next.push_back(best.first + best.second);
          ++i;
        } else {
          next.push_back(s[i]);
        }
      }
      s = std::move(next);
    }
  }
  return history;
}

}  // namespace

TEST_CASE("bpe trainer: the incremental trainer equals a full recount at every merge (random corpus)") {
  // 400 pseudo-random words over "abcde" (so pairs repeat and ties are frequent), counts 1-5.
  std::uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  std::vector<tk::WordCount> words;
  for (int i = 0; i < 400; ++i) {
    std::string w;
    const int len = 1 + static_cast<int>(next() >> 28) % 8;
    for (int k = 0; k < len; ++k) w += static_cast<char>('a' + (next() >> 24) % 5);
    words.push_back({w, 1 + static_cast<std::int64_t>((next() >> 24) % 5)});
  }
  const auto expected = naive_bpe(words, 300);
  const auto result = tk::BpeTrainer({.merges = 300}).train(words);
  REQUIRE(result.history.size() == expected.size());
  CHECK(expected.size() > 200);  // the corpus is rich enough for many merges, with many ties
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("merge " << i);
    REQUIRE(result.history[i] == expected[i]);
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    INFO(words[i].word);
    CHECK(result.model.encode_word(words[i].word) == result.segmentation[i].second);
  }
}
