# ctest "gpt2_cli": the gpt2 command line on tests/data/gpt2_tiny_hf. The expected --show-top table is
# PyTorch's (tests/data/gpt2_tiny_hf_reference.json, case "next_token": ids 192, 20, 33 with probabilities
# 0.3907277, 0.0267948, 0.0200615 after "the cat"); the probabilities are printed with 6 decimals and
# checked to 4, which float rounding cannot move.
#
#   cmake -DGPT2=<exe> -DMODEL_DIR=<tests/data/gpt2_tiny_hf> -P gpt2_smoke.cmake
cmake_minimum_required(VERSION 3.25)

foreach(_var GPT2 MODEL_DIR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "gpt2_smoke: ${_var} is not set")
  endif()
endforeach()

# run(<name> <expected exit code> ARGS...) -> ${name}_out, ${name}_err
function(run _name _expect_rc)
  execute_process(COMMAND "${GPT2}" ${ARGN} OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL _expect_rc)
    message(FATAL_ERROR "gpt2 ${ARGN}: exit code ${_rc}, expected ${_expect_rc}\n${_out}\n${_err}")
  endif()
  set(${_name}_out "${_out}" PARENT_SCOPE)
  set(${_name}_err "${_err}" PARENT_SCOPE)
endfunction()

# id<TAB>probability<TAB>token, most probable first. Token 192 is byte 0x04, spelled U+0104 in vocab.json.
run(top 0 --model "${MODEL_DIR}" --prompt "the cat" --show-top 3)
set(_expected "^192\t0\\.3907[0-9][0-9]\tĄ\n20\t0\\.0267[0-9][0-9]\t5\n33\t0\\.0200[0-9][0-9]\tB\n$")
if(NOT top_out MATCHES "${_expected}")
  message(FATAL_ERROR "gpt2 --show-top 3: unexpected output:\n${top_out}")
endif()

# Greedy generation continues the prompt (the tiny model's argmax is token 192, byte 0x04, every time), on
# one thread as on the default count, and reports its speed on stderr: 2 prompt tokens, 3 new tokens from 2
# passes through the cache (the last token needs none).
string(ASCII 4 _eot)
foreach(_threads IN ITEMS 0 1)
  if(_threads EQUAL 0)
    run(greedy 0 --model "${MODEL_DIR}" --prompt "the cat" --greedy --max-new-tokens 3)
  else()
    run(greedy 0 --model "${MODEL_DIR}" --prompt "the cat" --greedy --max-new-tokens 3 --threads ${_threads})
  endif()
  if(NOT greedy_out STREQUAL "the cat${_eot}${_eot}${_eot}\n")
    message(FATAL_ERROR "gpt2 --greedy (--threads ${_threads}): unexpected output:\n${greedy_out}")
  endif()
  if(NOT greedy_err MATCHES "^gpt2: prompt 2 tokens in [0-9.]+ ms \\([0-9.]+ tokens/s\\); generated 3 tokens, 2 passes in [0-9.]+ ms \\([0-9.]+ tokens/s\\); [0-9]+ threads?\n$")
    message(FATAL_ERROR "gpt2 --greedy (--threads ${_threads}): unexpected timing line:\n${greedy_err}")
  endif()
endforeach()
if(NOT greedy_err MATCHES "; 1 thread\n")
  message(FATAL_ERROR "gpt2 --threads 1: the timing line does not say 1 thread:\n${greedy_err}")
endif()
run(threads0 2 --model "${MODEL_DIR}" --threads 0)

# Sampling with a seed runs and starts with the prompt; more tokens than positions are capped with a note.
run(sample 0 --model "${MODEL_DIR}" --prompt "the cat" --seed 3 --max-new-tokens 40 --top-k 20 --top-p 0.9)
if(NOT sample_out MATCHES "^the cat" OR NOT sample_err MATCHES "lowered to 15")
  message(FATAL_ERROR "gpt2 sampling: unexpected output:\n${sample_out}\n${sample_err}")
endif()

# No --model: an explanation of what is needed, exit code 2.
run(none 2 --prompt "hello")
if(NOT none_err MATCHES "Hugging Face GPT-2 model directory")
  message(FATAL_ERROR "gpt2 without --model: unexpected message:\n${none_err}")
endif()
run(bad 2 --model "${MODEL_DIR}" --top-k many)
run(missing 1 --model "${MODEL_DIR}/nowhere")
if(NOT missing_err MATCHES "nowhere: no such directory")
  message(FATAL_ERROR "gpt2 --model nowhere: unexpected message:\n${missing_err}")
endif()
message(STATUS "gpt2_smoke: all checks passed")
