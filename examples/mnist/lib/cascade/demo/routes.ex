defmodule Cascade.Demo.Routes do
  @moduledoc """
  A summary of `Cascade.stats/0`: per device, which ops ran natively, which were decomposed
  into primitives on the device, and which were moved to the cpu and back, with their calls
  and the bytes moved.
  """

  @order [:native, :decomposed, :cpu_fallback, :transfer]

  @doc """
  The summary lines for `stats` (as `Cascade.stats/0` returns it).

      iex> stats = %{{:cpu, :add, :native} => %{calls: 3, bytes: 0},
      ...>           {:cpu, :dot, :native} => %{calls: 10, bytes: 0},
      ...>           {:cpu, :relu, :decomposed} => %{calls: 2, bytes: 0}}
      iex> Cascade.Demo.Routes.lines(stats)
      ["cpu  native     13 calls   dot 10, add 3",
       "cpu  decomposed  2 calls   relu 2"]
  """
  @spec lines(map) :: [String.t()]
  def lines(stats) when map_size(stats) == 0, do: ["no ops ran"]

  def lines(stats) do
    by_device = Enum.group_by(stats, fn {{device, _op, _route}, _} -> device end)

    name_width =
      by_device |> Map.keys() |> Enum.map(&(&1 |> name() |> String.length())) |> Enum.max()

    calls_width = stats |> Map.values() |> Enum.map(& &1.calls) |> Enum.sum() |> digits()

    for {device, entries} <- Enum.sort_by(by_device, &name(elem(&1, 0))),
        line <- device_lines(device, entries, name_width, calls_width),
        do: line
  end

  defp device_lines(device, entries, name_width, calls_width) do
    by_route = Enum.group_by(entries, fn {{_, _, route}, _} -> route end)
    label = String.pad_trailing(name(device), name_width)

    routes =
      for route <- @order ++ (Map.keys(by_route) -- @order), Map.has_key?(by_route, route) do
        ops = Enum.sort_by(by_route[route], fn {{_, op, _}, c} -> {-c.calls, op} end)
        calls = ops |> Enum.map(fn {_, c} -> c.calls end) |> Enum.sum()
        bytes = ops |> Enum.map(fn {_, c} -> c.bytes end) |> Enum.sum()

        "#{label}  #{String.pad_trailing(route_name(route), 10)} " <>
          "#{String.pad_leading(Integer.to_string(calls), calls_width)} calls   " <>
          Enum.map_join(ops, ", ", fn {{_, op, _}, c} -> "#{op} #{c.calls}" end) <>
          if(bytes > 0, do: "   (#{bytes} bytes moved)", else: "")
      end

    # on any device but the cpu, say so when nothing had to move
    if device == :cpu or Map.has_key?(by_route, :cpu_fallback),
      do: routes,
      else: routes ++ ["#{label}  moved      none: every op ran on the device"]
  end

  defp route_name(:cpu_fallback), do: "moved"
  defp route_name(route), do: to_string(route)

  defp digits(n), do: n |> Integer.to_string() |> String.length()

  defp name({driver, index}), do: "#{driver}:#{index}"
  defp name(driver), do: to_string(driver)
end
