// eigenformer/tokenizers/gpt2.hpp.
//  - Without data: pre-tokenisation, the BPE rules and every error path, on a small vocabulary written to a
//    temporary directory.
//  - Suite "data" (EIGENFORMER_DATA_DIR): GPT-2's own files against the ids tiktoken computed
//    (tests/data/tokenizer_gpt2_reference.json, written by tools/reference/tokenizers/make_reference.mjs):
//    the hard-case file line by line and whole, extra cases, and tiny Shakespeare whole and per 100 lines.
//    100% agreement is required. Then round trips of random bytes and the two merge loops against each
//    other.
#include <cstdint>
#include <doctest/doctest.h>

#include <eigenformer/tokenizers/gpt2.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/data_dir.hpp"
#include "support/errors.hpp"
#include "support/files.hpp"
#include "support/paths.hpp"
#include "support/sha256.hpp"
#include "support/throws.hpp"

namespace fs = std::filesystem;
using eigenformer::tokenizers::GPT2Tokenizer;
using eigenformer::tokenizers::token_id_error;
using eigenformer::tokenizers::vocab_error;

using eftest::read_bytes;

namespace {

using Ids = std::vector<std::int64_t>;

void write_bytes(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A fresh directory under the system's temporary directory, removed at the end of the scope.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("eigenformer-gpt2-" + std::to_string(std::random_device{}()) + "-" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// GPT-2's spelling of a byte string (the tokenizer's own mapping is checked separately below).
std::string spell(std::string_view bytes) { return eigenformer::tokenizers::detail::gpt2::bytes_to_spelling(bytes); }

std::string json_string(std::string_view utf8) {
  std::string out = "\"";
  for (const char c : utf8) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A small byte-level vocabulary: ids 0-255 are the bytes in byte order, then one token per merge, then
// <|endoftext|>. The merges (in rank order):
//   0 h e   1 l l   2 he ll   3 hell o   4 Ġ w   5 o r   6 Ġw or   7 b c   8 a b   9 ab c
const std::vector<std::pair<std::string, std::string>> tiny_merges = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {" w", "or"}, {"b", "c"},
    {"a", "b"}, {"ab", "c"}};

struct TinyVocab {
  std::string encoder_json;  // contents
  std::string vocab_bpe;
};

TinyVocab tiny_vocab() {
  TinyVocab v;
  v.encoder_json = "{";
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    std::string key = json_string(spell(std::string_view(&c, 1)));
    if (b == ' ') key = "\"\\u0120\"";  // one key through a \u escape
    v.encoder_json += key + ": " + std::to_string(b) + (b % 8 == 7 ? ",\n" : ", ");
  }
  int id = 256;
  for (const auto& [l, r] : tiny_merges) v.encoder_json += json_string(spell(l + r)) + ": " + std::to_string(id++) + ", ";
  v.encoder_json += "\"<|endoftext|>\": " + std::to_string(id) + "}\n";
  v.vocab_bpe = "#version: 0.2\n";
  for (const auto& [l, r] : tiny_merges) v.vocab_bpe += spell(l) + " " + spell(r) + "\n";
  return v;
}

GPT2Tokenizer load_tiny(const TempDir& dir, const TinyVocab& v = tiny_vocab()) {
  write_bytes(dir.path / "encoder.json", v.encoder_json);
  write_bytes(dir.path / "vocab.bpe", v.vocab_bpe);
  return GPT2Tokenizer::from_directory(dir.path);
}

std::string what_of_loading(const TinyVocab& v) {
  TempDir dir;
  return eftest::error_of<vocab_error>([&] { load_tiny(dir, v); });
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (const auto p : GPT2Tokenizer::pretokenize(text)) out.emplace_back(p);
  return out;
}

std::string random_bytes(std::mt19937& rng, std::size_t max_len) {
  // Mostly ASCII and spaces, with multi-byte UTF-8 and raw high bytes mixed in.
  static const std::vector<std::string> alphabet = {"a", "e", "t", " ", " ", "\n", "'", "s", "1", "!", "\t",
                                                     "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xC2\x85"};
  std::uniform_int_distribution<std::size_t> len_dist(0, max_len), pick(0, alphabet.size() + 3);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s;
  const std::size_t len = len_dist(rng);
  while (s.size() < len) {
    const std::size_t k = pick(rng);
    if (k < alphabet.size()) s += alphabet[k];
    else s += static_cast<char>(byte(rng));
  }
  return s;
}

std::string ids_sha256(const Ids& ids) {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (const auto id : ids)
    for (int k = 0; k < 4; ++k) bytes += static_cast<char>((static_cast<std::uint32_t>(id) >> (8 * k)) & 0xFF);
  return eftest::Sha256().update(bytes).hexdigest();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Without the data directory
// ---------------------------------------------------------------------------------------------------

TEST_CASE("gpt2: the byte <-> unicode spelling of GPT-2's encoder.json") {
  using eigenformer::tokenizers::detail::gpt2::byte_spelling;
  std::vector<bool> used(324, false);
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_spelling.byte_to_cp[b];
    REQUIRE(cp < 324);
    CHECK_FALSE(used[cp]);
    used[cp] = true;
    CHECK(byte_spelling.cp_to_byte[cp] == b);
  }
  CHECK(byte_spelling.byte_to_cp[std::uint8_t{' '}] == 0x120);   // 'Ġ'
  CHECK(byte_spelling.byte_to_cp[std::uint8_t{'\n'}] == 0x10A);  // 'Ċ'
  CHECK(byte_spelling.byte_to_cp[0] == 0x100);
  CHECK(byte_spelling.byte_to_cp[std::uint8_t{'!'}] == U'!');
  CHECK(byte_spelling.byte_to_cp[0x7F] == 0x121);  // after the 33 bytes 0x00-0x20
  CHECK(byte_spelling.byte_to_cp[0xA0] == 0x142);
  CHECK(byte_spelling.byte_to_cp[0xAD] == 0x143);  // the last unprintable byte
  CHECK(byte_spelling.byte_to_cp[0xAE] == 0xAE);
  CHECK(spell("\xF0\x9F") == "\xC3\xB0\xC5\x81");  // "ðŁ"
}

TEST_CASE("gpt2: pre-tokenisation follows GPT-2's pattern") {
  using V = std::vector<std::string>;
  CHECK(pieces("Hello world") == V{"Hello", " world"});
  CHECK(pieces("it's they'll I'd we've you're I'm don't") ==
        V{"it", "'s", " they", "'ll", " I", "'d", " we", "'ve", " you", "'re", " I", "'m", " don", "'t"});
  CHECK(pieces("IT'S 'sup") == V{"IT", "'", "S", " '", "sup"});  // contractions are lower-case only
  CHECK(pieces("a   b") == V{"a", "  ", " b"});                  // a run gives its last space to the word
  CHECK(pieces("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(pieces("a\t b") == V{"a", "\t", " b"});
  CHECK(pieces("x  ") == V{"x", "  "});                          // trailing spaces stay together
  CHECK(pieces(" 42!? 3.5") == V{" 42", "!?", " 3", ".", "5"});
  CHECK(pieces("abc123") == V{"abc", "123"});
  CHECK(pieces("\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xA7\xE3\x81\x99\xE3\x80\x82") ==  // 日本です。
        V{"\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xA7\xE3\x81\x99", "\xE3\x80\x82"});
  CHECK(pieces("na\xC3\xAFve \xC2\xBD") == V{"na\xC3\xAFve", " \xC2\xBD"});  // ï is a letter, ½ a number
  // U+0085 is White_Space (as in tiktoken's Rust regex); U+FEFF is not.
  CHECK(pieces("x \xC2\x85y") == V{"x", " ", "\xC2\x85", "y"});
  CHECK(pieces("x \xEF\xBB\xBFy") == V{"x", " \xEF\xBB\xBF", "y"});
  // Ill-formed bytes are [^\s\p{L}\p{N}] characters.
  CHECK(pieces("\xFF\xFE a\xC3") == V{"\xFF\xFE", " a", "\xC3"});
  CHECK(pieces(" \xFF" "a") == V{" \xFF", "a"});
  CHECK(pieces("").empty());
}

TEST_CASE("gpt2: pre-tokenisation pieces are non-empty and concatenate to the input, for any bytes") {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string s = random_bytes(rng, 40);
    std::string joined;
    bool empty_piece = false;
    for (const auto p : GPT2Tokenizer::pretokenize(s)) {
      empty_piece = empty_piece || p.empty();
      joined += p;
    }
    REQUIRE_FALSE(empty_piece);
    REQUIRE(joined == s);
  }
}

TEST_CASE("gpt2: encode, decode, tokenize on a small vocabulary") {
  TempDir dir;
  const auto tok = load_tiny(dir);
  CHECK(tok.vocab_size() == 256 + tiny_merges.size() + 1);
  CHECK(tok.merges_size() == tiny_merges.size());
  CHECK(tok.merge_pairs() == tiny_merges.size() + 1);  // + (a, bc), a split of "abc"
  CHECK(tok.eot_id() == 266);
  // "hello" is a token (the whole-piece shortcut); " world" merges Ġ w, o r, then Ġw or.
  CHECK(tok.encode("hello world") == Ids{259, 262, 'l', 'd'});
  CHECK(tok.tokenize("hello world") == std::vector<std::string>{"hello", "\xC4\xA0wor", "l", "d"});
  CHECK(tok.encode("hello<|endoftext|>") == Ids{259, 266});
  CHECK(tok.encode_ordinary("<|endoftext|>").size() == 13);  // no merges apply: one token per byte
  CHECK(tok.decode(tok.encode_ordinary("<|endoftext|>")) == "<|endoftext|>");
  CHECK(tok.decode(Ids{259, 266, 262}) == "hello<|endoftext|> wor");
  CHECK(tok.id_to_token(' ') == "\xC4\xA0");
  CHECK(tok.token_to_id("\xC4\xA0wor") == 262);
  CHECK(tok.token_to_id("<|endoftext|>") == 266);
  CHECK_FALSE(tok.find_token("xyz").has_value());
  CHECK(tok.token_bytes(262) == " wor");
}

TEST_CASE("gpt2: a pair merges when its concatenation is a token, at that token's rank (tiktoken's rule)") {
  TempDir dir;
  const auto tok = load_tiny(dir);
  // a b c: "b c" (rank 7) before "a b" (rank 8), giving a + bc. vocab.bpe lists "ab c", not "a bc", but
  // "abc" is a token, so the pair (a, bc) merges at rank 9, as tiktoken's byte_pair_merge does.
  CHECK(tok.bpe("abc") == Ids{265});
  CHECK(tok.bpe("abc", 0) == Ids{265});  // the priority-queue loop
  // The leftmost of equal pairs merges first: "llll" -> ll ll; "lll" -> ll l.
  CHECK(tok.bpe("lll") == Ids{257, 'l'});
  CHECK(tok.bpe("lll", 0) == Ids{257, 'l'});
  CHECK(tok.bpe("hellohello") == Ids{259, 259});
}

TEST_CASE("gpt2: decode(encode(x)) == x for random byte strings, ill-formed UTF-8 included") {
  TempDir dir;
  const auto tok = load_tiny(dir);
  std::mt19937 rng(99);
  for (int trial = 0; trial < 1000; ++trial) {
    const std::string s = random_bytes(rng, 200);
    REQUIRE(tok.decode(tok.encode(s)) == s);
    REQUIRE(tok.decode(tok.encode_ordinary(s)) == s);
  }
  const std::string all_bytes = [] {
    std::string s;
    for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
    return s;
  }();
  CHECK(tok.decode(tok.encode(all_bytes)) == all_bytes);
}

TEST_CASE("gpt2: decode and id_to_token name the id and the vocabulary size") {
  TempDir dir;
  const auto tok = load_tiny(dir);
  CHECK_THROWS_WITH_EXACTLY(tok.decode(Ids{259, 267}), "id 267 is outside the vocabulary (size 267)", token_id_error);
  CHECK_THROWS_WITH_EXACTLY(tok.decode(Ids{-1}), "id -1 is outside the vocabulary (size 267)", token_id_error);
  CHECK_THROWS_AS(tok.id_to_token(1000000), std::out_of_range);
  CHECK_THROWS_WITH_EXACTLY(tok.token_to_id("nope"), doctest::Contains("\"nope\" is not in the vocabulary"),
                       std::invalid_argument);
}

TEST_CASE("gpt2: missing files and directories are named") {
  TempDir dir;
  CHECK_THROWS_WITH_EXACTLY(GPT2Tokenizer::from_directory(dir.path),
                       doctest::Contains((dir.path.string() + ": no GPT-2 vocabulary here").c_str()), vocab_error);
  CHECK_THROWS_WITH_EXACTLY(GPT2Tokenizer::from_directory(dir.path / "nope"),
                       doctest::Contains(((dir.path / "nope").string() + ": no such directory").c_str()), vocab_error);
  write_bytes(dir.path / "encoder.json", tiny_vocab().encoder_json);
  CHECK_THROWS_WITH_EXACTLY(GPT2Tokenizer::from_directory(dir.path),
                       doctest::Contains(((dir.path / "vocab.bpe").string() + ": no such file").c_str()), vocab_error);
  CHECK_THROWS_WITH_EXACTLY(GPT2Tokenizer::from_files(dir.path / "missing.json", dir.path / "vocab.bpe"),
                       doctest::Contains("missing.json: no such file"), vocab_error);
}

TEST_CASE("gpt2: Hugging Face's file names (vocab.json + merges.txt) load the same vocabulary") {
  TempDir dir;
  const auto v = tiny_vocab();
  write_bytes(dir.path / "vocab.json", v.encoder_json);
  write_bytes(dir.path / "merges.txt", v.vocab_bpe);
  const auto tok = GPT2Tokenizer::from_directory(dir.path);
  CHECK(tok.encode("hello world") == Ids{259, 262, 'l', 'd'});
}

TEST_CASE("gpt2: malformed encoder.json is reported with file, line and column") {
  auto v = tiny_vocab();
  // Line 3 of the file (after two newlines written by tiny_vocab): break its first value.
  const std::size_t line3 = v.encoder_json.find('\n', v.encoder_json.find('\n') + 1) + 1;
  const std::size_t colon = v.encoder_json.find(": ", line3);
  auto broken = v;
  broken.encoder_json[colon + 2] = 'x';
  const std::string what = what_of_loading(broken);
  CHECK_MESSAGE(what.find("encoder.json:3: column ") != std::string::npos, what);
  CHECK_MESSAGE(what.find("expected an integer id") != std::string::npos, what);

  broken = v;
  broken.encoder_json.pop_back();  // "\n"
  broken.encoder_json.pop_back();  // "}"
  CHECK(what_of_loading(broken).find("expected ',' or '}', got end of file") != std::string::npos);

  broken = v;
  broken.encoder_json = "[1, 2]";
  CHECK(what_of_loading(broken).find("encoder.json:1: column 1: expected '{'") != std::string::npos);

  broken = v;
  broken.encoder_json.replace(broken.encoder_json.find("\"!\": 33,"), 8, "\"!\": 0,");  // id 0 twice
  CHECK(what_of_loading(broken).find("id 0 is given twice") != std::string::npos);

  broken = v;
  broken.encoder_json.replace(broken.encoder_json.find("\"!\": 33,"), 8, "\"!\": 1.5,");
  CHECK(what_of_loading(broken).find("expected an integer id") != std::string::npos);

  broken = v;
  broken.encoder_json.replace(broken.encoder_json.find("\"!\": 33,"), 8, "\"!\": -1,");
  CHECK(what_of_loading(broken).find("negative id") != std::string::npos);

  broken = v;
  broken.encoder_json.replace(broken.encoder_json.find("\"\\u0120\""), 8, "\"\\ud800\"");
  CHECK(what_of_loading(broken).find("high surrogate without a low surrogate") != std::string::npos);

  broken = v;  // the byte '!' has no token
  broken.encoder_json.replace(broken.encoder_json.find("\"!\": 33,"), 8, "\"!!!!\": 33,");
  CHECK(what_of_loading(broken).find("no token for byte 0x21") != std::string::npos);

  broken = v;  // ids with a gap: 267 tokens, so ids must be 0..266
  broken.encoder_json.replace(broken.encoder_json.find("\"<|endoftext|>\": 266"), 20, "\"<|endoftext|>\": 300");
  CHECK(what_of_loading(broken).find("id 300 but 267 tokens: ids must be 0..266") != std::string::npos);

  broken = v;  // a huge id is reported, not allocated for
  broken.encoder_json.replace(broken.encoder_json.find("\"<|endoftext|>\": 266"), 20,
                              "\"<|endoftext|>\": 2147483647");
  CHECK(what_of_loading(broken).find("id 2147483647 but 267 tokens") != std::string::npos);

  broken = v;
  broken.encoder_json.replace(broken.encoder_json.find("\"<|endoftext|>\": 266"), 20,
                              "\"<|endoftext|>\": 99999999999");
  CHECK(what_of_loading(broken).find("id too large") != std::string::npos);
}

TEST_CASE("gpt2: malformed vocab.bpe is reported with file and line") {
  const auto v = tiny_vocab();
  auto broken = v;
  broken.vocab_bpe.replace(broken.vocab_bpe.find("l l\n"), 4, "l l l\n");  // line 3
  std::string what = what_of_loading(broken);
  CHECK_MESSAGE(what.find("vocab.bpe:3: expected two tokens separated by one space, got \"l l l\"") !=
                    std::string::npos,
                what);

  broken = v;
  broken.vocab_bpe.replace(broken.vocab_bpe.find("o r\n"), 4, "o zz\n");  // line 7
  what = what_of_loading(broken);
  CHECK_MESSAGE(what.find("vocab.bpe:7: \"zz\" is not in the vocabulary") != std::string::npos, what);

  broken = v;
  broken.vocab_bpe += "a a\n";  // line 12: "aa" is not a token
  what = what_of_loading(broken);
  CHECK_MESSAGE(what.find("vocab.bpe:12: the merge \"a a\" makes \"aa\", which is not in the vocabulary") !=
                    std::string::npos,
                what);

  broken = v;  // CRLF line ends and a missing "#version" line are accepted
  broken.vocab_bpe = "h e\r\nl l\r\n";
  CHECK(what_of_loading(broken) == "(no exception)");
}

// ---------------------------------------------------------------------------------------------------
// With GPT-2's files and the tiktoken reference (EIGENFORMER_DATA_DIR)
// ---------------------------------------------------------------------------------------------------

namespace {

using eftest::data_file;

const GPT2Tokenizer& gpt2() {
  static const GPT2Tokenizer tok = GPT2Tokenizer::from_directory(data_file("gpt2").string());
  return tok;
}

// Not support/fixtures.hpp's read_json: that header brings in the whole tensor library, which this file
// does not need (compile time), and the reference is strict JSON.
const nlohmann::json& gpt2_reference() {
  static const nlohmann::json j = [] {
    auto r = nlohmann::json::parse(read_bytes(std::string(EIGENFORMER_TEST_DATA_DIR) + "/tokenizer_gpt2_reference.json"));
    REQUIRE(r.at("format") == "eigenformer-tokenizer-reference");
    REQUIRE(r.at("version") == 1);
    return r;
  }();
  return j;
}

std::vector<std::string> lines_with_newlines(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t nl = text.find('\n', start);
    const std::size_t end = nl == std::string::npos ? text.size() : nl + 1;
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

}  // namespace

TEST_SUITE("data") {
  TEST_CASE("gpt2 data: GPT-2's vocabulary loads with the sizes of OpenAI's release") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = gpt2();
    CHECK(tok.vocab_size() == 50257);
    CHECK(tok.merges_size() == 50000);
    CHECK(tok.merge_pairs() == 108299);  // 58,299 splits of merged tokens besides the listed merges
    CHECK(tok.eot_id() == 50256);
    CHECK(tok.token_to_id("\xC4\xA0world") == 995);  // "Ġworld"
    CHECK(tok.id_to_token(15496) == "Hello");
    CHECK(tok.id_to_token(50256) == "<|endoftext|>");
    CHECK_THROWS_WITH_EXACTLY(tok.decode(Ids{50257}), "id 50257 is outside the vocabulary (size 50257)", token_id_error);
  }

  TEST_CASE("gpt2 data: hard cases equal tiktoken's ids (100% agreement)") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = gpt2();
    const auto& hard = gpt2_reference().at("hard_cases");
    const std::string text = read_bytes(std::string(EIGENFORMER_TEST_DATA_DIR) + "/tokenizer_hard_cases.txt");
    REQUIRE_MESSAGE(eftest::Sha256().update(text).hexdigest() == hard.at("sha256").get<std::string>(),
                    "tests/data/tokenizer_hard_cases.txt changed since the reference was written: run "
                    "tools/reference/tokenizers/make_reference.mjs");
    std::vector<std::string> lines;
    for (auto l : lines_with_newlines(text)) lines.push_back(l.substr(0, l.size() - 1));
    REQUIRE(lines.size() == hard.at("lines").size());
    int agree = 0, total = 0;
    for (const auto& entry : hard.at("lines")) {
      const std::string& line = lines[entry.at("line").get<std::size_t>() - 1];
      REQUIRE(line == entry.at("text").get<std::string>());
      const Ids ids = tok.encode(line);
      const Ids ordinary = tok.encode_ordinary(line);
      const Ids expected = entry.at("ids").get<Ids>();
      const Ids expected_ordinary = entry.contains("ordinary_ids") ? entry.at("ordinary_ids").get<Ids>() : expected;
      const bool ok = ids == expected && ordinary == expected_ordinary;
      CHECK_MESSAGE(ok, "line " << entry.at("line") << ": \"" << line << "\"");
      agree += ok;
      ++total;
      CHECK(tok.decode(ids) == line);
    }
    const Ids whole = tok.encode(text);
    CHECK_MESSAGE(whole == hard.at("whole_file_ids").get<Ids>(), "the whole hard-case file");
    agree += whole == hard.at("whole_file_ids").get<Ids>();
    ++total;
    int extra = 0;
    for (const auto& entry : gpt2_reference().at("extra_cases")) {
      const std::string s = entry.at("text").get<std::string>();
      const bool ok = tok.encode(s) == entry.at("ids").get<Ids>();
      CHECK_MESSAGE(ok, "extra case " << entry.at("text").dump());
      agree += ok;
      ++total;
      ++extra;
    }
    // make_reference.mjs writes 43 extra cases (CR, C0 controls, U+0085, U+2028, BOM, ...): at least 40 must run.
    CHECK_MESSAGE(extra >= 40, "ran " << extra << " extra cases, expected at least 40");
    MESSAGE("gpt2 hard cases: " << agree << "/" << total << " agree with tiktoken");
    CHECK(agree == total);
  }

  TEST_CASE("gpt2 data: tiny Shakespeare equals tiktoken's ids, whole and per 100 lines (100% agreement)") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = gpt2();
    const auto& ref = gpt2_reference().at("tinyshakespeare");
    const std::string text = read_bytes(data_file(ref.at("file").get<std::string>()));
    REQUIRE(text.size() == ref.at("bytes").get<std::size_t>());
    REQUIRE_MESSAGE(eftest::Sha256().update(text).hexdigest() == ref.at("sha256").get<std::string>(),
                    "tiny Shakespeare differs from the file the reference was computed on");
    const Ids whole = tok.encode(text);
    CHECK(whole.size() == ref.at("tokens").get<std::size_t>());
    const Ids first = ref.at("first_ids").get<Ids>();
    CHECK(Ids(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(std::min(first.size(), whole.size()))) == first);
    CHECK_MESSAGE(ids_sha256(whole) == ref.at("ids_sha256").get<std::string>(), "the whole file");
    CHECK(tok.decode(whole) == text);

    const auto lines = lines_with_newlines(text);
    const auto chunk_lines = ref.at("chunk_lines").get<std::size_t>();
    const auto& chunks = ref.at("chunks");
    REQUIRE(chunks.size() == (lines.size() + chunk_lines - 1) / chunk_lines);
    std::size_t agree = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      std::string chunk;
      for (std::size_t i = c * chunk_lines; i < std::min(lines.size(), (c + 1) * chunk_lines); ++i) chunk += lines[i];
      const Ids ids = tok.encode(chunk);
      const bool ok = ids.size() == chunks[c].at("tokens").get<std::size_t>() &&
                      ids_sha256(ids) == chunks[c].at("sha256").get<std::string>();
      CHECK_MESSAGE(ok, "tiny Shakespeare lines " << chunks[c].at("first_line") << "-"
                                                  << chunks[c].at("first_line").get<std::size_t>() +
                                                         chunks[c].at("lines").get<std::size_t>() - 1);
      agree += ok;
    }
    MESSAGE("gpt2 tiny Shakespeare: " << whole.size() << " tokens; " << agree << "/" << chunks.size()
                                      << " chunks of " << chunk_lines << " lines agree with tiktoken");
    CHECK(agree == chunks.size());
  }

  TEST_CASE("gpt2 data: ill-formed UTF-8 encodes byte by byte and round-trips") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = gpt2();
    // A lone 0xFF is the token of byte 0xFF, spelled "ÿ"; a truncated "é" is the token of byte 0xC3 ("Ã").
    CHECK(tok.encode("\xFF") == Ids{tok.token_to_id("\xC3\xBF")});
    CHECK(tok.encode("Hello\xC3") == Ids{15496, tok.token_to_id("\xC3\x83")});
    for (const std::string s : {"\xFF\xFE\xFD", "a\x80" "b", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC0\xAF",
                                " \xE2\x82 x", "\xF0\x9F\x98 ok"})
      CHECK(tok.decode(tok.encode(s)) == s);
  }

  TEST_CASE("gpt2 data: decode(encode(x)) == x on random byte strings") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = gpt2();
    std::mt19937 rng(2024);
    for (int trial = 0; trial < 3000; ++trial) {
      const std::string s = random_bytes(rng, 120);
      REQUIRE(tok.decode(tok.encode(s)) == s);
    }
  }

  TEST_CASE("gpt2 data: the rescanning and priority-queue merge loops give the same tokens") {
    if (!eftest::data_dir_configured()) return;
    const auto& tok = gpt2();
    std::mt19937 rng(7);
    const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
    std::uniform_int_distribution<std::size_t> pick(0, letters.size() - 1), len(1, 300);
    for (int trial = 0; trial < 300; ++trial) {
      std::string s;
      const std::size_t n = len(rng);
      for (std::size_t i = 0; i < n; ++i) s += letters[pick(rng) % (trial % 2 ? 6 : letters.size())];
      const Ids fast = tok.bpe(s, 0), slow = tok.bpe(s, s.size());
      REQUIRE_MESSAGE(fast == slow, s);
      REQUIRE(tok.decode(fast) == s);
    }
    // A 100 KB word: the priority queue keeps it fast (the rescanning loop is quadratic).
    const std::string long_word(100000, 'a');
    CHECK(tok.decode(tok.encode(long_word)) == long_word);
  }
}
