# ctest "gpt2_cli": the gpt2 command line on tests/data/gpt2_tiny_hf. The expected --show-top table is
# PyTorch's, read from REFERENCE (tests/data/gpt2_tiny_hf_reference.json, case "next_token", written by
# tools/reference/make_gpt2_hf_fixtures.py): the same prompt, ids and tokens, and probabilities within 1e-6
# (the CLI prints 6 decimals of a float32 probability; its float rounding is ~3e-8, so the printed value is
# the reference rounded to 6 decimals, or one unit of the last decimal off when the reference sits on a
# rounding boundary). --svg draws the prompt's causal attention, compared with PyTorch's weights (case
# "attentions").
#
#   cmake -DGPT2=<exe> -DMODEL_DIR=<tests/data/gpt2_tiny_hf> -DREFERENCE=<gpt2_tiny_hf_reference.json>
#         -DWORK_DIR=<scratch dir> -P gpt2_smoke.cmake
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/smoke/run_program.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/smoke/svg.cmake")

require_variables(gpt2_smoke GPT2 MODEL_DIR REFERENCE WORK_DIR)
set(SMOKE_PROGRAM "${GPT2}")

# A probability written 0.ddd... as an integer count of 1e-6, rounded half up (CMake has no floating point).
function(micro_units _value _out)
  if(NOT _value MATCHES "^0\\.([0-9]+)$")
    message(FATAL_ERROR "gpt2_smoke: expected a probability written as 0.ddd, got \"${_value}\"")
  endif()
  string(SUBSTRING "${CMAKE_MATCH_1}0000000" 0 7 _digits)
  string(REGEX REPLACE "^0+" "" _digits "${_digits}")
  if(_digits STREQUAL "")
    set(_digits 0)
  endif()
  math(EXPR _micro "(${_digits} + 5) / 10")
  set(${_out} ${_micro} PARENT_SCOPE)
endfunction()

# reference_case(<name> <out>): the reference's case of that name, as JSON text.
function(reference_case _name _out)
  string(JSON _cases LENGTH "${_reference}" cases)
  math(EXPR _last "${_cases} - 1")
  foreach(_i RANGE ${_last})
    string(JSON _case_name GET "${_reference}" cases ${_i} name)
    if(_case_name STREQUAL _name)
      string(JSON _case GET "${_reference}" cases ${_i})
      set(${_out} "${_case}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "gpt2_smoke: ${REFERENCE} has no case \"${_name}\"")
endfunction()

# PyTorch's next-token table: case "next_token" of the reference.
file(READ "${REFERENCE}" _reference)
reference_case(next_token _next)
string(JSON _prompt GET "${_next}" prompt)
string(JSON _count LENGTH "${_next}" top)
if(_count LESS 1)
  message(FATAL_ERROR "gpt2_smoke: the reference's next_token case lists no tokens")
endif()

# id<TAB>probability<TAB>token per line, most probable first, as many lines as the reference lists.
run(top 0 --model "${MODEL_DIR}" --prompt "${_prompt}" --show-top ${_count})
string(REGEX REPLACE "\n$" "" _lines "${top_out}")
string(REPLACE "\n" ";" _lines "${_lines}")
list(LENGTH _lines _printed)
if(NOT _printed EQUAL _count)
  message(FATAL_ERROR "gpt2 --show-top ${_count}: ${_printed} lines, expected ${_count}:\n${top_out}")
endif()
math(EXPR _last "${_count} - 1")
foreach(_i RANGE ${_last})
  list(GET _lines ${_i} _line)
  string(REPLACE "\t" ";" _fields "${_line}")
  list(LENGTH _fields _nfields)
  if(NOT _nfields EQUAL 3)
    message(FATAL_ERROR "gpt2 --show-top: line ${_i} is not id<TAB>probability<TAB>token: \"${_line}\"")
  endif()
  list(GET _fields 0 _id)
  list(GET _fields 1 _probability)
  list(GET _fields 2 _token)
  string(JSON _want_id GET "${_next}" top ${_i} id)
  string(JSON _want_probability GET "${_next}" top ${_i} probability)
  string(JSON _want_token GET "${_next}" top ${_i} token)
  micro_units("${_probability}" _got_micro)
  micro_units("${_want_probability}" _want_micro)
  math(EXPR _diff "${_got_micro} - ${_want_micro}")
  if(NOT _id STREQUAL _want_id OR NOT _token STREQUAL _want_token OR _diff GREATER 1 OR _diff LESS -1)
    message(FATAL_ERROR "gpt2 --show-top ${_count}: line ${_i} is \"${_line}\", PyTorch's is id ${_want_id}, "
                        "probability ${_want_probability}, token \"${_want_token}\":\n${top_out}")
  endif()
endforeach()

# Greedy generation continues the prompt as PyTorch's argmax does (case "greedy": its new ids and the text
# GPT2Tokenizer.decode gives), on one thread as on the default count, and reports its speed on stderr: the
# prompt's tokens, the new tokens, and one pass through the cache for each new token but the last.
reference_case(greedy _greedy)
string(JSON _greedy_prompt GET "${_greedy}" prompt)
string(JSON _greedy_text GET "${_greedy}" text)
string(JSON _greedy_new LENGTH "${_greedy}" ids)
string(JSON _greedy_prompt_tokens LENGTH "${_greedy}" prompt_ids)
string(JSON _greedy_requested GET "${_greedy}" max_new_tokens)
if(NOT _greedy_new EQUAL _greedy_requested)
  message(FATAL_ERROR "gpt2_smoke: the reference's greedy run stopped at the end-of-text token after "
                      "${_greedy_new} of ${_greedy_requested} tokens; the timing check below expects all of them")
endif()
math(EXPR _greedy_passes "${_greedy_new} - 1")
foreach(_threads IN ITEMS 0 1)
  if(_threads EQUAL 0)
    run(greedy 0 --model "${MODEL_DIR}" --prompt "${_greedy_prompt}" --greedy --max-new-tokens ${_greedy_new})
  else()
    run(greedy 0 --model "${MODEL_DIR}" --prompt "${_greedy_prompt}" --greedy --max-new-tokens ${_greedy_new}
        --threads ${_threads})
  endif()
  if(NOT greedy_out STREQUAL "${_greedy_text}\n")
    message(FATAL_ERROR "gpt2 --greedy (--threads ${_threads}): output differs from PyTorch's \"${_greedy_text}\":\n"
                        "${greedy_out}")
  endif()
  if(NOT greedy_err MATCHES "^gpt2: prompt ${_greedy_prompt_tokens} tokens in [0-9.]+ ms \\([0-9.]+ tokens/s\\); generated ${_greedy_new} tokens, ${_greedy_passes} passes in [0-9.]+ ms \\([0-9.]+ tokens/s\\); [0-9]+ threads?, fp32 weights\n$")
    message(FATAL_ERROR "gpt2 --greedy (--threads ${_threads}): unexpected timing line:\n${greedy_err}")
  endif()
endforeach()
if(NOT greedy_err MATCHES "; 1 thread, ")
  message(FATAL_ERROR "gpt2 --threads 1: the timing line does not say 1 thread:\n${greedy_err}")
endif()
run(threads0 2 --model "${MODEL_DIR}" --threads 0)

# --dtype bf16: the weights rounded to bfloat16 (their tokens may differ from PyTorch's float32 ones, so only
# the run and its timing line are checked); anything but fp32 / bf16 is a usage error naming the choices.
run(bf16 0 --model "${MODEL_DIR}" --prompt "${_greedy_prompt}" --greedy --max-new-tokens ${_greedy_new} --dtype bf16)
if(NOT bf16_out MATCHES "^${_greedy_prompt}" OR NOT bf16_err MATCHES "threads?, bf16 weights\n$")
  message(FATAL_ERROR "gpt2 --dtype bf16: unexpected output:\n${bf16_out}\n${bf16_err}")
endif()
# --pack-weights: the float32 weights held only packed give PyTorch's greedy text too (the logits move by float
# rounding only), and say so on the timing line; not with bfloat16 weights.
run(packed 0 --model "${MODEL_DIR}" --prompt "${_greedy_prompt}" --greedy --max-new-tokens ${_greedy_new} --pack-weights)
if(NOT packed_out STREQUAL "${_greedy_text}\n" OR NOT packed_err MATCHES "threads?, fp32 packed weights\n$")
  message(FATAL_ERROR "gpt2 --pack-weights: unexpected output:\n${packed_out}\n${packed_err}")
endif()
run(packed_bf16 2 --model "${MODEL_DIR}" --pack-weights --dtype bf16)
if(NOT packed_bf16_err MATCHES "^gpt2: --pack-weights packs float32 weights: not with --dtype bf16")
  message(FATAL_ERROR "gpt2 --pack-weights --dtype bf16: unexpected message:\n${packed_bf16_err}")
endif()
# --compare-bf16: after fp32's text (PyTorch's, as above), one line saying whether bfloat16 weights keep the
# greedy tokens. On this tiny random model either answer may come, so the line's form is what is checked; the
# "differs" form was checked by hand on a trained model (bench/README.md, the bfloat16 stand-in section).
run(compare 0 --model "${MODEL_DIR}" --prompt "${_greedy_prompt}" --greedy --max-new-tokens ${_greedy_new} --compare-bf16)
string(LENGTH "${_greedy_text}\n" _text_length)
string(SUBSTRING "${compare_out}" 0 ${_text_length} _compare_text)
string(SUBSTRING "${compare_out}" ${_text_length} -1 _compare_line)
if(NOT _compare_text STREQUAL "${_greedy_text}\n" OR NOT _compare_line MATCHES
   "^bf16 weights: (the same ${_greedy_new} greedy tokens as fp32|new token [0-9]+ of ${_greedy_new} differs from fp32's \\(id [0-9]+ against [0-9]+; fp32's top two logits were [0-9.]+ apart there\\)|[0-9]+ greedy tokens against fp32's [0-9]+, the same up to the shorter)\n$")
  message(FATAL_ERROR "gpt2 --compare-bf16: unexpected output:\n${compare_out}")
endif()
run(compare_sampling 2 --model "${MODEL_DIR}" --compare-bf16)
if(NOT compare_sampling_err MATCHES "^gpt2: --compare-bf16 compares greedy generations: it needs --greedy")
  message(FATAL_ERROR "gpt2 --compare-bf16 without --greedy: unexpected message:\n${compare_sampling_err}")
endif()
run(bad_dtype 2 --model "${MODEL_DIR}" --dtype fp16)
if(NOT bad_dtype_err MATCHES "^gpt2: --dtype expects fp32 or bf16, got \"fp16\"\n")
  message(FATAL_ERROR "gpt2 --dtype fp16: unexpected message:\n${bad_dtype_err}")
endif()

# Sampling with a seed runs and starts with the prompt; more tokens than positions are capped with a note.
run(sample 0 --model "${MODEL_DIR}" --prompt "the cat" --seed 3 --max-new-tokens 40 --top-k 20 --top-p 0.9)
if(NOT sample_out MATCHES "^the cat" OR NOT sample_err MATCHES "lowered to 15")
  message(FATAL_ERROR "gpt2 sampling: unexpected output:\n${sample_out}\n${sample_err}")
endif()

# --svg: every layer's and head's weights over the reference's prompt (case "attentions": "the cat sat on
# the mat", 6 tokens, the first "the" without the "Ġ" of a word after a space), tokens on both axes, the
# --show-top table unchanged. Each cell's tooltip ("query / key: weight", 2 decimals) against PyTorch's weight,
# in the same order (layer, head, query, key), within 0.006: the printing's rounding (0.005), the reference's
# digits past 1e-3 dropped here (under 0.001), float32 differences (~1e-7). A wrong layer, head or query
# order, or a missing causal mask, is off by 0.1 or more somewhere.
include("${CMAKE_CURRENT_LIST_DIR}/smoke/decimals.cmake")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
reference_case(attentions _att)
string(JSON _att_prompt GET "${_att}" prompt)
string(JSON _att_tokens LENGTH "${_att}" ids)
string(JSON _layers LENGTH "${_att}" attentions)
string(JSON _heads GET "${_att}" attentions 0 shape 1)
math(EXPR _maps "${_layers} * ${_heads}")
math(EXPR _cells "${_maps} * ${_att_tokens} * ${_att_tokens}")
run(top_mat 0 --model "${MODEL_DIR}" --prompt "${_att_prompt}" --show-top 3)
run(svg 0 --model "${MODEL_DIR}" --prompt "${_att_prompt}" --show-top 3 --svg "${WORK_DIR}/attention.svg")
if(NOT svg_out STREQUAL top_mat_out)
  message(FATAL_ERROR "gpt2 --svg changed the --show-top table:\n${svg_out}--- without --svg:\n${top_mat_out}")
endif()
read_svg("gpt2 --svg (${_layers} layers x ${_heads} heads x ${_att_tokens} x ${_att_tokens} cells)"
         "${WORK_DIR}/attention.svg" ${_cells} _svg)
count_matches(_labels "class=\"row-label\"[^>]*>Ġmat</text>" "${_svg}")
count_matches(_labels_x "class=\"col-label\"[^>]*>Ġmat</text>" "${_svg}")
if(NOT _labels EQUAL _maps OR NOT _labels_x EQUAL _maps)
  message(FATAL_ERROR "gpt2 --svg: ${_labels} row and ${_labels_x} column labels \"Ġmat\", expected ${_maps} each")
endif()
string(REGEX MATCHALL ": [0-9]+\\.[0-9][0-9]</title>" _drawn "${_svg}")
set(_want "")
math(EXPR _last_layer "${_layers} - 1")
math(EXPR _per_layer "${_cells} / ${_layers} - 1")
foreach(_l RANGE ${_last_layer})
  foreach(_i RANGE ${_per_layer})
    string(JSON _w GET "${_att}" attentions ${_l} data ${_i})
    if(_w MATCHES "[eE]-")
      set(_w 0)  # below 1e-4: 0 in the units compared
    endif()
    list(APPEND _want "${_w}")
  endforeach()
endforeach()
list(TRANSFORM _drawn REPLACE "^: ([0-9.]+)</title>$" "\\1")
values_close("gpt2 --svg: the weights in the tooltips (layer, head, query, key order)" "${_drawn}" "${_want}" 3 6)
run(svg_no_value 2 --model "${MODEL_DIR}" --svg)
if(NOT svg_no_value_err MATCHES "^gpt2: --svg needs a value\n")
  message(FATAL_ERROR "gpt2 --svg without a file: unexpected message:\n${svg_no_value_err}")
endif()
run(svg_no_dir 1 --model "${MODEL_DIR}" --prompt "the cat" --show-top 1 --svg "${WORK_DIR}/nowhere/a.svg")
if(NOT svg_no_dir_err MATCHES "^gpt2: [^\n]*nowhere/a\\.svg: cannot create a temporary file[^\n]*\n$" OR NOT svg_no_dir_out STREQUAL "")
  message(FATAL_ERROR "gpt2 --svg into a missing directory: expected one line on stderr and nothing on stdout:\n"
                      "${svg_no_dir_out}\n${svg_no_dir_err}")
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
