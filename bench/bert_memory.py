#!/usr/bin/python3
"""Peak resident memory of BERT-base inference against the size of its weights (issue 11: at most weights
+ 15 %). Runs the `bert` example on a bert-base-uncased-shaped directory with random weights (written by
tools/reference/make_bert_base_random.py when --model-dir does not exist yet, ~440 MB) and reads each
process's own peak RSS (os.wait4):

  cmake --preset release && cmake --build build/release --target bert -j2
  /usr/bin/python3 bench/bert_memory.py build/release/examples/bert [--model-dir /tmp/bert-base-random] [--dtype bf16]

Two runs of `bert --fill-mask TEXT --top-k 5`: a short prompt ("paris is the [MASK] of france .", 9 tokens with
[CLS] and [SEP]: mostly the load) and a 128-token one ("[MASK]" and 125 times "the", one token each with that
directory's vocab.txt). The weights' size is the bytes of every tensor in model.safetensors. With --dtype bf16 the
model holds the word embeddings and every Linear weight (query / key / value / dense) as bfloat16, 2 bytes an
element, the rest (position and token-type embeddings, biases, LayerNorm) as float. MB = 10^6 bytes. Exit status
0, 1 when a run fails, 2 for bad arguments.
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


BF16_MATRIX = re.compile(r"(^|\.)(word_embeddings|query|key|value|dense)\.weight$")
SEQUENCE = 128  # tokens of the long prompt, [CLS] and [SEP] included


def weight_bytes(path):
    """Bytes of the float32 tensors in a safetensors file, and the bytes the model holds with --dtype bf16:
    word_embeddings and every Linear weight at 2 bytes an element, the rest still float."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = bf16 = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        total += end - begin
        bf16 += (end - begin) // 2 if BF16_MATRIX.search(name) else end - begin
    return total, bf16


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bert", help="the bert example binary (build/release/examples/bert)")
    ap.add_argument("--model-dir", default="/tmp/bert-base-random")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="bert's --dtype: bf16 holds word_embeddings and the Linear weights only as bfloat16")
    args = ap.parse_args()
    if not os.access(args.bert, os.X_OK):
        print(f"bert_memory.py: {args.bert} not found: build it (cmake --build build/release --target bert)", file=sys.stderr)
        return 2
    weights = os.path.join(args.model_dir, "model.safetensors")
    if not os.path.exists(weights):
        print(f"bert_memory.py: writing {args.model_dir} (random weights, once)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "reference", "make_bert_base_random.py"),
                        args.model_dir], check=True)
    size, bf16_size = weight_bytes(weights)
    held = bf16_size if args.dtype == "bf16" else size
    # [CLS] [MASK] the ... the [SEP]: "the" is one token with make_bert_base_random.py's vocab.txt.
    long_prompt = " ".join(["[MASK]"] + ["the"] * (SEQUENCE - 3))
    runs = [("load + fill-mask of 9 tokens", "paris is the [MASK] of france ."),
            (f"load + fill-mask of {SEQUENCE} tokens", long_prompt)]
    print(f"weights: {size / 1e6:.1f} MB ({size} bytes of parameters in {weights}); goal: peak RSS <= weights + 15 % "
          f"= {held * 1.15 / 1e6:.1f} MB of the weights as held; --dtype {args.dtype}")
    if args.dtype == "bf16":
        print(f"weights as held with --dtype bf16: {bf16_size / 1e6:.1f} MB (word_embeddings and the Linear weights in bfloat16)")
        print("| run | peak RSS MB | / float weights | / weights as held |")
        print("|---|---|---|---|")
    else:
        print("| run | peak RSS MB | / weights |")
        print("|---|---|---|")
    try:
        for label, text in runs:
            out, rss = run_child([args.bert, "--model", args.model_dir, "--fill-mask", text, "--top-k", "5",
                                  "--dtype", args.dtype], dict(os.environ), label)
            if len(out.splitlines()) != 5:
                raise RuntimeError(f"{label}: expected 5 lines of predictions, got {len(out.splitlines())}")
            held_column = f" {rss / held:.3f} |" if args.dtype == "bf16" else ""
            print(f"| {label} | {rss / 1e6:.1f} | {rss / size:.3f} |{held_column}", flush=True)
    except RuntimeError as e:
        print(f"bert_memory.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
