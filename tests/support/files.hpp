// Whole-file reads for the tests. One definition for every test file: the test files are compiled in
// batches (tests/CMakeLists.txt), where two file-local helpers of the same name would collide.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace eftest {

// The file's bytes; throws naming the file when it cannot be opened, which doctest reports as the failure.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace eftest
