#!/usr/bin/env python3
"""PyTorch beside bench_cuda.c: the same ops, sizes, warm-up and iteration counts, timed the
same way (back to back, then one synchronisation). One JSON object per line, as bench_cuda
prints. PyTorch's defaults are kept: f32 matmul without TF32, as the cuda driver does; for conv2d
TF32 is turned off in cuDNN too (PyTorch's default allows it there), since the cuda driver keeps
f32 convolutions in IEEE f32 on both of its paths. cuDNN's benchmark mode stays off (the
default), as the driver uses cuDNN's heuristics."""
import json
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def timed(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / iters


def report(op, dtype, size, ms, rate, unit):
    print(json.dumps({"op": op, "type": dtype, "size": size, "ms": round(ms, 4),
                      "rate": round(rate, 2), "unit": unit}), flush=True)


def main():
    dev = torch.device("cuda")
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    for n in (1024, 4096, 8192):
        for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            a = torch.rand(n, n, device=dev, dtype=dtype) * 2 - 1
            b = torch.rand(n, n, device=dev, dtype=dtype) * 2 - 1
            iters = 100 if n <= 1024 else 20 if n <= 4096 else 10
            ms = timed(lambda: torch.matmul(a, b), iters)
            report("matmul", name, f"{n}x{n}", ms, 2.0 * n**3 / ms / 1e9, "TFLOP/s")
    n = 64 << 20
    a = torch.rand(n, device=dev) * 2 - 1
    b = torch.rand(n, device=dev) * 2 - 1
    ms = timed(lambda: torch.add(a, b), 50)
    report("add", "f32", "64M", ms, 3.0 * 4 * n / ms / 1e6, "GB/s")
    ms = timed(lambda: torch.exp(a), 50)
    report("exp", "f32", "64M", ms, 2.0 * 4 * n / ms / 1e6, "GB/s")
    x = torch.rand(8192, 8192, device=dev) * 2 - 1
    ms = timed(lambda: torch.softmax(x, dim=1), 50)
    report("softmax", "f32", "8192x8192", ms, 2.0 * 4 * 8192 * 8192 / ms / 1e6, "GB/s")
    for name, dtype in (("f32", torch.float32), ("f16", torch.float16)):
        for n, c, hw, o, iters in ((64, 32, 28, 64, 100), (32, 256, 56, 256, 20)):
            x = torch.rand(n, c, hw, hw, device=dev, dtype=dtype) * 2 - 1
            k = torch.rand(o, c, 3, 3, device=dev, dtype=dtype) * 2 - 1
            ms = timed(lambda: torch.nn.functional.conv2d(x, k, padding=1), iters)
            report("conv2d", name, f"{n}x{c}x{hw}x{hw},{o}x3x3", ms,
                   2.0 * n * o * hw * hw * c * 9 / ms / 1e9, "TFLOP/s")


if __name__ == "__main__":
    main()
