#!/usr/bin/env python3
"""Write a bert-base-uncased-shaped Hugging Face model directory with random weights, for measuring the loader
and the `bert` example on a model of the real size (memory, speed) without downloading BERT.

Usage:

    /usr/bin/python3 tools/reference/make_bert_base_random.py OUT_DIR [--seed S]
    build/release/examples/bert --model OUT_DIR --fill-mask "paris is the [MASK] of france ." --top-k 5

OUT_DIR (created if needed; refused inside the repository, the model is ~440 MB) receives:

  config.json            google-bert/bert-base-uncased's BertConfig: vocab 30522, 512 positions, 2 token
                         types, 768 channels, 12 layers of 12 heads, intermediate 3072, gelu, eps 1e-12
  model.safetensors      F32, the key layout transformers saves for a BertForMaskedLM: "bert.embeddings.*"
                         and "bert.encoder.layer.{i}.*" (LayerNorm parameters named weight / bias), then
                         "cls.predictions.bias" and "cls.predictions.transform.*"; no pooler and no
                         cls.predictions.decoder.weight (tied to the word embeddings).
                         109,514,298 parameters = 438,057,192 bytes of weights.
  vocab.txt              30522 lines: [PAD], [unused0]..[unused98], [UNK], [CLS], [SEP], [MASK] at
                         bert-base-uncased's ids 0-103, then a few lower-case words ("the", "paris", ...) and
                         the single characters a-z, 0-9 and .,!?' (each once), then [unused99], [unused100], ...
                         up to 30522 entries. Enough for "paris is the [MASK] of france ." and for prompts of
                         repeated "the" (one token each); any other word falls back to its characters.
  tokenizer_config.json  {"do_lower_case": true}

The weights follow transformers' BertPreTrainedModel._init_weights (Linear and Embedding weights
normal(0, 0.02), biases 0, LayerNorm 1 / 0), drawn from a torch.Generator seeded with --seed, so the same
seed writes the same bytes. The words such a model predicts are noise; it exists for its size.

Needs only torch: the safetensors writer is make_safetensors_fixtures.py's (the reference writer's layout),
here streaming one tensor at a time so the script never holds the whole file. The file is written under a
temporary name and renamed when complete, so an interrupted run leaves no half-written model.safetensors.
"""

import argparse
import json
import math
import os
import string
import sys

import torch

from make_safetensors_fixtures import write_streamed_f32

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))

CONFIG = {"vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_size": 768,
          "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
PARAMETERS = 109514298  # BertForMaskedLM of bert-base-uncased without the pooler (the decoder weight is tied)

# The lower-case words and characters vocab.txt spells; every other entry is a special or [unusedN] token.
WORDS = ["the", "a", "of", "and", "is", "city", "paris", "capital", "france", "big"]
CHARACTERS = list(string.ascii_lowercase) + list(string.digits) + list(".,!?'")


def hf_config():
    """google-bert/bert-base-uncased's config.json (the fields a loader must ignore included)."""
    c = dict(CONFIG)
    c.update({"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
              "model_type": "bert", "pad_token_id": 0, "position_embedding_type": "absolute",
              "transformers_version": "4.30.2", "use_cache": True})
    return c


def tensor_specs():
    """(name, shape, kind) in the file's order: sorted by name, as the reference writer sorts one dtype."""
    v, p, t = CONFIG["vocab_size"], CONFIG["max_position_embeddings"], CONFIG["type_vocab_size"]
    c, m, n = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["num_hidden_layers"]

    def linear(prefix, n_in, n_out):
        return [(prefix + ".weight", (n_out, n_in), "normal"), (prefix + ".bias", (n_out,), "zeros")]

    def layer_norm(prefix):
        return [(prefix + ".weight", (c,), "ones"), (prefix + ".bias", (c,), "zeros")]

    e = "bert.embeddings."
    specs = [(e + "word_embeddings.weight", (v, c), "normal"),
             (e + "position_embeddings.weight", (p, c), "normal"),
             (e + "token_type_embeddings.weight", (t, c), "normal")] + layer_norm(e + "LayerNorm")
    for i in range(n):
        h = "bert.encoder.layer.%d." % i
        for proj in ("query", "key", "value"):
            specs += linear(h + "attention.self." + proj, c, c)
        specs += linear(h + "attention.output.dense", c, c) + layer_norm(h + "attention.output.LayerNorm")
        specs += linear(h + "intermediate.dense", c, m)
        specs += linear(h + "output.dense", m, c) + layer_norm(h + "output.LayerNorm")
    specs += [("cls.predictions.bias", (v,), "zeros")]
    specs += linear("cls.predictions.transform.dense", c, c) + layer_norm("cls.predictions.transform.LayerNorm")
    assert len({s[0] for s in specs}) == len(specs), "duplicate tensor name"
    return sorted(specs, key=lambda s: s[0].encode())


def make_tensor(shape, kind, gen):
    if kind == "normal":
        return torch.empty(shape).normal_(0.0, 0.02, generator=gen)
    if kind == "ones":
        return torch.ones(shape)
    assert kind == "zeros"
    return torch.zeros(shape)


def vocabulary():
    """vocab.txt's lines, id order: bert-base-uncased's special tokens at their ids, a few words and characters,
    then [unusedN] to the model's vocabulary size."""
    tokens = ["[PAD]"] + ["[unused%d]" % i for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokens.index("[UNK]") == 100 and tokens.index("[MASK]") == 103
    for token in WORDS + CHARACTERS:
        if token not in tokens:  # "a" is both a word and a character: spelled once
            tokens.append(token)
    unused = 99
    while len(tokens) < CONFIG["vocab_size"]:
        tokens.append("[unused%d]" % unused)
        unused += 1
    assert len(tokens) == CONFIG["vocab_size"] and len(set(tokens)) == len(tokens), "vocab.txt: bad size or duplicate"
    return tokens


def write_text(path, text):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("out", help="output directory (outside the repository; ~440 MB)")
    ap.add_argument("--seed", type=int, default=110, help="seed of the weights' generator (default: 110)")
    args = ap.parse_args(argv)

    out = os.path.abspath(args.out)
    if os.path.commonpath([out, REPO]) == REPO:
        raise SystemExit("%s is inside the repository (%s); write the ~440 MB model elsewhere" % (out, REPO))

    specs = tensor_specs()
    params = sum(math.prod(s) for _, s, _ in specs)
    assert params == PARAMETERS, "%d parameters, bert-base-uncased's BertForMaskedLM has %d" % (params, PARAMETERS)
    vocab = vocabulary()

    os.makedirs(out, exist_ok=True)
    size = write_streamed_f32(os.path.join(out, "model.safetensors"), specs, make_tensor, args.seed)
    write_text(os.path.join(out, "config.json"), json.dumps(hf_config(), indent=2, sort_keys=True) + "\n")
    write_text(os.path.join(out, "vocab.txt"), "".join(t + "\n" for t in vocab))
    write_text(os.path.join(out, "tokenizer_config.json"), json.dumps({"do_lower_case": True}, indent=2) + "\n")

    print("%s: model.safetensors %d bytes (%d parameters = %d bytes of F32 weights), config.json, vocab.txt "
          "(%d tokens), tokenizer_config.json" % (out, size, params, 4 * params, len(vocab)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
