// ONNX Runtime twin of bench/bench_bert.cpp: the plain-torch BERT-base of bench/torch_bert.py, exported to ONNX
// (opset 14), run by the npm package onnxruntime-node (its CPU execution provider, the library shipped inside
// the package) under the same BM_ names. Prints `name<TAB>median_seconds` (wall clock, as the C++ side's
// real_time), one line per case, so its output lines up with torch_bert.py's.
//
//   (mkdir -p /work/ort && cd /work/ort && npm install --ignore-scripts onnxruntime-node)   # once, outside the repo
//   /usr/bin/python3 bench/torch_bert.py --export-onnx /tmp/bert_base.onnx
//   node bench/ort_bert.mjs /tmp/bert_base.onnx [--ort-dir /work/ort] [--min-time 3]
//
// Every thread count gets its own session (intraOpNumThreads = the count, interOpNumThreads 1, sequential
// execution, all graph optimisations: ORT fuses the attention, GELU and LayerNorm subgraphs itself). Inputs
// are as the twins': random in-vocabulary ids, attention_mask all ones, or sequence i padded to 128 - 16 i.
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args.splice(at, 2)[1] : fallback;
};
const ortDir = resolve(option("--ort-dir", process.env.ORT_DIR ?? "/work/ort"));
const minTime = Number(option("--min-time", "3"));
const model = args[0];
if (!model) {
  console.error("usage: node bench/ort_bert.mjs MODEL.onnx [--ort-dir DIR] [--min-time SECONDS]");
  process.exit(2);
}
const ort = createRequire(join(ortDir, "package.json"))("onnxruntime-node");

const VOCAB = 30522;
const CASES = [["BM_bert_forward", 1, 128, false], ["BM_bert_forward", 8, 128, false],
               ["BM_bert_forward_padded", 8, 128, true]];

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

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

for (const threads of [1, 2]) {
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential", graphOptimizationLevel: "all",
  });
  for (const [name, b, t, padded] of CASES) {
    const input = feeds(b, t, padded);
    for (let w = 0; w < 2; ++w) await session.run(input);  // warm-up
    const times = [];
    const start = process.hrtime.bigint();
    while (times.length < 5 || Number(process.hrtime.bigint() - start) / 1e9 < minTime) {
      const t0 = process.hrtime.bigint();
      await session.run(input);
      times.push(Number(process.hrtime.bigint() - t0) / 1e9);
    }
    console.log(`${name}/${b}/${t}/${threads}\t${median(times).toFixed(9)}`);
  }
  await session.release();
}
