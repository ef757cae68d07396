"""NumPy's matmul on f32 square matrices, timed like sgemm_bench.c and blas_bench.exs.

Usage: numpy_matmul.py SECONDS SIZE...
Prints "numpy<TAB>N<TAB>seconds<TAB>GFLOP/s" per size.
"""
import sys
import time

import numpy as np


def timed(fn, min_seconds):
    """Median seconds per call over batches grown until one lasts 50 ms."""
    fn()
    n, samples, start = 1, [], time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = (time.perf_counter() - t0) / n
        samples.append(dt)
        if dt * n < 0.05:
            n *= 4
        if time.perf_counter() - start > min_seconds and len(samples) >= 5:
            break
    samples.sort()
    return samples[len(samples) // 2]


def matrix(n):
    # values in [-0.5, 0.5), like blas_bench.exs's
    return (np.arange(n * n, dtype=np.float32) % 997 / np.float32(997.0) - np.float32(0.5)).reshape(n, n)


def main():
    min_seconds = float(sys.argv[1])
    for n in map(int, sys.argv[2:]):
        a, b = matrix(n), matrix(n)
        s = timed(lambda: a @ b, min_seconds)
        print(f"numpy\t{n}\t{s:.9f}\t{2 * n**3 / s / 1e9:.2f}", flush=True)


main()
