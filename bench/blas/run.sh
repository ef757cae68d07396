#!/bin/sh
# The blas driver's benchmark, every side in one run on the same machine state:
#   raw cblas_sgemm from C (sgemm_bench.c), NumPy's matmul (numpy_matmul.py) and Cascade.dot on
#   :blas and :cpu (blas_bench.exs), f32 square matrices; then one caller against two callers
#   multiplying at once, from C and from two BEAM processes.
#
#     bench/blas/run.sh [SECONDS] [ROUNDS]      (default 1.0 s per case, 3 rounds)
#
# The sides take turns, round after round, and each case keeps its best round (shortest time, so
# highest GFLOP/s): this machine has spells of noise from its neighbours lasting tens of seconds,
# and one spell would otherwise fall on one side only.
#
# Writes bench/results/<date>-blas.txt: the raw lines, then a table of GFLOP/s and of Cascade's
# time over NumPy's (below 1: Cascade is faster).
set -e
here=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-1.0}
rounds=${2:-3}
sizes="32 64 256 512 1024"
out="$here/bench/results/$(date +%F)-blas.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
cc -O2 -Wall -Wextra -Werror $(pkg-config --cflags openblas) bench/blas/sgemm_bench.c \
  -o "$tmp/sgemm_bench" $(pkg-config --libs openblas) -pthread
MIX_ENV=prod mix compile >/dev/null
py=/usr/bin/python3
{
  echo "# bench/blas/run.sh $secs   $(date -u '+%F %T UTC')"
  echo "# machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(uname -sr)"
  echo "# OpenBLAS: $(pkg-config --modversion openblas) ($(readlink -f "$(pkg-config --variable=libdir openblas)/libopenblas.so.0" | xargs basename)); NumPy $($py -c 'import numpy; print(numpy.__version__)') on $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  for round in $(seq "$rounds"); do
    echo "# round $round"
    "$tmp/sgemm_bench" "$secs" $sizes
    $py bench/blas/numpy_matmul.py "$secs" $sizes
    MIX_ENV=prod mix run bench/blas/blas_bench.exs "$secs" $sizes
    for callers in 1 2; do "$tmp/sgemm_bench" "$(echo "2 * $secs" | bc)" -c $callers 1024; done
  done
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$tmp/raw.txt"
{
  cat "$tmp/raw.txt"
  echo
  awk -F'\t' '
    $1 == "sgemm" || $1 == "numpy" || $1 == "cascade_blas" || $1 == "cascade_cpu" {
      if (!(($1, $2) in t) || $3 < t[$1, $2]) { g[$1, $2] = $4; t[$1, $2] = $3 }
      if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
    $1 ~ /^cascade_blas_(f16|bf16|f64)$/ { if ($4 > best[$1]) { best[$1] = $4; other[$1] = $2 "\t" $4 } }
    $1 ~ /concurrent/ { if ($4 > conc[$1, $3]) conc[$1, $3] = $4 }
    END {
      print "| n | cblas_sgemm GFLOP/s | NumPy GFLOP/s | Cascade :blas GFLOP/s | Cascade :cpu GFLOP/s | :blas time / NumPy time |"
      print "|---|---|---|---|---|---|"
      for (i = 1; i <= n; i++) { s = order[i]
        printf "| %s | %.1f | %.1f | %.1f | %.1f | %.3f |\n", s, g["sgemm", s], g["numpy", s],
          g["cascade_blas", s], g["cascade_cpu", s], t["cascade_blas", s] / t["numpy", s] }
      print ""
      for (k in other) { split(other[k], p, "\t"); printf "%s at %s: %.1f GFLOP/s\n", k, p[1], p[2] }
      printf "1024, GFLOP/s in all: cblas_sgemm 1 caller %.1f, 2 callers %.1f; Cascade :blas 1 process %.1f, 2 processes %.1f\n",
        conc["sgemm_concurrent", 1], conc["sgemm_concurrent", 2],
        conc["cascade_blas_concurrent", 1], conc["cascade_blas_concurrent", 2]
    }' "$tmp/raw.txt"
} | tee "$out"
