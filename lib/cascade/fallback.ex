defmodule Cascade.Fallback do
  @moduledoc false
  # Fallbacks that happen outside the C dispatcher: an Nx callback or type that Cascade cannot
  # run, which Cascade.Backend runs on Nx.BinaryBackend instead (its inputs copied to host
  # binaries, its result copied back). They obey the same `fallback:` policy as the C
  # dispatcher's and are counted beside its routes in `Cascade.stats/0`, as
  # `{device, op, :binary_fallback}` with the bytes copied both ways.

  require Logger

  @table __MODULE__
  @route :binary_fallback

  @doc false
  # Called once, by Cascade.Application, so the table lives as long as the application.
  def init do
    if :ets.whereis(@table) == :undefined do
      :ets.new(@table, [:named_table, :public, :set, write_concurrency: true])
    end

    :ok
  end

  @doc false
  # Before any data moves: raises under `:error`, logs once per (device, op, type, reason)
  # under `:warn`. Then counts the call and the bytes.
  def check!(device, op, type, reason, bytes) do
    Cascade.Op.taint("#{op} runs on Nx.BinaryBackend (#{reason})")

    case Cascade.fallback_policy() do
      :error ->
        raise Cascade.Error,
          driver: driver(device),
          code: :unsupported,
          message:
            "#{op} on #{inspect(device)} for #{inspect(type)} would fall back to " <>
              "Nx.BinaryBackend (#{reason}) and the fallback policy is :error"

      :warn ->
        if :ets.insert_new(@table, {{:warned, device, op, type, reason}}) do
          Logger.warning(
            "Cascade: #{op} on #{inspect(device)} for #{inspect(type)} runs on " <>
              "Nx.BinaryBackend (#{reason}); #{bytes} bytes copied"
          )
        end

      :allow ->
        :ok
    end

    count(device, op, bytes)
  end

  @doc false
  def count(device, op, bytes) do
    :ets.update_counter(@table, {device, op, @route}, [{2, 1}, {3, bytes}], {nil, 0, 0})
    :ok
  end

  @doc false
  # The counters in the shape of Cascade.stats/0.
  def stats do
    rows = if :ets.whereis(@table) == :undefined, do: [], else: :ets.tab2list(@table)

    for {{_, _, @route} = key, calls, bytes} <- rows,
        into: %{},
        do: {key, %{calls: calls, bytes: bytes}}
  end

  @doc false
  def reset do
    if :ets.whereis(@table) != :undefined,
      do: :ets.match_delete(@table, {{:_, :_, @route}, :_, :_})

    :ok
  end

  defp driver({driver, _index}), do: driver
  defp driver(driver), do: driver
end
