#!/usr/bin/python3
"""PyTorch twin of bench/bench_gemm.cpp: torch.mm on the same shapes and layouts, under the same BM_ names.

Prints `name<TAB>median_seconds` per line (torch.utils.benchmark, median of blocked_autorange). torch.mm on
a CPU float tensor calls OpenBLAS here, so the name's last field is OpenBLAS's thread count, with torch's
own set to 1: .../2 is PyTorch's best setting on these 2-core machines. Run with Debian's PyTorch and the
OpenBLAS kernel ../shared/tools/openblas-env.sh names:

  env $(../shared/tools/openblas-env.sh) /usr/bin/python3 bench/torch_gemm.py
"""
import argparse
import ctypes

import torch
import torch.utils.benchmark as tb

# Kept in step with `shapes` in bench/bench_gemm.cpp: (label, M, N, K, layout).
SHAPES = [
    ("gpt2_qkv_s128", 128, 2304, 768, "nt"), ("bert_attn_out_s128", 128, 768, 768, "nt"),
    ("bert_ffn_up_s128", 128, 3072, 768, "nt"), ("bert_ffn_down_s128", 128, 768, 3072, "nt"),
    ("bert_ffn_up_b8", 1024, 3072, 768, "nt"), ("decode_qkv", 1, 2304, 768, "nt"),
    ("chargpt_qkv", 768, 384, 128, "nt"), ("chargpt_ffn_up", 768, 512, 128, "nt"),
    ("chargpt_ffn_down", 768, 128, 512, "nt"), ("chargpt_ffn_down_dx", 768, 512, 128, "nn"),
    ("chargpt_ffn_up_dw", 512, 128, 768, "tn"), ("seed_ffn_up_b16", 2048, 1024, 256, "nt"),
    ("seed_ffn_down_b16", 2048, 256, 1024, "nt"), ("seed_ffn_up_dw_b16", 1024, 256, 2048, "tn"),
    ("bert_attn_dw_b8", 768, 768, 1024, "tn"), ("bert_ffn_down_dw_b8", 768, 3072, 1024, "tn"),
    ("bert_qkv_b8", 1024, 2304, 768, "nt"), ("bert_attn_out_b8", 1024, 768, 768, "nt"),
    ("bert_ffn_down_b8", 1024, 768, 3072, "nt"),
]


def openblas():
    """The OpenBLAS that torch loaded (its thread count is separate from torch's)."""
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libopenblas" in line})
    return ctypes.CDLL(libs[0]) if libs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1, help="ignored: each name carries its thread count")
    ap.add_argument("--min-time", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))  # loads OpenBLAS
    blas = openblas()
    for label, m, n, k, layout in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(k, m).t() if layout[0] == "t" else torch.randn(m, k)
        b = torch.randn(n, k).t() if layout[1] == "t" else torch.randn(k, n)
        for threads in (1, 2):
            if blas is None and threads != 1:
                continue
            if blas is not None:
                blas.openblas_set_num_threads(threads)
            t = tb.Timer(stmt="torch.mm(a, b)", globals={"torch": torch, "a": a, "b": b}, num_threads=1)
            median = t.blocked_autorange(min_run_time=args.min_time).median
            print(f"BM_gemm/{label}_{m}x{n}x{k}_{layout}/{threads}\t{median:.9f}", flush=True)


if __name__ == "__main__":
    main()
