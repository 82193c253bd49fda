# Findutf8proc: finds the utf8proc C library, which ships no CMake package on Debian (libutf8proc-dev has
# the header, the library and a pkg-config file whose version field is stale: 2.6.0 in the 2.8.0 package,
# so the version is read from utf8proc.h instead).
#
# Result: the IMPORTED target utf8proc::utf8proc, utf8proc_FOUND, utf8proc_VERSION, utf8proc_INCLUDE_DIR,
# utf8proc_LIBRARY. pkg-config, when present, only supplies search hints. A utf8proc::utf8proc target that
# already exists (a parent project's, or a CMake package of a newer utf8proc) is used as it is.
#
# Installed beside eigenformerConfig.cmake, which uses it to resolve eigenformer::tokenizers' dependency.

if(TARGET utf8proc::utf8proc)
  set(utf8proc_FOUND TRUE)
  return()
endif()

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_utf8proc QUIET libutf8proc)
endif()

find_path(utf8proc_INCLUDE_DIR NAMES utf8proc.h HINTS ${PC_utf8proc_INCLUDE_DIRS})
find_library(utf8proc_LIBRARY NAMES utf8proc utf8proc_static HINTS ${PC_utf8proc_LIBRARY_DIRS})
mark_as_advanced(utf8proc_INCLUDE_DIR utf8proc_LIBRARY)

if(utf8proc_INCLUDE_DIR AND EXISTS "${utf8proc_INCLUDE_DIR}/utf8proc.h")
  file(STRINGS "${utf8proc_INCLUDE_DIR}/utf8proc.h" _utf8proc_version_lines
       REGEX "^#define UTF8PROC_VERSION_(MAJOR|MINOR|PATCH) [0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*UTF8PROC_VERSION_${_part} ([0-9]+).*" "\\1" _utf8proc_${_part}
                         "${_utf8proc_version_lines}")
  endforeach()
  set(utf8proc_VERSION "${_utf8proc_MAJOR}.${_utf8proc_MINOR}.${_utf8proc_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(
  utf8proc
  REQUIRED_VARS utf8proc_LIBRARY utf8proc_INCLUDE_DIR
  VERSION_VAR utf8proc_VERSION)

if(utf8proc_FOUND AND NOT TARGET utf8proc::utf8proc)
  add_library(utf8proc::utf8proc UNKNOWN IMPORTED)
  set_target_properties(utf8proc::utf8proc PROPERTIES IMPORTED_LOCATION "${utf8proc_LIBRARY}"
                                                      INTERFACE_INCLUDE_DIRECTORIES "${utf8proc_INCLUDE_DIR}")
  # A static archive needs UTF8PROC_STATIC on Windows (no dllimport); harmless elsewhere.
  if(utf8proc_LIBRARY MATCHES "\\${CMAKE_STATIC_LIBRARY_SUFFIX}$")
    set_target_properties(utf8proc::utf8proc PROPERTIES INTERFACE_COMPILE_DEFINITIONS UTF8PROC_STATIC)
  endif()
endif()
