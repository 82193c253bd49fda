#!/usr/bin/python3
"""GFLOP/s per product shape, every contender from one run: backend::gemm on 1 and 2 threads (and on 2 threads
with the weight packed at load, as models run their forward), oneDNN and OpenBLAS called directly on 2 threads
(when bench_gemm was built with them), and torch.mm at PyTorch's best setting (torch 1 thread, OpenBLAS 2
threads).

  env $(../shared/tools/openblas-env.sh) /usr/bin/python3 bench/gemm_table.py build/bench/bench/bench_gemm

Medians of --repetitions runs on the C++ side and of torch.utils.benchmark's blocks on the PyTorch side.
"""
import argparse
import os
import re
import subprocess
import sys

from compare import cpp_medians  # bench/compare.py, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))


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
    context = {}
    ours = cpp_medians(args.binary, args.repetitions, [f"--benchmark_min_time={args.min_time}"], context)
    theirs = torch_medians(args.min_time)
    print(f"CPU: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
          f"{context.get('num_cpus', '?')} cores; backend::gemm computes with {context.get('gemm_library', '?')}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(detected)')}")
    cols = ["ours 1t", "ours 2t", "oneDNN 2t", "OpenBLAS 2t", "torch.mm best", "ours/best", "ours 2t, weight packed at load",
            "packed/best"]
    print(f"| shape (M x N x K, layout) | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    shapes = [m.group(1) for name in ours if (m := re.match(r"BM_gemm/(.+)/1$", name))]  # in the binary's order
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
        packed = gf(ours.get(f"BM_gemm_packed/{s}/2"))
        packed_ratio = f"{packed / max(others):.2f}" if packed and others else "-"
        print(f"| {s} | " + " | ".join(f"{v:.1f}" if v else "-" for v in row) + f" | {ratio} | "
              + (f"{packed:.1f}" if packed else "-") + f" | {packed_ratio} |")


if __name__ == "__main__":
    main()
