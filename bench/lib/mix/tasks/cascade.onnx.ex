defmodule Mix.Tasks.Cascade.Onnx do
  @shortdoc "Runs ONNX's backend node tests through Cascade.ONNX and prints pass/fail per operator"

  @moduledoc """
  Runs every case of ONNX's backend node tests (Debian `libonnx-testdata`,
  `#{Cascade.ONNX.Conformance.default_dir()}`) through `Cascade.ONNX` and prints, per operator,
  how many cases pass, fail and are unsupported, then the totals.

      mix cascade.onnx [--dir DIR] [--device host|cpu|opencl] [--only SUBSTRING] [--verbose]
                       [--write-passing FILE]

    * `--dir` — the folder of cases (default: Debian's)
    * `--device` — where the models run (default: the default device)
    * `--only` — the cases whose name contains this
    * `--verbose` — one line per case that does not pass, with why
    * `--write-passing` — writes the names of the cases that pass to FILE (the list
      `test/onnx_test.exs` keeps passing: `test/support/onnx_passing.txt`)
  """
  use Mix.Task

  alias Cascade.ONNX.Conformance

  @switches [
    dir: :string,
    device: :string,
    only: :string,
    verbose: :boolean,
    write_passing: :string
  ]

  @impl true
  def run(args) do
    {opts, _, invalid} = OptionParser.parse(args, strict: @switches)
    if invalid != [], do: Mix.raise("unknown options: #{inspect(invalid)}")
    Mix.Task.run("app.start")
    dir = opts[:dir] || Conformance.default_dir()
    cases = Conformance.cases(dir)

    if cases == [],
      do: Mix.raise("no ONNX node tests in #{dir} (Debian: apt-get install libonnx-testdata)")

    cases =
      if opts[:only], do: Enum.filter(cases, &String.contains?(&1, opts[:only])), else: cases

    run_opts =
      case opts[:device] && Cascade.Demo.DeviceArg.device(opts[:device]) do
        nil -> []
        {:ok, device} -> [device: device]
        {:error, message} -> Mix.raise(message)
      end

    results =
      for name <- cases do
        {kind, op, detail} = Conformance.run_case(dir, name, run_opts)
        if opts[:verbose] && kind != :pass, do: Mix.shell().info("#{kind}\t#{name}\t#{detail}")
        {name, kind, op}
      end

    Mix.shell().info("\n| operator | pass | fail | unsupported |\n|---|---:|---:|---:|")

    results
    |> Enum.group_by(&elem(&1, 2))
    |> Enum.sort_by(&elem(&1, 0))
    |> Enum.each(fn {op, rs} ->
      f = Enum.frequencies_by(rs, &elem(&1, 1))

      Mix.shell().info(
        "| #{op} | #{f[:pass] || 0} | #{f[:fail] || 0} | #{f[:unsupported] || 0} |"
      )
    end)

    f = Enum.frequencies_by(results, &elem(&1, 1))
    total = length(results)

    if file = opts[:write_passing] do
      passing = for {name, :pass, _} <- results, do: name

      File.write!(
        file,
        "# The ONNX backend node tests (Debian libonnx-testdata) that Cascade.ONNX passes, one " <>
          "per line:\n# test/onnx_test.exs runs each of them. Regenerate with mix cascade.onnx " <>
          "--write-passing FILE.\n" <> Enum.join(passing, "\n") <> "\n"
      )
    end

    Mix.shell().info(
      "\n#{total} cases: #{f[:pass] || 0} pass (#{Float.round(100 * (f[:pass] || 0) / max(total, 1), 1)} %), " <>
        "#{f[:fail] || 0} fail, #{f[:unsupported] || 0} unsupported"
    )
  end
end
