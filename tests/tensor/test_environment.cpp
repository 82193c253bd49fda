// Settings from environment variables (tensor/environment.hpp): whole numbers in range are taken, anything
// else is ignored with one line on stderr naming the variable, its value and what is used instead; the same
// for EIGENFORMER_MAX_CPU_ISA's names (tensor/cpu_isa.hpp).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/cases.hpp"
#include "support/files.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace eftest;

// Sets (or unsets, with nullopt) an environment variable for one scope, then restores what was there.
class ScopedEnvironment {
 public:
  ScopedEnvironment(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) saved_ = old;
    if (value) setenv(name_.c_str(), value->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ~ScopedEnvironment() {
    if (saved_) setenv(name_.c_str(), saved_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// What f writes to file descriptor 2 while it runs (f's result through `out`).
template <class F>
std::string captured_stderr(F&& f) {
  const ScratchDir dir;
  const auto path = dir / "stderr";
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  dup2(fileno(file), 2);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(file);
  return read_bytes(path);
}

struct EnvironmentCase {
  std::optional<std::string> value;
  std::optional<long long> expected;
  bool warns;
};

// What one read of a setting printed: when it `warns`, exactly the line naming the variable, its value, what
// was expected and what is used instead ("expected ...; using ..."); otherwise nothing.
void check_stderr(const std::string& err, const std::string& name, const std::optional<std::string>& value,
                  bool warns, const std::string& expected_and_used) {
  if (warns)
    CHECK(err == "eigenformer: ignoring " + name + "=\"" + value.value_or("") + "\": " + expected_and_used + "\n");
  else
    CHECK(err.empty());
}

}  // namespace

TEST_CASE("environment: whole numbers in range are taken; anything else is ignored with one line on stderr") {
  const char* name = "EIGENFORMER_TEST_SETTING";
  const std::vector<EnvironmentCase> cases = {
      {std::nullopt, std::nullopt, false}, {"", std::nullopt, false},   {"3", 3, false},
      {"0", 0, false},                     {"16", 16, false},           {"17", std::nullopt, true},
      {"-1", std::nullopt, true},          {"2x", std::nullopt, true},  {"x", std::nullopt, true},
      {"1.5", std::nullopt, true},         {"99999999999999999999", std::nullopt, true},
  };
  std::size_t ran = 0;
  for (const auto& c : cases) {
    CAPTURE(c.value.value_or("(unset)"));
    ScopedEnvironment env(name, c.value);
    std::optional<long long> got;
    const std::string err = captured_stderr([&] { got = ef::detail::environment_integer(name, 0, 16, "seven"); });
    CHECK(got == c.expected);
    check_stderr(err, name, c.value, c.warns, "expected a whole number from 0 to 16; using seven");
    ++ran;
  }
  check_ran(ran, 11, "environment values");
}

TEST_CASE("environment: EIGENFORMER_NUM_THREADS sets the default pool size; a bad value says so and is ignored") {
  {
    ScopedEnvironment env("EIGENFORMER_NUM_THREADS", "3");
    CHECK(ef::detail::default_num_threads() == 3);
  }
  ScopedEnvironment env("EIGENFORMER_NUM_THREADS", "0");
  int threads = 0;
  const std::string err = captured_stderr([&] { threads = ef::detail::default_num_threads(); });
  CHECK(threads == ef::detail::available_cpus());
  CHECK(err ==
        "eigenformer: ignoring EIGENFORMER_NUM_THREADS=\"0\": expected a whole number from 1 to 4096; using the CPUs "
        "this process may use\n");
}

TEST_CASE("environment: EIGENFORMER_MAX_CPU_ISA caps the kernels' instruction set; another value says so") {
  using ef::backend::CpuIsa;
  struct IsaCase {
    std::optional<std::string> value;
    CpuIsa expected;
    bool warns;
  };
  const std::vector<IsaCase> cases = {
      {std::nullopt, CpuIsa::avx512, false}, {"", CpuIsa::avx512, false},        {"avx512", CpuIsa::avx512, false},
      {"avx2", CpuIsa::avx2, false},         {"baseline", CpuIsa::baseline, false}, {"AVX2", CpuIsa::avx512, true},
      {"sse2", CpuIsa::avx512, true},        {"avx2 ", CpuIsa::avx512, true},
  };
  std::size_t ran = 0;
  for (const auto& c : cases) {
    CAPTURE(c.value.value_or("(unset)"));
    ScopedEnvironment env("EIGENFORMER_MAX_CPU_ISA", c.value);
    CpuIsa got = CpuIsa::baseline;
    const std::string err = captured_stderr([&] { got = ef::backend::detail::environment_max_cpu_isa(); });
    CHECK(got == c.expected);
    check_stderr(err, "EIGENFORMER_MAX_CPU_ISA", c.value, c.warns,
                 "expected avx512, avx2 or baseline; using the widest this CPU supports");
    ++ran;
  }
  check_ran(ran, 8, "EIGENFORMER_MAX_CPU_ISA values");
}
