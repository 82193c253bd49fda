// libFuzzer target for the safetensors reader (include/eigenformer/io/safetensors.hpp). Built and run by
// `cmake --workflow --preset fuzz`; by hand:
//   build/fuzz/fuzz/fuzz_safetensors -max_total_time=60 corpus/
// It needs no data directory; the shared seed corpus is text, which the odd-first-byte mode below turns
// into headers quickly.
//
// The first byte chooses what the rest is:
//   even: a whole file, as is (length prefix included), to reach the length and size checks.
//   odd:  a header and its data: the next byte says how many of the remaining bytes are header text (as a
//         fraction of 255), and the 8-byte length prefix is written for it, so the fuzzer spends its time in
//         the JSON and offset checks rather than guessing a length.
// Loading must either succeed or throw checkpoint_error. On success every tensor must convert (or throw
// checkpoint_error) to each element type, with as many elements as its shape says and the same values
// through read_into (a strided destination) and read_elements as through get_flat, and saving the
// floating tensors and loading them back must give the same bits. Any other exception or a wrong count
// aborts; ASan and UBSan catch memory errors and undefined behaviour.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <eigenformer/io/safetensors.hpp>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

namespace io = eigenformer::io;

namespace {

// Equal bits (NaNs with payloads included); std::vector<bool> compares by value.
template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  if constexpr (std::is_same_v<T, bool>) return a == b;
  else return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <typename T>
void convert(const io::SafeTensorsFile& f, const std::string& name) {
  try {
    const auto t = f.get_flat<T>(name);
    if (t.numel() != f.info(name).numel()) std::abort();
    // The streamed paths must agree with get_flat: a rank-2 tensor read into the transpose of a buffer
    // (strided destination, chunked scatter), and its last elements through read_elements.
    const auto& shape = f.info(name).shape;
    if (shape.size() == 2) {
      auto buffer = eigenformer::Tensor<T, 2>::empty(eigenformer::Shape<2>{shape[1], shape[0]});
      f.read_into(name, buffer.t());
      if (!same(buffer.t().to_vector(), t.to_vector())) std::abort();
    }
    if (t.numel() > 0) {
      const eigenformer::index_t n = std::min<eigenformer::index_t>(t.numel(), 3);
      std::array<T, 3> tail{};  // not std::vector: vector<bool> has no data()
      f.read_elements(name, t.numel() - n, std::span<T>(tail.data(), static_cast<std::size_t>(n)));
      for (eigenformer::index_t i = 0; i < n; ++i)
        if (!same(std::vector<T>{tail[static_cast<std::size_t>(i)]}, std::vector<T>{t(t.numel() - n + i)})) std::abort();
    }
  } catch (const io::checkpoint_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::vector<unsigned char> file;
  if (data[0] % 2 == 0) {
    file.assign(data + 1, data + size);
  } else {
    const std::size_t rest = size - 2;
    const std::size_t n = rest * data[1] / 255;
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<unsigned char>((static_cast<std::uint64_t>(n) >> (8 * i)) & 0xff));
    file.insert(file.end(), data + 2, data + size);
  }
  std::optional<io::SafeTensorsFile> f;
  try {
    f.emplace(io::SafeTensorsFile::from_bytes(file, "fuzz.safetensors"));
  } catch (const io::checkpoint_error&) {
    return 0;
  }
  io::TensorDict floats;
  for (const auto& name : f->names()) {
    convert<float>(*f, name);
    convert<double>(*f, name);
    convert<std::int64_t>(*f, name);
    convert<bool>(*f, name);
    if (f->info(name).dtype == io::Dtype::F32) floats.emplace(name, f->get_flat<float>(name));
  }
  if (!floats.empty()) {
    // Round trip through a real file (the writer only writes files).
    static const std::string path =
        (std::filesystem::temp_directory_path() / ("fuzz_safetensors_" + std::to_string(::getpid()) + ".safetensors")).string();
    try {
      io::save_safetensors(path, floats);
    } catch (const io::checkpoint_error&) {
      return 0;  // names came from valid JSON, so only the file system can fail here (a full disk)
    }
    const auto back = io::SafeTensorsFile::from_file(path);
    std::filesystem::remove(path);
    for (const auto& [name, t] : floats) {
      const auto a = t.flat<float>(), b = back.get_flat<float>(name);
      if (a.numel() != b.numel() || std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.numel())) != 0)
        std::abort();
    }
  }
  return 0;
}
