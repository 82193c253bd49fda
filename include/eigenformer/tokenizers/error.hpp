// Exceptions thrown by the tokenizers. Messages name what is wrong and where: the file and line of a bad
// vocabulary entry, or the id and the vocabulary size of an id that has no token.
#pragma once

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace eigenformer::tokenizers {

// A vocabulary, merges or encoder file that is missing, unreadable or malformed. what() starts with the
// path, then ":<line>:" when the problem is on a given line: "vocab.bpe:17: expected two tokens ...".
class vocab_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;

  // "<path>: <message>" (line == 0) or "<path>:<line>: <message>".
  static vocab_error at(const std::filesystem::path& file, std::size_t line, const std::string& message) {
    std::string text = file.string();
    if (line > 0) text += ":" + std::to_string(line);
    return vocab_error(text + ": " + message);
  }
};

// An id that is not in the vocabulary (decode, id_to_token): "id 50300 is outside the vocabulary (size 50257)".
// Derived from std::out_of_range so generic handlers still catch it.
class token_id_error : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;

  static token_id_error outside(long long id, std::size_t vocab_size) {
    return token_id_error("id " + std::to_string(id) + " is outside the vocabulary (size " +
                          std::to_string(vocab_size) + ")");
  }
};

}  // namespace eigenformer::tokenizers
