# ctest "bert_cli": the bert command line on the tiny Hugging Face directories of the unit tests
# (tests/data/bert_tiny_mlm_hf: BertForMaskedLM with the NSP head, "bert." keys, LayerNorm gamma/beta, the
# position_ids buffer; tests/data/bert_tiny_cls_hf: BertForSequenceClassification with id2label; both written
# by tools/reference/make_bert_fixtures.py). --fill-mask and --classify must print exactly PyTorch's text
# (tests/data/bert_tiny_cli_expected/*.txt); broken copies (an unknown hidden_act, a missing and a misnamed
# tensor, made with edit_safetensors) and bad inputs must fail with one line on stderr and nothing on stdout.
#
#   cmake -DBERT=<exe> -DEDIT=<edit_safetensors exe> -DDATA=<tests/data> -DWORK_DIR=<scratch dir> -P bert_smoke.cmake
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/smoke/run_program.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/smoke/decimals.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/smoke/svg.cmake")

require_variables(bert_smoke BERT EDIT DATA WORK_DIR)
set(SMOKE_PROGRAM "${BERT}")
set(MLM "${DATA}/bert_tiny_mlm_hf")
set(CLS "${DATA}/bert_tiny_cls_hf")

# expect_stdout(<name> <expected file> ARGS...): exit 0 and stdout equal to the file, byte for byte.
function(expect_stdout _name _file)
  run(${_name} 0 ${ARGN})
  file(READ "${_file}" _expected)
  if(NOT "${${_name}_out}" STREQUAL "${_expected}")
    message(FATAL_ERROR "bert ${ARGN}: stdout differs from ${_file}:\n--- got\n${${_name}_out}--- expected\n${_expected}")
  endif()
endfunction()

# fails(<name> <exit code> <regex> ARGS...): that exit code, nothing on stdout, one line on stderr matching regex.
function(fails _name _rc _regex)
  run(${_name} ${_rc} ${ARGN})
  if(NOT "${${_name}_out}" STREQUAL "")
    message(FATAL_ERROR "bert ${ARGN}: printed on stdout although it failed:\n${${_name}_out}")
  endif()
  if(NOT "${${_name}_err}" MATCHES "^bert: [^\n]+\n$")
    message(FATAL_ERROR "bert ${ARGN}: expected one line on stderr, got:\n${${_name}_err}")
  endif()
  if(NOT "${${_name}_err}" MATCHES "${_regex}")
    message(FATAL_ERROR "bert ${ARGN}: stderr does not match \"${_regex}\":\n${${_name}_err}")
  endif()
endfunction()

# The two outputs PyTorch printed.
expect_stdout(fill "${DATA}/bert_tiny_cli_expected/fill_mask.txt"
              --model "${MLM}" --fill-mask "the capital of france is [MASK] ." --top-k 5)
expect_stdout(classify "${DATA}/bert_tiny_cli_expected/classify.txt"
              --model "${CLS}" --classify "a great movie !" "the plot was boring and the acting awful ." "not a good film")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
file(WRITE "${WORK_DIR}/texts.txt" "a great movie !\nthe plot was boring and the acting awful .\n\nnot a good film\n")
expect_stdout(classify_file "${DATA}/bert_tiny_cli_expected/classify.txt"
              --model "${CLS}" --classify --file "${WORK_DIR}/texts.txt")
# The pooled vector of the MLM directory's pooler against PyTorch's (bert_tiny_hf_reference.json, case
# "embed"), value by value in units of 1e-7: within 2e-6, the printing's rounding (5e-7) plus float32
# differences of another summation order (under 1e-6 at this size); a wrong vector is off by 1e-2 or more.
run(embed 0 --model "${MLM}" --embed "paris is a big city .")
file(READ "${DATA}/bert_tiny_hf_reference.json" _reference)
string(JSON _case_count LENGTH "${_reference}" cases)
math(EXPR _last_case "${_case_count} - 1")
set(_expected_pooled "")
foreach(_i RANGE ${_last_case})
  string(JSON _name GET "${_reference}" cases ${_i} name)
  if(_name STREQUAL "embed")
    string(JSON _count LENGTH "${_reference}" cases ${_i} pooler_output data)
    math(EXPR _last_value "${_count} - 1")
    foreach(_j RANGE ${_last_value})
      string(JSON _value GET "${_reference}" cases ${_i} pooler_output data ${_j})
      list(APPEND _expected_pooled "${_value}")
    endforeach()
  endif()
endforeach()
string(STRIP "${embed_out}" _printed)
string(REPLACE " " ";" _printed "${_printed}")
values_close("bert --embed (printed: ${embed_out})" "${_printed}" "${_expected_pooled}" 7 20)

# --dtype bf16: the texts PyTorch prints with the weights rounded to bfloat16 (fill_mask_bf16.txt,
# classify_bf16.txt), the same tokens and labels in the same order, each probability within one unit of its
# 6th decimal: those files' values were not chosen away from a rounding boundary, and float32 differences of
# another summation order (under 1e-7 here) can push one across it. A weight left unrounded moves them by 1e-4
# or more (fill_mask.txt against fill_mask_bf16.txt).
function(expect_close_stdout _name _file)
  run(${_name} 0 ${ARGN})
  file(READ "${_file}" _expected)
  string(REGEX REPLACE "[0-9]+\\.[0-9]+" "#" _expected_words "${_expected}")
  string(REGEX REPLACE "[0-9]+\\.[0-9]+" "#" _got_words "${${_name}_out}")
  string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _expected_values "${_expected}")
  string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _got_values "${${_name}_out}")
  if(NOT _got_words STREQUAL _expected_words)
    message(FATAL_ERROR "bert ${ARGN}: stdout differs from ${_file} beyond its values:\n--- got\n${${_name}_out}--- expected\n${_expected}")
  endif()
  values_close("bert ${ARGN} against ${_file}" "${_got_values}" "${_expected_values}" 6 1)
endfunction()
expect_close_stdout(fill_bf16 "${DATA}/bert_tiny_cli_expected/fill_mask_bf16.txt"
                    --model "${MLM}" --fill-mask "the capital of france is [MASK] ." --top-k 5 --dtype bf16)
expect_close_stdout(classify_bf16 "${DATA}/bert_tiny_cli_expected/classify_bf16.txt"
                    --model "${CLS}" --classify "a great movie !" "the plot was boring and the acting awful ." "not a good film"
                    --dtype bf16)
# --pack-weights: the float32 weights held only packed give PyTorch's float32 texts, the values within one unit
# of their 6th decimal for the same reason (products of fewer than 8 tokens sum in the packed kernel's order).
expect_close_stdout(fill_packed "${DATA}/bert_tiny_cli_expected/fill_mask.txt"
                    --model "${MLM}" --fill-mask "the capital of france is [MASK] ." --top-k 5 --pack-weights)
expect_close_stdout(classify_packed "${DATA}/bert_tiny_cli_expected/classify.txt"
                    --model "${CLS}" --classify "a great movie !" "the plot was boring and the acting awful ." "not a good film"
                    --pack-weights)
run(pack_bf16 2 --model "${MLM}" --fill-mask "[MASK]" --pack-weights --dtype bf16)
if(NOT pack_bf16_err MATCHES "^bert: --pack-weights packs float32 weights: not with --dtype bf16\n")
  message(FATAL_ERROR "bert --pack-weights --dtype bf16: unexpected message:\n${pack_bf16_err}")
endif()
run(bad_dtype 2 --model "${MLM}" --fill-mask "[MASK]" --dtype fp16)
if(NOT bad_dtype_err MATCHES "^bert: --dtype expects fp32 or bf16, got \"fp16\"\n")
  message(FATAL_ERROR "bert --dtype fp16: unexpected message:\n${bad_dtype_err}")
endif()

# Bad inputs.
fails(no_mask 1 "no \\[MASK\\]" --model "${MLM}" --fill-mask "the capital of france is paris .")
fails(too_long 1 "more than the model's 16 positions \\(max_position_embeddings\\)"
      --model "${MLM}" --fill-mask "the [MASK] of france is a big city and the capital of france is paris . very long")
fails(too_long_classify 1 "text 2 has [0-9]+ tokens"
      --model "${CLS}" --classify "short" "the plot was boring and the acting awful and the movie was not good at all .")
fails(wrong_head 1 "no classification head \\(classifier\\.weight, classifier\\.bias missing\\)"
      --model "${MLM}" --classify "a great movie !")

# Broken directories, copies of the MLM one.
function(broken_copy _dir)
  file(MAKE_DIRECTORY "${WORK_DIR}/${_dir}")
  foreach(_f config.json model.safetensors vocab.txt tokenizer_config.json)
    file(COPY_FILE "${MLM}/${_f}" "${WORK_DIR}/${_dir}/${_f}")
  endforeach()
endfunction()
broken_copy(bad_act)
file(READ "${MLM}/config.json" _config)
string(REPLACE "\"hidden_act\": \"gelu\"" "\"hidden_act\": \"swishy\"" _config "${_config}")
file(WRITE "${WORK_DIR}/bad_act/config.json" "${_config}")
fails(bad_act 1 "bad_act/config.json: field \"hidden_act\": .*\"swishy\".*accepted names are relu, gelu, gelu_new, gelu_pytorch_tanh"
      --model "${WORK_DIR}/bad_act" --fill-mask "[MASK]")

set(_tensor "bert.encoder.layer.0.output.dense.weight")
foreach(_case IN ITEMS missing misnamed)
  broken_copy(${_case})
  set(_args "${MLM}/model.safetensors" "${WORK_DIR}/${_case}/model.safetensors" "${_tensor}")
  if(_case STREQUAL "misnamed")
    list(APPEND _args "bert.encoder.layer.0.output.dense.wieght")
  endif()
  execute_process(COMMAND "${EDIT}" ${_args} RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "edit_safetensors ${_args}: ${_err}")
  endif()
endforeach()
fails(missing 1 "missing/model\\.safetensors: tensor \"bert\\.encoder\\.layer\\.0\\.output\\.dense\\.weight\" is missing"
      --model "${WORK_DIR}/missing" --fill-mask "[MASK]")
fails(misnamed 1 "misnamed/model\\.safetensors: tensor \"bert\\.encoder\\.layer\\.0\\.output\\.dense\\.weight\" is missing.*unexpected tensor \"bert\\.encoder\\.layer\\.0\\.output\\.dense\\.wieght\""
      --model "${WORK_DIR}/misnamed" --fill-mask "[MASK]")

# No --model: an explanation of what is needed, exit code 2, nothing on stdout.
run(none 2 --fill-mask "[MASK]")
if(NOT none_err MATCHES "Hugging Face BERT model directory" OR NOT none_out STREQUAL "")
  message(FATAL_ERROR "bert without --model: unexpected output:\n${none_out}\n${none_err}")
endif()
run(usage 2 --model "${MLM}")
run(bad_top_k 2 --model "${MLM}" --fill-mask "[MASK]" --top-k 0)
run(unknown_flag 2 --model "${MLM}" --fill-mask "[MASK]" --temperature 2)
run(two_modes 2 --model "${MLM}" --fill-mask "[MASK]" --embed "x")
fails(no_file 1 "nowhere\\.txt: cannot open the file" --model "${CLS}" --classify --file "${WORK_DIR}/nowhere.txt")
run(missing_dir 1 --model "${WORK_DIR}/nowhere" --fill-mask "[MASK]")
if(NOT missing_dir_err MATCHES "nowhere: no such directory")
  message(FATAL_ERROR "bert --model nowhere: unexpected message:\n${missing_dir_err}")
endif()
# --svg: the attention of 2 layers x 3 heads over "[CLS] a great movie ! [SEP]" (6 tokens), one rect per
# cell, the tokens as labels; the --classify output is unchanged.
expect_stdout(classify_svg "${DATA}/bert_tiny_cli_expected/classify.txt"
              --model "${CLS}" --classify "a great movie !" "the plot was boring and the acting awful ." "not a good film"
              --svg "${WORK_DIR}/attention.svg")
read_svg("bert --svg (2 layers x 3 heads x 6 x 6 cells)" "${WORK_DIR}/attention.svg" 216 _svg)
count_matches(_n "class=\"row-label\"[^>]*>\\[CLS\\]</text>" "${_svg}")
if(NOT _n EQUAL 6)
  message(FATAL_ERROR "bert --svg: ${_n} [CLS] row labels, expected 6")
endif()
fails(svg_no_dir 1 "cannot create a temporary file" --model "${CLS}" --classify "a" --svg "${WORK_DIR}/nowhere/a.svg")

message(STATUS "bert_smoke: all checks passed")
