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
//   auto f = io::SafeTensorsFile::from_file("model.safetensors");   // the header only
//   for (const auto& name : f.names()) std::cout << name << " " << shape_string(f.info(name).shape) << "\n";
//   Tensor<float, 2> wte = f.get<float, 2>("wte.weight");      // F16/BF16/F64 are converted to float
//   f.read_into("wte.weight", model.wte.data);                  // into existing storage
//   io::save_safetensors("out.safetensors", {{"wte.weight", wte}}, {{"format", "pt"}});
//
// Opening a file reads and validates the header alone and keeps the file open; a tensor is read when it is
// asked for, with positioned reads (pread) straight into its destination when no conversion is needed, and
// through a 1 MiB buffer otherwise. Loading a checkpoint into a model therefore needs the model's memory and
// nothing the size of the file: no whole-file buffer, no mapping whose touched pages would count as
// resident. Writing goes through a temporary file renamed over the target (see detail/atomic_file.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
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

#if !defined(EIGENFORMER_IO_HAVE_PREAD) && defined(__has_include)
#if __has_include(<unistd.h>) && __has_include(<fcntl.h>) && __has_include(<sys/stat.h>)
#define EIGENFORMER_IO_HAVE_PREAD 1
#endif
#endif
#if EIGENFORMER_IO_HAVE_PREAD
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#else
#include <fstream>
#include <mutex>
#endif

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

// Appended piece by piece: "\"" + std::string sends GCC 12 at -O3 into a false -Wrestrict warning.
inline std::string quote_name(std::string_view s) {
  std::string quoted = "\"";
  quoted += s;
  quoted += '"';
  return quoted;
}

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

// Throws checkpoint_error (message prefix `what`) unless dtype `d` converts to T: floating targets take
// the floating dtypes (F64 -> float rounds, like torch's copy_), int64 the integer dtypes, bool only BOOL.
// Checked before any byte is read, so a wrong dtype never leaves a destination half-written.
template <tensor_element T>
void check_convertible(Dtype d, const std::string& what) {
  if constexpr (floating_element<T>) {
    if (!is_floating(d))
      throw checkpoint_error(what + " has dtype " + std::string(dtype_name(d)) + "; it cannot be read as " +
                             element_name<T>() + " (that needs F16, BF16, F32 or F64)");
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (!is_integer(d))
      throw checkpoint_error(what + " has dtype " + std::string(dtype_name(d)) +
                             "; it cannot be read as int64 (that needs an integer dtype: U8, I8, I16, U16, I32, "
                             "U32, I64 or U64)");
  } else {
    if (d != Dtype::BOOL)
      throw checkpoint_error(what + " has dtype " + std::string(dtype_name(d)) + "; it cannot be read as bool (that needs BOOL)");
  }
}

// True when the file's bytes of dtype `d` are T's own object representation, so they can be read straight
// into T storage with no conversion (bool is excluded: the format's BOOL must be checked to be 0 or 1).
template <tensor_element T>
inline constexpr bool same_representation(Dtype d) noexcept {
  return std::endian::native == std::endian::little && !std::is_same_v<T, bool> && d == dtype_of<T>();
}

// Converts `n` elements of dtype `d` at `src` (little-endian) to T; `d` has passed check_convertible<T>.
// `first` is the index of src[0] within its tensor, so a value that does not fit (U64 above 2^63 - 1, a
// BOOL byte other than 0 or 1) is reported at its place in the whole tensor, with the message prefix `what`.
template <tensor_element T>
void convert_elements(Dtype d, const unsigned char* src, std::size_t n, T* out, const std::string& what,
                      std::uint64_t first = 0) {
  const std::size_t size = dtype_size(d);
  if (same_representation<T>(d)) {
    if (n > 0) std::memcpy(out, src, n * sizeof(T));
    return;
  }
  auto each = [&](auto&& f) {
    for (std::size_t i = 0; i < n; ++i) out[i] = f(src + i * size);
  };
  if constexpr (floating_element<T>) {
    switch (d) {
      case Dtype::F16: return each([](const unsigned char* p) { return static_cast<T>(half_to_float(static_cast<std::uint16_t>(load_le(p, 2)))); });
      case Dtype::BF16: return each([](const unsigned char* p) { return static_cast<T>(bf16_to_float(static_cast<std::uint16_t>(load_le(p, 2)))); });
      case Dtype::F32: return each([](const unsigned char* p) { return static_cast<T>(std::bit_cast<float>(static_cast<std::uint32_t>(load_le(p, 4)))); });
      case Dtype::F64: return each([](const unsigned char* p) { return static_cast<T>(std::bit_cast<double>(load_le(p, 8))); });
      default: check_convertible<T>(d, what);  // throws
    }
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    check_convertible<T>(d, what);
    const bool is_signed = d == Dtype::I8 || d == Dtype::I16 || d == Dtype::I32 || d == Dtype::I64;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t raw = load_le(src + i * size, size);
      if (is_signed) {
        const unsigned shift = static_cast<unsigned>(64 - 8 * size);  // sign-extend from the dtype's width
        out[i] = static_cast<std::int64_t>(raw << shift) >> shift;
      } else if (raw > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw checkpoint_error(what + ": element " + std::to_string(first + i) + " = " + std::to_string(raw) +
                               " (U64) does not fit in int64");
      } else {
        out[i] = static_cast<std::int64_t>(raw);
      }
    }
  } else {
    check_convertible<T>(d, what);
    for (std::size_t i = 0; i < n; ++i) {
      if (src[i] > 1)
        throw checkpoint_error(what + ": element " + std::to_string(first + i) + " of a BOOL tensor is " +
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

// Where a SafeTensorsFile's bytes come from. Reads are positioned and leave the source unchanged, so one
// source can serve several threads at once.
class ByteSource {
 public:
  ByteSource() = default;
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;
  virtual ~ByteSource() = default;
  // The size in bytes, as it was when the source was opened; the header was validated against it.
  virtual std::uint64_t size() const noexcept = 0;
  // Exactly `n` bytes at `offset` into `out`, else checkpoint_error whose message starts with `what`.
  virtual void read(std::uint64_t offset, std::size_t n, void* out, const std::string& what) const = 0;
  // Throws checkpoint_error (prefix `what`) if the source is no longer what was validated when it was opened.
  virtual void check_unchanged(const std::string& /*what*/) const {}
};

// Bytes held in memory (from_bytes: tests, fuzzing, data that did not come from a file).
class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::span<const unsigned char> bytes)
      : data_(std::make_unique_for_overwrite<unsigned char[]>(std::max<std::size_t>(bytes.size(), 1))), size_(bytes.size()) {
    if (!bytes.empty()) std::memcpy(data_.get(), bytes.data(), bytes.size());
  }
  std::uint64_t size() const noexcept override { return size_; }
  void read(std::uint64_t offset, std::size_t n, void* out, const std::string& what) const override {
    // Offsets come from a validated header, so this holds; kept as a check since a miss would read wild memory.
    if (offset > size_ || n > size_ - offset)
      throw checkpoint_error(what + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                             ") are outside the " + std::to_string(size_) + " bytes");
    if (n > 0) std::memcpy(out, data_.get() + offset, n);
  }

 private:
  std::unique_ptr<unsigned char[]> data_;
  std::size_t size_;
};

inline std::string read_failure(std::uint64_t offset, std::size_t n, std::size_t got) {
  return "read " + std::to_string(got) + " of " + std::to_string(n) + " bytes at file offset " + std::to_string(offset);
}

#if EIGENFORMER_IO_HAVE_PREAD
// An open file read with pread: nothing is read until a tensor is asked for, and then straight into where
// it goes, so memory holds the header and the destination tensors, never a copy of the file. pread takes
// the offset with each call (no shared file position), so concurrent reads need no lock.
//
// The file may change under us (rewritten in place, truncated). A read that comes up short, and a
// size or modification time that differs from those at open (checked after each tensor), throw
// checkpoint_error. A file replaced by rename (as our writers and Hugging Face's do) is not a change: the
// open descriptor keeps reading the old, complete file.
class FileSource final : public ByteSource {
 public:
  FileSource(const std::filesystem::path& path, const std::string& source) : source_(source) {
#ifdef O_CLOEXEC
    constexpr int flags = O_RDONLY | O_CLOEXEC;  // not inherited by programs this process starts
#else
    constexpr int flags = O_RDONLY;
#endif
    do {
      fd_ = ::open(path.c_str(), flags);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw checkpoint_error(source_ + ": cannot read: " + errno_text(errno));
    struct ::stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw checkpoint_error(source_ + ": cannot read: " + errno_text(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw checkpoint_error(source_ + ": cannot read: not a regular file");
    }
    at_open_ = stamp(st);
  }
  ~FileSource() override { ::close(fd_); }

  std::uint64_t size() const noexcept override { return at_open_.size; }

  void read(std::uint64_t offset, std::size_t n, void* out, const std::string& what) const override {
    auto* p = static_cast<unsigned char*>(out);
    std::size_t got = 0;
    while (got < n) {
      // Linux transfers at most 0x7ffff000 bytes per call; smaller pieces also keep ssize_t in range.
      const std::size_t piece = std::min<std::size_t>(n - got, std::size_t{1} << 30);
      const ::ssize_t r = ::pread(fd_, p + got, piece, static_cast<::off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw checkpoint_error(what + ": " + read_failure(offset, n, got) + ": " + errno_text(errno));
      if (r == 0) {
        struct ::stat st {};
        const std::string now = ::fstat(fd_, &st) == 0 ? std::to_string(st.st_size) + " bytes now" : "size unknown";
        throw checkpoint_error(what + ": " + read_failure(offset, n, got) + ": the file ended early (" + now + ", " +
                               std::to_string(at_open_.size) + " when it was opened: it was truncated or rewritten)");
      }
      got += static_cast<std::size_t>(r);
    }
  }

  void check_unchanged(const std::string& what) const override {
    struct ::stat st {};
    if (::fstat(fd_, &st) != 0) throw checkpoint_error(what + ": cannot stat the file: " + errno_text(errno));
    const Stamp now = stamp(st);
    if (now.size != at_open_.size)
      throw checkpoint_error(what + ": the file changed while it was being read (" + std::to_string(now.size) +
                             " bytes now, " + std::to_string(at_open_.size) + " when it was opened)");
    if (now.mtime_s != at_open_.mtime_s || now.mtime_ns != at_open_.mtime_ns)
      throw checkpoint_error(what + ": the file changed while it was being read (its modification time is not the "
                             "one it had when it was opened)");
  }

 private:
  struct Stamp {
    std::uint64_t size;
    std::int64_t mtime_s, mtime_ns;
  };
  static Stamp stamp(const struct ::stat& st) {
#if defined(__APPLE__)
    return {static_cast<std::uint64_t>(st.st_size), st.st_mtimespec.tv_sec, st.st_mtimespec.tv_nsec};
#else
    return {static_cast<std::uint64_t>(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
#endif
  }

  std::string source_;
  int fd_ = -1;
  Stamp at_open_{};
};
#else
// Without POSIX pread: a stream behind a lock (seek + read must not interleave between threads), with the
// same short-read and size checks.
class FileSource final : public ByteSource {
 public:
  FileSource(const std::filesystem::path& path, const std::string& source) : path_(path) {
    std::error_code ec;
    size_ = std::filesystem::file_size(path, ec);
    if (ec) throw checkpoint_error(source + ": cannot read: " + ec.message());
    in_.open(path, std::ios::binary);
    if (!in_) throw checkpoint_error(source + ": cannot read: cannot open the file");
  }
  std::uint64_t size() const noexcept override { return size_; }
  void read(std::uint64_t offset, std::size_t n, void* out, const std::string& what) const override {
    const std::lock_guard<std::mutex> lock(mutex_);
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    const auto got = static_cast<std::size_t>(in_ ? static_cast<std::streamsize>(n) : in_.gcount());
    if (got != n)
      throw checkpoint_error(what + ": " + read_failure(offset, n, got) + ": the file ended early or could not be "
                             "read (" + std::to_string(size_) + " bytes when it was opened)");
  }
  void check_unchanged(const std::string& what) const override {
    std::error_code ec;
    const auto now = std::filesystem::file_size(path_, ec);
    if (ec || now != size_)
      throw checkpoint_error(what + ": the file changed while it was being read (" +
                             (ec ? ec.message() : std::to_string(now) + " bytes now") + ", " + std::to_string(size_) +
                             " when it was opened)");
  }

 private:
  std::filesystem::path path_;
  std::uint64_t size_ = 0;
  mutable std::mutex mutex_;
  mutable std::ifstream in_;
};
#endif

}  // namespace detail

// An open safetensors file whose header has been read and validated; tensors are read on demand, each
// straight into the tensor that receives it. Cheap to copy (copies share the open file), and safe to read
// from several threads at once.
//
//   auto f = io::SafeTensorsFile::from_file("model.safetensors");   // reads and checks the header only
//   Tensor<float, 2> w = f.get<float, 2>("wte.weight");               // a new tensor
//   f.read_into("wte.weight", model.wte.data);                       // into existing storage, no copy
class SafeTensorsFile {
 public:
  // Opens `path` and reads and validates its header (see the top of this file for what is checked); the
  // data is not read. Throws checkpoint_error naming the file on the first problem.
  static SafeTensorsFile from_file(const std::filesystem::path& path) {
    const std::string source = path.string();
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw checkpoint_error(source + ": is a directory, not a safetensors file");
    return SafeTensorsFile(std::make_shared<const detail::FileSource>(path, source), source);
  }

  // The same from `bytes` (a whole file, copied); `source` names it in error messages.
  static SafeTensorsFile from_bytes(std::span<const unsigned char> bytes, std::string source) {
    return SafeTensorsFile(std::make_shared<const detail::MemorySource>(bytes), std::move(source));
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

  // The tensor `name` as a new Tensor<T, Rank>, converted from its dtype (F16, BF16, F32, F64 -> float or
  // double; integer dtypes -> int64; BOOL -> bool). Throws checkpoint_error naming the tensor when it is
  // missing, has another rank, a dtype that does not convert to T, or cannot be read.
  template <tensor_element T, std::size_t Rank>
  Tensor<T, Rank> get(std::string_view name) const {
    const TensorInfo& i = info(name);
    if (i.shape.size() != Rank)
      throw checkpoint_error(label(name) + " has shape " + shape_string(i.shape) + " (rank " +
                             std::to_string(i.shape.size()) + "), not rank " + std::to_string(Rank));
    Shape<Rank> shape{};
    for (std::size_t d = 0; d < Rank; ++d) shape[d] = i.shape[d];  // (std::copy into a Shape<0> trips -Wnonnull)
    return get_flat<T>(name).view(shape);
  }

  // The tensor `name` flattened (row-major), whatever its rank.
  template <tensor_element T>
  Tensor<T, 1> get_flat(std::string_view name) const {
    const TensorInfo& i = info(name);
    auto out = Tensor<T, 1>::empty(Shape<1>{i.numel()});
    read_flat_into(name, out);
    return out;
  }

  // Reads `name` into `dst`, which must have the tensor's shape; `dst` may be any view (a slice, a
  // transpose) and receives the values in place, as dst.copy_(tensor) would. An F32 tensor read as float
  // (F64 as double, I64 as int64) into contiguous storage goes from the file straight into `dst`; other
  // dtypes and strided views pass through a buffer of at most 1 MiB. Throws checkpoint_error naming the
  // file, the tensor and both shapes on a shape mismatch, and on a dtype that does not convert (both before
  // anything is written); on a read error or a file changed since it was opened, `dst` may hold part of
  // the values.
  template <tensor_element T, std::size_t Rank>
  void read_into(std::string_view name, Tensor<T, Rank>& dst) const {
    const TensorInfo& i = info(name);
    bool same = i.shape.size() == Rank;
    // A loop rather than std::equal: on a Shape<0> GCC warns of memcmp on a null pointer (-Wnonnull).
    for (std::size_t d = 0; same && d < Rank; ++d) same = i.shape[d] == dst.shape()[d];
    if (!same)
      throw checkpoint_error(label(name) + " has shape " + shape_string(i.shape) +
                             " in the file, but the destination has shape " + shape_string(dst.shape()));
    read_to(i, dst, label(name));
  }
  template <tensor_element T, std::size_t Rank>
  void read_into(std::string_view name, Tensor<T, Rank>&& dst) const {  // a view made for the call
    read_into(name, dst);
  }

  // Reads `name` flattened (row-major) into `dst`, which must hold as many elements, whatever the tensor's
  // rank: how a flat parameter view (nn::NamedParameter::data) is loaded. Otherwise as read_into.
  template <tensor_element T>
  void read_flat_into(std::string_view name, Tensor<T, 1>& dst) const {
    const TensorInfo& i = info(name);
    if (dst.numel() != i.numel())
      throw checkpoint_error(label(name) + " has shape " + shape_string(i.shape) + " (" + std::to_string(i.numel()) +
                             " elements) in the file, but the destination has shape " + shape_string(dst.shape()));
    read_to(i, dst, label(name));
  }
  template <tensor_element T>
  void read_flat_into(std::string_view name, Tensor<T, 1>&& dst) const {
    read_flat_into(name, dst);
  }

  // Elements [first, first + out.size()) of `name` flattened (row-major), converted to T: a tensor read
  // piece by piece, e.g. to compare two large tensors without holding either.
  template <tensor_element T>
  void read_elements(std::string_view name, index_t first, std::span<T> out) const {
    const TensorInfo& i = info(name);
    const std::string what = label(name);
    const auto n = static_cast<std::uint64_t>(out.size());
    if (first < 0 || first > i.numel() || n > static_cast<std::uint64_t>(i.numel() - first))
      throw checkpoint_error(what + ": elements [" + std::to_string(first) + ", " +
                             std::to_string(static_cast<std::uint64_t>(first) + n) + ") are outside its " +
                             std::to_string(i.numel()) + " elements");
    detail::check_convertible<T>(i.dtype, what);
    read_span(i, static_cast<std::uint64_t>(first), out.data(), out.size(), what);
    bytes_->check_unchanged(what);
  }

  // Throws checkpoint_error naming the file if it is no longer the size, or has not the modification time,
  // it had when it was opened (each read checks this too): to find out before a series of reads begins.
  void check_unchanged() const { bytes_->check_unchanged(source_); }

 private:
  SafeTensorsFile(std::shared_ptr<const detail::ByteSource> bytes, std::string source)
      : bytes_(std::move(bytes)), source_(std::move(source)) {
    read_header();
  }

  std::string label(std::string_view name) const { return source_ + ": tensor " + detail::quote_name(name); }

  // The bytes of elements [first, first + n) of tensor `i`, converted into out[0, n).
  template <tensor_element T>
  void read_span(const TensorInfo& i, std::uint64_t first, T* out, std::size_t n, const std::string& what) const {
    const std::size_t size = dtype_size(i.dtype);
    const std::uint64_t at = data_start_ + i.begin + first * size;
    if (detail::same_representation<T>(i.dtype)) {
      bytes_->read(at, n * size, out, what);  // file -> destination, no buffer
      return;
    }
    const std::size_t per_chunk = chunk_bytes / size;
    auto buffer = std::make_unique_for_overwrite<unsigned char[]>(std::min(n, per_chunk) * size + 1);
    for (std::size_t done = 0; done < n;) {
      const std::size_t m = std::min(per_chunk, n - done);
      bytes_->read(at + done * size, m * size, buffer.get(), what);
      detail::convert_elements<T>(i.dtype, buffer.get(), m, out + done, what, first + done);
      done += m;
    }
  }

  // All of tensor `i` into `dst` (same number of elements, checked by the caller), in dst's row-major order.
  template <tensor_element T, std::size_t Rank>
  void read_to(const TensorInfo& i, Tensor<T, Rank>& dst, const std::string& what) const {
    detail::check_convertible<T>(i.dtype, what);
    const auto n = static_cast<std::size_t>(dst.numel());
    if (dst.is_contiguous()) {
      read_span(i, 0, dst.data(), n, what);
    } else {
      const auto& shape = dst.shape();
      const auto& strides = dst.strides();
      for (std::size_t d = 0; d < Rank; ++d)
        if (strides[d] == 0 && shape[d] > 1)
          throw checkpoint_error(what + ": the destination (shape " + shape_string(shape) + ", strides " +
                                 shape_string(strides) + ") is an expanded view whose elements overlap");
      // Converted a chunk at a time, then scattered along the view's strides in row-major order.
      const std::size_t per_chunk = std::max<std::size_t>(1, chunk_bytes / sizeof(T));
      auto buffer = std::make_unique_for_overwrite<T[]>(std::min(n, per_chunk) + 1);
      Shape<Rank> index{};
      index_t offset = 0;
      T* base = dst.data();
      for (std::size_t done = 0; done < n;) {
        const std::size_t m = std::min(per_chunk, n - done);
        read_span(i, done, buffer.get(), m, what);
        for (std::size_t k = 0; k < m; ++k) {
          base[offset] = buffer[k];
          for (std::size_t d = Rank; d-- > 0;) {  // the next index in row-major order
            offset += strides[d];
            if (++index[d] < shape[d]) break;
            offset -= strides[d] * shape[d];
            index[d] = 0;
          }
        }
        done += m;
      }
    }
    bytes_->check_unchanged(what);
  }

  [[noreturn]] void fail(const std::string& what) const { throw checkpoint_error(source_ + ": " + what); }
  [[noreturn]] void fail_tensor(const std::string& name, const std::string& what) const {
    fail("tensor " + detail::quote_name(name) + ": " + what);
  }

  // The 8-byte length and the header it announces, checked against the file's size before anything is
  // allocated for them, then parsed.
  void read_header() {
    const std::uint64_t size = bytes_->size();
    if (size < 8)
      fail("file is " + std::to_string(size) + " bytes, too short for the 8-byte header length of a safetensors file");
    unsigned char length[8];
    bytes_->read(0, 8, length, source_);
    const std::uint64_t n = detail::load_le(length, 8);
    if (n > detail::max_header_size)
      fail("header length " + std::to_string(n) + " exceeds the " + std::to_string(detail::max_header_size) +
           "-byte limit of the format (a corrupt or non-safetensors file?)");
    if (n > size - 8)
      fail("header length " + std::to_string(n) + " exceeds the " + std::to_string(size - 8) +
           " bytes that follow it (truncated file?)");
    if (n == 0) fail("header is empty (length 0), expected a JSON object");
    std::string text(static_cast<std::size_t>(n), '\0');
    bytes_->read(8, text.size(), text.data(), source_ + ": header");
    parse(text, size);
  }

  void parse(const std::string& text, std::uint64_t size) {
    using nlohmann::json;
    const std::uint64_t n = text.size();
    const char* header = text.data();
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

  // Conversions and strided destinations go through a buffer of this size: large enough that reads are
  // few, small enough to be noise next to any tensor worth streaming.
  static constexpr std::size_t chunk_bytes = std::size_t{1} << 20;

  std::shared_ptr<const detail::ByteSource> bytes_;
  std::string source_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

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
