defmodule Cascade.ONNXLoadTest do
  # What Cascade.ONNX.load/2 refuses before anything runs, on files written by hand: the
  # graph's wiring, attribute kinds, names that are not UTF-8, and arguments that are not a
  # model's path or bytes.
  use ExUnit.Case, async: true

  import Cascade.ONNXBuilder
  alias Cascade.ONNX

  @x {"x", 1, [2]}
  @y {"y", 1, [2]}

  defp load(nodes, inputs \\ [@x], outputs \\ [@y], inits \\ []),
    do: ONNX.load(model(graph(nodes, inputs, outputs, inits)))

  test "a model written by hand loads and runs" do
    assert {:ok, m} = load([node("Relu", ["x"], ["y"])])
    x = Cascade.from_binary(<<-1.0::float-32-native, 2.0::float-32-native>>, :f32, {2})
    assert %{"y" => y} = ONNX.run(m, %{"x" => x})
    assert Cascade.to_list(y) == [0.0, 2.0]
  end

  describe "the wiring is checked at load" do
    test "an input that names no value" do
      assert {:error, message} = load([node("Relu", ["nope"], ["y"])])

      assert message ==
               ~s[node 0 (Relu): its input "nope" is no graph input, initializer or output ] <>
                 "of an earlier node"
    end

    test "nodes out of order" do
      assert {:error, "node 0 (Relu): its input \"a\"" <> _} =
               load([node("Relu", ["a"], ["y"]), node("Relu", ["x"], ["a"])])
    end

    test "a value assigned twice" do
      assert {:error, message} = load([node("Relu", ["x"], ["y"]), node("Neg", ["x"], ["y"])])
      assert message =~ ~s[node 1 (Neg): its output "y" is already]
      assert {:error, _} = load([node("Relu", ["x"], ["x"])])
    end

    test "a graph output that no node computes" do
      assert {:error, ~s[the graph output "z" is computed by no node]} =
               load([node("Relu", ["x"], ["y"])], [@x], [@y, {"z", 1, [2]}])
    end

    test "initializers and optional (empty) inputs are values" do
      w = tensor("w", 1, [2], <<1.0::float-32-little, 2.0::float-32-little>>)
      assert {:ok, m} = load([node("Add", ["x", "w"], ["y"])], [@x], [@y], [w])
      assert m.inputs == ["x"]
      assert {:ok, _} = load([node("Clip", ["x", "", ""], ["y"])])
    end

    test "a body graph sees the values before its node, and its own inputs" do
      then_branch = graph([node("Identity", ["x"], ["t"])], [], [{"t", 1, [2]}])
      else_branch = graph([node("Identity", ["late"], ["e"])], [], [{"e", 1, [2]}])
      c = tensor("c", 9, [], <<1>>)

      nodes = [
        node("If", ["c"], ["y"], [
          attribute("then_branch", {:graph, then_branch}),
          attribute("else_branch", {:graph, else_branch})
        ]),
        node("Relu", ["x"], ["late"])
      ]

      assert {:error, message} = load(nodes, [@x], [@y], [c])
      assert message =~ ~s[node 0 (If) else_branch, node 0 (Identity): its input "late"]
    end
  end

  describe "attributes are checked at load" do
    test "a Conv attribute of the wrong kind names it and both kinds" do
      pads = attribute("pads", {:float, 1.0})
      w = tensor("w", 1, [1, 1, 1, 1], <<1.0::float-32-little>>)
      xs = {"x", 1, [1, 1, 2, 2]}

      assert {:error, message} = load([node("Conv", ["x", "w"], ["y"], [pads])], [xs], [xs], [w])

      assert message ==
               ~s[node 0 (Conv): its attribute "pads" must be a list of ints, the file gives a float]
    end

    test "an attribute type that ONNX does not have" do
      bad = attribute("alpha", {:code, 42, int(3, 1)})
      assert {:error, message} = load([node("LeakyRelu", ["x"], ["y"], [bad])])
      assert message =~ ~s[attribute "alpha": 42 is not an attribute type]
    end

    test "a sparse tensor attribute is refused by name" do
      sparse = attribute("sparse_value", {:code, 11, []})
      assert {:error, message} = load([node("Constant", [], ["y"], [sparse])], [], [@y])
      assert message =~ ~s[its attribute "sparse_value" is of a kind Cascade does not read]
    end
  end

  describe "messages are UTF-8" do
    test "a name that is not UTF-8 is refused" do
      assert {:error, message} = load([node("Relu", ["x"], [<<0xFF, 0xFE>>])])
      assert String.valid?(message)
      assert message =~ "not UTF-8"
    end

    test "an attribute's bytes in a message are escaped" do
      pad = node("Pad", ["x", "p"], ["y"], [attribute("mode", {:string, <<"re", 0xFF>>})])
      p = tensor("p", 7, [2], <<0::64, 0::64>>)
      assert {:error, message} = load([pad], [@x], [@y], [p])
      assert String.valid?(message)
      assert message =~ "mode re\\xFF"
    end
  end

  describe "arguments" do
    test "a path as a charlist or a string, with or without .onnx" do
      dir = System.tmp_dir!()
      path = Path.join(dir, "cascade_load_test_#{System.unique_integer([:positive])}")
      File.write!(path, model(graph([node("Relu", ["x"], ["y"])], [@x], [@y])))

      try do
        assert {:ok, %ONNX{}} = ONNX.load(path)
        assert {:ok, %ONNX{}} = ONNX.load(String.to_charlist(path))
      after
        File.rm(path)
      end

      assert {:error, "cannot read /nonexistent/m.onnx: no such file or directory"} =
               ONNX.load(~c"/nonexistent/m.onnx")
    end

    test "anything else raises ArgumentError" do
      for bad <- [nil, 42, :model, [1, -2], %{}] do
        assert_raise ArgumentError, ~r/expected a path or the bytes of an .onnx file/, fn ->
          ONNX.load(bad)
        end
      end
    end
  end
end

defmodule Cascade.ONNXBoundedLoadTest do
  # Files of many tiny fields: decoding stays within a multiple of the file's size (the decoder's
  # heap is capped), the answer is an error naming the limit, and the VM's memory, sampled every
  # millisecond, never grows by more than 4 times the file plus 64 MB. Not async: the sampler
  # reads the whole VM's memory.
  use ExUnit.Case, async: false

  import Cascade.ONNXBuilder
  alias Cascade.ONNX

  @mb 1_048_576

  # the VM's peak total memory above its level before, while fun runs
  defp peak_growth(fun) do
    :erlang.garbage_collect()
    base = :erlang.memory(:total)
    parent = self()

    sampler =
      spawn_link(fn ->
        sample = fn sample, peak ->
          receive do
            :stop -> send(parent, {:peak, peak})
          after
            1 -> sample.(sample, max(peak, :erlang.memory(:total)))
          end
        end

        sample.(sample, base)
      end)

    result = fun.()
    send(sampler, :stop)
    assert_receive {:peak, peak}, 5_000
    {result, peak - base}
  end

  defp assert_bounded(bin) do
    {result, growth} = peak_growth(fn -> ONNX.load(bin) end)
    size = byte_size(bin)

    assert growth < 4 * size + 64 * @mb,
           "peak growth #{div(growth, @mb)} MB for a file of #{div(size, @mb)} MB"

    result
  end

  @count 8_000_000

  test "8M empty nodes (16 MB)" do
    nodes = :binary.copy(<<0x0A, 0x00>>, @count)
    bin = IO.iodata_to_binary([bytes(7, nodes)])
    assert {:error, message} = assert_bounded(bin)
    assert message =~ "decoding it needs more than"
  end

  test "8M dimensions of a tensor, packed (16 MB)" do
    dims = :binary.copy(<<0x81, 0x01>>, @count)
    bin = IO.iodata_to_binary([bytes(7, bytes(5, bytes(1, dims)))])
    assert {:error, message} = assert_bounded(bin)
    assert message =~ "more than 64 dimensions"
  end

  test "an attribute of 8M ints (16 MB)" do
    ints = :binary.copy(<<0x81, 0x01>>, @count)
    node = [bytes(4, "Relu"), bytes(5, [bytes(1, "axes"), bytes(8, ints), int(20, 7)])]
    bin = IO.iodata_to_binary([bytes(7, bytes(1, node))])
    assert {:error, message} = assert_bounded(bin)
    assert message =~ "decoding it needs more than"
  end

  test "16 MB of repeated scalar fields" do
    bin = :binary.copy(<<0x08, 0x01>>, @count)
    assert {:error, message} = assert_bounded(bin)
    assert message =~ "the model has no graph"
  end
end
