#!/usr/bin/python3
"""GFLOP/s per product shape, every contender from one run: backend::gemm on 1 and 2 threads, oneDNN and
OpenBLAS called directly on 2 threads (when bench_gemm was built with them), and torch.mm at PyTorch's best
setting (torch 1 thread, OpenBLAS 2 threads).

  env $(../shared/tools/openblas-env.sh) /usr/bin/python3 bench/gemm_table.py build/bench/bench/bench_gemm

Medians of --repetitions runs on the C++ side and of torch.utils.benchmark's blocks on the PyTorch side.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def cpp_medians(binary, reps, min_time):
    out = subprocess.run([binary, f"--benchmark_repetitions={reps}", "--benchmark_report_aggregates_only=true",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    res, library = {}, "?"
    for b in report["benchmarks"]:
        if b.get("aggregate_name") == "median":
            res[b["run_name"].removesuffix("/real_time")] = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[b["time_unit"]]
            library = b.get("label") or library if b["run_name"].startswith("BM_gemm/") else library
    return res, library, report.get("context", {})


def torch_medians(min_time):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_gemm.py"), "--min-time", str(min_time)],
                         check=True, capture_output=True, text=True).stdout
    return {name: float(t) for name, t in (line.split("\t") for line in out.strip().splitlines())}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("binary")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    args = ap.parse_args()
    ours, library, context = cpp_medians(args.binary, args.repetitions, args.min_time)
    theirs = torch_medians(args.min_time)
    print(f"CPU: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
          f"{context.get('num_cpus', '?')} cores; backend::gemm computes with {library}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(detected)')}")
    cols = ["ours 1t", "ours 2t", "oneDNN 2t", "OpenBLAS 2t", "torch.mm best", "ours/best"]
    print(f"| shape (M x N x K, layout) | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    shapes = sorted({m.group(1) for name in ours if (m := re.match(r"BM_gemm/(.+)/\d$", name))},
                    key=lambda s: list(ours).index(f"BM_gemm/{s}/1"))
    for s in shapes:
        m, n, k = map(int, re.search(r"_(\d+)x(\d+)x(\d+)_", s).groups())
        flops = 2.0 * m * n * k

        def gf(t):
            return flops / t * 1e-9 if t else None
        row = [gf(ours.get(f"BM_gemm/{s}/1")), gf(ours.get(f"BM_gemm/{s}/2")), gf(ours.get(f"BM_onednn_sgemm/{s}/2")),
               gf(ours.get(f"BM_openblas_sgemm/{s}/2")), gf(theirs.get(f"BM_gemm/{s}/2"))]
        ours_best = max(v for v in row[:2] if v)
        others = [v for v in row[2:] if v]
        ratio = f"{ours_best / max(others):.2f}" if others else "-"
        print(f"| {s} | " + " | ".join(f"{v:.1f}" if v else "-" for v in row) + f" | {ratio} |")


if __name__ == "__main__":
    main()
