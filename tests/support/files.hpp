// Whole-file reads for the tests. One definition for every test file: the test files are compiled in
// batches (tests/CMakeLists.txt), where two file-local helpers of the same name would collide.
#pragma once

#include <cstdint>
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

// Whether p is on a 64-byte boundary, the alignment the library promises for tensor storage.
inline bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

}  // namespace eftest
