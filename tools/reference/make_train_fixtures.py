#!/usr/bin/env python3
"""Generate PyTorch reference fixtures for eigenformer's training code (tests/data/train.json).

Usage (from anywhere; the default output is <repo>/tests/data):

    /usr/bin/python3 tools/reference/make_train_fixtures.py [--out DIR]

Cases (field "kind"):
  * cross_entropy: F.cross_entropy on (N, C) or (B, T, C) logits with int64 targets, with ignore_index,
    label_smoothing and reduction mean/sum; records the loss and dlogits (autograd of the loss itself).
  * adamw: torch.optim.AdamW (foreach=False: the single-tensor path, whose float32 arithmetic the C++
    reproduces bit for bit) over a few small parameters with recorded gradient sequences; records the
    parameter values after every step.
  * sgd: torch.optim.SGD (foreach=False) with momentum, nesterov, dampening, weight decay, likewise.
  * clip_grad_norm: torch.nn.utils.clip_grad_norm_ on a few gradients; records the total norm and the
    clipped gradients.
  * schedule: learning-rate multipliers / rates at chosen steps, computed by the formulas of Hugging Face's
    get_{constant,linear,cosine}_schedule_with_warmup and nanoGPT's get_lr (written out here, since
    transformers is not a dependency; the C++ must agree to double rounding).

ATEN_CPU_CAPABILITY=default (scalar kernels, no FMA) and one thread, so every run writes the same bytes.
The script also replays each AdamW and SGD trajectory in numpy float32 with the exact operation order the C++ uses
and refuses to write the file if a single bit differs: that pins down where PyTorch rounds.
"""

import os
import sys

os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fixture_io import data_gen, enc, jnum, output_dir, write_budgeted  # noqa: E402

F32 = torch.float32


def cross_entropy_cases():
    cases = []
    specs = [
        # name, shape, classes, ignore_index, label_smoothing, reduction, ignored positions
        ("ce_2d_mean", (5,), 7, -100, 0.0, "mean", []),
        ("ce_2d_sum", (5,), 7, -100, 0.0, "sum", []),
        ("ce_2d_ignore_mean", (6,), 4, -100, 0.0, "mean", [1, 4]),
        ("ce_2d_ignore_custom_sum", (6,), 4, 2, 0.0, "sum", []),
        ("ce_2d_smooth_mean", (5,), 6, -100, 0.1, "mean", []),
        ("ce_3d_mean", (2, 3), 5, -100, 0.0, "mean", []),
        ("ce_3d_ignore_smooth_mean", (2, 4), 5, -100, 0.2, "mean", [0, 5, 6]),
        ("ce_3d_ignore_smooth_sum", (2, 4), 5, -100, 0.2, "sum", [3]),
        ("ce_2d_large_logits", (3,), 4, -100, 0.0, "mean", []),
    ]
    for i, (name, lead, C, ignore, smooth, red, ignored) in enumerate(specs):
        g = data_gen(100 + i)
        logits = torch.randn(*lead, C, generator=g) * 3
        if name == "ce_2d_large_logits":
            logits = logits + torch.tensor([[80.0], [-90.0], [1000.0]])  # stability of log-softmax
        target = torch.randint(0, C, lead, generator=g)
        flat = target.view(-1)
        for j in ignored:
            flat[j] = ignore
        x = logits.clone().requires_grad_(True)
        inp = x if len(lead) == 1 else x.permute(0, 2, 1)  # PyTorch wants (B, C, T)
        loss = F.cross_entropy(inp, target, ignore_index=ignore, label_smoothing=smooth, reduction=red)
        loss.backward()
        cases.append({"name": name, "kind": "cross_entropy",
                      "config": {"ignore_index": ignore, "label_smoothing": smooth, "reduction": red},
                      "logits": enc(logits), "target": enc(target), "loss": enc(loss), "dlogits": enc(x.grad)})
    return cases


ADAMW_SPECS = [
    # name, hyper-parameters
    ("adamw_default", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False)),
    ("adamw_no_decay", dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, amsgrad=False)),
    ("adamw_strong_decay", dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=False)),
    ("adamw_amsgrad", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-8, weight_decay=0.05, amsgrad=True)),
    # A weight longer than the C++ update's 256-element block, so its vectorised body, a second block and a
    # ragged tail are all compared with torch.
    ("adamw_long_weight", dict(lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, amsgrad=False),
     [("weight", (2, 131)), ("bias", (4,))]),
]
STEPS = 5
SHAPES = [("weight", (3, 4)), ("bias", (4,))]


def replay_adamw_numpy(params0, grads, hp):
    """The C++ order of operations in numpy float32 (see include/eigenformer/train/optimizers.hpp)."""
    f = np.float32
    lr, (b1, b2), eps, wd = hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"]
    out = []
    state = {n: (p.copy(), np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)) for n, p in params0.items()}
    for step in range(1, STEPS + 1):
        rec = {}
        for n, (p, m, v, vmax) in state.items():
            g = grads[step - 1][n]
            p = p * f(1 - lr * wd)
            m = m * f(b1) + f(1 - b1) * g
            v = v * f(b2) + (f(1 - b2) * g) * g
            bc1 = 1 - b1 ** step
            bc2 = 1 - b2 ** step
            step_size = lr / bc1
            if hp["amsgrad"]:
                vmax = np.maximum(vmax, v)
                denom = np.sqrt(vmax) / f(math.sqrt(bc2)) + f(eps)
            else:
                denom = np.sqrt(v) / f(math.sqrt(bc2)) + f(eps)
            p = p + (f(-step_size) * m) / denom
            state[n] = (p, m, v, vmax)
            rec[n] = p
        out.append(rec)
    return out


SGD_SPECS = [
    ("sgd_momentum", dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=False)),
    ("sgd_nesterov", dict(lr=0.02, momentum=0.8, dampening=0.0, weight_decay=0.0, nesterov=True)),
    ("sgd_dampening", dict(lr=0.1, momentum=0.5, dampening=0.3, weight_decay=0.001, nesterov=False)),
]


def replay_sgd_numpy(params0, grads, hp):
    f = np.float32
    out, state = [], {n: (p.copy(), None) for n, p in params0.items()}
    for step in range(STEPS):
        rec = {}
        for n, (p, buf) in state.items():
            d = grads[step][n]
            if hp["weight_decay"] != 0:
                d = d + f(hp["weight_decay"]) * p
            buf = d.copy() if buf is None else buf * f(hp["momentum"]) + f(1 - hp["dampening"]) * d
            d = d + f(hp["momentum"]) * buf if hp["nesterov"] else buf
            p = p + f(-hp["lr"]) * d
            state[n] = (p, buf)
            rec[n] = p
        out.append(rec)
    return out


def optimizer_cases(kind, specs, seed, replay):
    cases = []
    for i, (name, hp, *custom) in enumerate(specs):
        shapes = custom[0] if custom else SHAPES
        g = data_gen(seed + i)
        params = [torch.nn.Parameter(torch.randn(*s, generator=g)) for _, s in shapes]
        init = {n: p.detach().clone() for (n, _), p in zip(shapes, params)}
        opt = (torch.optim.AdamW if kind == "adamw" else torch.optim.SGD)(params, foreach=False, **hp)
        grads, after = [], []
        for step in range(STEPS):
            gs = {}
            for (n, s), p in zip(shapes, params):
                gr = torch.randn(*s, generator=g) * (0.1 if step % 2 else 1.0)
                if step == 3:
                    gr[0] = 0.0  # a zero gradient row: pure decay plus moment decay
                p.grad = gr.clone()
                gs[n] = gr
            opt.step()
            grads.append(gs)
            after.append({n: p.detach().clone() for (n, _), p in zip(shapes, params)})
        replayed = replay({n: t.numpy() for n, t in init.items()},
                          [{n: t.numpy() for n, t in s.items()} for s in grads], hp)
        for step in range(STEPS):
            for n, _ in shapes:
                a, b = after[step][n].numpy(), replayed[step][n]
                if not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
                    raise SystemExit("make_train_fixtures.py: %s step %d %s: the numpy replay differs from "
                                     "torch (max diff %g)" % (name, step + 1, n, np.abs(a - b).max()))
        config = {k: (jnum(v) if isinstance(v, float) else v) for k, v in hp.items() if k != "betas"}
        if "betas" in hp:
            config["beta1"], config["beta2"] = jnum(hp["betas"][0]), jnum(hp["betas"][1])
        cases.append({"name": name, "kind": kind, "config": config,
                      "params": {n: enc(t) for n, t in init.items()},
                      "grads": [{n: enc(t) for n, t in s.items()} for s in grads],
                      "after": [{n: enc(t) for n, t in s.items()} for s in after]})
    return cases


def clip_cases():
    cases = []
    for i, (name, max_norm, scale) in enumerate([("clip_active", 1.0, 1.0), ("clip_inactive", 100.0, 1.0),
                                                 ("clip_small_max", 0.05, 3.0)]):
        g = data_gen(300 + i)
        ps = [torch.nn.Parameter(torch.zeros(*s)) for _, s in SHAPES]
        for p in ps:
            p.grad = torch.randn(*p.shape, generator=g) * scale
        before = {n: p.grad.clone() for (n, _), p in zip(SHAPES, ps)}
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm)
        cases.append({"name": name, "kind": "clip_grad_norm", "config": {"max_norm": jnum(max_norm)},
                      "grads": {n: enc(t) for n, t in before.items()}, "total_norm": enc(total),
                      "clipped": {n: enc(p.grad) for (n, _), p in zip(SHAPES, ps)}})
    return cases


def hf_cosine(step, warmup, total, num_cycles=0.5):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def hf_linear(step, warmup, total):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def hf_constant(step, warmup):
    if step < warmup:
        return float(step) / float(max(1.0, warmup))
    return 1.0


def nanogpt_lr(it, lr, min_lr, warmup, decay_iters):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - warmup) / (decay_iters - warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (lr - min_lr)


def schedule_cases():
    steps = [0, 1, 5, 9, 10, 11, 37, 50, 99, 100, 101, 150]
    cases = [
        {"name": "sched_cosine", "kind": "schedule", "schedule": "cosine_with_warmup",
         "config": {"warmup": 10, "total": 100}, "steps": steps, "values": [jnum(hf_cosine(s, 10, 100)) for s in steps]},
        {"name": "sched_cosine_no_warmup", "kind": "schedule", "schedule": "cosine_with_warmup",
         "config": {"warmup": 0, "total": 100}, "steps": steps, "values": [jnum(hf_cosine(s, 0, 100)) for s in steps]},
        {"name": "sched_linear", "kind": "schedule", "schedule": "linear_with_warmup",
         "config": {"warmup": 10, "total": 100}, "steps": steps, "values": [jnum(hf_linear(s, 10, 100)) for s in steps]},
        {"name": "sched_constant", "kind": "schedule", "schedule": "constant_with_warmup",
         "config": {"warmup": 10}, "steps": steps, "values": [jnum(hf_constant(s, 10)) for s in steps]},
        {"name": "sched_nanogpt", "kind": "schedule", "schedule": "nanogpt",
         "config": {"lr": 1e-3, "min_lr": 1e-4, "warmup": 10, "decay_iters": 100}, "steps": steps,
         "values": [jnum(nanogpt_lr(s, 1e-3, 1e-4, 10, 100)) for s in steps]},
    ]
    return cases


def main(argv=None):
    out_dir = output_dir(__doc__, argv)
    torch.set_num_threads(1)
    cases = (cross_entropy_cases() + optimizer_cases("adamw", ADAMW_SPECS, 200, replay_adamw_numpy)
             + optimizer_cases("sgd", SGD_SPECS, 250, replay_sgd_numpy) + clip_cases() + schedule_cases())
    write_budgeted(out_dir, "train.json", cases, 100_000, count_by="kind")
    return 0


if __name__ == "__main__":
    sys.exit(main())
