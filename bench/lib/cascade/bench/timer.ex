defmodule Cascade.Bench.Timer do
  @moduledoc """
  Median seconds per call, measured the way `bench/numpy_suite.py` measures NumPy: calls in
  batches, the batch growing fourfold until one batch takes 50 ms, batches repeated until
  `min_seconds` have passed and at least three were timed; the median of the batches' times
  per call. One call before timing warms caches and memoized plans.

  Devices with a queue (opencl, cuda) return as soon as the work is enqueued, so each batch
  ends by reading one element of its last result: an in-order queue has then finished every
  call of the batch, and the time is the time to results, not to enqueue.
  """

  @doc "The median seconds per call of `fun`."
  @spec median((() -> any), number) :: float
  def median(fun, min_seconds) do
    sync(fun.())
    start = System.monotonic_time()
    loop(fun, 1, [], start, min_seconds)
  end

  defp loop(fun, n, samples, start, min_seconds) do
    t0 = System.monotonic_time()
    repeat(fun, n)
    dt = seconds(System.monotonic_time() - t0) / n
    samples = [dt | samples]
    n = if dt * n < 0.05, do: n * 4, else: n

    if seconds(System.monotonic_time() - start) > min_seconds and length(samples) >= 3 do
      sorted = Enum.sort(samples)
      Enum.at(sorted, div(length(sorted), 2))
    else
      loop(fun, n, samples, start, min_seconds)
    end
  end

  # results are dropped as they come, as in a Python loop (`for` would keep them all); the
  # last one is waited for
  defp repeat(fun, 1), do: sync(fun.())

  defp repeat(fun, n) do
    fun.()
    repeat(fun, n - 1)
  end

  defp sync(%Cascade.Tensor{} = t), do: Cascade.to_binary(t, limit: 1)
  defp sync(other), do: other

  defp seconds(native), do: System.convert_time_unit(native, :native, :nanosecond) / 1.0e9

  @doc """
  A duration for people.

      iex> Cascade.Bench.Timer.format(0.0000005634)
      "563.4 ns"
      iex> Cascade.Bench.Timer.format(0.01036)
      "10.36 ms"
  """
  @spec format(float) :: String.t()
  def format(s) when s < 1.0e-6, do: "#{Float.round(s * 1.0e9, 1)} ns"
  def format(s) when s < 1.0e-3, do: "#{Float.round(s * 1.0e6, 2)} µs"
  def format(s) when s < 1.0, do: "#{Float.round(s * 1.0e3, 2)} ms"
  def format(s), do: "#{Float.round(s, 2)} s"
end
