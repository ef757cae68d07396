#!/usr/bin/env python3
"""Fits the rational functions of simd_kernels.c's f16/bf16 kernels in registers and prints their
coefficients, to be copied into the kernels:

  tanh_half_vf   tanh(x) = x P(x^2) / Q(x^2) on [0, 4.6] (from 4.51 on, tanh rounds to 1 in f16),
                 minimax in relative error;
  gelu_phi_vf    Phi(x) = 1/2 + x P(x^2) / Q(x^2) on [-3, 3] (bf16 gelu: below -2 the kernel takes
                 another form, from 3 on gelu(x) rounds to x), minimax in the relative error of
                 Phi(-|x|) up to 2, of Phi(|x|) beyond.

P and Q of degree 3 (or as given), Q(0) = 1: Loeb's iteration (the residuals divided by the last
step's denominator) around Lawson's reweighted least squares, on Chebyshev points of s = x^2.
Then every finite f16 and bf16 value in the range is computed in f32, as the kernel computes it
but for its fused multiply-adds (a multiply and an add here, each rounded), and compared with the
function in double rounded to the type (through f32: twice); test_simd_kernels checks the
kernels themselves on every input, against the function in double rounded once.

    /usr/bin/python3 c_src/drivers/blas/simd/fit_rational.py [deg_p deg_q]   (needs numpy)
"""
import math
import sys

import numpy as np

from fit_binades import c_float  # a C float literal (1.0f, not 1f)


def fit(h, weight, c, m, n, points=4000):
    """P / Q ~ h(s) on s in [0, c^2], the error weighted by weight(x), x = sqrt(s)"""
    t = (1 - np.cos(np.pi * (np.arange(points) + 0.5) / points)) / 2  # on [0, 1]
    x = np.sqrt(t) * c
    y, w_err = h(x), weight(x)
    q_last = np.ones(points)
    for _ in range(30):
        a = np.concatenate([np.stack([t**j * w_err / q_last for j in range(m + 1)], 1),
                            np.stack([-y * t**j * w_err / q_last for j in range(1, n + 1)], 1)], 1)
        b = y * w_err / q_last
        w = np.ones(points) / points
        for _ in range(300):
            k = np.linalg.lstsq(a * np.sqrt(w)[:, None], b * np.sqrt(w), rcond=None)[0]
            w = w * np.abs(a @ k - b)
            w /= w.sum()
        p = np.polyval(k[m::-1], t)
        q_last = np.polyval(np.concatenate([k[:m:-1], [1.0]]), t)
    err = float(np.max(np.abs(p / q_last - y) * w_err))
    scale = c * c
    pc = np.array([k[j] / scale**j for j in range(m + 1)], dtype=np.float32)
    qc = np.array([1.0] + [k[m + j] / scale**j for j in range(1, n + 1)], dtype=np.float32)
    print("  P and Q of degrees %d and %d: largest weighted error %.3e in double; Q >= %.3g" %
          (m, n, err, float(q_last.min())))
    print("  P, from s^0:", ", ".join(c_float(v) for v in pc))
    print("  Q, from s^0:", ", ".join(c_float(v) for v in qc))
    return pc, qc


def horner(co, v):
    acc = np.full_like(v, co[-1])
    for k in range(len(co) - 2, -1, -1):
        acc = (acc * v + co[k]).astype(np.float32)
    return acc


def f16(h):
    return h.astype(np.uint16).view(np.float16).astype(np.float32)


def f16_bits(v):
    return np.asarray(v).astype(np.float16).view(np.uint16).astype(np.int64)


def bf16(h):
    return (h << 16).astype(np.uint32).view(np.float32)


def bf16_bits(v):  # to nearest, ties to even (no NaN here)
    u = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.int64)


def check(name, of_bits, to_bits, lo, hi, kernel, exact):
    x = of_bits(np.arange(65536, dtype=np.uint32))
    x = x[np.isfinite(x) & (x > lo) & (x < hi)]
    got, want = to_bits(kernel(x)), to_bits(exact(x.astype(np.float64)).astype(np.float32))
    signed = lambda v: np.where(v & 0x8000, -(v & 0x7FFF), v)
    d = np.abs(signed(got) - signed(want))
    print("  %s in (%g, %g): %d of %d results off (at most %d ulp), computed in f32" %
          (name, lo, hi, int((d > 0).sum()), len(x), int(d.max())))


def phi(x):
    return 0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2))


def main():
    m, n = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (3, 3)

    print("tanh_half_vf: tanh(x) = x P(x^2) / Q(x^2), x clamped to [-4.6, 4.6]")
    c = 4.6
    tanh_over_x = lambda x: np.where(x > 0, np.tanh(x) / np.where(x > 0, x, 1), 1.0)
    pc, qc = fit(tanh_over_x, lambda x: 1 / tanh_over_x(x), c, m, n)

    def tanh_kernel(x):
        xc = np.minimum(np.float32(c), np.maximum(np.float32(-c), x))
        s = (xc * xc).astype(np.float32)
        return (xc * horner(pc, s) / horner(qc, s)).astype(np.float32)

    check("f16", f16, f16_bits, -np.inf, np.inf, tanh_kernel, np.tanh)
    check("bf16", bf16, bf16_bits, -np.inf, np.inf, tanh_kernel, np.tanh)

    print("gelu_phi_vf: Phi(x) = 1/2 + x P(x^2) / Q(x^2); gelu(x) = x Phi(x)")
    pc2, qc2 = fit(lambda x: np.where(x > 0, (phi(x) - 0.5) / np.where(x > 0, x, 1),
                                      1 / math.sqrt(2 * math.pi)),
                   lambda x: np.maximum(np.where(x <= 2, x / phi(-x), x / phi(x)), 1.0), 3.0, m, n)

    def gelu_kernel(x):
        xs = np.minimum(x, np.float32(3))  # the lanes from 3 on are x itself: no overflow here
        s = (xs * xs).astype(np.float32)
        p = (xs * (horner(pc2, s) / horner(qc2, s)).astype(np.float32) + np.float32(0.5))
        return np.where(x >= 3, x, (xs * p.astype(np.float32)).astype(np.float32))

    check("bf16", bf16, bf16_bits, -2, np.inf, gelu_kernel, lambda x: x * phi(x))


if __name__ == "__main__":
    main()
