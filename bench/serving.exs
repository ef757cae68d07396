# Nx.Serving on Cascade under load, on the loopback address only, with a model of
# Cascade.ServingFixtures (test/support): `dense` (784-256-10 through Cascade.Compiler, the
# default) or `cnn` (the main job's network, Cascade.Demo.CNN, on Cascade ops, each batch padded
# to a power of two). batch_size 64, batch_timeout 2 ms, one row per request. Every loop is
# bounded in time.
#
#   CASCADE_NX_PATH=/path/to/nx MIX_ENV=test mix run bench/serving.exs [seconds] [modes] [model]
#   CASCADE_NX_PATH=/path/to/nx MIX_ENV=test mix run bench/serving.exs 600 soak
#
# seconds: per concurrency level (default 5). modes (default "local,one,two"):
#   local  the serving in this node, clients in this node (Nx.Serving.batched_run/2)
#   one    one serving node limited to one core (+S 1, CASCADE_BLAS_THREADS=1), clients here
#          through {:distributed, name}
#   two    two such nodes
#   soak   the local serving at half of the local peak for `seconds`: RSS and Cascade.memory/0
#          every 10 s
#
# SERVING_PARTITIONS=n starts the local serving with n partitions on the host device.
#
# Closed-loop clients (each sends its next request when the last is answered) at 1, 16, 64 and
# 256 for `seconds` each: requests/s, p50/p99/p99.9 latency, mean rows per batch. Beside them,
# the plain loop: the model on a batch of 64 one-row requests, again and again in one process
# (for the serving nodes: in such a node; for two, twice that), the serving's own cost is the
# gap. Then, for the local serving, paced clients at half the peak: p50 and p99.
alias Cascade.ServingFixtures, as: F

{seconds, modes, model} =
  case System.argv() do
    [] -> {5, ~w(local one two), :dense}
    [s] -> {String.to_integer(s), ~w(local one two), :dense}
    [s, m] -> {String.to_integer(s), String.split(m, ","), :dense}
    [s, m, model | _] -> {String.to_integer(s), String.split(m, ","), String.to_atom(model)}
  end

model in [:dense, :cnn] or raise "model: dense or cnn, got: #{model}"

levels = [1, 16, 64, 256]
# SERVING_PARTITIONS=n: the local serving with partitions: true and n partitions on the host
# device (Cascade.Compiler's max_concurrency)
partitions = String.to_integer(System.get_env("SERVING_PARTITIONS", "1"))
# MIX_ENV=test makes :cpu the default device; the peers start with the host device (:blas)
Cascade.put_default_device(:host)
F.distribute(:"bench_#{System.unique_integer([:positive])}")
F.params()

requests = for i <- 0..1023, do: Nx.Batch.concatenate([F.request(i)])
requests = List.to_tuple(requests)

percentile = fn sorted, n, p -> elem(sorted, min(n - 1, trunc(p * n))) end

# this VM's CPU seconds so far (user + system, all threads: schedulers, dirty schedulers, the
# blas driver's threads)
cpu_seconds = fn ->
  # the fields after the command's closing parenthesis, from the state (field 3): utime and
  # stime are fields 14 and 15, in clock ticks of 1/100 s
  [_, fields] = "/proc/self/stat" |> File.read!() |> String.split(") ", parts: 2)
  [utime, stime] = fields |> String.split() |> Enum.slice(11, 2)
  (String.to_integer(utime) + String.to_integer(stime)) / 100
end

# closed-loop clients for `seconds`: {requests/s, p50, p99, p99.9 in ms, errors}
closed = fn target, clients, seconds ->
  parent = self()
  stop_at = System.monotonic_time(:millisecond) + seconds * 1000

  pids =
    for c <- 1..clients do
      spawn_link(fn ->
        loop = fn loop, i, lat, errs ->
          if System.monotonic_time(:millisecond) >= stop_at do
            send(parent, {:done, lat, errs})
          else
            t0 = System.monotonic_time(:microsecond)

            errs =
              try do
                Nx.Serving.batched_run(target, elem(requests, rem(c * 31 + i, 1024)))
                errs
              catch
                :exit, _ -> errs + 1
              end

            loop.(loop, i + 1, [System.monotonic_time(:microsecond) - t0 | lat], errs)
          end
        end

        loop.(loop, 0, [], 0)
      end)
    end

  {lats, errs} =
    Enum.reduce(pids, {[], 0}, fn _, {acc, e} ->
      receive do
        {:done, lat, errs} -> {lat ++ acc, e + errs}
      after
        (seconds + 60) * 1000 -> raise "a client never finished"
      end
    end)

  sorted = lats |> Enum.sort() |> List.to_tuple()
  n = tuple_size(sorted)
  ms = fn p -> percentile.(sorted, n, p) / 1000 end
  {n / seconds, ms.(0.5), ms.(0.99), ms.(0.999), errs}
end

# paced clients at `rate` requests/s in all for `seconds`: {achieved/s, p50, p99}
# paced clients at `rate` requests/s in all for `seconds`: {achieved/s, p50, p99}. Latencies go
# to a histogram of 10 us buckets up to 1 s (above: the last bucket), not to lists, so that a
# soak's memory is the serving's and not the clients'.
paced = fn target, rate, seconds ->
  clients = 64
  buckets = 100_001
  hist = :atomics.new(buckets, signed: false)
  interval_us = clients * 1_000_000 / rate
  parent = self()
  t_start = System.monotonic_time(:microsecond)
  stop_at = t_start + seconds * 1_000_000

  for c <- 1..clients do
    spawn_link(fn ->
      loop = fn loop, k ->
        due = t_start + round((k + c / clients) * interval_us)
        now = System.monotonic_time(:microsecond)

        if due >= stop_at do
          send(parent, :done)
        else
          if due > now, do: Process.sleep(div(due - now, 1000))
          t0 = System.monotonic_time(:microsecond)
          Nx.Serving.batched_run(target, elem(requests, rem(c * 31 + k, 1024)))
          us = System.monotonic_time(:microsecond) - t0
          :atomics.add(hist, min(div(us, 10), buckets - 1) + 1, 1)
          loop.(loop, k + 1)
        end
      end

      loop.(loop, 0)
    end)
  end

  for _ <- 1..clients do
    receive do
      :done -> :ok
    after
      (seconds + 60) * 1000 -> raise "a paced client never finished"
    end
  end

  counts = for b <- 1..buckets, do: :atomics.get(hist, b)
  n = Enum.sum(counts)

  at = fn p ->
    Enum.reduce_while(Enum.with_index(counts), 0, fn {c, b}, acc ->
      if acc + c >= p * n, do: {:halt, (b + 1) * 10 / 1000}, else: {:cont, acc + c}
    end)
  end

  {n / seconds, at.(0.5), at.(0.99)}
end

# rows per batch and ms per batch run (inside the serving) since `before`
fill_delta = fn nodes, before ->
  now = for n <- nodes, do: :erpc.call(n, F, :fill, [])

  {b, r, us} =
    Enum.zip(now, before)
    |> Enum.reduce({0, 0, 0}, fn {{b1, r1, u1}, {b0, r0, u0}}, {b, r, us} ->
      {b + b1 - b0, r + r1 - r0, us + u1 - u0}
    end)

  {now, if(b == 0, do: {0.0, 0.0}, else: {r / b, us / b / 1000})}
end

single_core = [{"CASCADE_BLAS_THREADS", "1"}]
single_args = ["+S", "1:1", "+SDcpu", "1:1", "+sbwt", "none", "+sbwtdcpu", "none"]

machine =
  "/proc/cpuinfo"
  |> File.read!()
  |> String.split("\n")
  |> Enum.find_value(
    "?",
    &(String.starts_with?(&1, "model name") && String.trim(hd(tl(String.split(&1, ":")))))
  )

IO.puts(
  "# Nx.Serving on Cascade: #{if model == :dense, do: "dense 784-256-10 (Cascade.Compiler)", else: "the demo's CNN (Cascade ops)"}, " <>
    "batch_size 64, batch_timeout 2 ms, one row a request"
)

IO.puts(
  "# #{Date.utc_today()}, #{machine}, #{System.schedulers_online()} schedulers, " <>
    "host device #{Cascade.Device.host()}, #{seconds} s per level\n"
)

report = fn label, nodes, target, plain ->
  IO.puts("## #{label}\n")
  batch_ms = Float.round(64 * length(nodes) / plain * 1000, 2)
  IO.puts("plain loop (batches of 64): #{round(plain)} rows/s, #{batch_ms} ms a batch\n")

  IO.puts(
    "| clients | req/s | × plain | p50 ms | p99 ms | p99.9 ms | rows/batch | ms/batch | errors | CPU here |"
  )

  IO.puts("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

  before = for n <- nodes, do: :erpc.call(n, F, :fill, [])

  {_, peak} =
    Enum.reduce(levels, {before, 0}, fn clients, {before, peak} ->
      cpu0 = cpu_seconds.()
      {rps, p50, p99, p999, errs} = closed.(target, clients, seconds)
      cpu = (cpu_seconds.() - cpu0) / seconds
      {now, {fill, batch_ms}} = fill_delta.(nodes, before)

      IO.puts(
        "| #{clients} | #{round(rps)} | #{Float.round(rps / plain, 2)} | #{Float.round(p50, 2)} | " <>
          "#{Float.round(p99, 2)} | #{Float.round(p999, 2)} | #{Float.round(fill, 1)} | #{Float.round(batch_ms, 2)} | #{errs} | #{Float.round(cpu, 2)} |"
      )

      {now, max(peak, rps)}
    end)

  IO.puts("")
  peak
end

start_nodes = fn count ->
  for k <- 1..count do
    {pid, node} =
      F.start_peer(:"serve#{k}_#{System.unique_integer([:positive])}", single_core, single_args)

    {pid, node}
  end
end

for mode <- modes do
  case mode do
    "local" ->
      name = :bench_local

      {:ok, serving} =
        Nx.Serving.start_link(
          serving: F.serving([max_concurrency: partitions], model),
          name: name,
          batch_size: 64,
          batch_timeout: 2,
          partitions: partitions > 1
        )

      peak =
        report.(
          "one node: the serving and its clients in this VM (all cores), " <>
            "#{partitions} partition(s) on the host device",
          [node()],
          name,
          F.plain_loop(seconds, model)
        )

      {rate, p50, p99} = paced.(name, peak / 2, seconds)

      IO.puts(
        "half the peak (#{round(peak / 2)} req/s asked, #{round(rate)} done, 64 paced clients): " <>
          "p50 #{Float.round(p50, 2)} ms, p99 #{Float.round(p99, 2)} ms (p99/p50 #{Float.round(p99 / p50, 2)})\n"
      )

      # Nx 0.7's distributed servings share one :pg group, whatever their names: a
      # {:distributed, name} request that picks this one would find no `name` here
      Process.unlink(serving)
      GenServer.stop(serving)

    "soak" ->
      name = :bench_soak

      {:ok, _} =
        Nx.Serving.start_link(
          serving: F.serving([], model),
          name: name,
          batch_size: 64,
          batch_timeout: 2
        )

      soak_seconds = seconds
      {peak, _, _, _, _} = closed.(name, 256, 5)
      IO.puts("## soak: half of #{round(peak)} req/s for #{soak_seconds} s\n")
      IO.puts("| s | RSS MB | BEAM MB | Cascade bytes held |")
      IO.puts("|---:|---:|---:|---:|")

      rss = fn ->
        "/proc/self/status"
        |> File.read!()
        |> String.split("\n")
        |> Enum.find_value(fn l ->
          case String.split(l) do
            ["VmRSS:", kb, "kB"] -> div(String.to_integer(kb), 1024)
            _ -> nil
          end
        end)
      end

      sampler =
        spawn_link(fn ->
          sample = fn sample, t ->
            :erlang.garbage_collect()
            mem = Cascade.memory()
            live = mem |> Map.values() |> Enum.map(& &1.bytes) |> Enum.sum()
            IO.puts("| #{t} | #{rss.()} | #{div(:erlang.memory(:total), 1_048_576)} | #{live} |")

            receive do
              :stop -> :ok
            after
              10_000 -> sample.(sample, t + 10)
            end
          end

          sample.(sample, 0)
        end)

      {rate, p50, p99} = paced.(name, peak / 2, seconds)
      send(sampler, :stop)

      IO.puts(
        "\n#{round(rate)} req/s done, p50 #{Float.round(p50, 2)} ms, p99 #{Float.round(p99, 2)} ms\n"
      )

    "one" ->
      [{pid, node}] = start_nodes.(1)
      name = :bench_one
      F.start_serving(node, name, [], [], model)
      plain = :erpc.call(node, F, :plain_loop, [seconds, model], :infinity)

      report.(
        "one serving node of one core (clients in this VM)",
        [node],
        {:distributed, name},
        plain
      )

      F.stop_peer(pid)

    "two" ->
      peers = start_nodes.(2)
      nodes = for {_, n} <- peers, do: n
      name = :bench_two
      for n <- nodes, do: F.start_serving(n, name, [], [], model)
      plain = :erpc.call(hd(nodes), F, :plain_loop, [seconds, model], :infinity)

      report.(
        "two serving nodes of one core each (clients in this VM)",
        nodes,
        {:distributed, name},
        2 * plain
      )

      for {pid, _} <- peers, do: F.stop_peer(pid)
  end
end
