#!/usr/bin/env bash
# Cascade.Compiler against Nx.Defn.Evaluator and PyTorch eager, one after the other in one run:
#
#   CASCADE_NX_PATH=/path/to/nx bench/compiler.sh [steps] [device]
#
# Needs Nx (CASCADE_NX_PATH, see guides/nx.md) and Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
if [ $# -ge 2 ]; then mix run bench/compiler.exs "$steps" "$2"; else mix run bench/compiler.exs "$steps"; fi
"$python" bench/torch_mlp_step.py "$steps"
