# Shared by the smoke scripts that check an example's --svg picture (cmake -P). The file's structure is
# checked here; that the writer's documents parse as XML is tests/io/test_svg.cpp's job.
include("${CMAKE_CURRENT_LIST_DIR}/count_matches.cmake")

# read_svg(<what> <file> <cells> <out_var>): reads <file> into <out_var> and stops the script, naming <what>,
# unless it is one whole document (the XML declaration first, </svg> last) with <cells> heatmap cells.
function(read_svg _what _file _cells _out)
  if(NOT EXISTS "${_file}")
    message(FATAL_ERROR "${_what}: ${_file} was not written")
  endif()
  file(READ "${_file}" _svg)
  if(NOT _svg MATCHES "^<\\?xml" OR NOT _svg MATCHES "</svg>\n$")
    message(FATAL_ERROR "${_what}: ${_file} is not one whole SVG document")
  endif()
  count_matches(_n "<rect class=\"cell\"" "${_svg}")
  if(NOT _n EQUAL _cells)
    message(FATAL_ERROR "${_what}: ${_n} heatmap cells, expected ${_cells}")
  endif()
  set(${_out} "${_svg}" PARENT_SCOPE)
endfunction()
