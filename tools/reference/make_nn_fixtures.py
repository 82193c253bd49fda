#!/usr/bin/env python3
"""Generate PyTorch reference fixtures for eigenformer's layer tests (tests/data/nn_layers.json).

Usage (from anywhere; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_nn_fixtures.py [--out DIR]

For each layer (Embedding, BertEmbeddings, the activations, Softmax, LayerNorm, FeedForward, MSELoss and
the shortcut network of LLMs-from-scratch ch. 4 / BERT-from-scratch section 1.19) on small odd sizes it
records the inputs, the parameters, the forward output and, for training-mode cases, the autograd
gradients of the weighted-sum loss sum(out * probe) with respect to the input and every parameter.
See tools/reference/README.md ("nn_layers.json") for the fields.

Design notes:
  * ATEN_CPU_CAPABILITY=default is set before torch is imported, so the scalar ATen kernels run and the
    values do not depend on the CPU; torch.set_num_threads(1) fixes the reduction order. Every run writes
    the same bytes.
  * Those scalar kernels compute nn.Linear's uniform init without the fused multiply-add of the AVX2
    kernels that eigenformer's Generator reproduces (see README: rng.json), so the init can differ from a
    C++ manual_seed(seed) construction by an ulp of the init bound. Each case therefore records its
    parameters as well as the seed: the C++ tests load the recorded parameters for the forward and
    gradient checks, and compare their own seeded init with them to an ulp.
  * The shortcut network is the exception: it is computed in a child process with the CPU's native
    (FMA) kernels, as the book's printed gradients were, because the worked example
    (tests/data/worked_examples.json, shortcut_gradients, from make_worked_examples.py) is the C++ test's
    reference there.
  * Training-mode dropout masks come from torch's default generator, reseeded with `forward_seed` right
    before the forward; the C++ test reseeds its default generator the same way, and its layers draw
    masks in PyTorch's forward order (Debian's torch is built without MKL, so bernoulli_ uses the
    mt19937 stream eigenformer reproduces).
  * Float32 values are written as the shortest decimal that round-trips the float32 (checked for each
    value; parse as double, then cast to float32). That keeps the file small (< 300 KB).
"""

import os
import sys

NATIVE_CHILD = "--shortcut-child" in sys.argv[1:]
if NATIVE_CHILD:
    os.environ.pop("ATEN_CPU_CAPABILITY", None)
else:
    os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ.setdefault("OMP_NUM_THREADS", "1")
# float32 matrix products go through Debian's BLAS (OpenBLAS), whose kernels for the CPU at hand round some
# sums differently (SkylakeX vs Haswell); the committed file was written with the Haswell kernels.
os.environ["OPENBLAS_CORETYPE"] = "Haswell"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fixture_io import FORMAT, VERSION, data_gen, enc, fval, jnum, q4, write_fixture  # noqa: E402,F401

F32 = torch.float32
F64 = torch.float64
HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# The layers, in PyTorch, exactly as the seeds / Hugging Face write them
# ---------------------------------------------------------------------------

class FeedForward(nn.Module):
    """BERT-from-scratch listing 1.32, with the activation made selectable."""

    def __init__(self, dim, hidden, dropout=0.1, act=None):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden),
            act if act is not None else nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.net(x)


class NewGELU(nn.Module):
    """transformers' NewGELUActivation ("gelu_new")."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class BertEmbeddings(nn.Module):
    """transformers' BertEmbeddings (absolute positions), the seed's BERTEmbedding with HF names."""

    def __init__(self, vocab_size, hidden_size, max_position_embeddings, type_vocab_size, pad_token_id,
                 layer_norm_eps, hidden_dropout_prob):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        B, T = input_ids.shape
        pos = torch.arange(T).unsqueeze(0).expand(B, T)
        e = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(e))


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

def run_case(name, layer, config, seed, build, inputs, train, forward_seed=None, probe_seed=None,
             perturb=None, forward=None):
    """Builds the module after manual_seed(seed), optionally perturbs its parameters (from a separate
    generator), runs forward (after manual_seed(forward_seed) in training mode) and, in training mode,
    backward of sum(out * probe)."""
    torch.manual_seed(seed)
    module = build()
    params_are_init = perturb is None
    if perturb is not None:
        with torch.no_grad():
            perturb(module)
    module.train(train)
    float_inputs = {k: v.clone().requires_grad_(train) if v.dtype.is_floating_point else v
                    for k, v in inputs.items()}
    if train:
        torch.manual_seed(forward_seed)
    out = forward(module, **float_inputs) if forward else module(*float_inputs.values())
    case = {
        "name": name, "layer": layer, "config": config, "seed": seed, "train": train,
        "forward_seed": forward_seed if train else None,
        "params_are_init": params_are_init,
        "params": {k: enc(v) for k, v in module.state_dict().items()},
        "inputs": {k: enc(v) for k, v in inputs.items()},
        "out": enc(out),
    }
    if train:
        probe = torch.randn(out.shape, generator=data_gen(probe_seed), dtype=out.dtype)
        if out.dtype == F64:
            probe = q4(probe)
        (out * probe).sum().backward()
        grads = {k: enc(v.grad) for k, v in float_inputs.items() if v.dtype.is_floating_point}
        for k, p in module.named_parameters():
            grads[k] = enc(p.grad if p.grad is not None else torch.zeros_like(p))
        case["probe"] = enc(probe)
        case["grads"] = grads
    return case


def embedding_cases():
    cases = []
    ids = torch.tensor([[1, 3, 10, 3, 0], [5, 5, 9, 2, 3]])
    cfg = {"num_embeddings": 11, "embedding_dim": 12, "padding_idx": 3}
    cases.append(run_case("embedding_pad3", "embedding", cfg, 7,
                          lambda: nn.Embedding(11, 12, padding_idx=3), {"ids": ids}, True, 0, 107))
    ids = torch.tensor([4, 0, 4, 5, 1, 4, 2])
    cfg = {"num_embeddings": 6, "embedding_dim": 5, "padding_idx": None}
    cases.append(run_case("embedding_rank1", "embedding", cfg, 8,
                          lambda: nn.Embedding(6, 5), {"ids": ids}, True, 0, 108))

    cfg = {"vocab_size": 13, "hidden_size": 12, "max_position_embeddings": 7, "type_vocab_size": 2,
           "pad_token_id": 0, "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1}
    ids = torch.tensor([[2, 7, 12, 5, 0], [1, 9, 9, 0, 0]])
    types = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]])
    build = lambda: BertEmbeddings(**cfg)
    for train in (True, False):
        cases.append(run_case("bert_embeddings_" + ("train" if train else "eval"), "bert_embeddings", cfg, 11,
                              build, {"input_ids": ids, "token_type_ids": types}, train, 12, 111))
    return cases


def activation_cases():
    cases = []
    x = torch.randn(2, 5, 7, generator=data_gen(201)) * 2.0
    special = torch.tensor([0.0, 1e-3, -1e-3, 5.0, -5.0, 12.0, -12.0])
    x[1, 4, :] = special
    acts = [("relu", lambda: nn.ReLU()),
            ("gelu", lambda: nn.GELU()),
            ("gelu_pytorch_tanh", lambda: nn.GELU(approximate="tanh")),
            ("gelu_new", lambda: NewGELU())]
    for i, (act, build) in enumerate(acts):
        cases.append(run_case("activation_" + act, "activation", {"activation": act}, 0, build, {"x": x},
                              True, 0, 210 + i))
    xs = torch.randn(2, 5, 7, generator=data_gen(202)) * 3.0
    xs[0, 2, 4] = -math.inf  # a masked entry: weight 0, gradient 0
    for dim in (-1, 1):
        cases.append(run_case("softmax_dim%d" % dim, "softmax", {"dim": dim}, 0, lambda: nn.Softmax(dim=dim),
                              {"x": xs}, True, 0, 220 + dim))
    return cases


def layernorm_cases():
    cases = []
    x = torch.randn(2, 5, 12, generator=data_gen(301)) * 3.0 + 1.0

    def perturb(m):
        g = data_gen(302)
        m.weight.copy_(1.0 + 0.5 * torch.randn(m.weight.shape, generator=g))
        m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g))

    cfg = {"normalized_shape": 12, "eps": 1e-5, "elementwise_affine": True}
    cases.append(run_case("layernorm_affine", "layernorm", cfg, 0, lambda: nn.LayerNorm(12), {"x": x}, True, 0,
                          311, perturb=perturb))
    cfg = {"normalized_shape": 12, "eps": 1e-3, "elementwise_affine": False}
    cases.append(run_case("layernorm_plain", "layernorm", cfg, 0,
                          lambda: nn.LayerNorm(12, eps=1e-3, elementwise_affine=False), {"x": x}, True, 0, 312))
    return cases


def feedforward_cases():
    cases = []
    x = torch.randn(2, 5, 12, generator=data_gen(401))
    cfg = {"dim": 12, "hidden": 20, "dropout": 0.1, "activation": "gelu"}
    for train in (True, False):
        cases.append(run_case("feedforward_" + ("train" if train else "eval"), "feedforward", cfg, 21,
                              lambda: FeedForward(12, 20, 0.1), {"x": x}, train, 22, 411))
    x = torch.randn(2, 3, 4, generator=data_gen(402))
    cfg = {"dim": 4, "hidden": 0, "dropout": 0.2, "activation": "gelu_new"}
    cases.append(run_case("feedforward_default_hidden_gelu_new", "feedforward", cfg, 23,
                          lambda: FeedForward(4, 16, 0.2, NewGELU()), {"x": x}, True, 24, 412))
    return cases


def mse_cases():
    pred = torch.randn(2, 5, 3, generator=data_gen(501))
    target = torch.randn(2, 5, 3, generator=data_gen(502))
    p = pred.clone().requires_grad_(True)
    loss = nn.MSELoss()(p, target)
    loss.backward()
    return [{"name": "mse_loss", "layer": "mse_loss", "config": {"reduction": "mean"}, "train": True,
             "inputs": {"input": enc(pred), "target": enc(target)}, "out": enc(loss),
             "grads": {"input": enc(p.grad)}}]


def float64_cases():
    """Linear, GELU (exact and tanh), Softmax, LayerNorm and FeedForward run by PyTorch in float64, for the
    double layers at double precision (the float32 cases only check double against float32 rounding).
    Inputs, parameters and probes are rounded to 4 decimals in double: short in JSON, and no float32 equals
    them, so a layer computing anything in float shows errors of ~1e-8 instead of ~1e-16. Dropout is 0 in
    the training-mode FeedForward: no mask stream to match."""
    cases = []

    def rounded(seed, scale=1.0):
        def perturb(m):
            g = data_gen(seed)
            for p in m.parameters():
                p.copy_(q4(scale * torch.randn(p.shape, generator=g, dtype=F64)))
        return perturb

    def x64(shape, seed, scale=1.0, shift=0.0):
        return q4(torch.randn(shape, generator=data_gen(seed), dtype=F64) * scale + shift)

    cfg = {"in_features": 5, "out_features": 4, "bias": True}
    cases.append(run_case("linear_f64", "linear", cfg, 0, lambda: nn.Linear(5, 4).double(),
                          {"x": x64((2, 3, 5), 1101)}, True, 0, 1111, perturb=rounded(1102, 0.5)))
    x = x64((2, 3, 5), 1103, 2.0)
    x[1, 2, :] = torch.tensor([0.0, 1e-3, -5.0, 12.0, -12.0], dtype=F64)
    for i, (act, build) in enumerate((("gelu", lambda: nn.GELU()),
                                      ("gelu_pytorch_tanh", lambda: nn.GELU(approximate="tanh")))):
        cases.append(run_case("activation_%s_f64" % act, "activation", {"activation": act}, 0, build, {"x": x},
                              True, 0, 1121 + i))
    xs = x64((2, 3, 5), 1104, 3.0)
    xs[0, 1, 3] = -math.inf
    cases.append(run_case("softmax_dim-1_f64", "softmax", {"dim": -1}, 0, lambda: nn.Softmax(dim=-1), {"x": xs},
                          True, 0, 1131))

    def ln_perturb(m):
        g = data_gen(1105)
        m.weight.copy_(q4(1.0 + 0.5 * torch.randn(m.weight.shape, generator=g, dtype=F64)))
        m.bias.copy_(q4(0.5 * torch.randn(m.bias.shape, generator=g, dtype=F64)))

    cfg = {"normalized_shape": 6, "eps": 1e-5, "elementwise_affine": True}
    cases.append(run_case("layernorm_affine_f64", "layernorm", cfg, 0, lambda: nn.LayerNorm(6).double(),
                          {"x": x64((2, 3, 6), 1106, 3.0, 1.0)}, True, 0, 1141, perturb=ln_perturb))
    cfg = {"dim": 4, "hidden": 6, "dropout": 0.0, "activation": "gelu"}
    cases.append(run_case("feedforward_f64", "feedforward", cfg, 0, lambda: FeedForward(4, 6, 0.0).double(),
                          {"x": x64((2, 3, 4), 1107)}, True, 0, 1151, perturb=rounded(1108, 0.5)))
    return cases


# ---------------------------------------------------------------------------
# The shortcut network (LLMs from scratch ch. 4, ExampleDeepNeuralNetwork), native kernels
# ---------------------------------------------------------------------------

class GELUTanh(nn.Module):
    """The book's GELU class (tanh approximation)."""

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class ExampleDeepNeuralNetwork(nn.Module):
    def __init__(self, layer_sizes, use_shortcut):
        super().__init__()
        self.use_shortcut = use_shortcut
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(layer_sizes[i], layer_sizes[i + 1]), GELUTanh())
                                     for i in range(len(layer_sizes) - 1)])

    def forward(self, x):
        for layer in self.layers:
            layer_output = layer(x)
            if self.use_shortcut and x.shape == layer_output.shape:
                x = x + layer_output
            else:
                x = layer_output
        return x


def shortcut_cases():
    sizes = [3, 3, 3, 3, 3, 1]
    sample_input = torch.tensor([[1.0, 0.0, -1.0]])
    target = torch.tensor([[0.0]])
    cases = []
    for use_shortcut in (False, True):
        torch.manual_seed(123)
        model = ExampleDeepNeuralNetwork(sizes, use_shortcut)
        params = {k: enc(v) for k, v in model.state_dict().items()}
        out = model(sample_input)
        loss = nn.MSELoss()(out, target)
        loss.backward()
        cases.append({
            "name": "shortcut_" + ("with" if use_shortcut else "without"), "layer": "shortcut",
            "config": {"layer_sizes": sizes, "use_shortcut": use_shortcut, "kernels": "native"},
            "seed": 123, "train": True, "params_are_init": True, "params": params,
            "inputs": {"x": enc(sample_input), "target": enc(target)}, "out": enc(out), "loss": enc(loss),
            "grads": {k: enc(p.grad) for k, p in model.named_parameters()},
            "mean_abs_weight_grad": {k: p.grad.abs().mean().item() for k, p in model.named_parameters()
                                     if "weight" in k},
        })
    return cases


def check_shortcut_against_worked_example(cases):
    path = os.path.join(HERE, "..", "..", "tests", "data", "worked_examples.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        ex = next(c for c in json.load(f)["cases"] if c["name"] == "shortcut_gradients")["mean_abs_weight_grad"]
    for c in cases:
        ref = ex["with_shortcut" if c["config"]["use_shortcut"] else "without_shortcut"]
        for k, v in ref.items():
            # Printed to 8 decimals (5e-9), with reference BLAS; this file's OpenBLAS products move the 8th
            # decimal by up to 12 units (1.2e-7 measured on shortcut_with; README, worked_examples.json).
            if abs(c["mean_abs_weight_grad"][k] - v) > 1.25e-7:
                raise SystemExit("make_nn_fixtures.py: %s %s = %r does not print as the worked example's %r"
                                 % (c["name"], k, c["mean_abs_weight_grad"][k], v))


# ---------------------------------------------------------------------------

def main(argv=None):
    default_out = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--out", default=default_out, help="output directory (default: <repo>/tests/data)")
    ap.add_argument("--shortcut-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    if args.shortcut_child:
        sys.path.insert(0, HERE)
        from make_fixtures import check_native_fma  # refuses to run without the FMA (AVX2) kernels
        check_native_fma()
        json.dump(shortcut_cases(), sys.stdout, sort_keys=True, allow_nan=False)
        return 0

    cases = embedding_cases() + activation_cases() + layernorm_cases() + feedforward_cases() + mse_cases()
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--shortcut-child"], check=True,
                           stdout=subprocess.PIPE)
    shortcut = json.loads(child.stdout)
    check_shortcut_against_worked_example(shortcut)
    cases += shortcut
    cases += float64_cases()

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "nn_layers.json")
    size = write_fixture(path, cases)
    print("%-40s %8d bytes %5d cases" % (path, size, len(cases)))
    if size >= 300_000:
        raise SystemExit("make_nn_fixtures.py: nn_layers.json is over its 300 KB budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
