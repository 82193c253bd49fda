#!/usr/bin/env python3
"""Copies an onnxruntime-node install and edits the copy's libonnxruntime so that ONNX Runtime takes its AVX2 /
FMA3 code on a CPU with AVX-512: a stand-in, on an AVX-512 machine, for ONNX Runtime on an AVX2-only CPU such as
the AMD Zen 3 kind, to set beside eigenformer's AVX2 kernels (EIGENFORMER_MAX_CPU_ISA=avx2) and OpenBLAS's
Haswell kernel. ONNX Runtime has no setting for this: its kernel library (MLAS) picks its kernels from CPUID
when the library loads.

  /usr/bin/python3 bench/ort_avx2.py /work/ort /tmp/ort-avx2
  EIGENFORMER_MAX_CPU_ISA=avx2 /usr/bin/python3 bench/table.py --openblas-coretype Haswell \\
      --build-dir <benchmarks built with -march=znver3> --ort-dir /tmp/ort-avx2 ...

Two tests in the x86-64 library change, each found by its bytes and required to occur exactly once (anything
else stops the script with a message, nothing written):
- MLAS's choice of kernels, `if ((cpuid(7).ebx & 0x10000) && (xcr0 & 0xE0) == 0xE0)` (AVX512F, and the OS saving
  the ZMM state), compiled as `test $0x10000, reg` then, a few instructions on, `test $0xe0, %al` on ~xcr0. Its
  mask becomes 0, so the test fails as on a CPU without AVX512F and MLAS keeps its FMA3 kernels.
- ONNX Runtime's own CPU description (CPUIDInfo, which its code outside MLAS consults), which takes AVX-512 as usable
  when ~xcr0 & 0xE6 is 0 (`test $0xe6, %al` then `sete`); its mask becomes 0xFF, which also asks for the MPX
  state bits (3 and 4) that these CPUs do not set, so it reports no AVX-512.
Checked on onnxruntime-node 1.31.1 (Linux x64): the patched library's hot instructions in a BERT-base forward,
sampled by `perf record`, use ymm registers only and none zmm (bench/README.md). Another version may compile
these tests differently; the script then says which pattern it did not find once.
"""
import argparse
import os
import re
import shutil
import sys

MARKER = "HELD_TO_AVX2"
LIBRARY = os.path.join("node_modules", "onnxruntime-node", "bin", "napi-v6", "linux", "x64", "libonnxruntime.so.1")

# test $0x10000, r32 (F7 /0 id, optional REX.B), up to 16 bytes of other instructions, then test $0xe0, %al.
MLAS_AVX512F = re.compile(rb"(?:\x41)?\xf7[\xc0-\xc7]\x00\x00\x01\x00.{0,16}?\xa8\xe0", re.S)
# test $0xe6, %al directly followed by sete r8 (0F 94, optional REX prefix).
CPUIDINFO_AVX512 = re.compile(rb"\xa8\xe6(?:[\x40-\x4f])?\x0f\x94", re.S)


class Failure(Exception):
    pass


def patch(data, pattern, what, offset_in_match, new_byte):
    matches = list(pattern.finditer(data))
    if len(matches) != 1:
        raise Failure(f"{what}: its pattern occurs {len(matches)} times in the library, not once; "
                      "a copy edited already, or a version that compiles it differently; nothing was written")
    at = matches[0].start() + offset_in_match
    old = data[at]
    data[at] = new_byte
    return at, old


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="an onnxruntime-node npm directory (holding node_modules/onnxruntime-node)")
    ap.add_argument("destination", help="where the edited copy goes (must not exist)")
    a = ap.parse_args()
    src_lib = os.path.join(a.source, LIBRARY)
    if not os.path.isfile(src_lib):
        raise Failure(f"{a.source}: no {LIBRARY} there")
    if os.path.exists(a.destination):
        raise Failure(f"{a.destination} exists; give a new directory")
    data = bytearray(open(src_lib, "rb").read())
    # The byte to clear is the 0x01 of the immediate 0x00010000 (stored 00 00 01 00), after the optional REX
    # byte, F7 and the ModRM byte.
    m = MLAS_AVX512F.search(data)
    rex = 1 if m is not None and data[m.start()] == 0x41 else 0
    at1, old1 = patch(data, MLAS_AVX512F, "MLAS's AVX512F test", rex + 4, 0x00)
    at2, old2 = patch(data, CPUIDINFO_AVX512, "CPUIDInfo's AVX-512 state test", 1, 0xFF)
    tmp = a.destination + ".partial"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    shutil.copytree(a.source, tmp, symlinks=True)
    lib = os.path.join(tmp, LIBRARY)
    os.remove(lib)  # a new file, never written through a hard link into the source install
    with open(lib, "wb") as f:
        f.write(data)
    # bench/table.py reads this file to say in its header that this ONNX Runtime was held to AVX2.
    with open(os.path.join(tmp, MARKER), "w") as f:
        f.write(f"held to AVX2 by bench/ort_avx2.py from {os.path.abspath(a.source)}: bytes 0x{at1:x} "
                f"0x{old1:02x} -> 0x00, 0x{at2:x} 0x{old2:02x} -> 0xff\n")
    os.rename(tmp, a.destination)
    print(f"ort_avx2.py: {a.destination}: MLAS's AVX512F mask byte at 0x{at1:x} 0x{old1:02x} -> 0x00, "
          f"CPUIDInfo's AVX-512 state mask at 0x{at2:x} 0x{old2:02x} -> 0xff")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"ort_avx2.py: {e}", file=sys.stderr)
        sys.exit(1)
