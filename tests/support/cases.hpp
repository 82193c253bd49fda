// Table-driven tests: a loop over a fixture's cases checks how many it ran against the number the table
// holds, so a kind or op renamed in a fixture fails the test instead of running zero cases and passing.
#pragma once

#include "support/fixtures.hpp"

namespace eftest {

// How many cases of `file` (read from `file_name`) have `field` equal to `value`, as the file declares in
// its envelope ("counts", written by tools/reference/fixture_io.py's count_by). Throws, naming what the
// file declares, when it declares nothing for that value: a value renamed in the script.
inline std::size_t declared_cases(const json& file, const std::string& file_name, const std::string& field,
                                  const std::string& value) {
  if (!file.contains("counts") || !file.at("counts").contains(field))
    throw std::runtime_error(file_name + " declares no case counts by \"" + field +
                             "\" (rerun the script in tools/reference that writes it)");
  const json& counts = file.at("counts").at(field);
  if (!counts.contains(value))
    throw std::runtime_error(file_name + " declares no cases with " + field + " \"" + value + "\"; it declares " +
                             counts.dump());
  return counts.at(value).get<std::size_t>();
}

// The last check of a table-driven loop: it ran exactly the `expected` cases the table holds, and that is
// not zero.
inline void check_ran(std::size_t ran, std::size_t expected, const std::string& what) {
  CHECK_MESSAGE(expected > 0, what << ": the table holds no cases");
  CHECK_MESSAGE(ran == expected, what << ": ran " << ran << " cases, the table holds " << expected);
}

// For a table that declares no count of its own: at least the `minimum` cases the test states ran.
inline void check_ran_at_least(std::size_t ran, std::size_t minimum, const std::string& what) {
  CHECK_MESSAGE(minimum > 0, what << ": a minimum of zero cases checks nothing");
  CHECK_MESSAGE(ran >= minimum, what << ": ran " << ran << " cases, expected at least " << minimum);
}

}  // namespace eftest
