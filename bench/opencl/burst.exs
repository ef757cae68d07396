# A burst on the opencl device: `count` products of two 1000 x 1000 f32 matrices (4 MB each),
# dropped as soon as they are made, then the queue drained. Prints the BEAM's RSS before, its
# peak (VmHWM, reset before the burst), after the drain and after a collection, with Cascade's
# own count of live opencl bytes, and how long a process sleeping 1 ms was late at worst while
# the burst ran (a scheduler held by a device shows there).
#
#   MIX_ENV=test mix run bench/opencl/burst.exs [count] [op]     (count 200; op dot or add)
#
# add: 1M-element f32 sums (4 MB each) instead of products, a burst the device drains ~50x faster.
{count, op} =
  case System.argv() do
    [] -> {200, "dot"}
    [n] -> {String.to_integer(n), "dot"}
    [n, op | _] -> {String.to_integer(n), op}
  end

opencl = Enum.find(Cascade.devices(), &(&1.device == :opencl))

unless opencl && opencl.available do
  IO.puts("opencl unavailable: #{inspect(opencl && opencl.reason)}")
  System.halt(0)
end

rss_mb = fn field ->
  "/proc/self/status"
  |> File.read!()
  |> String.split("\n")
  |> Enum.find_value(fn line ->
    case String.split(line) do
      [^field, kb, "kB"] -> div(String.to_integer(kb), 1024)
      _ -> nil
    end
  end)
end

{a, run} =
  case op do
    "dot" ->
      a = Cascade.transfer(Cascade.random_uniform({1000, 1000}, key: 1), :opencl)
      {a, fn -> Cascade.dot(a, a) end}

    "add" ->
      a = Cascade.transfer(Cascade.random_uniform({1_048_576}, key: 1), :opencl)
      {a, fn -> Cascade.add(a, a) end}
  end

# the device started, its kernels built
Cascade.to_binary(run.(), limit: 4)
for pid <- Process.list(), do: :erlang.garbage_collect(pid)
before = rss_mb.("VmRSS:")
File.write("/proc/self/clear_refs", "5")

# a process that sleeps 1 ms at a time, and records how late it woke
parent = self()

sleeper =
  spawn(fn ->
    loop = fn loop, worst ->
      t0 = System.monotonic_time(:microsecond)
      Process.sleep(1)
      late = System.monotonic_time(:microsecond) - t0 - 1000
      worst = max(worst, late)

      receive do
        :stop -> send(parent, {:worst, worst})
      after
        0 -> loop.(loop, worst)
      end
    end

    loop.(loop, 0)
  end)

:ok = Cascade.Native.watch_normal(2000)

{enqueue_us, max_live} =
  :timer.tc(fn ->
    Enum.reduce(1..count, 0, fn _, most ->
      run.()
      max(most, Cascade.memory().opencl.bytes)
    end)
  end)

{drain_us, _} = :timer.tc(fn -> Cascade.to_binary(run.(), limit: 4) end)
send(sleeper, :stop)
{held, _dropped} = Cascade.Native.normal_records()
Cascade.Native.watch_normal(false)

held =
  Enum.filter(held, &(&1.cpu_us >= 2000 or (&1.voluntary > 0 and &1.wall_us - &1.cpu_us >= 2000)))

worst = receive do: ({:worst, w} -> w)
peak = rss_mb.("VmHWM:")
drained = rss_mb.("VmRSS:")
for pid <- Process.list(), do: :erlang.garbage_collect(pid)
Process.sleep(200)
collected = rss_mb.("VmRSS:")
live = div(Cascade.memory().opencl.bytes, 1_048_576)

IO.puts(
  "opencl #{op} x #{count} (4 MB results, dropped): enqueued in #{div(enqueue_us, 1000)} ms, " <>
    "drained #{div(drain_us, 1000)} ms later; RSS #{before} MB before, peak #{peak} MB " <>
    "(+#{peak - before}), #{drained} MB drained, #{collected} MB collected " <>
    "(+#{collected - before}); live opencl bytes at most #{div(max_live, 1_048_576)} MB, #{live} MB after; a 1 ms sleeper woke " <>
    "#{Float.round(worst / 1000, 2)} ms late at worst; #{length(held)} NIF calls held a normal " <>
    "scheduler for 2 ms or more #{inspect(Enum.take(held, 3))}"
)

_ = a
