# ctest "consumer": install eigenformer into a fresh prefix, configure + build tests/consumer against it
# with CMAKE_PREFIX_PATH, run the result. Every step must succeed.
#
#   cmake -DEIGENFORMER_BINARY_DIR=... -DCONSUMER_SOURCE_DIR=... -DCONSUMER_BINARY_DIR=...
#         -DCONSUMER_PREFIX=... -DCONSUMER_GENERATOR=... -DCONSUMER_CXX_COMPILER=...
#         [-DCONSUMER_BUILD_TYPE=...] [-DCONSUMER_EIGEN3_DIR=...] [-DCONSUMER_NLOHMANN_JSON_DIR=...]
#         [-DCONSUMER_LAUNCHER=a|b|c]
#         -P run.cmake
cmake_minimum_required(VERSION 3.25)

foreach(_var EIGENFORMER_BINARY_DIR CONSUMER_SOURCE_DIR CONSUMER_BINARY_DIR CONSUMER_PREFIX
             CONSUMER_GENERATOR CONSUMER_CXX_COMPILER)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: ${_var} is not set")
  endif()
endforeach()

function(run_step _what)
  list(JOIN ARGN " " _pretty)
  message(STATUS "consumer: ${_what}: ${_pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "consumer: ${_what} failed (${_rc})")
  endif()
endfunction()

set(_config_args)
if(CONSUMER_BUILD_TYPE)
  set(_config_args --config "${CONSUMER_BUILD_TYPE}")
endif()

# (a) install into a clean prefix, so nothing stale from an earlier run can satisfy find_package.
file(REMOVE_RECURSE "${CONSUMER_PREFIX}" "${CONSUMER_BINARY_DIR}")
run_step(install "${CMAKE_COMMAND}" --install "${EIGENFORMER_BINARY_DIR}" --prefix "${CONSUMER_PREFIX}"
         ${_config_args})

# (b) configure + build the consumer against that prefix only (no package registry).
set(_configure_args
    -S "${CONSUMER_SOURCE_DIR}" -B "${CONSUMER_BINARY_DIR}" -G "${CONSUMER_GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CONSUMER_CXX_COMPILER}"
    "-DCMAKE_PREFIX_PATH=${CONSUMER_PREFIX}"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(CONSUMER_BUILD_TYPE)
  list(APPEND _configure_args "-DCMAKE_BUILD_TYPE=${CONSUMER_BUILD_TYPE}")
endif()
if(CONSUMER_EIGEN3_DIR)
  list(APPEND _configure_args "-DEigen3_DIR=${CONSUMER_EIGEN3_DIR}")
endif()
if(CONSUMER_NLOHMANN_JSON_DIR)
  list(APPEND _configure_args "-Dnlohmann_json_DIR=${CONSUMER_NLOHMANN_JSON_DIR}")
endif()
if(CONSUMER_LAUNCHER)
  # Through the environment (read by CMake >= 3.17 on first configure): a list survives intact there.
  string(REPLACE "|" ";" _launcher "${CONSUMER_LAUNCHER}")
  set(ENV{CMAKE_CXX_COMPILER_LAUNCHER} "${_launcher}")
endif()
run_step(configure "${CMAKE_COMMAND}" ${_configure_args})
run_step(build "${CMAKE_COMMAND}" --build "${CONSUMER_BINARY_DIR}" ${_config_args})

# (c) run it. Multi-config generators put the binary in a per-config subdirectory.
find_program(_consumer_exe consumer PATHS "${CONSUMER_BINARY_DIR}" "${CONSUMER_BINARY_DIR}/${CONSUMER_BUILD_TYPE}"
             NO_DEFAULT_PATH REQUIRED)
run_step(run "${_consumer_exe}")
