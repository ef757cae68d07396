# Cascade.dot on :blas and on :cpu, f32 square matrices; one caller, then two processes
# multiplying at once. Driven by bench/blas/run.sh, which runs the raw cblas_sgemm and NumPy
# sides in the same run.
#
#     MIX_ENV=prod mix run bench/blas/blas_bench.exs SECONDS SIZE...
#
# Prints "cascade_<device>[_<type>]<TAB>N<TAB>seconds<TAB>GFLOP/s" per case (median of batches
# grown to 50 ms, as sgemm_bench.c and numpy_matmul.py measure), and
# "cascade_blas_concurrent<TAB>N<TAB>callers<TAB>GFLOP/s total".

[seconds | sizes] = System.argv()
min_seconds = String.to_float(seconds)
sizes = Enum.map(sizes, &String.to_integer/1)

defmodule BlasBench do
  def timed(fun, min_seconds) do
    fun.()
    loop(fun, 1, [], System.monotonic_time(), min_seconds)
  end

  defp loop(fun, n, samples, start, min_seconds) do
    t0 = System.monotonic_time()
    for _ <- 1..n, do: fun.() && :ok
    dt = secs(System.monotonic_time() - t0) / n
    samples = [dt | samples]
    n = if dt * n < 0.05, do: n * 4, else: n

    if secs(System.monotonic_time() - start) > min_seconds and length(samples) >= 5,
      do: Enum.at(Enum.sort(samples), div(length(samples), 2)),
      else: loop(fun, n, samples, start, min_seconds)
  end

  def secs(native), do: System.convert_time_unit(native, :native, :nanosecond) / 1.0e9

  def matrix(n, device, type) do
    # values in [-0.5, 0.5), like sgemm_bench.c's
    Cascade.iota({n, n}, type: :f32, device: device)
    |> Cascade.remainder(997)
    |> Cascade.divide(997.0)
    |> Cascade.subtract(0.5)
    |> Cascade.as_type(type)
  end

  def gflops(n, s), do: 2 * n * n * n / s / 1.0e9

  # `callers` processes multiplying for `seconds` each after a common start: GFLOP/s in all
  def concurrent(n, callers, seconds) do
    parent = self()

    pids =
      for _ <- 1..callers do
        spawn_link(fn ->
          a = matrix(n, :blas, :f32)
          b = matrix(n, :blas, :f32)
          Cascade.dot(a, b)
          send(parent, {:ready, self()})
          receive do: (:go -> :ok)

          deadline =
            System.monotonic_time() +
              System.convert_time_unit(round(seconds * 1000), :millisecond, :native)

          send(parent, {:calls, self(), run_until(a, b, deadline, 0)})
        end)
      end

    for pid <- pids, do: receive(do: ({:ready, ^pid} -> :ok))
    t0 = System.monotonic_time()
    for pid <- pids, do: send(pid, :go)
    calls = for pid <- pids, do: receive(do: ({:calls, ^pid, c} -> c))
    elapsed = secs(System.monotonic_time() - t0)
    2 * n * n * n * Enum.sum(calls) / elapsed / 1.0e9
  end

  defp run_until(a, b, deadline, calls) do
    if System.monotonic_time() >= deadline,
      do: calls,
      else:
        (
          Cascade.dot(a, b)
          run_until(a, b, deadline, calls + 1)
        )
  end
end

Cascade.put_fallback_policy(:error)

for {device, type} <- [{:blas, :f32}, {:cpu, :f32}, {:blas, :f16}, {:blas, :bf16}, {:blas, :f64}],
    n <- sizes,
    # the halves and f64 at the largest size only: they answer "how much does conversion cost"
    type == :f32 or n == List.last(sizes) do
  a = BlasBench.matrix(n, device, type)
  b = BlasBench.matrix(n, device, type)
  s = BlasBench.timed(fn -> Cascade.dot(a, b) end, min_seconds)
  suffix = if type == :f32, do: "", else: "_#{type}"

  IO.puts(
    "cascade_#{device}#{suffix}\t#{n}\t#{:erlang.float_to_binary(s, decimals: 9)}\t#{:erlang.float_to_binary(BlasBench.gflops(n, s), decimals: 2)}"
  )
end

n = List.last(sizes)

for callers <- [1, 2] do
  g = BlasBench.concurrent(n, callers, 2 * min_seconds)
  IO.puts("cascade_blas_concurrent\t#{n}\t#{callers}\t#{:erlang.float_to_binary(g, decimals: 2)}")
end
