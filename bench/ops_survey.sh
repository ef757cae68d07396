#!/bin/sh
# Common ops on an N x N f32 tensor (N=1000 unless given): Cascade's default device
# (bench/ops_survey.exs), the same in a checkout of BASE when given, and PyTorch
# (bench/ops_survey.py), taking turns for ROUNDS rounds (2 unless given), each op keeping its
# best round (this machine has spells of noise that last minutes: one pass of each, one after
# the other, once differed by 2x where turns did not), then a table: op, Cascade (and BASE) in
# microseconds, PyTorch, Cascade / PyTorch.
#     bench/ops_survey.sh [BASE]          SEC=0.5 ONLY=add,sort_ax1 N=16 pass through; ROUNDS; PYTHON=...
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"; [ -n "$old" ] && git -C "$here" worktree remove --force "$old"' EXIT
(cd "$here" && MIX_ENV=prod mix compile >/dev/null 2>&1)
if [ -n "$1" ]; then
  old=$(mktemp -d)
  git -C "$here" worktree add -q --detach "$old" "$1"
  (cd "$old" && cp "$here/bench/ops_survey.exs" bench/ && MIX_ENV=prod mix compile >/dev/null 2>&1)
fi
# the first python3 with torch (Debian's python3-torch is /usr/bin's), or $PYTHON
py=${PYTHON:-$(for p in python3 /usr/bin/python3; do "$p" -c 'import torch' 2>/dev/null && echo "$p" && break; done)}
[ -n "$py" ] || { echo "no python3 with torch (apt-get install python3-torch)" >&2; exit 1; }
timings() { grep -E '^[a-z_0-9]+ [0-9.]+$'; }
for r in $(seq 1 "${ROUNDS:-2}"); do
  [ -n "$1" ] && (cd "$old" && MIX_ENV=prod mix run bench/ops_survey.exs) | timings >>"$out/base.all"
  (cd "$here" && MIX_ENV=prod mix run bench/ops_survey.exs) | timings >>"$out/new.all"
  "$py" "$here/bench/ops_survey.py" | timings >>"$out/torch.all"
done
# each op's best round
for f in base new torch; do
  [ -f "$out/$f.all" ] && awk '!($1 in m) || $2 < m[$1] { m[$1] = $2 } END { for (k in m) print k, m[k] }' \
    "$out/$f.all" | sort >"$out/$f"
done
if [ -n "$1" ]; then
  join "$out/base" "$out/new" | join - "$out/torch" |
    awk -v b="$1" 'BEGIN { printf "%-12s %10s %10s %10s %7s\n", "op", b, "Cascade", "PyTorch", "ratio" }
      { printf "%-12s %10.1f %10.1f %10.1f %7.2f\n", $1, $2, $3, $4, $3 / $4 }'
else
  join "$out/new" "$out/torch" |
    awk 'BEGIN { printf "%-12s %10s %10s %7s\n", "op", "Cascade", "PyTorch", "ratio" }
      { printf "%-12s %10.1f %10.1f %7.2f\n", $1, $2, $3, $2 / $3 }'
fi
