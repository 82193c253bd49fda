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


BF16_MATRIX = re.compile(r"(^|\.)(wte|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")


def weight_bytes(path):
    """Bytes of the float32 parameters in a safetensors file (without the attention-mask buffers h.N.attn.bias /
    masked_bias), and the bytes the model holds with --dtype bf16: wte and every Conv1D weight at 2 bytes an
    element, the rest (wpe, biases, LayerNorm) still float."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = bf16 = 0
    for name, info in header.items():
        if name == "__metadata__" or re.search(r"(^|\.)attn\.(bias|masked_bias)$", name):
            continue
        begin, end = info["data_offsets"]
        total += end - begin
        bf16 += (end - begin) // 2 if BF16_MATRIX.search(name) else end - begin
    return total, bf16


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gpt2", help="the gpt2 example binary (build/release/examples/gpt2)")
    ap.add_argument("--model-dir", default="/tmp/gpt2-small-random")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="gpt2's --dtype: bf16 holds wte and the Conv1D weights only as bfloat16")
    args = ap.parse_args()
    if not os.access(args.gpt2, os.X_OK):
        print(f"gpt2_memory.py: {args.gpt2} not found: build it (cmake --build build/release --target gpt2)", file=sys.stderr)
        return 2
    weights = os.path.join(args.model_dir, "model.safetensors")
    if not os.path.exists(weights):
        print(f"gpt2_memory.py: writing {args.model_dir} (random weights, once)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "reference", "make_gpt2_small_random.py"),
                        args.model_dir], check=True)
    size, bf16_size = weight_bytes(weights)
    held = bf16_size if args.dtype == "bf16" else size
    prompt = " ".join(["the"] * 128)  # 128 tokens with GPT-2's tokenizer (" the" is one token)
    runs = [("load + forward of 1 token", ["--prompt", "", "--show-top", "1"]),
            ("load + forward of 128 tokens", ["--prompt", prompt, "--show-top", "1"]),
            ("load + 128-token prompt + 32 greedy tokens", ["--prompt", prompt, "--greedy", "--max-new-tokens", "32"])]
    print(f"weights: {size / 1e6:.1f} MB ({size} bytes of parameters in {weights}); goal: peak RSS <= weights + 15 % "
          f"= {held * 1.15 / 1e6:.1f} MB of the weights as held; {args.threads} threads, --dtype {args.dtype}")
    if args.dtype == "bf16":
        print(f"weights as held with --dtype bf16: {bf16_size / 1e6:.1f} MB (wte and the Conv1D weights in bfloat16)")
        print("| run | peak RSS MB | / float weights | / weights as held |")
        print("|---|---|---|---|")
    else:
        print("| run | peak RSS MB | / weights |")
        print("|---|---|---|")
    try:
        for label, extra in runs:
            _, rss = run_child([args.gpt2, "--model", args.model_dir, "--threads", str(args.threads), "--dtype", args.dtype, *extra],
                               dict(os.environ), label)
            held_column = f" {rss / held:.3f} |" if args.dtype == "bf16" else ""
            print(f"| {label} | {rss / 1e6:.1f} | {rss / size:.3f} |{held_column}", flush=True)
    except RuntimeError as e:
        print(f"gpt2_memory.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
