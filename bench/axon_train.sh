#!/usr/bin/env bash
# Axon 0.6 training through Axon.Loop on the demo's MNIST digits: the MLP and the CNN, each under
# Nx.Defn.Evaluator, then compiled by Cascade.Compiler, then the same model in PyTorch 1.13 on
# the same batches, one after the other in one run (bench/axon_train.exs, bench/torch_axon_train.py):
#
#   CASCADE_NX_PATH=... CASCADE_AXON_PATH=... CASCADE_POLARIS_PATH=... bench/axon_train.sh [epochs] [mlp|cnn ...]
#
# Needs Nx, Axon and Polaris checkouts (guides/nx.md) and Debian's python3-torch. OPENBLAS_CORETYPE
# and OPENBLAS_L2_SIZE are unset for both sides, as for every benchmark here.
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-2}
shift || true
models=${*:-mlp cnn}
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export MIX_ENV=test
mix compile > /dev/null
for model in $models; do
  mix run bench/axon_train.exs "$model" evaluator "$epochs" | grep '^Axon'
  mix run bench/axon_train.exs "$model" compiler "$epochs" | grep '^Axon'
  "$python" bench/torch_axon_train.py "$model" "$epochs"
done
