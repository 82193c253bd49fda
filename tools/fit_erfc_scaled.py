#!/usr/bin/python3
"""Fits the rational function that include/eigenformer/tensor/vector_math_isa.inl uses for GELU's tail.

GELU(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2. With a = |x| / sqrt 2 and R(a) = erfc(a) exp(a^2),
Phi(x) = R(a) exp(-a^2) / 2 for x < 0 and 1 - R(a) exp(-a^2) / 2 for x >= 0, so one exp (shared with the
derivative's exp(-x^2 / 2)) and one rational R ~= P(a) / Q(a) give Phi to a few float ulps in relative terms
on both sides, the far negative tail included, where 1 + erf(x / sqrt 2) would cancel.

R is smooth on [0, inf) and falls like 1 / (a sqrt pi), so deg Q = deg P + 1. The fit: linearised least
squares (P - R Q = 0 with Q(0) = 1), weighted for relative error and iterated, reweighting by each point's
error so that the largest errors shrink (Lawson), on [0, 10] (beyond, exp(-a^2) is below float's range).

Run: /usr/bin/python3 tools/fit_erfc_scaled.py   (numpy only; prints the coefficients and the errors)
"""
import math

import numpy as np

A_MAX = 10.0
P_DEGREE, Q_DEGREE = 4, 5


def erfc_scaled(a):
    return math.erfc(a) * math.exp(a * a)  # exp(100) and erfc(10) are both well inside double's range


def fit(p, q, iterations=80):
    a = np.linspace(0.0, A_MAX, 8001)
    r = np.array([erfc_scaled(v) for v in a])
    u = a / A_MAX  # a basis on [0, 1] keeps the least-squares system well conditioned
    powers_p = u[:, None] ** np.arange(p + 1)
    powers_q = u[:, None] ** np.arange(1, q + 1)
    q_values = np.ones_like(u)
    weights = np.ones_like(u)
    best = None
    for _ in range(iterations):
        system = np.hstack([powers_p, -(r[:, None] * powers_q)])
        w = weights / (q_values * r)
        c, *_ = np.linalg.lstsq(system * w[:, None], r * w, rcond=None)
        q_values = 1 + powers_q @ c[p + 1:]
        err = (powers_p @ c[: p + 1] / q_values - r) / r
        worst = np.max(np.abs(err))
        if best is None or worst < best[0]:
            best = (worst, c.copy())
        weights = weights * (np.abs(err) + 1e-3 * worst)
        weights /= weights.mean()
    worst, c = best
    pc = c[: p + 1] / A_MAX ** np.arange(p + 1)
    qc = np.concatenate([[1.0], c[p + 1:] / A_MAX ** np.arange(1, q + 1)])
    return worst, pc, qc


def horner_float32(coefficients, x):
    acc = np.full_like(x, np.float32(coefficients[-1]))
    for c in coefficients[-2::-1]:
        acc = acc * x + np.float32(c)
    return acc


def main():
    worst, pc, qc = fit(P_DEGREE, Q_DEGREE)
    a = np.linspace(0.0, A_MAX, 100001).astype(np.float32)
    exact = np.array([erfc_scaled(float(v)) for v in a])
    approx = (horner_float32(pc, a) / horner_float32(qc, a)).astype(np.float64)
    print(f"R(a) = erfc(a) exp(a^2) on [0, {A_MAX}] as P{P_DEGREE}(a) / Q{Q_DEGREE}(a)")
    print(f"largest relative error: {worst:.3g} in double, {np.max(np.abs(approx - exact) / exact):.3g} "
          "evaluated in float (Horner, no fused multiply-add)")
    for name, coefficients in (("P", pc), ("Q", qc)):
        print(f"{name}, lowest power first: " + ", ".join(f"{float(np.float32(v))!r}f" for v in coefficients))


if __name__ == "__main__":
    main()
