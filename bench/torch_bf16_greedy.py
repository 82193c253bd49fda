#!/usr/bin/python3
"""PyTorch's side of bench/bf16_greedy.cpp: the same checkpoint and prompts, greedy in three ways.

  /usr/bin/python3 bench/torch_bf16_greedy.py --ours OURS.json

OURS.json is what `bf16_greedy --json` wrote: the checkpoint directory (a train_char_gpt --save directory:
config.json and model.safetensors with Hugging Face's GPT-2 names), the prompts' token ids and eigenformer's
fp32 and bfloat16-weight continuations. The model is the plain-torch GPT-2 of
tools/reference/make_gpt2_fixtures.py (Hugging Face's computation), continued greedily with its cache:
  fp32          the checkpoint as saved;
  bf16 weights  every Conv1D weight and the tied wte rounded to bfloat16, the arithmetic float (what
                eigenformer's to_bf16_weights() does);
  bf16          model.to(torch.bfloat16): weights and arithmetic in bfloat16, what torch_dtype=torch.bfloat16
                gives a PyTorch user.
Printed: how many prompts each gives the same new tokens as PyTorch's fp32, and how many of eigenformer's fp32 and
bfloat16-weight continuations equal PyTorch's fp32 and bf16-weight ones.
"""
import argparse
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "reference"))
from make_gpt2_fixtures import GPT2LMHeadModel  # noqa: E402


def read_safetensors(path):
    """{name: float32 tensor} from a safetensors file of F32 tensors (the format: an 8-byte little-endian header
    length, the JSON header, then the data)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(info["shape"])
    return tensors


def load(directory):
    with open(os.path.join(directory, "config.json")) as f:
        hf = json.load(f)
    cfg = {k: hf[k] for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "layer_norm_epsilon",
                              "resid_pdrop", "embd_pdrop", "attn_pdrop")}
    model = GPT2LMHeadModel(cfg)
    missing, unexpected = model.load_state_dict(read_safetensors(os.path.join(directory, "model.safetensors")),
                                                strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:  # the LM head is wte, tied
        raise SystemExit(f"{directory}: missing {missing}, unexpected {unexpected}")
    return model.eval()


def greedy(model, prompt, new_tokens):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        logits, past = model(ids)
        out = []
        for _ in range(new_tokens):
            nxt = logits[:, -1].float().argmax(dim=-1, keepdim=True)
            out.append(int(nxt))
            logits, past = model(nxt, past)
    return list(prompt) + out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True, help="the JSON file bf16_greedy --json wrote")
    args = ap.parse_args()
    with open(args.ours) as f:
        ours = json.load(f)
    prompts, new = ours["prompts"], len(ours["fp32"][0]) - len(ours["prompts"][0])
    torch.set_num_threads(1)

    model = load(ours["checkpoint"])
    fp32 = [greedy(model, p, new) for p in prompts]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_attn.weight") or name.endswith("c_proj.weight") or name.endswith("c_fc.weight") \
                    or name == "transformer.wte.weight":
                p.copy_(p.bfloat16().float())
    bf16_weights = [greedy(model, p, new) for p in prompts]
    model = load(ours["checkpoint"]).to(torch.bfloat16)
    bf16 = [greedy(model, p, new) for p in prompts]

    def same(a, b):
        return sum(x == y for x, y in zip(a, b))

    n = len(prompts)
    print(f"{n} prompts, {new} greedy tokens each, checkpoint {ours['checkpoint']}")
    print(f"PyTorch fp32 weights rounded to bfloat16, float arithmetic: {same(bf16_weights, fp32)} of {n} prompts "
          f"the same as PyTorch fp32")
    print(f"PyTorch model.to(torch.bfloat16): {same(bf16, fp32)} of {n} prompts the same as PyTorch fp32")
    print(f"eigenformer fp32 against PyTorch fp32: {same(ours['fp32'], fp32)} of {n} the same")
    print(f"eigenformer bfloat16 weights against PyTorch's bf16 weights: {same(ours['bf16'], bf16_weights)} of {n} "
          f"the same")
    print(f"eigenformer bfloat16 weights against PyTorch fp32: {same(ours['bf16'], fp32)} of {n} the same")


if __name__ == "__main__":
    main()
