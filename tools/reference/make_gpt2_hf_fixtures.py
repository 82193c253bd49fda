#!/usr/bin/env python3
"""Write a tiny Hugging Face GPT-2 model directory for eigenformer's loader tests (tests/data/gpt2_tiny_hf/)
and its reference outputs (tests/data/gpt2_tiny_hf_reference.json).

Usage (from anywhere; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_gpt2_hf_fixtures.py [--out DIR]

The directory looks like a snapshot of openai-community/gpt2, scaled down:

  config.json         Hugging Face's GPT2Config fields, including the ones a loader must ignore
                      (bos/eos ids, n_ctx, summary_*, task_specific_params, transformers_version)
  model.safetensors   F32, keys WITHOUT the "transformer." prefix ("wte.weight", "h.0.attn.c_attn.weight"),
                      Conv1D weights (in, out), plus the buffers "h.{i}.attn.bias" (the (1, 1, P, P) causal
                      mask) and "h.{i}.attn.masked_bias" (-1e4), and no lm_head.weight (tied), as the
                      official file has them
  vocab.json          a byte-level BPE vocabulary: the 256 byte tokens (ids in GPT-2's byte-to-unicode
  merges.txt          order), 13 merges learnt by hand from "the cat sat on the mat", "<|endoftext|>" last;
                      270 tokens = vocab_size, so the example command line runs on the directory

The model is make_gpt2_fixtures.py's plain-torch GPT-2 (Hugging Face's semantics) with its test parameter
values (4 decimals, O(1) scale), on vocab 270, 16 positions, 8 channels, 2 layers of 2 heads.

The reference file (eigenformer-fixtures format, fixture_io.py) records:
  * "logits":     eval-mode logits (1, 7, 270) for fixed input ids;
  * "next_token": the prompt "the cat", its ids (BPE by hand below), and the 3 most probable next tokens
                  with their softmax probabilities and spellings (what `gpt2 --show-top 3` prints);
  * "greedy":     greedy decoding of the same prompt: `max_new_tokens` argmax steps (each a full forward of
                  the ids so far), stopping early at `eos_token_id`; the new `ids` and the `text` Hugging
                  Face's GPT2Tokenizer.decode gives for prompt + new ids (bytes decoded as UTF-8, errors
                  replaced), what `gpt2 --greedy --max-new-tokens 3` prints;
  * "attentions": the prompt "the cat sat on the mat", its ids, and every layer's attention weights
                  (1, NH, T, T) after the softmax (what Hugging Face's output_attentions returns), what
                  `gpt2 --svg` draws.

The safetensors writer is make_safetensors_fixtures.py's (the format's reference writer layout). Every run
writes the same bytes.
"""

import os
import sys

os.environ["ATEN_CPU_CAPABILITY"] = "default"
# OpenBLAS picks its GEMM kernel by CPU (OPENBLAS_CORETYPE overrides it), and the kernels differ in the last
# bits: the committed files were written with its baseline kernel, which every x86-64 CPU runs.
os.environ["OPENBLAS_CORETYPE"] = "Prescott"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402

import torch  # noqa: E402

from fixture_io import data_gen, enc, write_fixture  # noqa: E402
from make_gpt2_fixtures import GPT2LMHeadModel, test_parameters  # noqa: E402
from make_safetensors_fixtures import file_bytes, raw_bytes, write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

MERGES = ["Ġ t", "h e", "Ġt he", "a t", "Ġ c", "Ġc at", "Ġ s", "Ġs at", "Ġ o", "Ġo n", "Ġ m", "Ġm at", "t he"]
N_VOCAB = 256 + len(MERGES) + 1
CONFIG = {"vocab_size": N_VOCAB, "n_positions": 16, "n_embd": 8, "n_layer": 2, "n_head": 2,
          "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
          "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "initializer_range": 0.02}


def bytes_to_unicode():
    """GPT-2's printable spelling of each byte (printable Latin-1 bytes stand for themselves)."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    spelling, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelling[b] = chr(b)
        else:
            spelling[b] = chr(0x100 + extra)
            extra += 1
    return spelling


def vocabulary():
    spelling = bytes_to_unicode()
    printable = [b for b in range(256) if ord(spelling[b]) == b]
    others = [b for b in range(256) if ord(spelling[b]) != b]
    tokens = [spelling[b] for b in printable + others]  # GPT-2's encoder.json order of the byte tokens
    tokens += [m.replace(" ", "") for m in MERGES]
    tokens.append("<|endoftext|>")
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    return {t: i for i, t in enumerate(tokens)}


def bpe(piece, vocab):
    """Byte-level BPE of one pre-tokenised piece (already spelled): merge the lowest-ranked pair first."""
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(MERGES)}
    parts = list(piece)
    while len(parts) > 1:
        pairs = [(ranks.get((a, b), len(ranks)), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        r, i = min(pairs)
        if r == len(ranks):
            break
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [vocab[p] for p in parts]


def decode(ids, by_id):
    """GPT2Tokenizer.decode: the spellings joined, each character back to its byte, UTF-8 with errors replaced."""
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    return bytes(byte_of[c] for c in "".join(by_id[i] for i in ids)).decode("utf-8", errors="replace")


def hf_state_dict(model, cfg):
    """The official layout: GPT2Model's keys (no prefix) plus the attention buffers."""
    out = {}
    for name, t in model.state_dict().items():
        if name.startswith("transformer."):  # lm_head.weight is wte's, tied: the official file leaves it out
            out[name[len("transformer."):]] = t.detach().clone()
    p = cfg["n_positions"]
    for i in range(cfg["n_layer"]):
        out["h.%d.attn.bias" % i] = torch.tril(torch.ones(p, p)).view(1, 1, p, p)
        out["h.%d.attn.masked_bias" % i] = torch.tensor(-1e4)
    return out


def safetensors_bytes(tensors):
    # All F32: the reference writer's order is then by name.
    header = {"__metadata__": {"format": "pt"}}
    data = b""
    for name in sorted(tensors, key=lambda n: n.encode()):
        b = raw_bytes(tensors[name].float())
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return file_bytes(header, data)


def hf_config():
    c = dict(CONFIG)
    c.update({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_ctx": CONFIG["n_positions"],
              "n_inner": None, "bos_token_id": N_VOCAB - 1, "eos_token_id": N_VOCAB - 1,
              "reorder_and_upcast_attn": False, "scale_attn_by_inverse_layer_idx": False,
              "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
              "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
              "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
              "torch_dtype": "float32", "transformers_version": "4.30.2", "use_cache": True})
    return c


def main(argv=None):
    default_out = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--out", default=default_out, help="output directory (default: <repo>/tests/data)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    model = GPT2LMHeadModel(CONFIG)
    test_parameters(model, 1601)
    model.eval()
    vocab = vocabulary()
    ids = torch.randint(0, N_VOCAB, (1, 7), generator=data_gen(1602))
    prompt = "the cat"
    prompt_ids = bpe("the", vocab) + bpe("Ġcat", vocab)
    mat_prompt = "the cat sat on the mat"
    mat_ids = bpe("the", vocab) + [i for w in mat_prompt.split()[1:] for i in bpe("Ġ" + w, vocab)]
    # The softmax output is what each attention's dropout receives: a hook on it records the weights.
    attentions = []
    hooks = [blk.attn.attn_dropout.register_forward_hook(lambda m, inp, out: attentions.append(inp[0].clone()))
             for blk in model.transformer.h]
    with torch.no_grad():
        model(torch.tensor([mat_ids]))
    for h in hooks:
        h.remove()
    with torch.no_grad():
        logits, _ = model(ids)
        probs = torch.softmax(model(torch.tensor([prompt_ids]))[0][0, -1], dim=-1)
        greedy_ids, eos = [], N_VOCAB - 1
        for _ in range(3):
            step_logits = model(torch.tensor([prompt_ids + greedy_ids]))[0][0, -1]
            greedy_ids.append(int(torch.argmax(step_logits)))
            if greedy_ids[-1] == eos:
                break
    top = torch.topk(probs, 3)
    by_id = {i: t for t, i in vocab.items()}
    table = [{"id": int(i), "probability": float(p), "token": by_id[int(i)]} for p, i in zip(top.values, top.indices)]

    d = os.path.join(args.out, "gpt2_tiny_hf")
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "model.safetensors"), safetensors_bytes(hf_state_dict(model, CONFIG)))
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(hf_config(), indent=2, sort_keys=True) + "\n")
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")) + "\n")
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n" + "\n".join(MERGES) + "\n")

    cases = [{"name": "logits", "config": CONFIG, "input_ids": enc(ids), "logits": enc(logits)},
             {"name": "next_token", "prompt": prompt, "ids": prompt_ids, "top": table},
             {"name": "greedy", "prompt": prompt, "prompt_ids": prompt_ids, "max_new_tokens": 3, "eos_token_id": eos,
              "ids": greedy_ids, "text": decode(prompt_ids + greedy_ids, by_id)},
             {"name": "attentions", "prompt": mat_prompt, "ids": mat_ids, "attentions": [enc(a) for a in attentions]}]
    size = write_fixture(os.path.join(args.out, "gpt2_tiny_hf_reference.json"), cases)
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print("%s: %d bytes; gpt2_tiny_hf_reference.json: %d bytes" % (d, total, size))
    if total >= 40_000:
        raise SystemExit("make_gpt2_hf_fixtures.py: gpt2_tiny_hf/ is over its 40 KB budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
