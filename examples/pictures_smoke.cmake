# ctests "encoder_example" and "tour_svg": a walk-through example run once with --svg FILE. It must print its
# walk-through, say on stderr that it wrote the file, and write one whole SVG document with CELLS heatmap cells
# of which LABELS rows are labelled LABEL (a token of its sentence); --svg without a file is a usage error
# (exit 2), and with UNWRITABLE an unwritable file fails with one line on stderr (exit 1; that runs the
# example a second time, so only for a quick one).
#
#   cmake -DEXE=<exe> -DWORK_DIR=<scratch dir> -DCELLS=<n> -DLABEL=<token> -DLABELS=<n> [-DUNWRITABLE=ON]
#         -P pictures_smoke.cmake
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/smoke/run_program.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/smoke/svg.cmake")

require_variables(pictures_smoke EXE WORK_DIR CELLS LABEL LABELS)
set(SMOKE_PROGRAM "${EXE}")
cmake_path(GET EXE STEM _name)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(_file "${WORK_DIR}/${_name}.svg")
run(draw 0 --svg "${_file}")
if(draw_out STREQUAL "" OR NOT draw_err STREQUAL "${_name}: wrote ${_file}\n")
  message(FATAL_ERROR "${_name} --svg: expected the walk-through on stdout and \"wrote\" on stderr, got:\n"
                      "${draw_out}\n--- stderr:\n${draw_err}")
endif()
read_svg("${_name} --svg" "${_file}" ${CELLS} _svg)
count_matches(_n "class=\"row-label\"[^>]*>${LABEL}</text>" "${_svg}")
if(NOT _n EQUAL LABELS)
  message(FATAL_ERROR "${_name} --svg: ${_n} rows labelled \"${LABEL}\", expected ${LABELS}")
endif()

run(no_value 2 --svg)
if(NOT no_value_err MATCHES "^${_name}: --svg needs a value\n")
  message(FATAL_ERROR "${_name} --svg without a file: unexpected message:\n${no_value_err}")
endif()
if(UNWRITABLE)
  run(unwritable 1 --svg "${WORK_DIR}/nowhere/a.svg")
  if(NOT unwritable_err MATCHES "^${_name}: [^\n]*nowhere/a\\.svg: cannot create a temporary file[^\n]*\n$")
    message(FATAL_ERROR "${_name} --svg into a missing directory: expected one line on stderr, got:\n${unwritable_err}")
  endif()
endif()
message(STATUS "pictures_smoke: ${_name}: all checks passed")
