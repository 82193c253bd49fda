# Shared by the examples' smoke scripts (cmake -P): checking the script's inputs and running the program
# under test.

# require_variables(<script> VAR...): stops the script, naming it and the variable, at the first VAR that
# is unset or empty (the ctest that runs the script passes each one with -D).
function(require_variables _script)
  foreach(_var IN LISTS ARGN)
    if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
      message(FATAL_ERROR "${_script}: ${_var} is not set")
    endif()
  endforeach()
endfunction()

# run(<name> <expected exit code> ARGS...): runs ${SMOKE_PROGRAM} with ARGS and sets ${name}_out and
# ${name}_err in the caller; any other exit code stops the script with the command line and both outputs.
function(run _name _expect_rc)
  execute_process(COMMAND "${SMOKE_PROGRAM}" ${ARGN} OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL _expect_rc)
    cmake_path(GET SMOKE_PROGRAM STEM _program)
    message(FATAL_ERROR "${_program} ${ARGN}: exit code ${_rc}, expected ${_expect_rc}\n${_out}\n${_err}")
  endif()
  set(${_name}_out "${_out}" PARENT_SCOPE)
  set(${_name}_err "${_err}" PARENT_SCOPE)
endfunction()
