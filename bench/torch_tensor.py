#!/usr/bin/python3
"""PyTorch twin of bench/bench_tensor.cpp: the same workloads under the same BM_ names.

Prints one line per benchmark, `name<TAB>median_seconds`, measured with torch.utils.benchmark
(blocked_autorange, median of its blocks). Run with Debian's PyTorch: /usr/bin/python3 bench/torch_tensor.py
[--threads N]. Use the same thread count as the C++ side for a fair comparison.
"""
import argparse

import torch
import torch.utils.benchmark as tb


def workloads():
    torch.manual_seed(0)
    x = torch.randn(128, 768)
    for out in (768, 2304, 3072):
        w = torch.randn(out, 768)
        yield f"BM_linear_matmul/{out}", "x @ w.t()", {"x": x, "w": w}
    q = torch.randn(1, 12, 128, 64)
    k = torch.randn(1, 12, 128, 64)
    yield "BM_attention_scores", "q @ k.transpose(-2, -1)", {"q": q, "k": k}
    s = torch.randn(1, 12, 128, 128)
    yield "BM_softmax_last_dim", "torch.softmax(s, -1)", {"s": s}
    x2 = torch.randn(128, 3072)
    b = torch.randn(3072)
    yield "BM_add_bias_broadcast", "x + b", {"x": x2, "b": b}
    yield "BM_sum_last_dim", "x.sum(-1)", {"x": x2}
    yield "BM_randn", "torch.randn(1 << 20)", {}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name, stmt, env in workloads():
        m = tb.Timer(stmt=stmt, globals={"torch": torch, **env}, num_threads=args.threads).blocked_autorange(
            min_run_time=args.min_time)
        print(f"{name}\t{m.median:.9f}", flush=True)


if __name__ == "__main__":
    main()
