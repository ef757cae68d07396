"""NumPy and PyTorch side of `mix cascade.bench`: the same suite on the same data, in the same run.

Usage: numpy_suite.py DATA_DIR MIN_SECONDS TYPES
  DATA_DIR     the raw native-endian files the task wrote (f32 inputs; MNIST u8 images, labels)
  MIN_SECONDS  how long to time each case at least
  TYPES        comma-separated: f32, f16, bf16, f64

Prints one line per case, type and library, tab-separated (OTP 25 has no JSON parser):
  TYPE  CASE  SECONDS  CHECK  COMPUTES_IN  LIBRARY
LIBRARY is numpy or torch. CHECK is "SUM,ABS": the sum of the result and the sum of its
absolute values, in f64 (empty for the training epoch), so both sides can be seen to compute
the same thing. COMPUTES_IN is the type the library computed in: the case's own type where it
has it at a usable speed, f32 on the same (rounded) values otherwise: NumPy has no bf16, and
its f16 matrix products are plain loops (17 s for a 1024 x 1024 dot here). A case a library
cannot run (NumPy has no erf for gelu; PyTorch 1.13 has no f16 kernels for some ops on the
CPU) has no line. PyTorch (Debian python3-torch) runs with as many threads as there are cores;
without it there are NumPy lines only.
"""
import os
import sys
import time

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

try:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(os.cpu_count() or 1)
except ImportError:
    torch = None


def timed(fn, min_seconds):
    """Median seconds per call, measured as Cascade.Bench.Timer measures."""
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
        if time.perf_counter() - start > min_seconds and len(samples) >= 3:
            break
    samples.sort()
    return samples[len(samples) // 2]


def round_bf16(x):
    """f32 values rounded to bfloat16 (nearest even), kept in f32: what Cascade's bf16 holds."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def as_type(x, t):
    """The values as Cascade holds them in type t, and the NumPy dtype for elementwise work."""
    if t == "bf16":
        return round_bf16(x)
    return x.astype({"f32": np.float32, "f16": np.float16, "f64": np.float64}[t])


def matmul_type(x, t):
    """Inputs for products: f16 values widened to f32 (NumPy has no fast f16 product)."""
    return x.astype(np.float32) if t in ("f16", "bf16") else x


def conv2d(x, k):
    windows = sliding_window_view(x, k.shape[2:], axis=(2, 3))  # N, C, H', W', KH, KW
    return np.tensordot(windows, k, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(axis=1, keepdims=True)
    d = x - m
    v = (d * d).mean(axis=1, keepdims=True)
    return d / np.sqrt(v + eps) * g + b


def cross_entropy(y, x):
    d = x - x.max(axis=1, keepdims=True)
    log_p = d - np.log(np.exp(d).sum(axis=1, keepdims=True))
    return -(y * log_p).sum(axis=1).mean()


def max_pool2d(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def mlp_epoch(images, labels, dtype, batch=64, hidden=256, shift=2, rate=0.1, momentum=0.9):
    """One epoch of the demo's training, as Cascade.Demo.Training runs it: the same model,
    batch, optimiser and random shifts; NumPy's own random numbers."""
    rng = np.random.default_rng(42)
    n = images.shape[0]
    x_all = (images.astype(dtype) / dtype(255)).reshape(n, 28, 28)
    params = [
        (rng.normal(0, np.sqrt(2 / 784), (784, hidden)).astype(dtype), np.zeros(hidden, dtype)),
        (rng.normal(0, np.sqrt(2 / hidden), (hidden, 10)).astype(dtype), np.zeros(10, dtype)),
    ]
    velocity = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]
    side = 28 + 2 * shift
    order = rng.permutation(n)
    eye = np.eye(10, dtype=dtype)
    for start in range(0, n, batch):
        idx = order[start:start + batch]
        b = len(idx)
        padded = np.pad(x_all[idx], ((0, 0), (shift, shift), (shift, shift)))
        dy, dx = rng.integers(-shift, shift + 1, (2, b))
        rows = (np.arange(28)[None, :, None] + shift - dy[:, None, None])
        cols = (np.arange(28)[None, None, :] + shift - dx[:, None, None])
        x = padded[np.arange(b)[:, None, None], rows, cols].reshape(b, 784)
        (w1, b1), (w2, b2) = params
        z1 = x @ w1 + b1
        h = np.maximum(z1, 0)
        logits = h @ w2 + b2
        p = softmax(logits)
        dlogits = (p - eye[labels[idx]]) / dtype(b)
        dw2, db2 = h.T @ dlogits, dlogits.sum(axis=0)
        dz1 = np.where(z1 > 0, dlogits @ w2.T, 0).astype(dtype)
        dw1, db1 = x.T @ dz1, dz1.sum(axis=0)
        grads = [(dw1, db1), (dw2, db2)]
        lr = dtype(rate)
        velocity = [(momentum * vw + gw, momentum * vb + gb)
                    for (vw, vb), (gw, gb) in zip(velocity, grads)]
        params = [(w - lr * vw, bb - lr * vb) for (w, bb), (vw, vb) in zip(params, velocity)]
    return params


def main():
    data, min_seconds, types = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(",")
    # the cases whose names contain one of these parts (mix cascade.bench --cases); all if none
    parts = [p for p in (sys.argv[4] if len(sys.argv) > 4 else "").split(",") if p]

    def load(name, shape):
        return np.fromfile(f"{data}/{name}.bin", dtype=np.float32).reshape(shape)

    inputs = {
        "dot": {n: (load(f"dot{n}_a", (n, n)), load(f"dot{n}_b", (n, n))) for n in (256, 512, 1024)},
        "conv": (load("conv_x", (64, 32, 28, 28)), load("conv_k", (64, 32, 3, 3))),
        "softmax": load("softmax_x", (1000, 1000)),
        "norm": (load("norm_g", (1000,)), load("norm_b", (1000,))),
        "dense": (load("dense_x", (256, 1024)), load("dense_w", (1024, 1024)), load("dense_b", (1024,))),
        "targets": load("xent_y", (1000, 1000)),
        "vec": (load("vec_x", (1 << 20,)), load("vec_y", (1 << 20,))),
        "one": (load("one_a", (1,)), load("one_b", (1,))),
    }
    mnist = None
    if os.path.exists(f"{data}/mnist_images.bin"):
        images = np.fromfile(f"{data}/mnist_images.bin", dtype=np.uint8).reshape(-1, 784)
        labels = np.fromfile(f"{data}/mnist_labels.bin", dtype=np.uint8)
        mnist = (images, labels)

    def report(t, case, fn, computes_in, library="numpy", check=True):
        if parts and not any(p in case for p in parts):
            return
        try:
            seconds = timed(fn, min_seconds)
        except (RuntimeError, TypeError):
            return  # PyTorch: no kernel for this type on the CPU
        if check:
            result = fn()
            if library == "torch":
                result = result.double().numpy()
            value = f"{np.sum(result, dtype=np.float64)},{np.sum(np.abs(result), dtype=np.float64)}"
        else:
            value = ""
        print(f"{t}\t{case}\t{seconds}\t{value}\t{computes_in}\t{library}", flush=True)

    for t in types:
        elementwise = "f32" if t == "bf16" else t
        product = "f32" if t in ("f16", "bf16") else t
        for n, (a, b) in inputs["dot"].items():
            a, b = matmul_type(as_type(a, t), t), matmul_type(as_type(b, t), t)
            report(t, f"dot {n}x{n}", lambda: a @ b, product)
        x, k = (matmul_type(as_type(v, t), t) for v in inputs["conv"])
        report(t, "conv2d 64x32x28x28, 64 3x3", lambda: conv2d(x, k), product)
        xp = as_type(inputs["conv"][0], t)
        report(t, "max_pool2d 2x2 of 64x32x28x28", lambda: max_pool2d(xp), elementwise)
        s = as_type(inputs["softmax"], t)
        report(t, "softmax 1000x1000", lambda: softmax(s), elementwise)
        g, b = (as_type(v, t) for v in inputs["norm"])
        report(t, "layer_norm 1000x1000", lambda: layer_norm(s, g, b), elementwise)
        dx, dw, db = (matmul_type(as_type(v, t), t) for v in inputs["dense"])
        report(t, "dense+relu 256x1024x1024", lambda: np.maximum(dx @ dw + db, 0), product)
        ty = as_type(inputs["targets"], t)
        report(t, "cross-entropy 1000x1000", lambda: cross_entropy(ty, s), elementwise)
        x, y = (as_type(v, t) for v in inputs["vec"])
        report(t, "add 1M", lambda: np.add(x, y), elementwise)
        report(t, "exp 1M", lambda: np.exp(x), elementwise)
        report(t, "tanh 1M", lambda: np.tanh(x), elementwise)
        report(t, "sum 1M", lambda: np.sum(x), elementwise)
        o1, o2 = (as_type(v, t) for v in inputs["one"])
        report(t, "add 1 element", lambda: np.add(o1, o2), elementwise)
        if t in ("f16", "bf16"):  # mixed precision's conversions (NumPy: bf16 held in f32)
            xf = inputs["vec"][0]
            report(t, "as_type 1M into f32", lambda: x.astype(np.float32), elementwise)
            report(t, "as_type 1M from f32", lambda: as_type(xf, t), elementwise)
        if mnist is not None:
            dtype = {"f64": np.float64}.get(t, np.float32)
            report(t, "MLP training epoch", lambda: mlp_epoch(*mnist, dtype), product, check=False)
        if torch is not None:
            torch_cases(t, inputs, report, parts, min_seconds)
            if mnist is not None and t == "f32":
                report(t, "CNN training epoch", lambda: cnn_epoch(*mnist), t, "torch", check=False)
    print(f"numpy\t{np.__version__}", flush=True)
    if torch is not None:
        print(f"torch\t{torch.__version__}", flush=True)


def cnn_epoch(images, labels, batch=64, shift=2):
    """One epoch of the demo's CNN in PyTorch, as Cascade.Demo.CNN and Cascade.Demo.Training run
    it: conv 32 3x3 -> relu -> max_pool 2 -> conv 64 3x3 -> relu -> max_pool 2 -> dense 128 ->
    relu -> dense 10, softmax cross-entropy, AdamW (lr 1e-3, weight decay 0.1, as the demo's
    Adam with its default decoupled weight decay), batch 64, each image shifted by up to `shift`
    pixels (torch.roll on a zero-padded copy, then cropped), f32."""
    torch.manual_seed(42)
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    x_all = torch.from_numpy(images.astype(np.float32) / 255).reshape(-1, 1, 28, 28)
    y_all = torch.from_numpy(labels.astype(np.int64))
    n = x_all.shape[0]
    order = torch.randperm(n)
    for start in range(0, n, batch):
        idx = order[start:start + batch]
        x = F.pad(x_all[idx], (shift, shift, shift, shift))
        dy, dx = (int(v) for v in torch.randint(-shift, shift + 1, (2,)))
        x = torch.roll(x, (dy, dx), (2, 3))[:, :, shift:shift + 28, shift:shift + 28]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y_all[idx])
        loss.backward()
        opt.step()
    return model


def torch_cases(t, inputs, report, parts, min_seconds):
    """The same cases in PyTorch, in the case's own type (bf16 and f16 natively where PyTorch
    has the kernel). A product (dot, conv2d, dense) in f16 or bf16 runs both natively, where
    PyTorch has the kernel, and in f32 on the same rounded values, as NumPy's; the faster is
    reported (PyTorch's bf16 matmul through oneDNN is twice its f32 speed on a processor with
    AVX512-BF16, and slower than f32 on one without)."""
    dtype = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
             "bf16": torch.bfloat16}[t]

    def on(x):
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype)

    def wide(x):
        return torch.from_numpy(np.ascontiguousarray(matmul_type(as_type(x, t), t)))

    def run(case, fn, computes_in):
        with torch.no_grad():
            report(t, case, fn, computes_in, "torch")

    product = "f32" if t in ("f16", "bf16") else t

    def run_product(case, fn, args):
        if parts and not any(p in case for p in parts):
            return
        ways = [([wide(v) for v in args], product)]
        if product != t:
            native = [on(v) for v in args]
            try:
                with torch.no_grad():
                    fn(*native)
                ways.append((native, t))
            except RuntimeError:
                pass  # no kernel for this type on the CPU
        # each way timed twice, in turn: one timing alone picked f32 for a bf16 1024 x 1024 dot
        # once, at twice the time of the native product
        times = [float("inf")] * len(ways)
        with torch.no_grad():
            for _ in range(2):
                for i, (vs, _) in enumerate(ways):
                    times[i] = min(times[i], timed(lambda: fn(*vs), min_seconds / 4))
        vs, computes_in = ways[times.index(min(times))]
        run(case, lambda: fn(*vs), computes_in)

    for n, (a, b) in inputs["dot"].items():
        run_product(f"dot {n}x{n}", lambda a, b: a @ b, (a, b))
    run_product("conv2d 64x32x28x28, 64 3x3", F.conv2d, inputs["conv"])
    xp = on(inputs["conv"][0])
    run("max_pool2d 2x2 of 64x32x28x28", lambda: F.max_pool2d(xp, 2), t)
    s = on(inputs["softmax"])
    run("softmax 1000x1000", lambda: torch.softmax(s, 1), t)
    g, b = (on(v) for v in inputs["norm"])
    run("layer_norm 1000x1000", lambda: F.layer_norm(s, (1000,), g, b), t)
    run_product("dense+relu 256x1024x1024", lambda x, w, b: torch.relu(torch.addmm(b, x, w)),
                inputs["dense"])
    ty = on(inputs["targets"])
    run("cross-entropy 1000x1000", lambda: F.cross_entropy(s, ty), t)
    x, y = (on(v) for v in inputs["vec"])
    run("add 1M", lambda: torch.add(x, y), t)
    run("exp 1M", lambda: torch.exp(x), t)
    run("tanh 1M", lambda: torch.tanh(x), t)
    run("gelu 1M", lambda: F.gelu(x), t)
    run("sum 1M", lambda: torch.sum(x), t)
    o1, o2 = (on(v) for v in inputs["one"])
    run("add 1 element", lambda: torch.add(o1, o2), t)
    if t in ("f16", "bf16"):
        xf = torch.from_numpy(np.ascontiguousarray(inputs["vec"][0]))
        run("as_type 1M into f32", lambda: x.float(), t)
        run("as_type 1M from f32", lambda: xf.to(dtype), t)


main()
