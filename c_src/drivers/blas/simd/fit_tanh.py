#!/usr/bin/env python3
"""Fits tanh_half_vf's rational function (simd_kernels.c: f16 and bf16 tanh in registers) and
prints its coefficients, to be copied into the kernel.

tanh(x) = x P(x^2) / Q(x^2) on [0, C] (C = 4.6: from 4.51 on, tanh rounds to 1 in f16), P and Q
of the degrees given (default 3 and 3), Q(0) = 1: minimax in relative error by Loeb's iteration
(the denominator of the last step dividing the residuals) around Lawson's reweighted least
squares, on Chebyshev points of s = x^2. Then every finite f16 and bf16 value is computed in f32
as the kernel does (clamp, Horner in s, x P / Q) and compared with tanh in double rounded once;
test_simd_kernels checks the kernel itself on every input.

    /usr/bin/python3 c_src/drivers/blas/simd/fit_tanh.py [deg_p deg_q]   (needs numpy)
"""
import sys

import numpy as np

C = 4.6


def fit(m, n, points=4000):
    t = (1 - np.cos(np.pi * (np.arange(points) + 0.5) / points)) / 2  # on [0, 1]
    s = t * C * C
    x = np.sqrt(s)
    g = np.where(x > 0, np.tanh(x) / np.where(x > 0, x, 1), 1.0)  # tanh(x) / x
    q_last = np.ones(points)
    for _ in range(30):
        a = np.concatenate([np.stack([t**j / (g * q_last) for j in range(m + 1)], 1),
                            np.stack([-(t**j) / q_last for j in range(1, n + 1)], 1)], 1)
        b = 1 / q_last
        w = np.ones(points) / points
        for _ in range(300):
            c = np.linalg.lstsq(a * np.sqrt(w)[:, None], b * np.sqrt(w), rcond=None)[0]
            w = w * np.abs(a @ c - b)
            w /= w.sum()
        p = np.polyval(c[m::-1], t)
        q_last = np.polyval(np.concatenate([c[:m:-1], [1.0]]), t)
    err = float(np.max(np.abs(p / q_last / g - 1)))
    scale = C * C
    pc = np.array([c[j] / scale**j for j in range(m + 1)], dtype=np.float32)
    qc = np.array([1.0] + [c[m + j] / scale**j for j in range(1, n + 1)], dtype=np.float32)
    return pc, qc, err, float(q_last.min())


def horner(co, v):
    acc = np.full_like(v, co[-1])
    for k in range(len(co) - 2, -1, -1):
        acc = (acc * v + co[k]).astype(np.float32)
    return acc


def check(pc, qc, bits_to_f32, f32_to_bits, name):
    h = np.arange(65536, dtype=np.uint32)
    x = bits_to_f32(h)
    x = x[np.isfinite(x)]
    xc = np.minimum(np.float32(C), np.maximum(np.float32(-C), x))
    s = (xc * xc).astype(np.float32)
    y = (xc * horner(pc, s) / horner(qc, s)).astype(np.float32)
    got, want = f32_to_bits(y), f32_to_bits(np.tanh(x.astype(np.float64)))

    def signed(v):
        v = v.astype(np.int64)
        return np.where(v & 0x8000, -(v & 0x7FFF), v)

    d = np.abs(signed(got) - signed(want))
    print("%s: %d of %d results off (at most %d ulp), in f32 as the kernel computes them" %
          (name, int((d > 0).sum()), len(x), int(d.max())))


def bf16_bits(v):  # round to nearest even, as cx_bf16_from_f64 (no NaN here)
    u = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)


def main():
    m, n = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (3, 3)
    pc, qc, err, qmin = fit(m, n)
    print("degrees %d and %d on [0, %g]: largest relative error %.3e in double; Q >= %.3g" %
          (m, n, C, err, qmin))
    print("P, from s^0:", ", ".join("%.9gf" % v for v in pc))
    print("Q, from s^0:", ", ".join("%.9gf" % v for v in qc))
    check(pc, qc, lambda h: h.astype(np.uint16).view(np.float16).astype(np.float32),
          lambda y: np.asarray(y).astype(np.float16).view(np.uint16).astype(np.uint32), "f16")
    check(pc, qc, lambda h: (h << 16).astype(np.uint32).view(np.float32), bf16_bits, "bf16")


if __name__ == "__main__":
    main()
