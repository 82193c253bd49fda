// The shared data sets outside the repository (EIGENFORMER_DATA_DIR: GPT-2's and BERT's vocabularies, tiny
// Shakespeare, SST-2), read by the test cases of the doctest suite "data".
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "support/paths.hpp"

namespace eftest {

// Whether the build was configured with EIGENFORMER_DATA_DIR. When it was not, says in the test output that
// the current test case is skipped and why, so a run without the data sets shows what it did not test; each
// test case of the suite "data" begins with `if (!data_dir_configured()) return;`.
inline bool data_dir_configured() {
  const std::string dir = EIGENFORMER_DATA_DIR;
  if (dir.empty())
    MESSAGE("skipped: EIGENFORMER_DATA_DIR was not set when the tests were configured (the data suite needs "
            "../shared/data)");
  return !dir.empty();
}

// A file of the shared data set; fails (does not skip) when EIGENFORMER_DATA_DIR is configured but lacks it.
inline std::filesystem::path data_file(const std::string& relative) {
  const std::string dir = EIGENFORMER_DATA_DIR;
  REQUIRE_MESSAGE(!dir.empty(), "EIGENFORMER_DATA_DIR is not set (the data suite needs ../shared/data)");
  const auto path = std::filesystem::path(dir) / relative;
  REQUIRE_MESSAGE(std::filesystem::exists(path), "missing data file " << path.string());
  return path;
}

}  // namespace eftest
