#!/usr/bin/env python3
"""Write a GPT-2-small-shaped Hugging Face model directory with random weights, for measuring the loader
and the `gpt2` example on a model of the real size (memory, load time) without downloading GPT-2.

Usage:

    /usr/bin/python3 tools/reference/make_gpt2_small_random.py OUT_DIR [--vocab-dir DIR] [--seed S]
                                                               [--no-mask-buffers]
    build/release/examples/gpt2 --model OUT_DIR --show-top 5

OUT_DIR (created if needed; refused inside the repository, the model is ~550 MB) receives:

  config.json         openai-community/gpt2's GPT2Config: vocab 50257, 1024 positions, 768 channels,
                      12 layers of 12 heads, gelu_new
  model.safetensors   the official file's layout: F32, keys without "transformer.", Conv1D weights stored
                      (in, out), the buffers "h.{i}.attn.bias" ((1, 1, 1024, 1024) causal mask, 4 MB each)
                      and "h.{i}.attn.masked_bias" unless --no-mask-buffers, no lm_head.weight (tied).
                      124,439,808 parameters = 497,759,232 bytes of weights.
  the tokenizer       vocab.json + merges.txt, or encoder.json + vocab.bpe, copied from --vocab-dir
                      (default: $EIGENFORMER_DATA_DIR/gpt2, else <repo>/../shared/data/gpt2)

The weights follow transformers' GPT2PreTrainedModel._init_weights (normal(0, 0.02), c_proj weights
normal(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1 / 0), drawn from a torch.Generator seeded with
--seed, so the same seed writes the same bytes. The text such a model generates is noise; it exists for
its size.

Needs only torch: the safetensors writer is make_safetensors_fixtures.py's (the reference writer's layout),
here streaming one tensor at a time so the script never holds the whole file. The file is written under a
temporary name and renamed when complete, so an interrupted run leaves no half-written model.safetensors.
"""

import argparse
import json
import math
import os
import shutil
import sys

import torch

from make_safetensors_fixtures import write_streamed_f32

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))

CONFIG = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12}


def default_vocab_dir():
    data = os.environ.get("EIGENFORMER_DATA_DIR")
    if data:
        return os.path.join(data, "gpt2")
    return os.path.normpath(os.path.join(REPO, "..", "shared", "data", "gpt2"))


def hf_config():
    """openai-community/gpt2's config.json (the fields a loader must ignore included)."""
    c = dict(CONFIG)
    c.update({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
              "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
              "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "resid_pdrop": 0.1,
              "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
              "summary_type": "cls_index", "summary_use_proj": True,
              "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
              "vocab_size": 50257})
    return c


def tensor_specs(with_buffers):
    """(name, shape, kind) in the file's order: sorted by name, as the reference writer sorts one dtype."""
    v, p, c, n = CONFIG["vocab_size"], CONFIG["n_positions"], CONFIG["n_embd"], CONFIG["n_layer"]
    specs = [("wte.weight", (v, c), "normal"), ("wpe.weight", (p, c), "normal"),
             ("ln_f.weight", (c,), "ones"), ("ln_f.bias", (c,), "zeros")]
    for i in range(n):
        h = "h.%d." % i
        specs += [(h + "ln_1.weight", (c,), "ones"), (h + "ln_1.bias", (c,), "zeros"),
                  (h + "attn.c_attn.weight", (c, 3 * c), "normal"), (h + "attn.c_attn.bias", (3 * c,), "zeros"),
                  (h + "attn.c_proj.weight", (c, c), "proj"), (h + "attn.c_proj.bias", (c,), "zeros"),
                  (h + "ln_2.weight", (c,), "ones"), (h + "ln_2.bias", (c,), "zeros"),
                  (h + "mlp.c_fc.weight", (c, 4 * c), "normal"), (h + "mlp.c_fc.bias", (4 * c,), "zeros"),
                  (h + "mlp.c_proj.weight", (4 * c, c), "proj"), (h + "mlp.c_proj.bias", (c,), "zeros")]
        if with_buffers:
            specs += [(h + "attn.bias", (1, 1, p, p), "mask"), (h + "attn.masked_bias", (), "masked")]
    return sorted(specs, key=lambda s: s[0].encode())


def make_tensor(shape, kind, gen):
    if kind == "normal":
        return torch.empty(shape).normal_(0.0, 0.02, generator=gen)
    if kind == "proj":
        return torch.empty(shape).normal_(0.0, 0.02 / math.sqrt(2 * CONFIG["n_layer"]), generator=gen)
    if kind == "ones":
        return torch.ones(shape)
    if kind == "zeros":
        return torch.zeros(shape)
    if kind == "mask":
        p = shape[-1]
        return torch.tril(torch.ones(p, p)).view(shape)
    assert kind == "masked"
    return torch.tensor(-1e4)


def copy_tokenizer(vocab_dir, out):
    for pair in (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe")):
        if all(os.path.isfile(os.path.join(vocab_dir, f)) for f in pair):
            for f in pair:
                shutil.copyfile(os.path.join(vocab_dir, f), os.path.join(out, f))
            return pair
    raise SystemExit("%s: neither vocab.json + merges.txt nor encoder.json + vocab.bpe is there (--vocab-dir)"
                     % vocab_dir)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("out", help="output directory (outside the repository; ~550 MB)")
    ap.add_argument("--vocab-dir", default=default_vocab_dir(),
                    help="where the GPT-2 tokenizer files are (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=124, help="seed of the weights' generator (default: 124)")
    ap.add_argument("--no-mask-buffers", action="store_true",
                    help="leave out the h.{i}.attn.bias / attn.masked_bias buffers the official file has")
    args = ap.parse_args(argv)

    out = os.path.abspath(args.out)
    if os.path.commonpath([out, REPO]) == REPO:
        raise SystemExit("%s is inside the repository (%s); write the ~550 MB model elsewhere" % (out, REPO))
    os.makedirs(out, exist_ok=True)
    tokenizer = copy_tokenizer(args.vocab_dir, out)

    specs = tensor_specs(not args.no_mask_buffers)
    size = write_streamed_f32(os.path.join(out, "model.safetensors"), specs, make_tensor, args.seed)
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(hf_config(), indent=2, sort_keys=True) + "\n")

    params = sum(math.prod(s) for n, s, k in specs if k not in ("mask", "masked"))
    print("%s: model.safetensors %d bytes (%d parameters = %d bytes of F32 weights), config.json, %s"
          % (out, size, params, 4 * params, " + ".join(tokenizer)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
