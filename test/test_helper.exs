# Tests that call into the NIF can take the whole VM down if the C side has a bug; run with
# `mix test --trace` to see which test was running when that happens.
#
# Tests tagged :nx need Nx (CASCADE_NX_PATH=/path/to/nx, see mix.exs); without it they are
# skipped. The Nx doctest measure (:nx_doctests) runs only when asked for: script/test-nx.
exclude = if Code.ensure_loaded?(Nx), do: [:nx_doctests], else: [:nx, :nx_doctests]
ExUnit.start(exclude: exclude)
