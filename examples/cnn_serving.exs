# The main job's digit classifier behind Nx.Serving: trains Cascade.Demo.CNN for a few epochs
# on the MNIST digits `script/tour` fetched (8,000 to train), serves it with batches of up to
# 64 digits, and sends each of the 2,000 held-out digits as its own request from 64
# concurrent clients. Prints the accuracy through the serving (the same as the model's on the
# whole set at once) and the requests per second with their latencies.
#
#   CASCADE_NX_PATH=/path/to/nx mix run examples/cnn_serving.exs [epochs] [device]
#
# Needs Nx (see guides/nx.md) and the digits (script/tour fetches them once).
alias Cascade.Demo.{CNN, Data, Training}

{epochs, device} =
  case System.argv() do
    [] -> {3, Cascade.Device.host()}
    [e] -> {String.to_integer(e), Cascade.Device.host()}
    [e, d | _] -> {String.to_integer(e), String.to_atom(d)}
  end

{:ok, _} = Application.ensure_all_started(:nx)

{:ok, set} = Data.prepare(Data.dir())
{train, test} = Data.split(set)

IO.puts("training the CNN for #{epochs} epochs on #{train.count} digits (#{inspect(device)})")

opts =
  Training.defaults()
  |> Keyword.merge(Training.model_defaults(:cnn))
  |> Keyword.merge(model: :cnn, device: device, epochs: epochs)

%{params: params} = Training.run(train, %{test | count: 0, images: "", labels: ""}, opts)

# The serving: each batch is the requests' digits {n, 784} (f32 in [0, 1]) stacked by
# Nx.Serving; the model runs on Cascade tensors and the classes come back as an Nx tensor.
# A batch is padded with zero rows to the next power of two: blas times its convolution paths
# once per shape, so 7 shapes instead of 64.
serving =
  Nx.Serving.new(fn _defn_options ->
    fn %Nx.Batch{size: n} = batch ->
      {x, nil} = Nx.LazyContainer.traverse(batch, nil, fn _, fun, nil -> {fun.(), nil} end)
      rows = 2 ** ceil(:math.log2(max(n, 1)))
      padding = :binary.copy(<<0::float-32-native>>, (rows - n) * 784)

      classes =
        (Nx.to_binary(x) <> padding)
        |> Cascade.from_binary(:f32, {rows, 784}, device: device)
        |> then(&CNN.predict(params, &1))
        |> Cascade.slice([0], [n])

      Nx.from_binary(Cascade.to_binary(classes), :s64)
    end
  end)

{:ok, _} = Nx.Serving.start_link(serving: serving, name: Digits, batch_size: 64, batch_timeout: 2)

pixels = for <<p <- test.images>>, into: <<>>, do: <<p / 255::float-32-native>>
labels = :binary.bin_to_list(test.labels)

requests =
  for i <- 0..(test.count - 1) do
    Nx.from_binary(binary_part(pixels, i * 784 * 4, 784 * 4), :f32) |> Nx.reshape({1, 784})
  end

started = System.monotonic_time()

answers =
  requests
  |> Enum.zip(labels)
  |> Task.async_stream(
    fn {x, label} ->
      t0 = System.monotonic_time()
      [class] = Nx.Serving.batched_run(Digits, Nx.Batch.concatenate([x])) |> Nx.to_flat_list()

      {class == label,
       System.convert_time_unit(System.monotonic_time() - t0, :native, :microsecond)}
    end,
    max_concurrency: 64,
    ordered: false
  )
  |> Enum.map(fn {:ok, answer} -> answer end)

seconds =
  System.convert_time_unit(System.monotonic_time() - started, :native, :microsecond) / 1.0e6

latencies = answers |> Enum.map(&elem(&1, 1)) |> Enum.sort() |> List.to_tuple()

pct = fn p ->
  elem(latencies, min(tuple_size(latencies) - 1, trunc(p * tuple_size(latencies)))) / 1000
end

{x_test, y_test} = Training.tensors(test, :f32, device)
whole = Training.accuracy(CNN, params, x_test, y_test)
served = Enum.count(answers, &elem(&1, 0)) / test.count

IO.puts("""
#{test.count} held-out digits, one request each, 64 clients:
  accuracy through the serving #{Float.round(served * 100, 2)} % (the model on the whole set at once: #{Float.round(whole * 100, 2)} %)
  #{round(test.count / seconds)} requests/s, latency p50 #{Float.round(pct.(0.5), 2)} ms, p99 #{Float.round(pct.(0.99), 2)} ms
""")
