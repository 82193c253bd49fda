// Reading the PyTorch fixtures (tests/data/*.json, written by the scripts in tools/reference/), the
// tutorials' worked examples among them, and comparing tensors against them with stated tolerances.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <eigenformer/eigenformer.hpp>
#include <fstream>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/paths.hpp"

namespace eftest {

namespace ef = eigenformer;
using json = nlohmann::json;
using ef::index_t;

// Python's json module writes bare Infinity, -Infinity and NaN, which strict JSON parsers reject; they
// are quoted (outside strings) before parsing, and number() reads them back.
inline json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture file " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::string fixed;
  fixed.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      fixed += c;
      if (c == '\\' && i + 1 < text.size()) fixed += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      const std::string t(token);
      if (text.compare(i, t.size(), t) == 0) {
        fixed += '"' + t + '"';
        i += t.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) fixed += c;
  }
  return json::parse(fixed);
}

// A fixture file from tests/data, checked for the format it was written in.
inline json load_fixture(const std::string& file) {
  // Appending in place: GCC 12 reports a false -Warray-bounds on `std::string(macro) + "..."` once inlined.
  std::string path = EIGENFORMER_TEST_DATA_DIR;
  path.append("/").append(file);
  json j = read_json(path);
  if (j.value("format", "") != "eigenformer-fixtures" || j.value("version", 0) != 1)
    throw std::runtime_error(file + ": not an eigenformer-fixtures version 1 file");
  return j;
}

// The tutorials' worked examples (tests/data/worked_examples.json, recomputed with PyTorch by
// tools/reference/make_worked_examples.py), by name: the file lists them as envelope cases, and the tests
// look each one up as worked_examples().at("sa_step_by_step").
inline const json& worked_examples() {
  static const json j = [] {
    // Named: ranging over load_fixture(...).at("cases") directly would read a destroyed temporary (C++20
    // keeps only the range expression's own result alive, not the object .at() points into).
    const json file = load_fixture("worked_examples.json");
    json by_name = json::object();
    for (const auto& c : file.at("cases")) by_name[c.at("name").get<std::string>()] = c;
    return by_name;
  }();
  return j;
}

// JSON has no inf/nan: the fixtures spell them "inf", "-inf", "nan".
inline double number(const json& v) {
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s == "nan" || s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    throw std::runtime_error("fixture: unexpected string number " + s);
  }
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.get<double>();
}

inline std::vector<index_t> shape_of(const json& t) { return t.at("shape").get<std::vector<index_t>>(); }

// The fixture tensor as Tensor<T, R>, with leading size-1 dims added when the fixture's rank is lower
// (broadcasting semantics are unchanged by such padding, which lets one rank serve every case).
template <typename T, std::size_t R>
ef::Tensor<T, R> to_tensor(const json& t) {
  const auto s = shape_of(t);
  if (s.size() > R) throw std::runtime_error("fixture tensor of rank " + std::to_string(s.size()) + " > " + std::to_string(R));
  ef::Shape<R> shape{};
  for (std::size_t i = 0; i < R; ++i) shape[i] = i < R - s.size() ? 1 : s[i - (R - s.size())];
  auto out = ef::Tensor<T, R>::empty(shape);
  const auto& data = t.at("data");
  if (static_cast<index_t>(data.size()) != out.numel()) throw std::runtime_error("fixture tensor data does not fill its shape");
  for (std::size_t i = 0; i < data.size(); ++i) out.data()[i] = static_cast<T>(number(data[i]));
  return out;
}

inline std::vector<double> values_of(const json& t) {
  std::vector<double> v;
  for (const auto& x : t.at("data")) v.push_back(number(x));
  return v;
}

// Shapes equal up to leading size-1 dims.
template <std::size_t R>
bool same_padded_shape(const ef::Shape<R>& actual, std::vector<index_t> expected) {
  std::vector<index_t> a(actual.begin(), actual.end());
  auto strip = [](std::vector<index_t>& s) {
    while (!s.empty() && s.front() == 1) s.erase(s.begin());
  };
  strip(a);
  strip(expected);
  return a == expected;
}

// Every element within atol + rtol * |expected| (numpy.isclose); inf and nan must match exactly.
template <typename T, std::size_t R>
void check_close(const ef::Tensor<T, R>& actual, const json& expected, double rtol, double atol,
                 const std::string& what) {
  INFO(what);
  REQUIRE_MESSAGE(same_padded_shape(actual.shape(), shape_of(expected)),
                  "shape " << ef::shape_string(actual.shape()) << " vs expected " << ef::shape_string(shape_of(expected)));
  const auto a = actual.to_vector();
  const auto e = values_of(expected);
  int bad = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = e[i];
    const bool ok = (std::isnan(y) && std::isnan(x)) || (std::isinf(y) && x == y) ||
                    (std::isfinite(y) && std::abs(x - y) <= atol + rtol * std::abs(y));
    if (!ok && bad++ < 5) FAIL_CHECK("element " << i << ": " << x << " vs expected " << y);
  }
  CHECK(bad == 0);
}

// Bit-for-bit equality (values stored as the exact float32/float64 decimal expansion in the JSON).
template <typename T, std::size_t R>
void check_exact(const ef::Tensor<T, R>& actual, const json& expected, const std::string& what) {
  check_close(actual, expected, 0.0, 0.0, what);
}

// Largest |a - e| / max(|e|, tiny) over a tensor, for reporting.
template <typename T, std::size_t R>
double max_rel_error(const ef::Tensor<T, R>& actual, const json& expected) {
  const auto a = actual.to_vector();
  const auto e = values_of(expected);
  double m = 0;
  for (std::size_t i = 0; i < e.size(); ++i)
    if (std::isfinite(e[i])) m = std::max(m, std::abs(a[i] - e[i]) / std::max(std::abs(e[i]), 1e-30));
  return m;
}

// A tensor whose values are their row-major positions plus `start`: [[0, 1, 2, 3], [4, 5, 6, 7], ...].
template <typename T, std::size_t R>
ef::Tensor<T, R> iota(const ef::Shape<R>& shape, double start = 0) {
  auto t = ef::Tensor<T, R>::empty(shape);
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<T>(start + static_cast<double>(i));
  return t;
}

// Expected values written as doubles, converted to the element type under test.
template <typename T>
std::vector<T> vec(std::initializer_list<double> v) {
  std::vector<T> out;
  for (double x : v) out.push_back(static_cast<T>(x));
  return out;
}

// Every parameter's values, in named_parameters() order: for checking that loading or copying changed them.
template <typename T>
std::vector<std::vector<T>> parameter_values(ef::nn::Module<T>& m) {
  std::vector<std::vector<T>> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.data.to_vector());
  return out;
}

template <typename T>
constexpr T inf = std::numeric_limits<T>::infinity();

// Whether p is on a 64-byte boundary, the alignment the library promises for tensor storage.
inline bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

}  // namespace eftest
