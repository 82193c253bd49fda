#!/usr/bin/python3
"""PyTorch twin of bench/bench_bert.cpp: BERT-base (bert-base-uncased's shape, fp32) inference under the same BM_
names.

The model is a plain-torch BERT written here (transformers is not installed): Hugging Face's BertModel
computation in eval mode (post-LN layers, separate query/key/value Linears, exact-erf GELU, the additive
(1 - mask) * finfo.min padding mask, the tanh pooler), random weights drawn as Hugging Face's _init_weights
does, run under torch.inference_mode(). Prints `name<TAB>median_seconds` (torch.utils.benchmark).

  /usr/bin/python3 bench/torch_bert.py                       # every case, 1 and 2 threads
  /usr/bin/python3 bench/torch_bert.py --export-onnx m.onnx  # the same module as ONNX (opset 14), for ort_bert.mjs

Thread counts: every case's name ends in its own (BM_bert_forward/8/128/2). Debian's OpenBLAS sizes its thread
pool from OMP_NUM_THREADS when it loads, and a 2-thread run in a process started with OMP_NUM_THREADS=1 is
slower than a 1-thread one, so each thread count runs in a child process started with OMP_NUM_THREADS (and
OPENBLAS_NUM_THREADS) set to it, whatever --threads (which compare.py passes) says.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.benchmark as tb

import twin_threads  # bench/twin_threads.py, beside this script

BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "initializer_range": 0.02, "pad_token_id": 0}
CASES = (("BM_bert_forward", 1, 128, False), ("BM_bert_forward", 8, 128, False),
         ("BM_bert_forward_padded", 8, 128, True))


class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"], padding_idx=c["pad_token_id"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, input_ids):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        types = torch.zeros_like(input_ids)
        e = self.word_embeddings(input_ids) + self.token_type_embeddings(types) + self.position_embeddings(pos)
        return self.LayerNorm(e)


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.nh = c["num_attention_heads"]
        self.hs = h // self.nh
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.attn_dense = nn.Linear(h, h)
        self.attn_ln = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.intermediate = nn.Linear(h, c["intermediate_size"])
        self.output = nn.Linear(c["intermediate_size"], h)
        self.out_ln = nn.LayerNorm(h, eps=c["layer_norm_eps"])

    def heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.nh, self.hs).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        b, t, c = x.shape
        q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hs) + ext_mask
        ctx = torch.matmul(F.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous().view(b, t, c)
        a = self.attn_ln(self.attn_dense(ctx) + x)
        return self.out_ln(self.output(F.gelu(self.intermediate(a))) + a)


class BertModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c["num_hidden_layers"]))
        self.pooler = nn.Linear(c["hidden_size"], c["hidden_size"])
        for m in self.modules():  # Hugging Face's _init_weights
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.data.normal_(0.0, c["initializer_range"])
            if isinstance(m, nn.Linear):
                m.bias.data.zero_()
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                m.weight.data[m.padding_idx].zero_()

    def forward(self, input_ids, attention_mask):
        ext = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        x = self.embeddings(input_ids)
        for layer in self.layer:
            x = layer(x, ext)
        return x, torch.tanh(self.pooler(x[:, 0]))


def inputs(b, t, padded):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, BASE["vocab_size"], (b, t), generator=g)
    real = [max(1, t - 16 * i) if padded else t for i in range(b)]
    mask = torch.tensor([[1 if j < r else 0 for j in range(t)] for r in real], dtype=torch.int64)
    return ids, mask


def model():
    torch.manual_seed(0)
    return BertModel(BASE).eval()


def run(threads, min_time, only=None):
    torch.set_num_threads(threads)
    m = model()
    names = [f"{name}/{b}/{t}/{threads}" for name, b, t, _ in CASES]
    twin_threads.check_only("torch_bert.py", only, names, threads)
    with torch.inference_mode():
        for name, b, t, padded in CASES:
            if only and f"{name}/{b}/{t}/{threads}" != only:
                continue
            ids, mask = inputs(b, t, padded)
            r = tb.Timer(stmt="m(ids, mask)", globals={"m": m, "ids": ids, "mask": mask},
                         num_threads=threads).blocked_autorange(min_run_time=min_time)
            print(f"{name}/{b}/{t}/{threads}\t{r.median:.9f}", flush=True)


def export_onnx(path):
    ids, mask = inputs(1, 128, False)
    with torch.no_grad():
        torch.onnx.export(model(), (ids, mask), path, opset_version=14, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                        "last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    twin_threads.add_arguments(ap, "BM_bert_forward/8/128/2")
    ap.add_argument("--min-time", type=float, default=3.0)
    ap.add_argument("--export-onnx", metavar="PATH")
    args = ap.parse_args()
    if args.export_onnx:
        export_onnx(args.export_onnx)
        return
    twin_threads.dispatch(args, __file__, run)


if __name__ == "__main__":
    main()
