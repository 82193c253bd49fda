// Printing: every case in tests/data/print.json (repr strings from PyTorch 1.13) and hand-written cases
// whose expected strings are PyTorch 1.13's repr of the same tensors (tests/data/print_handwritten.json).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <eigenformer/tensor/creation.hpp>
#include <eigenformer/tensor/print.hpp>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "support/paths.hpp"
#include "support/throws.hpp"

namespace {

namespace ef = eigenformer;
using ef::index_t;
using nlohmann::json;

// Restores the default print options when a test (or a failing CHECK's exception) leaves the scope.
struct options_guard {
  options_guard() = default;
  explicit options_guard(const ef::print_options& options) { ef::set_printoptions(options); }
  options_guard(const options_guard&) = delete;
  options_guard& operator=(const options_guard&) = delete;
  ~options_guard() { ef::reset_printoptions(); }
};

template <typename T, std::size_t R>
std::string repr(const ef::Tensor<T, R>& t) {
  return ef::to_string(t);
}

// ---- print.json ------------------------------------------------------------------------------------------

template <typename T>
T element_from_json(const json& j) {
  if constexpr (std::is_floating_point_v<T>) {
    if (j.is_string()) {
      const auto s = j.get<std::string>();
      if (s == "inf") return std::numeric_limits<T>::infinity();
      if (s == "-inf") return -std::numeric_limits<T>::infinity();
      if (s == "nan") return std::numeric_limits<T>::quiet_NaN();
      throw std::runtime_error("print.json: unknown non-finite value \"" + s + "\"");
    }
    // The fixture holds the exact float32/float64 value, so the cast to float is exact.
    return static_cast<T>(j.get<double>());
  } else {
    return j.get<T>();
  }
}

// Builds the fixture's tensor and prints it twice: through the global options (already set by the
// caller) with operator<<, and with the options passed explicitly to to_string.
struct printed {
  std::string global;
  std::string explicit_options;
};

template <typename T, std::size_t R>
printed print_fixture(const json& input, const ef::print_options& options) {
  ef::Shape<R> shape{};
  for (std::size_t i = 0; i < R; ++i) shape[i] = input.at("shape").at(i).get<index_t>();
  auto t = ef::Tensor<T, R>::empty(shape);
  const auto& data = input.at("data");
  REQUIRE(static_cast<index_t>(data.size()) == t.numel());
  T* out = t.data();
  for (const auto& v : data) *out++ = element_from_json<T>(v);
  std::ostringstream os;
  os << t;
  return {os.str(), ef::to_string(t, options)};
}

template <typename T>
printed print_fixture_any_rank(const json& input, const ef::print_options& options) {
  switch (input.at("shape").size()) {
    case 0:
      return print_fixture<T, 0>(input, options);
    case 1:
      return print_fixture<T, 1>(input, options);
    case 2:
      return print_fixture<T, 2>(input, options);
    case 3:
      return print_fixture<T, 3>(input, options);
    case 4:
      return print_fixture<T, 4>(input, options);
    case 5:
      return print_fixture<T, 5>(input, options);
    case 6:
      return print_fixture<T, 6>(input, options);
    default:
      throw std::runtime_error("print.json: rank " + std::to_string(input.at("shape").size()) +
                               " unsupported");
  }
}

printed print_fixture_any(const json& input, const ef::print_options& options) {
  const auto dtype = input.at("dtype").get<std::string>();
  if (dtype == "float32") return print_fixture_any_rank<float>(input, options);
  if (dtype == "float64") return print_fixture_any_rank<double>(input, options);
  if (dtype == "int64") return print_fixture_any_rank<std::int64_t>(input, options);
  if (dtype == "bool") return print_fixture_any_rank<bool>(input, options);
  throw std::runtime_error("print.json: unknown dtype " + dtype);
}

ef::print_options options_from_json(const json& j) {
  ef::print_options o;
  o.precision = j.value("precision", o.precision);
  if (j.contains("sci_mode") && !j.at("sci_mode").is_null()) o.sci_mode = j.at("sci_mode").get<bool>();
  o.threshold = j.value("threshold", o.threshold);
  o.edgeitems = j.value("edgeitems", o.edgeitems);
  o.linewidth = j.value("linewidth", o.linewidth);
  return o;
}

// A fixture file of tests/data (written by tools/reference/make_fixtures.py), checked for its envelope. Not
// support/fixtures.hpp's load_fixture: that header brings in the whole tensor library, which this file
// does not need, and these files hold no non-finite numbers.
json load_print_fixture(const std::string& file) {
  const std::string path = std::string(EIGENFORMER_TEST_DATA_DIR) + "/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture file " + path);
  json doc = json::parse(in);
  if (doc.value("format", "") != "eigenformer-fixtures" || doc.value("version", 0) != 1)
    throw std::runtime_error(file + ": not an eigenformer-fixtures version 1 file");
  return doc;
}

// The case of print_handwritten.json named `name`: PyTorch's repr of the tensor the test below builds.
const json& handwritten(const std::string& name) {
  static const json by_name = [] {
    // Named: C++20 keeps only the range expression's own result alive, not the file .at() points into.
    const json file = load_print_fixture("print_handwritten.json");
    json out = json::object();
    for (const auto& c : file.at("cases")) out[c.at("name").get<std::string>()] = c;
    return out;
  }();
  if (!by_name.contains(name)) throw std::runtime_error("print_handwritten.json: no case named " + name);
  return by_name.at(name);
}

std::string handwritten_repr(const std::string& name) { return handwritten(name).at("repr").get<std::string>(); }

// The options torch.set_printoptions left in force in the print_handwritten.json case `name` (its "options").
void check_options(const ef::print_options& o, const std::string& name) {
  const json& want = handwritten(name).at("options");
  INFO("print_handwritten.json case " << name << ": " << want.dump());
  CHECK(o.precision == want.at("precision").get<int>());
  if (want.at("sci_mode").is_null())
    CHECK(!o.sci_mode.has_value());
  else
    CHECK(o.sci_mode == std::optional<bool>(want.at("sci_mode").get<bool>()));
  CHECK(o.threshold == want.at("threshold").get<index_t>());
  CHECK(o.edgeitems == want.at("edgeitems").get<index_t>());
  CHECK(o.linewidth == want.at("linewidth").get<index_t>());
}

}  // namespace

TEST_CASE("print: every print.json case matches PyTorch's repr") {
  const json doc = load_print_fixture("print.json");
  const auto& cases = doc.at("cases");
  REQUIRE(!cases.empty());

  std::size_t passed = 0;
  for (const auto& c : cases) {
    const auto name = c.at("name").get<std::string>();
    const auto expected = c.at("repr").get<std::string>();
    INFO("case " << name);
    const auto options = options_from_json(c.value("options", json::object()));
    printed got;
    {
      options_guard guard(options);
      got = print_fixture_any(c.at("input"), options);
    }
    CHECK(got.global == expected);
    CHECK(got.explicit_options == expected);
    if (got.global == expected && got.explicit_options == expected) ++passed;
    // The guard put the defaults back.
    check_options(ef::get_printoptions(), "options_default");
  }
  MESSAGE("print.json: " << passed << " of " << cases.size() << " cases match");
  CHECK(passed == cases.size());
}

// ---- hand-written cases ----------------------------------------------------------------------------------
// The tests build these tensors themselves (views, expand, strided slices, large aranges); the expected
// strings are PyTorch's repr of the same tensors under the same options, from print_handwritten.json
// (tools/reference/make_fixtures.py's print_handwritten_cases).

TEST_CASE("print: float32 matrix, views and notation") {
  const auto a = ef::tensor<float>({{0.2961f, 0.5166f}, {0.2517f, 0.6886f}, {0.0740f, 0.8665f}});
  CHECK(repr(a) == handwritten_repr("matrix_3x2"));
  std::ostringstream os;
  os << a;
  CHECK(os.str() == repr(a));

  // Non-contiguous and stride-0 views print their logical elements.
  CHECK(repr(a.t()) == handwritten_repr("matrix_3x2_transposed"));
  CHECK(repr(ef::tensor<float>({1.5f, -2.0f}).expand(ef::Shape<2>{3, 2})) == handwritten_repr("row_expanded_3x2"));
  auto column = ef::zeros<float>(ef::Shape<2>{2, 1});
  column.data()[0] = 1.0f;
  column.data()[1] = 2.0f;
  CHECK(repr(column.expand(ef::Shape<2>{2, 3})) == handwritten_repr("column_expanded_2x3"));

  // Integral values, negative zero, nan (never -nan), sci mode for a small/large mix.
  CHECK(repr(ef::tensor<float>({-0.0f, -3.0f, 5.0f})) == handwritten_repr("integral_neg_zero"));
  CHECK(repr(ef::tensor<float>({-std::numeric_limits<float>::quiet_NaN(), 0.5f})) == handwritten_repr("negative_nan"));
  CHECK(repr(ef::tensor<float>({1e-6f, std::numeric_limits<float>::quiet_NaN(), 5.0f})) == handwritten_repr("small_nan_sci"));
  CHECK(repr(ef::tensor<float>({1e9f, 1.0f, -0.0f})) == handwritten_repr("large_neg_zero_sci"));
  CHECK(repr(ef::scalar_tensor(123456789.0f)) == handwritten_repr("scalar_123456789"));
  CHECK(repr(ef::scalar_tensor(1e-45f)) == handwritten_repr("scalar_denormal"));  // a denormal
}

TEST_CASE("print: rank 3 and 5 nesting") {
  auto t = ef::zeros<float>(ef::Shape<3>{2, 3, 4});
  for (index_t i = 0; i < 24; ++i) t.data()[i] = static_cast<float>(i);
  CHECK(repr(t) == handwritten_repr("arange24_2x3x4"));
  auto ones = ef::zeros<float>(ef::Shape<5>{1, 1, 1, 2, 1});
  ones.fill_(1.0f);
  CHECK(repr(ones) == handwritten_repr("ones_1x1x1x2x1"));
}

TEST_CASE("print: int64, bool, 0-d and dtype suffixes") {
  CHECK(repr(ef::tensor<std::int64_t>({4, 1, 7})) == handwritten_repr("int64_4_1_7"));
  CHECK(repr(ef::tensor<std::int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}).slice(0, 1, 10, 2)) ==
        handwritten_repr("int64_strided_slice"));
  CHECK(repr(ef::tensor<bool>({true, false})) == handwritten_repr("bool_true_false"));
  CHECK(repr(ef::tensor<bool>({true, true})) == handwritten_repr("bool_true_true"));

  CHECK(repr(ef::scalar_tensor(3.5f)) == handwritten_repr("scalar_3p5"));
  CHECK(repr(ef::scalar_tensor(-0.25)) == handwritten_repr("scalar_f64_neg"));
  CHECK(repr(ef::scalar_tensor<std::int64_t>(-3)) == handwritten_repr("scalar_int64_neg"));
  CHECK(repr(ef::scalar_tensor(false)) == handwritten_repr("scalar_false"));

  CHECK(repr(ef::tensor<double>({1.0 / 3, -2.0 / 3})) == handwritten_repr("f64_thirds"));
  // The dtype suffix moves to its own line when it would pass linewidth.
  const auto d = ef::tensor<double>(
      {{0.1362, 0.8459, 0.3757, 0.3786}, {0.7742, 0.3307, 0.3259, 0.8122}, {0.4264, 0.2017, 0.9559, 0.8867}});
  CHECK(ef::to_string(d, {.linewidth = 40}) == handwritten_repr("f64_3x4_linewidth40"));
  auto wide = ef::zeros<double>(ef::Shape<2>{2, 30});
  wide.fill_(1.5);
  CHECK(repr(wide) == handwritten_repr("f64_wide_2x30"));
}

TEST_CASE("print: empty tensors") {
  CHECK(repr(ef::zeros<float>(ef::Shape<1>{0})) == handwritten_repr("empty_f32_0"));
  CHECK(repr(ef::zeros<float>(ef::Shape<2>{2, 0})) == handwritten_repr("empty_f32_2x0"));
  CHECK(repr(ef::zeros<std::int64_t>(ef::Shape<1>{0})) == handwritten_repr("empty_int64_0"));
  CHECK(repr(ef::zeros<bool>(ef::Shape<1>{0})) == handwritten_repr("empty_bool_0"));
  CHECK(repr(ef::zeros<double>(ef::Shape<3>{2, 0, 3})) == handwritten_repr("empty_f64_2x0x3"));
  CHECK(ef::to_string(ef::zeros<double>(ef::Shape<2>{2, 0}), {.linewidth = 20}) == handwritten_repr("empty_f64_2x0_linewidth20"));
}

TEST_CASE("print: precision, sci_mode and rounding") {
  const auto a = ef::tensor<float>({{0.2961f, 0.5166f}, {0.2517f, 0.6886f}, {0.0740f, 0.8665f}});
  {
    options_guard guard;
    ef::set_printoptions(2);
    CHECK(repr(a) == handwritten_repr("matrix_3x2_precision2"));
    ef::set_printoptions(4, true);
    CHECK(repr(a) == handwritten_repr("matrix_3x2_sci"));
    // PyTorch ignores a forced sci_mode when there is no nonzero finite element.
    CHECK(repr(ef::tensor<float>({0.0f, 0.0f, 0.0f})) == handwritten_repr("zeros_3_sci"));
  }
  CHECK(repr(a) == handwritten_repr("matrix_3x2"));  // defaults are back

  // Round half to even on the exact binary value, like Python's format: 0.125 -> 0.12, 0.375 -> 0.38.
  CHECK(ef::to_string(ef::tensor<float>({0.125f, 0.375f, 2.5f}), {.precision = 2}) == handwritten_repr("half_even_precision2"));
  CHECK(ef::to_string(ef::tensor<float>({0.5f, 1.5f, 2.5f, 0.25f}), {.precision = 0}) ==
        handwritten_repr("half_even_precision0"));
  CHECK(ef::to_string(ef::tensor<double>({1.0 / 3, -2.0 / 3}), {.precision = 10}) == handwritten_repr("f64_thirds_precision10"));
  // Fixed notation of a huge float32 value prints all its digits.
  CHECK(ef::to_string(ef::tensor<float>({3e38f, 1.5f}), {.sci_mode = false}) == handwritten_repr("huge_f32_fixed"));
}

TEST_CASE("print: summarisation, edgeitems and linewidth") {
  auto m = ef::zeros<float>(ef::Shape<2>{4, 5});
  for (index_t i = 0; i < 20; ++i) m.data()[i] = static_cast<float>(i);
  CHECK(ef::to_string(m, {.threshold = 5, .edgeitems = 1}) == handwritten_repr("arange20_4x5_threshold5_edge1"));

  // PyTorch's self[-0:] quirk: with edgeitems 0 a summarised vector shows `...` and then everything.
  auto v = ef::zeros<float>(ef::Shape<1>{10});
  for (index_t i = 0; i < 10; ++i) v.data()[i] = static_cast<float>(i);
  CHECK(ef::to_string(v, {.threshold = 5, .edgeitems = 0}) == handwritten_repr("arange10_threshold5_edge0"));

  CHECK(ef::to_string(ef::tensor<std::int64_t>({1, 2, 3, 4, 5, 6, 7}), {.threshold = 0}) ==
        handwritten_repr("int64_1to7_threshold0"));
  CHECK(ef::to_string(ef::tensor<std::int64_t>({1, 22, 333}), {.linewidth = -5}) == handwritten_repr("int64_linewidth_negative"));

  auto b = ef::zeros<bool>(ef::Shape<2>{2, 600});
  for (index_t i = 0; i < 1200; ++i) b.data()[i] = i % 2 == 0;
  CHECK(repr(b) == handwritten_repr("bool_2x600_alternating"));

  // The formatter only sees the elements shown, so the hidden large values do not widen the columns.
  auto c = ef::zeros<float>(ef::Shape<3>{10, 10, 10});
  for (index_t i = 0; i < 1000; ++i) c.data()[i] = static_cast<float>(i) / 7.0f;
  CHECK(ef::to_string(c, {.threshold = 100, .edgeitems = 2}) == handwritten_repr("sevenths_10x10x10_threshold100_edge2"));

  auto d = ef::zeros<double>(ef::Shape<1>{2000});
  for (index_t i = 0; i < 2000; ++i) d.data()[i] = static_cast<double>(i) / 4;
  CHECK(repr(d) == handwritten_repr("f64_quarters_2000"));
}

TEST_CASE("print: a large unsummarised tensor prints in linear time") {
  // repr(torch.arange(100000.) / 8) with threshold=inf; the fixture keeps its length, line count and ends.
  const json& expected = handwritten("eighths_100000_unsummarised");
  auto big = ef::zeros<float>(ef::Shape<1>{100000});
  for (index_t i = 0; i < 100000; ++i) big.data()[i] = static_cast<float>(i) / 8.0f;
  const auto s = ef::to_string(big, {.threshold = std::numeric_limits<index_t>::max()});
  CHECK(s.size() == expected.at("length").get<std::size_t>());
  CHECK(static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')) == expected.at("newlines").get<std::size_t>());
  const auto head = expected.at("head").get<std::string>(), tail = expected.at("tail").get<std::string>();
  CHECK(s.substr(0, head.size()) == head);
  CHECK(s.substr(s.size() - std::min(s.size(), tail.size())) == tail);
}

TEST_CASE("print: the global options") {
  options_guard guard;
  ef::reset_printoptions();
  check_options(ef::get_printoptions(), "options_default");

  ef::set_printoptions(options_from_json(handwritten("options_set_all").at("set")));
  check_options(ef::get_printoptions(), "options_set_all");

  // Like torch.set_printoptions(precision=6) alone: the other settings stay, sci_mode returns to automatic.
  ef::set_printoptions(handwritten("options_then_precision6").at("set").at("precision").get<int>());
  check_options(ef::get_printoptions(), "options_then_precision6");

  // Invalid settings are refused and leave the options as they were.
  CHECK_THROWS_EXACTLY(ef::set_printoptions(-1), std::invalid_argument);
  CHECK_THROWS_EXACTLY(ef::set_printoptions(ef::print_options{.edgeitems = -1}), std::invalid_argument);
  check_options(ef::get_printoptions(), "options_then_precision6");

  ef::reset_printoptions();
  check_options(ef::get_printoptions(), "options_default");
}
