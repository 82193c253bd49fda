#!/usr/bin/python3
"""Peak resident memory of GPT-2 small inference against the size of its weights (issue 11: at most weights
+ 15 %). Runs the `gpt2` example on a GPT-2-small-shaped directory with random weights (written by
tools/reference/make_gpt2_small_random.py when --model-dir does not exist yet, ~550 MB) and reads each
process's own peak RSS (os.wait4):

  cmake --preset release && cmake --build build/release --target gpt2 -j2
  /usr/bin/python3 bench/gpt2_memory.py build/release/examples/gpt2 [--model-dir /tmp/gpt2-small-random] [--dtype bf16]

Three runs: loading alone (`--show-top` of a one-token prompt: load + one forward of one token), load + a
128-token forward (`--show-top`), and load + 32 greedy tokens after that prompt (KV cache). The weights' size
is the bytes of the parameters in model.safetensors (the causal-mask buffers the official files carry are not
loaded and not counted). MB = 10^6 bytes. Exit status 0, 1 when a run fails, 2 for bad arguments.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

sys.path.insert(0, HERE)
from table import run_child  # noqa: E402  (bench/table.py: a child's output and its own peak RSS)


def weight_bytes(path):
    """Bytes of the tensors in a safetensors file, without the attention-mask buffers (h.N.attn.bias / masked_bias)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = 0
    for name, info in header.items():
        if name == "__metadata__" or re.search(r"(^|\.)attn\.(bias|masked_bias)$", name):
            continue
        begin, end = info["data_offsets"]
        total += end - begin
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gpt2", help="the gpt2 example binary (build/release/examples/gpt2)")
    ap.add_argument("--model-dir", default="/tmp/gpt2-small-random")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="gpt2's --dtype: bf16 adds a bfloat16 copy of every weight matrix beside the float weights")
    args = ap.parse_args()
    if not os.access(args.gpt2, os.X_OK):
        print(f"gpt2_memory.py: {args.gpt2} not found: build it (cmake --build build/release --target gpt2)", file=sys.stderr)
        return 2
    weights = os.path.join(args.model_dir, "model.safetensors")
    if not os.path.exists(weights):
        print(f"gpt2_memory.py: writing {args.model_dir} (random weights, once)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "reference", "make_gpt2_small_random.py"),
                        args.model_dir], check=True)
    size = weight_bytes(weights)
    prompt = " ".join(["the"] * 128)  # 128 tokens with GPT-2's tokenizer (" the" is one token)
    runs = [("load + forward of 1 token", ["--prompt", "", "--show-top", "1"]),
            ("load + forward of 128 tokens", ["--prompt", prompt, "--show-top", "1"]),
            ("load + 128-token prompt + 32 greedy tokens", ["--prompt", prompt, "--greedy", "--max-new-tokens", "32"])]
    print(f"weights: {size / 1e6:.1f} MB ({size} bytes of parameters in {weights}); goal: peak RSS <= weights + 15 % "
          f"= {size * 1.15 / 1e6:.1f} MB; {args.threads} threads, --dtype {args.dtype}")
    print("| run | peak RSS MB | / weights |")
    print("|---|---|---|")
    try:
        for label, extra in runs:
            _, rss = run_child([args.gpt2, "--model", args.model_dir, "--threads", str(args.threads), "--dtype", args.dtype, *extra],
                               dict(os.environ), label)
            print(f"| {label} | {rss / 1e6:.1f} | {rss / size:.3f} |", flush=True)
    except RuntimeError as e:
        print(f"gpt2_memory.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
