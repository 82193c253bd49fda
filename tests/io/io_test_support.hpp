// Helpers shared by the checkpoint tests: whole-file writes, and safetensors bytes assembled by hand for the
// cases no fixture file holds (the scratch directory and whole-file reads are in support/files.hpp).
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
