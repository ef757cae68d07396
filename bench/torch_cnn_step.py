"""The CNN training step of bench/nx_cnn_step.exs in PyTorch (Debian python3-torch), eager, on
the CPU: conv (8 filters 3x3) -> relu -> max_pool 2x2 (or avg_pool) -> dense 10 -> softmax cross-entropy,
backward, torch.optim.Adam (lr 1e-3), batch 32 of 28x28 images, as many threads as cores.

    python3 bench/torch_cnn_step.py [steps] [max|avg]

The second argument picks the pooling (max_pool2d, the default, or avg_pool2d), as
bench/nx_cnn_step.exs's fourth.

Prints the loss of the first and last step and the time per step after one warm-up step.
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
pool = {"max": F.max_pool2d, "avg": F.avg_pool2d}[sys.argv[2] if len(sys.argv) > 2 else "max"]
torch.set_num_threads(os.cpu_count() or 1)
torch.manual_seed(42)

x = torch.randn(32, 1, 28, 28)
y = torch.arange(32) % 10
k = (torch.randn(8, 1, 3, 3) * 0.3).requires_grad_()
kb = torch.zeros(8, requires_grad=True)
w = (torch.randn(8 * 13 * 13, 10) * 0.03).requires_grad_()
b = torch.zeros(10, requires_grad=True)
opt = torch.optim.Adam([k, kb, w, b], lr=1e-3)


def step():
    opt.zero_grad()
    h = pool(F.relu(F.conv2d(x, k, kb)), 2)
    loss = F.cross_entropy(h.reshape(32, -1) @ w + b, y)
    loss.backward()
    opt.step()
    return loss.item()


first = step()
t0 = time.perf_counter()
for _ in range(steps):
    last = step()
elapsed = time.perf_counter() - t0
print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads: loss step 1 "
      f"{first:.5f}, step {steps + 1} {last:.5f}")
print(f"PyTorch eager: {elapsed * 1000 / steps:.2f} ms/step")
