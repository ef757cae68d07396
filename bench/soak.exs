# Soak: mixed work on every available device at once for a fixed time, bounded in count and
# time. Per device, `workers` processes loop over a fixed list of ops on tensors of varied sizes
# (results dropped, every 16th read back and checked against the cpu's answer), and one process
# runs compiled programs (Cascade.Native.program_run/2 and program_loop/5, what Cascade.Compiler
# runs) on the device. Every second the BEAM's RSS and Cascade.memory/0 are sampled.
#
#   MIX_ENV=test mix run bench/soak.exs [seconds] [workers]        (600 s, 2 workers a device)
#
# Prints, per device, the calls made and the wrong answers (any is a failure: exit 1), and the
# RSS and live Cascade bytes: at the start, the most, and at the end after a collection.
{seconds, workers} =
  case System.argv() do
    [] -> {600, 2}
    [s] -> {String.to_integer(s), 2}
    [s, w | _] -> {String.to_integer(s), String.to_integer(w)}
  end

rss_mb = fn ->
  "/proc/self/status"
  |> File.read!()
  |> String.split("\n")
  |> Enum.find_value(fn line ->
    case String.split(line) do
      ["VmRSS:", kb, "kB"] -> div(String.to_integer(kb), 1024)
      _ -> nil
    end
  end)
end

beam_mb = fn -> div(:erlang.memory(:total), 1_048_576) end

live_mb = fn ->
  div(Cascade.memory() |> Map.values() |> Enum.map(& &1.bytes) |> Enum.sum(), 1_048_576)
end

devices =
  for %{device: d, available: true, driver: driver} <- Cascade.devices(),
      driver != :test,
      not match?({_, _}, d),
      do: d

deadline = System.monotonic_time(:millisecond) + seconds * 1000
op_id = fn name -> Enum.find_value(Cascade.__ops__(), &(&1.name == name && &1.id)) end

# The ops a worker cycles through: {name, fun of x (a vector) and m (a matrix)}
ops = [
  {:add, fn x, _m -> Cascade.add(x, x) end},
  {:exp, fn x, _m -> Cascade.exp(Cascade.multiply(x, 0.001)) end},
  {:sum, fn x, _m -> Cascade.sum(x) end},
  {:softmax, fn _x, m -> Cascade.softmax(m, axis: 1) end},
  {:dot, fn _x, m -> Cascade.dot(m, Cascade.transpose(m)) end},
  {:reduce_max, fn _x, m -> Cascade.reduce_max(m, axes: [0]) end},
  {:slice, fn x, _m -> Cascade.slice(x, [1], [Cascade.size(x) - 2]) end},
  {:concatenate, fn x, _m -> Cascade.concatenate([x, x]) end},
  {:as_type, fn x, _m -> Cascade.as_type(x, :f16) end},
  {:select, fn x, _m -> Cascade.select(Cascade.greater(x, 0.5), x, 0.0) end}
]

sizes = [{1024, {32, 32}}, {16_384, {128, 128}}, {262_144, {256, 256}}]

# a tensor's first 256 values, as a list
head = fn t ->
  n = Cascade.size(t)
  t |> Cascade.reshape({n}) |> Cascade.slice([0], [min(n, 256)]) |> Cascade.to_list()
end

worker = fn device, seed ->
  host =
    Enum.map(sizes, fn {n, {r, c}} ->
      {Cascade.random_uniform({n}, key: seed, device: :cpu),
       Cascade.random_uniform({r, c}, key: seed + 1, device: :cpu)}
    end)

  on_device =
    Enum.map(host, fn {x, m} -> {Cascade.transfer(x, device), Cascade.transfer(m, device)} end)

  Stream.iterate(0, &(&1 + 1))
  |> Enum.reduce_while({0, 0}, fn i, {calls, wrong} ->
    if System.monotonic_time(:millisecond) > deadline do
      {:halt, {calls, wrong}}
    else
      {name, fun} = Enum.at(ops, rem(i + seed, length(ops)))
      k = rem(div(i, length(ops)) + seed, length(sizes))
      {x, m} = Enum.at(on_device, k)
      result = fun.(x, m)

      wrong =
        if rem(i, 16) == 0 do
          {hx, hm} = Enum.at(host, k)
          # the first 256 values of each (as the cpu computes them)
          want = fun.(hx, hm) |> head.()
          got = head.(result)

          close? =
            Enum.zip(want, got)
            |> Enum.all?(fn {a, b} -> abs(a - b) <= 1.0e-2 * max(1.0, abs(a)) end)

          if close? and length(want) == length(got), do: wrong, else: wrong + 1
        else
          wrong
        end

      _ = name
      {:cont, {calls + 1, wrong}}
    end
  end)
end

# A compiled loop on the device: state {x f32[1024], i s32}; while i < 200: x * 0.5 + 1, i + 1
programs = fn device ->
  dev = Cascade.Device.id!(device)
  state = [{:f32, {1024}}, {:s32, {}}]
  on = &Cascade.transfer(&1, device)
  limit = on.(Cascade.tensor(200, type: :s32))
  one = on.(Cascade.tensor(1, type: :s32))
  half = on.(Cascade.tensor(0.5, type: :f32))
  onef = on.(Cascade.tensor(1.0, type: :f32))
  native = Cascade.Native
  cond = native.program_new(dev, state, [limit.ref], [{op_id.(:less), [1, 2], %{}}], [3], [])

  body =
    native.program_new(
      dev,
      state,
      [one.ref, half.ref, onef.ref],
      [
        {op_id.(:multiply), [0, 3], %{}},
        {op_id.(:add), [5, 4], %{}},
        {op_id.(:add), [1, 2], %{}}
      ],
      [6, 7],
      []
    )

  x0 = on.(Cascade.zeros({1024}))
  i0 = on.(Cascade.tensor(0, type: :s32))

  Stream.iterate(0, &(&1 + 1))
  |> Enum.reduce_while({0, 0}, fn _, {calls, wrong} ->
    if System.monotonic_time(:millisecond) > deadline do
      {:halt, {calls, wrong}}
    else
      [x, _i] = Cascade.Program.loop(cond, 0, body, [0, 1], [x0.ref, i0.ref])
      # x converges to 2 (x -> x / 2 + 1)
      [v | _] = Cascade.to_list(%{x0 | ref: x})
      {:cont, {calls + 1, if(abs(v - 2.0) < 1.0e-5, do: wrong, else: wrong + 1)}}
    end
  end)
end

IO.puts("soak: #{seconds} s on #{inspect(devices)}, #{workers} workers a device and a loop each")

# every device started and every op's kernels built (PoCL's LLVM, oneDNN's code) before the
# start figures
for device <- devices,
    {x, m} <- [{Cascade.iota({1024}, device: device), Cascade.iota({32, 32}, device: device)}],
    {_, fun} <- ops,
    do: fun.(x, m) |> head.()

for pid <- Process.list(), do: :erlang.garbage_collect(pid)
rss0 = rss_mb.()
live0 = live_mb.()
parent = self()

tasks =
  for device <- devices,
      job <- Enum.map(1..workers, &{:ops, &1}) ++ [{:loop, 0}] do
    Task.async(fn ->
      case job do
        {:ops, w} -> {device, :ops, worker.(device, 10 * w)}
        {:loop, _} -> {device, :loop, programs.(device)}
      end
    end)
  end

sampler =
  spawn(fn ->
    sample = fn sample, acc ->
      receive do
        :stop -> send(parent, {:samples, acc})
      after
        1000 -> sample.(sample, [{rss_mb.(), live_mb.(), beam_mb.()} | acc])
      end
    end

    sample.(sample, [])
  end)

results = Task.await_many(tasks, (seconds + 300) * 1000)
send(sampler, :stop)
samples = receive do: ({:samples, s} -> s)
for pid <- Process.list(), do: :erlang.garbage_collect(pid)
Process.sleep(500)

wrong =
  for {device, kind, {calls, wrong}} <- results, reduce: 0 do
    acc ->
      IO.puts("  #{inspect(device)} #{kind}: #{calls} calls, #{wrong} wrong")
      acc + wrong
  end

{rss_max, live_max, beam_max} =
  Enum.reduce(samples, {rss0, live0, beam_mb.()}, fn {r, l, b}, {mr, ml, mb} ->
    {max(mr, r), max(ml, l), max(mb, b)}
  end)

IO.puts(
  "RSS #{rss0} MB at the start, #{rss_max} MB at most, #{rss_mb.()} MB at the end; live Cascade " <>
    "bytes #{live0} MB, #{live_max} MB at most, #{live_mb.()} MB at the end; the BEAM's own " <>
    "memory (:erlang.memory) #{beam_max} MB at most, #{beam_mb.()} MB at the end " <>
    "(#{length(samples)} samples)"
)

# RSS over the run: a leak climbs, the allocators' caches level off
timeline = samples |> Enum.reverse() |> Enum.map(&elem(&1, 0))

marks =
  for q <- [0.1, 0.25, 0.5, 0.75, 1.0],
      timeline != [],
      do: "#{round(q * 100)} %: #{Enum.at(timeline, max(0, round(q * length(timeline)) - 1))} MB"

IO.puts("RSS over the run: " <> Enum.join(marks, ", "))
if wrong > 0, do: System.halt(1)
