#!/usr/bin/env python3
"""Generate PyTorch reference fixtures for eigenformer's module-tree tests (tests/data/nn_module.json).

Usage (from anywhere; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_module_fixtures.py [--out DIR]

What PyTorch itself reports about a module, so tests/nn/test_module.cpp compares against torch rather than
against strings typed by hand:
  * "repr" cases: str(module) for single layers (Linear, Embedding, Dropout, LayerNorm, the activations,
    Softmax, Sequential) and for the attention family's twins from make_attention_fixtures.py
    (MultiHeadSelfAttention, the per-head layout, SelfAttentionV1/V2, CausalAttention, FeedForward,
    TransformerBlock), built with the sizes the C++ tests use;
  * the "composite" case: a small nested model (an Embedding, a ModuleList of two blocks, a head, an
    activation, one persistent and one non-persistent buffer) with its repr, named_parameters (names and
    shapes, in order), named_buffers, the keys of its state_dict and named_modules (names and class names).
No values are recorded: nothing here depends on random draws, so every run writes the same bytes.
"""

import sys

import torch
import torch.nn as nn

from fixture_io import output_dir, write_budgeted
import make_attention_fixtures as attention


class Block(nn.Module):
    """One child block of the composite: normalise, project, drop."""

    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.1)


class Composite(nn.Module):
    """The nested model of test_module.cpp; the C++ twin lists its members in this order."""

    def __init__(self, vocab=10, dim=4, n_blocks=2, out=3):
        super().__init__()
        self.register_buffer("mask", torch.ones(2, 2))
        self.register_buffer("scratch", torch.zeros(3), persistent=False)
        self.wte = nn.Embedding(vocab, dim, padding_idx=0)
        self.h = nn.ModuleList([Block(dim) for _ in range(n_blocks)])
        self.head = nn.Linear(dim, out, bias=False)
        self.act = nn.GELU(approximate="tanh")


def repr_cases():
    layers = [
        ("linear", nn.Linear(768, 3072)),
        ("linear_no_bias", nn.Linear(3, 2, bias=False)),
        ("embedding_padding", nn.Embedding(30522, 768, padding_idx=0)),
        ("embedding_negative_padding", nn.Embedding(10, 4, padding_idx=-1)),
        ("embedding", nn.Embedding(50257, 768)),
        ("dropout", nn.Dropout(0.1)),
        ("dropout_default", nn.Dropout()),
        ("layernorm", nn.LayerNorm(768)),
        ("layernorm_plain", nn.LayerNorm(12, eps=1e-12, elementwise_affine=False)),
        ("gelu", nn.GELU()),
        ("gelu_tanh", nn.GELU(approximate="tanh")),
        ("relu", nn.ReLU()),
        ("softmax", nn.Softmax(dim=-1)),
        ("sequential", nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))),
        ("mse_loss", nn.MSELoss()),
        ("cross_entropy_loss", nn.CrossEntropyLoss()),
        # The attention family: the twins make_attention_fixtures.py computes its fixtures with.
        ("multi_head_attention", attention.MultiHeadSelfAttention(12, 3)),
        ("multi_head_attention_per_head", attention.MultiHeadAttentionPerHead(6, 2)),
        ("self_attention_v1", attention.SelfAttentionV1(3, 2)),
        ("self_attention_v2", attention.SelfAttentionV2(3, 2)),
        ("causal_attention", attention.CausalAttention(3, 2, 6, 0.3)),
        ("feedforward", attention.FeedForward(12, 16)),
        ("transformer_block", attention.TransformerBlock(12, 3, 16)),
    ]
    return [{"name": "repr_" + name, "kind": "repr", "repr": str(m)} for name, m in layers]


def composite_case():
    m = Composite()
    return {
        "name": "composite",
        "kind": "composite",
        "repr": str(m),
        "named_parameters": [[n, list(p.shape)] for n, p in m.named_parameters()],
        "named_buffers": [[n, list(b.shape)] for n, b in m.named_buffers()],
        "state_dict_keys": list(m.state_dict().keys()),
        "named_modules": [[n, type(x).__name__] for n, x in m.named_modules()],
    }


def main(argv=None):
    out = output_dir(__doc__, argv)
    cases = repr_cases() + [composite_case()]
    write_budgeted(out, "nn_module.json", cases, 20_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
