#!/usr/bin/python3
"""Peak resident memory of BERT-base inference against the size of its weights (issue 11: at most weights
+ 15 %). Runs the `bert` example on a bert-base-uncased-shaped directory with random weights (written by
tools/reference/make_bert_base_random.py when --model-dir does not exist yet, ~440 MB) and reads each
process's own peak RSS (os.wait4):

  cmake --preset release && cmake --build build/release --target bert -j2
  /usr/bin/python3 bench/bert_memory.py build/release/examples/bert [--model-dir /tmp/bert-base-random]
                                       [--dtype bf16 | --pack-weights]

Two runs of `bert --fill-mask TEXT --top-k 5`: a short prompt ("paris is the [MASK] of france .", 9 tokens with
[CLS] and [SEP]: mostly the load) and a 128-token one ("[MASK]" and 125 times "the", one token each with that
directory's vocab.txt). The weights' size is the bytes of every tensor in model.safetensors. With --dtype bf16 the
model holds the word embeddings and every Linear weight (query / key / value / dense) as bfloat16, 2 bytes an
element, the rest (position and token-type embeddings, biases, LayerNorm) as float. With --pack-weights (bert's
flag) every Linear weight is held only in the packed kernel's order, float32: the same bytes as the float
weights. MB = 10^6 bytes. Exit status 0, 1 when a run fails, 2 for bad arguments.
"""
import argparse
import re
import sys

from peak_memory import check_binary, ensure_model, print_table, weight_bytes

BF16_MATRIX = re.compile(r"(^|\.)(word_embeddings|query|key|value|dense)\.weight$")
SEQUENCE = 128  # tokens of the long prompt, [CLS] and [SEP] included


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bert", help="the bert example binary (build/release/examples/bert)")
    ap.add_argument("--model-dir", default="/tmp/bert-base-random")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="bert's --dtype: bf16 holds word_embeddings and the Linear weights only as bfloat16")
    ap.add_argument("--pack-weights", action="store_true",
                    help="bert's --pack-weights: the Linear weights held only packed (float32)")
    args = ap.parse_args()
    if args.pack_weights and args.dtype == "bf16":
        ap.error("--pack-weights packs float32 weights: not with --dtype bf16")
    if not check_binary("bert_memory.py", args.bert, "bert"):
        return 2
    weights = ensure_model("bert_memory.py", args.model_dir, "make_bert_base_random.py")
    sizes = weight_bytes(weights, lambda name: BF16_MATRIX.search(name))
    # [CLS] [MASK] the ... the [SEP]: "the" is one token with make_bert_base_random.py's vocab.txt.
    long_prompt = " ".join(["[MASK]"] + ["the"] * (SEQUENCE - 3))
    command = [args.bert, "--model", args.model_dir, "--top-k", "5", "--dtype", args.dtype]
    if args.pack_weights:
        command.append("--pack-weights")
    runs = [("load + fill-mask of 9 tokens", command + ["--fill-mask", "paris is the [MASK] of france ."]),
            (f"load + fill-mask of {SEQUENCE} tokens", command + ["--fill-mask", long_prompt])]

    def check(label, out):
        if len(out.splitlines()) != 5:
            raise RuntimeError(f"{label}: expected 5 lines of predictions, got {len(out.splitlines())}")

    return print_table("bert_memory.py", weights, sizes, args.dtype, "word_embeddings and the Linear weights", runs,
                       check=check)


if __name__ == "__main__":
    sys.exit(main())
