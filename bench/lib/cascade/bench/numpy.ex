defmodule Cascade.Bench.NumPy do
  @moduledoc """
  Runs `bench/numpy_suite.py` on the data `Cascade.Bench.Suite.inputs/2` wrote and reads its
  lines back: `%{{type, case} => %{numpy: result, torch: result}}` (a library that did not run
  the case is absent), each result `%{seconds, check, numpy_type}` (the type it computed in), and
  the versions of NumPy and of PyTorch (nil without it).
  """

  @doc "A python3 that has NumPy, or `{:error, message}`."
  def python do
    candidates = ["/usr/bin/python3", System.find_executable("python3")] |> Enum.reject(&is_nil/1)

    Enum.find_value(
      candidates,
      {:error, "no python3 with NumPy found: apt-get install python3-numpy"},
      fn py ->
        if File.exists?(py) and
             match?({_, 0}, System.cmd(py, ["-c", "import numpy"], stderr_to_stdout: true)),
           do: {:ok, py}
      end
    )
  end

  @doc "NumPy's results for `types` (atoms) on the data in `dir`."
  def run(python, script, dir, min_seconds, types, cases \\ "") do
    args = [script, dir, "#{min_seconds}", Enum.join(types, ","), cases]

    case System.cmd(python, args, stderr_to_stdout: true) do
      {out, 0} ->
        {:ok, parse(out)}

      {out, status} ->
        {:error, "#{Path.basename(script)} failed (exit status #{status}):\n#{out}"}
    end
  end

  @doc """
  Two runs' results as one: for each case and library, the faster of its two timings (nil for
  no run yet).

      iex> a = %{version: "1.24.2", torch: nil, results: %{{:f32, "add 1M"} => %{numpy: %{seconds: 0.5, check: nil, numpy_type: "f32"}}}}
      iex> b = put_in(a.results[{:f32, "add 1M"}].numpy.seconds, 0.4)
      iex> Cascade.Bench.NumPy.best_of(a, b).results[{:f32, "add 1M"}].numpy.seconds
      0.4
      iex> Cascade.Bench.NumPy.best_of(nil, a) == a
      true
  """
  def best_of(nil, run), do: run

  def best_of(a, b) do
    results =
      Map.merge(a.results, b.results, fn _key, x, y ->
        Map.merge(x, y, fn _lib, r, s -> if s.seconds < r.seconds, do: s, else: r end)
      end)

    %{b | results: results}
  end

  @doc """
  The script's output, parsed.

      iex> Cascade.Bench.NumPy.parse("f32\\tadd 1M\\t0.5\\t-3.0,5.0\\tf32\\tnumpy\\nnumpy\\t1.24.2\\n")
      %{version: "1.24.2", torch: nil, results: %{{:f32, "add 1M"} => %{numpy: %{seconds: 0.5, check: {-3.0, 5.0}, numpy_type: "f32"}}}}
  """
  def parse(out) do
    out
    |> String.split("\n", trim: true)
    |> Enum.reduce(%{version: nil, torch: nil, results: %{}}, fn line, acc ->
      case String.split(line, "\t") do
        ["numpy", version] ->
          %{acc | version: version}

        ["torch", version] ->
          %{acc | torch: version}

        [type, name, seconds, check, computes_in, library] when library in ["numpy", "torch"] ->
          result = %{seconds: to_float(seconds), check: check(check), numpy_type: computes_in}
          key = {String.to_atom(type), name}
          lib = String.to_atom(library)

          %{
            acc
            | results: Map.update(acc.results, key, %{lib => result}, &Map.put(&1, lib, result))
          }

        _ ->
          acc
      end
    end)
  end

  defp check(""), do: nil

  defp check(text) do
    [sum, abs] = String.split(text, ",")
    {to_float(sum), to_float(abs)}
  end

  defp to_float(text) do
    {value, _} = Float.parse(text)
    value
  end
end
