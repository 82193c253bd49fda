#!/usr/bin/python3
"""GFLOP/s per product shape, every contender from one run: backend::gemm on 1 and 2 threads (and on 2 threads
with the weight packed at load, as models run their forward), oneDNN and OpenBLAS called directly on 2 threads
(when bench_gemm was built with them), and torch.mm at PyTorch's best setting (torch 1 thread, OpenBLAS 2
threads).

  env $(../shared/tools/openblas-env.sh) /usr/bin/python3 bench/gemm_table.py build/bench/bench/bench_gemm

Medians of --repetitions runs on the C++ side and of torch.utils.benchmark's blocks on the PyTorch side. With
--rounds N (N > 1) both sides run N times in turn instead, one C++ run per case a round, so that every contender
sees the same minutes of a noisy shared host: the GFLOP/s columns are medians over the rounds, "ours/best" and
"packed/best" the median of the ratios taken within each round (against the best library of that round), with
their lowest and highest round beside them, and a last line counts the shapes at or above --goal.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

from compare import cpp_medians  # bench/compare.py, beside this script
from table import build_description  # bench/table.py

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_medians(min_time):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_gemm.py"), "--min-time", str(min_time)],
                         check=True, capture_output=True, text=True).stdout
    return {name: float(t) for name, t in (line.split("\t") for line in out.strip().splitlines())}


def rows_of_round(ours, theirs):
    """{shape: (GFLOP/s of ours 1t, ours 2t, oneDNN, OpenBLAS, torch.mm, ours packed)} from one set of timings."""
    rows = {}
    for name in ours:
        m = re.match(r"BM_gemm/(.+)/1$", name)
        if not m:
            continue
        s = m.group(1)
        mm, n, k = map(int, re.search(r"_(\d+)x(\d+)x(\d+)_", s).groups())
        flops = 2.0 * mm * n * k

        def gf(t):
            return flops / t * 1e-9 if t else None
        rows[s] = (gf(ours.get(f"BM_gemm/{s}/1")), gf(ours.get(f"BM_gemm/{s}/2")), gf(ours.get(f"BM_onednn_sgemm/{s}/2")),
                   gf(ours.get(f"BM_openblas_sgemm/{s}/2")), gf(theirs.get(f"BM_gemm/{s}/2")),
                   gf(ours.get(f"BM_gemm_packed/{s}/2")))
    return rows


def ratios(row):
    """(ours' best / the best library, packed / the best library) of one round's row; None where a side is missing."""
    others = [v for v in row[2:5] if v]
    if not others:
        return None, None
    best = max(others)
    ours_best = max(v for v in row[:2] if v)
    return ours_best / best, (row[5] / best if row[5] else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("binary")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--goal", type=float, default=0.95, help="the share of the best library the last line counts")
    args = ap.parse_args()
    if args.rounds < 1 or args.repetitions < 1:
        print("gemm_table.py: --rounds and --repetitions must be at least 1", file=sys.stderr)
        return 2
    context = {}
    reps = args.repetitions if args.rounds == 1 else 1
    rounds = []
    for _ in range(args.rounds):
        ours = cpp_medians(args.binary, reps, [f"--benchmark_min_time={args.min_time}"], context)
        rounds.append(rows_of_round(ours, torch_medians(args.min_time)))
    print(build_description(args.binary))
    print(f"backend::gemm computes with {context.get('gemm_library', '?')}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(detected)')}; {args.rounds} round(s)")
    cols = ["ours 1t", "ours 2t", "oneDNN 2t", "OpenBLAS 2t", "torch.mm best", "ours/best", "ours 2t, weight packed at load",
            "packed/best"]
    print(f"| shape (M x N x K, layout) | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def ratio_cell(values):
        values = [v for v in values if v is not None]
        if not values:
            return "-"
        cell = f"{statistics.median(values):.2f}"
        return cell + (f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else "")

    counts = {"per call": [0, 0], "packed": [0, 0]}
    for s in rounds[0]:  # in the binary's order
        row = [median(r[s][i] for r in rounds) for i in range(6)]
        per_round = [ratios(r[s]) for r in rounds]
        for key, idx in (("per call", 0), ("packed", 1)):
            m = median(p[idx] for p in per_round)
            if m is not None:
                counts[key][0] += m >= args.goal
                counts[key][1] += 1
        print(f"| {s} | " + " | ".join(f"{v:.1f}" if v else "-" for v in row[:5]) +
              f" | {ratio_cell(p[0] for p in per_round)} | " + (f"{row[5]:.1f}" if row[5] else "-") +
              f" | {ratio_cell(p[1] for p in per_round)} |")
    print(f"At or above {args.goal:.2f} of the best library: per call {counts['per call'][0]} of {counts['per call'][1]} "
          f"shapes, with the weight packed at load {counts['packed'][0]} of {counts['packed'][1]}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
