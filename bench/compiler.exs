# Cascade.Compiler against Nx.Defn.Evaluator, both on Cascade.Backend, in one run:
#
#   * an MLP training step: 784-256-10, relu, softmax cross-entropy, batch 64,
#     value_and_grad and an SGD update (bench/torch_mlp_step.py runs it in PyTorch);
#   * gelu (erf form, eight primitives) on 1M f32, beside one add over the same tensor;
#   * a while loop of 100 turns (a 1x64 by 64x64 product and a tanh a turn).
#
#   CASCADE_NX_PATH=/path/to/nx mix run bench/compiler.exs [steps] [device]
#
# bench/compiler.sh runs this and the PyTorch step one after the other. Prints ms per step
# (after warm-up calls, which compile) and the loss after the steps, which must agree between
# the two compilers.

unless Code.ensure_loaded?(Nx) do
  IO.puts(:stderr, "bench/compiler.exs needs Nx: set CASCADE_NX_PATH (see mix.exs)")
  System.halt(2)
end

defmodule Bench.MLP do
  import Nx.Defn

  defn predict({w1, b1, w2, b2}, x) do
    x |> Nx.dot(w1) |> Nx.add(b1) |> Nx.max(0) |> Nx.dot(w2) |> Nx.add(b2)
  end

  defn loss(params, x, y) do
    logits = predict(params, x)
    shifted = logits - Nx.reduce_max(logits, axes: [1], keep_axes: true)
    log_probs = shifted - Nx.log(Nx.sum(Nx.exp(shifted), axes: [1], keep_axes: true))
    -Nx.mean(Nx.sum(y * log_probs, axes: [1]))
  end

  defn step(params, x, y) do
    {loss, {g1, gb1, g2, gb2}} = value_and_grad(params, &loss(&1, x, y))
    {w1, b1, w2, b2} = params
    lr = 0.01
    {loss, {w1 - lr * g1, b1 - lr * gb1, w2 - lr * g2, b2 - lr * gb2}}
  end

  defn gelu(x) do
    0.5 * x * (1 + Nx.erf(x * 0.7071067811865476))
  end

  # the tanh form, as Axon's gelu(approximate: :tanh): eight primitives
  defn gelu_tanh(x) do
    0.5 * x * (1 + Nx.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
  end

  defn add(x, y) do
    x + y
  end

  defn erf(x) do
    Nx.erf(x)
  end

  # a loop: 100 turns of a 64-wide product and a tanh
  defn iterate(x, w) do
    {x, _, _} =
      while {x, w, i = 0}, i < 100 do
        {Nx.tanh(Nx.dot(x, w) * 0.5 + 0.1), w, i + 1}
      end

    x
  end

  defn tanh(x) do
    Nx.tanh(x)
  end
end

{steps, device} =
  case System.argv() do
    [] -> {200, Cascade.Device.default()}
    [s] -> {String.to_integer(s), Cascade.Device.default()}
    [s, d | _] -> {String.to_integer(s), String.to_atom(d)}
  end

Cascade.put_fallback_policy(:error)
Nx.default_backend({Cascade.Backend, device: device})

key = Nx.Random.key(42)
{x, key} = Nx.Random.normal(key, shape: {64, 784})
{w1, key} = Nx.Random.normal(key, 0.0, 0.05, shape: {784, 256})
{w2, _key} = Nx.Random.normal(key, 0.0, 0.05, shape: {256, 10})
labels = Nx.remainder(Nx.iota({64}), 10)
y = Nx.equal(Nx.new_axis(labels, 1), Nx.iota({1, 10})) |> Nx.as_type(:f32)
params0 = {w1, Nx.broadcast(0.0, {256}), w2, Nx.broadcast(0.0, {10})}

time_steps = fn step ->
  # warm-up: compiles (Cascade.Compiler), loads code, first allocations; on copies of the
  # parameters, which a donating step frees
  params0 =
    Nx.Defn.Composite.traverse(params0, &Nx.backend_copy(&1, {Cascade.Backend, device: device}))

  params = Enum.reduce(1..10, params0, fn _, params -> step.(params, x, y) |> elem(1) end)

  {usec, {loss, _}} =
    :timer.tc(fn ->
      Enum.reduce(1..steps, {nil, params}, fn _, {_, params} -> step.(params, x, y) end)
    end)

  {usec / 1000 / steps, Nx.to_number(loss)}
end

IO.puts(
  "MLP 784-256-10, batch 64, value_and_grad + SGD, device #{inspect(device)}, #{steps} steps"
)

evaluator = Nx.Defn.jit(&Bench.MLP.step/3, compiler: Nx.Defn.Evaluator)
compiled = Nx.Defn.jit(&Bench.MLP.step/3, compiler: Cascade.Compiler, device: device)

# the parameters donated: each step's updates write into the buffers of the step before
donated = Nx.Defn.jit(&Bench.MLP.step/3, compiler: Cascade.Compiler, device: device, donate: [0])

for {name, fun} <- [
      {"Nx.Defn.Evaluator", evaluator},
      {"Cascade.Compiler", compiled},
      {"  donate: [0]", donated}
    ] do
  {ms, loss} = time_steps.(fun)

  IO.puts(
    "  #{String.pad_trailing(name, 18)} #{:erlang.float_to_binary(ms, decimals: 3)} ms/step, loss #{Float.round(loss, 5)}"
  )
end

info = Cascade.Compiler.explain(&Bench.MLP.step/3, [params0, x, y], device: device)
routes = Enum.frequencies_by(info.steps, & &1.route)
IO.puts("  program: #{length(info.steps)} steps #{inspect(routes)}, #{info.constants} constants")

# gelu against one add, 1M f32
{v, _} = Nx.Random.normal(Nx.Random.key(1), shape: {1_000_000})

# The median of five rounds of n calls each, after 20 calls that compile, load code and fill
# the buffer cache: a 1M-element call's time here moves by up to 5x with the memory state
# (fresh pages when the buffers of dropped results are not back yet), and a round catches one
# state.
time_calls = fn fun, n ->
  Enum.each(1..20, fn _ -> fun.() end)

  rounds =
    for _ <- 1..5 do
      {usec, _} = :timer.tc(fn -> Enum.each(1..n, fn _ -> fun.() end) end)
      usec / n
    end

  rounds |> Enum.sort() |> Enum.at(2)
end

n = max(div(steps, 10), 20)
jit = fn f, compiler -> Nx.Defn.jit(f, compiler: compiler, device: device) end
add = jit.(&Bench.MLP.add/2, Cascade.Compiler)
add_us = time_calls.(fn -> add.(v, v) end, n)
raw = v.data.tensor
raw_us = time_calls.(fn -> Cascade.add(raw, raw) end, n)
IO.puts("1M f32, median of 5 rounds of #{n} calls, device #{inspect(device)}")

IO.puts(
  "  add (compiled)                        #{Float.round(add_us, 1)} us (Cascade.add/2: #{Float.round(raw_us, 1)} us)"
)

for {name, f, alone} <- [
      {"gelu, erf form", &Bench.MLP.gelu/1, &Bench.MLP.erf/1},
      {"gelu, tanh form", &Bench.MLP.gelu_tanh/1, &Bench.MLP.tanh/1}
    ] do
  compiled = jit.(f, Cascade.Compiler)
  evaluated = Nx.Defn.jit(f, compiler: Nx.Defn.Evaluator)
  alone = jit.(alone, Cascade.Compiler)
  c_us = time_calls.(fn -> compiled.(v) end, n)
  e_us = time_calls.(fn -> evaluated.(v) end, n)
  a_us = time_calls.(fn -> alone.(v) end, n)
  steps = Cascade.Compiler.explain(f, [v], device: device).steps

  shape =
    Enum.map_join(
      steps,
      ", ",
      &if(&1.op == :fused, do: "fused #{inspect(&1.fused)}", else: "#{&1.op}")
    )

  IO.puts("  #{name}: #{length(steps)} step(s): #{shape}")

  IO.puts(
    "    compiled #{Float.round(c_us, 1)} us = #{Float.round(c_us / add_us, 2)}x the add; " <>
      "its transcendental op alone #{Float.round(a_us, 1)} us; Nx.Defn.Evaluator #{Float.round(e_us, 1)} us"
  )
end

# the while loop: staged, its condition and body one call into C for all 100 turns
lx = Nx.iota({1, 64}, type: :f32) |> Nx.divide(64)
lw = Nx.iota({64, 64}, type: :f32) |> Nx.divide(4096)

IO.puts(
  "while, 100 turns of tanh(x . w * 0.5 + 0.1), x 1x64, w 64x64, median of 5 rounds of #{n} calls"
)

for {name, compiler} <- [
      {"Nx.Defn.Evaluator", Nx.Defn.Evaluator},
      {"Cascade.Compiler", Cascade.Compiler}
    ] do
  f = jit.(&Bench.MLP.iterate/2, compiler)
  us = time_calls.(fn -> f.(lx, lw) end, n)
  IO.puts("  #{String.pad_trailing(name, 18)} #{Float.round(us, 1)} us a call")
end

IO.puts(
  "  mode: #{inspect(Cascade.Compiler.explain(&Bench.MLP.iterate/2, [lx, lw], device: device).mode)}"
)
