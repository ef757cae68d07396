defmodule Cascade.ONNXPlanTest do
  # What Cascade.ONNX.load/2 plans (constants folded, products on constant weights as dense)
  # and how runs go (one recorded program per input signature, or node by node), on models
  # written by hand: each planned answer against the same graph's ops run one by one.
  use ExUnit.Case, async: true

  import Cascade.ONNXBuilder
  alias Cascade.ONNX

  defp f32(values), do: for(v <- values, into: <<>>, do: <<v::float-32-little>>)

  defp rand(n, seed) do
    :rand.seed(:exsss, {seed, seed, seed})
    for _ <- 1..n, do: :rand.uniform() - 0.5
  end

  defp close(a, b) do
    a = a |> Cascade.to_binary() |> floats()
    b = b |> Cascade.to_binary() |> floats()
    assert length(a) == length(b)
    assert Enum.zip(a, b) |> Enum.map(fn {x, y} -> abs(x - y) end) |> Enum.max() < 1.0e-5
  end

  defp floats(bin), do: for(<<x::float-32-native <- bin>>, do: x)

  test "Gemm (B transposed) + Relu is one dense node, with the reference's answer" do
    w = tensor("w", 1, [3, 4], f32(rand(12, 1)))
    b = tensor("b", 1, [3], f32([0.5, -0.5, 0.0]))

    nodes = [
      node("Gemm", ["x", "w", "b"], ["h"], [attribute("transB", {:int, 1})]),
      node("Relu", ["h"], ["y"])
    ]

    bin = model(graph(nodes, [{"x", 1, [2, 4]}], [{"y", 1, [2, 3]}], [w, b]))
    {:ok, m} = ONNX.load(bin)
    assert [%{op_type: "Dense", activation: :relu}] = m.graph.nodes

    x = Cascade.from_binary(f32(rand(8, 2)), :f32, {2, 4})
    kernel = Cascade.from_binary(f32(rand(12, 1)), :f32, {3, 4}) |> Cascade.transpose()
    bias = Cascade.from_binary(f32([0.5, -0.5, 0.0]), :f32, {3})
    want = x |> Cascade.dot(kernel) |> Cascade.add(bias) |> Cascade.relu()

    # the first run records the program, the second runs it
    for _ <- 1..2, do: close(ONNX.run(m, %{"x" => x})["y"], want)

    assert [%{op_type: "Dense", fused: ["Gemm", "Relu"]}] = ONNX.explain(m, %{"x" => x})

    assert %{nodes: 1, folded: 0, rewrites: %{"Gemm+Relu -> Dense" => 1}, runs: [run]} =
             ONNX.describe(m)

    assert %{graph: "main", signature: [{:f32, {2, 4}}], mode: {:program, 1}} = run
  end

  test "MatMul with a broadcast 2-D right operand and a bias Add is one dense node" do
    w = tensor("w", 1, [8, 6], f32(rand(48, 3)))
    b = tensor("b", 1, [6], f32(rand(6, 4)))
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Add", ["b", "h"], ["y"])]
    bin = model(graph(nodes, [{"x", 1, [5, 1, 8]}], [{"y", 1, [5, 1, 6]}], [w, b]))
    {:ok, m} = ONNX.load(bin)
    assert [%{op_type: "Dense", fused: [_, _]}] = m.graph.nodes

    x = Cascade.from_binary(f32(rand(40, 5)), :f32, {5, 1, 8})
    kernel = Cascade.from_binary(f32(rand(48, 3)), :f32, {8, 6})
    bias = Cascade.from_binary(f32(rand(6, 4)), :f32, {6})
    want = x |> Cascade.reshape({5, 8}) |> Cascade.dot(kernel) |> Cascade.add(bias)
    for _ <- 1..2, do: close(ONNX.run(m, %{"x" => x})["y"], Cascade.reshape(want, {5, 1, 6}))
  end

  test "a product whose result is also read elsewhere is not fused with what follows" do
    w = tensor("w", 1, [4, 4], f32(rand(16, 6)))
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Relu", ["h"], ["y"])]
    outs = [{"y", 1, [2, 4]}, {"h", 1, [2, 4]}]
    {:ok, m} = ONNX.load(model(graph(nodes, [{"x", 1, [2, 4]}], outs, [w])))
    assert [%{op_type: "Dense", activation: :none}, %{op_type: "Relu"}] = m.graph.nodes
  end

  test "Conv with its bias, a residual Add and Clip (ReLU6) run as one convolution step on blas" do
    w = tensor("w", 1, [4, 3, 3, 3], f32(rand(108, 7)))
    b = tensor("b", 1, [4], f32(rand(4, 8)))
    lo = tensor("lo", 1, [], f32([0.0]))
    hi = tensor("hi", 1, [], f32([0.3]))

    nodes = [
      node("Conv", ["x", "w", "b"], ["c"], [attribute("pads", {:ints, [1, 1, 1, 1]})]),
      node("Add", ["c", "r"], ["a"]),
      node("Clip", ["a", "lo", "hi"], ["y"])
    ]

    inputs = [{"x", 1, [2, 3, 9, 9]}, {"r", 1, [2, 4, 9, 9]}]
    bin = model(graph(nodes, inputs, [{"y", 1, [2, 4, 9, 9]}], [w, b, lo, hi]))
    {:ok, m} = ONNX.load(bin, device: :blas)

    x = Cascade.from_binary(f32(rand(486, 9)), :f32, {2, 3, 9, 9}, device: :blas)
    r = Cascade.from_binary(f32(rand(648, 10)), :f32, {2, 4, 9, 9}, device: :blas)
    kernel = Cascade.from_binary(f32(rand(108, 7)), :f32, {4, 3, 3, 3}, device: :blas)
    bias = Cascade.from_binary(f32(rand(4, 8)), :f32, {1, 4, 1, 1}, device: :blas)

    want =
      Cascade.conv2d(x, kernel, padding: [{1, 1}, {1, 1}])
      |> Cascade.add(bias)
      |> Cascade.add(r)
      |> Cascade.clip(0.0, 0.3)

    for _ <- 1..2, do: close(ONNX.run(m, %{"x" => x, "r" => r})["y"], want)

    # with the vector kernels (not under CASCADE_SIMD=none) the chain is the convolution's
    # epilogue: one step
    vector = Cascade.libraries(:blas)[{:add, :f32}] in ["avx512", "avx2"]
    assert %{runs: [%{mode: {:program, steps}}]} = ONNX.describe(m)
    if vector, do: assert(steps == 1), else: assert(steps > 1)
  end

  test "Conv + BatchNormalization on constants is one Conv; BatchNormalization alone an affine map" do
    w = tensor("w", 1, [2, 1, 1, 1], f32([2.0, -1.0]))
    params = [{"g", [1.5, 0.5]}, {"b", [0.1, 0.2]}, {"m", [0.3, -0.4]}, {"v", [4.0, 0.25]}]
    stats = for {name, values} <- params, do: tensor(name, 1, [2], f32(values))

    bn = fn input, output -> node("BatchNormalization", [input, "g", "b", "m", "v"], [output]) end
    nodes = [node("Conv", ["x", "w"], ["c"]), bn.("c", "y"), bn.("y", "z")]
    shape = {"x", 1, [1, 1, 2, 2]}
    out = {"z", 1, [1, 2, 2, 2]}
    {:ok, m} = ONNX.load(model(graph(nodes, [shape], [out], [w | stats])))

    assert %{
             rewrites: %{
               "Conv+BatchNormalization -> Conv" => 1,
               "BatchNormalization -> Affine" => 1
             }
           } = ONNX.describe(m)

    x = Cascade.from_binary(f32([1, 2, 3, 4]), :f32, {1, 1, 2, 2})
    c = fn v -> Cascade.from_binary(f32(v), :f32, {1, 2, 1, 1}) end

    norm = fn t ->
      t
      |> Cascade.subtract(c.([0.3, -0.4]))
      |> Cascade.divide(c.([:math.sqrt(4.0 + 1.0e-5), :math.sqrt(0.25 + 1.0e-5)]))
      |> Cascade.multiply(c.([1.5, 0.5]))
      |> Cascade.add(c.([0.1, 0.2]))
    end

    want = x |> Cascade.multiply(c.([2.0, -1.0])) |> norm.() |> norm.()
    for _ <- 1..2, do: close(ONNX.run(m, %{"x" => x})["z"], want)
  end

  test "layer normalisation written out (ReduceMean ... Add) is one layer_norm" do
    consts = [
      tensor("two", 1, [], f32([2.0])),
      tensor("eps", 1, [], f32([1.0e-5])),
      tensor("g", 1, [4], f32([1.0, 2.0, 0.5, -1.0])),
      tensor("b", 1, [4], f32([0.0, 0.1, 0.2, 0.3]))
    ]

    mean = &node("ReduceMean", [&1], [&2], [attribute("axes", {:ints, [-1]})])

    nodes = [
      mean.("x", "m"),
      node("Sub", ["x", "m"], ["d"]),
      node("Pow", ["d", "two"], ["d2"]),
      mean.("d2", "v"),
      node("Add", ["v", "eps"], ["ve"]),
      node("Sqrt", ["ve"], ["s"]),
      node("Div", ["d", "s"], ["n"]),
      node("Mul", ["n", "g"], ["ng"]),
      node("Add", ["ng", "b"], ["y"])
    ]

    shape = [3, 2, 4]
    {:ok, m} = ONNX.load(model(graph(nodes, [{"x", 1, shape}], [{"y", 1, shape}], consts)))
    assert [%{op_type: "LayerNorm", fused: fused}] = m.graph.nodes
    assert length(fused) == 9

    x = Cascade.from_binary(f32(rand(24, 9)), :f32, {3, 2, 4})
    d = Cascade.subtract(x, Cascade.mean(x, axes: [2], keep_axes: true))
    v = Cascade.mean(Cascade.multiply(d, d), axes: [2], keep_axes: true)
    n = Cascade.divide(d, Cascade.sqrt(Cascade.add(v, 1.0e-5)))
    g = Cascade.from_binary(f32([1.0, 2.0, 0.5, -1.0]), :f32, {4})
    b = Cascade.from_binary(f32([0.0, 0.1, 0.2, 0.3]), :f32, {4})
    want = n |> Cascade.multiply(g) |> Cascade.add(b)
    for _ <- 1..2, do: close(ONNX.run(m, %{"x" => x})["y"], want)

    # the mean read elsewhere too: left as it is
    outs = [{"y", 1, shape}, {"m", 1, [3, 2, 1]}]
    {:ok, m} = ONNX.load(model(graph(nodes, [{"x", 1, shape}], outs, consts)))
    assert length(m.graph.nodes) == 9
  end

  test "a value a body graph reads is not fused away" do
    w = tensor("w", 1, [2, 2], f32([1.0, -1.0, 2.0, 0.5]))
    c = tensor("c", 9, [], <<1>>)
    branch = fn out -> graph([node("Identity", ["h"], [out])], [], [{out, 1, [1, 2]}]) end

    nodes = [
      node("MatMul", ["x", "w"], ["h"]),
      node("Relu", ["h"], ["y"]),
      node("If", ["c"], ["z"], [
        attribute("then_branch", {:graph, branch.("t")}),
        attribute("else_branch", {:graph, branch.("e")})
      ])
    ]

    outs = [{"y", 1, [1, 2]}, {"z", 1, [1, 2]}]
    {:ok, m} = ONNX.load(model(graph(nodes, [{"x", 1, [1, 2]}], outs, [w, c])))

    assert [%{op_type: "Dense", activation: :none}, %{op_type: "Relu"}, %{op_type: "If"}] =
             m.graph.nodes

    x = Cascade.from_binary(f32([1.0, 1.0]), :f32, {1, 2})

    for _ <- 1..2 do
      out = ONNX.run(m, %{"x" => x})
      assert Cascade.to_list(out["z"]) == [[3.0, -0.5]]
      assert Cascade.to_list(out["y"]) == [[3.0, 0.0]]
    end
  end

  test "nodes of constants only are folded at load" do
    shape = tensor("shape", 7, [2], <<3::little-64, 2::little-64>>)

    nodes = [
      node("Constant", [], ["c"], [
        [bytes(1, "value"), bytes(5, tensor("", 1, [6], f32([1, 2, 3, 4, 5, 6]))), int(20, 4)]
      ]),
      node("Reshape", ["c", "shape"], ["r"]),
      node("Add", ["x", "r"], ["y"])
    ]

    {:ok, m} = ONNX.load(model(graph(nodes, [{"x", 1, [3, 2]}], [{"y", 1, [3, 2]}], [shape])))
    assert [%{op_type: "Add"}] = m.graph.nodes
    assert m.graph.folded == 2

    x = Cascade.from_binary(f32([0, 0, 0, 0, 0, 0]), :f32, {3, 2})
    assert ONNX.run(m, %{"x" => x})["y"] |> Cascade.to_list() == [[1, 2], [3, 4], [5, 6]]
  end

  test "a graph that reads an input's values runs node by node, each signature its own way" do
    # Reshape to a shape given as an input: its values go into Elixir
    nodes = [node("Reshape", ["x", "s"], ["y"])]

    {:ok, m} =
      ONNX.load(model(graph(nodes, [{"x", 1, [6]}, {"s", 7, [2]}], [{"y", 1, [-1, -1]}])))

    x = Cascade.from_binary(f32([1, 2, 3, 4, 5, 6]), :f32, {6})

    for {shape, want} <- [{[2, 3], {2, 3}}, {[3, 2], {3, 2}}, {[2, 3], {2, 3}}] do
      s = Cascade.from_binary(for(d <- shape, into: <<>>, do: <<d::native-64>>), :s64, {2})
      assert Cascade.shape(ONNX.run(m, %{"x" => x, "s" => s})["y"]) == want
    end

    assert %{runs: [%{mode: {:nodes, "reads a tensor's data into Elixir"}}]} = ONNX.describe(m)
  end

  test "the same file loaded again finds the programs its first load recorded" do
    nodes = [node("Relu", ["x"], ["y"])]
    bin = model(graph(nodes, [{"x", 1, [3]}], [{"y", 1, [3]}]))
    {:ok, first} = ONNX.load(bin)
    {:ok, again} = ONNX.load(bin)
    x = Cascade.from_binary(f32([-1, 0, 1]), :f32, {3})
    ONNX.run(first, %{"x" => x})
    assert %{runs: [%{mode: {:program, 1}}]} = ONNX.describe(again)
    assert ONNX.run(again, %{"x" => x})["y"] |> Cascade.to_list() == [0, 0, 1]
  end

  test "one program per input signature: another batch size records another" do
    w = tensor("w", 1, [4, 2], f32(rand(8, 7)))
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Sigmoid", ["h"], ["y"])]
    {:ok, m} = ONNX.load(model(graph(nodes, [{"x", 1, [-1, 4]}], [{"y", 1, [-1, 2]}], [w])))
    kernel = Cascade.from_binary(f32(rand(8, 7)), :f32, {4, 2})

    for n <- [1, 3, 1, 3] do
      x = Cascade.from_binary(f32(rand(4 * n, n)), :f32, {n, 4})
      close(ONNX.run(m, %{"x" => x})["y"], x |> Cascade.dot(kernel) |> Cascade.sigmoid())
    end
  end

  # LSTM, GRU with linear_before_reset (PyTorch's) and RNN run as Cascade.recurrent/6; given
  # sequence lengths (here every row the whole sequence) they run step by step: both the same
  test "recurrent nodes as one op agree with their steps run one by one" do
    {steps, batch, input, hidden} = {6, 3, 5, 4}
    x = Cascade.from_binary(f32(rand(steps * batch * input, 40)), :f32, {steps, batch, input})
    h0 = f32(rand(2 * batch * hidden, 41))

    for {op, gates, extra} <- [
          {"LSTM", 4, []},
          {"GRU", 3, [attribute("linear_before_reset", {:int, 1})]},
          {"RNN", 1, []}
        ],
        direction <- ["forward", "reverse", "bidirectional"] do
      d = if direction == "bidirectional", do: 2, else: 1
      w = tensor("w", 1, [d, gates * hidden, input], f32(rand(d * gates * hidden * input, 42)))
      r = tensor("r", 1, [d, gates * hidden, hidden], f32(rand(d * gates * hidden * hidden, 43)))
      b = tensor("b", 1, [d, 2 * gates * hidden], f32(rand(d * 2 * gates * hidden, 44)))
      lens = tensor("lens", 6, [batch], for(_ <- 1..batch, into: <<>>, do: <<steps::32-little>>))
      h = tensor("h", 1, [d, batch, hidden], binary_part(h0, 0, d * batch * hidden * 4))
      c = tensor("c", 1, [d, batch, hidden], binary_part(h0, 0, d * batch * hidden * 4))

      attrs = [
        attribute("hidden_size", {:int, hidden}),
        attribute("direction", {:string, direction})
      ]

      outs = if op == "LSTM", do: ["y", "y_h", "y_c"], else: ["y", "y_h"]
      states = if op == "LSTM", do: ["h", "c"], else: ["h"]

      run = fn lens_name ->
        nodes = [node(op, ["x", "w", "r", "b", lens_name | states], outs, attrs ++ extra)]
        out_specs = for o <- outs, do: {o, 1, []}
        inits = [w, r, b, h, c] ++ if(lens_name == "", do: [], else: [lens])

        {:ok, m} =
          ONNX.load(model(graph(nodes, [{"x", 1, [steps, batch, input]}], out_specs, inits)))

        ONNX.run(m, %{"x" => x})
      end

      one_op = run.("")
      by_steps = run.("lens")
      for o <- outs, do: close(one_op[o], by_steps[o])
      assert Cascade.shape(one_op["y"]) == {steps, d, batch, hidden}
    end
  end

  describe "recurrent operators in both directions" do
    # forward is checked by ONNX's node tests; reverse must be forward over the sequence read
    # backwards, and bidirectional the two side by side
    for op <- ["LSTM", "GRU"] do
      test op do
        op = unquote(op)
        gates = if op == "LSTM", do: 4, else: 3
        {steps, batch, input, hidden} = {5, 2, 3, 4}
        w = for d <- 0..1, do: rand(gates * hidden * input, 10 + d)
        r = for d <- 0..1, do: rand(gates * hidden * hidden, 20 + d)

        run = fn direction, ws, rs, x ->
          d = length(ws)
          wt = tensor("w", 1, [d, gates * hidden, input], f32(List.flatten(ws)))
          rt = tensor("r", 1, [d, gates * hidden, hidden], f32(List.flatten(rs)))

          attrs = [
            attribute("hidden_size", {:int, hidden}),
            attribute("direction", {:string, direction})
          ]

          nodes = [node(op, ["x", "w", "r"], ["y"], attrs)]
          ins = [{"x", 1, [steps, batch, input]}]

          {:ok, m} =
            ONNX.load(model(graph(nodes, ins, [{"y", 1, [steps, d, batch, hidden]}], [wt, rt])))

          ONNX.run(m, %{"x" => x})["y"]
        end

        x = Cascade.from_binary(f32(rand(steps * batch * input, 30)), :f32, {steps, batch, input})
        backwards = fn t -> Cascade.reverse(t, axes: [0]) end

        forward = run.("forward", [Enum.at(w, 0)], [Enum.at(r, 0)], x)
        reverse = run.("reverse", [Enum.at(w, 1)], [Enum.at(r, 1)], x)

        close(
          reverse,
          backwards.(run.("forward", [Enum.at(w, 1)], [Enum.at(r, 1)], backwards.(x)))
        )

        both = run.("bidirectional", w, r, x)
        close(Cascade.concatenate([forward, reverse], axis: 1), both)
      end
    end
  end
end
