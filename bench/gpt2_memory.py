#!/usr/bin/python3
"""Peak resident memory of GPT-2 small inference against the size of its weights (issue 11: at most weights
+ 15 %). Runs the `gpt2` example on a GPT-2-small-shaped directory with random weights (written by
tools/reference/make_gpt2_small_random.py when --model-dir does not exist yet, ~550 MB) and reads each
process's own peak RSS (os.wait4):

  cmake --preset release && cmake --build build/release --target gpt2 -j2
  /usr/bin/python3 bench/gpt2_memory.py build/release/examples/gpt2 [--model-dir /tmp/gpt2-small-random]
                                       [--dtype bf16 | --pack-weights]

Three runs: loading alone (`--show-top` of a one-token prompt: load + one forward of one token), load + a
128-token forward (`--show-top`), and load + 32 greedy tokens after that prompt (KV cache). The weights' size
is the bytes of the parameters in model.safetensors (the causal-mask buffers the official files carry are not
loaded and not counted). With --pack-weights (gpt2's flag) every weight matrix is held only in the packed
kernel's order, float32: the same bytes as the float weights. MB = 10^6 bytes. Exit status 0, 1 when a run
fails, 2 for bad arguments.
"""
import argparse
import re
import sys

from peak_memory import check_binary, ensure_model, print_table, weight_bytes

BF16_MATRIX = re.compile(r"(^|\.)(wte|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")
# The causal-mask buffers the official files carry: not parameters, not loaded.
MASK_BUFFER = re.compile(r"(^|\.)attn\.(bias|masked_bias)$")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gpt2", help="the gpt2 example binary (build/release/examples/gpt2)")
    ap.add_argument("--model-dir", default="/tmp/gpt2-small-random")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="gpt2's --dtype: bf16 holds wte and the Conv1D weights only as bfloat16")
    ap.add_argument("--pack-weights", action="store_true",
                    help="gpt2's --pack-weights: the weight matrices held only packed (float32)")
    args = ap.parse_args()
    if args.pack_weights and args.dtype == "bf16":
        ap.error("--pack-weights packs float32 weights: not with --dtype bf16")
    if not check_binary("gpt2_memory.py", args.gpt2, "gpt2"):
        return 2
    weights = ensure_model("gpt2_memory.py", args.model_dir, "make_gpt2_small_random.py")
    sizes = weight_bytes(weights, lambda name: BF16_MATRIX.search(name), lambda name: MASK_BUFFER.search(name))
    prompt = " ".join(["the"] * 128)  # 128 tokens with GPT-2's tokenizer (" the" is one token)
    command = [args.gpt2, "--model", args.model_dir, "--threads", str(args.threads), "--dtype", args.dtype]
    if args.pack_weights:
        command.append("--pack-weights")
    runs = [("load + forward of 1 token", command + ["--prompt", "", "--show-top", "1"]),
            ("load + forward of 128 tokens", command + ["--prompt", prompt, "--show-top", "1"]),
            ("load + 128-token prompt + 32 greedy tokens",
             command + ["--prompt", prompt, "--greedy", "--max-new-tokens", "32"])]
    return print_table("gpt2_memory.py", weights, sizes, args.dtype, "wte and the Conv1D weights", runs,
                       f"{args.threads} threads, ")


if __name__ == "__main__":
    sys.exit(main())
