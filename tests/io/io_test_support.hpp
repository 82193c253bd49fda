// Helpers shared by the checkpoint tests: a scratch directory removed at the end of each test, whole-file
// reads, and safetensors bytes assembled by hand for the cases no fixture file holds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <eigenformer/io.hpp>

#include "support/files.hpp"
#include "support/paths.hpp"

namespace eftest {

namespace fs = std::filesystem;

// A fresh directory under the system's temp directory, deleted (with its contents) on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("eigenformer-io-test-" + std::to_string(rd()) + "-" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

  // Names of the directory's entries, to check that no temporary file was left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};


inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and data bytes (the length prefix computed, no padding added).
inline std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

inline eigenformer::io::SafeTensorsFile parse_bytes(const std::string& bytes, const std::string& name = "memory.safetensors") {
  return eigenformer::io::SafeTensorsFile::from_bytes(
      std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()), name);
}

inline std::string data_dir() {
  std::string dir = EIGENFORMER_TEST_DATA_DIR;
  dir.append("/safetensors");
  return dir;
}

}  // namespace eftest
