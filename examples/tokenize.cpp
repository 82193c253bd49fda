// tokenize: text lines -> token ids (or token strings), or id lines -> text, with GPT-2's byte-level BPE or
// BERT's WordPiece. One output line per input line, so a tokenizer can be checked against Python in one
// pipe:
//
//   tokenize --kind gpt2 --vocab ../shared/data/gpt2 < lines.txt > ids.txt
//   python3 -c 'import sys, tiktoken; e = tiktoken.get_encoding("gpt2")
//   for l in sys.stdin: print(*e.encode(l.rstrip("\n"), allowed_special="all"))' < lines.txt | diff - ids.txt
//
// Usage: tokenize --kind gpt2|bert --vocab DIR [--file F] [--tokens | --decode] [--special] [--cased]
//   --vocab DIR  gpt2: encoder.json + vocab.bpe (or vocab.json + merges.txt); bert: DIR/vocab.txt or the file
//   --file F     read F instead of standard input
//   --tokens     print the token strings (GPT-2's byte-to-unicode spelling, "Ġworld"; WordPiece "##ing")
//   --decode     read lines of ids separated by spaces and print their text
//   --special    bert: add [CLS] ... [SEP]
//   --cased      bert: no lower-casing or accent stripping (for cased vocabularies)
// A line is the text up to "\n" (a "\r" before it is part of the line). Output separators are single
// spaces. Errors print one line to standard error and exit with status 1.
#include <cstdio>
#include <eigenformer/tokenizers/gpt2.hpp>
#include <eigenformer/tokenizers/wordpiece.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace tk = eigenformer::tokenizers;

namespace {

constexpr const char* usage =
    "usage: tokenize --kind gpt2|bert --vocab DIR [--file F] [--tokens | --decode] [--special] [--cased]";

struct Options {
  std::string kind, vocab, file;
  bool tokens = false, decode = false, special = false, cased = false;
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--kind") o.kind = value();
    else if (a == "--vocab") o.vocab = value();
    else if (a == "--file") o.file = value();
    else if (a == "--tokens") o.tokens = true;
    else if (a == "--decode") o.decode = true;
    else if (a == "--special") o.special = true;
    else if (a == "--cased") o.cased = true;
    else throw usage_error("unknown argument " + a);
  }
  if (o.kind != "gpt2" && o.kind != "bert") throw usage_error("--kind must be gpt2 or bert");
  if (o.vocab.empty()) throw usage_error("--vocab is required");
  if (o.tokens && o.decode) throw usage_error("--tokens and --decode exclude each other");
  if (o.kind == "gpt2" && (o.special || o.cased)) throw usage_error("--special and --cased are for --kind bert");
  return o;
}

// The ids of one --decode input line.
std::vector<std::int64_t> parse_ids(const std::string& line, std::size_t line_no) {
  std::vector<std::int64_t> ids;
  std::size_t i = 0;
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i == line.size()) break;
    std::size_t end = i;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '\r') ++end;
    const std::string word = line.substr(i, end - i);
    std::size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size())
      throw std::runtime_error("line " + std::to_string(line_no) + ": \"" + word + "\" is not an id");
    ids.push_back(id);
    i = end;
  }
  return ids;
}

void append_joined(std::string& out, const auto& items) {
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += ' ';
    first = false;
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(item)>>) out += std::to_string(item);
    else out += item;
  }
}

int run(const Options& o) {
  std::unique_ptr<tk::GPT2Tokenizer> gpt2;
  std::unique_ptr<tk::BertTokenizer> bert;
  if (o.kind == "gpt2") {
    gpt2 = std::make_unique<tk::GPT2Tokenizer>(tk::GPT2Tokenizer::from_directory(o.vocab));
  } else {
    const fs::path vocab = fs::is_directory(o.vocab) ? fs::path(o.vocab) / "vocab.txt" : fs::path(o.vocab);
    bert = std::make_unique<tk::BertTokenizer>(tk::BertTokenizer::from_file(vocab, !o.cased));
  }

  std::ifstream file;
  if (!o.file.empty()) {
    file.open(o.file, std::ios::binary);
    if (!file) throw std::runtime_error(o.file + ": cannot open file");
  }
  std::istream& in = o.file.empty() ? std::cin : file;

  std::string line, out;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    out.clear();
    if (o.decode) {
      const auto ids = parse_ids(line, line_no);
      try {
        out = gpt2 ? gpt2->decode(ids) : bert->decode(ids);
      } catch (const std::exception& e) {
        throw std::runtime_error("line " + std::to_string(line_no) + ": " + e.what());
      }
    } else if (o.tokens) {
      append_joined(out, gpt2 ? gpt2->tokenize(line) : bert->tokenize(line));
    } else {
      append_joined(out, gpt2 ? gpt2->encode(line) : bert->encode(line, o.special));
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  if (in.bad()) throw std::runtime_error((o.file.empty() ? std::string("standard input") : o.file) + ": read error");
  if (std::fflush(stdout) != 0) throw std::runtime_error("cannot write the output");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << usage << '\n';
    return 0;
  }
  try {
    return run(parse(argc, argv));
  } catch (const usage_error& e) {
    std::cerr << "tokenize: " << e.what() << " (" << usage << ")\n";
  } catch (const std::exception& e) {
    std::cerr << "tokenize: " << e.what() << '\n';
  }
  return 1;
}
