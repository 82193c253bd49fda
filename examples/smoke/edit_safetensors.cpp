// edit_safetensors: a copy of a safetensors file with one tensor renamed or dropped, to make the broken
// checkpoints of the bert command-line test (examples/bert_smoke.cmake) from the committed fixtures. Works on
// the bytes (header JSON rewritten, each tensor's bytes copied unchanged), so every dtype passes through.
//
//   edit_safetensors IN OUT NAME [NEW_NAME]     (no NEW_NAME: the tensor is dropped)
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: edit_safetensors IN OUT NAME [NEW_NAME]\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) throw std::runtime_error(std::string(argv[1]) + ": cannot open");
    const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() < 8) throw std::runtime_error(std::string(argv[1]) + ": too short");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
    if (n > bytes.size() - 8) throw std::runtime_error(std::string(argv[1]) + ": bad header length");
    const auto header = nlohmann::ordered_json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    const std::size_t base = 8 + n;
    const std::string name = argv[3];
    if (!header.contains(name)) throw std::runtime_error(std::string(argv[1]) + ": no tensor \"" + name + "\"");
    nlohmann::ordered_json out_header = nlohmann::ordered_json::object();
    std::vector<unsigned char> data;
    for (const auto& [key, info] : header.items()) {
      if (key == "__metadata__") {
        out_header[key] = info;
        continue;
      }
      if (key == name && argc == 4) continue;
      const auto begin = info.at("data_offsets").at(0).get<std::size_t>(), end = info.at("data_offsets").at(1).get<std::size_t>();
      auto entry = info;
      entry["data_offsets"] = {data.size(), data.size() + (end - begin)};
      data.insert(data.end(), bytes.begin() + static_cast<std::ptrdiff_t>(base + begin),
                  bytes.begin() + static_cast<std::ptrdiff_t>(base + end));
      out_header[key == name ? std::string(argv[4]) : key] = entry;
    }
    std::string text = out_header.dump();
    while (text.size() % 8) text += ' ';
    std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!out.flush()) throw std::runtime_error(std::string(argv[2]) + ": write error");
  } catch (const std::exception& e) {
    std::cerr << "edit_safetensors: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
