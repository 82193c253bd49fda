#!/usr/bin/env python3
"""Generate PyTorch reference fixtures for eigenformer's attention tests (tests/data/nn_attention.json).

Usage (from anywhere; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_attention_fixtures.py [--out DIR]

For scaled dot-product attention, SelfAttention_v1/v2 and CausalAttention (LLMs from scratch ch. 3),
multi-head attention in its two layouts (BERT-from-scratch listing 1.31, fused qkv; the Hugging Face NLP
book's AttentionHead + concatenation) and the Transformer block (pre-LN listing 1.33 and post-LN), on odd
sizes (batch 2, tokens 5, dim 12, 3 heads), with and without causal / key padding masks, in training and
eval mode, it records the inputs, the parameters (state-dict names), the forward output, the attention
weights and, for training-mode cases, the autograd gradients of sum(out * probe) with respect to every
input and every parameter. See tools/reference/README.md ("nn_attention.json") for the fields.

Design notes:
  * ATEN_CPU_CAPABILITY=default is set before torch is imported, so ATen's scalar kernels run and the
    values do not depend on the CPU; torch.set_num_threads(1) fixes the reduction order. Every run writes
    the same bytes.
  * Size (< 300 KB): inputs, probes and most parameters are rounded to 4 decimals before anything is
    computed (so the short decimals ARE the float32 values used), and only outputs and gradients carry full
    float32 precision. Cases named *_init keep the exact nn.Linear / rand initialisation from `seed` (on small
    sizes) so the C++ tests can check their own seeded construction against it; the scalar kernels compute
    nn.Linear's uniform init without the fused multiply-add of the AVX2 kernels eigenformer reproduces, so
    those values may differ from eigenformer's by an ulp of the bound (torch.rand's are exact).
  * Training-mode dropout masks come from torch's default generator, reseeded with `forward_seed` right
    before the forward (Debian's torch is built without MKL, so bernoulli_ uses the mt19937 stream
    eigenformer reproduces). The attention-weight mask is drawn first, over (B, NH, Tq, Tk) in row-major
    order, then the output mask; in a block: attention weights, attention output, feed-forward hidden,
    feed-forward output.
  * Masked scores: -inf by default. PyTorch's softmax gives NaN for a row whose every key is masked, where
    eigenformer specifies zeros; the reference applies nan_to_num(0) after the softmax, which matches that
    convention and leaves every other row (and every gradient) unchanged. Cases with masked_value -1e9
    reproduce the seed's masked_fill(mask == 0, -1e9) with plain PyTorch.
"""

import os
import sys

os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ.setdefault("OMP_NUM_THREADS", "1")
# float32 matrix products go through Debian's BLAS (OpenBLAS), whose kernels for the CPU at hand round some
# sums differently (SkylakeX vs Haswell); the committed file was written with the Haswell kernels.
os.environ["OPENBLAS_CORETYPE"] = "Haswell"

import math  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fixture_io import FORMAT, VERSION, data_gen, enc, fval, jnum, output_dir, q4, write_budgeted, write_fixture  # noqa: E402,F401

F32 = torch.float32
F64 = torch.float64
INF = math.inf
B, T, C, NH = 2, 5, 12, 3


# ---------------------------------------------------------------------------
# Inputs rounded to 4 decimals (fixture_io.py does the encoding)
# ---------------------------------------------------------------------------

def randn(shape, seed, scale=1.0, dtype=F32):
    return q4(torch.randn(shape, generator=data_gen(seed), dtype=dtype) * scale)


def requantize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(q4(p))


# ---------------------------------------------------------------------------
# The modules, in PyTorch, as the seeds write them (with the options eigenformer adds)
# ---------------------------------------------------------------------------

def sdpa(q, k, v, mask=None, dropout_p=0.0, is_causal=False, masked_value=-INF):
    """softmax(q k^T / sqrt(HS), masked) v, dropout on the weights; returns (out, weights before dropout)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if is_causal:
        tq, tk = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(tq, tk, dtype=torch.bool).tril(), masked_value)
    if mask is not None:
        scores = scores.masked_fill(~mask, masked_value)
    w = torch.softmax(scores, dim=-1)
    if masked_value == -INF:
        w = w.nan_to_num(0.0)  # eigenformer: a row with no visible key gets weights 0, not NaN
    dropped = F.dropout(w, dropout_p, training=True) if dropout_p > 0 else w
    return dropped @ v, w


class SelfAttentionV1(nn.Module):
    """Listing 3.1 (keys.transpose(-2, -1) instead of keys.T, so batched inputs work too)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        w = torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1)
        self.weights = w
        return w @ values


class SelfAttentionV2(nn.Module):
    """Listing 3.2."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        w = torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1)
        self.weights = w
        return w @ values


class CausalAttention(nn.Module):
    """Listing 3.3."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        w = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        self.weights = w
        return self.dropout(w) @ values


class MultiHeadSelfAttention(nn.Module):
    """BERT-from-scratch listing 1.31 (fused qkv), with a causal flag and the masked value selectable."""

    def __init__(self, dim, heads, attn_dropout=0.1, out_dropout=0.1, causal=False, masked_value=-INF):
        super().__init__()
        assert dim % heads == 0
        self.heads, self.d, self.causal, self.masked_value = heads, dim // heads, causal, masked_value
        self.qkv = nn.Linear(dim, dim * 3)
        self.out = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.out_dropout = nn.Dropout(out_dropout)

    def project(self, x):
        B_, T_, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return [t.view(B_, T_, self.heads, self.d).transpose(1, 2) for t in (q, k, v)]

    def merge(self, context):
        B_, _, T_, _ = context.shape
        return context.transpose(1, 2).reshape(B_, T_, self.heads * self.d)

    def output(self, x):
        return self.out_dropout(self.out(x))

    def forward(self, x, mask=None):
        q, k, v = self.project(x)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        if self.causal:
            t = scores.size(-1)
            scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), self.masked_value)
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1).unsqueeze(2) == 0, self.masked_value)
        attn = F.softmax(scores, dim=-1)
        if self.masked_value == -INF:
            attn = attn.nan_to_num(0.0)
        self.weights = attn
        attn = self.attn_dropout(attn)
        return self.output(self.merge(attn @ v))


class AttentionHead(nn.Module):
    """Seed 004."""

    def __init__(self, embed_dim, head_dim):
        super().__init__()
        self.q = nn.Linear(embed_dim, head_dim)
        self.k = nn.Linear(embed_dim, head_dim)
        self.v = nn.Linear(embed_dim, head_dim)

    def forward(self, hidden_state):  # the seed's own forward: no mask, no dropout
        query, key, value = self.q(hidden_state), self.k(hidden_state), self.v(hidden_state)
        scores = torch.bmm(query, key.transpose(1, 2)) / math.sqrt(query.size(-1))
        return torch.bmm(F.softmax(scores, dim=-1), value)


class MultiHeadAttentionPerHead(MultiHeadSelfAttention):
    """Seed 004's MultiHeadAttention (heads = ModuleList of AttentionHead, output_linear), with the
    options of listing 1.31. The heads' projections are run side by side so that attention, masks and
    dropout are computed for all heads at once, as eigenformer does (dropout draws over (B, NH, T, T))."""

    def __init__(self, dim, heads, attn_dropout=0.1, out_dropout=0.1, causal=False, masked_value=-INF):
        nn.Module.__init__(self)
        self.heads_, self.d, self.causal, self.masked_value = heads, dim // heads, causal, masked_value
        self.heads = nn.ModuleList([AttentionHead(dim, dim // heads) for _ in range(heads)])
        self.output_linear = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.out_dropout = nn.Dropout(out_dropout)

    def project(self, x):
        return [torch.stack([getattr(h, n)(x) for h in self.heads], dim=1) for n in "qkv"]

    def merge(self, context):  # concatenation of the heads' outputs along features
        return torch.cat([context[:, i] for i in range(context.size(1))], dim=-1)

    def output(self, x):
        return self.out_dropout(self.output_linear(x))

    def seed_forward(self, x):
        """Seed 004's forward: per head, concatenated (eval, no mask)."""
        return self.output_linear(torch.cat([h(x) for h in self.heads], dim=-1))


class FeedForward(nn.Module):
    """BERT-from-scratch listing 1.32."""

    def __init__(self, dim, hidden, dropout=0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim),
                                 nn.Dropout(dropout))

    def forward(self, x):
        return self.net(x)


class TransformerBlock(nn.Module):
    """BERT-from-scratch listing 1.33 (pre-LN), and the post-LN placement of the original Transformer."""

    def __init__(self, dim, heads, ff_dim, dropout=0.1, post_ln=False, causal=False):
        super().__init__()
        self.attn = MultiHeadSelfAttention(dim, heads, dropout, dropout, causal)
        self.ff = FeedForward(dim, ff_dim, dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.post_ln = post_ln

    def forward(self, x, mask=None):
        if self.post_ln:
            x = self.norm1(x + self.attn(x, mask))
            return self.norm2(x + self.ff(x))
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ff(self.norm2(x))


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

PAD_MASK = torch.tensor([[True, True, True, False, False], [True, True, True, True, True]])
ALL_PAD_MASK = torch.tensor([[True, True, False, True, False], [False] * 5])


RECORDED_PARAMS = {}


def run_module(name, layer, config, seed, build, inputs, train, forward_seed=None, probe_seed=None,
               quantize=True, check=None):
    """Builds the module after manual_seed(seed), rounds its parameters (unless quantize is False: the
    *_init cases), runs forward (after manual_seed(forward_seed) in training mode) and, in training mode,
    backward of sum(out * probe). `inputs` maps names to tensors; bool ones are masks."""
    torch.manual_seed(seed)
    module = build()
    if quantize:
        requantize(module)
    module.train(train)
    args = {k: v.clone().requires_grad_(train) if v.dtype.is_floating_point else v for k, v in inputs.items()}
    if train and forward_seed is not None:
        torch.manual_seed(forward_seed)
    out = module(*args.values())
    if check is not None:
        check(module, out)
    case = {
        "name": name, "layer": layer, "config": config, "seed": seed, "train": train,
        "forward_seed": forward_seed if train else None, "params_are_init": not quantize,
        "inputs": {k: enc(v) for k, v in inputs.items()},
        "out": enc(out),
    }
    params = {k: enc(v) for k, v in module.state_dict().items() if k != "mask"}
    same = [n for n, p in RECORDED_PARAMS.items() if p == params]
    if same:  # an eval case next to its training twin: the parameters are stored once
        case["params_from"] = same[0]
    else:
        case["params"] = params
        RECORDED_PARAMS[name] = params
    if not train:  # the attention weights, for the return-weights option (eval: no dropout in between)
        weights = getattr(module, "weights", None)
        if weights is None and hasattr(module, "attn"):
            weights = module.attn.weights
        case["weights"] = enc(weights)
    if train:
        probe = randn(out.shape, probe_seed, dtype=out.dtype)
        (out * probe).sum().backward()
        grads = {k: enc(v.grad) for k, v in args.items() if v.dtype.is_floating_point}
        for k, p in module.named_parameters():
            grads[k] = enc(p.grad if p.grad is not None else torch.zeros_like(p))
        case["probe"] = enc(probe)
        case["grads"] = grads
    return case


def sdpa_case(name, q, k, v, mask=None, dropout_p=0.0, is_causal=False, masked_value=-INF, forward_seed=None,
              probe_seed=0):
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    if dropout_p > 0:
        torch.manual_seed(forward_seed)
    out, w = sdpa(qq, kk, vv, mask, dropout_p, is_causal, masked_value)
    probe = randn(out.shape, probe_seed)
    (out * probe).sum().backward()
    inputs = {"q": enc(q), "k": enc(k), "v": enc(v)}
    if mask is not None:
        inputs["mask"] = enc(mask)
    for g in (qq.grad, kk.grad, vv.grad):
        assert torch.isfinite(g).all(), name
    return {
        "name": name, "layer": "sdpa", "train": True, "forward_seed": forward_seed,
        "config": {"dropout_p": dropout_p, "is_causal": is_causal, "masked_value": jnum(masked_value)},
        "inputs": inputs, "out": enc(out), "weights": enc(w), "probe": enc(probe),
        "grads": {"q": enc(qq.grad), "k": enc(kk.grad), "v": enc(vv.grad)},
    }


def sdpa_cases():
    q, k, v = (randn((B, NH, T, 4), 601 + i) for i in range(3))
    mask2d = torch.rand(T, T, generator=data_gen(604)) < 0.6
    mask2d |= torch.eye(T, dtype=torch.bool)  # every query sees itself
    pad = PAD_MASK.view(B, 1, 1, T)
    cases = [
        sdpa_case("sdpa_plain", q, k, v, probe_seed=611),
        sdpa_case("sdpa_causal", q, k, v, is_causal=True, probe_seed=612),
        sdpa_case("sdpa_mask_2d", q, k, v, mask=mask2d, probe_seed=613),
        sdpa_case("sdpa_padding_causal_dropout", q, k, v, mask=pad, dropout_p=0.2, is_causal=True,
                  forward_seed=7, probe_seed=614),
        sdpa_case("sdpa_fully_masked_rows", q, k, v, mask=ALL_PAD_MASK.view(B, 1, 1, T), probe_seed=615),
        sdpa_case("sdpa_fully_masked_rows_1e9", q, k, v, mask=ALL_PAD_MASK.view(B, 1, 1, T), masked_value=-1e9,
                  probe_seed=616),
    ]
    # Cross-attention shapes: 4 queries, 6 keys, values of another width; a rank-1 mask over the keys.
    qc = randn((B, NH, 4, 4), 621)
    kc = randn((B, NH, 6, 4), 622)
    vc = randn((B, NH, 6, 5), 623)
    keymask = torch.tensor([True, True, False, True, True, True])
    cases.append(sdpa_case("sdpa_cross_causal_keymask", qc, kc, vc, mask=keymask, is_causal=True, probe_seed=624))
    return cases


def self_attention_cases():
    x = randn((B, T, C), 701)
    # rand weights are all positive: with unit inputs the scores reach ~10 and the softmax saturates, where
    # float32's own rounding (PyTorch's included) grows to ~1e-6 absolute; half-size inputs keep it well
    # conditioned, like the book's inputs in [0, 1].
    x_half = randn((B, T, C), 701, 0.5)
    cases = [
        run_module("self_attention_v1_train", "self_attention_v1", {"d_in": C, "d_out": 8}, 123,
                   lambda: SelfAttentionV1(C, 8), {"x": x_half}, True, None, 711, quantize=False),
        run_module("self_attention_v2_bias_train", "self_attention_v2", {"d_in": C, "d_out": 8, "qkv_bias": True},
                   789, lambda: SelfAttentionV2(C, 8, qkv_bias=True), {"x": x}, True, None, 712),
    ]
    cfg = {"d_in": C, "d_out": 8, "context_length": 6, "dropout": 0.3, "qkv_bias": False}
    build = lambda: CausalAttention(C, 8, 6, 0.3)
    cases.append(run_module("causal_attention_train", "causal_attention", cfg, 5, build, {"x": x}, True, 13, 713))
    cases.append(run_module("causal_attention_eval", "causal_attention", cfg, 5, build, {"x": x}, False))
    return cases


def mha_cases():
    x = randn((B, T, C), 801)

    def mha(layout, dropout, causal=False, masked_value=-INF, dim=C, heads=NH):
        cls = MultiHeadSelfAttention if layout == "fused" else MultiHeadAttentionPerHead
        cfg = {"dim": dim, "heads": heads, "layout": layout, "attn_dropout": dropout, "out_dropout": dropout,
               "causal": causal, "masked_value": jnum(masked_value)}
        return cfg, (lambda: cls(dim, heads, dropout, dropout, causal, masked_value))

    def check_seed004(module, out):  # the batched per-head computation is seed 004's, head by head
        ref = module.seed_forward(x)
        assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6), (out - ref).abs().max()

    cases = []
    cfg, build = mha("fused", 0.1)
    cases.append(run_module("mha_fused_padding_train", "mha", cfg, 31, build, {"x": x, "mask": PAD_MASK}, True, 32, 811))
    cases.append(run_module("mha_fused_padding_eval", "mha", cfg, 31, build, {"x": x, "mask": PAD_MASK}, False))
    cfg, build = mha("fused", 0.0, causal=True)
    cases.append(run_module("mha_fused_causal_train", "mha", cfg, 33, build, {"x": x}, True, 34, 812))
    cfg, build = mha("fused", 0.0, masked_value=-1e9)
    cases.append(run_module("mha_fused_fully_padded_1e9_train", "mha", cfg, 35, build, {"x": x, "mask": ALL_PAD_MASK},
                            True, 36, 813))
    cfg, build = mha("fused", 0.0)
    cases.append(run_module("mha_fused_fully_padded_train", "mha", cfg, 35, build, {"x": x, "mask": ALL_PAD_MASK},
                            True, 36, 813))
    cfg, build = mha("per_head", 0.1)
    cases.append(run_module("mha_per_head_padding_train", "mha", cfg, 37, build, {"x": x, "mask": PAD_MASK}, True, 38,
                            814))
    cases.append(run_module("mha_per_head_eval", "mha", cfg, 37, build, {"x": x}, False, check=check_seed004))
    # Exact initialisation from manual_seed on a small size: dim 6, 2 heads, 3 tokens.
    xs = randn((B, 3, 6), 802)
    for layout in ("fused", "per_head"):
        cfg, build = mha(layout, 0.1, dim=6, heads=2)
        cases.append(run_module("mha_%s_init" % layout, "mha", cfg, 41, build, {"x": xs}, False, quantize=False))
    return cases


def block_cases():
    x = randn((B, T, C), 901)
    cases = []

    def block(post_ln, causal=False, dropout=0.1, dim=C, heads=NH, ff=16):
        cfg = {"dim": dim, "heads": heads, "ff_dim": ff, "dropout": dropout, "norm": "post" if post_ln else "pre",
               "causal": causal, "layer_norm_eps": 1e-5}
        return cfg, (lambda: TransformerBlock(dim, heads, ff, dropout, post_ln, causal))

    def with_moved_norms(build, seed):
        """LayerNorm starts at weight 1, bias 0: move them so that their role and gradients are exercised."""
        def run():
            m = build()
            g = data_gen(seed)
            with torch.no_grad():
                for ln in (m.norm1, m.norm2):
                    ln.weight.copy_(q4(1.0 + 0.3 * torch.randn(ln.weight.shape, generator=g)))
                    ln.bias.copy_(q4(0.3 * torch.randn(ln.bias.shape, generator=g)))
            return m
        return run

    for post in (False, True):
        tag = "post" if post else "pre"
        cfg, build = block(post)
        cases.append(run_module("block_%s_padding_train" % tag, "transformer_block", cfg, 51 + post,
                                with_moved_norms(build, 950 + post), {"x": x, "mask": PAD_MASK}, True, 53 + post,
                                911 + post))
        cfg, build = block(post, causal=True)  # the same parameters as the training case
        cases.append(run_module("block_%s_causal_eval" % tag, "transformer_block", cfg, 51 + post,
                                with_moved_norms(build, 950 + post), {"x": x, "mask": PAD_MASK}, False))
    cfg, build = block(False, dim=4, heads=2, ff=8)
    cases.append(run_module("block_pre_init", "transformer_block", cfg, 59, build, {"x": randn((B, 3, 4), 902)}, False,
                            quantize=False))
    return cases


def float64_cases():
    """Multi-head attention and a pre-LN block run by PyTorch in float64, for the double layers at double
    precision (the float32 cases above only check double against float32 rounding). Small sizes (dim 6 / 4,
    3 tokens) keep them a few KB. Inputs, probes and parameters are rounded to 4 decimals in double (the
    doubles nearest those decimals, which no float32 equals), so computing in float anywhere shows up as
    errors of ~1e-8 instead of ~1e-16. Dropout 0: no mask stream to match."""
    cases = []
    x = randn((B, 3, 6), 1001, dtype=F64)
    pad = PAD_MASK[:, :3].clone()
    pad[0, 2] = False
    cfg = {"dim": 6, "heads": 2, "layout": "fused", "attn_dropout": 0.0, "out_dropout": 0.0, "causal": True,
           "masked_value": jnum(-INF)}
    cases.append(run_module("mha_fused_f64_padding_causal_train", "mha", cfg, 61,
                            lambda: MultiHeadSelfAttention(6, 2, 0.0, 0.0, True).double(), {"x": x, "mask": pad},
                            True, None, 1011))
    x = randn((B, 3, 4), 1002, dtype=F64)
    cfg = {"dim": 4, "heads": 2, "ff_dim": 8, "dropout": 0.0, "norm": "pre", "causal": False, "layer_norm_eps": 1e-5}

    def block():
        m = TransformerBlock(4, 2, 8, 0.0).double()
        g = data_gen(1003)
        with torch.no_grad():  # LayerNorm away from weight 1, bias 0 (rounded with the rest in run_module)
            for ln in (m.norm1, m.norm2):
                ln.weight.copy_(1.0 + 0.3 * torch.randn(ln.weight.shape, generator=g, dtype=F64))
                ln.bias.copy_(0.3 * torch.randn(ln.bias.shape, generator=g, dtype=F64))
        return m
    cases.append(run_module("block_pre_f64_padding_train", "transformer_block", cfg, 62, block,
                            {"x": x, "mask": pad}, True, None, 1012))
    return cases


def main(argv=None):
    out_dir = output_dir(__doc__, argv)
    torch.set_num_threads(1)
    cases = sdpa_cases() + self_attention_cases() + mha_cases() + block_cases() + float64_cases()
    write_budgeted(out_dir, "nn_attention.json", cases, 300_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
