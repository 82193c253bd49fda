// Printing: every case in tests/data/print.json (repr strings from PyTorch 1.13) and hand-written cases
// whose expected strings were also taken from PyTorch 1.13's repr.
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

}  // namespace

TEST_CASE("print: every print.json case matches PyTorch's repr") {
  const std::string path = std::string(EIGENFORMER_TEST_DATA_DIR) + "/print.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.is_open(), "cannot open " << path);
  const json doc = json::parse(in);
  REQUIRE(doc.at("format") == "eigenformer-fixtures");
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
    CHECK(ef::get_printoptions().precision == 4);
    CHECK(!ef::get_printoptions().sci_mode.has_value());
  }
  MESSAGE("print.json: " << passed << " of " << cases.size() << " cases match");
  CHECK(passed == cases.size());
}

// ---- hand-written cases ----------------------------------------------------------------------------------

TEST_CASE("print: float32 matrix, views and notation") {
  const auto a = ef::tensor<float>({{0.2961f, 0.5166f}, {0.2517f, 0.6886f}, {0.0740f, 0.8665f}});
  CHECK(repr(a) ==
        "tensor([[0.2961, 0.5166],\n"
        "        [0.2517, 0.6886],\n"
        "        [0.0740, 0.8665]])");
  std::ostringstream os;
  os << a;
  CHECK(os.str() == repr(a));

  // Non-contiguous and stride-0 views print their logical elements.
  CHECK(repr(a.t()) ==
        "tensor([[0.2961, 0.2517, 0.0740],\n"
        "        [0.5166, 0.6886, 0.8665]])");
  CHECK(repr(ef::tensor<float>({1.5f, -2.0f}).expand(ef::Shape<2>{3, 2})) ==
        "tensor([[ 1.5000, -2.0000],\n"
        "        [ 1.5000, -2.0000],\n"
        "        [ 1.5000, -2.0000]])");
  auto column = ef::zeros<float>(ef::Shape<2>{2, 1});
  column.data()[0] = 1.0f;
  column.data()[1] = 2.0f;
  CHECK(repr(column.expand(ef::Shape<2>{2, 3})) ==
        "tensor([[1., 1., 1.],\n"
        "        [2., 2., 2.]])");

  // Integral values, negative zero, nan (never -nan), sci mode for a small/large mix.
  CHECK(repr(ef::tensor<float>({-0.0f, -3.0f, 5.0f})) == "tensor([-0., -3.,  5.])");
  CHECK(repr(ef::tensor<float>({-std::numeric_limits<float>::quiet_NaN(), 0.5f})) ==
        "tensor([   nan, 0.5000])");
  CHECK(repr(ef::tensor<float>({1e-6f, std::numeric_limits<float>::quiet_NaN(), 5.0f})) ==
        "tensor([1.0000e-06,        nan, 5.0000e+00])");
  CHECK(repr(ef::tensor<float>({1e9f, 1.0f, -0.0f})) == "tensor([1.0000e+09, 1.0000e+00, -0.0000e+00])");
  CHECK(repr(ef::scalar_tensor(123456789.0f)) == "tensor(1.2346e+08)");
  CHECK(repr(ef::scalar_tensor(1e-45f)) == "tensor(1.4013e-45)");  // a denormal
}

TEST_CASE("print: rank 3 and 5 nesting") {
  auto t = ef::zeros<float>(ef::Shape<3>{2, 3, 4});
  for (index_t i = 0; i < 24; ++i) t.data()[i] = static_cast<float>(i);
  CHECK(repr(t) ==
        "tensor([[[ 0.,  1.,  2.,  3.],\n"
        "         [ 4.,  5.,  6.,  7.],\n"
        "         [ 8.,  9., 10., 11.]],\n"
        "\n"
        "        [[12., 13., 14., 15.],\n"
        "         [16., 17., 18., 19.],\n"
        "         [20., 21., 22., 23.]]])");
  auto ones = ef::zeros<float>(ef::Shape<5>{1, 1, 1, 2, 1});
  ones.fill_(1.0f);
  CHECK(repr(ones) ==
        "tensor([[[[[1.],\n"
        "           [1.]]]]])");
}

TEST_CASE("print: int64, bool, 0-d and dtype suffixes") {
  CHECK(repr(ef::tensor<std::int64_t>({4, 1, 7})) == "tensor([4, 1, 7])");
  CHECK(repr(ef::tensor<std::int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}).slice(0, 1, 10, 2)) ==
        "tensor([1, 3, 5, 7, 9])");
  CHECK(repr(ef::tensor<bool>({true, false})) == "tensor([ True, False])");
  CHECK(repr(ef::tensor<bool>({true, true})) == "tensor([True, True])");

  CHECK(repr(ef::scalar_tensor(3.5f)) == "tensor(3.5000)");
  CHECK(repr(ef::scalar_tensor(-0.25)) == "tensor(-0.2500, dtype=torch.float64)");
  CHECK(repr(ef::scalar_tensor<std::int64_t>(-3)) == "tensor(-3)");
  CHECK(repr(ef::scalar_tensor(false)) == "tensor(False)");

  CHECK(repr(ef::tensor<double>({1.0 / 3, -2.0 / 3})) == "tensor([ 0.3333, -0.6667], dtype=torch.float64)");
  // The dtype suffix moves to its own line when it would pass linewidth.
  const auto d = ef::tensor<double>(
      {{0.1362, 0.8459, 0.3757, 0.3786}, {0.7742, 0.3307, 0.3259, 0.8122}, {0.4264, 0.2017, 0.9559, 0.8867}});
  CHECK(ef::to_string(d, {.linewidth = 40}) ==
        "tensor([[0.1362, 0.8459, 0.3757, 0.3786],\n"
        "        [0.7742, 0.3307, 0.3259, 0.8122],\n"
        "        [0.4264, 0.2017, 0.9559, 0.8867]],\n"
        "       dtype=torch.float64)");
  auto wide = ef::zeros<double>(ef::Shape<2>{2, 30});
  wide.fill_(1.5);
  CHECK(repr(wide) ==
        "tensor([[1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n"
        "         1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n"
        "         1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n"
        "         1.5000, 1.5000, 1.5000],\n"
        "        [1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n"
        "         1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n"
        "         1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n"
        "         1.5000, 1.5000, 1.5000]], dtype=torch.float64)");
}

TEST_CASE("print: empty tensors") {
  CHECK(repr(ef::zeros<float>(ef::Shape<1>{0})) == "tensor([])");
  CHECK(repr(ef::zeros<float>(ef::Shape<2>{2, 0})) == "tensor([], size=(2, 0))");
  CHECK(repr(ef::zeros<std::int64_t>(ef::Shape<1>{0})) == "tensor([], dtype=torch.int64)");
  CHECK(repr(ef::zeros<bool>(ef::Shape<1>{0})) == "tensor([], dtype=torch.bool)");
  CHECK(repr(ef::zeros<double>(ef::Shape<3>{2, 0, 3})) ==
        "tensor([], size=(2, 0, 3), dtype=torch.float64)");
  CHECK(ef::to_string(ef::zeros<double>(ef::Shape<2>{2, 0}), {.linewidth = 20}) ==
        "tensor([],\n"
        "       size=(2, 0),\n"
        "       dtype=torch.float64)");
}

TEST_CASE("print: precision, sci_mode and rounding") {
  const auto a = ef::tensor<float>({{0.2961f, 0.5166f}, {0.2517f, 0.6886f}, {0.0740f, 0.8665f}});
  {
    options_guard guard;
    ef::set_printoptions(2);
    CHECK(repr(a) ==
          "tensor([[0.30, 0.52],\n"
          "        [0.25, 0.69],\n"
          "        [0.07, 0.87]])");
    ef::set_printoptions(4, true);
    CHECK(repr(a) ==
          "tensor([[2.9610e-01, 5.1660e-01],\n"
          "        [2.5170e-01, 6.8860e-01],\n"
          "        [7.4000e-02, 8.6650e-01]])");
    // PyTorch ignores a forced sci_mode when there is no nonzero finite element.
    CHECK(repr(ef::tensor<float>({0.0f, 0.0f, 0.0f})) == "tensor([0., 0., 0.])");
  }
  CHECK(repr(a).find("0.2961") != std::string::npos);  // defaults are back

  // Round half to even on the exact binary value, like Python's format: 0.125 -> 0.12, 0.375 -> 0.38.
  CHECK(ef::to_string(ef::tensor<float>({0.125f, 0.375f, 2.5f}), {.precision = 2}) ==
        "tensor([0.12, 0.38, 2.50])");
  CHECK(ef::to_string(ef::tensor<float>({0.5f, 1.5f, 2.5f, 0.25f}), {.precision = 0}) ==
        "tensor([0, 2, 2, 0])");
  CHECK(ef::to_string(ef::tensor<double>({1.0 / 3, -2.0 / 3}), {.precision = 10}) ==
        "tensor([ 0.3333333333, -0.6666666667], dtype=torch.float64)");
  // Fixed notation of a huge float32 value prints all its digits.
  CHECK(ef::to_string(ef::tensor<float>({3e38f, 1.5f}), {.sci_mode = false}) ==
        "tensor([300000000549775575777803994281145270272.0000,     1.5000])");
}

TEST_CASE("print: summarisation, edgeitems and linewidth") {
  auto m = ef::zeros<float>(ef::Shape<2>{4, 5});
  for (index_t i = 0; i < 20; ++i) m.data()[i] = static_cast<float>(i);
  CHECK(ef::to_string(m, {.threshold = 5, .edgeitems = 1}) ==
        "tensor([[ 0.,  ...,  4.],\n"
        "        ...,\n"
        "        [15.,  ..., 19.]])");

  // PyTorch's self[-0:] quirk: with edgeitems 0 a summarised vector shows `...` and then everything.
  auto v = ef::zeros<float>(ef::Shape<1>{10});
  for (index_t i = 0; i < 10; ++i) v.data()[i] = static_cast<float>(i);
  CHECK(ef::to_string(v, {.threshold = 5, .edgeitems = 0}) ==
        "tensor([ ..., 0., 1., 2., 3., 4., 5., 6., 7., 8., 9.])");

  CHECK(ef::to_string(ef::tensor<std::int64_t>({1, 2, 3, 4, 5, 6, 7}), {.threshold = 0}) ==
        "tensor([1, 2, 3,  ..., 5, 6, 7])");
  CHECK(ef::to_string(ef::tensor<std::int64_t>({1, 22, 333}), {.linewidth = -5}) ==
        "tensor([  1,\n"
        "         22,\n"
        "        333])");

  auto b = ef::zeros<bool>(ef::Shape<2>{2, 600});
  for (index_t i = 0; i < 1200; ++i) b.data()[i] = i % 2 == 0;
  CHECK(repr(b) ==
        "tensor([[ True, False,  True,  ..., False,  True, False],\n"
        "        [ True, False,  True,  ..., False,  True, False]])");

  // The formatter only sees the elements shown, so the hidden large values do not widen the columns.
  auto c = ef::zeros<float>(ef::Shape<3>{10, 10, 10});
  for (index_t i = 0; i < 1000; ++i) c.data()[i] = static_cast<float>(i) / 7.0f;
  CHECK(ef::to_string(c, {.threshold = 100, .edgeitems = 2}) ==
        "tensor([[[  0.0000,   0.1429,  ...,   1.1429,   1.2857],\n"
        "         [  1.4286,   1.5714,  ...,   2.5714,   2.7143],\n"
        "         ...,\n"
        "         [ 11.4286,  11.5714,  ...,  12.5714,  12.7143],\n"
        "         [ 12.8571,  13.0000,  ...,  14.0000,  14.1429]],\n"
        "\n"
        "        [[ 14.2857,  14.4286,  ...,  15.4286,  15.5714],\n"
        "         [ 15.7143,  15.8571,  ...,  16.8571,  17.0000],\n"
        "         ...,\n"
        "         [ 25.7143,  25.8571,  ...,  26.8571,  27.0000],\n"
        "         [ 27.1429,  27.2857,  ...,  28.2857,  28.4286]],\n"
        "\n"
        "        ...,\n"
        "\n"
        "        [[114.2857, 114.4286,  ..., 115.4286, 115.5714],\n"
        "         [115.7143, 115.8571,  ..., 116.8571, 117.0000],\n"
        "         ...,\n"
        "         [125.7143, 125.8571,  ..., 126.8571, 127.0000],\n"
        "         [127.1429, 127.2857,  ..., 128.2857, 128.4286]],\n"
        "\n"
        "        [[128.5714, 128.7143,  ..., 129.7143, 129.8571],\n"
        "         [130.0000, 130.1429,  ..., 131.1429, 131.2857],\n"
        "         ...,\n"
        "         [140.0000, 140.1429,  ..., 141.1429, 141.2857],\n"
        "         [141.4286, 141.5714,  ..., 142.5714, 142.7143]]])");

  auto d = ef::zeros<double>(ef::Shape<1>{2000});
  for (index_t i = 0; i < 2000; ++i) d.data()[i] = static_cast<double>(i) / 4;
  CHECK(repr(d) ==
        "tensor([0.0000e+00, 2.5000e-01, 5.0000e-01,  ..., 4.9925e+02, 4.9950e+02,\n"
        "        4.9975e+02], dtype=torch.float64)");
}

TEST_CASE("print: a large unsummarised tensor prints in linear time") {
  // repr(torch.arange(100000.) / 8) with threshold=inf: 1333336 characters on 16667 lines.
  auto big = ef::zeros<float>(ef::Shape<1>{100000});
  for (index_t i = 0; i < 100000; ++i) big.data()[i] = static_cast<float>(i) / 8.0f;
  const auto s = ef::to_string(big, {.threshold = std::numeric_limits<index_t>::max()});
  CHECK(s.size() == 1333336);
  CHECK(std::count(s.begin(), s.end(), '\n') == 16666);
  CHECK(s.substr(0, 120) ==
        "tensor([0.0000e+00, 1.2500e-01, 2.5000e-01, 3.7500e-01, 5.0000e-01, 6.2500e-01,\n"
        "        7.5000e-01, 8.7500e-01, 1.0000e+");
  CHECK(s.substr(s.size() - 60) == "04,\n        1.2500e+04, 1.2500e+04, 1.2500e+04, 1.2500e+04])");
}

TEST_CASE("print: the global options") {
  options_guard guard;
  ef::reset_printoptions();
  auto o = ef::get_printoptions();
  CHECK(o.precision == 4);
  CHECK(!o.sci_mode.has_value());
  CHECK(o.threshold == 1000);
  CHECK(o.edgeitems == 3);
  CHECK(o.linewidth == 80);

  ef::set_printoptions(
      ef::print_options{.precision = 3, .sci_mode = true, .threshold = 5, .edgeitems = 1, .linewidth = 40});
  o = ef::get_printoptions();
  CHECK(o.precision == 3);
  CHECK(o.sci_mode == std::optional<bool>(true));
  CHECK(o.threshold == 5);
  CHECK(o.edgeitems == 1);
  CHECK(o.linewidth == 40);

  // Like torch.set_printoptions(precision=6): the other settings stay, sci_mode returns to automatic.
  ef::set_printoptions(6);
  o = ef::get_printoptions();
  CHECK(o.precision == 6);
  CHECK(!o.sci_mode.has_value());
  CHECK(o.threshold == 5);
  CHECK(o.linewidth == 40);

  // Invalid settings are refused and leave the options as they were.
  CHECK_THROWS_AS(ef::set_printoptions(-1), std::invalid_argument);
  CHECK_THROWS_AS(ef::set_printoptions(ef::print_options{.edgeitems = -1}), std::invalid_argument);
  CHECK(ef::get_printoptions().precision == 6);

  ef::reset_printoptions();
  o = ef::get_printoptions();
  CHECK(o.precision == 4);
  CHECK(o.threshold == 1000);
  CHECK(o.linewidth == 80);
}
