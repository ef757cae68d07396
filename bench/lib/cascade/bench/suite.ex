defmodule Cascade.Bench.Suite do
  @moduledoc """
  The fixed benchmark suite of `mix cascade.bench`, run on each device and type beside NumPy
  and PyTorch on the same data, in the same run.

  Inputs are drawn once, in f32 on the cpu, from Cascade's counter-based generator with fixed
  keys, and written to a scratch folder for `bench/numpy_suite.py`; on each device they are
  transferred and cast to the type under test. Each case also reports a check, the sum of its
  result and the sum of its absolute values in f64, on both sides: the same data must give
  the same answer.

  Cases: `dot` of 256, 512 and 1024 square matrices; `conv2d` of a {64, 32, 28, 28} input
  with 64 3×3 filters and `max_pool2d` 2×2 of the same input; `softmax` and `layer_norm` of
  1000×1000 along rows; a dense layer with its relu ({256, 1024} · {1024, 1024} + bias, fused
  into one call here); the mean categorical cross-entropy of 1000×1000 logits against
  1000×1000 targets; `add`, `exp`, `tanh`, `gelu`, `sum` of 1M elements; a one-element
  `add` (the cost of a call); in f16 and bf16, `as_type` of 1M elements into f32 and from f32
  (mixed precision's conversions); one training epoch of `mix cascade.demo`'s MLP and, in f32 and
  not on the portable `:cpu` device (a minute an epoch there), of its CNN (against PyTorch's)
  on the 8,000 training digits (when the MNIST data is there).
  """

  alias Cascade.Bench.Timer
  alias Cascade.Demo.{Data, Training}

  @vec 1_048_576

  @doc "The cases' names, in order."
  def names do
    ["dot 256x256", "dot 512x512", "dot 1024x1024", "conv2d 64x32x28x28, 64 3x3"] ++
      ["max_pool2d 2x2 of 64x32x28x28", "softmax 1000x1000", "layer_norm 1000x1000"] ++
      ["dense+relu 256x1024x1024", "cross-entropy 1000x1000"] ++
      ["add 1M", "exp 1M", "tanh 1M", "gelu 1M", "sum 1M", "add 1 element"] ++
      ["as_type 1M into f32", "as_type 1M from f32", "MLP training epoch", "CNN training epoch"]
  end

  @doc """
  The inputs, as f32 tensors on the cpu, written to `dir` as raw files for NumPy; with the
  MNIST training set when `mnist` is a `Cascade.Demo.Data.Set`.
  """
  def inputs(dir, mnist) do
    File.mkdir_p!(dir)

    write = fn name, shape, key ->
      t = Cascade.random_uniform(shape, key: key, min: -1.0, max: 1.0, device: :cpu)
      File.write!(Path.join(dir, name <> ".bin"), Cascade.to_binary(t))
      t
    end

    inputs = %{
      dot:
        for n <- [256, 512, 1024], into: %{} do
          {n, {write.("dot#{n}_a", {n, n}, n), write.("dot#{n}_b", {n, n}, n + 1)}}
        end,
      conv: {write.("conv_x", {64, 32, 28, 28}, 11), write.("conv_k", {64, 32, 3, 3}, 12)},
      softmax: write.("softmax_x", {1000, 1000}, 13),
      norm: {write.("norm_g", {1000}, 14), write.("norm_b", {1000}, 15)},
      dense:
        {write.("dense_x", {256, 1024}, 16), write.("dense_w", {1024, 1024}, 17),
         write.("dense_b", {1024}, 18)},
      targets: write.("xent_y", {1000, 1000}, 19),
      vec: {write.("vec_x", {@vec}, 1), write.("vec_y", {@vec}, 2)},
      one: {write.("one_a", {1}, 3), write.("one_b", {1}, 4)},
      mnist: mnist
    }

    if mnist do
      File.write!(Path.join(dir, "mnist_images.bin"), mnist.images)
      File.write!(Path.join(dir, "mnist_labels.bin"), mnist.labels)
    end

    inputs
  end

  @doc """
  Runs every case on `device` in `type`: a list of `%{case, seconds, check}` (check is nil
  for the training epoch, `{sum, sum of absolute values}` otherwise). `on_case` is called with each result as it comes.
  `keep` chooses the cases by name (default: all).
  """
  def run(inputs, device, type, min_seconds, on_case \\ fn _ -> :ok end, keep \\ fn _ -> true end) do
    on = fn t -> t |> Cascade.transfer(device) |> Cascade.as_type(type) end
    pair = fn {a, b} -> {on.(a), on.(b)} end

    dots =
      for n <- [256, 512, 1024] do
        {a, b} = pair.(inputs.dot[n])
        {"dot #{n}x#{n}", fn -> Cascade.dot(a, b) end}
      end

    {cx, ck} = pair.(inputs.conv)
    s = on.(inputs.softmax)
    {g, b} = pair.(inputs.norm)
    [dx, dw, db] = inputs.dense |> Tuple.to_list() |> Enum.map(on)
    targets = on.(inputs.targets)
    {x, y} = pair.(inputs.vec)
    {o1, o2} = pair.(inputs.one)

    ops =
      dots ++
        [
          {"conv2d 64x32x28x28, 64 3x3", fn -> Cascade.conv2d(cx, ck) end},
          {"max_pool2d 2x2 of 64x32x28x28", fn -> Cascade.max_pool2d(cx, 2) end},
          {"softmax 1000x1000", fn -> Cascade.softmax(s, axis: 1) end},
          {"layer_norm 1000x1000", fn -> Cascade.layer_norm(s, g, b, axes: [1]) end},
          {"dense+relu 256x1024x1024", fn -> Cascade.dense(dx, dw, db, activation: :relu) end},
          {"cross-entropy 1000x1000",
           fn -> Cascade.categorical_cross_entropy(targets, s, from_logits: true) end},
          {"add 1M", fn -> Cascade.add(x, y) end},
          {"exp 1M", fn -> Cascade.exp(x) end},
          {"tanh 1M", fn -> Cascade.tanh(x) end},
          {"gelu 1M", fn -> Cascade.gelu(x) end},
          {"sum 1M", fn -> Cascade.sum(x) end},
          {"add 1 element", fn -> Cascade.add(o1, o2) end}
        ] ++ conversions(type, device, x, elem(inputs.vec, 0))

    results =
      for {name, fun} <- ops, keep.(name) do
        result = %{case: name, seconds: Timer.median(fun, min_seconds), check: check(fun.())}
        on_case.(result)
        result
      end

    results ++ epoch(inputs.mnist, device, type, min_seconds, on_case, keep)
  end

  # the halves' conversions from and to f32 (x in the type under test on the device, xf the
  # same data in f32 on the cpu)
  defp conversions(type, device, x, xf) when type in [:f16, :bf16] do
    xf = Cascade.transfer(xf, device)

    [
      {"as_type 1M into f32", fn -> Cascade.as_type(x, :f32) end},
      {"as_type 1M from f32", fn -> Cascade.as_type(xf, type) end}
    ]
  end

  defp conversions(_type, _device, _x, _xf), do: []

  @doc """
  Whether a case's name is chosen by `--cases` (a comma-separated list of parts of names;
  nil: every case).

      iex> Cascade.Bench.Suite.chosen?("add 1M", ["add", "dot"])
      true
      iex> Cascade.Bench.Suite.chosen?("exp 1M", ["add"])
      false
  """
  def chosen?(_name, nil), do: true
  def chosen?(name, parts), do: Enum.any?(parts, &String.contains?(name, &1))

  defp epoch(nil, _device, _type, _min_seconds, _on_case, _keep), do: []

  defp epoch(train, device, type, min_seconds, on_case, keep) do
    # the same training as `mix cascade.demo`, one epoch; only the training loop is timed
    test = %{train | count: 0, images: <<>>, labels: <<>>}

    for {model, name} <- [{:mlp, "MLP training epoch"}, {:cnn, "CNN training epoch"}],
        model == :mlp or (type == :f32 and device != :cpu),
        keep.(name) do
      once = fn ->
        opts = Training.model_defaults(model) ++ [model: model, device: device, type: type]
        opts = Keyword.put(opts, :epochs, 1)
        hd(Training.run(train, test, opts).epochs).seconds
      end

      once.()
      result = %{case: name, seconds: median_of(once, min_seconds, []), check: nil}
      on_case.(result)
      result
    end
  end

  defp median_of(fun, min_seconds, samples) do
    samples = [fun.() | samples]

    if Enum.sum(samples) > min_seconds and length(samples) >= 3,
      do: samples |> Enum.sort() |> Enum.at(div(length(samples), 2)),
      else: median_of(fun, min_seconds, samples)
  end

  # the sum of the result and the sum of its absolute values, in f64
  defp check(t) do
    t = Cascade.as_type(t, :f64)

    {t |> Cascade.sum() |> Cascade.to_list(),
     t |> Cascade.abs() |> Cascade.sum() |> Cascade.to_list()}
  end

  @doc """
  The MNIST training set, prepared as `mix cascade.demo` prepares it (fetched on first use),
  or `{:error, reason}`.
  """
  def mnist(log \\ fn _ -> :ok end) do
    with {:ok, set} <- Data.prepare(Data.dir(), log: log),
         do: {:ok, set |> Data.split() |> elem(0)}
  end
end
