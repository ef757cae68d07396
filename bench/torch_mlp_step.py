"""The MLP training step of bench/compiler.exs in PyTorch (Debian python3-torch), eager, on the
CPU: 784-256-10, relu, softmax cross-entropy, batch 64, backward and an SGD update (lr 0.01),
as many threads as cores.

    python3 bench/torch_mlp_step.py [steps]

Prints the time per step after two warm-up steps, and the loss of the last step.
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
torch.set_num_threads(os.cpu_count() or 1)
torch.manual_seed(42)

x = torch.randn(64, 784)
y = torch.arange(64) % 10
w1 = (torch.randn(784, 256) * 0.05).requires_grad_()
b1 = torch.zeros(256, requires_grad=True)
w2 = (torch.randn(256, 10) * 0.05).requires_grad_()
b2 = torch.zeros(10, requires_grad=True)
params = [w1, b1, w2, b2]


def step():
    for p in params:
        p.grad = None
    loss = F.cross_entropy(F.relu(x @ w1 + b1) @ w2 + b2, y)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= 0.01 * p.grad
    return loss


step()
step()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
elapsed = time.perf_counter() - t0
print(f"  PyTorch {torch.__version__} eager, {torch.get_num_threads()} threads: "
      f"{elapsed * 1000 / steps:.3f} ms/step, loss {loss.item():.5f}")
