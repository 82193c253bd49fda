#!/usr/bin/env python3
"""Write what examples/chapters.cpp must print, chapter by chapter (tests/data/chapters/*.txt).

Usage (from anywhere; Debian's PyTorch 1.13; the default output is <repo>/tests/data/chapters):

    /usr/bin/python3 tools/reference/make_chapter_outputs.py [--out DIR] [--data DIR]

Each file is the whole standard output of one `chapters` subcommand, computed here again with PyTorch or
plain Python and printed with the same format strings, so the ctests (examples/chapters_smoke.cmake) compare
the C++ program with an independent computation and never with numbers typed in by hand:

  bpe_toy.txt              `chapters bpe-toy`: seed 000 §1.4, BPE trained on the toy corpus, step by step
  tokenize_tiny.txt        `chapters tokenize --vocab tests/data/gpt2_tiny_hf --text "..."`: seed 000 §1.3,
                           words / characters / subwords with the tiny byte-level BPE of the GPT-2 fixture
  tokenize_gpt2.txt        `chapters tokenize --vocab $EIGENFORMER_DATA_DIR/gpt2`: the same with GPT-2's own
                           vocabulary (written only when --data DIR holds gpt2/encoder.json + vocab.bpe)
  positions.txt            `chapters positions`: seed 000 §1.5, integer, binary and sinusoidal positions
  mask_leak.txt            `chapters mask-leak`: seed 000 §1.13, zeros-then-renormalise against -inf
  layernorm_gelu.txt       `chapters layernorm-gelu`: seed 000 §1.17-1.18, LayerNorm, GELU vs ReLU, the
                           feed-forward shapes
  exercise_3_1.txt         `chapters exercise-3-1`: seed 001 exercise 3.1
  next_token_tiny.txt      `chapters next-token --model tests/data/gpt2_tiny_hf --prompt "the cat sat on the"`:
                           seed 000 §1.1's next-token table on the tiny GPT-2 directory (random weights)

Design notes:
  * Native kernels (not ATEN_CPU_CAPABILITY=default), one thread: positions and exercise-3-1 print seeded
    initialisations (torch.randn, torch.rand, nn.Linear), which eigenformer's generator reproduces from
    the FMA-contracted kernels; make_fixtures.check_native_fma refuses a CPU without them.
  * Floats are printed with fixed decimals (4 for the tutorials' tensors, 6 for differences, 2 for
    percentages). The smoke script allows one unit of the last printed decimal: both sides compute in
    float32, but vectorised exp/tanh and summation order differ in the last bits, which moves a value
    sitting on a rounding boundary by one unit.
  * The GPT-2 BPE below (byte-to-unicode spelling, merge the lowest-ranked pair first) is written for ASCII
    text: its pre-tokeniser is GPT-2's pattern with ASCII letter and digit classes. The script refuses
    non-ASCII text rather than print something the real pattern would split differently.
  * nan is printed as "nan" (C's printf may write "-nan" for the same value; chapters.cpp prints "nan").
  * Every run writes the same bytes (about 1 s).
"""

import os
import sys

os.environ.pop("ATEN_CPU_CAPABILITY", None)  # native kernels, see above
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import struct  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from make_fixtures import check_native_fma  # noqa: E402
from make_gpt2_fixtures import GPT2LMHeadModel  # noqa: E402
from make_gpt2_hf_fixtures import bytes_to_unicode  # noqa: E402
from make_worked_examples import SelfAttentionV1, SelfAttentionV2, journey_inputs, merge_pair  # noqa: E402

# make_gpt2_fixtures and make_gpt2_hf_fixtures ask for the default kernels on import; ATen reads the variable at its first operation.
os.environ.pop("ATEN_CPU_CAPABILITY", None)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TINY_GPT2 = os.path.join(REPO, "tests", "data", "gpt2_tiny_hf")

# The command lines of the ctests (examples/CMakeLists.txt passes the same arguments).
TINY_TOKENIZE_TEXT = "the cat sat on the mat, then the hat"
TINY_PROMPT = "the cat sat on the"
# chapters.cpp's default sentence for `tokenize`.
TOKENIZE_TEXT = "Hello, world! Tokenization splits unhappiness into subwords."


def num(x, decimals=4):
    """printf("%.Nf") as chapters.cpp prints it: nan is "nan" whatever its sign."""
    x = float(x)
    return "nan" if math.isnan(x) else "%.*f" % (decimals, x)


def quoted(s):
    """A token between double quotes, with \\" \\\\ and \\u00XX escapes, and \\xNN for a byte that is not
    part of a whole UTF-8 character (chapters.cpp's in_quotes())."""
    out = []
    for ch in s:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append("\\x%02x" % (ord(ch) - 0xDC00))
        elif ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def torch_size(t):
    return "torch.Size([%s])" % ", ".join(str(d) for d in t.shape)


# ---------------------------------------------------------------------------
# Seed 000 §1.4: BPE on the toy corpus
# ---------------------------------------------------------------------------

CORPUS = [("old", 7), ("older", 3), ("finest", 9), ("lowest", 4)]
NEW_WORDS = ["oldest", "newest", "finer"]
EOW = "</w>"
MERGES = 10


def pair_counts(segs):
    """Adjacent pairs weighted by word counts, in first-seen order (words in order, each left to right)."""
    counts = {}
    for (word, count), symbols in zip(CORPUS, segs):
        for a, b in zip(symbols, symbols[1:]):
            counts[(a, b)] = counts.get((a, b), 0) + count
    return counts


def encode_word(word, merges):
    symbols = list(word) + [EOW]
    ranks = {m: r for r, m in enumerate(merges)}
    while len(symbols) > 1:
        best = min(((ranks.get(p, len(ranks)), i) for i, p in enumerate(zip(symbols, symbols[1:]))))
        if best[0] == len(ranks):
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


def bpe_toy(p):
    p("BPE on the toy corpus (BERT from scratch 1.4)")
    p()
    p("Steps 1-2: each word becomes its characters plus the end-of-word token %s" % EOW)
    p("%-8s %5s  %s" % ("word", "count", "symbols"))
    segs = [list(w) + [EOW] for w, _ in CORPUS]
    for (w, c), s in zip(CORPUS, segs):
        p("%-8s %5d  %s" % (w, c, " ".join(s)))
    p()
    p("Step 3: adjacent pairs counted with the word frequencies (most frequent first, ties in first-seen order)")
    p("%-10s %5s" % ("pair", "count"))
    for (a, b), c in sorted(pair_counts(segs).items(), key=lambda kv: -kv[1]):
        p("%-10s %5d" % (a + " " + b, c))
    p()
    p("Merge the most frequent pair everywhere, count again, repeat (%d merges)" % MERGES)
    merges = []
    for k in range(MERGES):
        counts = pair_counts(segs)
        (a, b), c = max(counts.items(), key=lambda kv: kv[1])  # max() keeps the first of equal counts
        merges.append((a, b))
        segs = [merge_pair(s, a, b) for s in segs]
        p("merge %d: %s + %s -> %s (count %d)" % (k + 1, a, b, a + b, c))
        for (w, _), s in zip(CORPUS, segs):
            p("  %-8s %s" % (w, " ".join(s)))
    p()
    vocab = []
    for w, _ in CORPUS:
        for ch in list(w) + [EOW]:
            if ch not in vocab:
                vocab.append(ch)
    n_chars = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab.append(a + b)
    p("Step 4: the vocabulary, %d symbols and %d merged tokens (%d in all)" % (n_chars, len(vocab) - n_chars, len(vocab)))
    p(" ".join(vocab))
    p()
    p("New words, encoded with the merges in the order they were learned")
    for w in NEW_WORDS:
        p("  %-8s %s" % (w, " ".join(encode_word(w, merges))))


# ---------------------------------------------------------------------------
# Seed 000 §1.3: word, character and subword tokens
# ---------------------------------------------------------------------------

def load_gpt2_vocab(d):
    """(spelling -> id, merge ranks) from encoder.json + vocab.bpe or vocab.json + merges.txt."""
    if os.path.exists(os.path.join(d, "encoder.json")):
        enc_path, merges_path = os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")
    else:
        enc_path, merges_path = os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")
    with open(enc_path, encoding="utf-8") as f:
        encoder = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        lines = [ln for ln in f.read().split("\n") if ln and not ln.startswith("#version")]
    ranks = {tuple(ln.split(" ")): r for r, ln in enumerate(lines)}
    return encoder, ranks


# GPT-2's pre-tokeniser with ASCII classes in place of \p{L} and \p{N} (the text is checked to be ASCII).
ASCII_GPT2_PATTERN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def gpt2_encode(text, encoder, ranks):
    if not text.isascii():
        raise SystemExit("make_chapter_outputs.py: the GPT-2 reference handles ASCII text only")
    spelling = bytes_to_unicode()
    ids = []
    for piece in ASCII_GPT2_PATTERN.findall(text):
        parts = [spelling[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            r, i = min((ranks.get(p, math.inf), i) for i, p in enumerate(zip(parts, parts[1:])))
            if r == math.inf:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        ids += [encoder[p] for p in parts]
    return ids


def gpt2_token_text(token, spelling_to_byte):
    """The token's bytes as text; a byte that is not part of a whole UTF-8 character is kept as a surrogate
    (quoted() writes it as \\xNN)."""
    return bytes(spelling_to_byte[c] for c in token).decode("utf-8", errors="surrogateescape")


def tokenize(p, vocab_dir, text):
    encoder, ranks = load_gpt2_vocab(vocab_dir)
    by_id = {i: t for t, i in encoder.items()}
    spelling_to_byte = {c: b for b, c in bytes_to_unicode().items()}
    words = re.findall(r"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]", text)  # BERT's basic split, for ASCII text
    chars = list(text)
    ids = gpt2_encode(text, encoder, ranks)
    subwords = [gpt2_token_text(by_id[i], spelling_to_byte) for i in ids]
    p("Words, characters and subwords of one sentence (BERT from scratch 1.3)")
    p("text: %s" % quoted(text))
    p()
    p("%-9s %6s  %s" % ("method", "tokens", "pieces"))
    p("%-9s %6d  %s" % ("word", len(words), " ".join(quoted(w) for w in words)))
    p("%-9s %6d  %s" % ("character", len(chars), " ".join(quoted(c) for c in chars)))
    p("%-9s %6d  %s" % ("subword", len(subwords), " ".join(quoted(s) for s in subwords)))
    p()
    p("vocabulary sizes: %d distinct words, %d distinct characters, %d subword tokens (%s, %d merges)"
      % (len(set(words)), len(set(chars)), len(encoder), os.path.basename(vocab_dir), len(ranks)))
    p("subword ids: %s" % " ".join(str(i) for i in ids))


# ---------------------------------------------------------------------------
# Seed 000 §1.5: position encodings
# ---------------------------------------------------------------------------

def sinusoid(pos, dim, d_model=768):
    angle = pos * 10000.0 ** (-(dim - dim % 2) / d_model)
    return math.sin(angle) if dim % 2 == 0 else math.cos(angle)


def positions(p):
    p("Position encodings (BERT from scratch 1.5)")
    p()
    p("Integer positions: every one of the 8 dimensions holds the position")
    p("%8s  %s" % ("position", "encoding"))
    for pos in (0, 1, 2, 300):
        p("%8d  %s" % (pos, " ".join([str(pos)] * 8)))
    torch.manual_seed(123)
    dog, cat = torch.randn(8), torch.randn(8)

    def cosine(a, b):
        a, b = a.double(), b.double()
        return (a @ b / (a.norm() * b.norm())).item()

    p('Token embeddings "dog" and "cat": torch.randn(8) twice after torch.manual_seed(123)')
    p("  %-18s %s" % ("dog", " ".join(num(v) for v in dog.tolist())))
    p("  %-18s %s" % ("cat", " ".join(num(v) for v in cat.tolist())))
    p("  %-18s %s" % ("dog + position 300", " ".join(num(v) for v in (dog + 300).tolist())))
    p("  %-18s %s" % ("cat + position 300", " ".join(num(v) for v in (cat + 300).tolist())))
    p("cosine similarity of dog and cat: %s alone, %s both at position 300 (the position drowns the word)"
      % (num(cosine(dog, cat)), num(cosine(dog + 300, cat + 300))))
    p()
    p("Binary positions 64-75 in 8 bits (i=8 the most significant bit, i=1 the least)")
    p("%8s  %s" % ("position", " ".join("i=%d" % i for i in range(8, 0, -1))))
    for pos in range(64, 76):
        p("%8d  %s" % (pos, " ".join("%3d" % ((pos >> (7 - j)) & 1) for j in range(8))))
    p()
    p("Sinusoidal positions, d_model 768: PE(pos, 2i) = sin(pos / 10000^(2i/768)), PE(pos, 2i+1) = cos(...)")
    dims = (0, 1, 2, 3, 766, 767)
    p("%8s  %s" % ("position", " ".join("%8s" % ("dim %d" % d) for d in dims)))
    for pos in (0, 1, 2, 3, 100, 1023):
        p("%8d  %s" % (pos, " ".join("%8s" % num(sinusoid(pos, d)) for d in dims)))
    p()
    p("The pairs of figure 1.33: the wavelength grows from 2 pi to 10000 * 2 pi positions")
    pairs = (1, 50, 150, 250)
    p("%6s  %10s  %s" % ("pair i", "dimensions", "wavelength in positions"))
    for i in pairs:
        p("%6d  %10s  %s" % (i, "%d, %d" % (2 * i, 2 * i + 1), num(2 * math.pi * 10000.0 ** (2 * i / 768), 1)))
    p("%8s  %s" % ("position", " ".join("%9s %9s" % ("sin i=%d" % i, "cos i=%d" % i) for i in pairs)))
    for pos in (0, 1, 10, 100, 500, 1023):
        p("%8d  %s" % (pos, " ".join("%9s %9s" % (num(sinusoid(pos, 2 * i)), num(sinusoid(pos, 2 * i + 1)))
                                     for i in pairs)))


# ---------------------------------------------------------------------------
# Seed 000 §1.13: zeros after the softmax and renormalising, against -inf before it
# ---------------------------------------------------------------------------

WORDS_1_13 = ["computer", "science", "is", "the", "study"]


def matrix(p, title, m):
    p(title)
    p("%-9s %s" % ("", " ".join("%9s" % w for w in WORDS_1_13)))
    for w, row in zip(WORDS_1_13, m.tolist()):
        p("%-9s %s" % (w, " ".join("%9s" % num(v) for v in row)))


def mask_leak(p):
    n = len(WORDS_1_13)
    scores = torch.tensor([[0.5 + 0.25 * i + 0.5 * j for j in range(n)] for i in range(n)])
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    p("Causal attention: zeros after the softmax, or -inf before it (BERT from scratch 1.13)")
    p()
    matrix(p, "Scaled scores of listing 1.11 (rows: queries, columns: keys)", scores)

    def renormalised(s):
        w = torch.softmax(s, dim=-1) * causal
        return w / w.sum(dim=-1, keepdim=True), w

    def neg_inf(s):
        return torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)

    p()
    zeroed_renorm, zeroed = renormalised(scores)
    matrix(p, "Steps 1-3 of the section: softmax over the whole row, zero the future, ...", zeroed)
    p("row sums: %s" % " ".join(num(v) for v in zeroed.sum(dim=-1).tolist()))
    matrix(p, "... and divide each row by its sum", zeroed_renorm)
    p()
    masked = neg_inf(scores)
    matrix(p, "Listing 1.12: -inf above the diagonal, then the softmax", masked)
    p("largest difference between the two: %s (the future cancels out of the renormalised ratio)"
      % num((zeroed_renorm - masked).abs().max(), 6))
    p()
    future = scores.clone()
    future[:, n - 1] += 200
    p('A future key that scores high: 200 added to the column of "study"')
    matrix(p, "zeros after the softmax, renormalised: the first four rows underflow to 0 / 0", renormalised(future)[0])
    matrix(p, "-inf before the softmax: those rows never see the future", neg_inf(future))
    p()
    wrong = torch.softmax(scores * causal, dim=-1)
    matrix(p, "The mistake the -inf avoids: zeros instead of -inf before the softmax (exp(0) = 1)", wrong)
    p("weight on future tokens per row: %s" % " ".join(num(v) for v in (wrong * ~causal).sum(dim=-1).tolist()))


# ---------------------------------------------------------------------------
# Seed 000 §1.17-1.18: LayerNorm, GELU against ReLU, the feed-forward shapes
# ---------------------------------------------------------------------------

def layernorm_gelu(p):
    x = torch.tensor([0.78, 1.05, 0.44, 0.73, 0.65, 0.28])
    mean = x.mean()
    var = x.var(unbiased=False)
    p("Layer normalisation of six activations (BERT from scratch 1.17)")
    p("%-32s %s" % ("x", " ".join(num(v) for v in x.tolist())))
    p("%-32s %s" % ("mean", num(mean)))
    p("%-32s %s" % ("variance (divided by 6)", num(var)))
    p("%-32s %s" % ("(x - mean) / sqrt(variance)", " ".join(num(v) for v in ((x - mean) / var.sqrt()).tolist())))
    ln = nn.LayerNorm(6)  # eps 1e-5, weight 1, bias 0
    y = ln(x).detach()
    p("%-32s %s" % ("nn.LayerNorm(6), eps 1e-5", " ".join(num(v) for v in y.tolist())))
    p("%-32s %s" % ("its mean and variance", "%s %s" % (num(y.mean()), num(y.var(unbiased=False)))))
    with torch.no_grad():
        ln.weight.fill_(2.0)
        ln.bias.fill_(0.5)
    p("%-32s %s" % ("gamma = 2, beta = 0.5", " ".join(num(v) for v in ln(x).detach().tolist())))
    p()
    p("GELU against ReLU (1.18): GELU keeps small negative values and is smooth at 0")
    p("%6s %8s %12s %12s" % ("x", "ReLU", "GELU", "GELU (tanh)"))
    xs = torch.tensor([-3.0, -2.0, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.0, 3.0])
    relu, gelu, gelu_tanh = torch.relu(xs), nn.GELU()(xs), nn.GELU(approximate="tanh")(xs)
    for row in zip(xs.tolist(), relu.tolist(), gelu.tolist(), gelu_tanh.tolist()):
        p("%6s %8s %12s %12s" % (num(row[0], 1), num(row[1]), num(row[2]), num(row[3])))
    p()
    p("The feed-forward network (1.18): every token's 768 numbers go through the same two Linears")
    torch.manual_seed(123)
    ff = nn.Sequential(nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, 768))
    h = torch.randn(2, 3, 768)
    p("%-30s %s" % ("input (batch, tokens, 768)", torch_size(h)))
    for name, layer in (("Linear(768 -> 3072)", ff[0]), ("GELU", ff[1]), ("Linear(3072 -> 768)", ff[2])):
        h = layer(h)
        p("%-30s %s" % ("after " + name, torch_size(h)))
    p("parameters: %d (768 x 3072 + 3072 + 3072 x 768 + 768)" % sum(t.numel() for t in ff.parameters()))


# ---------------------------------------------------------------------------
# Seed 001 exercise 3.1: SelfAttention_v2's weights in SelfAttention_v1
# ---------------------------------------------------------------------------

def exercise_3_1(p):
    inputs = journey_inputs()
    p("Exercise 3.1 (LLMs from scratch, chapter 3): SelfAttention_v2's weights in SelfAttention_v1")
    p()
    torch.manual_seed(789)
    sa_v2 = SelfAttentionV2(3, 2)
    out_v2 = sa_v2(inputs).detach()
    p("sa_v2 = SelfAttention_v2(3, 2) after torch.manual_seed(789); sa_v2(inputs):")
    p(repr(out_v2))
    torch.manual_seed(123)
    sa_v1 = SelfAttentionV1(3, 2)
    p("sa_v1 = SelfAttention_v1(3, 2) after torch.manual_seed(123), its own rand weights; sa_v1(inputs):")
    p(repr(sa_v1(inputs).detach()))
    p()
    p("nn.Linear stores its weight as (d_out, d_in) = (%d, %d): sa_v1 needs the transpose" % sa_v2.W_query.weight.shape)
    with torch.no_grad():
        sa_v1.W_query.copy_(sa_v2.W_query.weight.T)
        sa_v1.W_key.copy_(sa_v2.W_key.weight.T)
        sa_v1.W_value.copy_(sa_v2.W_value.weight.T)
    out_v1 = sa_v1(inputs).detach()
    p("sa_v1.W_query = sa_v2.W_query.weight.T (likewise W_key, W_value); sa_v1(inputs):")
    p(repr(out_v1))
    p("largest |sa_v1(inputs) - sa_v2(inputs)|: %s" % num((out_v1 - out_v2).abs().max(), 6))


# ---------------------------------------------------------------------------
# Seed 000 §1.1: the next-token table
# ---------------------------------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            raise SystemExit("make_chapter_outputs.py: %s: %s is %s, expected F32" % (path, name, e["dtype"]))
        begin, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + begin:8 + n + end]), dtype=torch.float32).reshape(e["shape"])
    return out


def next_token(p, model_dir, prompt, top):
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    model = GPT2LMHeadModel(config)
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    state = {"transformer." + k: v for k, v in tensors.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state)
    model.eval()
    encoder, ranks = load_gpt2_vocab(model_dir)
    by_id = {i: t for t, i in encoder.items()}
    spelling_to_byte = {c: b for b, c in bytes_to_unicode().items()}
    ids = gpt2_encode(prompt, encoder, ranks)
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([ids]))[0][0, -1], dim=-1)
    values, indices = torch.topk(probs, top)
    p("The next token after a prompt (BERT from scratch 1.1), GPT-2 from %s" % os.path.basename(model_dir))
    p("prompt: %s, %d tokens: %s" % (quoted(prompt), len(ids),
                                     " ".join(quoted(gpt2_token_text(by_id[i], spelling_to_byte)) for i in ids)))
    p()
    p("%4s  %-14s %6s  %11s" % ("rank", "next token", "id", "probability"))
    for rank, (v, i) in enumerate(zip(values.tolist(), indices.tolist()), 1):
        p("%4d  %-14s %6d  %10s%%" % (rank, quoted(gpt2_token_text(by_id[i], spelling_to_byte)), i, num(100 * v, 2)))
    p("the %d tokens shown hold %s%% of the probability" % (top, num(100 * sum(values.tolist()), 2)))


# ---------------------------------------------------------------------------

def write(out_dir, name, chapter, *args):
    buf = io.StringIO()
    chapter(lambda line="": buf.write(line + "\n"), *args)
    path = os.path.join(out_dir, name)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(buf.getvalue())
    print("%s: %d bytes" % (path, len(buf.getvalue().encode("utf-8"))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "chapters"),
                    help="output directory (default: <repo>/tests/data/chapters)")
    ap.add_argument("--data", default=os.environ.get("EIGENFORMER_DATA_DIR") or os.path.join(REPO, "..", "shared", "data"),
                    help="the data directory holding gpt2/encoder.json + vocab.bpe (default: $EIGENFORMER_DATA_DIR, "
                         "then ../shared/data next to the repository); without it tokenize_gpt2.txt is not written")
    args = ap.parse_args(argv)
    check_native_fma()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    write(args.out, "bpe_toy.txt", bpe_toy)
    write(args.out, "tokenize_tiny.txt", tokenize, TINY_GPT2, TINY_TOKENIZE_TEXT)
    gpt2_dir = os.path.join(args.data, "gpt2")
    if os.path.exists(os.path.join(gpt2_dir, "encoder.json")):
        write(args.out, "tokenize_gpt2.txt", tokenize, os.path.normpath(gpt2_dir), TOKENIZE_TEXT)
    else:
        print("%s: no GPT-2 vocabulary, tokenize_gpt2.txt left as it is" % gpt2_dir)
    write(args.out, "positions.txt", positions)
    write(args.out, "mask_leak.txt", mask_leak)
    write(args.out, "layernorm_gelu.txt", layernorm_gelu)
    write(args.out, "exercise_3_1.txt", exercise_3_1)
    write(args.out, "next_token_tiny.txt", next_token, TINY_GPT2, TINY_PROMPT, 10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
