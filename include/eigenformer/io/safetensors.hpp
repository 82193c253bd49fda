// Reading and writing the safetensors format (Hugging Face's checkpoint format, `model.safetensors`).
//
// Layout (https://github.com/huggingface/safetensors, "Format"):
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   a UTF-8 JSON object: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//             ..., optional "__metadata__": {"<key>": "<value>", ...}} (strings only)
//   the rest  the data: each tensor's elements little-endian, row-major, at [begin, end) counted from the
//             first byte after the header
// The reference implementation accepts a file only if the tensors tile the data exactly: sorted by offset,
// each starts where the previous ends, the last ends at the end of the file, and end - begin equals
// numel * itemsize. A header over 100,000,000 bytes is refused. We enforce the same, so a file we accept
// is one Hugging Face's loaders accept too, and no offset from the file is ever used unchecked.
//
//   auto f = io::load_safetensors("model.safetensors");
//   for (const auto& name : f.names()) std::cout << name << " " << shape_string(f.info(name).shape) << "\n";
//   Tensor<float, 2> wte = f.get<float, 2>("wte.weight");      // F16/BF16/F64 are converted to float
//   io::save_safetensors("out.safetensors", {{"wte.weight", wte}}, {{"format", "pt"}});
//
// Reading loads the whole file with one read into one buffer; tensors are converted (copied) out of it on
// get(). Writing goes through a temporary file renamed over the target (see detail/atomic_file.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "eigenformer/io/detail/atomic_file.hpp"
#include "eigenformer/io/error.hpp"
#include "eigenformer/tensor/tensor.hpp"

namespace eigenformer::io {

// The element types of the format. Declared in the reference implementation's order (increasing
// alignment), which its writer sorts by; save_safetensors reproduces that order.
enum class Dtype : std::uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

inline constexpr std::string_view dtype_name(Dtype d) noexcept {
  constexpr std::string_view names[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                        "BF16", "I32", "U32", "F32",     "F64",     "I64", "U64"};
  return names[static_cast<std::size_t>(d)];
}

// Bytes per element.
inline constexpr std::size_t dtype_size(Dtype d) noexcept {
  switch (d) {
    case Dtype::BOOL: case Dtype::U8: case Dtype::I8: case Dtype::F8_E5M2: case Dtype::F8_E4M3: return 1;
    case Dtype::I16: case Dtype::U16: case Dtype::F16: case Dtype::BF16: return 2;
    case Dtype::I32: case Dtype::U32: case Dtype::F32: return 4;
    case Dtype::F64: case Dtype::I64: case Dtype::U64: return 8;
  }
  return 0;
}

inline std::optional<Dtype> dtype_from_name(std::string_view name) noexcept {
  for (std::uint8_t i = 0; i <= static_cast<std::uint8_t>(Dtype::U64); ++i)
    if (dtype_name(static_cast<Dtype>(i)) == name) return static_cast<Dtype>(i);
  return std::nullopt;
}

inline constexpr bool is_floating(Dtype d) noexcept {
  return d == Dtype::F16 || d == Dtype::BF16 || d == Dtype::F32 || d == Dtype::F64;
}
inline constexpr bool is_integer(Dtype d) noexcept {
  return d == Dtype::U8 || d == Dtype::I8 || d == Dtype::I16 || d == Dtype::U16 || d == Dtype::I32 ||
         d == Dtype::U32 || d == Dtype::I64 || d == Dtype::U64;
}

// The dtype eigenformer writes for a tensor element type.
template <tensor_element T>
inline constexpr Dtype dtype_of() noexcept {
  if constexpr (std::is_same_v<T, float>) return Dtype::F32;
  else if constexpr (std::is_same_v<T, double>) return Dtype::F64;
  else if constexpr (std::is_same_v<T, std::int64_t>) return Dtype::I64;
  else return Dtype::BOOL;
}

template <tensor_element T>
inline constexpr const char* element_name() noexcept {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else return "bool";
}

// What the header says about one tensor.
struct TensorInfo {
  Dtype dtype = Dtype::F32;
  std::vector<index_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte range in the data section, [begin, end)

  index_t numel() const noexcept {
    // The header check guarantees the product fits unless a 0 follows an oversized prefix, so 0 goes first.
    if (std::find(shape.begin(), shape.end(), index_t{0}) != shape.end()) return 0;
    index_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

namespace detail {

inline constexpr std::uint64_t max_header_size = 100'000'000;  // the reference implementation's limit

inline std::uint64_t load_le(const unsigned char* p, std::size_t bytes) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// IEEE binary16 -> binary32, exact (every half is a float). NaN payloads are kept, as the x86 F16C
// instruction and PyTorch's conversion keep them.
inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half (mantissa * 2^-24): a normal float once the leading 1 is shifted up to bit 10.
    std::uint32_t e = 127 - 14;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// bfloat16 is the top half of a float32.
inline float bf16_to_float(std::uint16_t b) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

inline std::string quote_name(std::string_view s) { return "\"" + std::string(s) + "\""; }

inline std::string known_dtypes() {
  std::string s;
  for (std::uint8_t i = 0; i <= static_cast<std::uint8_t>(Dtype::U64); ++i)
    s += (i ? ", " : "") + std::string(dtype_name(static_cast<Dtype>(i)));
  return s;
}

// Levenshtein distance, to suggest the names closest to a misspelt one.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// `"x" (2 tensors; closest: "a", "b")` for a name that is not there.
template <class Names>
std::string not_found_message(std::string_view name, const Names& names) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& n : names) scored.emplace_back(edit_distance(name, n), n);
  std::sort(scored.begin(), scored.end());
  std::string msg = "no tensor " + quote_name(name) + " (" + std::to_string(scored.size()) +
                    (scored.size() == 1 ? " tensor" : " tensors");
  for (std::size_t i = 0; i < std::min<std::size_t>(3, scored.size()); ++i)
    msg += (i == 0 ? "; closest: " : ", ") + quote_name(scored[i].second);
  return msg + ")";
}

// Converts `n` elements of dtype `d` at `src` (little-endian) to T. Floating targets take floating
// dtypes (F64 -> float rounds, like torch's copy_); int64 takes the integer dtypes; bool takes BOOL.
// Anything else, or a value that does not fit, throws checkpoint_error with the message prefix `what`.
template <tensor_element T>
void convert_elements(Dtype d, const unsigned char* src, std::size_t n, T* out, const std::string& what) {
  const std::size_t size = dtype_size(d);
  auto each = [&](auto&& f) {
    for (std::size_t i = 0; i < n; ++i) out[i] = f(src + i * size);
  };
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (d == dtype_of<T>() && std::endian::native == std::endian::little) {
      if (n > 0) std::memcpy(out, src, n * sizeof(T));
      return;
    }
    switch (d) {
      case Dtype::F16: return each([](const unsigned char* p) { return static_cast<T>(half_to_float(static_cast<std::uint16_t>(load_le(p, 2)))); });
      case Dtype::BF16: return each([](const unsigned char* p) { return static_cast<T>(bf16_to_float(static_cast<std::uint16_t>(load_le(p, 2)))); });
      case Dtype::F32: return each([](const unsigned char* p) { return static_cast<T>(std::bit_cast<float>(static_cast<std::uint32_t>(load_le(p, 4)))); });
      case Dtype::F64: return each([](const unsigned char* p) { return static_cast<T>(std::bit_cast<double>(load_le(p, 8))); });
      default:
        throw checkpoint_error(what + " has dtype " + std::string(dtype_name(d)) + "; it cannot be read as " +
                               element_name<T>() + " (that needs F16, BF16, F32 or F64)");
    }
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (d == Dtype::I64 && std::endian::native == std::endian::little) {
      if (n > 0) std::memcpy(out, src, n * sizeof(T));
      return;
    }
    if (!is_integer(d))
      throw checkpoint_error(what + " has dtype " + std::string(dtype_name(d)) +
                             "; it cannot be read as int64 (that needs an integer dtype: U8, I8, I16, U16, I32, "
                             "U32, I64 or U64)");
    const bool is_signed = d == Dtype::I8 || d == Dtype::I16 || d == Dtype::I32 || d == Dtype::I64;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t raw = load_le(src + i * size, size);
      if (is_signed) {
        const unsigned shift = static_cast<unsigned>(64 - 8 * size);  // sign-extend from the dtype's width
        out[i] = static_cast<std::int64_t>(raw << shift) >> shift;
      } else if (raw > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw checkpoint_error(what + ": element " + std::to_string(i) + " = " + std::to_string(raw) +
                               " (U64) does not fit in int64");
      } else {
        out[i] = static_cast<std::int64_t>(raw);
      }
    }
  } else {
    if (d != Dtype::BOOL)
      throw checkpoint_error(what + " has dtype " + std::string(dtype_name(d)) + "; it cannot be read as bool (that needs BOOL)");
    for (std::size_t i = 0; i < n; ++i) {
      if (src[i] > 1)
        throw checkpoint_error(what + ": element " + std::to_string(i) + " of a BOOL tensor is " +
                               std::to_string(src[i]) + ", not 0 or 1");
      out[i] = src[i] != 0;
    }
  }
}

// a * b, or nullopt when the product leaves [0, 2^63).
inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  constexpr auto limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (a != 0 && b > limit / a) return std::nullopt;
  return a * b;
}

}  // namespace detail

// A parsed, validated safetensors file: its header and its bytes. Cheap to copy (the bytes are shared).
class SafeTensorsFile {
 public:
  // Parses `bytes` (a whole file); `source` names it in error messages. Throws checkpoint_error on the first
  // problem found (see the top of this file for what is checked).
  static SafeTensorsFile from_bytes(std::span<const unsigned char> bytes, std::string source) {
    auto buffer = std::make_unique_for_overwrite<unsigned char[]>(std::max<std::size_t>(bytes.size(), 1));
    if (!bytes.empty()) std::memcpy(buffer.get(), bytes.data(), bytes.size());
    return SafeTensorsFile(std::shared_ptr<const unsigned char[]>(std::move(buffer)), bytes.size(), std::move(source));
  }

  // Reads the whole file with one read, then parses it.
  static SafeTensorsFile from_file(const std::filesystem::path& path) {
    const std::string source = path.string();
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw checkpoint_error(source + ": is a directory, not a safetensors file");
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) throw checkpoint_error(source + ": cannot read: " + ec.message());
    if (size > std::numeric_limits<std::size_t>::max())
      throw checkpoint_error(source + ": file of " + std::to_string(size) + " bytes does not fit in memory");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(source.c_str(), "rb"), &std::fclose);
    if (!file) throw checkpoint_error(source + ": cannot open: " + detail::errno_text(errno));
    const auto n = static_cast<std::size_t>(size);
    auto buffer = std::make_unique_for_overwrite<unsigned char[]>(std::max<std::size_t>(n, 1));
    errno = 0;
    const std::size_t got = n == 0 ? 0 : std::fread(buffer.get(), 1, n, file.get());
    // A file that changed size between file_size and the read is reported rather than half-parsed.
    if (got != n || std::fgetc(file.get()) != EOF)
      throw checkpoint_error(source + ": read " + std::to_string(got) + " of " + std::to_string(n) +
                             " bytes" + (errno ? ": " + detail::errno_text(errno) : std::string(" (the file changed while being read)")));
    return SafeTensorsFile(std::shared_ptr<const unsigned char[]>(std::move(buffer)), n, source);
  }

  // The file name (or label) errors start with.
  const std::string& source() const noexcept { return source_; }

  // Tensor names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, info] : tensors_) out.push_back(name);
    return out;
  }
  std::size_t size() const noexcept { return tensors_.size(); }
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

  // dtype, shape and byte range of `name`; throws checkpoint_error listing the closest names if missing.
  const TensorInfo& info(std::string_view name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw checkpoint_error(source_ + ": " + detail::not_found_message(name, names()));
    return it->second;
  }

  // The "__metadata__" strings (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  // The raw little-endian bytes of `name`.
  std::span<const unsigned char> bytes(std::string_view name) const {
    const TensorInfo& i = info(name);
    return {buffer_.get() + data_start_ + i.begin, static_cast<std::size_t>(i.end - i.begin)};
  }

  // The tensor `name` as Tensor<T, Rank>, converted from its dtype (see detail::convert_elements: F16, BF16,
  // F32, F64 -> float/double; integer dtypes -> int64; BOOL -> bool). Throws checkpoint_error naming the
  // tensor when it is missing, has another rank, or a dtype that does not convert to T.
  template <tensor_element T, std::size_t Rank>
  Tensor<T, Rank> get(std::string_view name) const {
    const TensorInfo& i = info(name);
    if (i.shape.size() != Rank)
      throw checkpoint_error(source_ + ": tensor " + detail::quote_name(name) + " has shape " + shape_string(i.shape) +
                             " (rank " + std::to_string(i.shape.size()) + "), not rank " + std::to_string(Rank));
    Shape<Rank> shape{};
    for (std::size_t d = 0; d < Rank; ++d) shape[d] = i.shape[d];  // (std::copy into a Shape<0> trips -Wnonnull)
    return get_flat<T>(name).view(shape);
  }

  // The tensor `name` flattened (row-major), whatever its rank.
  template <tensor_element T>
  Tensor<T, 1> get_flat(std::string_view name) const {
    const TensorInfo& i = info(name);
    auto out = Tensor<T, 1>::empty(Shape<1>{i.numel()});
    detail::convert_elements<T>(i.dtype, buffer_.get() + data_start_ + i.begin, static_cast<std::size_t>(i.numel()),
                                out.data(), source_ + ": tensor " + detail::quote_name(name));
    return out;
  }

 private:
  SafeTensorsFile(std::shared_ptr<const unsigned char[]> buffer, std::size_t size, std::string source)
      : buffer_(std::move(buffer)), source_(std::move(source)) {
    parse(size);
  }

  [[noreturn]] void fail(const std::string& what) const { throw checkpoint_error(source_ + ": " + what); }
  [[noreturn]] void fail_tensor(const std::string& name, const std::string& what) const {
    fail("tensor " + detail::quote_name(name) + ": " + what);
  }

  void parse(std::size_t size) {
    using nlohmann::json;
    const unsigned char* p = buffer_.get();
    if (size < 8)
      fail("file is " + std::to_string(size) + " bytes, too short for the 8-byte header length of a safetensors file");
    const std::uint64_t n = detail::load_le(p, 8);
    if (n > detail::max_header_size)
      fail("header length " + std::to_string(n) + " exceeds the " + std::to_string(detail::max_header_size) +
           "-byte limit of the format (a corrupt or non-safetensors file?)");
    if (n > size - 8)
      fail("header length " + std::to_string(n) + " exceeds the " + std::to_string(size - 8) +
           " bytes that follow it (truncated file?)");
    if (n == 0) fail("header is empty (length 0), expected a JSON object");
    const auto* header = reinterpret_cast<const char*>(p + 8);
    // nlohmann/json stops at a NUL byte as if the input ended there, which would accept "{}\0garbage";
    // JSON text never contains one, so it is refused here.
    if (const void* nul = std::memchr(header, 0, static_cast<std::size_t>(n)))
      fail("header contains a NUL byte at offset " +
           std::to_string(static_cast<const char*>(nul) - header) + ", which JSON text cannot");
    data_start_ = 8 + n;
    const std::uint64_t data_size = size - data_start_;

    // The callback sees every key and container as it is parsed: it rejects duplicate keys (the format
    // forbids them; a plain parse would keep the last silently) and nesting deeper than a header has
    // (object > tensor entry > shape list), so a hostile header cannot build a deep tree.
    std::set<std::string> top_keys, entry_keys;
    auto check = [&](int depth, json::parse_event_t event, json& parsed) {
      if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= 3)
        fail("header nests deeper than a safetensors header does (objects or lists inside a shape, "
             "data_offsets or metadata value)");
      if (event == json::parse_event_t::object_start && depth == 1) entry_keys.clear();
      if (event == json::parse_event_t::key) {
        auto& seen = depth == 1 ? top_keys : entry_keys;
        if (!seen.insert(parsed.get<std::string>()).second)
          fail("header has the key " + detail::quote_name(parsed.get<std::string>()) + " twice");
      }
      return true;
    };
    json root;
    try {
      root = json::parse(header, header + n, check);
    } catch (const json::exception& e) {
      fail(std::string("header is not valid JSON: ") + e.what());
    }
    if (!root.is_object()) fail(std::string("header is a JSON ") + root.type_name() + ", expected an object");

    struct Range {
      std::uint64_t begin, end;
      const std::string* name;
    };
    std::vector<Range> ranges;
    for (const auto& item : root.items()) {
      // Named references rather than a structured binding: Clang 14 cannot capture those in the lambda below.
      const std::string& name = item.key();
      const json& entry = item.value();
      if (name == "__metadata__") {
        if (!entry.is_object()) fail("\"__metadata__\" must be an object of strings, got a " + std::string(entry.type_name()));
        for (const auto& [key, value] : entry.items()) {
          if (!value.is_string())
            fail("\"__metadata__\" must map strings to strings; " + detail::quote_name(key) + " holds " + value.dump());
          metadata_.emplace(key, value.get<std::string>());
        }
        continue;
      }
      if (!entry.is_object()) fail_tensor(name, "entry is " + entry.dump() + ", expected {\"dtype\", \"shape\", \"data_offsets\"}");
      for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!entry.contains(field)) fail_tensor(name, std::string("entry has no \"") + field + "\"");
      TensorInfo info;
      const json& dtype = entry.at("dtype");
      const auto parsed_dtype = dtype.is_string() ? dtype_from_name(dtype.get<std::string>()) : std::nullopt;
      if (!parsed_dtype) fail_tensor(name, "unknown dtype " + dtype.dump() + " (known: " + detail::known_dtypes() + ")");
      info.dtype = *parsed_dtype;

      const json& shape = entry.at("shape");
      auto bad_shape = [&] { fail_tensor(name, "shape must be a list of non-negative integers, got " + shape.dump()); };
      if (!shape.is_array()) bad_shape();
      std::uint64_t numel = 1;
      bool overflow = false;
      for (const json& d : shape) {
        // Integers beyond 2^64 arrive as floats, negative ones as signed: both are refused.
        if (!d.is_number_unsigned()) bad_shape();
        const auto v = d.get<std::uint64_t>();
        if (v > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max())) overflow = true;
        else if (auto m = detail::checked_mul(numel, v)) numel = *m;
        else overflow = true;
        info.shape.push_back(static_cast<index_t>(std::min<std::uint64_t>(v, std::numeric_limits<index_t>::max())));
      }
      // A dimension of 0 makes the tensor empty however large the others are.
      if (numel == 0) overflow = false;
      const auto bytes_needed = overflow ? std::nullopt : detail::checked_mul(numel, dtype_size(info.dtype));
      if (!bytes_needed)
        fail_tensor(name, "shape " + shape.dump() + " of " + std::string(dtype_name(info.dtype)) +
                              " has more elements or bytes than fit in 63 bits (overflow)");

      const json& offsets = entry.at("data_offsets");
      if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
        fail_tensor(name, "data_offsets must be two non-negative integers [begin, end], got " + offsets.dump());
      info.begin = offsets[0].get<std::uint64_t>();
      info.end = offsets[1].get<std::uint64_t>();
      const std::string range = "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + ")";
      if (info.end < info.begin) fail_tensor(name, range + " end before they begin");
      if (info.end > data_size) fail_tensor(name, range + " exceed the data size " + std::to_string(data_size));
      if (info.end - info.begin != *bytes_needed)
        fail_tensor(name, range + " hold " + std::to_string(info.end - info.begin) + " bytes, but " +
                              std::string(dtype_name(info.dtype)) + " " + shape_string(info.shape) + " needs " +
                              std::to_string(*bytes_needed));
      const auto [it, inserted] = tensors_.emplace(name, std::move(info));
      ranges.push_back({it->second.begin, it->second.end, &it->first});
    }

    // The tensors must tile the data: no byte read twice, none left unread.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
      return std::tie(a.begin, a.end, *a.name) < std::tie(b.begin, b.end, *b.name);
    });
    std::uint64_t at = 0;
    const std::string* previous = nullptr;
    for (const Range& r : ranges) {
      const std::string range = "data_offsets [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
      if (r.begin < at) {
        const TensorInfo& prev = tensors_.find(*previous)->second;
        fail_tensor(*r.name, range + " overlap tensor " + detail::quote_name(*previous) + " at [" +
                                 std::to_string(prev.begin) + ", " + std::to_string(prev.end) + ")");
      }
      if (r.begin > at)
        fail_tensor(*r.name, range + " leave bytes [" + std::to_string(at) + ", " + std::to_string(r.begin) +
                                 ") unused " + (previous ? "after tensor " + detail::quote_name(*previous) : std::string("at the start of the data")));
      at = r.end;
      previous = r.name;
    }
    if (at != data_size)
      fail("the tensors end at byte " + std::to_string(at) + " of the data, leaving " + std::to_string(data_size - at) +
           " trailing bytes unused (data size " + std::to_string(data_size) + ")");
  }

  std::shared_ptr<const unsigned char[]> buffer_;
  std::string source_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

inline SafeTensorsFile load_safetensors(const std::filesystem::path& path) { return SafeTensorsFile::from_file(path); }

// A tensor of any element type and rank, for writing: float, double, int64 or bool elements, kept flat with
// the shape beside them. Built implicitly from any Tensor<T, R>; shares its storage when it is contiguous
// (no copy), so what is written is the tensor's contents at save time.
class AnyTensor {
 public:
  template <tensor_element T, std::size_t R>
  AnyTensor(const Tensor<T, R>& t)  // NOLINT(google-explicit-constructor): {{"name", tensor}} lists read best
      : flat_(t.reshape(Shape<1>{t.numel()})), shape_(t.shape().begin(), t.shape().end()) {}

  // Flat data read as `shape` (numel must match): how parameters' flat views are stored.
  template <tensor_element T>
  AnyTensor(const Tensor<T, 1>& flat, std::vector<index_t> shape) : flat_(flat.contiguous()), shape_(std::move(shape)) {
    index_t n = 1;
    for (auto d : shape_) n *= d;
    if (n != flat.numel())
      throw checkpoint_error("AnyTensor: " + std::to_string(flat.numel()) + " elements do not fill shape " +
                             shape_string(shape_));
  }

  Dtype dtype() const noexcept {
    return std::visit([](const auto& t) { return dtype_of<typename std::decay_t<decltype(t)>::value_type>(); }, flat_);
  }
  const std::vector<index_t>& shape() const noexcept { return shape_; }
  index_t numel() const noexcept { return std::visit([](const auto& t) { return t.numel(); }, flat_); }

  // The elements as T, flattened: float and double convert into each other (rounding to float like
  // torch's copy_); int64 and bool only read as themselves. `what` starts the error message.
  template <tensor_element T>
  Tensor<T, 1> flat(const std::string& what = "tensor") const {
    return std::visit(
        [&](const auto& t) -> Tensor<T, 1> {
          using U = typename std::decay_t<decltype(t)>::value_type;
          if constexpr (std::is_same_v<U, T>) return t;
          else if constexpr (floating_element<U> && floating_element<T>) return t.template to<T>();
          else
            throw checkpoint_error(what + " has dtype " + std::string(dtype_name(dtype_of<U>())) +
                                   "; it cannot be read as " + element_name<T>());
        },
        flat_);
  }

  // Appends the elements' little-endian bytes through `write(const void*, size_t)`.
  template <class Write>
  void write_bytes(Write&& write) const {
    std::visit(
        [&](const auto& t) {
          using U = typename std::decay_t<decltype(t)>::value_type;
          const U* data = t.data();
          const auto n = static_cast<std::size_t>(t.numel());
          if constexpr (!std::is_same_v<U, bool>) {
            if constexpr (std::endian::native == std::endian::little) {
              write(data, n * sizeof(U));
            } else {
              for (std::size_t i = 0; i < n; ++i) {
                auto bytes = std::bit_cast<std::array<unsigned char, sizeof(U)>>(data[i]);
                std::reverse(bytes.begin(), bytes.end());
                write(bytes.data(), bytes.size());
              }
            }
          } else {
            // sizeof(bool) and its object representation are the implementation's; the format's BOOL is
            // one byte 0 or 1, so it is spelt out (in chunks, to keep the writes large).
            unsigned char chunk[4096];
            for (std::size_t i = 0; i < n;) {
              const std::size_t m = std::min(n - i, sizeof chunk);
              for (std::size_t j = 0; j < m; ++j) chunk[j] = data[i + j] ? 1 : 0;
              write(chunk, m);
              i += m;
            }
          }
        },
        flat_);
  }

 private:
  std::variant<Tensor<float, 1>, Tensor<double, 1>, Tensor<std::int64_t, 1>, Tensor<bool, 1>> flat_;
  std::vector<index_t> shape_;
};

// Named tensors to save, e.g. {{"weight", w}, {"bias", b}} or io::state_dict(model).
using TensorDict = std::map<std::string, AnyTensor>;
using Metadata = std::map<std::string, std::string>;

namespace detail {

// The header bytes for `tensors` in the reference writer's order (dtype alignment descending, then name),
// "__metadata__" first when there is any, compact JSON padded with spaces to a multiple of 8 so the data,
// which starts right after, is 8-byte aligned in the file. Also returns that order.
inline std::pair<std::string, std::vector<const TensorDict::value_type*>> safetensors_header(
    const std::string& target, const TensorDict& tensors, const Metadata& metadata) {
  std::vector<const TensorDict::value_type*> order;
  for (const auto& entry : tensors) {
    // A name that is not UTF-8 cannot go into JSON; "__metadata__" would be read back as the metadata.
    if (entry.first == "__metadata__")
      throw checkpoint_error(target + ": a tensor cannot be named \"__metadata__\" (the format's metadata key)");
    try {
      (void)nlohmann::json(entry.first).dump();
    } catch (const nlohmann::json::exception&) {
      throw checkpoint_error(target + ": tensor name " + quote_name(entry.first) + " is not valid UTF-8");
    }
    order.push_back(&entry);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->second.dtype() > b->second.dtype();  // the map already sorted by name
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (const auto* entry : order) {
    const AnyTensor& t = entry->second;
    const auto bytes = static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype());
    header[entry->first] = {{"dtype", std::string(dtype_name(t.dtype()))},
                            {"shape", t.shape()},
                            {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw checkpoint_error(target + ": metadata is not valid UTF-8 (" + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return {std::move(text), std::move(order)};
}

}  // namespace detail

// Writes `tensors` (and `metadata`) to `path` as safetensors, atomically: the file is written under a
// temporary name in the same directory and renamed over `path` only when complete, so on any error
// (checkpoint_error naming the file) an existing file at `path` is left as it was.
inline void save_safetensors(const std::filesystem::path& path, const TensorDict& tensors, const Metadata& metadata = {}) {
  auto [header, order] = detail::safetensors_header(path.string(), tensors, metadata);
  detail::AtomicFile file(path);
  unsigned char length[8];
  for (std::size_t i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  file.write(length, sizeof length);
  file.write(header.data(), header.size());
  for (const auto* entry : order) entry->second.write_bytes([&](const void* p, std::size_t n) { file.write(p, n); });
  file.commit();
}

}  // namespace eigenformer::io
