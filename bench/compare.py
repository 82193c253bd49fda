#!/usr/bin/python3
"""Runs a C++ benchmark binary and its PyTorch twin in one go and prints medians side by side.

  /usr/bin/python3 bench/compare.py build/bench/bench/bench_tensor bench/torch_tensor.py [--threads 1]

The C++ side runs with --benchmark_repetitions and reports the median of the repetitions; the PyTorch
side uses torch.utils.benchmark's median. Ratios > 1 mean eigenformer is faster. Absolute times on a
shared machine are noise; the ratio measured in one run is the number to quote.
"""
import argparse
import json
import os
import subprocess
import sys

from table import build_description  # bench/table.py, beside this script


def cpp_medians(binary, reps, extra_args=(), context=None):
    """{name: median seconds} of a Google Benchmark binary; `context`, a dict if given, receives the run's
    context (the machine, and what a suite added with AddCustomContext)."""
    # One repetition has no aggregates: its single run is the median.
    aggregates = ["--benchmark_report_aggregates_only=true"] if reps > 1 else []
    out = subprocess.run([binary, f"--benchmark_repetitions={reps}", *aggregates, "--benchmark_format=json", *extra_args],
                         check=True, capture_output=True, text=True).stdout
    res = {}
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    report = json.loads(out)
    if context is not None:
        context.update(report.get("context", {}))
    for b in report["benchmarks"]:
        if b.get("aggregate_name") == "median" or (reps == 1 and b.get("run_type") == "iteration"):
            # Benchmarks timed with UseRealTime() (the threaded ones) carry a /real_time suffix their twin lacks.
            name = b["run_name"].removesuffix("/real_time")
            res[name] = b["real_time"] * scale[b["time_unit"]]
    return res


def torch_medians(script, threads):
    out = subprocess.run([sys.executable, script, "--threads", str(threads)], check=True, capture_output=True,
                         text=True).stdout
    return {name: float(t) for name, t in (line.split("\t") for line in out.strip().splitlines())}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("binary")
    ap.add_argument("torch_script")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repetitions", type=int, default=5)
    args = ap.parse_args()
    env_threads = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = env_threads
    # The C++ side's default thread count; benchmarks named .../<threads> set their own.
    os.environ["EIGENFORMER_NUM_THREADS"] = env_threads
    ours = cpp_medians(args.binary, args.repetitions)
    theirs = torch_medians(args.torch_script, args.threads)
    print(build_description(args.binary))
    print(f"{'benchmark':32} {'eigenformer':>14} {'pytorch':>14} {'speed-up':>9}")
    for name in ours:
        t = theirs.get(name)
        ratio = f"{t / ours[name]:.2f}x" if t else "-"
        tt = f"{t * 1e3:11.3f} ms" if t else "-"
        print(f"{name:32} {ours[name] * 1e3:11.3f} ms {tt:>14} {ratio:>9}")


if __name__ == "__main__":
    main()
