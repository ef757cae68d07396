defmodule Mix.Tasks.Cascade.Bench do
  @shortdoc "Times a fixed suite on every device and type beside NumPy and PyTorch on the same data"

  @moduledoc """
  Runs the fixed suite of `Cascade.Bench.Suite` — dot 256/512/1024, conv2d (64×32×28×28,
  64 filters of 3×3) and max_pool2d 2×2 of the same input, softmax and layer_norm of
  1000×1000, a dense layer with relu, a cross-entropy of 1000×1000 logits,
  add/exp/tanh/gelu/sum of 1M elements, a one-element add, one training epoch of
  `mix cascade.demo` — on every available device and type, and the same cases in NumPy and
  PyTorch (`bench/numpy_suite.py`; Debian `python3-numpy`, and `python3-torch` where it is
  installed, with as many threads as cores) on the same data in the same run.

      mix cascade.bench [--devices cpu,opencl] [--types f32,f16,bf16] [--seconds 0.5] [--out DIR]
                        [--cases add,dot] [--rounds 1]

    * `--devices` — default: every available device (`Cascade.devices/0`)
    * `--types` — any of f32, f16, bf16, f64; default f32,f16,bf16
    * `--seconds` — the least time spent timing each case, default 0.5
    * `--out` — where the results go, default `bench/results`
    * `--cases` — only the cases whose names contain one of these parts (`add` runs
      "add 1M" and "add 1 element"); default: all
    * `--rounds` — how many times the two sides take turns, each case keeping each side's
      fastest round; default 1. A round goes type by type: NumPy and PyTorch run that type's
      cases, then Cascade on every device (the other way round in even rounds), so that the
      two timings of a case lie one type's turns apart (1–4 minutes on a 2-core machine with
      `cpu` and `blas`), not a whole suite. A machine whose speed moves in spells of
      tens of seconds slows one side's round, not its best of two. The table's "by round"
      column gives the case's ratio in each round, so that a reader sees how far the machine
      moved between them.

  Writes `<date>.json` (every figure, the check values and the machine),
  `<date>.md` (the Markdown table) and `<date>.svg` (a bar chart of the ratios,
  Cascade time / the time of the faster of NumPy and PyTorch, on a log scale) to the output
  folder, and prints the table with the geometric mean of the ratios per device and type.
  NumPy computes in the case's type where it has it at a usable speed and in f32 on the same
  rounded values otherwise (it has no bf16, and its f16 matrix products are plain loops); the
  table says which.
  """
  use Mix.Task

  alias Cascade.Bench.{Floor, NumPy, Report, Suite, SVG, Timer}
  alias Cascade.Demo.DeviceArg

  @switches [
    devices: :string,
    types: :string,
    seconds: :float,
    out: :string,
    cases: :string,
    rounds: :integer
  ]

  @impl true
  def run(args) do
    {opts, rest, invalid} = OptionParser.parse(args, strict: @switches)

    if invalid != [] or rest != [] do
      Mix.raise(
        "unknown arguments: #{Enum.map_join(invalid, " ", &elem(&1, 0))} #{Enum.join(rest, " ")}\n" <>
          "usage: mix cascade.bench [--devices cpu,opencl] [--types f32,f16,bf16] [--seconds 0.5] [--out DIR] [--cases add,dot] [--rounds 1]"
      )
    end

    Mix.Task.run("app.start")
    devices = devices!(opts[:devices])
    types = list(opts[:types] || "f32,f16,bf16", &ok!(DeviceArg.type(&1)))
    seconds = opts[:seconds] || 0.5
    rounds = opts[:rounds] || 1
    rounds >= 1 || Mix.raise("--rounds must be a positive integer, got: #{rounds}")
    parts = opts[:cases] && list(opts[:cases], & &1)
    keep = &Suite.chosen?(&1, parts)
    out = opts[:out] || Path.join(File.cwd!(), "bench/results")
    python = ok!(NumPy.python())
    script = Path.join(File.cwd!(), "bench/numpy_suite.py")

    File.exists?(script) ||
      Mix.raise("#{script} not found: run mix cascade.bench from Cascade's root")

    mnist = or_nil(Suite.mnist(&Mix.shell().info/1), "no MLP training epoch in this run: ")

    scratch = Path.join(System.tmp_dir!(), "cascade_bench_#{System.unique_integer([:positive])}")

    try do
      inputs = Suite.inputs(scratch, mnist)
      floor_bin = floor_build(scratch)

      # each round, type by type, the two sides take turns on that type's cases (NumPy and
      # PyTorch first in odd rounds, Cascade first in even ones), so that the two timings of a
      # case are one type's turns apart, not a whole suite; each turn's {NumPy and PyTorch's
      # results, Cascade's}, in order
      log =
        for round <- 1..rounds, type <- types do
          if rounds > 1 and type == hd(types),
            do: Mix.shell().info("round #{round} of #{rounds}")

          floor = if type == hd(types), do: floor_turn(floor_bin, seconds)

          theirs_first = rem(round, 2) == 1
          theirs = if theirs_first, do: numpy_turn(python, script, scratch, seconds, type, opts)
          mine = cascade_turn(inputs, devices, type, seconds, keep)
          theirs = theirs || numpy_turn(python, script, scratch, seconds, type, opts)

          if round == 1 and type == hd(types) and theirs.torch == nil,
            do:
              Mix.shell().error(
                "no PyTorch column: #{python} has no torch (apt-get install python3-torch)"
              )

          {theirs, mine, floor}
        end

      # each side's fastest round, case by case
      numpy = Enum.reduce(log, nil, fn {theirs, _, _}, best -> NumPy.best_of(best, theirs) end)
      floors = Enum.reduce(log, nil, fn {_, _, floor}, best -> Floor.best_of(best, floor) end)

      ours =
        Enum.reduce(log, %{}, fn {_, mine, _}, best ->
          Map.merge(best, mine, fn _, a, b -> faster(a, b) end)
        end)

      rows =
        for device <- devices, type <- types do
          ours[{device, type}]
          |> Enum.flat_map(fn ours ->
            case Map.fetch(numpy.results, {type, ours.case}) do
              {:ok, theirs} ->
                rounds = round_times(log, device, type, ours.case)
                floor = Floor.seconds(floors, ours.case, type)
                [Report.row(DeviceArg.name(device), type, ours, theirs, rounds, floor)]

              :error ->
                []
            end
          end)
        end
        |> List.flatten()

      write(rows, out, numpy.version, numpy.torch, floors)
    after
      File.rm_rf(scratch)
    end
  end

  defp numpy_turn(python, script, scratch, seconds, type, opts) do
    Mix.shell().info("NumPy and PyTorch: #{type} (#{python})")
    ok!(NumPy.run(python, script, scratch, seconds, [type], opts[:cases] || ""))
  end

  # bench/floor/floor.c compiled, or nil (the table then has no floors)
  defp floor_build(scratch) do
    Floor.build(Path.join(File.cwd!(), "bench/floor/floor.c"), scratch)
    |> or_nil("no floor column in this run: ")
  end

  defp floor_turn(nil, _seconds), do: nil

  defp floor_turn(bin, seconds) do
    Mix.shell().info("The machine's floor (bench/floor/floor.c)")
    or_nil(Floor.run(bin, seconds), "")
  end

  # what a part of the run that may be missing gave, or nil after saying why it is missing
  defp or_nil({:ok, value}, _why), do: value

  defp or_nil({:error, message}, why) do
    Mix.shell().error("#{why}#{message}")
    nil
  end

  defp cascade_turn(inputs, devices, type, seconds, keep) do
    for device <- devices, into: %{} do
      Mix.shell().info("Cascade: #{DeviceArg.name(device)} #{type}")

      report = fn r ->
        Mix.shell().info("  #{String.pad_trailing(r.case, 28)} #{Timer.format(r.seconds)}")
      end

      {{device, type}, Suite.run(inputs, device, type, seconds, report, keep)}
    end
  end

  # each round's {Cascade's time, the faster anchor's time} for one case, where both ran it
  defp round_times(log, device, type, name) do
    for {theirs, mine, _} <- log,
        ours = mine[{device, type}] && Enum.find(mine[{device, type}], &(&1.case == name)),
        anchors = theirs.results[{type, name}],
        ours && anchors do
      {ours.seconds, anchors |> Map.values() |> Enum.map(& &1.seconds) |> Enum.min()}
    end
  end

  # two rounds' results of one device and type, case by case: the faster of each
  defp faster(a, b) do
    Enum.zip_with(a, b, fn x, y -> if y.seconds < x.seconds, do: y, else: x end)
  end

  defp write(rows, out, numpy_version, torch_version, floors) do
    date = Date.utc_today() |> Date.to_iso8601()
    machine = machine()
    table = Report.markdown(rows) <> "\n" <> Report.geomeans(rows)

    anchors =
      "NumPy #{numpy_version}" <> if(torch_version, do: ", PyTorch #{torch_version}", else: "")

    title = "Cascade / the faster of #{anchors}, time ratio per case (below 1: Cascade faster)"
    File.mkdir_p!(out)
    base = Path.join(out, date)

    File.write!(
      base <> ".json",
      Report.json(%{
        date: date,
        machine: machine,
        numpy: numpy_version,
        torch: torch_version,
        floor: floors,
        rows: rows
      }) <> "\n"
    )

    heading = "Cascade vs #{anchors} — #{date}, #{machine}\n\n"

    File.write!(
      base <> ".md",
      heading <>
        "Median time per call; ratio = Cascade / the faster of the two (below 1: Cascade faster).\n" <>
        floor_note(floors) <> "\n" <> table
    )

    File.write!(base <> ".svg", SVG.chart(rows, title, "#{date}, #{machine}"))
    Mix.shell().info("\n" <> heading <> table)

    Mix.shell().info(
      "Saved #{Enum.map_join([".json", ".md", ".svg"], ", ", &Path.relative_to_cwd(base <> &1))}"
    )
  end

  defp floor_note(nil), do: ""

  defp floor_note(floors) do
    "Floor: the case's memory traffic without its arithmetic on #{round(floors["threads"] || 1)} " <>
      "cores, or its multiply-adds at the peak rate of the vector units " <>
      "(#{round((floors["fma_flops"] || 0) / 1.0e9)} GFLOP/s), measured in the same " <>
      "run by bench/floor/floor.c; in brackets Cascade's time as a multiple of it.\n"
  end

  defp devices!(nil), do: DeviceArg.available()
  defp devices!(text), do: list(text, &ok!(DeviceArg.device(&1)))

  defp list(text, fun),
    do: text |> String.split(",", trim: true) |> Enum.map(&fun.(String.trim(&1)))

  defp ok!({:ok, value}), do: value
  defp ok!({:error, message}), do: Mix.raise(message)

  defp machine do
    {os, 0} = System.cmd("uname", ["-srm"])

    cpu =
      case File.read("/proc/cpuinfo") do
        {:ok, info} -> Regex.run(~r/model name\s*:\s*(.*)/, info, capture: :all_but_first)
        _ -> nil
      end

    "#{(cpu && hd(cpu)) || "unknown cpu"}, #{System.schedulers_online()} cores, #{String.trim(os)}"
  end
end
