# ctest "train_sentiment_cli": the train_sentiment command line on a tiny data set written here and the
# 60-token vocabulary of tests/data/bert_tiny_mlm_hf: a 3-step run of a 1-layer model prints the test
# report and saves; --load --predict prints label<TAB>probability per text and --load --eval the same test
# accuracy; --dump-ids writes the ids and stops; bad flags exit 2 and bad data (an empty line, named by file
# and line) exit 1, one line on stderr.
#
#   cmake -DEXE=<train_sentiment> -DDATA=<tests/data> -DWORK_DIR=<scratch dir> -P train_sentiment_smoke.cmake
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/smoke/count_matches.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/smoke/run_program.cmake")

require_variables(train_sentiment_smoke EXE DATA WORK_DIR)
set(SMOKE_PROGRAM "${EXE}")
set(VOCAB "${DATA}/bert_tiny_mlm_hf/vocab.txt")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/data" "${WORK_DIR}/bad")
set(_lines "1 a good film\n0 a bad film\n1 the movie is great\n0 the movie is dull\n1 fun\n0 boring\n")
foreach(_split train dev test)
  file(WRITE "${WORK_DIR}/data/${_split}.txt" "${_lines}")
  file(WRITE "${WORK_DIR}/bad/${_split}.txt" "1 fine\n\n0 bad\n")
endforeach()

function(fails _name _rc _regex)
  run(${_name} ${_rc} ${ARGN})
  count_matches(_n "\n" "${${_name}_err}")
  if(NOT "${${_name}_out}" STREQUAL "" OR NOT _n EQUAL 1 OR NOT "${${_name}_err}" MATCHES "${_regex}")
    message(FATAL_ERROR "train_sentiment ${ARGN}: expected one line on stderr matching '${_regex}' and no stdout, got\n"
                        "stdout: ${${_name}_out}\nstderr: ${${_name}_err}")
  endif()
endfunction()

set(_tiny --vocab "${VOCAB}" --layers 1 --hidden 16 --heads 2 --ff 32 --batch-size 4 --max-length 16 --quiet)
run(train 0 --data "${WORK_DIR}/data" ${_tiny} --epochs 2 --max-steps 3 --save "${WORK_DIR}/model" --log "${WORK_DIR}/run.csv"
    --plot "${WORK_DIR}/run.svg")
string(REGEX MATCH "\ntest accuracy: (0|1)\\.[0-9][0-9][0-9][0-9]\n" _acc "${train_out}")
if(NOT _acc OR NOT train_out MATCHES "weighted avg" OR NOT train_out MATCHES "confusion matrix")
  message(FATAL_ERROR "train_sentiment: no test report in\n${train_out}")
endif()
foreach(_f config.json model.safetensors vocab.txt recipe.json)
  if(NOT EXISTS "${WORK_DIR}/model/${_f}")
    message(FATAL_ERROR "train_sentiment --save: ${_f} missing")
  endif()
endforeach()
# 6 examples in batches of 4: 2 steps in epoch 1, the third in epoch 2 -> header, 3 step rows, 2 epoch rows, test.
file(STRINGS "${WORK_DIR}/run.csv" _csv)
list(LENGTH _csv _rows)
if(NOT _rows EQUAL 7)
  message(FATAL_ERROR "train_sentiment --log: ${_rows} lines in run.csv, expected 7")
endif()
# --plot: loss and accuracy charts, each with the 3 batches, the 2 epoch means and the 2 dev values, and the
# test set's 2 x 2 confusion matrix with its counts (6 test sentences).
file(READ "${WORK_DIR}/run.svg" _svg)
count_matches(_nl "<polyline class=\"series\"" "${_svg}")
count_matches(_nc "<rect class=\"cell\"" "${_svg}")
count_matches(_nv "class=\"value\"[^>]*>[0-9]+<" "${_svg}")
count_matches(_n3 "points=\"[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+\"" "${_svg}")
if(NOT _nl EQUAL 6 OR NOT _nc EQUAL 4 OR NOT _nv EQUAL 4 OR NOT _n3 EQUAL 2 OR NOT _svg MATCHES "</svg>\n$")
  message(FATAL_ERROR "train_sentiment --plot: ${_nl} curves (expected 6), ${_nc} cells (4), ${_nv} counts (4), "
                      "${_n3} three-point curves (2)")
endif()
# --from-log: the same curves again from run.csv, without training.
run(replot 0 --plot "${WORK_DIR}/replot.svg" --from-log "${WORK_DIR}/run.csv")
file(READ "${WORK_DIR}/replot.svg" _svg)
count_matches(_nl "<polyline class=\"series\"" "${_svg}")
count_matches(_n3 "points=\"[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+\"" "${_svg}")
if(NOT _nl EQUAL 6 OR NOT _n3 EQUAL 2 OR NOT replot_out STREQUAL "")
  message(FATAL_ERROR "train_sentiment --from-log: ${_nl} curves (expected 6), ${_n3} three-point curves (2)")
endif()
fails(from_log_no_plot 2 "add --plot" --from-log "${WORK_DIR}/run.csv")
fails(from_log_bad 1 "nowhere\\.csv: cannot open" --plot "${WORK_DIR}/x.svg" --from-log "${WORK_DIR}/nowhere.csv")
run(predict 0 --load "${WORK_DIR}/model" --predict "a good film" "a bad film")
if(NOT predict_out MATCHES "^(negative|positive)\t[01]\\.[0-9]+\n(negative|positive)\t[01]\\.[0-9]+\n$")
  message(FATAL_ERROR "train_sentiment --predict: unexpected output\n${predict_out}")
endif()
run(eval 0 --load "${WORK_DIR}/model" --eval --data "${WORK_DIR}/data" --plot "${WORK_DIR}/eval.svg")
file(READ "${WORK_DIR}/eval.svg" _svg)
count_matches(_nc "<rect class=\"cell\"" "${_svg}")
if(NOT _nc EQUAL 4)
  message(FATAL_ERROR "train_sentiment --eval --plot: ${_nc} confusion-matrix cells, expected 4")
endif()
fails(plot_predict 2 "--plot with --load" --load "${WORK_DIR}/model" --predict "a" --plot "${WORK_DIR}/p.svg")
string(REGEX MATCH "test accuracy: [0-9.]+\n" _acc2 "${eval_out}")
string(REGEX MATCH "test accuracy: [0-9.]+\n" _acc1 "${train_out}")
if(NOT _acc1 STREQUAL _acc2)
  message(FATAL_ERROR "train_sentiment --load --eval: '${_acc2}' differs from the training run's '${_acc1}'")
endif()

# --dump-ids (for tools/reference/train_sentiment_twin.py): the header line, then every split's sentences as
# ids with [CLS] (2) first and [SEP] (3) last, and no training.
run(dump 0 --data "${WORK_DIR}/data" --vocab "${VOCAB}" --dump-ids "${WORK_DIR}/ids.txt")
file(STRINGS "${WORK_DIR}/ids.txt" _ids)
list(LENGTH _ids _id_rows)
list(GET _ids 0 _head)
list(GET _ids 1 _first)
if(NOT _id_rows EQUAL 19 OR NOT _head STREQUAL "pad 0 vocab 60" OR NOT _first MATCHES "^train 1 2( [0-9]+)+ 3$"
   OR NOT "${dump_out}" STREQUAL "")
  message(FATAL_ERROR "train_sentiment --dump-ids: unexpected file (${_id_rows} lines, '${_head}', '${_first}')\n"
                      "stdout: ${dump_out}")
endif()

fails(unknown 2 "unknown argument" --bogus)
fails(bad_int 2 "--epochs expects an integer" --epochs x)
fails(no_mode 2 "needs --predict" --load "${WORK_DIR}/model")
fails(heads 2 "not divisible" --data "${WORK_DIR}/data" --vocab "${VOCAB}" --hidden 16 --heads 3)
fails(empty_line 1 "bad/train.txt:2: empty line" --data "${WORK_DIR}/bad" --vocab "${VOCAB}")
fails(no_data 1 "cannot open" --data "${WORK_DIR}/missing" --vocab "${VOCAB}")
message(STATUS "train_sentiment_cli: all checks passed")
