#!/usr/bin/env python3
"""Recompute the tutorials' worked examples that eigenformer's tests check (tests/data/worked_examples.json).

Usage (from anywhere; Debian's PyTorch 1.13, no MKL; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_worked_examples.py [--out DIR] [--data DIR] [--reference FILE]

The tutorials the project follows (BERT from scratch = seed 000, the self-attention chapter of "LLMs from
scratch" = seed 001, the encoder chapter of "NLP with Transformers" = seed 004) print numbers along the way.
This script runs each listing's computation again with PyTorch, on the listing's inputs, and records what
the code gives, so the C++ tests compare against PyTorch and never against numbers typed in by hand. Where
the printed numbers do not follow from the code (a hand-rounded mean, a different random stream, a dropout
mask from another build), the entry's "note" says so and the code's numbers are kept.

Design notes:
  * PyTorch's native kernels (what the tutorials ran; the FMA-contracted AVX2 kernels eigenformer's random
    streams reproduce), not ATEN_CPU_CAPABILITY=default: the entries record seeded initialisations such as
    nn.Linear's. make_fixtures.check_native_fma refuses a CPU without them. One thread.
  * Values are rounded to 6 decimals (8 for the shortcut network's gradients, some below 1e-3), the precision
    the tests' tolerances are stated for; the tutorials themselves print 4. Flat lists in row-major order, the
    shape beside them where the test needs one.
  * causal_dropout needs bernoulli_ from the mt19937 stream, i.e. a PyTorch built without MKL such as Debian's;
    the script refuses a build with MKL, whose masks differ.
  * Two entries come from vocabularies, not from torch: bert_tokenizer_ids (seed 004's sentence through the
    WordPiece tokenizer of tokenizers/bert_reference.py on bert-base-uncased/vocab.txt) and gpt2_vocab
    (listings 1.24-1.26 on GPT-2's encoder.json). --data DIR (default: $EIGENFORMER_DATA_DIR, then
    ../shared/data next to the repository) must hold them.
  * The file is written with fixture_io.py's envelope: one case per worked example, "name" = the key the tests
    look up. Every run with the same BLAS (below) writes the same bytes.
  * Float32 matrix products go through the system BLAS (Debian: whichever library the libblas.so.3
    alternative points to; reference BLAS (libblas3) and OpenBLAS round some products differently in the
    last bit, which can move a 6th decimal by one). The script prints the library it ran with; the tests'
    tolerances allow for that difference.
  * With --reference FILE (default: ../shared/reference/worked-examples.json next to the repository, skipped
    when absent) the script prints, per entry, how its numbers compare with that file. It is read for the
    comparison only; nothing is taken from it.
"""

import os
import sys

os.environ.pop("ATEN_CPU_CAPABILITY", None)  # native kernels, see above
# OpenBLAS picks its GEMM kernel by CPU (OPENBLAS_CORETYPE overrides it), and the kernels differ in the last
# bits. Of Prescott, Sandybridge, Haswell and SkylakeX, run on an AMD Zen 5, Sandybridge's writes the
# committed file's bytes.
os.environ["OPENBLAS_CORETYPE"] = "Sandybridge"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json  # noqa: E402
import math  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fixture_io import fval, parse_args, write_budgeted  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
FILE_NAME = "worked_examples.json"


# ---------------------------------------------------------------------------
# Rounding
# ---------------------------------------------------------------------------

def r(x, digits=6):
    """A number or tensor rounded to `digits` decimals: a float, or a flat row-major list of floats.
    Infinities become fixture_io's "inf"/"-inf" strings (the envelope is strict JSON)."""
    if isinstance(x, torch.Tensor) and x.dim() == 0:
        x = x.item()
    elif isinstance(x, torch.Tensor):
        return [r(v, digits) for v in x.detach().reshape(-1).tolist()]
    x = float(x)
    if math.isinf(x) or math.isnan(x):
        return fval(x, torch.float64)
    v = round(x, digits)
    return 0.0 if v == 0 else v  # no "-0.0" in the file


# ---------------------------------------------------------------------------
# Seed 001: LLMs from scratch, section 3.4 (self-attention with trainable weights)
# ---------------------------------------------------------------------------

def journey_inputs():
    # "Your journey starts with one step": the six 3-d embeddings the chapter defines in section 3.3 and
    # section 3.4 uses as `inputs` (the seed's excerpt starts after their definition).
    return torch.tensor([[0.43, 0.15, 0.89],   # Your
                         [0.55, 0.87, 0.66],   # journey
                         [0.57, 0.85, 0.64],   # starts
                         [0.22, 0.58, 0.33],   # with
                         [0.77, 0.25, 0.10],   # one
                         [0.05, 0.80, 0.55]])  # step


class SelfAttentionV1(nn.Module):
    """Listing 3.1: the three projections are rand(d_in, d_out) parameters, drawn query, key, value."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1)
        return weights @ values


class SelfAttentionV2(nn.Module):
    """Listing 3.2: the projections are bias-free nn.Linear layers (their default init), built query, key,
    value."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1)
        return weights @ values


def sa_step_by_step():
    inputs = journey_inputs()
    x_2 = inputs[1]
    d_in, d_out = inputs.shape[1], 2
    torch.manual_seed(123)
    W_query = torch.rand(d_in, d_out)
    W_key = torch.rand(d_in, d_out)
    W_value = torch.rand(d_in, d_out)
    query_2 = x_2 @ W_query
    keys = inputs @ W_key
    values = inputs @ W_value
    attn_score_22 = query_2.dot(keys[1])  # a 1-d dot: it may round differently from the matmul row below
    attn_scores_2 = query_2 @ keys.T
    d_k = keys.shape[-1]
    attn_weights_2 = torch.softmax(attn_scores_2 / d_k ** 0.5, dim=-1)
    context_vec_2 = attn_weights_2 @ values
    return {
        "name": "sa_step_by_step",
        "source": "001 section 3.4.1: manual_seed(123); W_query, W_key, W_value = torch.rand(3, 2) in that order",
        "inputs": r(inputs), "shape_inputs": list(inputs.shape),
        "W_query": r(W_query), "W_key": r(W_key), "W_value": r(W_value),
        "query_2": r(query_2), "attn_score_22": r(attn_score_22), "attn_scores_2": r(attn_scores_2),
        "attn_weights_2": r(attn_weights_2), "context_vec_2": r(context_vec_2),
    }


def self_attention_v1():
    torch.manual_seed(123)
    out = SelfAttentionV1(3, 2)(journey_inputs())
    return {"name": "self_attention_v1", "source": "001 listing 3.1: manual_seed(123); SelfAttention_v1(3, 2)",
            "output": r(out), "shape": list(out.shape)}


def self_attention_v2():
    torch.manual_seed(789)
    sa = SelfAttentionV2(3, 2)
    out = sa(journey_inputs())
    return {
        "name": "self_attention_v2",
        "source": "001 listing 3.2: manual_seed(789); SelfAttention_v2(3, 2) (nn.Linear weights (2, 3), default init)",
        "W_query_weight": r(sa.W_query.weight), "W_key_weight": r(sa.W_key.weight),
        "W_value_weight": r(sa.W_value.weight), "output": r(out), "shape": list(out.shape),
    }


# ---------------------------------------------------------------------------
# Seed 000: BERT from scratch, sections 1.4-1.19 and listings 1.1-1.25
# ---------------------------------------------------------------------------

def sa_next_day_is_bright():
    # Listing 1.1: "The next day is bright", 8-d embeddings.
    inputs = torch.tensor([[0.32, 0.21, 0.43, 0.21, 0.86, 0.67, 0.98, 0.23],   # The
                           [0.43, 0.56, 0.43, 0.56, 0.69, 0.21, 0.56, 0.21],   # next
                           [0.56, 0.21, 0.43, 0.21, 0.54, 0.12, 0.89, 0.98],   # day
                           [0.87, 0.34, 0.18, 0.32, 0.75, 0.12, 0.54, 0.92],   # is
                           [0.76, 0.21, 0.85, 0.34, 0.98, 0.23, 0.68, 0.34]],  # bright
                          dtype=torch.float32)
    d_in, d_out = inputs.shape[1], 4  # listing 1.2
    torch.manual_seed(123)  # listing 1.3
    W_query = torch.randn(d_in, d_out)
    W_key = torch.randn(d_in, d_out)
    W_value = torch.randn(d_in, d_out)
    queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value  # listing 1.4
    attn_scores = queries @ keys.T  # listing 1.5
    attn_scores_next = queries[1] @ keys.T
    d_k = keys.shape[-1]  # listing 1.6
    attn_weights = torch.softmax(attn_scores / d_k ** 0.5, dim=-1)
    attn_weights_next = torch.softmax(attn_scores_next / d_k ** 0.5, dim=-1)
    context = attn_weights @ values  # listing 1.7
    context_next = attn_weights_next @ values
    return {
        "name": "sa_next_day_is_bright",
        "source": "000 listings 1.1-1.7: manual_seed(123); W_query, W_key, W_value = torch.randn(8, 4) in that order",
        "inputs": r(inputs), "shape_inputs": list(inputs.shape),
        "W_query": r(W_query), "W_key": r(W_key), "W_value": r(W_value),
        "queries": r(queries), "keys": r(keys), "values": r(values), "attn_scores": r(attn_scores),
        "attn_weights": r(attn_weights), "context": r(context), "context_next": r(context_next),
        "note": "the seed prints other W matrices (not torch.randn's stream after manual_seed(123)) and numbers "
                "that follow from neither; these are what the listed code computes",
    }


def softmax_examples():
    # The score rows sections 1.11 and 1.13 work through by hand, and the simple normalisation x / sum(x)
    # section 1.11 contrasts softmax with.
    rows = [[1.0, 2.0, 3.0, 6.0], [1.0, 2.0, -3.0, 5.0], [2.0, 3.0, 5.0], [2.0, -math.inf, -math.inf],
            [2.0, 3.0, -math.inf]]
    cases = []
    for row in rows:
        x = torch.tensor(row)
        cases.append({"x": r(x), "softmax": r(torch.softmax(x, dim=-1))})
    x = torch.tensor([1.0, 2.0, 3.0, 6.0])
    return {"name": "softmax_examples", "source": "000 sections 1.11-1.13", "cases": cases,
            "simple_normalization": {"x": r(x), "out": r(x / x.sum())},
            "note": "the seed rounds its hand computations to 2-4 digits"}


def matmul_example():
    # Section 1.11 multiplies a (3, 2) by a (2, 3) matrix; it names A's rows [1, 2], [3, 4] and B's first
    # column [7, 10]. The rest of A and B continues the same counting.
    A = torch.arange(1.0, 7.0).reshape(3, 2)
    B = torch.arange(7.0, 13.0).reshape(2, 3)
    return {"name": "matmul_example", "source": "000 section 1.11 (entries (1, 1) = 27 and (2, 1) = 61 worked by hand)",
            "A": A.tolist(), "B": B.tolist(), "AB": r(A @ B)}


def tril_example():
    A = torch.tensor([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]])  # listing 1.9
    return {"name": "tril_example", "source": "000 listing 1.9", "A": r(A), "tril": r(torch.tril(A))}


def causal_weights():
    """Listings 1.11-1.12 on the scaled scores the seed prints: 0.5 + 0.25 i + 0.5 j for query i, key j."""
    i = torch.arange(5.0).reshape(5, 1)
    j = torch.arange(5.0).reshape(1, 5)
    scaled_scores = 0.5 + 0.25 * i + 0.5 * j
    seq_len = scaled_scores.size(0)
    causal_mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
    masked = scaled_scores.masked_fill(~causal_mask, float("-inf"))
    return scaled_scores, torch.softmax(masked, dim=-1)


def causal_softmax():
    scaled_scores, weights = causal_weights()
    return {"name": "causal_softmax", "source": "000 listings 1.10-1.12",
            "scaled_scores": r(scaled_scores), "causal_weights": r(weights),
            "note": "listing 1.11 prints scaled scores that do not come from the earlier listings' scores; they are "
                    "the input here, as printed (0.5 + 0.25 i + 0.5 j). The seed's printed weights differ in the "
                    "4th decimal in rows 2 and 5"}


def causal_dropout():
    _, weights = causal_weights()
    dropout = nn.Dropout(p=0.5)  # listing 1.13 (a new module is in training mode)
    torch.manual_seed(0)
    dropped = dropout(weights)
    return {"name": "causal_dropout",
            "source": "000 listing 1.13: nn.Dropout(0.5) in training mode on causal_softmax's weights after manual_seed(0)",
            "after_dropout_this_build": r(dropped),
            "note": "the mask depends on the build: without MKL (Debian's python3-torch) bernoulli_ draws from the "
                    "mt19937 stream and gives these values; pip wheels use MKL's generator. The seed's printed "
                    "mask matches neither"}


def mha_split_heads():
    torch.manual_seed(123)  # listing 1.14
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],    # The
                       [6.0, 5.0, 4.0, 3.0, 2.0, 1.0],    # kid
                       [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]])  # smiles
    b, num_tokens, d_in = x.shape  # listing 1.15
    d_out, num_heads = 6, 2
    head_dim = d_out // num_heads
    W_q = torch.randn(d_in, d_out)
    W_k = torch.randn(d_in, d_out)
    W_v = torch.randn(d_in, d_out)
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    # Listings 1.16-1.17: (b, tokens, d_out) -> (b, tokens, heads, head_dim) -> (b, heads, tokens, head_dim).
    q = q.view(b, num_tokens, num_heads, head_dim).transpose(1, 2)
    k = k.view(b, num_tokens, num_heads, head_dim).transpose(1, 2)
    v = v.view(b, num_tokens, num_heads, head_dim).transpose(1, 2)
    scores = q @ k.transpose(-1, -2)  # listing 1.18
    weights = torch.softmax(scores / math.sqrt(head_dim), dim=-1)
    context = weights @ v
    final = context.transpose(1, 2).contiguous().view(b, num_tokens, num_heads * head_dim)  # listing 1.19
    return {
        "name": "mha_split_heads",
        "source": "000 listings 1.14-1.19: manual_seed(123); W_q, W_k, W_v = torch.randn(6, 6); 2 heads of dim 3",
        "x": r(x), "W_q": r(W_q), "W_k": r(W_k), "W_v": r(W_v), "weights": r(weights),
        "context_per_head": r(context), "final_context": r(final),
        "note": "the listed code gives saturated weights (large scores); the seed prints other ones",
    }


def layernorm_example():
    x = torch.tensor([0.78, 1.05, 0.44, 0.73, 0.65, 0.28])  # the six activations of section 1.17
    mean, var = x.mean(), x.var(unbiased=False)
    # Without eps: the section's own formula, (x - mean) / sqrt(var). With nn.LayerNorm's default eps 1e-5:
    # what the layer computes.
    return {"name": "layernorm_example", "source": "000 section 1.17",
            "x": r(x), "mean": r(mean), "var_biased": r(var),
            "normalized_eps_1e_5": r(F.layer_norm(x, (6,), eps=1e-5)),
            "normalized_eps_0": r((x - mean) / torch.sqrt(var)),
            "note": "the seed rounds the mean to 0.6 and the variance to 0.07, and its normalized values follow "
                    "from neither"}


def gelu_values():
    # Section 1.18 compares GELU with ReLU on a plot; these are points across it.
    x = torch.tensor([-3.0, -2.0, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.0, 3.0])
    return {"name": "gelu_values", "source": "000 section 1.18 (GELU vs ReLU)", "x": r(x),
            "gelu_exact": r(F.gelu(x)), "gelu_tanh": r(F.gelu(x, approximate="tanh")), "relu": r(F.relu(x))}


def sinusoidal_pe():
    # Section 1.5's formula with GPT-2's sizes, in double precision:
    # PE(pos, 2i) = sin(pos / 10000^(2i / d)), PE(pos, 2i + 1) = cos(pos / 10000^(2i / d)).
    d_model, context = 768, 1024
    pos = torch.arange(context, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), two_i / d_model)
    pe = torch.zeros(context, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return {"name": "sinusoidal_pe", "source": "000 section 1.5 (d_model 768, context 1024)",
            "formula": "PE(pos,2i)=sin(pos/10000^(2i/d)), PE(pos,2i+1)=cos(pos/10000^(2i/d))",
            "rows": {str(p): r(pe[p, :8]) for p in (0, 1, 2, 50, 1023)},
            "columns": {str(c): r(pe[:6, c]) for c in (0, 1, 100, 101, 500, 767)}}


def binary_pe():
    # Section 1.5: positions 64-75 as 8 bits, most significant bit first.
    pos = torch.arange(64, 76).unsqueeze(1)
    shifts = torch.arange(7, -1, -1)
    bits = torch.bitwise_and(torch.bitwise_right_shift(pos, shifts), 1)
    return {"name": "binary_pe", "source": "000 section 1.5 (MSB first)",
            "bits8": {str(p): bits[k].tolist() for k, p in enumerate(range(64, 76))}}


def merge_pair(symbols, a, b):
    """symbols with each (a, b) replaced by a + b, left to right without overlap (a a a -> aa a)."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def bpe_toy_corpus():
    """Section 1.4's byte-pair encoding on its toy corpus: pair counts weighted by word frequency, ten merges
    of the most frequent pair. Ties go to the pair seen first (words in the corpus's order, left to right),
    the choice the seed makes when it merges e s before s t (both 13)."""
    corpus = [("old", 7), ("older", 3), ("finest", 9), ("lowest", 4)]
    eow = "</w>"
    words = [(list(w) + [eow], n) for w, n in corpus]

    def pair_counts():
        counts = {}  # insertion order = first seen
        for symbols, n in words:
            for a, b in zip(symbols, symbols[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + n
        return counts

    initial = pair_counts()
    merges = []
    for _ in range(10):
        counts = pair_counts()
        best = max(counts.items(), key=lambda kv: kv[1])  # max keeps the first of equal counts
        (a, b), n = best
        merges.append([a, b, n])
        words = [(merge_pair(symbols, a, b), count) for symbols, count in words]
    return {"name": "bpe_toy_corpus", "source": "000 section 1.4", "corpus": dict(corpus), "end_of_word": eow,
            "initial_pair_counts": {a + " " + b: n for (a, b), n in initial.items()},
            "merges_first_seen_tiebreak": merges,
            "final_segmentation": {w: symbols for (w, _), (symbols, _) in zip(corpus, words)}}


class GELUTanh(nn.Module):
    """The book's GELU (tanh approximation), as its shortcut example uses it."""

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class ShortcutNetwork(nn.Module):
    """Five Linear + GELU layers; with shortcuts, each layer's input is added to its output when the shapes
    agree (LLMs from scratch ch. 4, which section 1.19 of seed 000 describes)."""

    def __init__(self, layer_sizes, use_shortcut):
        super().__init__()
        self.use_shortcut = use_shortcut
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(layer_sizes[i], layer_sizes[i + 1]), GELUTanh())
                                     for i in range(len(layer_sizes) - 1)])

    def forward(self, x):
        for layer in self.layers:
            y = layer(x)
            x = x + y if self.use_shortcut and x.shape == y.shape else y
        return x


def shortcut_gradients():
    sizes = [3, 3, 3, 3, 3, 1]
    grads = {}
    for use_shortcut in (False, True):
        torch.manual_seed(123)
        model = ShortcutNetwork(sizes, use_shortcut)
        out = model(torch.tensor([[1.0, 0.0, -1.0]]))
        nn.MSELoss()(out, torch.tensor([[0.0]])).backward()
        grads["with_shortcut" if use_shortcut else "without_shortcut"] = {
            name: r(p.grad.abs().mean(), 8) for name, p in model.named_parameters() if "weight" in name}
    return {"name": "shortcut_gradients",
            "source": "000 section 1.19 (described there; the network and its printed gradients are the book's, "
                      "LLMs from scratch ch. 4)",
            "setup": "layer sizes [3,3,3,3,3,1], each Linear + GELU (tanh); input [[1,0,-1]]; target [[0]]; MSE; "
                     "manual_seed(123) before building each model",
            "mean_abs_weight_grad": grads,
            "note": "the seed's figure shows illustrative gradients (0.00003 / 0.00001 without shortcuts, 0.45 / 0.52 "
                    "with), not these"}


# ---------------------------------------------------------------------------
# From the vocabularies (--data)
# ---------------------------------------------------------------------------

def data_file(data_dir, *parts):
    path = os.path.join(data_dir, *parts)
    if not os.path.exists(path):
        raise SystemExit("make_worked_examples.py: %s not found; pass --data DIR (the directory with "
                         "bert-base-uncased/vocab.txt and gpt2/encoder.json) or set EIGENFORMER_DATA_DIR" % path)
    return path


def bert_tokenizer_ids(data_dir):
    sys.path.insert(0, os.path.join(HERE, "tokenizers"))
    from bert_reference import WordPiece

    text = "time flies like an arrow"  # seed 004: tokenizer(text, add_special_tokens=False)
    wp = WordPiece(data_file(data_dir, "bert-base-uncased", "vocab.txt"))
    return {"name": "bert_tokenizer_ids",
            "source": "004 (bert-base-uncased), through tools/reference/tokenizers/bert_reference.py's WordPiece",
            "text": text, "ids": wp.ids(text), "note": "add_special_tokens=False; with them [CLS] = 101 and [SEP] = 102 "
                                                        "surround the ids"}


def gpt2_vocab(data_dir):
    with open(data_file(data_dir, "gpt2", "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    base_vocab_size = len(encoder)  # listing 1.24: tiktoken's gpt2 n_vocab, one id per encoder.json entry
    if sorted(encoder.values()) != list(range(base_vocab_size)):
        raise SystemExit("make_worked_examples.py: encoder.json's ids are not 0..n-1")
    return {"name": "gpt2_vocab", "source": "000 listings 1.24-1.26 on GPT-2's encoder.json",
            "n_vocab": base_vocab_size, "endoftext": encoder["<|endoftext|>"],
            "PAD_ID": base_vocab_size, "CLS_ID": base_vocab_size + 1, "SEP_ID": base_vocab_size + 2,
            "VOCAB_SIZE": base_vocab_size + 3, "MAX_LEN": 256}


# ---------------------------------------------------------------------------
# The comparison with another copy of the worked examples
# ---------------------------------------------------------------------------

def as_number(v):
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    return v


def has_numbers(v):
    if isinstance(v, dict):
        return any(has_numbers(x) for x in v.values())
    if isinstance(v, list):
        return any(has_numbers(x) for x in v)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def compare(ours, theirs, path, diffs, missing):
    """Walk both values; record |difference| of every number both have, and every path only one side has.
    Prose (strings other than inf/nan) is not compared."""
    ours, theirs = as_number(ours), as_number(theirs)
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k in sorted(set(ours) | set(theirs)):
            if k not in theirs:
                if has_numbers(ours[k]):
                    missing.append(path + "." + k + " (only here)")
            elif k not in ours:
                if has_numbers(theirs[k]):
                    missing.append(path + "." + k + " (only in the reference)")
            else:
                compare(ours[k], theirs[k], path + "." + k, diffs, missing)
    elif isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            missing.append("%s: %d values here, %d in the reference" % (path, len(ours), len(theirs)))
            return
        for k, (a, b) in enumerate(zip(ours, theirs)):
            compare(a, b, "%s[%d]" % (path, k), diffs, missing)
    elif isinstance(ours, bool) or isinstance(theirs, bool) or isinstance(ours, str) or isinstance(theirs, str):
        if type(ours) is type(theirs) and isinstance(ours, bool) and ours != theirs:
            diffs.append((path, math.inf, ours, theirs))
    elif isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        if math.isinf(ours) or math.isinf(theirs) or math.isnan(ours) or math.isnan(theirs):
            same = ours == theirs or (math.isnan(ours) and math.isnan(theirs))
            diffs.append((path, 0.0 if same else math.inf, ours, theirs))
        else:
            diffs.append((path, abs(ours - theirs), ours, theirs))
    else:
        missing.append("%s: %s here, %s in the reference" % (path, type(ours).__name__, type(theirs).__name__))


def diff_against(reference_path, cases):
    with open(reference_path, encoding="utf-8") as f:
        reference = json.load(f)  # Python's json reads the bare Infinity such a file may hold
    print("comparison with %s:" % reference_path)
    worst = 0.0
    numbers = differ_total = 0
    for case in cases:
        name = case["name"]
        if name not in reference:
            print("  %-22s not in the reference" % name)
            continue
        ours = {k: v for k, v in case.items() if k != "name"}
        diffs, missing = [], []
        compare(ours, reference[name], name, diffs, missing)
        m = max((d[1] for d in diffs), default=0.0)
        worst = max(worst, m)
        numbers += len(diffs)
        differing = [d for d in diffs if d[1] > 0]
        differ_total += len(differing)
        print("  %-22s %4d numbers, %d differ, max |difference| %.3g" % (name, len(diffs), len(differing), m))
        for path, _, a, b in differing[:6]:
            print("  %-22s   %s: %r here, %r there" % ("", path, a, b))
        if len(differing) > 6:
            print("  %-22s   ... and %d more" % ("", len(differing) - 6))
        for line in missing:
            print("  %-22s   %s" % ("", line))
    left_out = sorted(set(reference) - {c["name"] for c in cases})
    print("  %d entries, %d numbers compared, %d differ, max |difference| %.3g"
          % (len(cases), numbers, differ_total, worst))
    if left_out:
        print("  in the reference only (no test reads them): %s" % ", ".join(left_out))


# ---------------------------------------------------------------------------

def blas_in_use():
    """The BLAS library torch's float matmul ran with, from this process's memory map."""
    torch.ones(2, 2) @ torch.ones(2, 2)
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.lower() and "/" in line}
    return ", ".join(sorted(os.path.realpath(p) for p in libs)) or "none found"


def main(argv=None):
    def more_arguments(ap):
        ap.add_argument("--data", default=os.environ.get("EIGENFORMER_DATA_DIR") or os.path.join(REPO, "..", "shared", "data"),
                        help="directory with bert-base-uncased/vocab.txt and gpt2/encoder.json "
                             "(default: $EIGENFORMER_DATA_DIR, then ../shared/data next to the repository)")
        ap.add_argument("--reference", default=os.path.join(REPO, "..", "shared", "reference", "worked-examples.json"),
                        help="a worked-examples file to compare with (default: ../shared/reference/worked-examples.json "
                             "next to the repository; skipped when absent)")

    args = parse_args(__doc__, argv, more_arguments)
    torch.set_num_threads(1)
    from make_fixtures import check_native_fma
    check_native_fma()
    if torch.backends.mkl.is_available():
        raise SystemExit("make_worked_examples.py: this PyTorch uses MKL, whose bernoulli_ masks differ from the "
                         "mt19937 stream causal_dropout records; run Debian's /usr/bin/python3 (python3-torch)")

    cases = [sa_step_by_step(), self_attention_v1(), self_attention_v2(), sa_next_day_is_bright(),
             softmax_examples(), matmul_example(), tril_example(), causal_softmax(), causal_dropout(),
             mha_split_heads(), layernorm_example(), gelu_values(), sinusoidal_pe(), binary_pe(),
             bpe_toy_corpus(), shortcut_gradients(), bert_tokenizer_ids(args.data), gpt2_vocab(args.data)]
    write_budgeted(args.out, FILE_NAME, cases, 30_000)
    print("torch %s, BLAS: %s" % (torch.__version__, blas_in_use()))
    if os.path.exists(args.reference):
        diff_against(args.reference, cases)
    else:
        print("no %s: nothing to compare with" % args.reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
