#!/bin/sh
# Runs the OpenCL benchmarks and writes bench/results/<date>-opencl.txt:
#   1. gemm_bench.c: CLBlast SGEMM against a hand-written tiled kernel (OpenCL directly);
#   2. opencl_bench.exs: the same ops on :opencl and :cpu through Cascade, and the launch cost.
# PoCL's kernel cache goes to _build/pocl-cache (the first run builds CLBlast's kernels, ~10 s).
set -e
cd "$(dirname "$0")/../.."
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$PWD/_build/pocl-cache}"
out="bench/results/$(date +%Y-%m-%d)-opencl.txt"
mkdir -p _build/bench
cc -O2 -Wall -Wextra -Werror -o _build/bench/gemm_bench bench/opencl/gemm_bench.c -lclblast -lOpenCL -lm
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  echo
  echo "## CLBlast SGEMM vs a hand-written tiled kernel (bench/opencl/gemm_bench.c)"
  echo
  _build/bench/gemm_bench
  echo
  echo "## Cascade :opencl vs :cpu (bench/opencl/opencl_bench.exs)"
  echo
  MIX_ENV=test mix run bench/opencl/opencl_bench.exs "$@"
} | tee "$out"
