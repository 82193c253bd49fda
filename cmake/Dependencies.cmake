# Dependencies of eigenformer.
#
# Every dependency is looked up with find_package() first (Debian: libeigen3-dev, doctest-dev,
# libbenchmark-dev, nlohmann-json3-dev). Only when that fails, and EIGENFORMER_FETCH_MISSING_DEPS is ON, a
# pinned release tarball is downloaded with FetchContent and checked against its SHA256.
#
#   Eigen3         always        (the library links Eigen3::Eigen)
#   nlohmann_json  always        (the library links nlohmann_json::nlohmann_json: safetensors headers in
#                                eigenformer/io; the tests also read their JSON fixtures with it)
#   utf8proc       tokenizers    utf8proc::utf8proc (cmake/Findutf8proc.cmake: Debian ships no CMake package)
#   doctest        tests         doctest::doctest
#   benchmark      benchmarks    benchmark::benchmark, benchmark::benchmark_main
#
# Eigen, doctest and nlohmann_json are header-only: their archives are only unpacked (SOURCE_SUBDIR
# points at a directory without CMakeLists.txt, so FetchContent_MakeAvailable() does not run their
# CMake projects, their tests or their install rules) and we define the imported targets ourselves.

include(FetchContent)

# Tarball timestamps = extraction time, so a changed URL always rebuilds (CMP0135 NEW behaviour).
set(EIGENFORMER_FETCH_COMMON_ARGS DOWNLOAD_EXTRACT_TIMESTAMP TRUE)

macro(eigenformer_require_fetch _name)
  if(NOT EIGENFORMER_FETCH_MISSING_DEPS)
    message(FATAL_ERROR
      "eigenformer: ${_name} was not found by find_package() and EIGENFORMER_FETCH_MISSING_DEPS is OFF. "
      "Install it (Debian: see README.md) or point CMAKE_PREFIX_PATH / ${_name}_DIR at it.")
  endif()
  message(STATUS "eigenformer: ${_name} not found, fetching the pinned release")
endmacro()

# Header-only archive -> INTERFACE IMPORTED GLOBAL target `_target` whose include directory is the
# unpacked source tree, or its subdirectory given as optional third argument.
function(eigenformer_header_only_target _target _fc_name)
  FetchContent_GetProperties(${_fc_name} SOURCE_DIR _include_dir)
  if(ARGC GREATER 2)
    string(APPEND _include_dir "/${ARGV2}")
  endif()
  add_library(${_target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_include_dir}")
endfunction()

# --- Eigen 3.4 -------------------------------------------------------------------------------------
# A parent project may already provide Eigen3::Eigen (its own find_package or FetchContent).
set(EIGENFORMER_EIGEN_FETCHED OFF)
if(NOT TARGET Eigen3::Eigen)
  find_package(Eigen3 3.4 NO_MODULE QUIET)
endif()
if(NOT TARGET Eigen3::Eigen)
  eigenformer_require_fetch(Eigen3)
  # SHA256 of https://gitlab.com/libeigen/eigen/-/archive/3.4.0/eigen-3.4.0.tar.gz confirmed from public
  # build files that pin the same URL (Bazel http_archive rules and CMake FetchContent_Declare calls on
  # GitHub, e.g. the "third_party/eigen" rules of several projects). conan-center-index
  # recipes/eigen/all/conandata.yml pins the .tar.bz2 of the same tag instead:
  # b4c198460eba6f28d34894e3a5710998818515104d6e74e5cc331ce31e46e626.
  FetchContent_Declare(
    eigenformer_eigen
    URL https://gitlab.com/libeigen/eigen/-/archive/3.4.0/eigen-3.4.0.tar.gz
    URL_HASH SHA256=8586084f71f9bde545ee7fa6d00288b264a2b7ac3607b974e54d13e7162c1c72
    SOURCE_SUBDIR do-not-configure-eigen
    ${EIGENFORMER_FETCH_COMMON_ARGS})
  FetchContent_MakeAvailable(eigenformer_eigen)
  eigenformer_header_only_target(Eigen3::Eigen eigenformer_eigen)
  set(EIGENFORMER_EIGEN_FETCHED ON)
endif()

# --- nlohmann/json (the library: eigenformer/io reads and writes safetensors headers) --------------
# A parent project may already provide nlohmann_json::nlohmann_json. When it is fetched, an installed
# eigenformer still needs an installed nlohmann_json (its config calls find_dependency), as with Eigen.
set(EIGENFORMER_NLOHMANN_JSON_FETCHED OFF)
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_package(nlohmann_json 3 CONFIG QUIET)
endif()
if(NOT TARGET nlohmann_json::nlohmann_json)
  eigenformer_require_fetch(nlohmann_json)
  # SHA256 confirmed in conan-center-index recipes/nlohmann_json/all/conandata.yml (version "3.11.2").
  FetchContent_Declare(
    eigenformer_nlohmann_json
    URL https://github.com/nlohmann/json/archive/v3.11.2.tar.gz
    URL_HASH SHA256=d69f9deb6a75e2580465c6c4c5111b89c4dc2fa94e3a85fcd2ffcd9a143d9273
    SOURCE_SUBDIR do-not-configure-nlohmann-json
    ${EIGENFORMER_FETCH_COMMON_ARGS})
  FetchContent_MakeAvailable(eigenformer_nlohmann_json)
  # The amalgamated <nlohmann/json.hpp>.
  eigenformer_header_only_target(nlohmann_json::nlohmann_json eigenformer_nlohmann_json single_include)
  set(EIGENFORMER_NLOHMANN_JSON_FETCHED ON)
endif()

# --- utf8proc (eigenformer::tokenizers) ------------------------------------------------------------
# Unicode categories, case mappings and NFD for the tokenizers. Found by cmake/Findutf8proc.cmake
# (header + library + pkg-config hints); the fallback compiles the pinned release's single C source into
# a static library that is installed and exported with eigenformer::tokenizers (as eigenformer::utf8proc).
set(EIGENFORMER_UTF8PROC_FETCHED OFF)
if(EIGENFORMER_BUILD_TOKENIZERS)
  if(NOT TARGET utf8proc::utf8proc)
    find_package(utf8proc MODULE QUIET)
  endif()
  if(NOT TARGET utf8proc::utf8proc)
    eigenformer_require_fetch(utf8proc)
    # SHA256 of the v2.8.0 GitHub archive confirmed in public build recipes that pin the same URL
    # (Homebrew's Formula/utf8proc.rb, Spack's utf8proc/package.py, xmake-repo's packages/u/utf8proc) and
    # equal to Debian's utf8proc_2.8.0.orig.tar.gz. 2.8.0 is Debian 12's version (Unicode 15.0), so both
    # paths give the same character data.
    FetchContent_Declare(
      eigenformer_utf8proc
      URL https://github.com/JuliaStrings/utf8proc/archive/v2.8.0.tar.gz
      URL_HASH SHA256=a0a60a79fe6f6d54e7d411facbfcc867a6e198608f2cd992490e46f04b1bcecc
      SOURCE_SUBDIR do-not-configure-utf8proc
      ${EIGENFORMER_FETCH_COMMON_ARGS})
    FetchContent_MakeAvailable(eigenformer_utf8proc)
    FetchContent_GetProperties(eigenformer_utf8proc SOURCE_DIR _utf8proc_dir)
    enable_language(C)
    # utf8proc.c #includes utf8proc_data.c: one translation unit.
    add_library(eigenformer_utf8proc STATIC "${_utf8proc_dir}/utf8proc.c")
    target_include_directories(eigenformer_utf8proc PUBLIC $<BUILD_INTERFACE:${_utf8proc_dir}>
                                                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_compile_definitions(eigenformer_utf8proc PUBLIC UTF8PROC_STATIC)
    set_target_properties(eigenformer_utf8proc PROPERTIES EXPORT_NAME utf8proc POSITION_INDEPENDENT_CODE ON)
    add_library(utf8proc::utf8proc ALIAS eigenformer_utf8proc)
    set(EIGENFORMER_UTF8PROC_HEADER "${_utf8proc_dir}/utf8proc.h")
    set(EIGENFORMER_UTF8PROC_FETCHED ON)
  endif()
endif()

# --- doctest (tests only) --------------------------------------------------------------------------
if(EIGENFORMER_BUILD_TESTS)
  if(NOT TARGET doctest::doctest)
    find_package(doctest CONFIG QUIET)
  endif()
  if(NOT TARGET doctest::doctest)
    eigenformer_require_fetch(doctest)
    # SHA256 confirmed in conan-center-index recipes/doctest/2.x.x/conandata.yml (version "2.4.9").
    FetchContent_Declare(
      eigenformer_doctest
      URL https://github.com/doctest/doctest/archive/v2.4.9.tar.gz
      URL_HASH SHA256=19b2df757f2f3703a5e63cee553d85596875f06d91a3333acd80a969ef210856
      SOURCE_SUBDIR do-not-configure-doctest
      ${EIGENFORMER_FETCH_COMMON_ARGS})
    FetchContent_MakeAvailable(eigenformer_doctest)
    # <doctest/doctest.h> lives at the root of the archive.
    eigenformer_header_only_target(doctest::doctest eigenformer_doctest)
  endif()
endif()

# --- Google Benchmark (benchmarks only) ------------------------------------------------------------
if(EIGENFORMER_BUILD_BENCHMARKS)
  if(NOT TARGET benchmark::benchmark_main)
    find_package(benchmark CONFIG QUIET)
  endif()
  if(NOT TARGET benchmark::benchmark_main)
    eigenformer_require_fetch(benchmark)
    # A compiled library, so its CMake project does run: only the library, no tests/gtest/docs/install,
    # no -Werror. Plain variables override its option()s (its policies are >= 3.13, CMP0077 NEW).
    set(BENCHMARK_ENABLE_TESTING OFF)
    set(BENCHMARK_ENABLE_GTEST_TESTS OFF)
    set(BENCHMARK_ENABLE_ASSEMBLY_TESTS OFF)
    set(BENCHMARK_ENABLE_INSTALL OFF)
    set(BENCHMARK_INSTALL_DOCS OFF)
    set(BENCHMARK_ENABLE_WERROR OFF)
    set(BENCHMARK_ENABLE_LIBPFM OFF)
    # SHA256 confirmed in conan-center-index recipes/benchmark/all/conandata.yml (version "1.8.2").
    FetchContent_Declare(
      eigenformer_benchmark
      URL https://github.com/google/benchmark/archive/refs/tags/v1.8.2.tar.gz
      URL_HASH SHA256=2aab2980d0376137f969d92848fbb68216abb07633034534fc8c65cc4e7a0e93
      ${EIGENFORMER_FETCH_COMMON_ARGS})
    FetchContent_MakeAvailable(eigenformer_benchmark)
  endif()
endif()
