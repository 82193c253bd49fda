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

With --train, it is instead nanoGPT's whole run for the loss that PyTorch reaches with this configuration:
--iters steps (default 2000) on nanoGPT's schedule (warm-up 100, cosine from 1e-3 to 1e-4 at --iters), then
`val loss X.XXXX`, the mean over --eval-iters random validation batches (nanoGPT's estimate_loss):
    /usr/bin/python3 bench/torch_char_gpt.py --train --seed 1337 [--gelu exact]
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
        self.c_attn = nn.Linear(c, 3 * c, bias=BIAS)
        self.c_proj = nn.Linear(c, c, bias=BIAS)
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


GELU_APPROXIMATE = "tanh"  # --gelu exact: nanoGPT's own nn.GELU()
BIAS = True  # --no-bias: nanoGPT's default bias=False, in the Linear layers and the LayerNorms


def layer_norm(c):
    ln = nn.LayerNorm(c)
    if not BIAS:
        ln.bias = None
    return ln


class Block(nn.Module):
    def __init__(self, c, nh, block):
        super().__init__()
        self.ln_1 = layer_norm(c)
        self.attn = CausalSelfAttention(c, nh, block)
        self.ln_2 = layer_norm(c)
        self.c_fc = nn.Linear(c, 4 * c, bias=BIAS)
        self.c_proj = nn.Linear(4 * c, c, bias=BIAS)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate=GELU_APPROXIMATE))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, nh, c):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.h = nn.ModuleList(Block(c, nh, block) for _ in range(n_layer))
        self.ln_f = layer_norm(c)
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
    ap.add_argument("--iters", type=int, default=None, help="timed iterations (100), or training steps with --train (2000)")
    ap.add_argument("--train", action="store_true", help="nanoGPT's full run, ending with the validation loss")
    ap.add_argument("--eval-iters", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--gelu", choices=["tanh", "exact"], default="tanh")
    ap.add_argument("--no-bias", action="store_true", help="Linear layers without biases, as nanoGPT's default")
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
    if args.iters is None:
        args.iters = 2000 if args.train else 100
    global GELU_APPROXIMATE, BIAS
    BIAS = not args.no_bias
    GELU_APPROXIMATE = "none" if args.gelu == "exact" else "tanh"
    torch.manual_seed(args.seed)

    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    encoded = [stoi[ch] for ch in text]
    split = int(len(text) * 0.9)
    data = torch.tensor(encoded[:split], dtype=torch.long)
    val_data = torch.tensor(encoded[split:], dtype=torch.long)

    def get_batch(source=None):
        source = data if source is None else source
        ix = torch.randint(len(source) - args.block_size, (args.batch_size,))
        x = torch.stack([source[i:i + args.block_size] for i in ix])
        y = torch.stack([source[i + 1:i + 1 + args.block_size] for i in ix])
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

    if args.train:
        def lr_at(it, lr=1e-3, min_lr=1e-4, warmup=100, decay=args.iters):
            if it < warmup:
                return lr * (it + 1) / (warmup + 1)
            ratio = (it - warmup) / (decay - warmup)
            return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

        t0 = time.perf_counter()
        for it in range(args.iters):
            for g in opt.param_groups:
                g["lr"] = lr_at(it)
            loss = step()
            if it % 250 == 0:
                print(f"step {it}: loss {loss:.4f}", flush=True)
        dt = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            val = sum(model(*get_batch(val_data)).item() for _ in range(args.eval_iters)) / args.eval_iters
        print(f"torch {torch.__version__} seed {args.seed} gelu {args.gelu}: {args.iters} steps in {dt:.0f} s", flush=True)
        print(f"val loss {val:.4f}")
        return

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
