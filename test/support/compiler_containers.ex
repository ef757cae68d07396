if Code.ensure_loaded?(Nx) do
  defmodule Cascade.CompilerTest.Scaled do
    @moduledoc false
    # A container whose `scale` is no tensor but part of a compiled function's input all the
    # same (test/nx/compiler_test.exs). These modules are here, not in the test, because the
    # container protocols are consolidated.
    @derive {Nx.Container, containers: [:x], keep: [:scale]}
    defstruct [:x, :scale]
  end

  defmodule Cascade.CompilerTest.LazyPair.Wrapped do
    @moduledoc false
    @derive {Nx.Container, containers: [:a, :b]}
    defstruct [:a, :b]
  end

  defmodule Cascade.CompilerTest.LazyPair do
    @moduledoc false
    # A lazy container whose `b` must not be evaluated unless a function reads it.
    defstruct [:a, :b]

    defimpl Nx.LazyContainer do
      def traverse(%{a: a, b: b}, acc, fun) do
        {a, acc} = fun.(Nx.to_template(a), fn -> a end, acc)
        {b, acc} = fun.(Nx.to_template(b), fn -> raise "don't call b" end, acc)
        {%Cascade.CompilerTest.LazyPair.Wrapped{a: a, b: b}, acc}
      end
    end
  end
end
