# A real client's training loop: Axon 0.6's Axon.Loop trains the MNIST digits of the demo
# (Cascade.Demo.Data: 8,000 for training, 2,000 held out) on Cascade.Backend, its step run by
# Nx.Defn.Evaluator or compiled by Cascade.Compiler. bench/axon_train.sh runs both and the same
# models in PyTorch on the same batches, in one run.
#
#   MIX_ENV=test CASCADE_NX_PATH=... CASCADE_AXON_PATH=... CASCADE_POLARIS_PATH=... \
#     mix run bench/axon_train.exs mlp|cnn evaluator|compiler [epochs] [batches file]
#
# The models are the demo's (Cascade.Demo.MLP's 784 -> 256 -> 10 and Cascade.Demo.CNN):
#   mlp: dense 256, relu, dense 10
#   cnn: conv 32 3x3, relu, max_pool 2, conv 64 3x3, relu, max_pool 2, flatten, dense 128, relu,
#        dense 10
# trained with softmax cross-entropy and Polaris's Adam (learning rate 1e-3), batch 32, the
# batches in the order the file gives (it is written on the first run, with a fixed shuffle, so
# that every run and PyTorch's read the same). Prints each epoch's seconds (the first includes
# compiling the step), then the held-out accuracy.

unless Code.ensure_loaded?(Axon) do
  IO.puts(:stderr, "bench/axon_train.exs needs Axon and Polaris: see bench/axon_train.sh")
  System.halt(2)
end

defmodule Bench.AxonTrain do
  @batch 32

  # The batches file: u32 little-endian counts (train, test), then the train images (u8, 784
  # each, in batch order), their labels (u8), the test images and labels.
  def batches_file(path) do
    unless File.exists?(path) do
      {:ok, set} = Cascade.Demo.Data.prepare(Cascade.Demo.Data.dir(), log: &IO.puts/1)
      {train, test} = Cascade.Demo.Data.split(set)
      order = Enum.sort_by(0..(train.count - 1), &:erlang.phash2({&1, :bench_axon_train}))
      train = Cascade.Demo.Data.subset(train, order)
      File.mkdir_p!(Path.dirname(path))

      File.write!(path, [
        <<train.count::32-little, test.count::32-little>>,
        train.images,
        train.labels,
        test.images,
        test.labels
      ])
    end

    <<n::32-little, m::32-little, rest::binary>> = File.read!(path)

    <<train_x::binary-size(n * 784), train_y::binary-size(n), test_x::binary-size(m * 784),
      test_y::binary-size(m)>> = rest

    {{train_x, train_y, n}, {test_x, test_y, m}}
  end

  def model(:mlp) do
    Axon.input("input", shape: {nil, 784})
    |> Axon.dense(256, activation: :relu)
    |> Axon.dense(10, activation: :softmax)
  end

  def model(:cnn) do
    Axon.input("input", shape: {nil, 28, 28, 1})
    |> Axon.conv(32, kernel_size: 3, activation: :relu)
    |> Axon.max_pool(kernel_size: 2)
    |> Axon.conv(64, kernel_size: 3, activation: :relu)
    |> Axon.max_pool(kernel_size: 2)
    |> Axon.flatten()
    |> Axon.dense(128, activation: :relu)
    |> Axon.dense(10, activation: :softmax)
  end

  def images(kind, bytes, count) do
    x = bytes |> Nx.from_binary(:u8) |> Nx.as_type(:f32) |> Nx.divide(255.0)
    if kind == :cnn, do: Nx.reshape(x, {count, 28, 28, 1}), else: Nx.reshape(x, {count, 784})
  end

  def one_hot(labels), do: Nx.equal(Nx.new_axis(labels, -1), Nx.iota({1, 10}))

  def run(kind, compiler, epochs, path) do
    # the test environment (Axon is a test dependency) makes :cpu the default; the application's
    # default is the fast host device, as a user gets it
    Cascade.put_default_device(:host)
    Nx.global_default_backend(Cascade.Backend)
    Cascade.put_fallback_policy(:error)
    {{train_x, train_y, n}, {test_x, test_y, m}} = batches_file(path)
    full = div(n, @batch) * @batch
    x = images(kind, binary_part(train_x, 0, full * 784), full)
    y = train_y |> binary_part(0, full) |> Nx.from_binary(:u8) |> one_hot() |> Nx.as_type(:f32)
    batches = Enum.zip(Nx.to_batched(x, @batch), Nx.to_batched(y, @batch))

    me = self()

    loop =
      kind
      |> model()
      |> Axon.Loop.trainer(
        :categorical_cross_entropy,
        Polaris.Optimizers.adam(learning_rate: 1.0e-3),
        seed: 0,
        log: 0
      )
      |> Axon.Loop.handle_event(:epoch_completed, fn state ->
        send(me, {:epoch, System.monotonic_time()})
        {:continue, state}
      end)

    t0 = System.monotonic_time()
    params = Axon.Loop.run(loop, batches, %{}, epochs: epochs, compiler: compiler)

    seconds =
      for _ <- 1..epochs do
        receive do
          {:epoch, t} -> t
        end
      end
      |> Enum.map_reduce(t0, fn t, prev ->
        {System.convert_time_unit(t - prev, :native, :microsecond) / 1.0e6, t}
      end)
      |> elem(0)

    {_, predict} = Axon.build(model(kind), compiler: compiler)
    predicted = predict.(params, images(kind, test_x, m)) |> Nx.argmax(axis: 1)
    labels = Nx.from_binary(test_y, :u8)
    accuracy = Nx.equal(predicted, labels) |> Nx.mean() |> Nx.to_number()
    fallbacks = for {{_, op, :cpu_fallback}, _} <- Cascade.stats(), do: op

    name = if compiler == Cascade.Compiler, do: "Cascade.Compiler", else: "Nx.Defn.Evaluator"

    IO.puts(
      "Axon #{kind} on Cascade.Backend, #{name}: epoch seconds " <>
        Enum.map_join(seconds, " ", &:erlang.float_to_binary(&1, decimals: 2)) <>
        " (#{div(full, @batch)} batches of #{@batch}, device #{inspect(Cascade.Device.default())}); held-out accuracy " <>
        "#{:erlang.float_to_binary(accuracy * 100, decimals: 2)} %; fallbacks #{inspect(fallbacks)}"
    )
  end
end

[kind, compiler | rest] = System.argv() ++ [nil, nil]
kind = if kind == "cnn", do: :cnn, else: :mlp
compiler = if compiler == "evaluator", do: Nx.Defn.Evaluator, else: Cascade.Compiler
epochs = String.to_integer(Enum.at(rest, 0) || "2")
path = Enum.at(rest, 1) || "_build/bench/axon_batches.bin"
Bench.AxonTrain.run(kind, compiler, epochs, path)
