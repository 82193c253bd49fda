// Writing a file so that readers see either the old contents or the complete new ones, never a torn
// mixture: the bytes go to a temporary file in the target's directory, which is flushed to disk and then
// renamed over the target. A rename within one directory (one file system) replaces the target atomically
// on POSIX, so a crash, a full disk or an exception half-way leaves the user's old file as it was; on any
// failure the temporary file is removed.
#pragma once

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <utility>

#if defined(__has_include)
#if __has_include(<unistd.h>)
#include <unistd.h>
#define EIGENFORMER_IO_HAVE_FSYNC 1
#endif
#endif

#include "eigenformer/io/error.hpp"

namespace eigenformer::io::detail {

inline std::string errno_text(int err) { return std::generic_category().message(err); }

// Streams bytes into the temporary file; errors are remembered and reported once, by commit().
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
    const auto dir = target_.has_parent_path() ? target_.parent_path() : std::filesystem::path(".");
    // A random suffix and exclusive creation ("x") keep concurrent writers of the same target apart.
    std::random_device rd;
    for (int attempt = 0; attempt < 16 && !file_; ++attempt) {
      char suffix[24];
      std::snprintf(suffix, sizeof suffix, ".tmp-%08x", static_cast<unsigned>(rd()));
      // Appended piece by piece: "." + std::string sends GCC 12 at -O3 into a false -Wrestrict warning.
      std::string name = ".";
      name += target_.filename().string();
      name += suffix;
      temp_ = dir / name;
      errno = 0;
      file_ = std::fopen(temp_.string().c_str(), "wbx");
      if (!file_ && errno != EEXIST) break;
    }
    if (!file_)
      throw checkpoint_error(target_.string() + ": cannot create a temporary file in " + dir.string() + ": " +
                             errno_text(errno));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Not committed (an exception on the way): the temporary file goes, the target is untouched.
  ~AtomicFile() { discard(); }

  void write(const void* data, std::size_t n) {
    if (n == 0 || failed_) return;
    errno = 0;
    if (std::fwrite(data, 1, n, file_) != n) fail(errno);
  }

  // Flushes, closes and renames over the target; throws (after removing the temporary file) on failure.
  void commit() {
    if (!failed_ && std::fflush(file_) != 0) fail(errno);
#ifdef EIGENFORMER_IO_HAVE_FSYNC
    // Without fsync the rename could reach the disk before the data, and a power cut would leave an empty
    // or partial file under the target's name.
    if (!failed_ && ::fsync(::fileno(file_)) != 0) fail(errno);
#endif
    const int close_result = std::fclose(file_);
    file_ = nullptr;
    if (!failed_ && close_result != 0) fail(errno);
    if (failed_) {
      const int err = error_;
      discard();
      throw checkpoint_error(target_.string() + ": writing failed: " + errno_text(err) +
                             " (the existing file, if any, is unchanged)");
    }
    std::error_code ec;
    // Replacing a file keeps its permissions (a checkpoint made private stays private); best effort.
    const auto existing = std::filesystem::status(target_, ec);
    if (!ec && std::filesystem::is_regular_file(existing))
      std::filesystem::permissions(temp_, existing.permissions(), std::filesystem::perm_options::replace, ec);
    ec.clear();
    std::filesystem::rename(temp_, target_, ec);
    if (ec) {
      discard();
      throw checkpoint_error(target_.string() + ": cannot replace the file: " + ec.message() +
                             " (the existing file, if any, is unchanged)");
    }
    committed_ = true;
  }

  const std::filesystem::path& temp_path() const noexcept { return temp_; }

 private:
  void fail(int err) {
    failed_ = true;
    error_ = err != 0 ? err : EIO;  // a short write need not set errno
  }
  void discard() noexcept {
    if (file_) {
      std::fclose(file_);
      file_ = nullptr;
    }
    if (!committed_ && !temp_.empty()) {
      std::error_code ec;
      std::filesystem::remove(temp_, ec);
      temp_.clear();
    }
  }

  std::filesystem::path target_, temp_;
  std::FILE* file_ = nullptr;
  bool failed_ = false, committed_ = false;
  int error_ = 0;
};

}  // namespace eigenformer::io::detail
