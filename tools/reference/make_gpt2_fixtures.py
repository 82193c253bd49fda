#!/usr/bin/env python3
"""Generate PyTorch reference fixtures for eigenformer's GPT-2 tests (tests/data/gpt2_tiny.json).

Usage (from anywhere; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_gpt2_fixtures.py [--out DIR]

GPT-2 is written here in plain torch (transformers is not needed) following Hugging Face's GPT2LMHeadModel:
Conv1D weights stored (in, out) and applied as addmm(bias, x, weight); c_attn's output split into q, k, v
(C columns each, head h owning columns h*HS .. h*HS+HS-1 of each); scores divided by sqrt(HS); causal
positions set to finfo.min before the softmax; dropout on the embeddings (embd_pdrop), the attention weights
(attn_pdrop) and after each c_proj (resid_pdrop); pre-LN blocks with ln_1 / ln_2, a final ln_f, gelu_new
(the tanh approximation) and an lm_head tied to wte. The generation loop is that of GenerationMixin.generate
for greedy search and multinomial sampling: warpers (temperature, then top-k, then top-p) only when
sampling, softmax, torch.multinomial(probs, 1), finished rows padded with pad_token_id (= eos_token_id).

On a tiny config (vocab 61, n_positions 16, n_embd 12, n_layer 2, n_head 3) it records:

  * "model":    the config, the parameters (HF state-dict names; random values rounded to 4 decimals so the
                short decimals ARE the float32 values computed with), input_ids [2, 9], the eval-mode logits,
                and for a training-mode forward (dropout 0.1 everywhere, torch.manual_seed(forward_seed) right
                before it) the probe, the scalar sum(logits * probe) and its gradient for every parameter.
  * "init":     eigenformer's initialisation rule replayed from torch.manual_seed(seed): each weight, in
                named_parameters order, normal_(0, 0.02) (c_proj weights 0.02 / sqrt(2 n_layer)); biases 0,
                LayerNorm 1 / 0. The first and last 16 values of each weight are stored, and the root mean
                square of all its values (float64 arithmetic on the float32 values): it follows the spread
                the rule gives each weight, 0.02 or 0.01 here, for the whole tensor in one number.
  * "greedy", "greedy_eos": generate() without sampling, batch of 2 prompts of 4 tokens, 8 new tokens; the
                second with an eos_token_id that row 0 produces, so row 0 is padded after it.
  * "warp_*":   the logits warpers on the last-position logits (and a hand-made row with ties).
  * "sample_*": do_sample=True after torch.manual_seed(seed), with the sampled sequences.
  * "repr":     print(model) of this module tree, which carries Hugging Face's class and attribute names
                (GPT2LMHeadModel > GPT2Model > ModuleList of GPT2Block > GPT2Attention / GPT2MLP, Conv1D(),
                NewGELUActivation(), the tied lm_head as a bias-free Linear): what `std::cout << model` prints.

Design notes:
  * ATEN_CPU_CAPABILITY=default and one thread, as make_attention_fixtures.py (whose encoding helpers, now in
    fixture_io.py, are reused), so the bytes do not depend on the CPU.
  * torch.multinomial(probs, 1) on CPU (torch 1.13 without MKL, Debian's build) is argmax(probs / E) with
    E = exponential_(1) drawn per element in row-major order as -log(1 - u), u a 53-bit double uniform. The
    script checks that emulation against torch.multinomial on every sampling step it records, so the C++
    sampler (which implements that stream) is tested against real multinomial draws.
  * The generation loop runs with a KV cache, as transformers does, and every step's logits are checked
    against a full forward without cache.
"""

import os
import sys

os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from fixture_io import data_gen, enc, output_dir, q4, write_budgeted  # noqa: E402

CONFIG = {"vocab_size": 61, "n_positions": 16, "n_embd": 12, "n_layer": 2, "n_head": 3,
          "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
          "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "initializer_range": 0.02}


# ---------------------------------------------------------------------------
# GPT-2 with Hugging Face's semantics
# ---------------------------------------------------------------------------

class Conv1D(nn.Module):
    """A Linear whose weight is stored (in_features, out_features): y = x W + b. No extra_repr, so it prints
    as `Conv1D()`, as Hugging Face's does."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.zeros(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        y = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return y.view(*x.shape[:-1], self.nf)


class NewGELUActivation(nn.Module):
    """gelu_new: the tanh approximation written out with torch.tanh (Hugging Face's ACT2FN["gelu_new"])."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


# The classes below carry Hugging Face's class and attribute names, so print(model) is the module tree that
# transformers prints for GPT2LMHeadModel (the "repr" case; torch 1.13 lists every ModuleList entry).

class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c, self.nh = cfg["n_embd"], cfg["n_head"]
        self.hs = self.c // self.nh
        self.c_attn = Conv1D(3 * self.c, self.c)
        self.c_proj = Conv1D(self.c, self.c)
        self.attn_dropout = nn.Dropout(cfg["attn_pdrop"])
        self.resid_dropout = nn.Dropout(cfg["resid_pdrop"])

    def heads(self, t):  # (B, T, C) -> (B, NH, T, HS)
        b, n, _ = t.shape
        return t.view(b, n, self.nh, self.hs).permute(0, 2, 1, 3)

    def forward(self, x, past=None):
        q, k, v = self.c_attn(x).split(self.c, dim=2)
        q, k, v = self.heads(q), self.heads(k), self.heads(v)
        if past is not None:
            k = torch.cat((past[0], k), dim=-2)
            v = torch.cat((past[1], v), dim=-2)
        present = (k, v)
        w = q @ k.transpose(-1, -2)
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        tq, tk = q.size(-2), k.size(-2)
        causal = torch.ones(tk, tk, dtype=torch.bool).tril()[tk - tq:tk, :tk]
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        w = self.attn_dropout(torch.softmax(w, dim=-1))
        a = (w @ v).permute(0, 2, 1, 3).reshape(x.size(0), tq, self.c)
        return self.resid_dropout(self.c_proj(a)), present


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_fc = Conv1D(4 * c, c)
        self.c_proj = Conv1D(c, 4 * c)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(cfg["resid_pdrop"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(c, eps=eps)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(c, eps=eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x, past=None):
        a, present = self.attn(self.ln_1(x), past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["n_positions"], cfg["n_embd"])
        self.drop = nn.Dropout(cfg["embd_pdrop"])
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one parameter, listed once as wte's

    def forward(self, ids, past=None):
        t = self.transformer
        start = 0 if past is None else past[0][0].size(-2)
        pos = torch.arange(start, start + ids.size(1)).unsqueeze(0)
        x = t.drop(t.wte(ids) + t.wpe(pos))
        presents = []
        for i, block in enumerate(t.h):
            x, p = block(x, None if past is None else past[i])
            presents.append(p)
        x = t.ln_f(x)
        # The product spelled as the original twin did (F.linear rounds differently), so the recorded
        # logits keep their bytes; the weight is the tied one either way.
        return x @ self.lm_head.weight.t(), presents


def test_parameters(model, seed):
    """Random values of an O(1) scale (so attention, GELU and LayerNorm are all exercised), 4 decimals."""
    g = data_gen(seed)
    scale = {"wte": 0.5, "wpe": 0.3, "c_attn": 0.4, "c_fc": 0.4, "c_proj": 0.3}
    with torch.no_grad():
        for name, p in model.named_parameters():
            kind = name.split(".")[-2]
            if name.endswith("bias"):
                p.copy_(q4(0.1 * torch.randn(p.shape, generator=g)))
            elif kind.startswith("ln"):
                p.copy_(q4(1.0 + 0.2 * torch.randn(p.shape, generator=g)))
            else:
                p.copy_(q4(scale[kind] * torch.randn(p.shape, generator=g)))


# ---------------------------------------------------------------------------
# Generation, as GenerationMixin.generate does it
# ---------------------------------------------------------------------------

def warp(scores, temperature=1.0, top_k=0, top_p=1.0, min_tokens_to_keep=1):
    if temperature != 1.0:
        scores = scores / temperature
    if top_k != 0:
        k = min(max(top_k, min_tokens_to_keep), scores.size(-1))
        scores = scores.masked_fill(scores < torch.topk(scores, k)[0][..., -1, None], -math.inf)
    if top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -min_tokens_to_keep:] = False
        scores = scores.masked_fill(remove.scatter(1, sorted_indices, remove), -math.inf)
    return scores


def multinomial_emulated(probs):
    """argmax(probs / E), E = -log(1 - u) per element from 53-bit double uniforms (torch 1.13, no MKL)."""
    u = torch.empty(probs.shape, dtype=torch.float64).uniform_()
    e = torch.from_numpy((-1.0 * np.log(1.0 - u.numpy())).astype(np.float32))
    return (probs / e).argmax(dim=-1, keepdim=True)


def generate(model, ids, max_new_tokens, do_sample=False, temperature=1.0, top_k=0, top_p=1.0, eos=None,
             seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    unfinished = torch.ones(ids.size(0), dtype=torch.long)
    logits, past = model(ids)
    for step in range(max_new_tokens):
        full, _ = model(ids)  # the cache must not change the numbers
        assert torch.allclose(full[:, -1], logits[:, -1], rtol=1e-5, atol=1e-5), (full[:, -1] - logits[:, -1]).abs().max()
        scores = logits[:, -1, :]
        if do_sample:
            probs = torch.softmax(warp(scores, temperature, top_k, top_p), dim=-1)
            state = torch.get_rng_state()
            nxt = torch.multinomial(probs, num_samples=1).squeeze(1)
            after = torch.get_rng_state()
            torch.set_rng_state(state)
            emulated = multinomial_emulated(probs).squeeze(1)
            assert torch.equal(nxt, emulated) and torch.equal(after, torch.get_rng_state()), step
        else:
            nxt = torch.argmax(scores, dim=-1)
        if eos is not None:
            nxt = nxt * unfinished + eos * (1 - unfinished)
        ids = torch.cat([ids, nxt[:, None]], dim=-1)
        if eos is not None:
            unfinished = unfinished & (nxt != eos).long()
            if unfinished.max() == 0:
                break
        logits, past = model(nxt[:, None], past)
    return ids


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

def model_case(model, ids):
    model.eval()
    with torch.no_grad():
        logits_eval, _ = model(ids)
    model.train()
    probe = q4(torch.randn(logits_eval.shape, generator=data_gen(1202)))
    forward_seed = 1203
    torch.manual_seed(forward_seed)
    logits, _ = model(ids)
    loss = (logits * probe).sum()
    model.zero_grad()
    loss.backward()
    model.eval()
    return {
        "name": "model", "config": CONFIG,
        "params": {k: enc(p) for k, p in model.named_parameters()},  # no lm_head.weight: tied
        "inputs": {"input_ids": enc(ids)}, "logits": enc(logits_eval),
        "forward_seed": forward_seed, "probe": enc(probe), "loss": enc(loss),
        "grads": {k: enc(p.grad) for k, p in model.named_parameters()},
    }


def init_weights(model, cfg):
    """eigenformer's initialisation rule (models/gpt2.hpp), drawing from torch's default generator: each weight in
    named_parameters order normal_(0, initializer_range), c_proj weights divided by sqrt(2 n_layer); biases 0,
    LayerNorm 1 / 0. (The modules themselves start at zero: Conv1D's weights are torch.zeros.)"""
    std = cfg.get("initializer_range", 0.02)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln_" in name:
                p.fill_(1.0)
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, std / math.sqrt(2 * cfg["n_layer"]))
            else:
                p.normal_(0.0, std)


def init_case():
    seed = 1301
    model = GPT2LMHeadModel(CONFIG)
    torch.manual_seed(seed)
    init_weights(model, CONFIG)
    head_tail = {}
    for name, p in model.named_parameters():
        if name.endswith("weight") and ".ln_" not in name:
            flat = p.detach().reshape(-1)
            head_tail[name] = {"numel": flat.numel(), "head": enc(flat[:16]), "tail": enc(flat[-16:]),
                               "rms": float(flat.double().pow(2).mean().sqrt())}
    return {"name": "init", "seed": seed, "weights": head_tail}


def generation_cases(model, prompts):
    cases = []
    out = generate(model, prompts, 8)
    cases.append({"name": "greedy", "prompt": enc(prompts), "max_new_tokens": 8, "eos_token_id": None,
                  "out": enc(out)})
    eos = int(out[0, prompts.size(1) + 2])  # row 0 stops after its third new token
    out_eos = generate(model, prompts, 8, eos=eos)
    assert (out_eos[0, prompts.size(1) + 3:] == eos).all()
    cases.append({"name": "greedy_eos", "prompt": enc(prompts), "max_new_tokens": 8, "eos_token_id": eos,
                  "out": enc(out_eos)})
    for name, kw in (("sample_plain", dict(temperature=1.0, top_k=0, top_p=1.0, seed=1401)),
                     ("sample_warped", dict(temperature=0.8, top_k=20, top_p=0.9, seed=1402)),
                     ("sample_hot", dict(temperature=1.7, top_k=0, top_p=0.95, seed=1403))):
        seed = kw.pop("seed")
        out = generate(model, prompts, 8, do_sample=True, seed=seed, **kw)
        cases.append({"name": name, "prompt": enc(prompts), "max_new_tokens": 8, "seed": seed,
                      "temperature": kw["temperature"], "top_k": kw["top_k"], "top_p": kw["top_p"],
                      "out": enc(out)})
    return cases


def warper_cases(scores):
    ties = torch.tensor([[2.0, 1.0, 2.0, 0.5, 1.0, 2.0, -1.0, 1.0, 0.0, 2.0] + [-3.0] * 51])
    # Many ties: torch.sort is not stable on CPU, so which tied entries top-p removes depends on its order.
    quantized = torch.round(2 * torch.randn((3, 61), generator=data_gen(1501))) / 2
    cases = []
    for name, x, kw in (("warp_top_k_5", scores, dict(top_k=5)),
                        ("warp_top_k_1", scores, dict(top_k=1)),
                        ("warp_top_k_100", scores, dict(top_k=100)),
                        ("warp_top_p_0.9", scores, dict(top_p=0.9)),
                        ("warp_top_p_0.3", scores, dict(top_p=0.3)),
                        ("warp_top_p_0", scores, dict(top_p=0.0)),
                        ("warp_temperature_0.7", scores, dict(temperature=0.7)),
                        ("warp_all", scores, dict(temperature=0.7, top_k=10, top_p=0.8)),
                        ("warp_ties_top_k_3", ties, dict(top_k=3)),
                        ("warp_ties_top_p_0.5", ties, dict(top_p=0.5)),
                        ("warp_ties_top_p_0.75", ties, dict(top_p=0.75)),
                        ("warp_quantized_top_p_0.6", quantized, dict(top_p=0.6)),
                        ("warp_quantized_top_p_0.95", quantized, dict(top_p=0.95)),
                        ("warp_quantized_all", quantized, dict(temperature=0.5, top_k=30, top_p=0.7))):
        args = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
        args.update(kw)
        cases.append({"name": name, "args": args, "scores": enc(x), "out": enc(warp(x, **args))})
    return cases


def main(argv=None):
    out_dir = output_dir(__doc__, argv)
    torch.set_num_threads(1)

    model = GPT2LMHeadModel(CONFIG)
    test_parameters(model, 1201)
    ids = torch.randint(0, CONFIG["vocab_size"], (2, 9), generator=data_gen(1204))
    prompts = torch.randint(0, CONFIG["vocab_size"], (2, 4), generator=data_gen(1205))
    cases = [model_case(model, ids), init_case(), {"name": "repr", "config": CONFIG, "text": str(model)}]
    with torch.no_grad():
        logits, _ = model(ids)
        cases += generation_cases(model, prompts)
    cases += warper_cases(logits[:, -1, :].clone())

    write_budgeted(out_dir, "gpt2_tiny.json", cases, 150_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
