#!/usr/bin/env python3
"""Write the safetensors fixtures of eigenformer's checkpoint tests (tests/data/safetensors/).

Usage (from anywhere; the default output is <repo>/tests/data/safetensors):

    /usr/bin/python3 tools/reference/make_safetensors_fixtures.py [--out DIR]

Needs only torch. The `safetensors` package is not used (Debian does not ship it): the files are written
by the small writer below, from the format's specification (https://github.com/huggingface/safetensors,
"Format"), with tensors and conversions from torch:

  reference.safetensors   F32, F64, F16, BF16, I64, I32 and BOOL tensors, a 0-d and an empty tensor, and
                          "__metadata__", listed in the header in an order that is neither by name nor by
                          offset (readers must not depend on either)
  reference.json          what each tensor holds after torch's conversion: .float() for F16/BF16, the
                          values themselves otherwise, and the metadata (eigenformer-fixtures format,
                          written by fixture_io.py, see README.md)
  writer_layout.safetensors  the bytes the reference implementation's writer produces for a small dict:
                          tensors sorted by dtype alignment (largest first), then by name; "__metadata__"
                          first; compact JSON padded with spaces to a multiple of 8 bytes
  malformed/*.safetensors one defect each, listed with a description in malformed.json

Every run writes the same bytes (fixed seeds, no timestamps).
"""

import argparse
import json
import math
import os
import struct

import torch

from fixture_io import enc, write_fixture

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "safetensors"))

ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4,
            "F32": 4, "F64": 8, "I64": 8, "U64": 8}
# The reference implementation's dtype order (increasing alignment); its writer sorts by it, descending.
ALIGNMENT_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
                   "F32", "F64", "I64", "U64"]
TORCH_DTYPE = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}


def raw_bytes(t):
    """The tensor's elements, little-endian, row-major (this is an x86 / little-endian machine)."""
    assert struct.pack("=H", 1) == struct.pack("<H", 1), "run on a little-endian machine"
    t = t.contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.view(torch.int16)  # numpy has no bfloat16; the bits are what is stored
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.numpy().tobytes()


def header_bytes(header):
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return text + b" " * ((8 - len(text) % 8) % 8)


def file_bytes(header, data=b""):
    h = header_bytes(header)
    return struct.pack("<Q", len(h)) + h + data


def write(path, content):
    with open(path, "wb") as f:
        f.write(content)


def write_streamed_f32(path, specs, make_tensor, seed):
    """A safetensors file of F32 tensors written one at a time, for models too large to hold twice: `specs`
    is [(name, shape, kind)] in the file's order, make_tensor(shape, kind, generator) makes each from a
    torch.Generator seeded with `seed`. Offsets come from the shapes alone, so the header goes first and each
    tensor is made, written and dropped in turn. Written under a temporary name and renamed when complete,
    so an interrupted run leaves no half-written file. Returns the file's size in bytes."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in specs:
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    h = header_bytes(header)
    gen = torch.Generator()
    gen.manual_seed(seed)
    temp = path + ".tmp-%d" % os.getpid()
    try:
        with open(temp, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for name, shape, kind in specs:
                b = raw_bytes(make_tensor(shape, kind, gen))
                assert len(b) == header[name]["data_offsets"][1] - header[name]["data_offsets"][0], name
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    return 8 + len(h) + offset


def half_patterns(exponent_bits, mantissa_bits, mantissas, exponents=None):
    """Bit patterns with every exponent, a few mantissas and both signs: zeros, subnormals, normals,
    the largest finite value, infinities and NaNs."""
    out = []
    for sign in (0, 1):
        for e in exponents if exponents is not None else range(1 << exponent_bits):
            for m in mantissas:
                out.append((sign << (exponent_bits + mantissa_bits)) | (e << mantissa_bits) | m)
    return [b - (1 << 16) if b >= 1 << 15 else b for b in out]  # as int16


def reference_tensors():
    gen = torch.Generator().manual_seed(20261129)
    f16 = torch.tensor(half_patterns(5, 10, [0, 1, 0x155, 0x3FF]), dtype=torch.int16).view(torch.float16)
    # bfloat16: every 9th exponent plus the edges (the C++ test also checks all 65536 patterns by rule).
    exponents = sorted(set(range(0, 256, 9)) | {1, 126, 127, 128, 254, 255})
    bf16 = torch.tensor(half_patterns(8, 7, [0, 1, 0x55, 0x7F], exponents), dtype=torch.int16).view(torch.bfloat16)
    return {
        "f32.matrix": torch.randn(3, 5, generator=gen),
        "f64.vector": torch.randn(7, generator=gen, dtype=torch.float64),
        "f16.patterns": f16.reshape(16, 16),
        "bf16.patterns": bf16.reshape(-1, 8),
        "f16.randn": torch.randn(2, 3, 4, generator=gen).half(),
        "i64.ids": torch.tensor([0, 1, -1, 50256, 2**62, -2**63, 2**63 - 1], dtype=torch.int64),
        "i32.ids": torch.tensor([-5, 0, 7, 2**31 - 1, -2**31], dtype=torch.int32),
        "bool.mask": torch.tensor([[True, False, True], [False, False, True]]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
    }


def expected(t):
    """What a reader returns: float32 for F16/BF16/F32 (torch's .float()), float64 for F64, int64 for the
    integer dtypes."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.float()
    if t.dtype == torch.int32:
        return t.long()
    return t


def write_reference(out):
    tensors = reference_tensors()
    # Data in reverse name order, header entries in yet another order (by dtype name, then name).
    data = b""
    header = {}
    offsets = {}
    for name in sorted(tensors, reverse=True):
        b = raw_bytes(tensors[name])
        offsets[name] = (len(data), len(data) + len(b))
        data += b
    for name in sorted(tensors, key=lambda n: (TORCH_DTYPE[tensors[n].dtype], n)):
        t = tensors[name]
        header[name] = {"dtype": TORCH_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": list(offsets[name])}
    header["__metadata__"] = {"format": "pt", "written_by": "make_safetensors_fixtures.py"}
    write(os.path.join(out, "reference.safetensors"), file_bytes(header, data))

    cases = [{"name": name, "safetensors_dtype": TORCH_DTYPE[t.dtype], "out": enc(expected(t))}
             for name, t in sorted(tensors.items())]
    cases.append({"name": "__metadata__", "metadata": header["__metadata__"]})
    write_fixture(os.path.join(out, "reference.json"), cases)


def write_layout(out):
    """The reference writer's layout (safetensors/src/tensor.rs, `prepare`): sort by dtype, largest
    alignment first, then by name; offsets follow that order; metadata first."""
    gen = torch.Generator().manual_seed(7)
    tensors = {
        "b.weight": torch.randn(2, 3, generator=gen),
        "a.bias": torch.randn(4, generator=gen),
        "c.f64": torch.randn(3, generator=gen, dtype=torch.float64),
        "ids": torch.tensor([3, 1, 4], dtype=torch.int64),
    }
    order = sorted(tensors, key=lambda n: (-ALIGNMENT_ORDER.index(TORCH_DTYPE[tensors[n].dtype]), n.encode()))
    header = {"__metadata__": {"format": "pt"}}
    data = b""
    for name in order:
        b = raw_bytes(tensors[name])
        header[name] = {"dtype": TORCH_DTYPE[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    write(os.path.join(out, "writer_layout.safetensors"), file_bytes(header, data))


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def raw_file(header_text, data=b"", length=None):
    """A file whose header is exactly `header_text` (bytes), with an optional forged length."""
    n = len(header_text) if length is None else length
    return struct.pack("<Q", n) + header_text + data


def write_malformed(out):
    d = os.path.join(out, "malformed")
    os.makedirs(d, exist_ok=True)
    f32x4 = struct.pack("<4f", 1, 2, 3, 4)
    cases = [
        ("truncated_length", b"\x10\x00\x00\x00\x00", "5 bytes: shorter than the 8-byte header length"),
        ("header_past_eof", raw_file(b"{}      ", length=1000), "header length 1000, but only 8 bytes follow"),
        ("header_over_limit", raw_file(b"{}      ", length=2**63 + 5), "header length over the format's 100 MB limit"),
        ("header_empty", raw_file(b"", length=0), "header length 0"),
        ("not_json", raw_file(b'{"a": {"dtype": "F32",'), "header cut off in the middle of the JSON"),
        ("not_object", raw_file(b"[1, 2, 3]"), "header is a JSON array"),
        ("invalid_utf8", raw_file(b'{"caf\xe9": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'),
         "a tensor name in Latin-1, not UTF-8"),
        ("nul_padding", raw_file(b"{}" + b"\x00" * 6), "header padded with NUL bytes instead of spaces"),
        ("duplicate_key", raw_file(b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
                                   b'"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}', f32x4),
         "the tensor name \"a\" twice"),
        ("unknown_dtype", file_bytes({"a": entry("F7", [2], 0, 8)}, f32x4[:8]), "dtype \"F7\""),
        ("missing_dtype", file_bytes({"a": {"shape": [2], "data_offsets": [0, 8]}}, f32x4[:8]), "no \"dtype\""),
        ("negative_dim", file_bytes({"a": entry("F32", [-2, 1], 0, 8)}, f32x4[:8]), "shape [-2, 1]"),
        ("float_dim", raw_file(b'{"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}', f32x4[:8]),
         "shape [2.0]"),
        ("shape_overflow", file_bytes({"a": entry("F32", [2**40, 2**40], 0, 0)}), "2^80 elements"),
        ("offsets_reversed", file_bytes({"a": entry("F32", [1], 8, 4)}, f32x4[:8]), "data_offsets [8, 4]"),
        ("offsets_past_end", file_bytes({"a": entry("F32", [2, 3], 0, 24)}, f32x4), "24 bytes claimed, 16 present"),
        ("size_mismatch", file_bytes({"a": entry("F32", [2, 3], 0, 20)}, f32x4 + f32x4[:4]), "F32 [2, 3] in 20 bytes"),
        ("overlap", file_bytes({"a": entry("F32", [4], 0, 16), "b": entry("F32", [4], 8, 24)}, f32x4 + f32x4[:8]),
         "b starts inside a"),
        ("gap", file_bytes({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 16, 24)}, f32x4 + f32x4[:8]),
         "bytes [8, 16) belong to no tensor"),
        ("trailing_bytes", file_bytes({"a": entry("F32", [2], 0, 8)}, f32x4[:12]), "4 bytes after the last tensor"),
        ("metadata_not_string", file_bytes({"__metadata__": {"epoch": 3}, "a": entry("F32", [2], 0, 8)}, f32x4[:8]),
         "a metadata value that is a number"),
        ("offsets_not_pair", file_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, f32x4[:8]),
         "data_offsets with one number"),
        ("deep_nesting", raw_file(b'{"a": {"dtype": "F32", "shape": [[[[2]]]], "data_offsets": [0, 8]}}', f32x4[:8]),
         "lists nested inside the shape"),
        ("entry_not_object", file_bytes({"a": 5}), "a tensor entry that is a number"),
    ]
    manifest = []
    for name, content, what in cases:
        write(os.path.join(d, name + ".safetensors"), content)
        manifest.append({"file": "malformed/" + name + ".safetensors", "defect": what})
    with open(os.path.join(out, "malformed.json"), "w") as f:
        f.write(json.dumps({"files": manifest}, indent=1, ensure_ascii=True) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    write_reference(args.out)
    write_layout(args.out)
    write_malformed(args.out)
    total = 0
    for root, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"{args.out}: {total} bytes")


if __name__ == "__main__":
    main()
