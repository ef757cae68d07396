# The same ops on :opencl and on :cpu, and the cost of one kernel launch.
#
#     MIX_ENV=test mix run bench/opencl/opencl_bench.exs [--seconds 1.0]
#
# (MIX_ENV=test only because config/config.exs then points POCL_CACHE_DIR into _build; any
# environment whose `drivers:` include :opencl works.) The opencl driver only enqueues kernels,
# so every timed call ends by reading one element of its result back (`to_binary(limit: 1)`),
# which waits for the queue: the figures are complete ops, not enqueue times. Inputs are made
# on each device beforehand; nothing is copied between devices inside the timed calls. Prints a
# Markdown table of medians (seconds per call, same procedure as bench/bench.exs).

{opts, _, _} = OptionParser.parse(System.argv(), strict: [seconds: :float])
min_seconds = opts[:seconds] || 1.0

defmodule OpenCLBench do
  def timed(fun, min_seconds) do
    fun.()
    start = System.monotonic_time()
    loop(fun, 1, [], start, min_seconds)
  end

  defp loop(fun, n, samples, start, min_seconds) do
    t0 = System.monotonic_time()
    for _ <- 1..n, do: fun.()
    dt = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond) / 1.0e9 / n
    samples = [dt | samples]
    n = if dt * n < 0.05, do: n * 4, else: n

    elapsed =
      System.convert_time_unit(System.monotonic_time() - start, :native, :nanosecond) / 1.0e9

    if elapsed > min_seconds and length(samples) >= 5,
      do: Enum.at(Enum.sort(samples), div(length(samples), 2)),
      else: loop(fun, n, samples, start, min_seconds)
  end

  def fmt(s) when s < 1.0e-3, do: "#{Float.round(s * 1.0e6, 2)} µs"
  def fmt(s), do: "#{Float.round(s * 1.0e3, 2)} ms"

  # waits for the result: one element read back
  def sync(t), do: Cascade.to_binary(t, limit: 1)

  def random(shape, device) do
    n = shape |> Tuple.to_list() |> Enum.product()
    :rand.seed(:exsss, {1, 2, 3})
    bin = for _ <- 1..n, into: <<>>, do: <<:rand.uniform() - 0.5::float-32-native>>
    Cascade.from_binary(bin, :f32, shape) |> Cascade.transfer(device)
  end
end

opencl = Enum.find(Cascade.devices(), &(&1.device == :opencl))
unless opencl && opencl.available, do: raise("no opencl device: #{inspect(opencl)}")

cases = [
  {"dot 256x256 f32",
   fn d -> {OpenCLBench.random({256, 256}, d), OpenCLBench.random({256, 256}, d)} end,
   fn {a, b} -> Cascade.dot(a, b) end},
  {"dot 512x512 f32",
   fn d -> {OpenCLBench.random({512, 512}, d), OpenCLBench.random({512, 512}, d)} end,
   fn {a, b} -> Cascade.dot(a, b) end},
  {"dot 1024x1024 f32",
   fn d -> {OpenCLBench.random({1024, 1024}, d), OpenCLBench.random({1024, 1024}, d)} end,
   fn {a, b} -> Cascade.dot(a, b) end},
  {"softmax 1000x1000 f32 (axis 1)", fn d -> OpenCLBench.random({1000, 1000}, d) end,
   fn x -> Cascade.softmax(x, axis: 1) end},
  {"add 1M f32",
   fn d -> {OpenCLBench.random({1_000_000}, d), OpenCLBench.random({1_000_000}, d)} end,
   fn {a, b} -> Cascade.add(a, b) end},
  {"exp 1M f32", fn d -> OpenCLBench.random({1_000_000}, d) end, fn x -> Cascade.exp(x) end},
  {"sum 1M f32", fn d -> OpenCLBench.random({1_000_000}, d) end, fn x -> Cascade.sum(x) end},
  {"add 1 element f32 (launch + read back)", fn d -> OpenCLBench.random({1}, d) end,
   fn x -> Cascade.add(x, x) end}
]

IO.puts("""
OpenCL device: #{opencl.name} (#{opencl.detail})
date: #{Date.utc_today()}, #{:erlang.system_info(:schedulers_online)} schedulers

| op | cpu | opencl | opencl / cpu |
|----|-----|--------|--------------|\
""")

for {name, make, run} <- cases do
  [cpu, ocl] =
    for device <- [:cpu, :opencl] do
      input = make.(device)
      # a figure for :opencl must not hide a fallback to the cpu
      Cascade.reset_stats()
      OpenCLBench.sync(run.(input))

      for {{dev, op, route}, _} <- Cascade.stats(),
          route == :cpu_fallback,
          do: raise("#{name} on #{inspect(device)}: #{op} ran #{route} on #{inspect(dev)}")

      OpenCLBench.timed(fn -> OpenCLBench.sync(run.(input)) end, min_seconds)
    end

  IO.puts(
    "| #{name} | #{OpenCLBench.fmt(cpu)} | #{OpenCLBench.fmt(ocl)} | #{Float.round(ocl / cpu, 2)} |"
  )
end

# Per-launch overhead: 1000 one-element adds enqueued back to back and read once (queued), and
# each followed by a read (a finish after each).
x = OpenCLBench.random({1}, :opencl)

queued =
  OpenCLBench.timed(
    fn ->
      Enum.reduce(1..1000, x, fn _, acc -> Cascade.add(acc, x) end) |> OpenCLBench.sync()
    end,
    min_seconds
  ) / 1000

finished = OpenCLBench.timed(fn -> Cascade.add(x, x) |> OpenCLBench.sync() end, min_seconds)

IO.puts("""

per-launch overhead (one-element add on :opencl, NIF call included):
  queued (1000 launches, one read): #{OpenCLBench.fmt(queued)} per launch
  with a read after each:           #{OpenCLBench.fmt(finished)} per launch
""")
