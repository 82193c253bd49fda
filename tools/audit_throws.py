#!/usr/bin/env python3
"""Which of the library's `throw`s does some test trigger and check the message of?

Usage (from anywhere):

    python3 tools/audit_throws.py            # summary + every site no test checks
    python3 tools/audit_throws.py --all      # every site, tested or not, with the test file that checks it
    python3 tools/audit_throws.py --strict   # also exit 1 when a reachable site is untested

Each throw in include/eigenformer becomes a message template: its string literals in order, with a
wildcard wherever the message has a computed part (a shape, a file name, an `op` passed in). A site counts as
tested when a string literal in tests/ fits inside that template (as a substring of some message it can
produce) and covers enough of its literal text: tests check messages with doctest::Contains("..."),
CHECK_THROWS_WITH_EXACTLY or `error_of<E>(...).find("...")`, all of which leave the fragment in the test as
a literal. Each test literal credits only the site(s) it fits best, so the common ": must be positive" of two
messages does not mark both. Not a proof: a test literal that happens to fit a message marks it tested, and
a message built in a helper from its caller's literals is matched through the callers (the throwing helpers
marked [[noreturn]], and named lambdas that throw, are expanded into their call sites).

Sites that no public input reaches are listed in UNREACHABLE below with the reason, and not counted as gaps.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include" / "eigenformer"
TESTS = ROOT / "tests"

# (file relative to include/eigenformer, a fragment of the throw's source text) -> why no test can reach it.
UNREACHABLE = {
    ("tensor/print.hpp", "number formatting failed"):
        "std::to_chars / snprintf into a buffer sized for the longest double cannot fail",
    ("tensor/onednn_gemm.hpp", "dnnl_sgemm failed"):
        "oneDNN reports failure only for arguments the caller already checked (and is an optional backend)",
    ("tokenizers/unicode.hpp", "bad_alloc"): "utf8proc out of memory",
    ("tensor/backend.hpp", "rethrow_exception"): "rethrows a worker's exception; not an error of its own",
    ("train/sentiment.hpp", "throw;"): "rethrows after removing a half-written file",
    ("io/detail/atomic_file.hpp", "writing failed"):
        "needs a write error (disk full, EIO) after the file was created; not producible in a unit test",
    ("io/detail/atomic_file.hpp", "cannot replace the file"):
        "needs rename() to fail after the temporary file was written in the same directory",
    ("io/safetensors.hpp", "cannot stat the file"): "fstat on an open descriptor fails only on EIO/EOVERFLOW",
    ("io/safetensors.hpp", "read_failure(offset, n, got) + \": \" + errno_text"):
        "pread() returning -1 on an open regular file needs an I/O error",
    ("io/safetensors.hpp", "modification time is not"):
        "a file rewritten with the same size while being read: a race a test cannot time",
    ("io/safetensors.hpp", "ended early or could not be"):
        "the stream reader (no POSIX pread) is used only where <unistd.h> is missing",
    ("io/safetensors.hpp", "cannot read: cannot open the file"):
        "the stream reader (no POSIX pread) is used only where <unistd.h> is missing",
    ("io/safetensors.hpp", "source + \": cannot read: \" + ec.message()"):
        "the stream reader (no POSIX pread) is used only where <unistd.h> is missing",
    ("io/safetensors.hpp", ") are outside the "):
        "in-memory reads use offsets from the validated header; kept as a check against reading wild memory",
    ("io/state_dict.hpp", "parameters had been loaded"):
        "a read failing after the file was checked unchanged: an I/O error or a race a test cannot time",
    ("models/pretrained.hpp", "\": read error\""): "an I/O error on a regular file that opened",
    ("tokenizers/gpt2.hpp", "\"read error\""): "an I/O error on a regular file that opened",
    ("tokenizers/wordpiece.hpp", "cannot read the vocabulary file"):
        "an I/O error on a file that opened (directories are refused before)",
    ("train/sentiment.hpp", "cannot read the file"): "an I/O error on a file that opened (directories are refused before)",
    ("tokenizers/unicode.hpp", "utf8proc_map failed"): "called on text already checked to be valid UTF-8",
    ("train/char_lm.hpp", "the vocabulary is not valid UTF-8"):
        "nlohmann::json's parser already refuses invalid UTF-8 and lone surrogates in trainer.json",
    ("train/sentiment.hpp", "cannot save: "):
        "a std::filesystem rename failing after the new directory was written (permissions do not stop root)",
}

LITERAL = re.compile(r'R"([^(\s]*)\((.*?)\)\1"|"((?:[^"\\\n]|\\.)*)"|\'(?:[^\'\\\n]|\\.)\'', re.S)


def strip_comments(src):
    """Blank out // and /* */ comments, keeping string literals and line numbers."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or (c == "R" and src.startswith('R"', i)):
            m = LITERAL.match(src, i)
            if m:
                out.append(m.group(0))
                i = m.end()
                continue
        if c == "'":
            m = re.compile(r"'(?:[^'\\\n]|\\.)'").match(src, i)
            if m:
                out.append(m.group(0))
                i = m.end()
                continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def statement_end(src, start):
    """Index just past the ';' that ends the statement starting at `start` (parentheses balanced)."""
    depth, i = 0, start
    while i < len(src):
        if src[i] in "\"'" or src.startswith('R"', i):
            m = LITERAL.match(src, i)
            if m:
                i = m.end()
                continue
        c = src[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return i


def literals(text):
    return [m.group(2) if m.group(2) is not None else m.group(3)
            for m in LITERAL.finditer(text) if m.group(0)[0] != "'"]


def template(expr):
    """The message pattern of a throw expression: a list of literal strings and None (any text)."""
    parts, last = [None], 0
    for m in LITERAL.finditer(expr):
        if m.group(0)[0] == "'":
            continue
        text = m.group(2) if m.group(2) is not None else m.group(3)
        gap = expr[last:m.start()]
        if parts and isinstance(parts[-1], str) and gap.strip() == "":
            parts[-1] += text  # adjacent literals concatenate
        else:
            if parts[-1] is not None:
                parts.append(None)
            parts.append(text)
        last = m.end()
    if parts[-1] is not None:
        parts.append(None)
    return parts


def best_fit(fragment, parts):
    """The most literal characters of `fragment` matched when it is placed inside some message of the
    template (wildcards match any text), or -1 when it fits nowhere."""
    # Flatten to tokens: a character, or None for a wildcard.
    tokens = []
    for p in parts:
        if p is None:
            if not tokens or tokens[-1] is not None:
                tokens.append(None)
        else:
            tokens.extend(p)
    n = len(tokens)
    NEG = -1
    # state[j] = best literal count with the fragment consumed so far ending before token j.
    # Wildcard tokens may absorb any number of fragment characters.
    state = [0] * (n + 1)  # the fragment may start anywhere
    for ch in fragment:
        new = [NEG] * (n + 1)
        for j in range(n):
            if state[j] < 0:
                continue
            t = tokens[j]
            if t is None:
                new[j] = max(new[j], state[j])  # the wildcard eats ch and may eat more
                new[j + 1] = max(new[j + 1], state[j])
            elif t == ch:
                new[j + 1] = max(new[j + 1], state[j] + 1)
        # A wildcard may also match the empty string: skip over it.
        for j in range(n):
            if tokens[j] is None and new[j] >= 0:
                new[j + 1] = max(new[j + 1], new[j])
        state = new
    return max(state)


def throwing_helpers(src):
    """{name: (body start, body end)} of the [[noreturn]] functions and the named lambdas
    (`auto need = [](bool ok, ...) { if (!ok) throw ...; }`) whose body throws: their call sites are the
    throw sites, each with its own message."""
    out = {}
    for m in re.finditer(r"\[\[noreturn\]\][^;{(]*?\b(\w+)\s*\(|\bauto\s+(\w+)\s*=\s*\[[^\]]*\]\s*\(", src):
        open_brace = src.find("{", m.end())
        if open_brace < 0:
            continue
        depth, i = 0, open_brace
        while i < len(src):
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            if depth == 0:
                break
            i += 1
        if re.search(r"\bthrow\b", src[open_brace:i]):
            params = [re.findall(r"\w+", p.split("=")[0])[-1] for p in split_args(src[m.end():open_brace].rsplit(")", 1)[0])
                      if re.findall(r"\w+", p.split("=")[0])]
            out[m.group(1) or m.group(2)] = (open_brace, i, params)
    return out


def split_args(text):
    """The top-level comma-separated pieces of an argument or parameter list (without its parentheses)."""
    pieces, depth, last, i = [], 0, 0, 0
    while i < len(text):
        if text[i] in "\"'":
            m = LITERAL.match(text, i)
            if m:
                i = m.end()
                continue
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
        elif text[i] == "," and depth == 0:
            pieces.append(text[last:i])
            last = i + 1
        i += 1
    if text[last:].strip():
        pieces.append(text[last:])
    return [p.strip() for p in pieces]


def substitute(expr, names, values):
    """`expr` with each identifier in `names` replaced by its value, outside string literals."""
    table = dict(zip(names, values))
    out, last = [], 0
    for m in LITERAL.finditer(expr):
        out.append(re.sub(r"\b\w+\b", lambda w: table.get(w.group(0), w.group(0)), expr[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(re.sub(r"\b\w+\b", lambda w: table.get(w.group(0), w.group(0)), expr[last:]))
    return "".join(out)


def sites():
    out = []
    for path in sorted(INCLUDE.rglob("*.hpp")):
        rel = path.relative_to(INCLUDE).as_posix()
        raw = path.read_text()
        src = strip_comments(raw)
        line_of = lambda i: src.count("\n", 0, i) + 1
        helpers = throwing_helpers(src)
        for m in re.finditer(r"\bthrow\b|\bstd::rethrow_exception\b", src):
            end = statement_end(src, m.start())
            expr = src[m.start():end]
            kind = "throw"
            for name, (b, e, _) in helpers.items():
                if b < m.start() < e:
                    kind = "helper " + name
            arg = re.match(r"throw\s+[\w:]+\s*\(\s*(\w+)(\.str\(\))?\s*\)\s*;", expr)
            if arg:  # throw E(msg): the message was built in the lines before
                name = arg.group(1)
                decl = max(src.rfind(" " + name + " =", 0, m.start()), src.rfind(" " + name + "(", 0, m.start()),
                           src.rfind(" " + name + ";", 0, m.start()), src.rfind(" " + name + "{", 0, m.start()))
                if decl > 0 and m.start() - decl < 1500:
                    expr = src[decl:end]
            out.append(dict(file=rel, line=line_of(m.start()), expr=expr, kind=kind))
        for name in helpers:
            for m in re.finditer(r"(?<![\w.:])" + name + r"\s*\(", src):
                before = src[max(0, m.start() - 200):m.start()]
                if re.search(r"\[\[noreturn\]\][^;{]*$", before) or re.search(r"void\s+$", before):
                    continue  # the definition
                if any(b < m.start() < e for b, e, _ in helpers.values()):
                    continue  # a helper calling itself or another: counted at the outer call
                end = statement_end(src, m.start())
                call = src[m.start():end]
                args = split_args(call[call.index("(") + 1:call.rindex(")")])
                out.append(dict(file=rel, line=line_of(m.start()), expr=call, kind="calls " + name, args=args))
    # token_id_error::outside(id, size) builds its message in tokenizers/error.hpp.
    factories = {"token_id_error::outside(": [None, "id ", None, " is outside the vocabulary (size ", None, ")", None]}
    for s in out:
        s["template"] = template(s["expr"])
        for call, parts in factories.items():
            if call in s["expr"] and not any(s["template"]):
                s["template"] = parts
    # A call site throws the message its helper's body builds, with the call's arguments in place of the
    # parameters: need(ok, "dropout must be in [0, 1)") -> "CharLMConfig: " + "dropout must be in [0, 1)".
    bodies = {(s["file"], s["kind"].split()[1]): s for s in out if s["kind"].startswith("helper")}
    params = {}
    for path in sorted(INCLUDE.rglob("*.hpp")):
        for name, (_, _, names) in throwing_helpers(strip_comments(path.read_text())).items():
            params[(path.relative_to(INCLUDE).as_posix(), name)] = names
    for s in out:
        if s["kind"].startswith("calls"):
            body = bodies.get((s["file"], s["kind"].split()[1]))
            if body:
                names = params.get((s["file"], s["kind"].split()[1]), [])
                s["template"] = template(substitute(body["expr"], names, s["args"]))
    for s in out:
        s["literal_chars"] = sum(len(p) for p in s["template"] if p)
        s["unreachable"] = next((why for (f, frag), why in UNREACHABLE.items()
                                 if f == s["file"] and frag in s["expr"]), None)
    return out


def test_literals():
    out = []
    for path in sorted(TESTS.rglob("*")):
        if path.suffix not in (".cpp", ".hpp") or "consumer" in path.parts:
            continue
        src = strip_comments(path.read_text())
        for text in literals(src):
            if len(text) >= 8:
                out.append((text, path.relative_to(ROOT).as_posix()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all", action="store_true", help="list every site, not only the untested ones")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a reachable site is untested")
    args = ap.parse_args()

    all_sites = sites()
    # Helper bodies are counted through their call sites.
    counted = [s for s in all_sites if not s["kind"].startswith("helper")]
    # A fragment that fits a site shares at least one run of GRAM literal characters with it: a cheap
    # filter before the quadratic fit.
    GRAM = 5
    def grams(text, k):
        return {text[i:i + k] for i in range(len(text) - k + 1)}
    for s in counted:
        k = min(GRAM, s["literal_chars"])
        s["grams"] = set().union(*[grams(p, k) for p in s["template"] if p and len(p) >= k]) if k else set()
        s["k"] = k
    for text, where in test_literals():
        scores = []
        text_grams = {k: grams(text, k) for k in range(1, GRAM + 1)}
        for s in counted:
            if s["literal_chars"] == 0 or not (s["grams"] & text_grams[s["k"]]):
                continue
            # Enough of the message's own text: 12 characters, or all of a shorter message's text, or a
            # fragment of 8 or more that lies wholly in its text ("is_decoder", "0 <= p <= 1").
            score = best_fit(text, s["template"])
            if score >= min(12, s["literal_chars"]) or (score == len(text) and score >= 8):
                scores.append((score, s))
        if not scores:
            continue
        # Sites that fit within two characters of the best share the credit: "<file>: not a regular file"
        # from two readers differs only by whether ": " is part of the literal.
        top = max(sc for sc, _ in scores)
        for sc, s in scores:
            if sc >= top - 2:
                s.setdefault("tests", set()).add(where)

    # A site no input can reach is listed as such even when some test literal happens to fit its message
    # ("read error" from one reader fits every reader's).
    unreachable = [s for s in counted if s["unreachable"]]
    tested = [s for s in counted if s.get("tests") and not s["unreachable"]]
    gaps = [s for s in counted if not s.get("tests") and not s["unreachable"]]
    throws = sum(1 for s in all_sites if s["kind"] in ("throw",) or s["kind"].startswith("helper"))
    calls = sum(1 for s in all_sites if s["kind"].startswith("calls"))

    def show(s, note=""):
        first = " ".join(s["expr"].split())
        print(f"  {s['file']}:{s['line']}: {first[:150]}{note}")

    if args.all:
        print("tested:")
        for s in tested:
            show(s, "   <- " + ", ".join(sorted(s["tests"])))
    print("unreachable from public input:")
    for s in unreachable:
        show(s, "   (" + s["unreachable"] + ")")
    print("untested:")
    for s in gaps:
        show(s)
    print(f"\n{throws} throw statements and {calls} calls of throwing helpers = {len(counted)} sites "
          f"(helper bodies counted through their callers); {len(tested)} tested, {len(unreachable)} unreachable, "
          f"{len(gaps)} untested")
    return 1 if args.strict and gaps else 0


if __name__ == "__main__":
    sys.exit(main())
