// What the ONNX Runtime twins (ort_bert.mjs, ort_gpt2.mjs) share: their command line, loading the npm package
// onnxruntime-node from a directory outside the repository, one session per thread count, and the timing loop.
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

// argv after node and the script: MODEL.onnx [--ort-dir DIR] [--min-time SECONDS] [--threads 1,2] [--only NAME]
export function parseArgs(usage) {
  const args = process.argv.slice(2);
  const option = (name, fallback) => {
    const at = args.indexOf(name);
    return at >= 0 ? args.splice(at, 2)[1] : fallback;
  };
  const ortDir = resolve(option("--ort-dir", process.env.ORT_DIR ?? "/work/ort"));
  const minTime = Number(option("--min-time", "3"));
  const threads = option("--threads", "1,2").split(",").map(Number);
  const only = option("--only", null);
  const model = args[0];
  if (!model || args.length > 1 || !(minTime >= 0) || threads.some((n) => !(n >= 1))) {
    console.error(`usage: ${usage} MODEL.onnx [--ort-dir DIR] [--min-time SECONDS] [--threads 1,2] [--only NAME]`);
    process.exit(2);
  }
  let ort;
  try {
    ort = createRequire(join(ortDir, "package.json"))("onnxruntime-node");
  } catch (e) {
    console.error(`${usage}: cannot load onnxruntime-node from ${ortDir} (--ort-dir): ${e.message.split("\n")[0]}`);
    process.exit(1);
  }
  return { ort, model, minTime, threads, only };
}

// Every thread count gets its own session: intraOpNumThreads = the count, interOpNumThreads 1, sequential
// execution, all graph optimisations (ORT fuses the attention, GELU and LayerNorm subgraphs itself).
export function createSession(ort, model, threads) {
  return ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential", graphOptimizationLevel: "all",
  });
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// Median wall-clock seconds of session.run(feeds), after two warm-up runs: at least 5 runs and minTime seconds.
export async function medianRun(session, feeds, minTime) {
  for (let w = 0; w < 2; ++w) await session.run(feeds);
  const times = [];
  const start = process.hrtime.bigint();
  while (times.length < 5 || Number(process.hrtime.bigint() - start) / 1e9 < minTime) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return median(times);
}

// Runs `cases` ([name(threads), feeds] pairs, built once per session) at every thread count and prints
// `name<TAB>median_seconds` lines, as the PyTorch twins do. With `only`, that case alone; an unknown name is an error.
export async function runCases({ ort, model, minTime, threads, only }, cases, script) {
  const names = threads.flatMap((n) => cases.map(([name]) => name(n)));
  if (only && !names.includes(only)) {
    console.error(`${script}: no case ${only} (the cases: ${names.join(", ")})`);
    process.exit(2);
  }
  for (const n of threads) {
    if (only && !cases.some(([name]) => name(n) === only)) continue;
    const session = await createSession(ort, model, n);
    for (const [name, feeds] of cases) {
      if (only && name(n) !== only) continue;
      console.log(`${name(n)}\t${(await medianRun(session, feeds(), minTime)).toFixed(9)}`);
    }
    await session.release();
  }
}
