# Times Cascade on the cpu device against NumPy on the same data, in the same run.
#
#     mix run bench/bench.exs [--seconds 1.0]
#
# Writes the inputs once to a scratch folder, runs bench/numpy_bench.py on them, times the
# same ops here, and prints a Markdown table of medians and ratios (Cascade time / NumPy
# time: below 1 means Cascade is faster). Results are also saved to bench/results/<date>.json.

{opts, _, _} = OptionParser.parse(System.argv(), strict: [seconds: :float])
min_seconds = opts[:seconds] || 1.0

defmodule Bench do
  # Median seconds per call over batches, growing the batch until a batch takes ~50 ms:
  # the same procedure as numpy_bench.py.
  def timed(fun, min_seconds) do
    fun.()
    start = System.monotonic_time()
    loop(fun, 1, [], start, min_seconds)
  end

  defp loop(fun, n, samples, start, min_seconds) do
    t0 = System.monotonic_time()
    # results are dropped as they come, as in a Python loop (`for` would keep them all)
    repeat(fun, n)
    dt = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond) / 1.0e9 / n
    samples = [dt | samples]
    n = if dt * n < 0.05, do: n * 4, else: n

    elapsed =
      System.convert_time_unit(System.monotonic_time() - start, :native, :nanosecond) / 1.0e9

    if elapsed > min_seconds and length(samples) >= 5 do
      sorted = Enum.sort(samples)
      Enum.at(sorted, div(length(sorted), 2))
    else
      loop(fun, n, samples, start, min_seconds)
    end
  end

  defp repeat(_fun, 0), do: :ok

  defp repeat(fun, n) do
    fun.()
    repeat(fun, n - 1)
  end

  def fmt(s) when s < 1.0e-6, do: "#{Float.round(s * 1.0e9, 1)} ns"
  def fmt(s) when s < 1.0e-3, do: "#{Float.round(s * 1.0e6, 2)} µs"
  def fmt(s), do: "#{Float.round(s * 1.0e3, 2)} ms"

  def python do
    Enum.find(["/usr/bin/python3", "python3"], fn py ->
      match?({_, 0}, System.cmd(py, ["-c", "import numpy"], stderr_to_stdout: true))
    end) || raise "no python3 with numpy found: apt-get install python3-numpy"
  end
end

data = Path.join(System.tmp_dir!(), "cascade_bench_#{System.os_time()}")
File.mkdir_p!(data)

write = fn name, tensor ->
  File.write!(Path.join(data, name <> ".bin"), Cascade.to_binary(tensor))
  tensor
end

inputs =
  for n <- [256, 512, 1024], into: %{} do
    a = write.("dot#{n}_a", Cascade.random_uniform({n, n}, key: n, min: -1.0, max: 1.0))
    b = write.("dot#{n}_b", Cascade.random_uniform({n, n}, key: n + 1, min: -1.0, max: 1.0))
    {n, {a, b}}
  end

x = write.("vec_x", Cascade.random_uniform({1_048_576}, key: 1, min: -1.0, max: 1.0))
y = write.("vec_y", Cascade.random_uniform({1_048_576}, key: 2, min: -1.0, max: 1.0))
hx = write.("vec_hx", Cascade.random_uniform({1_048_576}, key: 3, type: :f16))
hy = write.("vec_hy", Cascade.random_uniform({1_048_576}, key: 4, type: :f16))
s1 = write.("one_a", Cascade.tensor([1.5]))
s2 = write.("one_b", Cascade.tensor([2.5]))

{out, 0} =
  System.cmd(Bench.python(), [Path.join(__DIR__, "numpy_bench.py"), data, "#{min_seconds}"])

numpy =
  for line <- String.split(out, "\n", trim: true), into: %{} do
    [name, value] = String.split(line, "\t")
    {name, value}
  end

File.rm_rf!(data)

cases = [
  {"dot 256x256 f32", fn -> Cascade.dot(elem(inputs[256], 0), elem(inputs[256], 1)) end},
  {"dot 512x512 f32", fn -> Cascade.dot(elem(inputs[512], 0), elem(inputs[512], 1)) end},
  {"dot 1024x1024 f32", fn -> Cascade.dot(elem(inputs[1024], 0), elem(inputs[1024], 1)) end},
  {"add 1M f32", fn -> Cascade.add(x, y) end},
  {"exp 1M f32", fn -> Cascade.exp(x) end},
  {"sum 1M f32", fn -> Cascade.sum(x) end},
  {"add 1M f16", fn -> Cascade.add(hx, hy) end},
  {"add 1 element f32", fn -> Cascade.add(s1, s2) end}
]

check = x |> Cascade.as_type(:f64) |> Cascade.sum() |> Cascade.to_list()
{numpy_check, _} = Float.parse(numpy["check: sum of x in f64"])

if abs(check - numpy_check) > 1.0e-6 * max(1.0, abs(check)) do
  raise "NumPy read different data: sum #{numpy_check} vs #{check}"
end

rows =
  for {name, fun} <- cases do
    ours = Bench.timed(fun, min_seconds)
    {theirs, _} = Float.parse(numpy[name])
    %{name: name, cascade: ours, numpy: theirs, ratio: ours / theirs}
  end

{os, 0} = System.cmd("uname", ["-srm"])

cpu =
  File.read!("/proc/cpuinfo")
  |> then(&(Regex.run(~r/model name\s*:\s*(.*)/, &1) || [nil, "unknown cpu"]))
  |> Enum.at(1)

date = Date.utc_today() |> Date.to_iso8601()
machine = "#{cpu}, #{System.schedulers_online()} cores, #{String.trim(os)}"

IO.puts(
  """

  Cascade cpu driver vs NumPy #{numpy["numpy version"]} — #{date}, #{machine}
  Median time per call; ratio = Cascade / NumPy (below 1: Cascade faster).

  | case | Cascade | NumPy | ratio |
  |---|---:|---:|---:|
  """ <>
    Enum.map_join(rows, "\n", fn r ->
      "| #{r.name} | #{Bench.fmt(r.cascade)} | #{Bench.fmt(r.numpy)} | #{:erlang.float_to_binary(r.ratio, decimals: 2)} |"
    end)
)

json_rows =
  Enum.map_join(rows, ",\n", fn r ->
    ~s(    {"case": "#{r.name}", "cascade_s": #{r.cascade}, "numpy_s": #{r.numpy}, "ratio": #{r.ratio}})
  end)

File.mkdir_p!(Path.join(__DIR__, "results"))
path = Path.join([__DIR__, "results", "#{date}.json"])

File.write!(path, """
{
  "date": "#{date}",
  "machine": "#{machine}",
  "numpy": "#{numpy["numpy version"]}",
  "rows": [
#{json_rows}
  ]
}
""")

IO.puts("\nSaved #{Path.relative_to_cwd(path)}")
