#!/usr/bin/python3
"""PyTorch twin of bench/bench_gpt2.cpp: GPT-2 small (124M, fp32) inference under the same BM_ names.

The model is the plain-torch GPT-2 of tools/reference/make_gpt2_fixtures.py (Hugging Face's computation) at
GPT-2 small's size with random weights, in eval mode under torch.no_grad(). Prints `name<TAB>median_seconds`
(torch.utils.benchmark). /usr/bin/python3 bench/torch_gpt2.py [--threads N]
"""
import argparse
import os
import sys

import torch
import torch.utils.benchmark as tb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "reference"))
from make_gpt2_fixtures import GPT2LMHeadModel  # noqa: E402

SMALL = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
         "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=2.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(SMALL).eval()
    ids = (torch.arange(128) * 7919 % 50257).unsqueeze(0)
    nxt = ids[:, :1]
    with torch.no_grad():
        _, past = model(ids)
        work = {"BM_gpt2_forward/128": ("model(ids)", {}),
                "BM_gpt2_decode_step": ("model(nxt, past)", {"nxt": nxt, "past": past})}
        for name, (stmt, env) in work.items():
            m = tb.Timer(stmt=stmt, globals={"model": model, "ids": ids, **env},
                         num_threads=args.threads).blocked_autorange(min_run_time=args.min_time)
            print(f"{name}\t{m.median:.9f}", flush=True)


if __name__ == "__main__":
    main()
