#!/bin/sh
# Runs bench/negotiation.exs here and in a checkout of BASE (default: 663fe24, the last commit
# before the negotiation), alternating, so both see the same machine state.
#     bench/negotiation.sh [BASE] [PAIRS]
set -e
base=${1:-663fe24}
pairs=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
old=$(mktemp -d)
git -C "$here" worktree add -q --detach "$old" "$base"
trap 'git -C "$here" worktree remove --force "$old"' EXIT
(cd "$old" && cp "$here/bench/negotiation.exs" bench/ && MIX_ENV=prod mix compile >/dev/null 2>&1)
(cd "$here" && MIX_ENV=prod mix compile >/dev/null 2>&1)
for i in $(seq "$pairs"); do
  printf 'before (%s): ' "$base"; (cd "$old" && MIX_ENV=prod mix run bench/negotiation.exs)
  printf 'after  (%s): ' "$(git -C "$here" rev-parse --short HEAD)"; (cd "$here" && MIX_ENV=prod mix run bench/negotiation.exs)
done
