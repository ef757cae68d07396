# An Axon-style CNN training step through Cascade.Backend with Nx.Defn's default evaluator:
# conv (8 filters 3x3) -> relu -> max_pool 2x2 (Nx.window_max) -> dense 10 -> softmax
# cross-entropy, value_and_grad, then an Adam update, on a batch of 32 28x28 images.
#
#   CASCADE_NX_PATH=/path/to/nx mix run bench/nx_cnn_step.exs [steps] [device] [evaluator|compiler] [max|avg]
#
# The third argument picks the defn compiler: Nx.Defn.Evaluator (the default) or
# Cascade.Compiler (the step compiled once into a program); the fourth the pooling: max_pool
# (Nx.window_max, the default) or avg_pool (Nx.window_mean, as Axon's avg_pool).
#
# The fallback policy is :error: the run stops if any callback would leave Cascade. Prints the
# loss of each step (it must fall on a fixed batch) and the time per step after one warm-up
# step; bench/torch_cnn_step.py runs the same model and step in PyTorch (bench/cnn_step.sh runs
# both in one go).

unless Code.ensure_loaded?(Nx) do
  IO.puts(:stderr, "bench/nx_cnn_step.exs needs Nx: set CASCADE_NX_PATH (see mix.exs)")
  System.halt(2)
end

defmodule Bench.CNN do
  import Nx.Defn

  defn predict({k, kb, w, b}, x, opts \\ []) do
    opts = keyword!(opts, pool: :max)

    x
    |> Nx.conv(k)
    |> Nx.add(Nx.reshape(kb, {1, 8, 1, 1}))
    |> Nx.max(0)
    |> pool(opts[:pool])
    |> Nx.reshape({32, 8 * 13 * 13})
    |> Nx.dot(w)
    |> Nx.add(b)
  end

  deftransformp pool(x, kind) do
    case kind do
      :avg -> Nx.window_mean(x, {1, 1, 2, 2}, strides: [1, 1, 2, 2])
      :max -> Nx.window_max(x, {1, 1, 2, 2}, strides: [1, 1, 2, 2])
    end
  end

  defn loss(params, x, y, opts \\ []) do
    logits = predict(params, x, opts)
    shifted = logits - Nx.reduce_max(logits, axes: [1], keep_axes: true)
    log_probs = shifted - Nx.log(Nx.sum(Nx.exp(shifted), axes: [1], keep_axes: true))
    -Nx.mean(Nx.sum(y * log_probs, axes: [1]))
  end

  # Adam (lr 1e-3, betas 0.9 and 0.999, eps 1e-8), as torch.optim.Adam
  defn step(params, {m, v}, t, x, y, opts \\ []) do
    {loss, grads} = value_and_grad(params, &loss(&1, x, y, opts))
    {b1, b2, lr, eps} = {0.9, 0.999, 1.0e-3, 1.0e-8}

    {params, m, v} = update(params, grads, m, v, t, b1, b2, lr, eps)
    {loss, params, {m, v}}
  end

  deftransformp update(params, grads, m, v, t, b1, b2, lr, eps) do
    [params, grads, m, v] = Enum.map([params, grads, m, v], &Tuple.to_list/1)

    {p, m, v} =
      Enum.zip_with([params, grads, m, v], fn [p, g, m, v] ->
        m = Nx.add(Nx.multiply(b1, m), Nx.multiply(1 - b1, g))
        v = Nx.add(Nx.multiply(b2, v), Nx.multiply(1 - b2, Nx.multiply(g, g)))
        m_hat = Nx.divide(m, Nx.subtract(1, Nx.pow(b1, t)))
        v_hat = Nx.divide(v, Nx.subtract(1, Nx.pow(b2, t)))
        {Nx.subtract(p, Nx.divide(Nx.multiply(lr, m_hat), Nx.add(Nx.sqrt(v_hat), eps))), m, v}
      end)
      |> Enum.reduce({[], [], []}, fn {p, m, v}, {ps, ms, vs} ->
        {[p | ps], [m | ms], [v | vs]}
      end)

    {p |> Enum.reverse() |> List.to_tuple(), m |> Enum.reverse() |> List.to_tuple(),
     v |> Enum.reverse() |> List.to_tuple()}
  end
end

{steps, device, compiler} =
  case System.argv() do
    [] -> {20, :cpu, Nx.Defn.Evaluator}
    [s] -> {String.to_integer(s), :cpu, Nx.Defn.Evaluator}
    [s, d] -> {String.to_integer(s), String.to_atom(d), Nx.Defn.Evaluator}
    [s, d, "compiler" | _] -> {String.to_integer(s), String.to_atom(d), Cascade.Compiler}
    [s, d, "evaluator" | _] -> {String.to_integer(s), String.to_atom(d), Nx.Defn.Evaluator}
  end

pool =
  case System.argv() do
    [_, _, _, "avg" | _] -> :avg
    [_, _, _, "max" | _] -> :max
    [_, _, _, other | _] -> raise ArgumentError, "pooling: max or avg, not #{inspect(other)}"
    _ -> :max
  end

Cascade.put_fallback_policy(:error)
Nx.default_backend({Cascade.Backend, device: device})

key = Nx.Random.key(42)
{x, key} = Nx.Random.normal(key, shape: {32, 1, 28, 28})
{k, key} = Nx.Random.normal(key, 0.0, 0.3, shape: {8, 1, 3, 3})
{w, _key} = Nx.Random.normal(key, 0.0, 0.03, shape: {8 * 13 * 13, 10})
labels = Nx.remainder(Nx.iota({32}), 10)
y = Nx.equal(Nx.new_axis(labels, 1), Nx.iota({1, 10})) |> Nx.as_type(:f32)
params = {k, Nx.broadcast(0.0, {8}), w, Nx.broadcast(0.0, {10})}
zeros = params |> Tuple.to_list() |> Enum.map(&Nx.multiply(&1, 0.0)) |> List.to_tuple()

step =
  Nx.Defn.jit(&Bench.CNN.step(&1, &2, &3, &4, &5, pool: pool), compiler: compiler, device: device)

run = fn params, state, from, count ->
  Enum.reduce(from..(from + count - 1), {params, state, []}, fn t, {params, state, losses} ->
    {loss, params, state} = step.(params, state, Nx.tensor(t * 1.0), x, y)
    {params, state, [Nx.to_number(loss) | losses]}
  end)
end

# one warm-up step: code loading, the first allocations
{params, state, [first]} = run.(params, {zeros, zeros}, 1, 1)
Cascade.reset_stats()
{usec, {_params, _state, losses}} = :timer.tc(fn -> run.(params, state, 2, steps) end)

IO.puts(
  "CNN conv(8, 3x3)-relu-#{pool}pool(2)-dense(10), batch 32, 28x28, value_and_grad + Adam, " <>
    "#{inspect(compiler)} on Cascade.Backend, device #{inspect(device)}"
)

IO.puts("loss: step 1 #{Float.round(first, 5)}, step #{steps + 1} #{Float.round(hd(losses), 5)}")

IO.puts(
  "Cascade.Backend, #{inspect(compiler)}: " <>
    "#{:erlang.float_to_binary(usec / 1000 / steps, decimals: 2)} ms/step"
)

by_route =
  Enum.reduce(Cascade.stats(), %{}, fn {{_, _, route}, %{calls: n}}, acc ->
    Map.update(acc, route, n, &(&1 + n))
  end)

IO.puts("Cascade.stats/0 calls by route over the timed steps: #{inspect(by_route)}")
