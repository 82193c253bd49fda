#!/usr/bin/env python3
"""Reference BERT WordPiece ids for eigenformer's C++ tests (tests/data/bert_reference.json).

Usage (from anywhere; needs only the standard library, no torch, no transformers):

    /usr/bin/python3 tools/reference/tokenizers/bert_reference.py [--data DIR] [--out FILE]
    /usr/bin/python3 tools/reference/tokenizers/bert_reference.py --dump-sweep 0x3000 0x3100
    echo "time flies like an arrow" | /usr/bin/python3 tools/reference/tokenizers/bert_reference.py --ids

DIR defaults to ../shared/data next to the repository (it needs bert-base-uncased/vocab.txt and
sst2/*.txt); FILE defaults to tests/data/bert_reference.json. Every run writes the same bytes.

This is a second, independent implementation of the tokenizer BERT published with its checkpoints,
written from the description of the algorithm (not from eigenformer's C++ and not from another
project's code), so the C++ tests compare two implementations that share nothing but the rules:

  1. Bytes to text: UTF-8, where every invalid byte sequence becomes U+FFFD (which step 2 then drops,
     so invalid bytes vanish without splitting the word they sit in).
  2. Cleaning: drop U+0000, U+FFFD and every character of general category Cc or Cf except tab,
     newline and carriage return; those three and every Zs character become a space.
  3. A space on each side of every CJK ideograph (the eight CJK blocks BERT lists).
  4. Split on whitespace as Python's str.split() does (after step 2 that is ' ', U+2028, U+2029).
  5. do_lower_case: each word goes through str.lower() (full Unicode lower-casing, including the
     final-sigma rule and U+0130 -> 'i' + U+0307), then NFD, then every Mn character is dropped.
  6. Punctuation becomes a token of its own: ASCII 33-47, 58-64, 91-96, 123-126 and category P*.
  7. WordPiece per word: a word of more than 100 characters is [UNK]; otherwise take the longest
     vocabulary entry that prefixes the rest of the word ("##" in front after the first piece),
     repeatedly; a word where some position has no match is one [UNK].

Where implementations differ, this follows Google's tokenization.py (documented in
include/eigenformer/tokenizers/wordpiece.hpp): controls are Cc and Cf (Hugging Face drops every C*
character, so private-use and unassigned code points differ); no NFC before splitting (Hugging Face's
Python tokenizer adds one, which only matters without lower-casing); str.lower() lower-cases a final
sigma (so do Hugging Face's Python tokenizer; its Rust "fast" tokenizer maps it to a plain sigma);
"[CLS]" and the other special tokens in the text are ordinary text (Hugging Face keeps them whole).

The fixture holds (format "eigenformer-fixtures", version 1, keys sorted):
  * "sst2": every sentence of sst2/train.txt, dev.txt, test.txt in that order (the text after the
    label and its space): per chunk of 1000 sentences the SHA-256 of the ids (each sentence's ids as
    decimal numbers joined by single spaces, then "\\n"), the sentence and id counts; full ids of the
    first 200 sentences.
  * "hard_cases": ids and tokens of every line of tests/data/tokenizer_hard_cases.txt (lines are
    bytes: invalid UTF-8 stays invalid; a line starting with '#' is a comment and is skipped), and the
    file's SHA-256, so a test can tell that the fixture is older than the file.
  * "byte_cases": the same for the byte strings of BYTE_CASES (hex), mostly invalid UTF-8.
  * "sweep": every code point c outside the surrogates, in four words "A" c "b", c U+03A3, "A" c U+03A3
    and "A" U+03A3 c (character classes, lower-casing, accents; whether c is cased or case-ignorable,
    which decides the final sigma), words joined by single spaces, one text per plane (of the
    private-use planes 15 and 16 only every 1024th code point and U+xFFFD); per plane the SHA-256 of the basic tokenizer's tokens joined by "\\n"
    and of the ids (joined by spaces). Code points unassigned in this Python's Unicode (14.0 on
    Debian 12) are left out, because a newer Unicode (utf8proc 2.8 has 15.0) assigns some of them,
    which changes whether step 2 drops them; "skip_ranges" lists them.
"""

import argparse
import hashlib
import json
import os
import sys
import unicodedata

FORMAT = "eigenformer-fixtures"
VERSION = 1
MAX_WORD_CHARS = 100
SST2_FILES = ("train.txt", "dev.txt", "test.txt")
SST2_CHUNK = 1000
SST2_FULL = 200

# Byte strings for "byte_cases": invalid UTF-8 (kept out of the shared hard-case file, which other
# tokenizers' references read as text), NUL, and invalid bytes next to a capital sigma.
BYTE_CASES = (
    b"ab\xffcd", b"\xe2\x82x", b"\xc0\xafz", b"\xed\xa0\x80q", b"caf\xc3", b"caf\xc3\xa9", b"\xf4\x90\x80\x80",
    b"a\x00b", b"\xff\xfe\xfd", b"hello\x80world \xf0\x9f\x98 end", b"\xe0\x80\x80 overlong", b"\xf0\x90\x80 trunc4",
    b"\xc3\x28", b"na\xc3\xafve\xcc", b"\xce\xa3\xce\x9f\xce\xa3\xff", b"\xce\xa3\xff\xce\x91", b"\xce\x91\xce\xa3\xff\xce\x91",
    b"\xe4\xb8\xad\xff\xe6\x96\x87", b"un\xffaff\xfeable", b"\xef\xbb\xbfbom", b"\xed\x9f\xbf \xee\x80\x80 \xf4\x8f\xbf\xbf",
)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

# The CJK Unified Ideographs blocks and their extensions plus the two compatibility blocks, as BERT
# defines "Chinese character" (Hangul, kana and CJK punctuation are not in it).
CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def is_cjk(cp):
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def is_bert_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_bert_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def is_bert_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch)[0] == "P"


def clean(text):
    out = []
    for ch in text:
        if ch == "\x00" or ch == "\ufffd" or is_bert_control(ch):
            continue
        out.append(" " if is_bert_whitespace(ch) else ch)
    return "".join(out)


def space_cjk(text):
    return "".join(" " + ch + " " if is_cjk(ord(ch)) else ch for ch in text)


def lower_and_strip(word):
    decomposed = unicodedata.normalize("NFD", word.lower())
    return "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")


def split_punctuation(word):
    pieces, current = [], []
    for ch in word:
        if is_bert_punctuation(ch):
            if current:
                pieces.append("".join(current))
                current = []
            pieces.append(ch)
        else:
            current.append(ch)
    if current:
        pieces.append("".join(current))
    return pieces


def basic_tokenize(text, lower=True):
    words = space_cjk(clean(text)).split()
    tokens = []
    for word in words:
        if lower:
            word = lower_and_strip(word)
        tokens.extend(split_punctuation(word))
    return tokens


class WordPiece:
    def __init__(self, vocab_path):
        with open(vocab_path, "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self.vocab = {}
        for i, line in enumerate(lines):
            token = line.rstrip("\r")
            if token in self.vocab:
                raise SystemExit(f"{vocab_path}:{i + 1}: duplicate token {token!r}")
            self.vocab[token] = i
        self.unk = self.vocab["[UNK]"]

    def word_ids(self, word):
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            piece_id = None
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    piece_id, next_start = self.vocab[piece], end
                    break
            if piece_id is None:
                return [self.unk]
            ids.append(piece_id)
            start = next_start
        return ids

    def ids(self, text, lower=True):
        out = []
        for token in basic_tokenize(text, lower):
            out.extend(self.word_ids(token))
        return out


def decode_bytes(raw):
    return raw.decode("utf-8", errors="replace")


def ids_line(ids):
    return (" ".join(str(i) for i in ids) + "\n").encode("ascii")


def sst2_section(wp, data_dir):
    chunks, first, total_tokens, count = [], [], 0, 0
    digest, chunk_sentences, chunk_tokens = hashlib.sha256(), 0, 0
    for name in SST2_FILES:
        with open(os.path.join(data_dir, "sst2", name), "rb") as f:
            raw_lines = f.read().split(b"\n")
        if raw_lines and raw_lines[-1] == b"":
            raw_lines.pop()
        for lineno, raw in enumerate(raw_lines, 1):
            label, sep, sentence = raw.partition(b" ")
            if not sep or label not in (b"0", b"1"):
                raise SystemExit(f"sst2/{name}:{lineno}: expected 'LABEL sentence'")
            ids = wp.ids(decode_bytes(sentence))
            if count < SST2_FULL:
                first.append(ids)
            digest.update(ids_line(ids))
            chunk_sentences += 1
            chunk_tokens += len(ids)
            total_tokens += len(ids)
            count += 1
            if chunk_sentences == SST2_CHUNK:
                chunks.append({"sentences": chunk_sentences, "ids": chunk_tokens, "sha256": digest.hexdigest()})
                digest, chunk_sentences, chunk_tokens = hashlib.sha256(), 0, 0
    if chunk_sentences:
        chunks.append({"sentences": chunk_sentences, "ids": chunk_tokens, "sha256": digest.hexdigest()})
    return {"files": list(SST2_FILES), "chunk_size": SST2_CHUNK, "chunks": chunks, "sentences": count,
            "ids": total_tokens, "first": first}


def hard_case_lines(path):
    with open(path, "rb") as f:
        raw_lines = f.read().split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    for lineno, raw in enumerate(raw_lines, 1):
        if raw.startswith(b"#"):
            continue
        yield lineno, raw


def hard_cases_section(wp, path):
    cases = []
    for lineno, raw in hard_case_lines(path):
        text = decode_bytes(raw)
        cases.append({"line": lineno, "tokens": basic_tokenize(text), "ids": wp.ids(text)})
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"file": "tests/data/tokenizer_hard_cases.txt", "sha256": digest, "cases": cases}


def byte_cases_section(wp):
    return [{"hex": raw.hex(), "tokens": basic_tokenize(decode_bytes(raw)), "ids": wp.ids(decode_bytes(raw))}
            for raw in BYTE_CASES]


def skip_ranges():
    """Ranges [lo, hi] of code points this Python's Unicode leaves unassigned (category Cn)."""
    ranges, lo = [], None
    for cp in range(0x110001):
        unassigned = cp <= 0x10FFFF and unicodedata.category(chr(cp)) == "Cn" and not 0xD800 <= cp <= 0xDFFF
        if unassigned and lo is None:
            lo = cp
        elif not unassigned and lo is not None:
            ranges.append([lo, cp - 1])
            lo = None
    return ranges


def sweep_text(lo, hi):
    """The sweep's input for code points lo..hi: four words for each, joined by single spaces."""
    parts = []
    for cp in range(lo, hi + 1):
        if 0xD800 <= cp <= 0xDFFF or unicodedata.category(chr(cp)) == "Cn":
            continue
        if cp >= 0xF0000 and cp & 0x3FF != 0 and cp & 0xFFFF != 0xFFFD:
            continue  # planes 15 and 16 are private use throughout (Co, all alike): every 1024th and the last
        c = chr(cp)
        parts.extend(("A" + c + "b", c + "\u03a3", "A" + c + "\u03a3", "A\u03a3" + c))
    return " ".join(parts)


def sweep_section(wp):
    planes = []
    for plane in range(17):
        text = sweep_text(plane << 16, (plane << 16) | 0xFFFF)
        tokens = basic_tokenize(text)
        ids = [] if wp is None else wp.ids(text)
        planes.append({
            "plane": plane,
            "tokens": len(tokens),
            "tokens_sha256": hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest(),
            "ids": len(ids),
            "ids_sha256": hashlib.sha256(" ".join(str(i) for i in ids).encode("ascii")).hexdigest(),
        })
    return {"unicode": unicodedata.unidata_version, "skip_ranges": skip_ranges(), "planes": planes}


def write_fixture(out, payload):
    # One section per line, keys sorted, as tools/reference/make_fixtures.py writes its files.
    lines = ["{"]
    items = sorted(payload.items())
    for k, (key, value) in enumerate(items):
        sep = "," if k + 1 < len(items) else ""
        lines.append(json.dumps(key) + ":" + json.dumps(value, sort_keys=True, ensure_ascii=True,
                                                        separators=(",", ":")) + sep)
    lines.append("}")
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(REPO, "..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "bert_reference.json"))
    ap.add_argument("--hard-cases", default=os.path.join(REPO, "tests", "data", "tokenizer_hard_cases.txt"))
    ap.add_argument("--ids", action="store_true", help="print ids of each stdin line (like examples/tokenize)")
    ap.add_argument("--tokens", action="store_true", help="print WordPiece tokens of each stdin line")
    ap.add_argument("--vocab", help="with --ids/--tokens: this vocab.txt instead of DIR's bert-base-uncased")
    ap.add_argument("--dump-sweep", nargs=2, metavar=("LO", "HI"), help="print the sweep's basic tokens per code point, tab-separated")
    args = ap.parse_args()

    vocab_path = os.path.join(args.data, "bert-base-uncased", "vocab.txt")
    if args.dump_sweep:
        lo, hi = (int(x, 0) for x in args.dump_sweep)
        for cp in range(lo, hi + 1):
            if not 0xD800 <= cp <= 0xDFFF:
                sys.stdout.buffer.write(("U+%04X\t%s\n" % (cp, "\t".join(basic_tokenize(sweep_text(cp, cp))))).encode("utf-8", "surrogatepass"))
        return
    if args.ids or args.tokens:
        wp = WordPiece(args.vocab or vocab_path)
        inv = {i: t for t, i in wp.vocab.items()}
        for raw in sys.stdin.buffer.read().split(b"\n")[:-1]:
            ids = wp.ids(decode_bytes(raw))
            print(" ".join(inv[i] if args.tokens else str(i) for i in ids))
        return

    wp = WordPiece(vocab_path)
    with open(vocab_path, "rb") as f:
        vocab_md5 = hashlib.md5(f.read()).hexdigest()
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "generator": "tools/reference/tokenizers/bert_reference.py",
        "python_unicode": unicodedata.unidata_version,
        "vocab_md5": vocab_md5,
        "time_flies": wp.ids("time flies like an arrow"),
        "sst2": sst2_section(wp, args.data),
        "sweep": sweep_section(wp),
        "byte_cases": byte_cases_section(wp),
    }
    if os.path.exists(args.hard_cases):
        payload["hard_cases"] = hard_cases_section(wp, args.hard_cases)
    else:
        print(f"warning: {args.hard_cases} not found, no hard_cases section", file=sys.stderr)
    write_fixture(args.out, payload)
    print(f"{args.out}: {os.path.getsize(args.out)} bytes; sst2 {payload['sst2']['sentences']} sentences, "
          f"{payload['sst2']['ids']} ids; {len(payload.get('hard_cases', {}).get('cases', []))} hard cases")


if __name__ == "__main__":
    main()
