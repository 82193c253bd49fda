// Fixed positional encodings against the worked examples of BERT-from-scratch section 1.5
// (tests/data/worked_examples.json: binary_pe, sinusoidal_pe; the integer encoding needs no fixture).
#include <doctest/doctest.h>

#include "support/fixtures.hpp"
#include "support/throws.hpp"

using namespace eftest;

TEST_CASE_TEMPLATE("positional encoding: binary, MSB first (64 -> [0,1,0,0,0,0,0,0])", T, float, double) {
  const auto& ex = worked_examples().at("binary_pe").at("bits8");
  const auto pe = ef::nn::binary_positional_encoding<T>(12, 8, 64);  // positions 64..75
  for (auto it = ex.begin(); it != ex.end(); ++it) {
    const index_t pos = std::stoll(it.key());
    const auto bits = it.value().get<std::vector<int>>();
    for (index_t j = 0; j < 8; ++j) CHECK(pe(pos - 64, j) == static_cast<T>(bits[static_cast<std::size_t>(j)]));
  }
  CHECK_THROWS_WITH_EXACTLY(ef::nn::binary_positional_encoding<T>(300, 8), doctest::Contains("do not fit in 8 bits"),
                       std::invalid_argument);
}

TEST_CASE_TEMPLATE("positional encoding: integer (position 300 -> [300] * 8)", T, float, double) {
  const auto pe = ef::nn::integer_positional_encoding<T>(301, 8);
  for (index_t j = 0; j < 8; ++j) CHECK(pe(300, j) == T(300));
  CHECK(pe(0, 3) == T(0));
  CHECK_THROWS_EXACTLY(ef::nn::integer_positional_encoding<T>(4, 0), std::invalid_argument);
}

// The worked example prints 6 decimals, so agreement is to 5e-7 (half a unit in the last place) plus
// float32 rounding of values below 1 (6e-8).
TEST_CASE_TEMPLATE("positional encoding: sinusoidal, d_model 768, context 1024", T, float, double) {
  const auto& ex = worked_examples().at("sinusoidal_pe");
  const auto pe = ef::nn::sinusoidal_positional_encoding<T>(1024, 768);
  for (auto it = ex.at("rows").begin(); it != ex.at("rows").end(); ++it) {
    const index_t pos = std::stoll(it.key());
    const auto vals = it.value().get<std::vector<double>>();
    for (std::size_t j = 0; j < vals.size(); ++j) CHECK(std::abs(static_cast<double>(pe(pos, static_cast<index_t>(j))) - vals[j]) <= 6e-7);
  }
  for (auto it = ex.at("columns").begin(); it != ex.at("columns").end(); ++it) {
    const index_t col = std::stoll(it.key());
    const auto vals = it.value().get<std::vector<double>>();
    for (std::size_t p = 0; p < vals.size(); ++p) CHECK(std::abs(static_cast<double>(pe(static_cast<index_t>(p), col)) - vals[p]) <= 6e-7);
  }
  // Bounded in [-1, 1], unlike the integer encoding.
  CHECK(ef::max(ef::abs(pe)).item() <= T(1));
}
