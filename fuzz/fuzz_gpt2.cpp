// libFuzzer target for GPT2Tokenizer (include/eigenformer/tokenizers/gpt2.hpp), with GPT-2's vocabulary
// from $EIGENFORMER_DATA_DIR/gpt2. Built and run by `cmake --workflow --preset fuzz`; by hand:
//   EIGENFORMER_DATA_DIR=../shared/data build/fuzz/fuzz/fuzz_gpt2 -max_total_time=60 corpus/
//
// The first byte chooses what the rest is:
//   even: text. encode and encode_ordinary must round-trip through decode, the pre-tokenisation pieces
//         must be non-empty and concatenate to the text, tokenize must agree with encode, and for short
//         texts both merge loops (rescanning and priority queue) must give the same tokens.
//   odd:  ids, 4 bytes each (little-endian int32, so negative and huge ids occur). decode must succeed
//         exactly when every id is in the vocabulary and throw token_id_error otherwise.
// Any violation aborts (a crash for libFuzzer); ASan and UBSan catch memory and undefined behaviour.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <eigenformer/tokenizers/gpt2.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tk = eigenformer::tokenizers;

namespace {

std::unique_ptr<tk::GPT2Tokenizer> tokenizer;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_gpt2: invariant violated: %s\n", what);
    std::abort();
  }
}

void check_text(const std::string& text) {
  const auto ids = tokenizer->encode(text);
  require(tokenizer->decode(ids) == text, "decode(encode(x)) == x");
  const auto ordinary = tokenizer->encode_ordinary(text);
  require(tokenizer->decode(ordinary) == text, "decode(encode_ordinary(x)) == x");
  if (text.find("<|endoftext|>") == std::string::npos) require(ids == ordinary, "encode == encode_ordinary");
  std::string joined;
  for (const auto piece : tk::GPT2Tokenizer::pretokenize(text)) {
    require(!piece.empty(), "pre-tokenisation pieces are not empty");
    joined += piece;
  }
  require(joined == text, "pre-tokenisation pieces concatenate to the text");
  const auto tokens = tokenizer->tokenize(text);
  require(tokens.size() == ids.size(), "tokenize has one string per id");
  for (std::size_t i = 0; i < ids.size(); ++i)
    require(tokenizer->token_to_id(tokens[i]) == ids[i], "token_to_id(tokenize(x)[i]) == encode(x)[i]");
  if (text.size() <= 512) require(tokenizer->bpe(text, 0) == tokenizer->bpe(text, text.size()), "merge loops agree");
}

void check_ids(const std::uint8_t* data, std::size_t size) {
  std::vector<std::int64_t> ids;
  bool in_range = true;
  for (std::size_t i = 0; i + 4 <= size; i += 4) {
    std::int32_t v;
    std::memcpy(&v, data + i, 4);
    // Half of the values folded into the vocabulary, so that decode mostly succeeds.
    const std::int64_t id = (v & 1) ? static_cast<std::int64_t>(static_cast<std::uint32_t>(v) % 50257u) : v;
    in_range = in_range && id >= 0 && id < static_cast<std::int64_t>(tokenizer->vocab_size());
    ids.push_back(id);
  }
  try {
    const std::string text = tokenizer->decode(ids);
    require(in_range, "decode accepts only ids in the vocabulary");
    std::size_t bytes = 0;
    for (const auto id : ids) bytes += tokenizer->token_bytes(id).size();
    require(text.size() == bytes, "decode concatenates the tokens' bytes");
  } catch (const tk::token_id_error&) {
    require(!in_range, "decode throws only for ids outside the vocabulary");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("EIGENFORMER_DATA_DIR");
  if (!dir || !*dir) {
    std::fprintf(stderr, "fuzz_gpt2: set EIGENFORMER_DATA_DIR (the directory holding gpt2/encoder.json)\n");
    std::exit(1);
  }
  try {
    tokenizer = std::make_unique<tk::GPT2Tokenizer>(tk::GPT2Tokenizer::from_directory(std::filesystem::path(dir) / "gpt2"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_gpt2: %s\n", e.what());
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
