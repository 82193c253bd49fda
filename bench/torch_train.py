#!/usr/bin/python3
"""PyTorch twin of bench/bench_train.cpp: one training step of the examples' two small models, under the same
BM_ names, on random data of the same shapes. Prints `name<TAB>median_seconds` (torch.utils.benchmark).

  BM_char_gpt_train_step/<threads>         bench/torch_char_gpt.py's nanoGPT (4 layers, 4 heads, 128 channels,
                                           block 64, batch 12, 65 characters) and its step: a random batch,
                                           forward, cross-entropy, backward, clip_grad_norm_(1.0), AdamW
  BM_seed_classifier_train_step/<threads>  tools/reference/train_sentiment_twin.py's Trainer with the seed recipe
                                           (pre-LN BERT, hidden 256, 4 layers, 4 heads, 256 positions, dropout 0.1)
                                           on a batch of 16 sentences of 128 random ids
  BM_gpt2_train_step/<threads>             GPT-2 small (tools/reference/make_gpt2_fixtures.py's model, drawn as
                                           bench/torch_gpt2.py draws it) fine-tuned on 4 sequences of 128 random
                                           ids: dropout 0.1, cross-entropy, backward, clip_grad_norm_(1.0), AdamW
  BM_bert_base_finetune_step/<threads>     BERT-base (tools/reference/make_bert_fixtures.py's Hugging Face
                                           BertForSequenceClassification, bert-base-uncased's shape, two labels)
                                           fine-tuned on 8 sequences of 128 ids: dropout 0.1, cross-entropy,
                                           backward, clip_grad_norm_(1.0), AdamW 2e-5 (weight decay 0.01 on the
                                           matrices), as Hugging Face's Trainer defaults
  BM_gpt2_vocab_cross_entropy/<threads>    F.cross_entropy forward and backward on 512 x 50257 random logits
                                           (a GPT-2 fine-tuning step's loss alone)

  /usr/bin/python3 bench/torch_train.py --only-threads N [--only NAME]   # started with OMP_NUM_THREADS=N
  /usr/bin/python3 bench/torch_train.py                                  # both thread counts, a process each

As in torch_bert.py, each thread count runs in a process started with OMP_NUM_THREADS / OPENBLAS_NUM_THREADS
set to it (OpenBLAS sizes its pool when it loads).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools", "reference"))

import torch  # noqa: E402
import torch.utils.benchmark as tb  # noqa: E402

import make_bert_fixtures  # noqa: E402
import torch_bert  # noqa: E402
import torch_char_gpt  # noqa: E402
import torch_gpt2  # noqa: E402
import twin_threads  # noqa: E402
import train_sentiment_twin  # noqa: E402
from make_gpt2_fixtures import GPT2LMHeadModel, init_weights  # noqa: E402



def char_gpt_step():
    torch.manual_seed(1337)
    block, batch = 64, 12
    model = torch_char_gpt.GPT(65, block, 4, 4, 128)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
    data = torch.randint(0, 65, (100000,))

    def step():
        ix = torch.randint(len(data) - block, (batch,))
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def seed_classifier_step():
    r = dict(train_sentiment_twin.RECIPES["seed"], pad_to_max_length=False)  # 256 positions, rows of 128
    g = torch.Generator().manual_seed(0)
    pad = 50257
    data = [(torch.randint(0, pad, (128,), generator=g).tolist(), i % 2) for i in range(16)]
    trainer = train_sentiment_twin.Trainer(r, data, vocab_size=50260, pad_id=pad, num_labels=2)
    rows = list(range(16))
    return lambda: trainer.step(rows)


def adamw_decaying_matrices(params, lr, weight_decay):
    """AdamW as the fine-tuning recipes set it up: weight decay on the matrices only."""
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=lr)


def gpt2_train_step():
    config = {**torch_gpt2.SMALL, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}
    model = GPT2LMHeadModel(config)
    torch.manual_seed(0)
    init_weights(model, config)
    model.train()
    params = list(model.parameters())
    opt = adamw_decaying_matrices(params, lr=1e-4, weight_decay=0.1)
    i = torch.arange(4 * 128)
    x = (i * 7919 % 50257).view(4, 128)
    y = ((i * 104729 + 3) % 50257).view(4, 128)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(x)[0]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss
    return step


def bert_base_finetune_step():
    cfg = make_bert_fixtures.config(**torch_bert.BASE, num_labels=2)
    torch.manual_seed(0)
    model = make_bert_fixtures.BertForSequenceClassification(cfg)
    model.train()
    params = list(model.parameters())
    opt = adamw_decaying_matrices(params, lr=2e-5, weight_decay=0.01)
    i = torch.arange(8 * 128)
    x = (i * 7919 % cfg["vocab_size"]).view(8, 128)
    mask = torch.ones_like(x)
    y = torch.arange(8) % 2

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x, mask), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss
    return step


def gpt2_vocab_cross_entropy():
    torch.manual_seed(0)
    rows, vocab = 512, 50257
    logits = torch.randn(rows, vocab, requires_grad=True)
    target = torch.tensor([(i * 7919) % vocab for i in range(rows)])

    def step():
        loss = torch.nn.functional.cross_entropy(logits, target)
        loss.backward()
        logits.grad = None
        return loss
    return step


CASES = {"BM_char_gpt_train_step": char_gpt_step, "BM_seed_classifier_train_step": seed_classifier_step,
         "BM_gpt2_train_step": gpt2_train_step, "BM_bert_base_finetune_step": bert_base_finetune_step,
         "BM_gpt2_vocab_cross_entropy": gpt2_vocab_cross_entropy}


def run(threads, min_time, only):
    torch.set_num_threads(threads)
    names = [f"{name}/{threads}" for name in CASES]
    twin_threads.check_only("torch_train.py", only, names, threads)
    for name, make in CASES.items():
        if only and f"{name}/{threads}" != only:
            continue
        step = make()
        step()  # warm-up: AdamW's state is created on the first step
        r = tb.Timer(stmt="step()", globals={"step": step}, num_threads=threads).blocked_autorange(min_run_time=min_time)
        print(f"{name}/{threads}\t{r.median:.9f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    twin_threads.add_arguments(ap, "BM_char_gpt_train_step/2")
    ap.add_argument("--min-time", type=float, default=2.0)
    args = ap.parse_args()
    twin_threads.dispatch(args, __file__, run)


if __name__ == "__main__":
    main()
