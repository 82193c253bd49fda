// ONNX Runtime twin of bench/bench_bert.cpp: the plain-torch BERT-base of bench/torch_bert.py, exported to ONNX
// (opset 14), run by the npm package onnxruntime-node (its CPU execution provider, the library shipped inside
// the package) under the same BM_ names. Prints `name<TAB>median_seconds` (wall clock, as the C++ side's
// real_time), one line per case, so its output lines up with torch_bert.py's.
//
//   (mkdir -p /work/ort && cd /work/ort && npm install --ignore-scripts onnxruntime-node)   # once, outside the repo
//   /usr/bin/python3 bench/torch_bert.py --export-onnx /tmp/bert_base.onnx
//   node bench/ort_bert.mjs /tmp/bert_base.onnx [--ort-dir /work/ort] [--min-time 3] [--threads 1,2] [--only NAME]
//
// Sessions and timing as bench/ort_common.mjs says. Inputs are as the twins': random in-vocabulary ids,
// attention_mask all ones, or sequence i padded to 128 - 16 i.
import { parseArgs, runCases } from "./ort_common.mjs";

const opts = parseArgs("node bench/ort_bert.mjs");
const { ort } = opts;
const VOCAB = 30522;
const CASES = [["BM_bert_forward", 1, 128, false], ["BM_bert_forward", 8, 128, false],
               ["BM_bert_forward_padded", 8, 128, true]];

function feeds(b, t, padded) {
  let state = 12345;  // any in-vocabulary ids: speed does not depend on them
  const ids = new BigInt64Array(b * t), mask = new BigInt64Array(b * t);
  for (let i = 0; i < b; ++i) {
    const real = padded ? Math.max(1, t - 16 * i) : t;
    for (let j = 0; j < t; ++j) {
      state = (state * 1103515245 + 12345) % 2147483648;
      ids[i * t + j] = BigInt(state % VOCAB);
      mask[i * t + j] = j < real ? 1n : 0n;
    }
  }
  return { input_ids: new ort.Tensor("int64", ids, [b, t]), attention_mask: new ort.Tensor("int64", mask, [b, t]) };
}

await runCases(opts, CASES.map(([name, b, t, padded]) => [(n) => `${name}/${b}/${t}/${n}`, () => feeds(b, t, padded)]),
               "ort_bert.mjs");
