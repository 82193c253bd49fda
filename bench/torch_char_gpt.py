#!/usr/bin/python3
"""PyTorch twin of examples/train_char_gpt.cpp for speed: nanoGPT's shakespeare_char training step in plain torch.

The model is nanoGPT's GPT (model.py) at the CPU configuration -- 4 layers, 4 heads, 128 channels, block 64,
vocabulary 65, with biases and tied embeddings like GPT2LMHeadModel, tanh GELU -- trained as train.py does:
random blocks (torch.randint offsets), forward + cross-entropy, backward, clip_grad_norm_(1.0), AdamW
(lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on 2-D tensors only), zero_grad(set_to_none=True). No
transformers (not installed) and no torch.compile (nanoGPT's CPU recipe sets --compile=False).

Prints iterations/s over --iters timed steps after --warmup-iters untimed ones:
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(/work/shared/tools/openblas-env.sh) \\
        /usr/bin/python3 bench/torch_char_gpt.py --threads 1
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, c, nh, block):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.nh = nh
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))
        self.flash = hasattr(F, "scaled_dot_product_attention")

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.nh, c // self.nh).transpose(1, 2) for z in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # nanoGPT's fallback (torch < 2.0)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, c, nh, block):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, nh, block)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, nh, c):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.h = nn.ModuleList(Block(c, nh, block) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=100, help="timed iterations")
    ap.add_argument("--warmup-iters", type=int, default=10)
    ap.add_argument("--data", default=os.path.join(os.environ.get("EIGENFORMER_DATA_DIR", "../shared/data"),
                                                   "tinyshakespeare", "input.txt"))
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)

    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[ch] for ch in text[: int(len(text) * 0.9)]], dtype=torch.long)

    def get_batch():
        ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
        x = torch.stack([data[i:i + args.block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + args.block_size] for i in ix])
        return x, y

    model = GPT(len(chars), args.block_size, args.n_layer, args.n_head, args.n_embd)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))

    def step():
        x, y = get_batch()
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(args.warmup_iters):
        step()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        loss = step()
    dt = time.perf_counter() - t0
    print(f"torch {torch.__version__} threads {args.threads}: {args.iters / dt:.2f} it/s "
          f"({1000 * dt / args.iters:.1f} ms/it, last loss {loss:.4f}, sdpa {model.h[0].attn.flash})", flush=True)


if __name__ == "__main__":
    main()
