#!/usr/bin/python3
"""Interleaved A/B runs: one Google Benchmark case (or a few) from two or more builds of the bench binaries, and
optionally ONNX Runtime's twin, in rounds, so that every side sees the same minutes of a noisy shared host.

  /usr/bin/python3 bench/ab.py --builds build/bench,/tmp/other/build --binary bench_bert \
      --cases 'BM_bert_forward_packed/8/128/2' --rounds 5 [--threads 2] [--ort BM_bert_forward/8/128/2]

Each round runs every side once, as a process of its own (EIGENFORMER_NUM_THREADS=--threads), the order rotated
from round to round. Printed: each side's median over the rounds, the ratio of every other side's median to
the first build's (> 1: the first build is faster), the same ratio in each round alone, and the share of CPU
time the hypervisor stole during each run (table.py's cpu_ticks: on shared VMs a burst of it slows a run by up to
2x, so a ratio from a round with much steal on one side only says little). --ort adds
ONNX Runtime (bench/ort_bert.mjs or ort_gpt2.mjs, chosen by the binary, 2 intra-op threads by default) on the
ONNX file table.py exports (run table.py once first, or pass --onnx-dir). Exit status: 0, 1 when a run fails, 2
for a bad option.
"""
import argparse
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table import cpu_ticks, parse_gbench, parse_tsv, run_child, steal_share  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ORT = {"bench_bert": ("ort_bert.mjs", "bert_base.onnx"), "bench_gpt2": ("ort_gpt2.mjs", "gpt2_small.onnx")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", required=True, help="comma-separated build directories (each with bench/<binary>)")
    ap.add_argument("--binary", required=True, help="bench_bert, bench_gpt2, bench_gemm, bench_train, ...")
    ap.add_argument("--cases", required=True, help="comma-separated case names, without /real_time")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--ort", metavar="CASE", help="also ONNX Runtime's twin, on this case name of its script")
    ap.add_argument("--ort-dir", default="/work/ort")
    ap.add_argument("--onnx-dir", default=os.path.join(tempfile.gettempdir(), "eigenformer-onnx"))
    a = ap.parse_args()
    builds = [b for b in a.builds.split(",") if b]
    cases = [c for c in a.cases.split(",") if c]
    if not builds or not cases or a.rounds < 1:
        print("ab.py: give at least one build, one case and one round", file=sys.stderr)
        return 2
    for b in builds:
        if not os.access(os.path.join(b, "bench", a.binary), os.X_OK):
            print(f"ab.py: {os.path.join(b, 'bench', a.binary)} is not an executable", file=sys.stderr)
            return 2
    sides = [(b, None) for b in builds]
    if a.ort:
        if a.binary not in ORT:
            print(f"ab.py: no ONNX Runtime twin for {a.binary}", file=sys.stderr)
            return 2
        sides.append(("ORT", a.ort))

    def run(side):
        build, ort_case = side
        if ort_case:
            script, model = ORT[a.binary]
            argv = ["node", os.path.join(HERE, script), os.path.join(a.onnx_dir, model), "--ort-dir", a.ort_dir,
                    "--threads", str(a.threads), "--only", ort_case, "--min-time", str(a.min_time)]
            out, _ = run_child(argv, dict(os.environ), f"{script} {ort_case}")
            got = parse_tsv(out)
            return {c: got.get(ort_case) for c in cases}
        pattern = "^(" + "|".join(re.escape(c) for c in cases) + ")(/real_time)?$"
        argv = [os.path.join(build, "bench", a.binary), f"--benchmark_filter={pattern}", "--benchmark_repetitions=1",
                f"--benchmark_min_time={a.min_time}", "--benchmark_format=json"]
        out, _ = run_child(argv, dict(os.environ, EIGENFORMER_NUM_THREADS=str(a.threads)), f"{a.binary} in {build}")
        return parse_gbench(out)

    samples = {i: {c: [] for c in cases} for i in range(len(sides))}
    stolen = {i: [] for i in range(len(sides))}
    try:
        for r in range(a.rounds):
            order = list(range(len(sides)))
            order = order[r % len(order):] + order[:r % len(order)]
            for i in order:
                ticks = cpu_ticks()
                got = run(sides[i])
                stolen[i].append(steal_share(ticks, cpu_ticks()))
                for c in cases:
                    if got.get(c) is None:
                        raise RuntimeError(f"{sides[i][0]} reported no time for {c}")
                    samples[i][c].append(got[c])
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    except RuntimeError as e:
        print(f"ab.py: {e}", file=sys.stderr)
        return 1
    name = lambda i: sides[i][0] if sides[i][1] is None else f"ORT {sides[i][1]}"
    for c in cases:
        print(f"{c} ({a.threads} threads, {a.rounds} rounds, ms; ratio = this side's median / the first's):")
        first = samples[0][c]
        for i in range(len(sides)):
            s = samples[i][c]
            per_round = " / ".join(f"{x / f:.2f}" for x, f in zip(s, first))
            print(f"  {name(i)}: median {statistics.median(s) * 1e3:.2f}  ratio {statistics.median(s) / statistics.median(first):.3f}"
                  f"  rounds {' '.join(f'{x * 1e3:.1f}' for x in s)}" + (f"  per round {per_round}" if i else "") +
                  f"  steal % {' '.join('-' if x is None else f'{x * 100:.0f}' for x in stolen[i])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
