# ctest "tokenize_cli" (registered when EIGENFORMER_DATA_DIR is set): the tokenize command line against
# expected outputs. The GPT-2 ids of the hard-case file come from tiktoken
# (tests/data/tokenizer_gpt2_cli_expected.txt, written by tools/reference/tokenizers/make_reference.mjs).
#
#   cmake -DTOKENIZE=<exe> -DDATA_DIR=<shared data> -DTEST_DATA_DIR=<tests/data> -DWORK_DIR=<dir> -P tokenize_smoke.cmake
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/smoke/count_matches.cmake")

foreach(_var TOKENIZE DATA_DIR TEST_DATA_DIR WORK_DIR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "tokenize_smoke: ${_var} is not set")
  endif()
endforeach()
file(MAKE_DIRECTORY "${WORK_DIR}")

# run(<name> <expected exit code> ARGS ... [INPUT file]) -> ${name}_out, ${name}_err
function(run _name _expect_rc)
  cmake_parse_arguments(PARSE_ARGV 2 _r "" "INPUT" "ARGS")
  set(_input)
  if(_r_INPUT)
    set(_input INPUT_FILE "${_r_INPUT}")
  endif()
  execute_process(COMMAND "${TOKENIZE}" ${_r_ARGS} ${_input} OUTPUT_VARIABLE _out ERROR_VARIABLE _err
                  RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL _expect_rc)
    message(FATAL_ERROR "tokenize ${_r_ARGS}: exit code ${_rc}, expected ${_expect_rc}\n${_err}")
  endif()
  set(${_name}_out "${_out}" PARENT_SCOPE)
  set(${_name}_err "${_err}" PARENT_SCOPE)
endfunction()

function(expect_equal _what _actual _expected)
  if(NOT _actual STREQUAL _expected)
    file(WRITE "${WORK_DIR}/${_what}.actual" "${_actual}")
    file(WRITE "${WORK_DIR}/${_what}.expected" "${_expected}")
    message(FATAL_ERROR "tokenize_smoke: ${_what} differs: diff ${WORK_DIR}/${_what}.expected ${WORK_DIR}/${_what}.actual")
  endif()
  message(STATUS "tokenize_smoke: ${_what}: ok")
endfunction()

set(_gpt2 --kind gpt2 --vocab "${DATA_DIR}/gpt2")
set(_hard "${TEST_DATA_DIR}/tokenizer_hard_cases.txt")
file(READ "${TEST_DATA_DIR}/tokenizer_gpt2_cli_expected.txt" _expected_ids)
file(READ "${_hard}" _hard_text)

# 1. Lines from standard input -> tiktoken's ids, one line each.
run(ids 0 ARGS ${_gpt2} INPUT "${_hard}")
expect_equal(gpt2_ids "${ids_out}" "${_expected_ids}")
# 2. --decode of those ids (from --file) gives the lines back.
run(text 0 ARGS ${_gpt2} --decode --file "${TEST_DATA_DIR}/tokenizer_gpt2_cli_expected.txt")
expect_equal(gpt2_decode "${text_out}" "${_hard_text}")
# 3. --tokens: GPT-2's spelling.
file(WRITE "${WORK_DIR}/hello.txt" "Hello world\nit's\n")
run(tokens 0 ARGS ${_gpt2} --tokens --file "${WORK_DIR}/hello.txt")
expect_equal(gpt2_tokens "${tokens_out}" "Hello Ġworld\nit 's\n")
# 4. BERT WordPiece: seed 004's example.
file(WRITE "${WORK_DIR}/bert.txt" "time flies like an arrow\n")
run(bert 0 ARGS --kind bert --vocab "${DATA_DIR}/bert-base-uncased" --file "${WORK_DIR}/bert.txt")
expect_equal(bert_ids "${bert_out}" "2051 10029 2066 2019 8612\n")
# 5. Errors: one line on standard error, exit code 1.
run(missing 1 ARGS --kind gpt2 --vocab "${WORK_DIR}/no-such-dir")
count_matches(_lines "\n" "${missing_err}")
if(NOT _lines EQUAL 1 OR NOT missing_err MATCHES "no-such-dir: no such directory")
  message(FATAL_ERROR "tokenize_smoke: unexpected error output for a missing vocabulary: ${missing_err}")
endif()
file(WRITE "${WORK_DIR}/bad_ids.txt" "15496 995\n15496 50257\n")
run(bad_id 1 ARGS ${_gpt2} --decode --file "${WORK_DIR}/bad_ids.txt")
if(NOT bad_id_err MATCHES "line 2: id 50257 is outside the vocabulary \\(size 50257\\)")
  message(FATAL_ERROR "tokenize_smoke: unexpected error output for an id outside the vocabulary: ${bad_id_err}")
endif()
run(usage 1 ARGS --kind gpt3 --vocab x)
message(STATUS "tokenize_smoke: errors: ok")
