"""The "eigenformer-fixtures" version 1 envelope shared by the layer reference scripts
(make_nn_fixtures.py, make_attention_fixtures.py, make_gpt2_fixtures.py): how tensors are encoded and how a
file is written. See README.md ("Format (version 1)").

Float32 values are written as the shortest decimal that round-trips the float32 (parse as double, then cast
to float32), which keeps the files small; JSON has no inf/nan, so those are the strings "inf", "-inf", "nan".
Files are written with sorted keys and one case a line, so every run writes the same bytes.
"""

import json
import math
import struct

import numpy as np
import torch

FORMAT = "eigenformer-fixtures"
VERSION = 1


def f32_bits(v):
    return struct.unpack("f", struct.pack("f", v))[0]


def fval(x, dtype):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if dtype == torch.float32:
        short = float(repr(np.float32(x)))
        if f32_bits(short) == x:
            return short
    return x


def enc(t):
    t = t.detach().contiguous()
    flat = t.reshape(-1).tolist()
    if t.dtype == torch.bool:
        return {"dtype": "bool", "shape": list(t.shape), "data": [bool(v) for v in flat]}
    if t.dtype == torch.int64:
        return {"dtype": "int64", "shape": list(t.shape), "data": [int(v) for v in flat]}
    names = {torch.float32: "float32", torch.float64: "float64"}
    return {"dtype": names[t.dtype], "shape": list(t.shape), "data": [fval(v, t.dtype) for v in flat]}


def q4(t):
    """Rounded to 4 decimals in the tensor's own dtype: short in JSON, and exactly the value computed with
    (a float64 tensor holds the double nearest to each decimal, which is what a C++ double parses)."""
    return torch.from_numpy(np.round(t.detach().double().numpy(), 4)).to(t.dtype)


def jnum(v):
    return fval(v, torch.float64) if isinstance(v, float) else v


def write_fixture(path, cases, count_by=None):
    """Write the envelope with one case a line. count_by names a case field (e.g. "kind" or "op"): the
    envelope then declares how many cases hold each of its values, "counts": {field: {value: n}}, so a test
    looping over the cases of one value can check it ran exactly that many (a renamed value otherwise makes
    the loop run zero times and pass)."""
    names = [c["name"] for c in cases]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise AssertionError("duplicate case names in %s: %s" % (path, dup))
    dump = lambda o: json.dumps(o, sort_keys=True, separators=(",", ":"), allow_nan=False)  # noqa: E731
    counts = ""
    if count_by is not None:
        per_value = {}
        for c in cases:
            per_value[c[count_by]] = per_value.get(c[count_by], 0) + 1
        counts = '"counts":%s,' % dump({count_by: per_value})
    text = ('{"cases":[\n' + ",\n".join(dump(c) for c in cases) + "\n]," + counts +
            '"format":%s,"torch":%s,"version":%s}\n'
            % (dump(FORMAT), dump(torch.__version__), dump(VERSION)))
    json.loads(text)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    return len(text.encode("ascii"))


def data_gen(seed):
    """Inputs, probes and parameter values come from their own generators, never the global stream."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def parse_args(doc, argv=None, add_arguments=None):
    """A fixture script's command line: --out (default: <repo>/tests/data), plus whatever add_arguments(parser)
    adds for scripts that take more options."""
    import argparse
    import os

    default_out = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data"))
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--out", default=default_out, help="output directory (default: <repo>/tests/data)")
    if add_arguments is not None:
        add_arguments(ap)
    return ap.parse_args(argv)


def output_dir(doc, argv=None):
    """The --out directory of a fixture script (default: <repo>/tests/data), from its command line."""
    return parse_args(doc, argv).out


def write_budgeted(out_dir, file_name, cases, budget_bytes, count_by=None):
    """write_fixture into out_dir, print its size, and refuse a file over its size budget."""
    import os

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, file_name)
    size = write_fixture(path, cases, count_by)
    print("%-40s %8d bytes %5d cases" % (path, size, len(cases)))
    if size >= budget_bytes:
        raise SystemExit("%s is over its %d KB budget" % (file_name, budget_bytes // 1000))
    return size
