# Gradient descent with Nx.Defn.grad on a small MLP, on Cascade.Backend and on
# Nx.BinaryBackend in the same run, with Nx.Defn's default evaluator (no compiler).
#
#   CASCADE_NX_PATH=/path/to/nx mix run bench/nx_grad.exs [steps]
#
# Prints the loss after each step on both backends (they must agree) and the time per step;
# the ratio is Cascade / BinaryBackend (below 1: Cascade is faster), and Cascade.stats/0's
# routes for the Cascade run.

unless Code.ensure_loaded?(Nx) do
  IO.puts(:stderr, "bench/nx_grad.exs needs Nx: set CASCADE_NX_PATH (see mix.exs)")
  System.halt(2)
end

defmodule Bench.MLP do
  import Nx.Defn

  defn predict({w1, b1, w2, b2}, x) do
    x
    |> Nx.dot(w1)
    |> Nx.add(b1)
    |> Nx.tanh()
    |> Nx.dot(w2)
    |> Nx.add(b2)
  end

  # softmax cross-entropy against one-hot labels
  defn loss(params, x, y) do
    logits = predict(params, x)
    shifted = logits - Nx.reduce_max(logits, axes: [1], keep_axes: true)
    log_probs = shifted - Nx.log(Nx.sum(Nx.exp(shifted), axes: [1], keep_axes: true))
    -Nx.mean(Nx.sum(y * log_probs, axes: [1]))
  end

  defn step({w1, b1, w2, b2} = params, x, y) do
    {loss, {g1, gb1, g2, gb2}} = value_and_grad(params, &loss(&1, x, y))
    lr = 0.1
    {loss, {w1 - lr * g1, b1 - lr * gb1, w2 - lr * g2, b2 - lr * gb2}}
  end
end

# fallbacks are counted below; no log lines in the middle of the figures
Cascade.put_fallback_policy(:allow)

{steps, _} = Integer.parse(List.first(System.argv()) || "10")
{batch, inputs, hidden, classes} = {64, 32, 64, 10}

# the same data for both backends, made on the host
key = Nx.Random.key(42) |> Nx.backend_copy(Nx.BinaryBackend)

{data, _key} =
  Nx.with_default_backend(Nx.BinaryBackend, fn ->
    {x, key} = Nx.Random.normal(key, shape: {batch, inputs})
    {w1, key} = Nx.Random.normal(key, 0.0, 0.2, shape: {inputs, hidden})
    {w2, key} = Nx.Random.normal(key, 0.0, 0.2, shape: {hidden, classes})
    labels = Nx.remainder(Nx.iota({batch}), classes)
    y = Nx.equal(Nx.new_axis(labels, 1), Nx.iota({1, classes})) |> Nx.as_type(:f32)
    params = {w1, Nx.broadcast(0.0, {hidden}), w2, Nx.broadcast(0.0, {classes})}
    {{params, x, y}, key}
  end)

run = fn backend, steps ->
  {params, x, y} = data
  copy = &Nx.backend_copy(&1, backend)
  params = params |> Tuple.to_list() |> Enum.map(copy) |> List.to_tuple()
  {x, y} = {copy.(x), copy.(y)}
  step = Nx.Defn.jit(&Bench.MLP.step/3)

  {usec, {losses, _params}} =
    :timer.tc(fn ->
      Enum.map_reduce(1..steps, params, fn _, params ->
        {loss, params} = step.(params, x, y)
        {Nx.to_number(loss), params}
      end)
    end)

  {usec, losses}
end

# one warm-up step each, so neither pays for loading code
_ = Nx.with_default_backend(Cascade.Backend, fn -> run.(Cascade.Backend, 1) end)
_ = Nx.with_default_backend(Nx.BinaryBackend, fn -> run.(Nx.BinaryBackend, 1) end)
Cascade.reset_stats()

{cx_usec, cx_losses} =
  Nx.with_default_backend(Cascade.Backend, fn -> run.(Cascade.Backend, steps) end)

stats = Cascade.stats()

{bin_usec, bin_losses} =
  Nx.with_default_backend(Nx.BinaryBackend, fn -> run.(Nx.BinaryBackend, steps) end)

IO.puts(
  "MLP #{inputs}-#{hidden}-#{classes}, batch #{batch}, #{steps} steps of value_and_grad, " <>
    "Nx.Defn.Evaluator"
)

for {{c, b}, i} <- Enum.with_index(Enum.zip(cx_losses, bin_losses), 1) do
  IO.puts("step #{i}: loss Cascade #{Float.round(c, 6)}, BinaryBackend #{Float.round(b, 6)}")
end

max_diff = Enum.zip_with(cx_losses, bin_losses, &abs(&1 - &2)) |> Enum.max()
ms = fn usec -> :erlang.float_to_binary(usec / 1000 / steps, decimals: 2) end
IO.puts("largest loss difference: #{max_diff}")
IO.puts("Cascade.Backend:  #{ms.(cx_usec)} ms/step")
IO.puts("Nx.BinaryBackend: #{ms.(bin_usec)} ms/step")
IO.puts("ratio Cascade/BinaryBackend: #{Float.round(cx_usec / bin_usec, 4)}")

by_route =
  Enum.reduce(stats, %{}, fn {{_, _, route}, %{calls: n}}, acc ->
    Map.update(acc, route, n, &(&1 + n))
  end)

IO.puts("Cascade.stats/0 calls by route: #{inspect(by_route)}")

fallbacks = for {{_, op, :binary_fallback}, %{calls: n}} <- stats, do: {op, n}
if fallbacks != [], do: IO.puts("fallbacks to Nx.BinaryBackend: #{inspect(fallbacks)}")
