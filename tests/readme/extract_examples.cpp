// Turns every ```cpp block of README.md into one translation unit, so the documentation is compiled with
// the tests and cannot drift from the API. A block that defines main() is kept whole (main renamed); any
// other block is a fragment: its #include lines are hoisted to the top and the rest becomes the body of a
// function of its own. Blocks that include the tokenizers are left out when they are not built.
//
//   extract_examples README.md out.cpp [--without-tokenizers]
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: extract_examples README.md out.cpp [--without-tokenizers]\n";
    return 2;
  }
  const bool tokenizers = !(argc > 3 && std::string(argv[3]) == "--without-tokenizers");
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "extract_examples: cannot open " << argv[1] << "\n";
    return 1;
  }
  std::vector<std::string> includes;
  std::ostringstream bodies;
  std::string line;
  int line_no = 0, block = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.rfind("```cpp", 0) != 0) continue;
    const int start = line_no + 1;
    std::vector<std::string> code;
    while (std::getline(in, line) && (++line_no, line.rfind("```", 0) != 0)) code.push_back(line);
    bool has_main = false, needs_tokenizers = false;
    for (const auto& l : code) {
      has_main = has_main || l.find("int main(") != std::string::npos;
      needs_tokenizers = needs_tokenizers || l.find("eigenformer/tokenizers") != std::string::npos ||
                         l.find("pretrained_gpt2.hpp") != std::string::npos ||
                         l.find("pretrained_bert_tokenizer.hpp") != std::string::npos;
    }
    if (needs_tokenizers && !tokenizers) continue;
    ++block;
    bodies << "\n// README.md line " << start << "\n";
    if (!has_main) bodies << "namespace readme_block_" << block << " {\n[[maybe_unused]] void example() {\n";
    else bodies << "namespace readme_block_" << block << " {\n";
    for (std::size_t i = 0; i < code.size(); ++i) {
      std::string l = code[i];
      if (l.rfind("#include", 0) == 0) {
        includes.push_back(l);
        continue;
      }
      if (const auto m = l.find("int main("); m != std::string::npos) l.replace(m, 9, "auto example(");  // main may omit its return; a function may not
      // Errors point at the README's own line.
      bodies << "#line " << start + static_cast<int>(i) << " \"README.md\"\n" << l << "\n";
    }
    if (!has_main) bodies << "}\n";
    bodies << "}  // namespace readme_block_" << block << "\n";
  }
  if (block == 0) {
    std::cerr << "extract_examples: no ```cpp block in " << argv[1] << "\n";
    return 1;
  }
  std::ofstream out(argv[2]);
  out << "// Generated from README.md by tests/readme/extract_examples.cpp: " << block << " examples.\n";
  for (const auto& i : includes) out << i << "\n";
  out << bodies.str();
  return out ? 0 : 1;
}
