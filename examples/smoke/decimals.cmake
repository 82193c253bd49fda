# Decimal numbers as integers, for smoke scripts that compare printed floats with a reference within a
# tolerance (CMake has no floating point).

# decimal_units(<value> <units> <decimals>): a decimal number as an integer count of its last decimal
# ("-0.0739" -> -739) and its number of decimals (4).
function(decimal_units _value _units _decimals)
  string(REGEX MATCH "^(-?)([0-9]+)\\.([0-9]+)$" _ "${_value}")
  string(LENGTH "${CMAKE_MATCH_3}" _n)
  string(REGEX REPLACE "^0+" "" _digits "${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
  if(_digits STREQUAL "")
    set(_digits 0)
  endif()
  set(${_units} "${CMAKE_MATCH_1}${_digits}" PARENT_SCOPE)
  set(${_decimals} ${_n} PARENT_SCOPE)
endfunction()

# units_of(<value> <decimals> <out>): a decimal number (a JSON number too: "-0.87261397", "1e-05" is not
# accepted) as an integer count of 10^-decimals, the digits past them dropped ("-0.87261397", 7 -> -8726139).
function(units_of _value _decimals _out)
  if(NOT _value MATCHES "^-?[0-9]+(\\.[0-9]+)?$")
    message(FATAL_ERROR "units_of: \"${_value}\" is not a plain decimal number")
  endif()
  if(NOT _value MATCHES "\\.")
    set(_value "${_value}.0")
  endif()
  string(REGEX MATCH "^(-?)([0-9]+)\\.([0-9]+)$" _ "${_value}")
  set(_sign "${CMAKE_MATCH_1}")
  set(_int "${CMAKE_MATCH_2}")
  set(_frac "${CMAKE_MATCH_3}0000000000000000")
  string(SUBSTRING "${_frac}" 0 ${_decimals} _frac)
  string(REGEX REPLACE "^0+" "" _digits "${_int}${_frac}")
  if(_digits STREQUAL "")
    set(_digits 0)
  endif()
  set(${_out} "${_sign}${_digits}" PARENT_SCOPE)
endfunction()

# values_close(<what> <got> <want> <decimals> <units>): the lists <got> and <want> (the values themselves)
# hold as many decimal numbers, more than none, and each printed value is within <units> of 10^-<decimals> of
# its reference; otherwise a fatal error naming <what>, the value and its position.
function(values_close _what _got _want _decimals _units)
  list(LENGTH _got _ngot)
  list(LENGTH _want _nwant)
  if(_nwant EQUAL 0 OR NOT _ngot EQUAL _nwant)
    message(FATAL_ERROR "${_what}: ${_ngot} values printed, the reference has ${_nwant}")
  endif()
  set(_k 0)
  foreach(_g _w IN ZIP_LISTS _got _want)
    units_of("${_g}" ${_decimals} _gu)
    units_of("${_w}" ${_decimals} _wu)
    math(EXPR _diff "${_gu} - ${_wu}")
    if(_diff GREATER ${_units} OR _diff LESS -${_units})
      message(FATAL_ERROR "${_what}: value ${_k} is ${_g} where PyTorch has ${_w}")
    endif()
    math(EXPR _k "${_k} + 1")
  endforeach()
endfunction()
