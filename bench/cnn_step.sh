#!/usr/bin/env bash
# The CNN training step (conv -> relu -> max_pool -> dense, value_and_grad, Adam) through
# Cascade.Backend (under Nx.Defn.Evaluator, then compiled by Cascade.Compiler) and in PyTorch,
# one after the other in one run:
#
#   CASCADE_NX_PATH=/path/to/nx bench/cnn_step.sh [steps] [device]
#
# Needs Nx (CASCADE_NX_PATH, see guides/nx.md) and Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
device=${2:-cpu}
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
mix run bench/nx_cnn_step.exs "$steps" "$device" evaluator
mix run bench/nx_cnn_step.exs "$steps" "$device" compiler
"$python" bench/torch_cnn_step.py "$steps"
