// Two models' parameters compared name by name, bit for bit: what undoing a conversion of the weights
// (unpack_weights after pack_weights with FloatWeights::release) must give back.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "support/cases.hpp"

namespace eftest {

template <class Model>
void check_same_parameters(Model& got, Model& expected, const std::string& what) {
  const auto a = got.named_parameters(), b = expected.named_parameters();
  REQUIRE_MESSAGE(a.size() == b.size(), what);
  std::size_t compared = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(what << ": " << b[i].name);
    CHECK(a[i].name == b[i].name);
    const auto x = a[i].data.to_vector(), y = b[i].data.to_vector();
    REQUIRE(x.size() == y.size());
    CHECK(std::memcmp(x.data(), y.data(), sizeof(x[0]) * x.size()) == 0);
    ++compared;
  }
  check_ran_at_least(compared, 1, what + ": parameters compared");
}

}  // namespace eftest
