defmodule Mix.Tasks.Cascade.Devices do
  @shortdoc "Lists Cascade's devices and prints each one's capability matrix"

  @moduledoc """
  Lists every device of every driver Cascade was asked to load — available or not, and why
  not — and prints, for each available device, the capability matrix: one row per op, one
  column per type, each cell saying what the dispatcher does with that op on that device,
  and the libraries that run its native cells (`Cascade.libraries/1`: `portable` C,
  `openblas`, the `avx512` or `avx2` vector kernels, or the driver's own).

      mix cascade.devices [--device DEVICE] [--ops]

    * `--device DEVICE` — only this device (`cpu`, `test`, `opencl:1`)
    * `--ops` — only the ops a device does not run natively, with the reason

  Cells:

    * `N` native: the device's driver runs it
    * `S` native for some shapes (see `Cascade.explain/3` for given inputs)
    * `D` decomposed into primitives on the device, every step native there
    * `d` decomposed, some steps copied to the cpu
    * `C` copied to the cpu, run there, copied back (cpu fallback)
    * `.` the op does not take this type
  """
  use Mix.Task

  @types Cascade.Type.names()

  @impl true
  def run(args) do
    {opts, _, invalid} = OptionParser.parse(args, strict: [device: :string, ops: :boolean])
    if invalid != [], do: Mix.raise("unknown options: #{inspect(invalid)}")
    Mix.Task.run("app.start")

    devices = Cascade.devices()
    IO.puts(device_table(devices))

    selected =
      case opts[:device] do
        nil -> Enum.filter(devices, & &1.available)
        name -> [find_device!(devices, name)]
      end

    for d <- selected do
      caps = Cascade.capabilities(d.device)
      IO.puts("")

      if opts[:ops],
        do: IO.puts(degraded(d, caps)),
        else: IO.puts(matrix(d, caps, Cascade.libraries(d.device)))
    end
  end

  defp find_device!(devices, name) do
    wanted =
      case String.split(name, ":") do
        [driver] -> String.to_atom(driver)
        [driver, "0"] -> String.to_atom(driver)
        [driver, index] -> {String.to_atom(driver), String.to_integer(index)}
      end

    Enum.find(devices, &(&1.device == wanted)) ||
      Mix.raise("no device #{name}; devices: #{Enum.map_join(devices, ", ", &name(&1.device))}")
  end

  defp name({driver, index}), do: "#{driver}:#{index}"
  defp name(driver), do: to_string(driver)

  defp device_table(devices) do
    rows =
      for d <- devices do
        [
          name(d.device),
          if(d.available, do: "yes", else: "no"),
          d.kind,
          if(d.memory > 0, do: "#{div(d.memory, 1024 * 1024)} MiB", else: ""),
          if(d.available, do: "#{d.name}; #{d.detail}", else: d.reason)
        ]
      end

    table(["device", "available", "kind", "memory", "details"], rows)
  end

  defp matrix(d, caps, libraries) do
    ops = Cascade.__ops__()

    rows =
      for op <- ops do
        cells = for t <- @types, do: cell(Map.get(caps, {op.name, t}))
        libs = for(t <- @types, l = libraries[{op.name, t}], do: l) |> Enum.uniq()

        [to_string(op.name), if(op.kind == :composite, do: "composite", else: "primitive")] ++
          cells ++ [Enum.join(libs, ", ")]
      end

    counts =
      caps
      |> Map.values()
      |> Enum.frequencies_by(&cell/1)
      |> Enum.sort()
      |> Enum.map_join(", ", fn {c, n} -> "#{c}: #{n}" end)

    "#{name(d.device)} (#{d.name}) — N native, S some shapes, D decomposed, " <>
      "d decomposed with cpu steps, C cpu fallback, . type not taken\n" <>
      table(["op", "kind" | Enum.map(@types, &to_string/1)] ++ ["library"], rows) <>
      "\n(op, type) pairs: " <> counts
  end

  defp cell(nil), do: "."
  defp cell(:native), do: "N"
  defp cell(:shape_dependent), do: "S"
  defp cell(:cpu_fallback), do: "C"

  defp cell({:decomposed, steps}) do
    if Enum.all?(steps, fn {_, r} -> r in [:native, :decomposed] end),
      do: "D",
      else: "d"
  end

  defp degraded(d, caps) do
    rows =
      for {{op, type}, route} <- Enum.sort(caps), route != :native do
        how =
          case route do
            {:decomposed, steps} ->
              "decomposed: " <> Enum.map_join(steps, ", ", fn {s, r} -> "#{s} (#{r})" end)

            other ->
              to_string(other)
          end

        [to_string(op), to_string(type), how]
      end

    "#{name(d.device)}: what does not run natively\n" <> table(["op", "type", "route"], rows)
  end

  defp table(header, rows) do
    widths =
      Enum.reduce([header | rows], List.duplicate(0, length(header)), fn row, acc ->
        Enum.zip_with(row, acc, &max(String.length(&1), &2))
      end)

    line = fn row ->
      row
      |> Enum.zip(widths)
      |> Enum.map_join("  ", fn {cell, w} -> String.pad_trailing(cell, w) end)
      |> String.trim_trailing()
    end

    rule = widths |> Enum.map_join("  ", &String.duplicate("-", &1))
    Enum.join([line.(header), rule | Enum.map(rows, line)], "\n")
  end
end
