// Tests that change the thread count: guards that put it (or another setting) back when a test ends, and a
// check that a computation gives the one-thread bits on other thread counts.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <eigenformer/tensor.hpp>
#include <initializer_list>
#include <vector>

namespace eftest {

// Puts back, when its scope ends, the thread count in force when it was made: also when a check throws, so
// that a failing test does not leave the test cases after it on another thread count.
struct RestoreThreadCount {
  int saved = eigenformer::get_num_threads();
  RestoreThreadCount() = default;
  RestoreThreadCount(const RestoreThreadCount&) = delete;
  RestoreThreadCount& operator=(const RestoreThreadCount&) = delete;
  ~RestoreThreadCount() { eigenformer::set_num_threads(saved); }
};

// The same for a variable a test sets for a while (a tuning threshold of the library, say).
template <class T>
class RestoreValue {
 public:
  explicit RestoreValue(T& variable) : variable_(variable), saved_(variable) {}
  RestoreValue(const RestoreValue&) = delete;
  RestoreValue& operator=(const RestoreValue&) = delete;
  ~RestoreValue() { variable_ = saved_; }

 private:
  T& variable_;
  T saved_;
};

// run() (returning its results as floats) with set_num_threads(1), then with each of `others`: every result
// must have the one-thread bits (NaN payloads compared as bits too). The thread count in force before is
// restored, also when a check throws. Returns the one-thread results, for checks of what they are.
template <class Run>
std::vector<float> check_same_bits_on_thread_counts(Run&& run,
                                                    std::initializer_list<int> others = {2, 3, 4}) {
  const RestoreThreadCount restore;
  eigenformer::set_num_threads(1);
  const std::vector<float> one = run();
  for (const int threads : others) {
    CAPTURE(threads);
    eigenformer::set_num_threads(threads);
    const std::vector<float> other = run();
    REQUIRE(other.size() == one.size());
    CHECK(std::memcmp(other.data(), one.data(), one.size() * sizeof(float)) == 0);
  }
  return one;
}

}  // namespace eftest
