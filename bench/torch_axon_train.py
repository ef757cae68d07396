"""bench/axon_train.exs's models in PyTorch (Debian python3-torch), eager, on the CPU, trained on
the same batches in the same order: the batches file that bench/axon_train.exs writes.

    python3 bench/torch_axon_train.py mlp|cnn [epochs] [batches file]

mlp: dense 256, relu, dense 10; cnn: conv 32 3x3, relu, max_pool 2, conv 64 3x3, relu,
max_pool 2, flatten, dense 128, relu, dense 10; softmax cross-entropy, torch.optim.Adam
(lr 1e-3), batch 32, as many threads as cores. Prints each epoch's seconds and the held-out
accuracy.
"""
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

kind = sys.argv[1] if len(sys.argv) > 1 else "mlp"
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
path = sys.argv[3] if len(sys.argv) > 3 else "_build/bench/axon_batches.bin"
torch.set_num_threads(os.cpu_count() or 1)
torch.manual_seed(0)

with open(path, "rb") as f:
    data = f.read()
n, m = struct.unpack_from("<II", data, 0)
off = 8
train_x = torch.frombuffer(bytearray(data[off:off + n * 784]), dtype=torch.uint8)
off += n * 784
train_y = torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.uint8).long()
off += n
test_x = torch.frombuffer(bytearray(data[off:off + m * 784]), dtype=torch.uint8)
off += m * 784
test_y = torch.frombuffer(bytearray(data[off:off + m]), dtype=torch.uint8).long()


def images(x, count):
    x = x.float() / 255.0
    return x.reshape(count, 784) if kind == "mlp" else x.reshape(count, 1, 28, 28)


if kind == "mlp":
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
else:
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, 10))

batch = 32
full = n // batch * batch
x = images(train_x[:full * 784], full)
y = train_y[:full]
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

seconds = []
for _ in range(epochs):
    t0 = time.perf_counter()
    for i in range(0, full, batch):
        opt.zero_grad()
        loss = F.cross_entropy(model(x[i:i + batch]), y[i:i + batch])
        loss.backward()
        opt.step()
    seconds.append(time.perf_counter() - t0)

with torch.no_grad():
    accuracy = (model(images(test_x, m)).argmax(1) == test_y).float().mean().item()

print(f"PyTorch {torch.__version__} {kind}, eager, {torch.get_num_threads()} threads: epoch seconds "
      + " ".join(f"{s:.2f}" for s in seconds)
      + f" ({full // batch} batches of {batch}); held-out accuracy {accuracy * 100:.2f} %")
