// Twin of BM_gpt2_encode (bench/bench_tokenizers.cpp): GPT-2 encoding of tiny Shakespeare with the npm
// packages tiktoken (OpenAI's Rust tokenizer compiled to WASM) and js-tiktoken (pure JavaScript), on one
// thread, reporting the median MB/s (10^6 bytes of UTF-8 input per second) of several runs.
//
//   (cd tools/reference/tokenizers && npm ci)         # the pinned packages
//   node bench/tiktoken_encode.mjs [FILE] [--runs N]   # FILE: $EIGENFORMER_DATA_DIR/tinyshakespeare/input.txt
//
// Each run encodes the whole file with one call, as BM_gpt2_encode does. Neither package keeps state
// between calls (no merge cache), so every run is as cold as the first; one warm-up run is discarded so
// that the JIT and the WASM module are compiled before timing. MB/s is computed from the process's CPU
// time (user + system), as Google Benchmark computes its rates, so a busy machine slows both sides alike;
// the wall-clock figure is printed beside it.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(repo, "tools/reference/tokenizers/package.json"));
const { get_encoding } = require("tiktoken");
const { getEncoding } = require("js-tiktoken");

const args = process.argv.slice(2);
const runsAt = args.indexOf("--runs");
const runs = runsAt >= 0 ? Number(args.splice(runsAt, 2)[1]) : 10;
const dataDir = process.env.EIGENFORMER_DATA_DIR ?? join(repo, "../shared/data");
const file = args[0] ?? join(dataDir, "tinyshakespeare/input.txt");
const text = readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text, "utf8");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function measure(name, encode) {
  let tokens = encode(text).length;  // warm-up
  const cpu = [], wall = [];
  for (let r = 0; r < runs; ++r) {
    const w0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    tokens = encode(text).length;
    const c = process.cpuUsage(c0);
    wall.push(Number(process.hrtime.bigint() - w0) / 1e9);
    cpu.push((c.user + c.system) / 1e6);
  }
  const s = median(cpu), w = median(wall);
  console.log(`${name.padEnd(18)} ${(s * 1e3).toFixed(1).padStart(8)} ms CPU ${(bytes / s / 1e6).toFixed(2).padStart(7)} MB/s` +
              `   ${(w * 1e3).toFixed(1).padStart(8)} ms wall ${(bytes / w / 1e6).toFixed(2).padStart(7)} MB/s` +
              `  (${tokens} tokens, median of ${runs})`);
}

console.log(`${file}: ${bytes} bytes, node ${process.version}`);
const wasm = get_encoding("gpt2");
measure("tiktoken (WASM)", (t) => wasm.encode(t));
wasm.free();
const js = getEncoding("gpt2");
measure("js-tiktoken", (t) => js.encode(t));
