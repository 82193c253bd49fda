#!/usr/bin/python3
"""PyTorch twin of bench/bench_tensor.cpp: the same workloads under the same BM_ names.

Prints one line per benchmark, `name<TAB>median_seconds`, measured with torch.utils.benchmark
(blocked_autorange, median of its blocks). Run with Debian's PyTorch: /usr/bin/python3 bench/torch_tensor.py
[--threads N]. Use the same thread count as the C++ side for a fair comparison. Workloads whose name
ends in a thread count (BM_linear_matmul/768/2) run at that count, as their C++ twins do; the others at
--threads.
"""
import argparse

import torch
import torch.utils.benchmark as tb


THREAD_COUNTS = (1, 2)


def workloads():
    """(name, statement, globals, threads or None for --threads)."""
    torch.manual_seed(0)
    x = torch.randn(128, 768)
    for out in (768, 2304, 3072):
        w = torch.randn(out, 768)
        for n in THREAD_COUNTS:
            yield f"BM_linear_matmul/{out}/{n}", "x @ w.t()", {"x": x, "w": w}, n
    w = torch.randn(3072, 768)
    b = torch.randn(3072)
    for n in THREAD_COUNTS:
        yield (f"BM_linear_bias_gelu/3072/{n}", "F.gelu(F.linear(x, w, b), approximate='tanh')",
               {"x": x, "w": w, "b": b, "F": torch.nn.functional}, n)
    x1 = torch.randn(1, 768)
    w = torch.randn(2304, 768)
    for n in THREAD_COUNTS:
        yield f"BM_decode_linear/2304/{n}", "x @ w.t()", {"x": x1, "w": w}, n
    q = torch.randn(1, 12, 128, 64)
    k = torch.randn(1, 12, 128, 64)
    for n in THREAD_COUNTS:
        yield f"BM_attention_scores/{n}", "q @ k.transpose(-2, -1)", {"q": q, "k": k}, n
    s = torch.randn(1, 12, 128, 128)
    for n in THREAD_COUNTS:
        yield f"BM_softmax_last_dim/{n}", "torch.softmax(s, -1)", {"s": s}, n
    x3 = torch.randn(512, 768)
    g3 = torch.randn(512, 768)
    ln = torch.nn.LayerNorm(768)
    with torch.no_grad():
        ln.weight.copy_(torch.randn(768))
        ln.bias.copy_(torch.randn(768))
    yield "BM_layer_norm/0", "with torch.no_grad(): ln(x)", {"ln": ln, "x": x3}, None
    x3r = x3.clone().requires_grad_(True)
    yield "BM_layer_norm/1", "ln(x).backward(g)", {"ln": ln, "x": x3r, "g": g3}, None
    x2 = torch.randn(128, 3072)
    b = torch.randn(3072)
    yield "BM_add_bias_broadcast", "x + b", {"x": x2, "b": b}, None
    yield "BM_sum_last_dim", "x.sum(-1)", {"x": x2}, None
    yield "BM_randn", "torch.randn(1 << 20)", {}, None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name, stmt, env, threads in workloads():
        n = threads or args.threads
        # Timer sets torch's thread count for the measurement and restores it afterwards.
        m = tb.Timer(stmt=stmt, globals={"torch": torch, **env}, num_threads=n).blocked_autorange(
            min_run_time=args.min_time)
        print(f"{name}\t{m.median:.9f}", flush=True)


if __name__ == "__main__":
    main()
