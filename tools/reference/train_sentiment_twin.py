#!/usr/bin/env python3
"""The PyTorch twin of examples/train_sentiment.cpp: the same BERT sentence classifier trained the same way, so
that the two can be compared step by step (a fixture for tests/train/test_sentiment.cpp) and run for run on
SST-2 (accuracy and time per step).

    /usr/bin/python3 tools/reference/train_sentiment_twin.py --fixture tests/data/sentiment_twin
    build/release/examples/train_sentiment --recipe seed --dump-ids /tmp/sst2-gpt2-ids.txt
    /usr/bin/python3 tools/reference/train_sentiment_twin.py --ids /tmp/sst2-gpt2-ids.txt --recipe seed \\
        --epochs 1 --max-steps 40 [--threads 1]

What is the same as ours, and how:

  model       make_bert_fixtures.py's BertForSequenceClassification (Hugging Face's modeling_bert in plain
              torch, with eigenformer's pre_layer_norm / add_pooling_layer extensions; already checked there
              against our model's outputs and gradients, dropout masks included).
  init        drawn, not loaded: Hugging Face's _init_weights as bert.hpp does it, one N(0, 0.02) normal_ per
              weight matrix in named_parameters() order from a torch.Generator seeded with the recipe's seed
              (our constructor's Generator(seed)), biases 0, LayerNorm 1 / 0, the [PAD] row of the word
              embeddings zeroed. Our generator reproduces torch's normal_ stream, so drawing is cheap and keeps
              the fixture small (the weights themselves would be ~250 KB of JSON even for the tiny model);
              the fixture records each parameter's sum of |x| so the test can see the two inits agree. The
              parameter names are recorded too, and the test checks ours come in the same order.
  batches     torch.manual_seed(seed) once, right after the model (as the example calls ef::manual_seed
              before building it; our init uses its own generator, so nothing else draws in between). Each
              epoch: torch.utils.data.DataLoader(range(n), batch_size, shuffle=True) itself (ours reproduces
              its draws), then for the default recipe train::length_bucketed written again below (pools of 50
              batches stably sorted by length, cut again, the batches put in torch.randperm order).
              Rows are padded to the batch's longest (or to max_length for the seed recipe) with the pad id.
  dropout     the default generator, in Hugging Face's forward order (make_bert_fixtures.py's model):
              nothing else draws from it between steps, so the masks are ours draw for draw.
  optimizer   torch.optim.AdamW(betas (0.9, 0.999), eps 1e-8), weight decay on matrices only (two groups) or,
              for the seed recipe, on every parameter; lr set before each step to recipe lr x
              get_linear_schedule_with_warmup's (or the constant schedule's) multiplier, warm-up
              round(warmup_ratio x total steps); clip_grad_norm_(max_norm) when clip > 0.
  step        zero_grad, training-mode forward, CrossEntropyLoss (mean), backward, clip, AdamW step.

--fixture OUT: a tiny configuration (2 layers, hidden 32, 2 heads, feed-forward 64, max length 16, batch 8,
dropout 0.1, 20 steps) on a tiny synthetic labelled data set this script writes itself (60 training sentences
over a 120-token vocabulary; labels from a rule over sentiment words and negations), trained twice: with the
default recipe's optimisation (post-LN, eps 1e-12, length buckets, AdamW 1e-3 with 10 % linear warm-up and
decay, decay on matrices, clip 1) and with the seed recipe's (pre-LN, eps 1e-5, padded to max length, AdamW
3e-4 constant, decay on everything, no clipping). Writes OUT/vocab.txt, OUT/train.txt ("LABEL sentence" lines,
the example's data format) and OUT/twin.json (fixture_io's envelope; see tools/reference/README.md). Runs with
ATEN_CPU_CAPABILITY=default, OPENBLAS_CORETYPE=Prescott and one thread (set by the script itself), so every
run writes the same bytes.

--ids FILE (the full SST-2 run): token ids as `train_sentiment --dump-ids FILE` writes them (first line
"pad P vocab V", then "split label id id ..." per sentence, split train / dev / test). The twin reads ids
rather than tokenizing because neither of our tokenizers (GPT-2 byte-level BPE for --recipe seed, WordPiece
for the default recipe) exists in this Python without transformers; tokenization has its own reference tests.
Prints per-epoch dev accuracy as the example does, "test accuracy: 0.XXXX" for the best-dev epoch's weights,
and the median milliseconds per step (--log FILE.csv: every step's loss, lr, gradient norm and time, to set
beside train_sentiment --log's). For speed runs: torch.set_num_threads(--threads), and the native CPU
kernels (ATEN_CPU_CAPABILITY is not set in this mode).
"""

import argparse
import os
import sys

FIXTURE_MODE = "--fixture" in sys.argv
_saved_capability = os.environ.get("ATEN_CPU_CAPABILITY")
if FIXTURE_MODE:
    # The last bits of every loss depend on the kernels: ATen's scalar ones, OpenBLAS's generic SSE3 GEMM
    # (what it picks by itself on this project's Xeons; SkylakeX's moves the losses by an ulp) and one
    # thread make the fixture's bytes independent of the x86-64 machine. Set before torch loads OpenBLAS.
    os.environ["ATEN_CPU_CAPABILITY"] = "default"
    os.environ["OPENBLAS_CORETYPE"] = "Prescott"
    os.environ.pop("OPENBLAS_L2_SIZE", None)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["OMP_NUM_THREADS"] = "1"

import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import enc, write_budgeted  # noqa: E402
from make_bert_fixtures import BertForSequenceClassification  # noqa: E402

# make_bert_fixtures.py pins ATEN_CPU_CAPABILITY=default when imported; no kernel has run yet, so putting the
# variable back lets a speed run use the CPU's native kernels.
if not FIXTURE_MODE:
    if _saved_capability is None:
        os.environ.pop("ATEN_CPU_CAPABILITY", None)
    else:
        os.environ["ATEN_CPU_CAPABILITY"] = _saved_capability

# examples/train_sentiment.cpp's Recipe (the fields that shape training).
RECIPES = {
    "default": dict(max_length=64, pad_to_max_length=False, hidden=128, layers=2, heads=2, ff=512, dropout=0.2,
                    layer_norm_eps=1e-12, pre_ln=False, epochs=2, batch_size=32, lr=1e-3, weight_decay=0.01,
                    warmup_ratio=0.1, clip=1.0, schedule="linear", length_buckets=True, decay_all=False, seed=42),
    "seed": dict(max_length=256, pad_to_max_length=True, hidden=256, layers=4, heads=4, ff=1024, dropout=0.1,
                 layer_norm_eps=1e-5, pre_ln=True, epochs=100, batch_size=16, lr=3e-4, weight_decay=0.01,
                 warmup_ratio=0.0, clip=0.0, schedule="constant", length_buckets=False, decay_all=True, seed=42),
}
BUCKET_POOL = 50  # train_sentiment.cpp's pool of batches per length sort

# The fixture's tiny configuration: what it changes in each recipe.
TINY = dict(max_length=16, hidden=32, layers=2, heads=2, ff=64, dropout=0.1, batch_size=8, epochs=3)
FIXTURE_STEPS = 20


def bert_config(r, vocab_size, pad_id, num_labels):
    return {"vocab_size": vocab_size, "hidden_size": r["hidden"], "num_hidden_layers": r["layers"],
            "num_attention_heads": r["heads"], "intermediate_size": r["ff"], "hidden_act": "gelu",
            "hidden_dropout_prob": r["dropout"], "attention_probs_dropout_prob": r["dropout"],
            "classifier_dropout": None, "initializer_range": 0.02, "layer_norm_eps": r["layer_norm_eps"],
            "pad_token_id": pad_id, "max_position_embeddings": r["max_length"], "type_vocab_size": 2,
            "position_embedding_type": "absolute", "pre_layer_norm": r["pre_ln"], "add_pooling_layer": False,
            "num_labels": num_labels}


def init_weights(model, cfg, seed):
    """bert.hpp's detail::bert::init_weights with Generator(seed): one normal_ per weight, in order."""
    g = torch.Generator()
    g.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm." in name:
                p.fill_(0.0 if name.endswith(".bias") else 1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, cfg["initializer_range"], generator=g)
        model.bert.embeddings.word_embeddings.weight[cfg["pad_token_id"]].zero_()


def make_batch(data, indices, pad_id, pad_to):
    """train::make_batch: rows padded with pad_id to the longest (or pad_to), mask 1 for tokens."""
    t = max([pad_to] + [len(data[i][0]) for i in indices])
    ids = torch.full((len(indices), t), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(indices), t), dtype=torch.int64)
    for r, i in enumerate(indices):
        n = len(data[i][0])
        ids[r, :n] = torch.tensor(data[i][0], dtype=torch.int64)
        mask[r, :n] = 1
    labels = torch.tensor([data[i][1] for i in indices], dtype=torch.int64)
    return ids, mask, labels


def length_bucketed(batches, data, batch_size, pool):
    """train::length_bucketed: pools of `pool` batches stably sorted by length, cut into batches again, the
    batches then in torch.randperm order (the default generator)."""
    order = [i for b in batches for i in b]
    span = max(1, pool) * batch_size
    out = []
    for start in range(0, len(order), span):
        chunk = sorted(order[start:start + span], key=lambda i: len(data[i][0]))  # sorted() is stable
        out += [chunk[k:k + batch_size] for k in range(0, len(chunk), batch_size)]
    return [out[p] for p in torch.randperm(len(out)).tolist()]


def schedule(r, step, warmup, total):
    """train::constant_with_warmup / linear_with_warmup (Hugging Face's LambdaLR lambdas)."""
    if step < warmup:
        return step / max(1, warmup)
    if r["schedule"] == "constant":
        return 1.0
    return max(0.0, (total - step) / max(1, total - warmup))


class Trainer:
    """train::ClassifierTrainer in torch: model, AdamW, DataLoader, the epoch's batches, one step."""

    def __init__(self, r, data, vocab_size, pad_id, num_labels, max_steps=-1):
        self.r, self.data, self.pad_id = r, data, pad_id
        self.cfg = bert_config(r, vocab_size, pad_id, num_labels)
        self.model = BertForSequenceClassification(self.cfg)  # its nn.Linear / nn.Embedding inits draw: overwritten
        init_weights(self.model, self.cfg, r["seed"])
        torch.manual_seed(r["seed"])
        params = list(self.model.parameters())
        if r["decay_all"]:
            groups = [{"params": params}]
        else:
            groups = [{"params": [p for p in params if p.dim() >= 2]},
                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=r["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=r["weight_decay"])
        self.loader = torch.utils.data.DataLoader(range(len(data)), batch_size=r["batch_size"], shuffle=True)
        self.steps_per_epoch = len(self.loader)
        self.total = self.steps_per_epoch * r["epochs"]
        if max_steps >= 0:
            self.total = min(self.total, max_steps)
        self.warmup = round(r["warmup_ratio"] * self.total)  # llround: no .5 ties occur for these ratios
        self.pad_to = r["max_length"] if r["pad_to_max_length"] else 0
        self.step_count = 0
        self.loss_fn = nn.CrossEntropyLoss()

    def epoch_batches(self):
        batches = [b.tolist() for b in self.loader]
        if self.r["length_buckets"]:
            batches = length_bucketed(batches, self.data, self.r["batch_size"], BUCKET_POOL)
        return batches

    def step(self, indices):
        ids, mask, labels = make_batch(self.data, indices, self.pad_id, self.pad_to)
        lr = self.r["lr"] * schedule(self.r, self.step_count, self.warmup, self.total)
        self.model.train()
        self.opt.zero_grad()
        logits = self.model(ids, mask)
        loss = self.loss_fn(logits, labels)
        correct = int((logits.argmax(dim=1) == labels).sum())
        loss.backward()
        clip = self.r["clip"] if self.r["clip"] > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        self.step_count += 1
        return loss.detach(), correct, float(norm), lr

    def predict(self, data, batch_size=64):
        """train::predict: eval mode, rows grouped by length; -> accuracy, mean loss."""
        self.model.eval()
        order = sorted(range(len(data)), key=lambda i: len(data[i][0]))
        correct, loss = 0, 0.0
        with torch.no_grad():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                ids, mask, labels = make_batch(data, idx, self.pad_id, self.pad_to)
                logits = self.model(ids, mask)
                correct += int((logits.argmax(dim=1) == labels).sum())
                loss += float(nn.functional.cross_entropy(logits.double(), labels, reduction="sum"))
        self.model.train()
        return correct / len(data), loss / len(data)


# ---------------------------------------------------------------------------
# --fixture: the tiny synthetic data set and 20 steps of each recipe
# ---------------------------------------------------------------------------

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
POSITIVE = ["good", "great", "fine", "fun", "lovely", "superb", "charming", "witty", "moving", "clever",
            "bright", "warm", "gripping", "tender", "solid", "smart", "fresh", "vivid", "rich", "sharp"]
NEGATIVE = ["bad", "awful", "dull", "boring", "flat", "tedious", "clumsy", "bland", "weak", "messy",
            "stale", "lazy", "shallow", "hollow", "tired", "murky", "thin", "silly", "sloppy", "grim"]
NEGATIONS = ["not", "never", "hardly"]
FILLER = ["the", "a", "an", "film", "movie", "story", "plot", "cast", "script", "score", "ending", "is", "was",
          "feels", "seems", "and", "but", "very", "quite", "rather", "really", "too", "so", "its", "this",
          "that", "it", "director", "acting", "pace", "scene", "scenes", "dialogue", "camera", "music", "heart",
          "humor", "tone", "look", "feel", "of", "with", "in", "on", "at", "as", "by", "for", "to", "from",
          "some", "every", "one", "two", "first", "last", "whole", "long", "short", "old", "new", "own", "more",
          "less", "most", "least", "even", "still", "just", "yet", "also", "then", "."]
VOCAB = SPECIAL + POSITIVE + NEGATIVE + NEGATIONS + FILLER
assert len(VOCAB) == len(set(VOCAB)) == 120, len(VOCAB)
TOK = {w: i for i, w in enumerate(VOCAB)}
N_TRAIN = 60


def synthetic_sentences():
    """N_TRAIN sentences of 2-14 words, labelled by the sign of (positive - negative words), a negation just
    before a sentiment word flipping it; ties redrawn. Python's random.Random is stable across versions."""
    rng = random.Random(2026)
    out = []
    while len(out) < N_TRAIN:
        n = rng.randint(2, TINY["max_length"] - 2)
        words, score = [], 0
        for _ in range(n):
            u = rng.random()
            if u < 0.25:
                w = rng.choice(POSITIVE)
                score += -1 if words and words[-1] in NEGATIONS else 1
            elif u < 0.5:
                w = rng.choice(NEGATIVE)
                score += 1 if words and words[-1] in NEGATIONS else -1
            elif u < 0.58:
                w = rng.choice(NEGATIONS)
            else:
                w = rng.choice(FILLER)
            words.append(w)
        if score != 0:
            out.append((1 if score > 0 else 0, " ".join(words)))
    return out


def encode(text):
    return [TOK["[CLS]"]] + [TOK.get(w, TOK["[UNK]"]) for w in text.split()] + [TOK["[SEP]"]]


def abs_sums(model):
    return {n: float(p.detach().double().abs().sum()) for n, p in model.named_parameters()}


def fixture_case(name, recipe, data):
    r = dict(RECIPES[recipe])
    r.update(TINY)
    t = Trainer(r, data, len(VOCAB), TOK["[PAD]"], 2, max_steps=FIXTURE_STEPS)
    names = [n for n, _ in t.model.named_parameters()]
    init = abs_sums(t.model)
    losses, norms, lrs, correct, batches = [], [], [], [], []
    epoch = 0
    while epoch < r["epochs"] and t.step_count < t.total:
        epoch += 1
        bs = t.epoch_batches()
        for b in bs[:min(len(bs), t.total - t.step_count)]:
            loss, c, norm, lr = t.step(b)
            losses.append(loss)
            norms.append(norm)
            lrs.append(lr)
            correct.append(c)
            batches.append(b)
    assert len(losses) == FIXTURE_STEPS
    return {"name": name, "recipe": recipe, "settings": r, "config": t.cfg, "steps_per_epoch": t.steps_per_epoch,
            "total_steps": t.total, "warmup_steps": t.warmup, "param_names": names, "init_abs_sum": init,
            "batches": batches, "losses": enc(torch.stack(losses)), "grad_norms": norms, "lrs": lrs,
            "correct": correct, "final_abs_sum": abs_sums(t.model)}


def write_text(path, text):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def fixture(out):
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    sentences = synthetic_sentences()
    data = [(encode(s), label) for label, s in sentences]
    write_text(os.path.join(out, "vocab.txt"), "".join(w + "\n" for w in VOCAB))
    write_text(os.path.join(out, "train.txt"), "".join("%d %s\n" % (label, s) for label, s in sentences))
    data_case = {"name": "data", "vocab_size": len(VOCAB), "pad_id": TOK["[PAD]"],
                 "ids": [d[0] for d in data], "labels": [d[1] for d in data]}
    cases = [data_case, fixture_case("default_recipe", "default", data), fixture_case("seed_recipe", "seed", data)]
    for c in cases[1:]:
        ls = [float(x) for x in c["losses"]["data"]]
        print("%-16s losses %.4f -> %.4f, grad norm %.3f -> %.3f" % (c["name"], ls[0], ls[-1], c["grad_norms"][0],
                                                                      c["grad_norms"][-1]))
    total = write_budgeted(out, "twin.json", cases, 150_000)
    total += sum(os.path.getsize(os.path.join(out, f)) for f in ("vocab.txt", "train.txt"))
    print("total %d bytes" % total)
    return 0


# ---------------------------------------------------------------------------
# --ids: the full run
# ---------------------------------------------------------------------------

def read_ids(path):
    splits = {"train": [], "dev": [], "test": []}
    with open(path, encoding="ascii") as f:
        head = f.readline().split()
        if len(head) != 4 or head[0] != "pad" or head[2] != "vocab":
            raise SystemExit("%s: the first line should be \"pad P vocab V\" (train_sentiment --dump-ids)" % path)
        pad, vocab = int(head[1]), int(head[3])
        for line in f:
            parts = line.split()
            splits[parts[0]].append(([int(x) for x in parts[2:]], int(parts[1])))
    return pad, vocab, splits


def full_run(args):
    torch.set_num_threads(args.threads)
    r = dict(RECIPES[args.recipe])
    for k in ("epochs", "seed"):
        if getattr(args, k) is not None:
            r[k] = getattr(args, k)
    pad, vocab, splits = read_ids(args.ids)
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    num_labels = max(2, 1 + max(label for s in splits.values() for _, label in s))
    t = Trainer(r, train, vocab, pad, num_labels, max_steps=args.max_steps)
    n_params = sum(p.numel() for p in t.model.parameters())
    print("twin: recipe %s, %d parameters, %d train / %d dev / %d test, %d threads, %d steps (%d per epoch)"
          % (args.recipe, n_params, len(train), len(dev), len(test), torch.get_num_threads(), t.total,
             t.steps_per_epoch), file=sys.stderr)
    best, best_dev, best_epoch, times = None, -1.0, 0, []
    log = open(args.log, "w", encoding="ascii") if args.log else None
    if log:
        log.write("step,loss,lr,grad_norm,ms\n")
    epoch = 0
    while epoch < r["epochs"] and t.step_count < t.total:
        epoch += 1
        bs = t.epoch_batches()
        n = min(len(bs), t.total - t.step_count)
        loss_sum, correct, seen = 0.0, 0, 0
        start = time.perf_counter()
        for k, b in enumerate(bs[:n]):
            s0 = time.perf_counter()
            loss, c, norm, lr = t.step(b)
            times.append(time.perf_counter() - s0)
            if log:
                log.write("%d,%.9g,%.9g,%.9g,%.3f\n" % (t.step_count, float(loss), lr, norm, 1000 * times[-1]))
            loss_sum += float(loss) * len(b)
            correct += c
            seen += len(b)
            if not args.quiet and ((k + 1) % max(1, n // 10) == 0 or k + 1 == n):
                print("epoch %d step %d/%d loss %.4f acc %.4f %.1f ms/step" % (
                    epoch, k + 1, n, loss_sum / seen, correct / seen, 1000 * statistics.median(times)),
                    file=sys.stderr)
        train_s = time.perf_counter() - start
        dev_acc, dev_loss = t.predict(dev)
        improved = dev_acc > best_dev
        if improved:
            best_dev, best_epoch = dev_acc, epoch
            best = {k: v.clone() for k, v in t.model.state_dict().items()}
        print("epoch %d/%d: train loss %.4f accuracy %.4f | dev loss %.4f accuracy %.4f%s | %.1f s"
              % (epoch, r["epochs"], loss_sum / max(seen, 1), correct / max(seen, 1), dev_loss, dev_acc,
                 " (best)" if improved else "", train_s), flush=True)
    if best is not None:
        t.model.load_state_dict(best)
    print("training: %d steps, median %.1f ms/step (mean %.1f); best dev accuracy %.4f at epoch %d"
          % (t.step_count, 1000 * statistics.median(times), 1000 * sum(times) / len(times), best_dev, best_epoch))
    test_acc, _ = t.predict(test)
    print("test accuracy: %.4f" % test_acc)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--fixture", metavar="OUT_DIR", help="write the 20-step fixture (tests/data/sentiment_twin)")
    mode.add_argument("--ids", metavar="FILE", help="train on ids from train_sentiment --dump-ids FILE")
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="default")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--max-steps", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--log", metavar="FILE.csv", help="one line per step: step, loss, lr, gradient norm, ms")
    args = ap.parse_args(argv)
    return fixture(args.fixture) if args.fixture else full_run(args)


if __name__ == "__main__":
    sys.exit(main())
