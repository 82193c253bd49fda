// The message of the exception a call throws, for tests that check what an error says and that it is the
// type the library documents: error_of<ef::shape_error>([&] { ... }).
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

namespace eftest {

// "eigenformer::shape_error" rather than the mangled "N11eigenformer11shape_errorE", where the ABI can say.
inline std::string type_name(const std::type_info& t) {
#if __has_include(<cxxabi.h>)
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  if (status == 0 && name) return name.get();
#endif
  return t.name();
}

// E is the exact type the call must throw (not merely a base of it: a shape_error where the library
// documents std::invalid_argument is a wrong type too). Returns what() of that exception. A call that throws
// another type fails the test, naming both types and the message, and gives "(wrong exception type)"; a call
// that returns normally gives "(no exception)". Neither string contains a library message, so the caller's
// comparison of the message fails as well.
template <typename E, typename F>
std::string error_of(F&& f) {
  static_assert(std::is_base_of_v<std::exception, E>, "error_of<E>: E must be an exception type");
  try {
    f();
  } catch (const std::exception& e) {
    if (typeid(e) == typeid(E)) return e.what();
    // doctest streams a const char* as a pointer: the message goes in as a std::string.
    FAIL_CHECK("threw " << type_name(typeid(e)) << " (\"" << std::string(e.what()) << "\"), expected "
                          << type_name(typeid(E)));
    return "(wrong exception type)";
  } catch (...) {
    FAIL_CHECK("threw something that is not a std::exception, expected " << type_name(typeid(E)));
    return "(wrong exception type)";
  }
  return "(no exception)";
}

}  // namespace eftest
