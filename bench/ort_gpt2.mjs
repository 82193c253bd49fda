// ONNX Runtime twin of bench/bench_gpt2.cpp's forward cases: the plain-torch GPT-2 small of bench/torch_gpt2.py
// (random weights) exported to ONNX (opset 14, logits of every position, no KV cache), run by the npm package
// onnxruntime-node. Prints `BM_gpt2_forward/<tokens>/<threads><TAB>median_seconds` (wall clock), whichever size
// the file holds (`--size medium` exports GPT-2 medium, BM_gpt2_medium_forward's twin).
//
//   /usr/bin/python3 bench/torch_gpt2.py --export-onnx /tmp/gpt2_small.onnx          # ~650 MB
//   node bench/ort_gpt2.mjs /tmp/gpt2_small.onnx [--ort-dir /work/ort] [--min-time 3] [--threads 1,2] [--only NAME]
//
// Decoding with a KV cache is not measured here: the exported graph has no past-key/value inputs (exporting
// them needs the cache as graph inputs and outputs, which this twin does not do), so ORT has no decode figure.
// Sessions and timing as bench/ort_common.mjs says; the ids are bench_gpt2.cpp's, (i * 7919) mod 50257.
import { parseArgs, runCases } from "./ort_common.mjs";

const opts = parseArgs("node bench/ort_gpt2.mjs");
const { ort } = opts;

function feeds(t) {
  const ids = new BigInt64Array(t);
  for (let i = 0; i < t; ++i) ids[i] = BigInt((i * 7919) % 50257);
  return { input_ids: new ort.Tensor("int64", ids, [1, t]) };
}

await runCases(opts, [128, 512].map((t) => [(n) => `BM_gpt2_forward/${t}/${n}`, () => feeds(t)]), "ort_gpt2.mjs");
