#!/usr/bin/python3
"""PyTorch twin of bench/bench_gpt2.cpp: GPT-2 small (124M, fp32) inference under the same BM_ names, and GPT-2
medium's (355M) forward.

The model is the plain-torch GPT-2 of tools/reference/make_gpt2_fixtures.py (Hugging Face's computation) at
GPT-2 small's size with random weights (its init_weights, eigenformer's rule), in eval mode under torch.no_grad(). Prints `name<TAB>median_seconds`
(torch.utils.benchmark).

  /usr/bin/python3 bench/torch_gpt2.py [--threads N] [--only NAME]     # NAME: one case, e.g. BM_gpt2_forward/512
  /usr/bin/python3 bench/torch_gpt2.py --export-onnx m.onnx [--size medium]  # as ONNX, for ort_gpt2.mjs

BM_gpt2_greedy_decode/32 is 32 greedy tokens after a 128-token prompt (the prompt untimed, as the C++ side):
its time is 32 tokens' worth. The past keys and values are concatenated each step, as Hugging Face's model does.
BM_gpt2_greedy_decode_bf16/32 is the same after model.to(torch.bfloat16): PyTorch's bfloat16, weights and
arithmetic (eigenformer's --dtype bf16 stores the weights in bfloat16 and computes in float).
"""
import argparse
import os
import sys

import torch
import torch.utils.benchmark as tb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "reference"))
from make_gpt2_fixtures import GPT2LMHeadModel, init_weights  # noqa: E402

SMALL = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
         "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
SIZES = {"small": SMALL, "medium": {**SMALL, "n_embd": 1024, "n_layer": 24, "n_head": 16}}
GREEDY_TOKENS = 32


def token_ids(t):
    return (torch.arange(t) * 7919 % 50257).unsqueeze(0)  # bench_gpt2.cpp's ids


def model(size="small"):
    """Random weights drawn as bench_gpt2.cpp's model draws them (the module alone starts with zero Conv1D weights,
    which an ONNX export would store once for all its layers)."""
    config = SIZES[size]
    m = GPT2LMHeadModel(config)
    torch.manual_seed(0)
    init_weights(m, config)
    return m.eval()


def greedy(m, first, past, n):
    nxt = first
    for _ in range(n):
        logits, past = m(nxt, past)
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
    return nxt


class LogitsOnly(torch.nn.Module):
    """The model without its cache output: what the ONNX file computes (one forward over the whole input)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids)[0]


def export_onnx(path, size):
    with torch.no_grad():
        torch.onnx.export(LogitsOnly(model(size)), (token_ids(128),), path, opset_version=14, input_names=["input_ids"],
                          output_names=["logits"], dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                                                 "logits": {0: "batch", 1: "seq"}})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--only", metavar="NAME", help="run this case alone")
    ap.add_argument("--export-onnx", metavar="PATH")
    ap.add_argument("--size", choices=SIZES, default="small", help="the model --export-onnx writes")
    args = ap.parse_args()
    if args.export_onnx:
        export_onnx(args.export_onnx, args.size)
        return
    torch.set_num_threads(args.threads)
    ids = token_ids(128)

    def decode_setup(m):
        logits, past = m(ids)
        return {"m": m, "greedy": greedy, "first": logits[:, -1].argmax(dim=-1, keepdim=True), "past": past}

    # name -> (statement, globals made when the case runs, so --only builds just the model it needs)
    fp32 = {}

    def fp32_model():  # built once, by the first case that needs it
        if "m" not in fp32:
            fp32["m"] = model()
        return fp32["m"]

    greedy_stmt = f"greedy(m, first, past, {GREEDY_TOKENS})"
    work = {"BM_gpt2_forward/128": ("m(ids)", lambda: {"m": fp32_model()}),
            "BM_gpt2_forward/512": ("m(ids512)", lambda: {"m": fp32_model(), "ids512": token_ids(512)}),
            "BM_gpt2_medium_forward/128": ("m(ids)", lambda: {"m": model("medium")}),
            "BM_gpt2_decode_step": ("m(nxt, past)",
                                    lambda: {**decode_setup(fp32_model()), "nxt": ids[:, :1]}),
            f"BM_gpt2_greedy_decode/{GREEDY_TOKENS}": (greedy_stmt, lambda: decode_setup(fp32_model())),
            # PyTorch's own bfloat16: weights and arithmetic in bfloat16 (ours keeps float arithmetic)
            f"BM_gpt2_greedy_decode_bf16/{GREEDY_TOKENS}": (greedy_stmt,
                                                            lambda: decode_setup(model().to(torch.bfloat16)))}
    if args.only and args.only not in work:
        sys.exit(f"torch_gpt2.py: no case {args.only} (the cases: {', '.join(work)})")
    with torch.no_grad():
        for name, (stmt, make_globals) in work.items():
            if args.only and name != args.only:
                continue
            r = tb.Timer(stmt=stmt, globals={"ids": ids, **make_globals()},
                         num_threads=args.threads).blocked_autorange(min_run_time=args.min_time)
            print(f"{name}\t{r.median:.9f}", flush=True)


if __name__ == "__main__":
    main()
