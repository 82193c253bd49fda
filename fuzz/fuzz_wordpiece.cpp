// libFuzzer target for BertTokenizer (include/eigenformer/tokenizers/wordpiece.hpp), with bert-base-uncased's
// vocabulary from $EIGENFORMER_DATA_DIR/bert-base-uncased. Built and run by `cmake --workflow --preset fuzz`;
// by hand:
//   EIGENFORMER_DATA_DIR=../shared/data build/fuzz/fuzz/fuzz_wordpiece -max_total_time=60 corpus/
//
// The first byte chooses what the rest is:
//   even: text, any bytes (invalid UTF-8 included). The basic tokenizer's words must be non-empty valid
//         UTF-8 without whitespace or control characters; every id must be in the vocabulary and tokenize
//         must spell encode's ids; decode must succeed, and when no word became [UNK] encoding the decoded
//         text must give the same ids again (decode glues "##" pieces back into their words and the basic
//         tokenizer is idempotent on its own output); encode_plus of a pair with truncation and padding
//         must give three lists of max_length starting with [CLS].
//   odd:  ids, 4 bytes each (little-endian int32, so negative and huge ids occur). decode must succeed
//         exactly when every id is in the vocabulary and throw token_id_error otherwise.
// Any violation aborts (a crash for libFuzzer); ASan and UBSan catch memory and undefined behaviour.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <eigenformer/tokenizers/wordpiece.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tk = eigenformer::tokenizers;

namespace {

std::unique_ptr<tk::BertTokenizer> tokenizer;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_wordpiece: invariant violated: %s\n", what);
    std::abort();
  }
}

bool is_dropped_or_space(char32_t cp) {
  return cp == 0 || cp == tk::unicode::replacement_character || tk::unicode::is_bert_control(cp) ||
         tk::unicode::is_bert_whitespace(cp) || tk::unicode::is_white_space(cp);
}

void check_text(const std::string& text) {
  for (const std::string& word : tokenizer->basic_tokenize(text)) {
    require(!word.empty(), "basic tokenizer words are not empty");
    require(tk::unicode::is_valid_utf8(word), "basic tokenizer words are valid UTF-8");
    for (const char32_t cp : tk::unicode::to_utf32(word))
      require(!is_dropped_or_space(cp), "basic tokenizer words hold no whitespace or control characters");
  }

  const auto ids = tokenizer->encode(text);
  const auto tokens = tokenizer->tokenize(text);
  require(tokens.size() == ids.size(), "tokenize has one string per id");
  bool has_unk = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    require(ids[i] >= 0 && static_cast<std::size_t>(ids[i]) < tokenizer->vocab_size(), "ids are in the vocabulary");
    require(tokenizer->id_to_token(ids[i]) == tokens[i], "id_to_token(encode(x)[i]) == tokenize(x)[i]");
    has_unk = has_unk || ids[i] == tokenizer->unk_id();
  }
  const std::string decoded = tokenizer->decode(ids);
  if (!has_unk) require(tokenizer->encode(decoded) == ids, "encode(decode(encode(x))) == encode(x) without [UNK]");

  const auto enc = tokenizer->encode_plus(text, std::string_view(text).substr(0, text.size() / 2),
                                          {.max_length = 16, .padding = tk::Padding::max_length, .truncation = true});
  require(enc.input_ids.size() == 16 && enc.token_type_ids.size() == 16 && enc.attention_mask.size() == 16,
          "encode_plus pads and truncates to max_length");
  require(enc.input_ids[0] == tokenizer->cls_id(), "encode_plus starts with [CLS]");
}

void check_ids(const std::uint8_t* data, std::size_t size) {
  std::vector<std::int64_t> ids;
  bool in_range = true;
  const auto n = static_cast<std::uint32_t>(tokenizer->vocab_size());
  for (std::size_t i = 0; i + 4 <= size; i += 4) {
    std::int32_t v;
    std::memcpy(&v, data + i, 4);
    // Half of the values folded into the vocabulary, so that decode mostly succeeds.
    const std::int64_t id = (v & 1) ? static_cast<std::int64_t>(static_cast<std::uint32_t>(v) % n) : v;
    in_range = in_range && id >= 0 && id < static_cast<std::int64_t>(n);
    ids.push_back(id);
  }
  try {
    const std::string text = tokenizer->decode(ids);
    require(in_range, "decode accepts only ids in the vocabulary");
    require(ids.empty() || !text.empty(), "decode of ids is not empty");
  } catch (const tk::token_id_error&) {
    require(!in_range, "decode throws only for ids outside the vocabulary");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("EIGENFORMER_DATA_DIR");
  if (!dir || !*dir) {
    std::fprintf(stderr, "fuzz_wordpiece: set EIGENFORMER_DATA_DIR (the directory holding bert-base-uncased/vocab.txt)\n");
    std::exit(1);
  }
  try {
    tokenizer = std::make_unique<tk::BertTokenizer>(
        tk::BertTokenizer::from_file(std::filesystem::path(dir) / "bert-base-uncased" / "vocab.txt"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_wordpiece: %s\n", e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) check_text(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  else check_ids(data + 1, size - 1);
  return 0;
}
