#!/usr/bin/env python3
"""Generate PyTorch reference fixtures for eigenformer's bfloat16 weight storage (tests/data/bf16.json).

Usage (from anywhere; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_bf16_fixtures.py [--out DIR]

Cases (field "kind"):

  * "round": float32 bit patterns ("bits", as unsigned 32-bit integers, so NaN payloads survive JSON) and the
    bfloat16 bit patterns torch gives them with x.to(torch.bfloat16) on a contiguous tensor ("bf16", unsigned
    16-bit integers). The patterns cover ties to even in both directions, values a unit below and above a
    tie, rounding that carries into the exponent, the largest finite floats (which round to inf), +-inf,
    +-0, subnormals (ties among them too), NaNs with several payloads and both signs, and random patterns.
  * "bert": the tiny BERT models of make_bert_fixtures.py ("model": the name of the case in bert_tiny.json
    whose parameters and inputs are used: "bert_mlm", "bert_seqcls") with every Linear weight and the word
    embeddings rounded to bfloat16 and back (biases, LayerNorm, position and token-type embeddings stay
    float32), which is what the BERT models' to_bf16_weights computes with: "logits", their eval logits on
    that case's inputs (padding included), and "fp32_logits", the float32 model's, for the size of the change.
  * "gpt2": the tiny GPT-2 of make_gpt2_fixtures.py (same parameters, ids and prompts, eigenformer's
    tests/data/gpt2_tiny.json) with every Conv1D weight and wte rounded to bfloat16 and back to float32
    (p.to(torch.bfloat16).float(): weight-only rounding, float32 arithmetic), which is what
    GPT2LMHeadModel::to_bf16_weights computes with: its eval logits on the "model" case's input_ids, and its
    greedy generation from the "greedy" case's prompts (8 new tokens). The script checks that these greedy
    tokens equal the float32 model's, the property the C++ test relies on.

Design notes:
  * The "round" cases are converted with the CPU's native kernels, those of every AVX2 machine: there,
    PyTorch 1.13 writes 0xFFFF for every NaN, while its scalar kernels (ATEN_CPU_CAPABILITY=default, or a
    0-dim tensor) write 0x7FC0. eigenformer follows the former, what converting a weight tensor gives. The
    script refuses to write the file if a NaN converts to anything else (the scalar kernels ran).
  * The "gpt2" and "bert" cases are computed in a child process with ATEN_CPU_CAPABILITY=default and one
    thread, as make_gpt2_fixtures.py and make_bert_fixtures.py compute theirs, so their bytes do not depend
    on the CPU.
  * Every run writes the same bytes.
"""

import json
import os
import struct
import subprocess
import sys

GPT2_CHILD = "--gpt2-child" in sys.argv[1:]
BERT_CHILD = "--bert-child" in sys.argv[1:]
if GPT2_CHILD or BERT_CHILD:
    os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from fixture_io import data_gen, enc, output_dir, write_budgeted  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def to_bf16_bits(bits):
    """torch's bfloat16 bit patterns of the float32 bit patterns `bits` (one contiguous tensor)."""
    f = torch.tensor([b - (1 << 32) if b >= (1 << 31) else b for b in bits], dtype=torch.int32).view(torch.float32)
    return [v & 0xFFFF for v in f.contiguous().to(torch.bfloat16).view(torch.int16).tolist()]


def f32(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def round_cases():
    groups = {
        # upper half u, lower half 0x8000 exactly: a tie, to the even of u and u + 1
        "ties": [(u << 16) | 0x8000 for u in (0x3F80, 0x3F81, 0x4049, 0x404A, 0xBF80, 0xBF81, 0x7F7E, 0x0080, 0x8081)],
        "near_ties": [(u << 16) | low for u in (0x3F80, 0x3F81, 0xC2F7) for low in (0x7FFF, 0x8001, 0x0001, 0xFFFF)],
        "carry_into_exponent": [0x3F7FFFFF, 0x3F7F8000, 0x407FC000, 0xBF7FFFFF, 0x00FFFFFF],
        "largest_finite": [0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F0000, 0xFF7FFFFF, 0xFF7F8000, 0xFF7F7FFF],
        "inf_zero": [0x7F800000, 0xFF800000, 0x00000000, 0x80000000],
        # the smallest subnormals, ties among them, the largest subnormal, the smallest normal
        "subnormal": [0x00000001, 0x00008000, 0x00018000, 0x00010000, 0x0000FFFF, 0x007FFFFF, 0x007F8000,
                      0x807FFFFF, 0x80008000, 0x80018001, 0x00800000],
        "nan": [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000, 0x7F808000],
        "ordinary": [f32(x) for x in (1.0, -2.5, 3.14159265, 1e-3, 65504.0, 1e30, -1e-30, 0.1)],
    }
    g = data_gen(1501)
    groups["random"] = [v & 0xFFFFFFFF for v in torch.randint(-(1 << 31), 1 << 31, (1000,), generator=g,
                                                               dtype=torch.int64).tolist()]
    cases = []
    for name, bits in groups.items():
        cases.append({"name": "round_" + name, "kind": "round", "bits": bits, "bf16": to_bf16_bits(bits)})
    return cases


def gpt2_child():
    """Prints the "gpt2" case as JSON (run with ATEN_CPU_CAPABILITY=default)."""
    sys.path.insert(0, HERE)
    import make_gpt2_fixtures as ref  # noqa: E402

    torch.set_num_threads(1)
    model = ref.GPT2LMHeadModel(ref.CONFIG)
    ref.test_parameters(model, 1201)  # the parameters, ids and prompts of make_gpt2_fixtures.main
    ids = torch.randint(0, ref.CONFIG["vocab_size"], (2, 9), generator=data_gen(1204))
    prompts = torch.randint(0, ref.CONFIG["vocab_size"], (2, 4), generator=data_gen(1205))
    model.eval()
    with torch.no_grad():
        greedy_fp32 = ref.generate(model, prompts, 8)
        for name, p in model.named_parameters():
            if name.endswith("wte.weight") or (name.endswith(".weight") and (".attn." in name or ".mlp." in name)):
                p.copy_(p.to(torch.bfloat16).float())
        logits, _ = model(ids)
        greedy = ref.generate(model, prompts, 8)
    if not torch.equal(greedy, greedy_fp32):
        raise SystemExit("the bfloat16-weight model's greedy tokens differ from the float32 model's:\n%s\n%s"
                         % (greedy, greedy_fp32))
    print(json.dumps({"name": "gpt2", "kind": "gpt2", "input_ids": enc(ids), "logits": enc(logits),
                      "prompt": enc(prompts), "max_new_tokens": 8, "out": enc(greedy)}, sort_keys=True))


def bert_child():
    """Prints the "bert" cases as a JSON list (run with ATEN_CPU_CAPABILITY=default)."""
    sys.path.insert(0, HERE)
    import make_bert_fixtures as ref  # noqa: E402

    torch.set_num_threads(1)
    cls_cfg = ref.config(hidden_act="gelu_new", num_labels=3, id2label={"0": "negative", "1": "neutral", "2": "positive"},
                         label2id={"negative": 0, "neutral": 1, "positive": 2})
    # The parameter seeds and rows of make_bert_fixtures.bert_mlm_case and its "bert_seqcls" case.
    setups = [
        ("bert_mlm", ref.BertForMaskedLM(ref.config()), 3201,
         [ref.ids_of("[CLS] the capital of [MASK] is paris [SEP]"), ref.ids_of("[CLS] [MASK] good [MASK] [SEP]")]),
        ("bert_seqcls", ref.BertForSequenceClassification(cls_cfg), 3301,
         [ref.ids_of("[CLS] a great movie ! [SEP]"), ref.ids_of("[CLS] terrible plot . [SEP]"),
          ref.ids_of("[CLS] it [SEP]")]),
    ]
    cases = []
    for name, model, seed, rows in setups:
        ref.test_parameters(model, seed)
        model.eval()
        ids, mask, types, _ = ref.batch(rows)
        with torch.no_grad():
            fp32 = model(ids, mask, types)
            logits = ref.round_weights_to_bf16(model)(ids, mask, types)
        cases.append({"name": name + "_bf16", "kind": "bert", "model": name, "logits": enc(logits),
                      "fp32_logits": enc(fp32)})
    print(json.dumps(cases, sort_keys=True))


def main(argv=None):
    if GPT2_CHILD:
        gpt2_child()
        return 0
    if BERT_CHILD:
        bert_child()
        return 0
    out_dir = output_dir(__doc__, argv)
    torch.set_num_threads(1)
    if to_bf16_bits([0x7FC00000] * 32)[0] != 0xFFFF:
        raise SystemExit("the native kernels are the scalar ones here (no AVX2, or ATEN_CPU_CAPABILITY=default): "
                         "the NaN cases would record 0x7FC0 instead of the 0xFFFF of AVX2 machines")
    cases = round_cases()
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--gpt2-child"], check=True,
                           capture_output=True, text=True, env=dict(os.environ, ATEN_CPU_CAPABILITY="default"))
    cases.append(json.loads(child.stdout))
    # make_bert_fixtures.py's kernels (see there): OpenBLAS reads OPENBLAS_CORETYPE when torch loads it.
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--bert-child"], check=True,
                           capture_output=True, text=True,
                           env=dict(os.environ, ATEN_CPU_CAPABILITY="default", OPENBLAS_CORETYPE="Prescott"))
    cases.extend(json.loads(child.stdout))
    write_budgeted(out_dir, "bf16.json", cases, 60_000, count_by="kind")
    return 0


if __name__ == "__main__":
    sys.exit(main())
