"""NumPy side of bench/bench.exs: times the same ops on the same data.

Prints one line per case, "name<TAB>seconds" (OTP 25 has no JSON parser).

Usage: numpy_bench.py DATA_DIR MIN_SECONDS
DATA_DIR holds the raw native-endian files written by bench.exs (see its `cases`).
"""
import sys
import time

import numpy as np


def timed(fn, min_seconds):
    """Median seconds per call over repeated batches, like bench.exs measures."""
    fn()  # warm up
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


def main():
    data, min_seconds = sys.argv[1], float(sys.argv[2])
    load = lambda name, dtype, shape: np.fromfile(f"{data}/{name}.bin", dtype=dtype).reshape(shape)
    res = {}
    for n in (256, 512, 1024):
        a = load(f"dot{n}_a", np.float32, (n, n))
        b = load(f"dot{n}_b", np.float32, (n, n))
        res[f"dot {n}x{n} f32"] = timed(lambda: np.dot(a, b), min_seconds)
    x = load("vec_x", np.float32, (1 << 20,))
    y = load("vec_y", np.float32, (1 << 20,))
    res["add 1M f32"] = timed(lambda: np.add(x, y), min_seconds)
    res["exp 1M f32"] = timed(lambda: np.exp(x), min_seconds)
    res["sum 1M f32"] = timed(lambda: np.sum(x), min_seconds)
    hx = load("vec_hx", np.float16, (1 << 20,))
    hy = load("vec_hy", np.float16, (1 << 20,))
    res["add 1M f16"] = timed(lambda: np.add(hx, hy), min_seconds)
    s1 = load("one_a", np.float32, (1,))
    s2 = load("one_b", np.float32, (1,))
    res["add 1 element f32"] = timed(lambda: np.add(s1, s2), min_seconds)
    # a checksum so the two sides provably read the same data
    res["check: sum of x in f64"] = float(np.sum(x, dtype=np.float64))
    res["numpy version"] = np.__version__
    for name, value in res.items():
        print(f"{name}\t{value}")


main()
