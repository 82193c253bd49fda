"""What bench/gpt2_memory.py and bench/bert_memory.py share: the weights' bytes from a safetensors header, the
random model directory written once, and the table of each run's peak RSS against the weights (issue 11's
goal: at most the weights + 15 %). MB = 10^6 bytes."""
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

sys.path.insert(0, HERE)
from table import run_child  # noqa: E402  (bench/table.py: a child's output and its own peak RSS)


def weight_bytes(path, held_as_bf16, skipped=lambda name: False):
    """Bytes of the float32 parameters in a safetensors file (without the tensors `skipped` names), and the
    bytes a model holds with --dtype bf16: the tensors held_as_bf16(name) names at 2 bytes an element, the
    rest still float."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = bf16 = 0
    for name, info in header.items():
        if name == "__metadata__" or skipped(name):
            continue
        begin, end = info["data_offsets"]
        total += end - begin
        bf16 += (end - begin) // 2 if held_as_bf16(name) else end - begin
    return total, bf16


def check_binary(program, binary, target):
    """False (after one line on stderr) when the example binary is not there."""
    if os.access(binary, os.X_OK):
        return True
    print(f"{program}: {binary} not found: build it (cmake --build build/release --target {target})", file=sys.stderr)
    return False


def ensure_model(program, model_dir, writer):
    """model.safetensors in model_dir, written first by tools/reference/`writer` when it is missing."""
    weights = os.path.join(model_dir, "model.safetensors")
    if not os.path.exists(weights):
        print(f"{program}: writing {model_dir} (random weights, once)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "reference", writer), model_dir], check=True)
    return weights


def print_table(program, weights, sizes, dtype, bf16_what, runs, settings="", check=None):
    """Runs each (label, argv) of `runs` and prints its peak RSS against the float weights and, with bf16,
    against the weights as held. sizes = weight_bytes(...); check(label, stdout), when given, raises
    RuntimeError for an output that is not what the run should print. Returns the exit status."""
    size, bf16_size = sizes
    held = bf16_size if dtype == "bf16" else size
    print(f"weights: {size / 1e6:.1f} MB ({size} bytes of parameters in {weights}); goal: peak RSS <= weights + 15 % "
          f"= {held * 1.15 / 1e6:.1f} MB of the weights as held; {settings}--dtype {dtype}")
    if dtype == "bf16":
        print(f"weights as held with --dtype bf16: {bf16_size / 1e6:.1f} MB ({bf16_what} in bfloat16)")
        print("| run | peak RSS MB | / float weights | / weights as held |")
        print("|---|---|---|---|")
    else:
        print("| run | peak RSS MB | / weights |")
        print("|---|---|---|")
    try:
        for label, argv in runs:
            out, rss = run_child(argv, dict(os.environ), label)
            if check:
                check(label, out)
            held_column = f" {rss / held:.3f} |" if dtype == "bf16" else ""
            print(f"| {label} | {rss / 1e6:.1f} | {rss / size:.3f} |{held_column}", flush=True)
    except RuntimeError as e:
        print(f"{program}: {e}", file=sys.stderr)
        return 1
    return 0
