// io/safetensors.hpp: reading files written from torch tensors (tools/reference/make_safetensors_fixtures.py),
// F16/BF16 conversion equal to torch's .float(), every malformed file refused with its name and reason,
// bit-exact save -> load round trips, the reference writer's byte layout, and atomic writes; streamed
// reading into existing (contiguous or strided) tensors, in pieces larger than the conversion buffer, and
// files that change after they were opened. Every value check is exact (bits): reading only moves and
// converts elements, and each conversion has one right answer.
#include <doctest/doctest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io_test_support.hpp"
#include "support/cases.hpp"
#include "support/errors.hpp"
#include "support/fixtures.hpp"

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

using namespace eftest;
namespace io = eigenformer::io;

namespace {


// Bit-for-bit equality with the fixture value, so -0.0 and every payload-free NaN count (a NaN must be a
// NaN: torch and the F16C instruction may set the quiet bit differently on signalling NaNs).
// `float_values`: the fixture holds float32 values (shortest float32 decimals), which are rounded to float
// before they are compared as T.
template <typename T>
void check_bits(const std::vector<T>& got, const json& expected, const std::string& what, bool float_values) {
  INFO(what);
  const auto& data = expected.at("data");
  REQUIRE(got.size() == data.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double v = number(data[i]);
    const auto want = float_values ? static_cast<T>(static_cast<float>(v)) : static_cast<T>(v);
    const bool ok = std::isnan(want) ? std::isnan(got[i]) : std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(got[i]) ==
                                                              std::bit_cast<std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>(want);
    if (!ok && bad++ < 5) FAIL_CHECK("element " << i << ": " << got[i] << " vs expected " << want);
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("safetensors: the reference file's tensors equal torch's values, F16/BF16 as torch's .float()") {
  const auto f = io::SafeTensorsFile::from_file(data_dir() + "/reference.safetensors");
  const json ref = load_fixture("safetensors/reference.json");
  std::vector<std::string> names;
  for (const auto& c : ref.at("cases")) {
    const auto name = c.at("name").get<std::string>();
    if (name == "__metadata__") {
      CHECK(f.metadata() == c.at("metadata").get<std::map<std::string, std::string>>());
      continue;
    }
    names.push_back(name);
    const auto dtype = c.at("safetensors_dtype").get<std::string>();
    const auto& out = c.at("out");
    INFO(name << " (" << dtype << ")");
    CHECK(io::dtype_name(f.info(name).dtype) == dtype);
    CHECK(f.info(name).shape == shape_of(out));
    if (dtype == "F32" || dtype == "F16" || dtype == "BF16") {
      check_bits(f.get_flat<float>(name).to_vector(), out, name, true);
      // Every F16/BF16/F32 value is exactly a double too.
      check_bits(f.get_flat<double>(name).to_vector(), out, name + " as double", true);
    } else if (dtype == "F64") {
      check_bits(f.get_flat<double>(name).to_vector(), out, name, false);
    } else if (dtype == "I64" || dtype == "I32") {
      CHECK(f.get_flat<std::int64_t>(name).to_vector() == out.at("data").get<std::vector<std::int64_t>>());
    } else {
      REQUIRE(dtype == "BOOL");
      CHECK(f.get_flat<bool>(name).to_vector() == out.at("data").get<std::vector<bool>>());
    }
  }
  CHECK(f.names() == names);  // names() is sorted, as the fixture's cases are
  CHECK(f.size() == 10);

  // Typed access with the rank in the type.
  const auto m = f.get<float, 2>("f32.matrix");
  CHECK(m.shape() == ef::Shape<2>{3, 5});
  CHECK(f.get<float, 0>("scalar").item() == 3.5f);
  CHECK(f.get<float, 2>("empty").shape() == ef::Shape<2>{0, 3});
  CHECK(f.get<std::int64_t, 1>("i64.ids")(5) == std::numeric_limits<std::int64_t>::min());
  CHECK(f.get<bool, 2>("bool.mask").shape() == ef::Shape<2>{2, 3});
}

TEST_CASE("safetensors: F16 and BF16 conversion is exact for all 65536 bit patterns") {
  // The rule: (-1)^s * 2^(e - bias) * (1 + m / 2^mbits) for normal numbers, 2^(1 - bias) * m / 2^mbits for
  // subnormals, inf/nan for the top exponent. std::ldexp computes it exactly in float (every value fits).
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const int sign = (h >> 15) ? -1 : 1;
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const float got = io::detail::half_to_float(h);
    if (e == 0x1f) {
      if (m == 0) CHECK(got == sign * std::numeric_limits<float>::infinity());
      else CHECK(std::isnan(got));
      continue;
    }
    const float want = static_cast<float>(sign) * (e == 0 ? std::ldexp(static_cast<float>(m), -24)
                                                          : std::ldexp(static_cast<float>(1024 + m), e - 25));
    if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want)) {
      FAIL_CHECK("F16 0x" << std::hex << bits << ": " << got << " vs " << want);
      break;
    }
  }
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const int sign = (b >> 15) ? -1 : 1;
    const int e = (b >> 7) & 0xff, m = b & 0x7f;
    const float got = io::detail::bf16_to_float(b);
    if (e == 0xff) {
      if (m == 0) CHECK(got == sign * std::numeric_limits<float>::infinity());
      else CHECK(std::isnan(got));
      continue;
    }
    const float want = static_cast<float>(sign) * (e == 0 ? std::ldexp(static_cast<float>(m), -133)
                                                          : std::ldexp(static_cast<float>(128 + m), e - 134));
    if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want)) {
      FAIL_CHECK("BF16 0x" << std::hex << bits << ": " << got << " vs " << want);
      break;
    }
  }
}

TEST_CASE("safetensors: every malformed file throws checkpoint_error naming the file and the reason") {
  // The defect each file was written with (malformed.json) and the words of our message for it.
  const std::map<std::string, std::string> reasons = {
      {"truncated_length", "file is 5 bytes, too short for the 8-byte header length"},
      {"header_past_eof", "header length 1000 exceeds the 8 bytes that follow it"},
      {"header_over_limit", "exceeds the 100000000-byte limit"},
      {"header_empty", "header is empty"},
      {"not_json", "header is not valid JSON"},
      {"not_object", "header is a JSON array, expected an object"},
      {"invalid_utf8", "header is not valid JSON"},
      {"nul_padding", "header contains a NUL byte at offset 2"},
      {"duplicate_key", "header has the key \"a\" twice"},
      {"unknown_dtype", "tensor \"a\": unknown dtype \"F7\""},
      {"missing_dtype", "tensor \"a\": entry has no \"dtype\""},
      {"negative_dim", "tensor \"a\": shape must be a list of non-negative integers, got [-2,1]"},
      {"float_dim", "tensor \"a\": shape must be a list of non-negative integers, got [2.0]"},
      {"shape_overflow", "tensor \"a\": shape [1099511627776,1099511627776] of F32 has more elements or bytes than fit in 63 bits"},
      {"offsets_reversed", "tensor \"a\": data_offsets [8, 4) end before they begin"},
      {"offsets_past_end", "tensor \"a\": data_offsets [0, 24) exceed the data size 16"},
      {"size_mismatch", "tensor \"a\": data_offsets [0, 20) hold 20 bytes, but F32 [2, 3] needs 24"},
      {"overlap", "tensor \"b\": data_offsets [8, 24) overlap tensor \"a\" at [0, 16)"},
      {"gap", "tensor \"b\": data_offsets [16, 24) leave bytes [8, 16) unused after tensor \"a\""},
      {"trailing_bytes", "the tensors end at byte 8 of the data, leaving 4 trailing bytes unused"},
      {"metadata_not_string", "\"__metadata__\" must map strings to strings; \"epoch\" holds 3"},
      {"offsets_not_pair", "tensor \"a\": data_offsets must be two non-negative integers [begin, end], got [0]"},
      {"deep_nesting", "header nests deeper than a safetensors header does"},
      {"entry_not_object", "tensor \"a\": entry is 5, expected"},
  };
  const json manifest = read_json(data_dir() + "/malformed.json");
  std::set<std::string> seen;
  for (const auto& item : manifest.at("files")) {
    const auto file = item.at("file").get<std::string>();
    const auto stem = fs::path(file).stem().string();
    seen.insert(stem);
    INFO(file << ": " << item.at("defect").get<std::string>());
    REQUIRE_MESSAGE(reasons.count(stem), "no expected reason for " << file);
    const std::string path = data_dir() + "/" + file;
    const std::string msg = error_of<io::checkpoint_error>([&] { (void)io::SafeTensorsFile::from_file(path); });
    INFO("message: " << msg);
    CHECK(msg.rfind(path + ": ", 0) == 0);  // starts with the file
    CHECK(msg.find(reasons.at(stem)) != std::string::npos);
  }
  CHECK(seen.size() == reasons.size());
}

TEST_CASE("safetensors: reading errors name the tensor, its shape and dtype, and the closest names") {
  const std::string file = data_dir() + "/reference.safetensors";
  const auto f = io::SafeTensorsFile::from_file(file);
  CHECK(error_of<io::checkpoint_error>([&] { (void)f.get<float, 1>("f32.matrix"); }) ==
        file + ": tensor \"f32.matrix\" has shape [3, 5] (rank 2), not rank 1");
  CHECK(error_of<io::checkpoint_error>([&] { (void)f.get<float, 2>("f32.matrx"); }) ==
        file + ": no tensor \"f32.matrx\" (10 tensors; closest: \"f32.matrix\", \"f16.randn\", \"i32.ids\")");
  CHECK(error_of<io::checkpoint_error>([&] { (void)f.get<float, 1>("i64.ids"); }) ==
        file + ": tensor \"i64.ids\" has dtype I64; it cannot be read as float (that needs F16, BF16, F32 or F64)");
  CHECK(error_of<io::checkpoint_error>([&] { (void)f.get<std::int64_t, 2>("f32.matrix"); }).find(
            "tensor \"f32.matrix\" has dtype F32; it cannot be read as int64") != std::string::npos);
  CHECK(error_of<io::checkpoint_error>([&] { (void)f.get<bool, 1>("i32.ids"); }).find("has dtype I32; it cannot be read as bool") !=
        std::string::npos);

  // Values that do not fit the target type.
  const auto u64 = parse_bytes(safetensors_bytes(R"({"big":{"dtype":"U64","shape":[2],"data_offsets":[0,16]}})",
                                                 std::string("\x07\0\0\0\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff", 16)));
  CHECK(error_of<io::checkpoint_error>([&] { (void)u64.get<std::int64_t, 1>("big"); }) ==
        "memory.safetensors: tensor \"big\": element 1 = 18446744073709551615 (U64) does not fit in int64");
  const auto b = parse_bytes(safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x01\x02"));
  CHECK(error_of<io::checkpoint_error>([&] { (void)b.get<bool, 1>("m"); }) ==
        "memory.safetensors: tensor \"m\": element 1 of a BOOL tensor is 2, not 0 or 1");
  // Signed integers of every width are sign-extended.
  const auto ints = parse_bytes(safetensors_bytes(
      R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"I16","shape":[1],"data_offsets":[2,4]},"c":{"dtype":"U16","shape":[1],"data_offsets":[4,6]}})",
      std::string("\xfe\x05\x00\x80\x00\x80", 6)));
  CHECK(ints.get<std::int64_t, 1>("a").to_vector() == std::vector<std::int64_t>{-2, 5});
  CHECK(ints.get<std::int64_t, 1>("b").to_vector() == std::vector<std::int64_t>{-32768});
  CHECK(ints.get<std::int64_t, 1>("c").to_vector() == std::vector<std::int64_t>{32768});
  // An F8 tensor is validated (its size is known) but cannot be converted.
  const auto f8 = parse_bytes(safetensors_bytes(R"({"q":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[0,3]}})", "abc"));
  CHECK(f8.info("q").dtype == io::Dtype::F8_E4M3);
  CHECK(error_of<io::checkpoint_error>([&] { (void)f8.get<float, 1>("q"); }).find("has dtype F8_E4M3") != std::string::npos);

  // Files that are not there or not files.
  ScratchDir dir;
  const auto missing = (dir / "nope.safetensors").string();
  CHECK(error_of<io::checkpoint_error>([&] { (void)io::SafeTensorsFile::from_file(missing); }) ==
        missing + ": cannot read: No such file or directory");
  CHECK(error_of<io::checkpoint_error>([&] { (void)io::SafeTensorsFile::from_file(dir.path()); }) ==
        dir.path().string() + ": is a directory, not a safetensors file");
}

TEST_CASE("safetensors: save -> load round trips are bit-exact for float, double, int64 and bool") {
  ScratchDir dir;
  const auto path = dir / "model.safetensors";
  // Values that expose any conversion: signed zero, subnormals, extremes, infinities, a NaN with payload.
  const float fnan = std::bit_cast<float>(0x7fc12345u);
  const double dnan = std::bit_cast<double>(0x7ff8000000abcdefull);
  auto f = ef::tensor<float>({{-0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()},
                              {-std::numeric_limits<float>::infinity(), fnan, 1.0f / 3.0f}});
  auto d = ef::tensor<double>({{std::numeric_limits<double>::denorm_min(), -0.0, dnan, 1e308, 0.1}});
  ef::manual_seed(3);
  const auto r = ef::randn<float>({4, 3, 5});
  const auto ids = ef::tensor<std::int64_t>({std::int64_t{50256}, std::numeric_limits<std::int64_t>::min(), std::int64_t{-1}});
  const auto mask = ef::tril(ef::ones<bool>({3, 3}));
  const auto scalar = ef::scalar_tensor(2.5);
  const auto empty = ef::zeros<float>({0, 4});
  const auto strided = r.transpose(0, 2);  // non-contiguous: written in row-major order of its own shape
  io::save_safetensors(path, {{"f", f}, {"d", d}, {"r", r}, {"ids", ids}, {"mask", mask}, {"scalar", scalar},
                              {"empty", empty}, {"strided", strided}},
                       {{"format", "pt"}, {"note", "caf\xc3\xa9"}});
  const auto g = io::SafeTensorsFile::from_file(path);
  CHECK(g.metadata() == io::Metadata{{"format", "pt"}, {"note", "caf\xc3\xa9"}});
  auto same_bits = [](const auto& a, const auto& b) {
    REQUIRE(a.shape() == b.shape());
    const auto x = a.to_vector(), y = b.to_vector();
    return std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  CHECK(same_bits(g.get<float, 2>("f"), f));
  CHECK(same_bits(g.get<double, 2>("d"), d));
  CHECK(same_bits(g.get<float, 3>("r"), r));
  CHECK(same_bits(g.get<float, 3>("strided"), strided));
  CHECK(g.get<std::int64_t, 1>("ids").to_vector() == ids.to_vector());
  CHECK(g.get<bool, 2>("mask").to_vector() == mask.to_vector());
  CHECK(g.get<double, 0>("scalar").item() == 2.5);
  CHECK(g.get<float, 2>("empty").shape() == ef::Shape<2>{0, 4});
  CHECK(io::dtype_name(g.info("d").dtype) == "F64");
  CHECK(io::dtype_name(g.info("mask").dtype) == "BOOL");

  // The data starts 8-byte aligned: the header length is a multiple of 8.
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  CHECK(n % 8 == 0);
  CHECK(bytes[8] == '{');
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("safetensors: save writes the reference implementation's layout byte for byte") {
  // writer_layout.safetensors was laid out as safetensors' Rust writer does it: dtypes of larger alignment
  // first (I64, F64, F32), then by name; "__metadata__" first; compact JSON; spaces up to a multiple of 8.
  const std::string ref_path = data_dir() + "/writer_layout.safetensors";
  const auto ref = io::SafeTensorsFile::from_file(ref_path);
  io::TensorDict tensors;
  tensors.emplace("b.weight", ref.get<float, 2>("b.weight"));
  tensors.emplace("a.bias", ref.get<float, 1>("a.bias"));
  tensors.emplace("c.f64", ref.get<double, 1>("c.f64"));
  tensors.emplace("ids", ref.get<std::int64_t, 1>("ids"));
  ScratchDir dir;
  io::save_safetensors(dir / "out.safetensors", tensors, ref.metadata());
  CHECK(read_bytes(dir / "out.safetensors") == read_bytes(ref_path));
}

TEST_CASE("safetensors: a failed save leaves the existing file intact and no temporary file behind") {
  ScratchDir dir;
  const auto path = dir / "model.safetensors";
  const auto good = ef::tensor<float>({1.0f, 2.0f});
  io::save_safetensors(path, {{"w", good}});
  const std::string before = read_bytes(path);

  SUBCASE("a tensor the format cannot hold: nothing is written") {
    const auto msg = error_of<io::checkpoint_error>([&] { io::save_safetensors(path, {{"__metadata__", good}}); });
    CHECK(msg == path.string() + ": a tensor cannot be named \"__metadata__\" (the format's metadata key)");
    const auto msg2 = error_of<io::checkpoint_error>([&] { io::save_safetensors(path, {{std::string("bad\xff"), good}}); });
    CHECK(msg2 == path.string() + ": tensor name \"bad\xff\" is not valid UTF-8");
  }
  SUBCASE("the rename fails: the target is a directory") {
    const auto target = dir / "taken";
    fs::create_directories(target / "inside");
    const auto msg = error_of<io::checkpoint_error>([&] { io::save_safetensors(target, {{"w", good}}); });
    CHECK(msg.rfind(target.string() + ": cannot replace the file: ", 0) == 0);
    CHECK(fs::is_directory(target / "inside"));
  }
  SUBCASE("the directory does not exist") {
    const auto target = dir / "no-such-dir" / "model.safetensors";
    const auto msg = error_of<io::checkpoint_error>([&] { io::save_safetensors(target, {{"w", good}}); });
    CHECK(msg == target.string() + ": cannot create a temporary file in " + (dir / "no-such-dir").string() +
                     ": No such file or directory");
  }
#if __has_include(<unistd.h>)
  SUBCASE("the directory is not writable") {
    fs::permissions(dir.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
    if (::access(dir.path().c_str(), W_OK) == 0) {
      MESSAGE("running with permission to write anywhere (root): the read-only directory case is skipped");
    } else {
      const auto msg = error_of<io::checkpoint_error>([&] { io::save_safetensors(path, {{"w", ef::tensor<float>({3.0f})}}); });
      CHECK(msg.find(path.string() + ": cannot create a temporary file in ") == 0);
      CHECK(msg.find("Permission denied") != std::string::npos);
    }
    fs::permissions(dir.path(), fs::perms::owner_write, fs::perm_options::add);
  }
#endif
  CHECK(read_bytes(path) == before);
  for (const auto& name : dir.entries()) CHECK_MESSAGE(name.find(".tmp-") == std::string::npos, "left behind: " << name);

  // And a successful save replaces the file, keeping its permissions.
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  io::save_safetensors(path, {{"w", ef::tensor<float>({5.0f, 6.0f, 7.0f})}});
  CHECK(io::SafeTensorsFile::from_file(path).get<float, 1>("w").to_vector() == std::vector<float>{5.0f, 6.0f, 7.0f});
  CHECK(fs::status(path).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  for (const auto& name : dir.entries()) CHECK(name.find(".tmp-") == std::string::npos);
}

// ---- Streamed reading: read_into / read_flat_into / read_elements -----------------------------------------

TEST_CASE("safetensors: read_into gives get_flat's exact values in contiguous and strided destinations") {
  // The same fixture values as the first test, now read into storage that already exists. Exact (bit for
  // bit, via check_bits) since reading into a view converts each element exactly as get does.
  const auto f = io::SafeTensorsFile::from_file(data_dir() + "/reference.safetensors");
  const json ref = load_fixture("safetensors/reference.json");
  std::size_t ran = 0;
  for (const auto& c : ref.at("cases")) {
    const auto name = c.at("name").get<std::string>();
    if (name == "__metadata__") continue;
    ++ran;
    const auto dtype = c.at("safetensors_dtype").get<std::string>();
    const auto& out = c.at("out");
    const auto numel = static_cast<index_t>(out.at("data").size());
    INFO(name << " (" << dtype << ")");
    auto flat_check = [&]<typename T>(T, bool float_values) {
      auto dst = ef::Tensor<T, 1>::empty(ef::Shape<1>{numel});
      f.read_flat_into(name, dst);
      if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>)
        CHECK(dst.to_vector() == out.at("data").get<std::vector<T>>());
      else
        check_bits(dst.to_vector(), out, name + " flat", float_values);
      // Every other element of a buffer twice the size: a strided 1-D destination.
      auto wide = ef::zeros<T>({2 * numel});
      f.read_flat_into(name, wide.slice(0, 0, 2 * numel, 2));
      if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>)
        CHECK(wide.slice(0, 0, 2 * numel, 2).to_vector() == out.at("data").get<std::vector<T>>());
      else
        check_bits(wide.slice(0, 0, 2 * numel, 2).to_vector(), out, name + " strided", float_values);
      if (numel > 0) CHECK(wide(1) == T{});  // the gaps are untouched
    };
    if (dtype == "F32" || dtype == "F16" || dtype == "BF16") {
      flat_check(float{}, true);
      flat_check(double{}, true);
    } else if (dtype == "F64") {
      flat_check(double{}, false);
    } else if (dtype == "I64" || dtype == "I32") {
      flat_check(std::int64_t{}, false);
    } else {
      flat_check(bool{}, false);
    }
  }
  check_ran(ran, f.size(), "tensors of reference.safetensors read into place");

  // Rank-2 tensors into the transpose of a (cols, rows) buffer: the layout load_state_dict uses for weights
  // stored (in, out). The view's row-major order is the file's, so its to_vector equals get_flat's.
  for (const char* name : {"f32.matrix", "f16.patterns", "bf16.patterns"}) {
    INFO(name);
    const auto& shape = f.info(name).shape;
    auto buffer = ef::Tensor<float, 2>::empty(ef::Shape<2>{shape[1], shape[0]});
    f.read_into(name, buffer.t());
    const auto got = buffer.t().to_vector(), want = f.get_flat<float>(name).to_vector();
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
  auto mask = ef::Tensor<bool, 2>::empty(ef::Shape<2>{3, 2});
  f.read_into("bool.mask", mask.t());
  CHECK(mask.t().to_vector() == f.get_flat<bool>("bool.mask").to_vector());
  auto ids = ef::Tensor<std::int64_t, 1>::empty(ef::Shape<1>{5});
  f.read_into("i32.ids", ids);
  CHECK(ids.to_vector() == f.get_flat<std::int64_t>("i32.ids").to_vector());
  auto scalar = ef::Tensor<double, 0>(0.0);
  f.read_into("scalar", scalar);
  CHECK(scalar.item() == 3.5);
  auto empty = ef::Tensor<float, 2>::empty(ef::Shape<2>{0, 3});
  f.read_into("empty", empty);  // nothing to read, and no error
}

TEST_CASE("safetensors: tensors larger than the 1 MiB conversion buffer convert exactly, piece by piece") {
  // An F16 tensor of 600,000 elements (1.2 MB: three buffer loads as float through a strided view, two as
  // float contiguous) holding every half bit pattern in turn, and an F64 tensor rounded to float. Each
  // element is compared with the scalar conversion (half_to_float, checked against all 65536 patterns above;
  // static_cast<float> for F64), so chunk boundaries cannot shift, drop or repeat an element.
  constexpr index_t rows = 600, cols = 1000, n = rows * cols;
  std::string f16(static_cast<std::size_t>(2 * n), '\0'), f64(static_cast<std::size_t>(8 * n), '\0');
  for (index_t i = 0; i < n; ++i) {
    const auto h = static_cast<std::uint16_t>((i * 7919) & 0xffff);
    f16[static_cast<std::size_t>(2 * i)] = static_cast<char>(h & 0xff);
    f16[static_cast<std::size_t>(2 * i + 1)] = static_cast<char>(h >> 8);
    const auto bits = std::bit_cast<std::uint64_t>(std::ldexp(1.0 + static_cast<double>(i) / 3.0, static_cast<int>(i % 61) - 30));
    for (int b = 0; b < 8; ++b) f64[static_cast<std::size_t>(8 * i + b)] = static_cast<char>((bits >> (8 * b)) & 0xff);
  }
  const std::string header = R"({"h":{"dtype":"F16","shape":[600,1000],"data_offsets":[0,1200000]},)"
                             R"("d":{"dtype":"F64","shape":[600,1000],"data_offsets":[1200000,6000000]}})";
  ScratchDir dir;
  write_bytes(dir / "big.safetensors", safetensors_bytes(header, f16 + f64));
  const auto f = io::SafeTensorsFile::from_file(dir / "big.safetensors");

  auto contiguous = ef::Tensor<float, 2>::empty(ef::Shape<2>{rows, cols});
  f.read_into("h", contiguous);
  auto transposed = ef::Tensor<float, 2>::empty(ef::Shape<2>{cols, rows});
  f.read_into("h", transposed.t());
  auto rounded = ef::Tensor<float, 2>::empty(ef::Shape<2>{cols, rows});
  f.read_into("d", rounded.t());
  const auto a = contiguous.to_vector(), b = transposed.t().to_vector(), d = rounded.t().to_vector();
  int bad = 0;
  for (index_t i = 0; i < n && bad < 5; ++i) {
    const float want = io::detail::half_to_float(static_cast<std::uint16_t>((i * 7919) & 0xffff));
    const float want_d = static_cast<float>(std::ldexp(1.0 + static_cast<double>(i) / 3.0, static_cast<int>(i % 61) - 30));
    const auto u = static_cast<std::size_t>(i);
    const bool ok = (std::isnan(want) ? std::isnan(a[u]) && std::isnan(b[u])
                                      : std::bit_cast<std::uint32_t>(a[u]) == std::bit_cast<std::uint32_t>(want) &&
                                            std::bit_cast<std::uint32_t>(b[u]) == std::bit_cast<std::uint32_t>(want)) &&
                    std::bit_cast<std::uint32_t>(d[u]) == std::bit_cast<std::uint32_t>(want_d);
    if (!ok) {
      FAIL_CHECK("element " << i << ": " << a[u] << ", " << b[u] << ", " << d[u] << " vs " << want << ", " << want_d);
      ++bad;
    }
  }
  CHECK(bad == 0);

  // read_elements: any range, converted the same way.
  std::vector<double> piece(300'000);
  f.read_elements("h", 250'000, std::span<double>(piece));
  CHECK(std::bit_cast<std::uint64_t>(piece[7]) == std::bit_cast<std::uint64_t>(static_cast<double>(a[250'007])));
  const std::string path = (dir / "big.safetensors").string();
  CHECK(error_of<io::checkpoint_error>([&] { f.read_elements("h", 599'999, std::span<double>(piece.data(), 2)); }) ==
        path + ": tensor \"h\": elements [599999, 600001) are outside its 600000 elements");
}

TEST_CASE("safetensors: read_into refuses a destination of another shape or dtype, naming both, before writing") {
  const std::string file = data_dir() + "/reference.safetensors";
  const auto f = io::SafeTensorsFile::from_file(file);
  auto wrong = ef::full<float>({5, 3}, 7.0f);
  CHECK(error_of<io::checkpoint_error>([&] { f.read_into("f32.matrix", wrong); }) ==
        file + ": tensor \"f32.matrix\" has shape [3, 5] in the file, but the destination has shape [5, 3]");
  auto flat = ef::full<float>({15}, 7.0f);
  CHECK(error_of<io::checkpoint_error>([&] { f.read_into("f32.matrix", flat); }) ==
        file + ": tensor \"f32.matrix\" has shape [3, 5] in the file, but the destination has shape [15]");
  auto short_flat = ef::full<float>({14}, 7.0f);
  CHECK(error_of<io::checkpoint_error>([&] { f.read_flat_into("f32.matrix", short_flat); }) ==
        file + ": tensor \"f32.matrix\" has shape [3, 5] (15 elements) in the file, but the destination has shape [14]");
  auto ints = ef::full<float>({7}, 7.0f);
  CHECK(error_of<io::checkpoint_error>([&] { f.read_into("i64.ids", ints); }) ==
        file + ": tensor \"i64.ids\" has dtype I64; it cannot be read as float (that needs F16, BF16, F32 or F64)");
  // An expanded view (stride 0) has one element where the file has many.
  const auto one = ef::Tensor<float, 1>::empty(ef::Shape<1>{1});
  CHECK(error_of<io::checkpoint_error>([&] { f.read_into("f32.matrix", one.view(ef::Shape<2>{1, 1}).expand(ef::Shape<2>{3, 5})); })
            .find("tensor \"f32.matrix\": the destination (shape [3, 5], strides [0, 0]) is an expanded view") !=
        std::string::npos);
  // Nothing was written by any refused read.
  CHECK(wrong.to_vector() == std::vector<float>(15, 7.0f));
  CHECK(flat.to_vector() == std::vector<float>(15, 7.0f));
  CHECK(short_flat.to_vector() == std::vector<float>(14, 7.0f));
  CHECK(ints.to_vector() == std::vector<float>(7, 7.0f));
  CHECK(error_of<io::checkpoint_error>([&] { f.read_into("nope", wrong); }) ==
        file + ": no tensor \"nope\" (10 tensors; closest: \"empty\", \"scalar\", \"i32.ids\")");
}

TEST_CASE("safetensors: a file truncated or rewritten after it was opened throws, naming the file and tensor") {
  ScratchDir dir;
  const auto path = dir / "model.safetensors";
  const std::string p = path.string();
  ef::manual_seed(5);
  const auto w = ef::randn<float>({64, 32});
  const auto h = ef::randn<float>({16});
  io::save_safetensors(path, {{"w", w}, {"h", h}});  // data: h at [0, 64), w at [64, 8256) (by name)
  const auto size = fs::file_size(path);

  SUBCASE("truncated: the read comes up short") {
    const auto f = io::SafeTensorsFile::from_file(path);
    fs::resize_file(path, size - 100);
    auto dst = ef::Tensor<float, 2>::empty(ef::Shape<2>{64, 32});
    const auto msg = error_of<io::checkpoint_error>([&] { f.read_into("w", dst); });
    INFO(msg);
    CHECK(msg.rfind(p + ": tensor \"w\": read ", 0) == 0);
    CHECK(msg.find(" of 8192 bytes at file offset ") != std::string::npos);
    CHECK(msg.find("the file ended early (" + std::to_string(size - 100) + " bytes now, " + std::to_string(size) +
                   " when it was opened") != std::string::npos);
    // A tensor still wholly inside the file reads, but the changed size is noticed all the same.
    CHECK(error_of<io::checkpoint_error>([&] { (void)f.get<float, 1>("h"); }) ==
          p + ": tensor \"h\": the file changed while it was being read (" + std::to_string(size - 100) + " bytes now, " +
              std::to_string(size) + " when it was opened)");
  }
  SUBCASE("rewritten in place with the same size") {
    const auto f = io::SafeTensorsFile::from_file(path);
    std::string bytes = read_bytes(path);
    bytes[bytes.size() - 1] ^= 0x55;
    { std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out); out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); }
    // A distinct modification time, whatever the file system's timestamp granularity.
    fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(5));
    CHECK(error_of<io::checkpoint_error>([&] { (void)f.get<float, 2>("w"); }).rfind(
              p + ": tensor \"w\": the file changed while it was being read (its modification time", 0) == 0);
    CHECK(error_of<io::checkpoint_error>([&] { f.check_unchanged(); }).rfind(p + ": the file changed while it was being read", 0) == 0);
  }
  SUBCASE("replaced by rename (as every atomic writer does): the open file is still the old, whole one") {
    const auto f = io::SafeTensorsFile::from_file(path);
    io::save_safetensors(path, {{"w", ef::zeros<float>({2})}});
    CHECK(f.get<float, 2>("w").to_vector() == w.to_vector());
    CHECK(io::SafeTensorsFile::from_file(path).info("w").shape == std::vector<index_t>{2});
  }
}

TEST_CASE("safetensors: one open file serves reads from several threads at once") {
  // pread carries its own offset, so no lock is needed; each thread reads every tensor and checks the bits.
  const auto f = io::SafeTensorsFile::from_file(data_dir() + "/reference.safetensors");
  std::vector<std::vector<float>> want;
  for (const char* name : {"f32.matrix", "f16.patterns", "bf16.patterns", "f16.randn"}) want.push_back(f.get_flat<float>(name).to_vector());
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      int k = 0;
      for (int round = 0; round < 50; ++round, k = 0)
        for (const char* name : {"f32.matrix", "f16.patterns", "bf16.patterns", "f16.randn"}) {
          const auto got = f.get_flat<float>(name).to_vector();
          if (std::memcmp(got.data(), want[static_cast<std::size_t>(k)].data(), got.size() * sizeof(float)) != 0) ++failures[static_cast<std::size_t>(t)];
          ++k;
        }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == std::vector<int>(4, 0));
}
