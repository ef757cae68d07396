# The measure of Cascade.Backend: Nx's own doctests with Cascade.Backend as the default
# backend. Tagged :nx_doctests and excluded unless asked for (script/test-nx), since a few of
# them fail on rounding; absent altogether without Nx, since `doctest` needs the module.
if Code.ensure_loaded?(Nx) do
  defmodule Cascade.NxDoctestsTest do
    use ExUnit.Case, async: false

    import Nx, only: :sigils

    @moduletag :nx_doctests

    setup_all do
      previous = {Nx.default_backend(), Cascade.fallback_policy()}
      Nx.global_default_backend(Cascade.Backend)

      # CASCADE_NX_COMPILER=1: the defn functions behind the doctests (Nx.LinAlg's among them)
      # run through Cascade.Compiler instead of Nx.Defn.Evaluator
      if System.get_env("CASCADE_NX_COMPILER") == "1" do
        options = Nx.Defn.default_options()
        Nx.Defn.global_default_options(compiler: Cascade.Compiler)
        on_exit(fn -> Nx.Defn.global_default_options(options) end)
      end

      Cascade.put_fallback_policy(:allow)
      Cascade.reset_stats()
      # doctests whose every callback ran on Cascade, and those with a fallback
      tally = :counters.new(2, [])

      on_exit(fn ->
        report(Cascade.stats(), tally)
        {backend, policy} = previous
        Nx.global_default_backend(backend)
        Cascade.put_fallback_policy(policy)
      end)

      %{tally: tally}
    end

    setup %{tally: tally} do
      before = fallback_calls()
      on_exit(fn -> :counters.add(tally, if(fallback_calls() > before, do: 2, else: 1), 1) end)
    end

    defp fallback_calls do
      for {{_, _, :binary_fallback}, %{calls: n}} <- Cascade.stats(),
          reduce: 0,
          do: (acc -> acc + n)
    end

    doctest Nx, except: [:moduledoc, default_backend: 1]
    doctest Nx.LinAlg

    # Calls by route; the callbacks that ran on Nx.BinaryBackend, most frequent first.
    defp report(stats, tally) do
      by_route =
        Enum.reduce(stats, %{}, fn {{_dev, _op, route}, %{calls: n}}, acc ->
          Map.update(acc, route, n, &(&1 + n))
        end)

      fallbacks =
        for {{_dev, op, :binary_fallback}, %{calls: n}} <- stats,
            do: {op, n}

      text =
        "Cascade.stats/0 after the Nx doctests\n" <>
          "doctests with every callback on Cascade: #{:counters.get(tally, 1)}, " <>
          "with a fallback to Nx.BinaryBackend: #{:counters.get(tally, 2)}\n" <>
          "calls by route: #{inspect(by_route)}\n" <>
          "Nx.BinaryBackend fallbacks by callback: " <>
          inspect(Enum.sort_by(fallbacks, &(-elem(&1, 1))), limit: :infinity) <> "\n"

      IO.puts(text)
      if path = System.get_env("CASCADE_NX_STATS"), do: File.write!(path, text)
    end
  end
end
