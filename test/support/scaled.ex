if Code.ensure_loaded?(Nx) do
  defmodule Cascade.CompilerTest.Scaled do
    @moduledoc false
    # A container whose `scale` is no tensor but part of a compiled function's input all the
    # same (test/nx/compiler_test.exs). Here, not in the test: Nx.Container is consolidated.
    @derive {Nx.Container, containers: [:x], keep: [:scale]}
    defstruct [:x, :scale]
  end
end
