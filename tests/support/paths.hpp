// Where the tests find their inputs, read at run time from one translation unit (support/paths.cpp).
//
// Why not compile definitions on every test file: the two directories are absolute paths, which differ
// between checkouts (a second worktree, a CI clone, a build with or without the shared data). ccache keys
// each object on its command line, so a path there made every test object a cache miss in any other
// checkout. Now only paths.cpp carries them, and the other objects are the same everywhere.
#pragma once

namespace eigenformer::testing {
// The committed fixtures (tests/data/), worked_examples.json among them.
const char* test_data_dir();
// The large data sets outside the repository (tiny Shakespeare, SST-2, vocabularies); "" when the build
// was configured without EIGENFORMER_DATA_DIR (see the "data" suite in tests/CMakeLists.txt).
const char* data_dir();
}  // namespace eigenformer::testing

// Spelled as the compile definitions they replace, so test code reads the same.
#define EIGENFORMER_TEST_DATA_DIR (::eigenformer::testing::test_data_dir())
#define EIGENFORMER_DATA_DIR (::eigenformer::testing::data_dir())
