if Code.ensure_loaded?(Nx) do
  defmodule Cascade.ONNXServingTest do
    # Cascade.ONNX.serving/2: an Nx.Serving over an ONNX model, inline and as a batching process,
    # each request's rows equal to the model run on them alone.
    use ExUnit.Case, async: true
    @moduletag :nx

    import Cascade.ONNXBuilder

    defp f32(values), do: for(v <- values, into: <<>>, do: <<v::float-32-little>>)

    # y = relu(x . w + b), x {batch, 4} with a dynamic batch axis
    defp model do
      w = tensor("w", 1, [4, 3], f32(for i <- 1..12, do: (i - 6) / 10))
      b = tensor("b", 1, [3], f32([0.1, -0.2, 0.3]))

      nodes = [
        node("MatMul", ["x", "w"], ["h"]),
        node("Add", ["h", "b"], ["a"]),
        node("Relu", ["a"], ["y"])
      ]

      bin = model(graph(nodes, [{"x", 1, [-1, 4]}], [{"y", 1, [-1, 3]}], [w, b]))
      {:ok, m} = Cascade.ONNX.load(bin)
      m
    end

    defp rows(n, seed), do: Nx.iota({n, 4}, type: :f32) |> Nx.add(seed) |> Nx.divide(7)

    setup_all do
      {:ok, _} = Application.ensure_all_started(:nx)
      :ok
    end

    # the model on x's rows alone: a batch of other rows may round the products otherwise
    defp alone(m, x) do
      cx = Cascade.from_binary(Nx.to_binary(x), :f32, Nx.shape(x))
      Cascade.ONNX.run(m, %{"x" => cx})["y"] |> Cascade.to_binary() |> floats()
    end

    defp floats(bin), do: for(<<v::float-32-native <- bin>>, do: v)

    defp close(y, want) do
      got = y |> Nx.to_binary() |> floats()
      assert length(got) == length(want)
      for {a, b} <- Enum.zip(got, want), do: assert(abs(a - b) <= 1.0e-6 * (1 + abs(b)))
    end

    test "run/2 gives the model's outputs, split into batches of batch_size" do
      m = model()
      serving = Cascade.ONNX.serving(m, batch_size: 2)
      x = rows(5, 1)
      %{"y" => y} = Nx.Serving.run(serving, %{"x" => x})
      assert Nx.shape(y) == {5, 3}
      close(y, alone(m, x))
    end

    test "batched_run/2 batches concurrent requests and gives each its own rows" do
      m = model()
      name = :"onnx_serving_#{System.unique_integer([:positive])}"
      serving = Cascade.ONNX.serving(m, batch_size: 8)
      start_supervised!({Nx.Serving, serving: serving, name: name, batch_timeout: 20})

      results =
        1..24
        |> Task.async_stream(
          fn k ->
            x = rows(rem(k, 3) + 1, k)
            {x, Nx.Serving.batched_run(name, %{"x" => x})["y"]}
          end,
          max_concurrency: 24
        )
        |> Enum.map(fn {:ok, r} -> r end)

      for {x, y} <- results do
        assert Nx.shape(y) == {elem(Nx.shape(x), 0), 3}
        close(y, alone(m, x))
      end
    end

    test "partitions: true runs max_concurrency batches at once on the model's device" do
      m = model()
      serving = Cascade.ONNX.serving(m, batch_size: 4, max_concurrency: 2)
      device = Cascade.Device.default()

      assert Cascade.Compiler.__partitions_options__(serving.defn_options)
             |> Enum.map(& &1[:device]) == [device, device]

      name = :"onnx_serving_#{System.unique_integer([:positive])}"

      start_supervised!(
        {Nx.Serving, serving: serving, name: name, batch_timeout: 5, partitions: true}
      )

      results =
        1..16
        |> Task.async_stream(fn k -> {k, Nx.Serving.batched_run(name, %{"x" => rows(2, k)})} end)
        |> Enum.map(fn {:ok, r} -> r end)

      for {k, %{"y" => y}} <- results, do: close(y, alone(m, rows(2, k)))

      assert_raise ArgumentError, ~r/option :max_concurrency takes a positive integer/, fn ->
        Cascade.ONNX.serving(m, max_concurrency: 0)
      end
    end

    test "preprocess and postprocess wrap each request" do
      m = model()

      serving =
        Cascade.ONNX.serving(m,
          preprocess: fn list -> %{"x" => Nx.tensor(list, type: :f32)} end,
          postprocess: fn %{"y" => y} -> Nx.to_list(y) end
        )

      assert [[_, _, _]] = Nx.Serving.run(serving, [[1.0, 2.0, 3.0, 4.0]])
    end

    test "a request that is not a map of inputs, or an unknown option, raises ArgumentError" do
      m = model()

      assert_raise ArgumentError, ~r/map of the model's inputs/, fn ->
        Nx.Serving.run(Cascade.ONNX.serving(m), Nx.iota({2, 4}))
      end

      assert_raise ArgumentError, ~r/unknown option :batch/, fn ->
        Cascade.ONNX.serving(m, batch: 4)
      end
    end
  end
end
