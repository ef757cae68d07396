defmodule Cascade.ONNXTest.Data do
  @moduledoc false
  # A node test's model and the inputs of its first data set.
  @dir Cascade.ONNX.Conformance.default_dir()

  def model(name), do: File.read!(Path.join([@dir, name, "model.onnx"]))

  def inputs(name, model) do
    set = Path.join([@dir, name, "test_data_set_0"])

    for {input, i} <- Enum.with_index(model.inputs), into: %{} do
      {:ok, proto} = Cascade.ONNX.Proto.decode_tensor(File.read!(Path.join(set, "input_#{i}.pb")))
      {:ok, t} = Cascade.ONNX.to_tensor(proto, nil)
      {input, t}
    end
  end
end

defmodule Cascade.ONNXTest do
  # Cascade.ONNX against ONNX's own backend node tests (Debian libonnx-testdata, installed by
  # script/setup), and its decoder against truncated and corrupted models.
  use ExUnit.Case, async: true
  doctest Cascade.ONNX

  alias Cascade.ONNX
  alias Cascade.ONNX.Conformance

  @dir Conformance.default_dir()
  @passing "test/support/onnx_passing.txt"
           |> File.read!()
           |> String.split("\n", trim: true)
           |> Enum.reject(&String.starts_with?(&1, "#"))

  @have_data File.dir?(@dir)
  if not @have_data,
    do: IO.puts("[onnx] #{@dir} is missing (libonnx-testdata): data tests skipped")

  import Cascade.ONNXTest.Data

  describe "the node tests" do
    @describetag skip: not @have_data

    test "every case that passed still passes, and none computes a wrong answer" do
      results = for name <- Conformance.cases(@dir), do: {name, Conformance.run_case(@dir, name)}
      by_name = Map.new(results)

      regressed =
        for name <- @passing, not match?({:pass, _, _}, by_name[name]), do: {name, by_name[name]}

      wrong = for {name, {:fail, _, detail}} <- results, do: {name, detail}
      counts = Enum.frequencies_by(results, fn {_, {kind, _, _}} -> kind end)

      IO.puts(
        "\n[onnx] #{length(results)} node tests: #{counts[:pass] || 0} pass, " <>
          "#{counts[:fail] || 0} fail, #{counts[:unsupported] || 0} unsupported"
      )

      assert regressed == []
      assert wrong == []
    end

    test "the outputs have the model's names; plain {type, shape, binary} inputs work" do
      {:ok, m} = ONNX.load(model("test_add"))
      assert m.inputs == ["x", "y"] and m.outputs == ["sum"]
      %{"x" => x, "y" => y} = inputs("test_add", m)

      plain = fn t -> {:f32, Cascade.shape(t), Cascade.to_binary(t)} end
      %{"sum" => s} = ONNX.run(m, %{"x" => plain.(x), "y" => y})
      assert Cascade.to_list(s) == Cascade.to_list(Cascade.add(x, y))
    end

    test "device: puts the weights and every node's result on that device" do
      {:ok, m} = ONNX.load(model("test_conv_with_strides_padding"), device: :cpu)
      %{"y" => y} = ONNX.run(m, inputs("test_conv_with_strides_padding", m))
      assert Cascade.device(y) == :cpu
    end

    test "an operator Cascade cannot run is refused at load, naming it and the node" do
      assert {:error, message} =
               ONNX.load(model("test_nonmaxsuppression_center_point_box_format"))

      assert message =~ "node 0"
      assert message =~ "operator NonMaxSuppression is not supported"
    end

    test "If, Loop and Scan run their bodies, which see the enclosing graph's values" do
      {:ok, m} = ONNX.load(model("test_if"))
      then_out = ONNX.run(m, %{"cond" => {:u8, {}, <<1>>}})["res"] |> Cascade.to_list()
      else_out = ONNX.run(m, %{"cond" => {:u8, {}, <<0>>}})["res"] |> Cascade.to_list()
      assert then_out == [1.0, 2.0, 3.0, 4.0, 5.0]
      assert else_out == [5.0, 4.0, 3.0, 2.0, 1.0]

      # y += x[i] for i < trip_count while cond: the carried value and the stacked scan
      {:ok, m} = ONNX.load(model("test_loop11"))

      run = fn trips, c ->
        ONNX.run(m, %{
          "trip_count" => Cascade.tensor(trips, type: :s64),
          "cond" => {:u8, {}, <<c>>},
          "y" => Cascade.tensor([-2.0])
        })
      end

      %{"res_y" => y, "res_scan" => scan} = run.(3, 1)
      assert Cascade.to_list(y) == [4.0]
      assert Cascade.to_list(scan) == [[-1.0], [1.0], [4.0]]
      # a false condition runs no iteration: the scan output would have no shape
      assert_raise ONNX.Error, ~r/node 0 \(Loop\): Loop: no iteration ran/, fn -> run.(3, 0) end

      # Range's function body: a Loop whose body reads `delta` from the enclosing graph
      name = "test_range_float_type_positive_delta_expanded"
      {:ok, m} = ONNX.load(model(name))
      scalar = &Cascade.tensor(&1, type: :f32)

      %{"output" => r} =
        ONNX.run(m, %{"start" => scalar.(1.0), "limit" => scalar.(2.0), "delta" => scalar.(0.25)})

      assert Cascade.to_list(r) == [1.0, 1.25, 1.5, 1.75]

      # running sums of the rows: the final state and every step's
      {:ok, m} = ONNX.load(model("test_scan9_sum"))
      x = Cascade.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
      %{"y" => y, "z" => z} = ONNX.run(m, %{"initial" => Cascade.tensor([0.0, 10.0]), "x" => x})
      assert Cascade.to_list(y) == [9.0, 22.0]
      assert Cascade.to_list(z) == [[1.0, 12.0], [4.0, 16.0], [9.0, 22.0]]
    end

    test "a body with an operator Cascade cannot run is refused at load, naming both nodes" do
      assert {:error, message} = ONNX.load(model("test_loop13_seq"))
      assert message == "node 0 (Loop) body, node 8: operator SequenceInsert is not supported"
    end

    test "an input of another type or shape than the graph declares raises Cascade.ONNX.Error" do
      {:ok, m} = ONNX.load(model("test_add"))
      %{"x" => x, "y" => y} = inputs("test_add", m)

      assert_raise ONNX.Error, ~r/input "x": expected f32, got f64/, fn ->
        ONNX.run(m, %{"x" => Cascade.as_type(x, :f64), "y" => y})
      end

      assert_raise ONNX.Error, ~r/input "y": expected shape \{3, 4, 5\}, got \{2\}/, fn ->
        ONNX.run(m, %{"x" => x, "y" => Cascade.tensor([1.0, 2.0])})
      end
    end

    test "a missing input raises Cascade.ONNX.Error" do
      {:ok, m} = ONNX.load(model("test_add"))

      %{"x" => x} = inputs("test_add", m)

      assert_raise ONNX.Error, ~r/the input "y" is missing/, fn ->
        ONNX.run(m, %{"x" => x})
      end
    end

    test "truncated and corrupted models give an error or a model, never a crash" do
      :rand.seed(:exsss, {7, 7, 7})

      for name <- [
            "test_conv_with_strides_padding",
            "test_gemm_all_attributes",
            "test_softmax_example",
            "test_maxpool_2d_pads",
            "test_layer_normalization_4d_axis1",
            "test_constant",
            "test_reshape_negative_dim"
          ] do
        bin = model(name)
        {:ok, good} = ONNX.load(bin)
        feed = inputs(name, good)

        cuts =
          for n <- 0..(byte_size(bin) - 1)//max(div(byte_size(bin), 200), 1),
              do: binary_part(bin, 0, n)

        flips =
          for _ <- 1..300 do
            at = :rand.uniform(byte_size(bin)) - 1
            <<head::binary-size(at), byte, tail::binary>> = bin
            <<head::binary, Bitwise.bxor(byte, :rand.uniform(255))::8, tail::binary>>
          end

        for variant <- cuts ++ flips do
          case ONNX.load(variant) do
            {:error, message} ->
              assert is_binary(message)

            {:ok, m} ->
              # a model that still parses runs or raises; either is fine, a crash is not
              try do
                ONNX.run(m, Map.take(feed, m.inputs))
              rescue
                _ -> :raised
              end
          end
        end
      end
    end
  end

  @tag skip: not @have_data
  test "truncated and corrupted tensors (the test data's .pb files) give an error or a tensor" do
    :rand.seed(:exsss, {8, 8, 8})

    bin =
      File.read!(
        Path.join([@dir, "test_conv_with_strides_padding", "test_data_set_0", "input_0.pb"])
      )

    variants =
      for(n <- 0..(byte_size(bin) - 1), do: binary_part(bin, 0, n)) ++
        for _ <- 1..300 do
          at = :rand.uniform(byte_size(bin)) - 1
          <<head::binary-size(at), byte, tail::binary>> = bin
          <<head::binary, Bitwise.bxor(byte, :rand.uniform(255))::8, tail::binary>>
        end

    for variant <- variants do
      case Cascade.ONNX.Proto.decode_tensor(variant) do
        {:error, message} ->
          assert is_binary(message)

        {:ok, proto} ->
          case ONNX.to_tensor(proto, nil) do
            {:ok, t} -> assert %Cascade.Tensor{} = t
            {:error, message} -> assert is_binary(message)
          end
      end
    end
  end

  test "a tensor Cascade cannot hold is an error, not an exception" do
    deep = %{data_type: 1, dims: List.duplicate(1, 17), data: <<0::32>>, count: 1, name: "t"}
    assert {:error, message} = ONNX.to_tensor(deep, nil)
    assert message =~ "at most 16 dimensions"

    assert {:error, "element type complex64 is not supported"} =
             ONNX.to_tensor(%{deep | data_type: 14}, nil)
  end

  test "not a model: an error naming what is wrong" do
    assert {:error, "the file is not an ONNX model: " <> _} = ONNX.load(<<0x08, 0x80>>)
    assert {:error, "the file is not an ONNX model: the model has no graph"} = ONNX.load(<<>>)
    assert {:error, "cannot read /nonexistent.onnx: " <> _} = ONNX.load("/nonexistent.onnx")
  end

  test "a bad option raises ArgumentError naming it" do
    assert_raise ArgumentError, ~r/unknown option :devcie, expected :device/, fn ->
      ONNX.load(<<>>, devcie: :cpu)
    end

    assert_raise ArgumentError, ~r/unknown device :nowhere/, fn ->
      ONNX.load(<<>>, device: :nowhere)
    end

    assert_raise ArgumentError, ~r/expected options as a keyword list, got: \[:cpu\]/, fn ->
      ONNX.load(<<>>, [:cpu])
    end
  end
end

defmodule Cascade.ONNXExplainTest do
  # explain reads the node-wide Cascade.stats/0 around each node: not async, so that no other
  # test's calls land between its readings (ExUnit runs sync modules alone)
  use ExUnit.Case, async: false
  import Cascade.ONNXTest.Data
  alias Cascade.ONNX

  @tag skip: not File.dir?(Cascade.ONNX.Conformance.default_dir())
  test "explain/2 gives each node's calls and route" do
    name = "test_layer_normalization_4d_axis1_expanded"
    {:ok, m} = ONNX.load(model(name))
    steps = ONNX.explain(m, inputs(name, m))
    assert length(steps) == length(m.graph.nodes)
    assert Enum.map(steps, & &1.op_type) == Enum.map(m.graph.nodes, & &1.op_type)

    for step <- steps do
      assert step.route in [:native, :decomposed, :cpu_fallback, :nothing_ran]
      assert Enum.all?(step.calls, &(&1.calls > 0))
    end

    assert %{native: native} = ONNX.explain_summary(steps)
    assert native > 0
    cast = Enum.find(steps, &(&1.op_type == "Cast"))
    assert Enum.any?(cast.calls, &(&1.op == :as_type))
    # without inputs: zeros of the declared types and shapes
    assert Enum.map(ONNX.explain(m), & &1.route) == Enum.map(steps, & &1.route)
  end
end
