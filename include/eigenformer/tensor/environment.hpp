// Whole-number settings read from environment variables: EIGENFORMER_NUM_THREADS (backend.hpp),
// EIGENFORMER_SPIN_US (backend.hpp) and EIGENFORMER_ALLOCATOR_CACHE_BYTES (allocator.hpp).
//
// They are read inside the first product or the first large allocation, where an exception would surface far
// from its cause, so a malformed or out-of-range value is ignored, as libgomp ignores a bad OMP_NUM_THREADS,
// but never silently: one line on stderr names the variable, its value, the range it takes and what is used
// instead. ("-5" for a byte count used to become 2^64 - 5 through strtoull, and "2x" threads 2 through atoi.)
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace eigenformer::detail {

// The variable's value when it is a whole number in [min, max]; nothing when it is unset or empty, and
// nothing plus the line on stderr when it is anything else. `instead` says what the caller then uses.
inline std::optional<long long> environment_integer(const char* name, long long min, long long max,
                                                    const char* instead) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (errno == 0 && end != text && *end == '\0' && value >= min && value <= max) return value;
  std::fprintf(stderr, "eigenformer: ignoring %s=\"%s\": expected a whole number from %lld to %lld; using %s\n",
               name, text, min, max, instead);
  return std::nullopt;
}

}  // namespace eigenformer::detail
