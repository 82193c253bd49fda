// BertTokenizer (include/eigenformer/tokenizers/wordpiece.hpp).
//
// References: tests/data/bert_reference.json, written by tools/reference/tokenizers/bert_reference.py, an
// independent Python implementation of BERT's published algorithm (unicodedata, Unicode 14.0): WordPiece ids
// of all 9,613 SST-2 sentences (per-chunk SHA-256 + the first 200 in full), of every line of
// tests/data/tokenizer_hard_cases.txt, and of a sweep over every assigned code point in four contexts. The
// basic-tokenizer half of the sweep needs no vocabulary and runs in the unit suite; everything that reads
// bert-base-uncased/vocab.txt or SST-2 is in the "data" suite. Agreement must be exact (ids are integers).
// Hugging Face's own tokenizer is the second reference: tests/data/bert_hf_reference.json, written by
// tools/reference/tokenizers/make_bert_hf_reference.mjs with npm @huggingface/tokenizers, holds its encode,
// encode_plus (truncation and padding applied by transformers' rules), batch and decode results on a small
// hand-made vocabulary and on the tiny BERT directories' vocabulary, and its ids of every hard-case line
// (those run without the data set; on bert-base-uncased in the "data" suite).
#include <doctest/doctest.h>

#include <eigenformer/tokenizers/wordpiece.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "support/cases.hpp"
#include "support/data_dir.hpp"
#include "support/errors.hpp"
#include "support/files.hpp"
#include "support/fixtures.hpp"
#include "support/paths.hpp"
#include "support/sha256.hpp"
#include "support/throws.hpp"

using eftest::error_of;

using eftest::read_bytes;

namespace {

namespace tk = eigenformer::tokenizers;
using eftest::json;
using Ids = std::vector<std::int64_t>;
using Words = std::vector<std::string>;

// The sweep has one text per Unicode plane (0 to 16). Of the byte cases (invalid UTF-8, NUL, invalid bytes
// next to a capital sigma) bert_reference.py writes 21; the tests ask for at least 20.
constexpr std::size_t unicode_planes = 17;
constexpr std::size_t min_byte_cases = 20;

const json& wordpiece_reference() {
  static const json j = eftest::load_fixture("bert_reference.json");
  return j;
}

using eftest::data_file;

const tk::BertTokenizer& bert_base_uncased() {
  static const auto tok = tk::BertTokenizer::from_file(data_file("bert-base-uncased/vocab.txt"));
  return tok;
}

// Lines split on '\n' only, a final empty line dropped (as the reference script splits them).
std::vector<std::string> byte_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::size_t end = nl == std::string::npos ? text.size() : nl;
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

std::string ids_text(const Ids& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

// The reference's sweep input for one plane: for each code point c outside the skipped ranges, the words
// "A" c "b", c U+03A3, "A" c U+03A3 and "A" U+03A3 c, joined by single spaces (planes 15 and 16, private use
// throughout, sampled: every 1024th code point and U+xFFFD).
std::string sweep_text(char32_t plane, const json& skip_ranges) {
  std::string text;
  std::size_t r = 0;
  const std::string sigma = "\xCE\xA3";
  for (char32_t cp = plane << 16; cp <= ((plane << 16) | 0xFFFF); ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    while (r < skip_ranges.size() && skip_ranges[r][1].get<char32_t>() < cp) ++r;
    if (r < skip_ranges.size() && skip_ranges[r][0].get<char32_t>() <= cp) continue;
    if (cp >= 0xF0000 && (cp & 0x3FF) != 0 && (cp & 0xFFFF) != 0xFFFD) continue;  // private use: sampled
    const std::string c = tk::unicode::to_utf8(cp);
    if (!text.empty()) text += ' ';
    text += "A" + c + "b " + c + sigma + " A" + c + sigma + " A" + sigma + c;
  }
  return text;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// tests/data/bert_hf_reference.json, written by tools/reference/tokenizers/make_bert_hf_reference.mjs: what
// Hugging Face's own BERT tokenizer (npm @huggingface/tokenizers) gives for encode, encode_plus, batches,
// decode and every hard-case line, on a hand-made vocabulary ("toy", held in the file) and on
// tests/data/bert_tiny_cls_hf/vocab.txt ("tiny"); the hard cases also on bert-base-uncased (data suite).
constexpr const char* hf_file = "bert_hf_reference.json";

const json& hf_reference() {
  static const json j = eftest::load_fixture(hf_file);
  return j;
}

// The cases of one kind, and how many the file declares, so each loop can check it ran all of them.
std::vector<json> hf_cases(const std::string& kind) {
  std::vector<json> out;
  for (const json& c : hf_reference().at("cases"))
    if (c.at("kind") == kind) out.push_back(c);
  return out;
}
std::size_t hf_declared(const std::string& kind) { return eftest::declared_cases(hf_reference(), hf_file, "kind", kind); }

// A vocabulary small enough to reason about by hand (the script lists why each token is there).
const tk::BertTokenizer& toy_tokenizer() {
  static const tk::BertTokenizer tok(hf_reference().at("vocabularies").at("toy").at("tokens").get<Words>());
  return tok;
}

// The tiny BERT directories' 60 real words, as the script read them (same SHA-256).
const tk::BertTokenizer& tiny_bert_tokenizer() {
  static const tk::BertTokenizer tok = [] {
    const json& v = hf_reference().at("vocabularies").at("tiny");
    const auto path = std::filesystem::path(EIGENFORMER_TEST_DATA_DIR) / "bert_tiny_cls_hf" / "vocab.txt";
    REQUIRE_MESSAGE(eftest::sha256_hex(read_bytes(path)) == v.at("sha256").get<std::string>(),
                    path.string() << " changed after " << hf_file << " was written: rerun make_bert_hf_reference.mjs");
    return tk::BertTokenizer::from_file(path);
  }();
  return tok;
}

const tk::BertTokenizer& hf_tokenizer(const json& c) {
  const auto vocab = c.at("vocab").get<std::string>();
  if (vocab == "toy") return toy_tokenizer();
  if (vocab == "tiny") return tiny_bert_tokenizer();
  throw std::runtime_error(std::string(hf_file) + ": unknown vocabulary \"" + vocab + "\"");
}

tk::EncodeOptions encode_options(const json& o) {
  const auto padding = o.at("padding").get<std::string>();
  tk::EncodeOptions out{.max_length = o.at("max_length").get<std::size_t>(),
                        .truncation = o.at("truncation").get<bool>(),
                        .add_special_tokens = o.at("add_special_tokens").get<bool>()};
  if (padding == "none") out.padding = tk::Padding::none;
  else if (padding == "longest") out.padding = tk::Padding::longest;
  else if (padding == "max_length") out.padding = tk::Padding::max_length;
  else throw std::runtime_error(std::string(hf_file) + ": unknown padding \"" + padding + "\"");
  return out;
}

std::optional<std::string> optional_text(const json& v) {
  return v.is_null() ? std::nullopt : std::optional(v.get<std::string>());
}

Ids flat(const json& rows) {
  Ids out;
  for (const json& r : rows) for (const json& v : r) out.push_back(v.get<std::int64_t>());
  return out;
}

// A temporary file with the given bytes, removed at scope exit.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name, const std::string& bytes)
      : path(std::filesystem::temp_directory_path() / ("eigenformer_test_" + name)) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("support: SHA-256 known answers (FIPS 180-4 examples)") {
  CHECK(eftest::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(eftest::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(eftest::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  eftest::Sha256 split;  // the same bytes fed in pieces that straddle the 64-byte blocks
  split.update("abcdbcdecdefdefgefghfghighijhijkijkl").update("jklmklmnlmnomnopnopq");
  CHECK(split.hexdigest() == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("wordpiece: basic tokenizer, hand-verified cases (each also run through bert_reference.py)") {
  const tk::BasicTokenizer lower;
  CHECK(lower.tokenize("Héllo") == Words{"hello"});
  CHECK(lower.tokenize("HÉLLO wörld") == Words{"hello", "world"});
  CHECK(lower.tokenize("Crème Brûlée") == Words{"creme", "brulee"});
  CHECK(lower.tokenize("e\xCC\x81") == Words{"e"});  // e + combining acute, already decomposed
  CHECK(lower.tokenize("ＨＥＬＬＯ") == Words{"ｈｅｌｌｏ"});  // NFD does not fold width (NFKC would)
  CHECK(lower.tokenize("你好 world") == Words{"你", "好", "world"});
  CHECK(lower.tokenize("don't!") == Words{"don", "'", "t", "!"});
  CHECK(lower.tokenize("$5+3^2`") == Words{"$", "5", "+", "3", "^", "2", "`"});  // ASCII symbols split too
  CHECK(lower.tokenize("a\tb\nc\rd") == Words{"a", "b", "c", "d"});
  CHECK(lower.tokenize(std::string("a\0b", 3)) == Words{"ab"});  // NUL dropped, no split
  CHECK(lower.tokenize("a\x07" "b") == Words{"ab"});                // Cc dropped
  CHECK(lower.tokenize("x\xC2\x85y") == Words{"xy"});             // U+0085 is Cc, not whitespace, for BERT
  CHECK(lower.tokenize("a\xE2\x80\x8B" "b") == Words{"ab"});       // U+200B ZERO WIDTH SPACE is Cf
  CHECK(lower.tokenize("a\xC2\xA0" "b") == Words{"a", "b"});       // U+00A0 is Zs
  CHECK(lower.tokenize("a\xE2\x80\xA8" "b") == Words{"a", "b"});   // U+2028 (Zl) splits in str.split()
  CHECK(lower.tokenize("a\xEF\xBF\xBD" "b") == Words{"ab"});       // U+FFFD dropped
  CHECK(lower.tokenize("a\xEE\x80\x80" "b") == Words{"a\xEE\x80\x80" "b"});  // private use (Co) kept
  CHECK(lower.tokenize("a\xCD\xB8" "b") == Words{"a\xCD\xB8" "b"});  // unassigned U+0378 kept
  SUBCASE("invalid UTF-8 is dropped like U+FFFD, never throws, and does not split the word") {
    CHECK(lower.tokenize("ab\xFF" "cd") == Words{"abcd"});
    CHECK(lower.tokenize("\xE2\x82x") == Words{"x"});          // truncated sequence: the 'x' survives
    CHECK(lower.tokenize("\xC0\xAFz") == Words{"z"});          // overlong '/'
    CHECK(lower.tokenize("\xED\xA0\x80q") == Words{"q"});      // encoded surrogate
    CHECK(lower.tokenize("\xF4\x90\x80\x80") == Words{});      // above U+10FFFF
  }
  SUBCASE("lower-casing is Python's str.lower()") {
    CHECK(lower.tokenize("ΟΔΟΣ") == Words{"οδος"});            // final sigma
    CHECK(lower.tokenize("ΟΔΟΣ.") == Words{"οδος", "."});      // '.' is case-ignorable: still final
    CHECK(lower.tokenize("ΣΑ") == Words{"σα"});
    CHECK(lower.tokenize("İstanbul") == Words{"istanbul"});    // U+0130 -> i + U+0307 -> i
  }
  const tk::BasicTokenizer cased(false);
  CHECK(cased.tokenize("Héllo, WORLD") == Words{"Héllo", ",", "WORLD"});
  CHECK(cased.tokenize("ΟΔΟΣ") == Words{"ΟΔΟΣ"});
}

TEST_CASE("wordpiece: basic tokenizer on invalid UTF-8 and NUL equals the reference (byte cases)") {
  const tk::BasicTokenizer basic;
  std::size_t ran = 0;
  for (const json& c : wordpiece_reference().at("byte_cases")) {
    INFO("bytes " << c.at("hex").get<std::string>());
    CHECK(basic.tokenize(from_hex(c.at("hex").get<std::string>())) == c.at("tokens").get<Words>());
    ++ran;
  }
  eftest::check_ran_at_least(ran, min_byte_cases, "byte cases");
}

TEST_CASE("wordpiece: basic tokenizer equals the reference on every assigned code point in four contexts") {
  const json& sweep = wordpiece_reference().at("sweep");
  const json& skip = sweep.at("skip_ranges");
  const tk::BasicTokenizer basic;
  std::vector<std::string> words;
  std::size_t ran = 0;
  for (const json& plane : sweep.at("planes")) {
    ++ran;
    const auto p = plane.at("plane").get<char32_t>();
    INFO("plane " << static_cast<unsigned>(p) << " (dump the reference with bert_reference.py --dump-sweep LO HI)");
    words.clear();
    basic.tokenize_into(sweep_text(p, skip), words);
    std::string joined;
    for (std::size_t i = 0; i < words.size(); ++i) {
      if (i) joined += '\n';
      joined += words[i];
    }
    CHECK(words.size() == plane.at("tokens").get<std::size_t>());
    CHECK(eftest::sha256_hex(joined) == plane.at("tokens_sha256").get<std::string>());
  }
  eftest::check_ran(ran, unicode_planes, "code point sweep planes");
}

TEST_CASE("wordpiece: encode and tokenize equal Hugging Face's tokenizer (hand-made and tiny vocabularies)") {
  std::size_t ran = 0;
  for (const json& c : hf_cases("encode")) {
    ++ran;
    const auto& tok = hf_tokenizer(c);
    const auto text = c.at("text").get<std::string>();
    const bool specials = c.at("add_special_tokens").get<bool>();
    INFO(c.at("vocab").get<std::string>() << " \"" << text << "\" (" << c.at("note").get<std::string>() << ")");
    const Ids ids = tok.encode(text, specials);
    CHECK(ids == c.at("ids").get<Ids>());
    if (!specials) CHECK(tok.tokenize(text) == c.at("tokens").get<Words>());
    Words spelled;
    for (const auto id : ids) spelled.push_back(tok.id_to_token(id));
    CHECK(spelled == c.at("tokens").get<Words>());
  }
  eftest::check_ran(ran, hf_declared("encode"), "encode cases");
}

TEST_CASE("wordpiece: vocabulary lookups and special ids on the hand-made vocabulary") {
  const auto& tok = toy_tokenizer();
  const auto tokens = hf_reference().at("vocabularies").at("toy").at("tokens").get<Words>();
  const auto id_of = [&](const std::string& t) {
    return static_cast<std::int64_t>(std::find(tokens.begin(), tokens.end(), t) - tokens.begin());
  };
  CHECK(tok.vocab_size() == tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    CHECK(tok.token_to_id(tokens[i]) == static_cast<std::int64_t>(i));
    CHECK(tok.id_to_token(static_cast<std::int64_t>(i)) == tokens[i]);
  }
  CHECK_FALSE(tok.token_to_id("able").has_value());  // only "##able" is in it
  CHECK(tok.pad_id() == id_of("[PAD]"));
  CHECK(tok.unk_id() == id_of("[UNK]"));
  CHECK(tok.cls_id() == id_of("[CLS]"));
  CHECK(tok.sep_id() == id_of("[SEP]"));
  CHECK(tok.mask_id() == id_of("[MASK]"));
}

TEST_CASE("wordpiece: decode equals Hugging Face's WordPiece decoder (no clean-up, special tokens kept)") {
  std::size_t ran = 0;
  for (const json& c : hf_cases("decode")) {
    ++ran;
    INFO(c.at("vocab").get<std::string>() << " " << c.at("ids").dump() << " (" << c.at("note").get<std::string>() << ")");
    CHECK(hf_tokenizer(c).decode(c.at("ids").get<Ids>()) == c.at("text").get<std::string>());
  }
  eftest::check_ran(ran, hf_declared("decode"), "decode cases");
  CHECK(toy_tokenizer().decode(Ids{}).empty());  // the JavaScript decoder refuses an empty list; nothing to join
}

TEST_CASE("wordpiece: encode_plus equals Hugging Face's (specials, token types, truncation, padding)") {
  std::size_t ran = 0;
  for (const json& c : hf_cases("encode_plus")) {
    ++ran;
    const auto& tok = hf_tokenizer(c);
    const auto text = c.at("text").get<std::string>();
    const auto pair = optional_text(c.at("text_pair"));
    INFO(c.at("vocab").get<std::string>() << " \"" << text << "\" / " << c.at("text_pair").dump() << " "
                                         << c.at("options").dump() << " (" << c.at("note").get<std::string>() << ")");
    const auto e = tok.encode_plus(text, pair, encode_options(c.at("options")));
    CHECK(e.input_ids == c.at("input_ids").get<Ids>());
    CHECK(e.token_type_ids == c.at("token_type_ids").get<Ids>());
    CHECK(e.attention_mask == c.at("attention_mask").get<Ids>());
  }
  eftest::check_ran(ran, hf_declared("encode_plus"), "encode_plus cases");
}

TEST_CASE("wordpiece: encode_plus refuses a max_length below the special tokens") {
  // Our own rule (transformers logs an error and returns the sequence untruncated): the message is ours.
  const auto msg =
      error_of<std::invalid_argument>([] { toy_tokenizer().encode_plus("hello", "world", {.max_length = 2, .truncation = true}); });
  CHECK(msg.find("max_length 2") != std::string::npos);
  CHECK(msg.find("3 special tokens") != std::string::npos);
}

TEST_CASE("wordpiece: encode_batch gives [batch, length] tensors equal to Hugging Face's rows") {
  std::size_t ran = 0;
  for (const json& c : hf_cases("batch")) {
    ++ran;
    const auto texts = c.at("texts").get<std::vector<std::string>>();
    const auto pairs = c.at("pairs").get<std::vector<std::string>>();
    INFO(c.at("vocab").get<std::string>() << " " << c.at("texts").dump() << " / " << c.at("pairs").dump() << " "
                                         << c.at("options").dump());
    const auto b = hf_tokenizer(c).encode_batch(texts, pairs, encode_options(c.at("options")));
    const auto& rows = c.at("input_ids");
    REQUIRE(b.input_ids.shape() ==
            eigenformer::Shape<2>{static_cast<eigenformer::index_t>(rows.size()),
                                  static_cast<eigenformer::index_t>(rows.at(0).size())});
    CHECK(b.input_ids.to_vector() == flat(rows));
    CHECK(b.token_type_ids.to_vector() == flat(c.at("token_type_ids")));
    CHECK(b.attention_mask.to_vector() == flat(c.at("attention_mask")));
  }
  eftest::check_ran(ran, hf_declared("batch"), "batch cases");

  const auto& tok = toy_tokenizer();
  const std::vector<std::string> texts{"hello", "hello world !"};
  CHECK(error_of<std::invalid_argument>([&] { tok.encode_batch(texts, {}, {.padding = tk::Padding::none}); })
            .find("use Padding::longest") != std::string::npos);
  CHECK(error_of<std::invalid_argument>([&] { tok.encode_batch(texts, std::vector<std::string>{"x"}); }).find("2 texts but 1 pairs") !=
        std::string::npos);
}

// Hard cases: Hugging Face's ids of each line, or, on the lines where Hugging Face and the Python reference
// (Google's rules) differ, the Python reference's, which eigenformer follows; each difference is listed in
// tools/reference/README.md. The file must be the one the script read.
static void check_hard_cases(const tk::BertTokenizer& tok, const std::string& vocab) {
  const std::string file = read_bytes(std::filesystem::path(EIGENFORMER_TEST_DATA_DIR) / "tokenizer_hard_cases.txt");
  REQUIRE_MESSAGE(eftest::sha256_hex(file) == hf_reference().at("hard_cases_sha256").get<std::string>(),
                  "tests/data/tokenizer_hard_cases.txt changed after " << hf_file
                      << " was written: rerun tools/reference/tokenizers/make_bert_hf_reference.mjs");
  const auto lines = byte_lines(file);
  std::size_t ran = 0, differ = 0;
  for (const json& c : hf_cases("hard_case")) {
    if (c.at("vocab") != vocab) continue;
    ++ran;
    const auto n = c.at("line").get<std::size_t>();
    REQUIRE(n >= 1);
    REQUIRE(n <= lines.size());
    INFO(vocab << ": tokenizer_hard_cases.txt:" << n);
    if (c.contains("python_ids")) {
      ++differ;
      CHECK(tok.encode(lines[n - 1]) == c.at("python_ids").get<Ids>());
    } else {
      CHECK(tok.encode(lines[n - 1]) == c.at("ids").get<Ids>());
    }
  }
  eftest::check_ran(ran, lines.size(), vocab + " hard-case lines");
  CHECK(differ == hf_reference().at("differs").at(vocab).get<std::size_t>());
}

TEST_CASE("wordpiece: every hard-case line equals Hugging Face's tokenizer on the tiny vocabulary") {
  check_hard_cases(tiny_bert_tokenizer(), "tiny");
}

TEST_CASE("wordpiece: bad vocabularies and ids throw naming the file and line, or the id and size") {
  SUBCASE("missing file") {
    const auto msg = error_of<tk::vocab_error>([] { tk::BertTokenizer::from_file("/nonexistent/dir/vocab.txt"); });
    CHECK(msg == "/nonexistent/dir/vocab.txt: cannot open the vocabulary file");
  }
  SUBCASE("empty file") {
    const TempFile f("empty_vocab.txt", "");
    CHECK(error_of<tk::vocab_error>([&] { tk::BertTokenizer::from_file(f.path); }) ==
          f.path.string() + ": empty file, expected one token per line");
  }
  SUBCASE("duplicate token") {
    const TempFile f("dup_vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nhello\n");
    CHECK(error_of<tk::vocab_error>([&] { tk::BertTokenizer::from_file(f.path); }) ==
          f.path.string() + ":8: duplicate token \"hello\" (first on line 6)");
  }
  SUBCASE("blank line") {
    const TempFile f("blank_vocab.txt", "[PAD]\n[UNK]\n\n[CLS]\n");
    CHECK(error_of<tk::vocab_error>([&] { tk::BertTokenizer::from_file(f.path); }) == f.path.string() + ":3: empty token (blank line)");
  }
  SUBCASE("invalid UTF-8") {
    const TempFile f("utf8_vocab.txt", "[PAD]\n[UNK]\nab\xFF\n");
    CHECK(error_of<tk::vocab_error>([&] { tk::BertTokenizer::from_file(f.path); }) ==
          f.path.string() + ":3: invalid UTF-8 at byte 2 of the token");
  }
  SUBCASE("missing special token") {
    const TempFile f("nomask_vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
    CHECK(error_of<tk::vocab_error>([&] { tk::BertTokenizer::from_file(f.path); }).starts_with(f.path.string() + ": no [MASK] token"));
  }
  SUBCASE("CRLF lines and a missing final newline are fine") {
    const TempFile f("crlf_vocab.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nhello");
    const auto tok = tk::BertTokenizer::from_file(f.path);
    CHECK(tok.vocab_size() == 6);
    CHECK(tok.encode("Hello") == Ids{5});
  }
  SUBCASE("ids outside the vocabulary") {
    const auto& tok = toy_tokenizer();
    CHECK(error_of<tk::token_id_error>([&] { tok.decode(Ids{8, 19}); }) == "id 19 is outside the vocabulary (size 19)");
    CHECK(error_of<tk::token_id_error>([&] { tok.decode(Ids{-1}); }) == "id -1 is outside the vocabulary (size 19)");
    CHECK_THROWS_EXACTLY(tok.id_to_token(1000), tk::token_id_error);
    CHECK_THROWS_AS(tok.id_to_token(1000), std::out_of_range);
  }
}

TEST_SUITE("data") {
  TEST_CASE("wordpiece: bert-base-uncased, the seed's sentence and hand-verified words") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = bert_base_uncased();
    CHECK(tok.vocab_size() == 30522);
    CHECK(tok.pad_id() == 0);
    CHECK(tok.unk_id() == 100);
    CHECK(tok.cls_id() == 101);
    CHECK(tok.sep_id() == 102);
    CHECK(tok.mask_id() == 103);
    const auto& we = eftest::worked_examples().at("bert_tokenizer_ids");
    CHECK(tok.encode(we.at("text").get<std::string>()) == we.at("ids").get<Ids>());
    CHECK(tok.encode("time flies like an arrow") == Ids{2051, 10029, 2066, 2019, 8612});
    CHECK(tok.encode("time flies like an arrow", true) == Ids{101, 2051, 10029, 2066, 2019, 8612, 102});
    CHECK(wordpiece_reference().at("time_flies").get<Ids>() == Ids{2051, 10029, 2066, 2019, 8612});
    // The paper's "un ##aff ##able" comes from a different vocabulary; bert-base-uncased has "una".
    CHECK(tok.tokenize("unaffable") == Words{"una", "##ffa", "##ble"});
    CHECK(tok.tokenize("Héllo") == Words{"hello"});
    CHECK(tok.encode("Héllo") == tok.encode("hello"));
    CHECK(tok.tokenize("中国 ΟΔΟΣ") == Words{"中", "国", "ο", "##δ", "##ος"});  // final sigma: "##ος"
    CHECK(tok.tokenize("don't stop!") == Words{"don", "'", "t", "stop", "!"});
    CHECK(tok.decode(tok.encode("Héllo, unaffable world!", true)) == "[CLS] hello , unaffable world ! [SEP]");
  }

  TEST_CASE("wordpiece: all 9,613 SST-2 sentences equal the reference ids") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = bert_base_uncased();
    const json& sst2 = wordpiece_reference().at("sst2");
    const json& chunks = sst2.at("chunks");
    const json& first = sst2.at("first");
    const auto chunk_size = sst2.at("chunk_size").get<std::size_t>();
    std::size_t count = 0, total_ids = 0, chunk = 0, chunk_ids = 0, in_chunk = 0, mismatched_chunks = 0;
    eftest::Sha256 digest;
    auto close_chunk = [&] {
      INFO("chunk " << chunk << " (sentences " << chunk * chunk_size << "..)");
      REQUIRE(chunk < chunks.size());
      CHECK(in_chunk == chunks[chunk].at("sentences").get<std::size_t>());
      CHECK(chunk_ids == chunks[chunk].at("ids").get<std::size_t>());
      if (digest.hexdigest() != chunks[chunk].at("sha256").get<std::string>()) ++mismatched_chunks;
      digest = eftest::Sha256();
      ++chunk;
      chunk_ids = in_chunk = 0;
    };
    for (const std::string name : {"train.txt", "dev.txt", "test.txt"}) {
      const auto lines = byte_lines(read_bytes(data_file("sst2/" + name)));
      for (std::size_t i = 0; i < lines.size(); ++i) {
        const auto space = lines[i].find(' ');
        REQUIRE_MESSAGE(space != std::string::npos, "sst2/" << name << ":" << i + 1 << ": no label");
        const Ids ids = tok.encode(std::string_view(lines[i]).substr(space + 1));
        if (count < first.size()) {
          INFO("sst2/" << name << ":" << i + 1 << ": " << lines[i]);
          CHECK(ids == first[count].get<Ids>());
        }
        digest.update(ids_text(ids) + "\n");
        ++count;
        ++in_chunk;
        chunk_ids += ids.size();
        total_ids += ids.size();
        if (in_chunk == chunk_size) close_chunk();
      }
    }
    if (in_chunk > 0) close_chunk();
    CHECK(count == 9613);
    CHECK(count == sst2.at("sentences").get<std::size_t>());
    CHECK(total_ids == sst2.at("ids").get<std::size_t>());
    CHECK(chunk == chunks.size());
    CHECK(mismatched_chunks == 0);
  }

  TEST_CASE("wordpiece: every line of the hard-case file equals the reference") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = bert_base_uncased();
    const std::string file = read_bytes(std::filesystem::path(EIGENFORMER_TEST_DATA_DIR) / "tokenizer_hard_cases.txt");
    const json& section = wordpiece_reference().at("hard_cases");
    REQUIRE_MESSAGE(eftest::sha256_hex(file) == section.at("sha256").get<std::string>(),
                    "tests/data/tokenizer_hard_cases.txt changed after bert_reference.json was written: rerun "
                    "/usr/bin/python3 tools/reference/tokenizers/bert_reference.py");
    const auto lines = byte_lines(file);
    const json& cases = section.at("cases");
    std::size_t expected_cases = 0;
    for (const auto& line : lines) expected_cases += line.starts_with('#') ? 0 : 1;
    std::size_t ran = 0;
    for (const json& c : cases) {
      ++ran;
      const auto n = c.at("line").get<std::size_t>();
      REQUIRE(n >= 1);
      REQUIRE(n <= lines.size());
      INFO("tokenizer_hard_cases.txt:" << n);
      CHECK(tok.basic_tokenize(lines[n - 1]) == c.at("tokens").get<Words>());
      CHECK(tok.encode(lines[n - 1]) == c.at("ids").get<Ids>());
    }
    eftest::check_ran(ran, expected_cases, "hard-case lines");
  }

  TEST_CASE("wordpiece: every hard-case line equals Hugging Face's tokenizer on bert-base-uncased") {
    if (!eftest::data_dir_configured()) return;
    REQUIRE_MESSAGE(eftest::sha256_hex(read_bytes(data_file("bert-base-uncased/vocab.txt"))) ==
                        hf_reference().at("vocabularies").at("bert-base-uncased").at("sha256").get<std::string>(),
                    "bert-base-uncased/vocab.txt is not the one " << hf_file << " was written with");
    check_hard_cases(bert_base_uncased(), "bert-base-uncased");
  }

  TEST_CASE("wordpiece: ids of the byte cases (invalid UTF-8) equal the reference") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = bert_base_uncased();
    std::size_t ran = 0;
    for (const json& c : wordpiece_reference().at("byte_cases")) {
      const std::string bytes = from_hex(c.at("hex").get<std::string>());
      INFO("bytes " << c.at("hex").get<std::string>());
      CHECK(tok.encode(bytes) == c.at("ids").get<Ids>());
      ++ran;
    }
    eftest::check_ran_at_least(ran, min_byte_cases, "byte cases");
  }

  TEST_CASE("wordpiece: ids of the code point sweep equal the reference") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = bert_base_uncased();
    const json& sweep = wordpiece_reference().at("sweep");
    std::size_t ran = 0;
    for (const json& plane : sweep.at("planes")) {
      ++ran;
      const auto p = plane.at("plane").get<char32_t>();
      const Ids ids = tok.encode(sweep_text(p, sweep.at("skip_ranges")));
      INFO("plane " << static_cast<unsigned>(p));
      CHECK(ids.size() == plane.at("ids").get<std::size_t>());
      CHECK(eftest::sha256_hex(ids_text(ids)) == plane.at("ids_sha256").get<std::string>());
    }
    eftest::check_ran(ran, unicode_planes, "code point sweep planes");
  }
}
