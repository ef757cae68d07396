#!/usr/bin/env bash
# Nx.top_k/2 on Cascade (argsort with k: a small k selected in one pass over each line) against
# Nx's default on Cascade (the whole line sorted, then sliced) and PyTorch's torch.topk, on the
# same {1000, 1000} f32 input (integers -4..4 as floats: many ties), in one run:
#
#   CASCADE_NX_PATH=/path/to/nx bench/top_k.sh
#
# Median ms of 21 calls after 3 warm-up calls. Needs Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" - "$dir/x.f32" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(7)
rng.integers(-4, 5, size=(1000, 1000)).astype(np.float32).tofile(sys.argv[1])
PY
MIX_ENV=test mix run -e '
  [path] = System.argv()
  x = File.read!(path) |> Nx.from_binary(:f32) |> Nx.reshape({1000, 1000})
  median = fn f ->
    for _ <- 1..3, do: f.()
    ts = for _ <- 1..21, do: elem(:timer.tc(f), 0)
    Enum.at(Enum.sort(ts), 10) / 1000
  end
  for dev <- [:cpu, :blas], k <- [1, 5, 50] do
    cx = Nx.backend_copy(x, {Cascade.Backend, device: dev})
    top = median.(fn -> Nx.top_k(cx, k: k) end)
    full = median.(fn ->
      i = Nx.argsort(cx, axis: 1, direction: :desc) |> Nx.slice_along_axis(0, k, axis: 1)
      Nx.take_along_axis(cx, i, axis: 1)
    end)
    IO.puts("cascade #{dev} k=#{k}: top_k #{Float.round(top, 3)} ms, sort then slice #{Float.round(full, 3)} ms")
  end
' "$dir/x.f32"
"$python" - "$dir/x.f32" <<'PY'
import sys, time, numpy as np, torch
x = torch.from_numpy(np.fromfile(sys.argv[1], dtype=np.float32).reshape(1000, 1000))
for k in (1, 5, 50):
    for _ in range(3): torch.topk(x, k, dim=1)
    ts = []
    for _ in range(21):
        t0 = time.perf_counter(); torch.topk(x, k, dim=1); ts.append(time.perf_counter() - t0)
    print(f"torch {torch.__version__} threads {torch.get_num_threads()} k={k}: topk {sorted(ts)[10] * 1000:.3f} ms")
PY
