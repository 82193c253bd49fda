// The doctest runner: the single translation unit that holds doctest's implementation and main().
// Test cases live in tests/**/test_*.cpp, all linked into the one executable `eigenformer_tests`.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
