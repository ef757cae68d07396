"""Exports the demo's CNN from PyTorch to ONNX and times its inference, for bench/onnx/cnn.exs.

    python3 bench/onnx/export_cnn.py OUT_DIR [MIN_SECONDS]

Writes OUT_DIR/cnn.onnx (torch.onnx.export, opset 13, batch 64), OUT_DIR/x.bin (the input
batch, f32) and OUT_DIR/y_torch.bin (PyTorch's logits, f32), and prints
"torch <version> <median seconds per batch>". The model is the one bench/numpy_suite.py trains
(conv 32 3x3 -> relu -> max_pool 2 -> conv 64 3x3 -> relu -> max_pool 2 -> dense 128 -> relu ->
dense 10) with PyTorch's default initialisation under seed 42; weights need not be trained for
the outputs to be compared. PyTorch runs on as many threads as cores, under no_grad."""
import os
import sys
import time

import numpy as np
import torch

out, min_seconds = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
torch.set_num_threads(os.cpu_count() or 1)
torch.manual_seed(42)
nn = torch.nn
model = nn.Sequential(
    nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10)).eval()
x = torch.rand(64, 1, 28, 28)
os.makedirs(out, exist_ok=True)
with torch.no_grad():
    y = model(x)
    torch.onnx.export(model, x, os.path.join(out, "cnn.onnx"), opset_version=13,
                      input_names=["x"], output_names=["logits"])
x.numpy().astype(np.float32).tofile(os.path.join(out, "x.bin"))
y.numpy().astype(np.float32).tofile(os.path.join(out, "y_torch.bin"))

# the median of batches of calls, each batch at least 50 ms, for at least min_seconds
samples, n, start = [], 1, time.perf_counter()
with torch.no_grad():
    model(x)
    while time.perf_counter() - start < min_seconds or len(samples) < 3:
        t0 = time.perf_counter()
        for _ in range(n):
            model(x)
        dt = (time.perf_counter() - t0) / n
        samples.append(dt)
        if dt * n < 0.05:
            n *= 4
print(f"torch {torch.__version__} {sorted(samples)[len(samples) // 2]}")
