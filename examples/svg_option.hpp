// The command line shared by the walk-through examples whose only option is --svg FILE (attention, encoder,
// tour): parsing it, and writing the picture at the end with the examples' exit statuses.
#pragma once

#include <exception>
#include <iostream>
#include <optional>
#include <string>

namespace examples {

// What `program [--svg FILE]` asked for: the file to draw into (none without --svg), or the status to exit
// with at once: 0 after --help (the usage printed), 2 after a usage error (a line naming it, then the usage,
// on standard error).
struct SvgOption {
  std::optional<std::string> file;
  std::optional<int> exit_status;
};

inline SvgOption parse_svg_option(int argc, char** argv, const std::string& program) {
  const std::string usage = "usage: " + program + " [--svg FILE]";
  SvgOption o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage << "\n";
      o.exit_status = 0;
      return o;
    }
    if (a == "--svg" && i + 1 < argc) o.file = argv[++i];
    else {
      std::cerr << program << ": " << (a == "--svg" ? "--svg needs a value" : "unknown argument " + a) << "\n" << usage << "\n";
      o.exit_status = 2;
      return o;
    }
  }
  return o;
}

// Runs `save` (which finishes the picture and writes `file`) and returns the exit status: 1 with the error
// as one line on standard error if it throws, else 0 with "program: wrote FILE" there.
template <class Save>
int save_svg(const std::string& program, const std::string& file, Save&& save) {
  try {
    save();
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
  std::cerr << program << ": wrote " << file << "\n";
  return 0;
}

}  // namespace examples
