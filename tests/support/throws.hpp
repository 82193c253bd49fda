// CHECK_THROWS_EXACTLY(expr, E) and CHECK_THROWS_WITH_EXACTLY(expr, message, E): expr must throw E itself
// (and, for the second, with that what(): a string, or doctest::Contains("part")). doctest's
// CHECK_THROWS_AS / CHECK_THROWS_WITH_AS also pass for any class derived from E, so they cannot tell a
// shape_error from the std::invalid_argument a function documents (shape_error derives from it).
#pragma once

#include <string>

#include "support/errors.hpp"

namespace eftest {

inline bool message_matches(const std::string& what, const std::string& expected) { return what == expected; }
inline bool message_matches(const std::string& what, const doctest::Contains& expected) {
  return expected.checkWith(doctest::String(what.c_str()));
}

}  // namespace eftest

// A wrong type fails inside error_of (naming both types and the message); a call that returns normally gives
// error_of's "(no exception)", which fails here.
#define CHECK_THROWS_EXACTLY(expr, ...)                                                                  \
  do {                                                                                                   \
    const std::string eftest_what_ = ::eftest::error_of<__VA_ARGS__>([&] { static_cast<void>(expr); }); \
    CHECK_MESSAGE(eftest_what_ != "(no exception)", #expr " threw nothing, expected " #__VA_ARGS__);     \
  } while (false)

#define CHECK_THROWS_WITH_EXACTLY(expr, message, ...)                                                    \
  do {                                                                                                   \
    const std::string eftest_what_ = ::eftest::error_of<__VA_ARGS__>([&] { static_cast<void>(expr); }); \
    CHECK_MESSAGE(::eftest::message_matches(eftest_what_, message),                                     \
                  #expr " threw \"" << eftest_what_ << "\", expected " #message);                       \
  } while (false)
