// The message of the exception a call throws, for tests that check what an error says without tying
// themselves to its type; "(no exception)" when it returns normally.
#pragma once

#include <exception>
#include <string>

namespace eftest {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace eftest
