// The one test translation unit compiled with the data directories as definitions (see paths.hpp).
#include "support/paths.hpp"

namespace eigenformer::testing {
const char* test_data_dir() { return EIGENFORMER_TEST_DATA_DIR_PATH; }
const char* data_dir() { return EIGENFORMER_DATA_DIR_PATH; }
}  // namespace eigenformer::testing
