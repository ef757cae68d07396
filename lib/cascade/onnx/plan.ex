defmodule Cascade.ONNX.Plan do
  @moduledoc false
  # What `Cascade.ONNX.load/2` does to a checked graph once, so that each run does less:
  #
  #   * constants folded: a node whose inputs are all known at load (initializers, Constant
  #     nodes, results folded before it) runs once, at load, and its outputs join the
  #     initializers; random operators are not folded. Results over @fold_limit bytes are left
  #     to the runs (a folded value stays on the device for the model's life).
  #   * products on constant weights rewritten into Cascade's dense op (one GEMM, the bias and
  #     an activation applied as the product's blocks are computed): Gemm with B (and C)
  #     constant, B transposed once here when transB says so; MatMul by a constant 2-D B,
  #     with a following Add of a constant bias; then a Relu, Sigmoid or Tanh that is the
  #     product's only reader. MatMul's A may have any leading axes: {64, 1, 128} x
  #     {128, 384} is one 64-row product.
  #   * BatchNormalization on constant statistics folded into the Conv before it, or else an
  #     affine map with its scale and shift computed here; layer normalisation written out as
  #     nine nodes (PyTorch's and Paddle's exports) as Cascade's layer_norm.
  #   * body graphs (If, Loop, Scan) planned the same way, their initializers uploaded here
  #     instead of at each run of the body, the names they read from the graphs around them
  #     (`:free`) found, and an `:id` naming their place in the model for their programs.
  #
  # A rewrite replaces only nodes whose intermediate values nothing else reads: no other node,
  # no body graph, no graph output. A planned node is a node like the file's (inputs, outputs,
  # name, op_type, attributes) with op_type "Dense", "Affine", "LayerNorm" (domain "cascade")
  # or the Conv it was, and :fused, the file's nodes it replaces, for explain and describe.

  alias Cascade.ONNX.{Control, Ops}

  @fold_limit 64 * 1024 * 1024
  @random ~w(RandomNormal RandomUniform RandomNormalLike RandomUniformLike Bernoulli Multinomial)
  @activations %{"Relu" => :relu, "Sigmoid" => :sigmoid, "Tanh" => :tanh}

  @doc """
  The planned graph: `graph` with `:nodes` rewritten, `:values` (the initializers and folded
  constants as tensors, by name) and `:folded` (how many of the file's nodes were folded).
  `values` holds the graph's initializers already uploaded; `ctx` the opset, the device and the
  graph's `:id`.
  """
  def plan(graph, values, ctx) do
    keep = MapSet.new(graph.outputs, & &1.name)
    {nodes, values, folded} = fold(graph.nodes, values, ctx)
    {nodes, values} = fuse(nodes, values, keep)
    nodes = Enum.map(nodes, &plan_bodies(&1, ctx))
    %{graph | nodes: nodes} |> Map.merge(%{values: values, folded: folded})
  end

  ## Folding

  defp fold(nodes, values, ctx) do
    {kept, values, folded} =
      Enum.reduce(nodes, {[], values, 0}, fn node, {kept, values, folded} ->
        case fold_node(node, values, ctx) do
          {:ok, results} ->
            {kept, Cascade.ONNX.bind(values, node.outputs, results), folded + 1}

          :keep ->
            {[node | kept], values, folded}
        end
      end)

    {Enum.reverse(kept), values, folded}
  end

  defp fold_node(node, values, ctx) do
    inputs = Enum.reject(node.inputs, &(&1 == ""))

    if node.op_type in @random or node.op_type in Control.names() or
         not Enum.all?(inputs, &Map.has_key?(values, &1)) do
      :keep
    else
      args = Enum.map(node.inputs, &if(&1 == "", do: nil, else: Map.fetch!(values, &1)))
      node_ctx = Map.put(ctx, :outputs, length(node.outputs))

      try do
        results = Ops.run(node.op_type, args, node.attributes, node_ctx)

        if length(results) >= Enum.count(node.outputs, &(&1 != "")) and
             Enum.all?(results, &small?/1),
           do: {:ok, results},
           else: :keep
      rescue
        # the runs raise it again, naming the node, as they would without folding
        _ -> :keep
      end
    end
  end

  defp small?(%Cascade.Tensor{} = t),
    do: Tuple.product(Cascade.shape(t)) * Cascade.Type.byte_size(Cascade.type(t)) <= @fold_limit

  defp small?(_), do: false

  ## Rewrites on constant weights

  defp fuse(nodes, values, keep) do
    # a body graph's reads of this graph's values count as its node's
    readers =
      Enum.reduce(nodes, %{}, fn node, acc ->
        bodies = for {_, {:graph, g}} <- node.attributes, is_map(g), name <- free(g), do: name
        Enum.reduce(node.inputs ++ bodies, acc, &Map.update(&2, &1, 1, fn n -> n + 1 end))
      end)

    # read by `n` nodes (the next one, by default) and not a graph output
    private? = fn name, n -> Map.get(readers, name, 0) == n and not MapSet.member?(keep, name) end
    rewrite(nodes, values, &private?.(&1, 1), [], private?)
  end

  defp rewrite([], values, _private?, acc, _read_by), do: {Enum.reverse(acc), values}

  defp rewrite([node | rest] = nodes, values, private?, acc, read_by) do
    cond do
      dense = dense(node, values) ->
        {dense, rest} = absorb(dense, rest, values, private?)
        rewrite(rest, values, private?, [dense | acc], read_by)

      found = batch_norm(node, rest, values, private?) ->
        {node, rest, values} = found
        rewrite(rest, values, private?, [node | acc], read_by)

      found = layer_norm(nodes, values, read_by) ->
        {node, rest} = found
        rewrite(rest, values, private?, [node | acc], read_by)

      true ->
        rewrite(rest, values, private?, [node | acc], read_by)
    end
  end

  ## Layer normalisation written out (PyTorch's and Paddle's exports before opset 17)

  # ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta over the last
  # axis, in a row, each intermediate read only inside the pattern: Cascade's layer_norm op, one
  # pass (as ONNX Runtime's fusion does)
  defp layer_norm([r1, sub, pow, r2, add, sqrt, div, mul, add2 | rest], values, read_by) do
    const = fn name -> Map.get(values, name) end
    scalar = fn name -> scalar_value(const.(name)) end

    chain = [r1, sub, pow, r2, add, sqrt, div, mul, add2]

    with true <-
           Enum.map(chain, & &1.op_type) == ~w(ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul Add),
         true <- Enum.all?(chain, &match?([_], &1.outputs)),
         [m, d, d2, v, ve, s, n, ng, _] = Enum.map(chain, &hd(&1.outputs)),
         [x] <- r1.inputs,
         true <- last_axis_mean?(r1) and last_axis_mean?(r2),
         [^x, ^m] <- sub.inputs,
         [^d, two] <- pow.inputs,
         2.0 <- scalar.(two),
         [^d2] <- r2.inputs,
         eps when is_float(eps) <- scalar.(other_input(add, v)),
         [^ve] <- sqrt.inputs,
         [^d, ^s] <- div.inputs,
         %Cascade.Tensor{} = gamma <- const.(other_input(mul, n)),
         %Cascade.Tensor{} = beta <- const.(other_input(add2, ng)),
         {c} <- Cascade.shape(gamma),
         {^c} <- Cascade.shape(beta),
         true <- read_by.(d, 2) and Enum.all?([m, d2, v, ve, s, n, ng], &read_by.(&1, 1)) do
      fields = %{gamma: gamma, beta: beta, epsilon: eps}
      {planned("LayerNorm", x, chain, fields), rest}
    else
      _ -> nil
    end
  end

  defp layer_norm(_nodes, _values, _read_by), do: nil

  defp last_axis_mean?(%{inputs: [_], attributes: attrs}),
    do: Ops.attr(attrs, "axes", nil) == [-1] and Ops.attr(attrs, "keepdims", 1) == 1

  defp last_axis_mean?(_node), do: false

  # the input of a two-input node that is not `name` (nil when both or neither are)
  defp other_input(%{inputs: [a, b]}, name) when a == name and b != name, do: b
  defp other_input(%{inputs: [a, b]}, name) when b == name and a != name, do: a
  defp other_input(_node, _name), do: nil

  # a constant's one value, as a float; nil for anything else
  defp scalar_value(%Cascade.Tensor{} = t) do
    if Cascade.size(t) == 1, do: t |> Cascade.to_binary() |> first_float(Cascade.type(t))
  end

  defp scalar_value(_other), do: nil

  defp first_float(bin, type) do
    case Cascade.Type.normalize!(type) do
      :f32 -> with <<v::float-32-native>> <- bin, do: v
      :f64 -> with <<v::float-64-native>> <- bin, do: v
      _ -> nil
    end
  end

  ## BatchNormalization at inference on constant statistics

  # Into the Conv before it, when the Conv's weights (and bias) are constants and BN is the only
  # reader of its result: W' = W * s per output channel, B' = (B - mean) * s + beta, where
  # s = gamma / sqrt(var + epsilon), computed once here in the weights' type (as ONNX Runtime's
  # fusion does). On its own: y = x * s + t with s and t computed here ("Affine").
  defp batch_norm(
         %{op_type: "Conv", inputs: [_x, w | b], outputs: [y]} = conv,
         [bn | rest],
         values,
         private?
       ) do
    with %Cascade.Tensor{} = weights <- Map.get(values, w),
         true <- b in [[], [""]] or match?(%Cascade.Tensor{}, Map.get(values, hd(b))),
         "BatchNormalization" <- bn.op_type,
         [^y | _] <- bn.inputs,
         true <- private?.(y),
         {s, t} <- bn_constants(bn, values) do
      o = elem(Cascade.shape(weights), 0)
      per_out = List.to_tuple([o | List.duplicate(1, tuple_size(Cascade.shape(weights)) - 1)])
      w2 = Cascade.multiply(weights, Cascade.reshape(s, per_out))

      bias =
        if b in [[], [""]],
          do: Cascade.full(0, {o}, type: Cascade.type(s)),
          else: Map.fetch!(values, hd(b))

      b2 = Cascade.add(Cascade.multiply(bias, s), t)
      {wn, bn_name} = {"cascade.fold:#{y}:w", "cascade.fold:#{y}:b"}
      values = values |> Map.put(wn, w2) |> Map.put(bn_name, b2)

      node =
        Map.merge(conv, %{
          inputs: [hd(conv.inputs), wn, bn_name],
          outputs: bn.outputs,
          fused: [conv, bn]
        })

      {node, rest, values}
    else
      _ -> nil
    end
  end

  defp batch_norm(
         %{op_type: "BatchNormalization", inputs: [x | _], outputs: [_]} = bn,
         rest,
         values,
         _private?
       ) do
    case bn_constants(bn, values) do
      {s, t} ->
        {planned("Affine", x, [bn], %{scale: s, shift: t}), rest, values}

      nil ->
        nil
    end
  end

  defp batch_norm(_node, _rest, _values, _private?), do: nil

  # {s, t} of an inference BatchNormalization whose four inputs are constants of one shape {C}
  defp bn_constants(%{inputs: [_x | params], outputs: [_]} = bn, values)
       when length(params) == 4 do
    with false <- Ops.attr(bn.attributes, "training_mode", 0) == 1,
         [%Cascade.Tensor{} = gamma, beta, mean, var] <- Enum.map(params, &Map.get(values, &1)),
         true <- Enum.all?([beta, mean, var], &match?(%Cascade.Tensor{}, &1)),
         {c} <- Cascade.shape(gamma),
         true <- Enum.all?([beta, mean, var], &(Cascade.shape(&1) == {c})) do
      eps = Ops.attr(bn.attributes, "epsilon", 1.0e-5)
      s = Cascade.multiply(gamma, Cascade.rsqrt(Cascade.add(var, eps)))
      {s, Cascade.subtract(beta, Cascade.multiply(mean, s))}
    else
      _ -> nil
    end
  end

  defp bn_constants(_bn, _values), do: nil

  # Gemm (A not transposed, alpha and beta 1) or MatMul by constant 2-D weights as Dense
  defp dense(%{op_type: "Gemm", inputs: [a, b | c]} = node, values) do
    attrs = node.attributes

    with true <- Ops.attr(attrs, "transA", 0) == 0,
         true <- Ops.attr(attrs, "alpha", 1.0) == 1.0 and Ops.attr(attrs, "beta", 1.0) == 1.0,
         %Cascade.Tensor{} = w <- Map.get(values, b),
         2 <- tuple_size(Cascade.shape(w)) do
      kernel = if Ops.attr(attrs, "transB", 0) == 1, do: Cascade.transpose(w), else: w

      case c do
        c when c in [[], [""]] -> dense_node(node, a, kernel, nil)
        [c] -> if bias = bias(Map.get(values, c), kernel), do: dense_node(node, a, kernel, bias)
      end
    else
      _ -> nil
    end
  end

  defp dense(%{op_type: "MatMul", inputs: [a, b]} = node, values) do
    with %Cascade.Tensor{} = w <- Map.get(values, b),
         2 <- tuple_size(Cascade.shape(w)) do
      dense_node(node, a, w, nil)
    else
      _ -> nil
    end
  end

  defp dense(_node, _values), do: nil

  defp dense_node(node, a, kernel, bias),
    do: planned("Dense", a, [node], %{kernel: kernel, bias: bias, activation: :none})

  # A node of Cascade's own reading `input`, in place of the file's `fused` nodes: their first
  # one's name, their last one's outputs, and the op's own fields
  defp planned(op_type, input, fused, fields) do
    Map.merge(fields, %{
      inputs: [input],
      outputs: List.last(fused).outputs,
      name: hd(fused).name,
      op_type: op_type,
      domain: "cascade",
      attributes: %{},
      fused: fused
    })
  end

  # The nodes after a Dense that read only its result: a constant bias Add (when it has none),
  # then one activation
  defp absorb(%{outputs: [y]} = d, [next | rest] = nodes, values, private?) do
    bias = if next.op_type == "Add" and d.bias == nil, do: bias_of(next, y, values, d)

    cond do
      not private?.(y) or d.activation != :none ->
        {d, nodes}

      bias != nil ->
        d = %{d | bias: bias, outputs: next.outputs, fused: d.fused ++ [next]}
        absorb(d, rest, values, private?)

      Map.has_key?(@activations, next.op_type) and next.inputs == [y] ->
        activation = @activations[next.op_type]
        {%{d | activation: activation, outputs: next.outputs, fused: d.fused ++ [next]}, rest}

      true ->
        {d, nodes}
    end
  end

  defp absorb(d, nodes, _values, _private?), do: {d, nodes}

  # The other operand of Add(y, bias) when it is a constant bias for the kernel; after a
  # MatMul, whose A may be 1-D, of shape {out} only
  defp bias_of(add, y, values, d) do
    b = Map.get(values, other_input(add, y))

    cond do
      hd(d.fused).op_type == "MatMul" and match?(%Cascade.Tensor{}, b) and
          tuple_size(Cascade.shape(b)) != 1 ->
        nil

      true ->
        bias(b, d.kernel)
    end
  end

  # A constant of shape {out} (or {1, out}, which a 2-D product broadcasts the same way) as the
  # {out} bias of dense; nil for anything else
  defp bias(%Cascade.Tensor{} = b, kernel) do
    {_in, out} = Cascade.shape(kernel)

    case Cascade.shape(b) do
      {^out} -> b
      {1, ^out} -> Cascade.reshape(b, {out})
      _ -> nil
    end
  end

  defp bias(_other, _kernel), do: nil

  @doc "Runs a planned node on its inputs' tensors (a fused Conv as the Conv it is)."
  def run(%{op_type: "Affine"} = node, [x], _ctx) do
    per_channel =
      List.to_tuple([
        1,
        Cascade.size(node.scale) | List.duplicate(1, tuple_size(Cascade.shape(x)) - 2)
      ])

    [
      x
      |> Cascade.multiply(Cascade.reshape(node.scale, per_channel))
      |> Cascade.add(Cascade.reshape(node.shift, per_channel))
    ]
  end

  def run(%{op_type: "Conv"} = node, args, ctx), do: Ops.run("Conv", args, node.attributes, ctx)

  def run(%{op_type: "LayerNorm"} = node, [x], _ctx) do
    axis = tuple_size(Cascade.shape(x)) - 1
    [Cascade.layer_norm(x, node.gamma, node.beta, axes: [axis], epsilon: node.epsilon)]
  end

  def run(%{op_type: "Dense"} = node, [x], _ctx) do
    [Cascade.dense(x, node.kernel, node.bias || 0.0, activation: node.activation)]
  end

  ## Body graphs

  # The names a body reads from the graphs around it: read by its nodes (or their bodies) or
  # given as its outputs, and neither its inputs, its constants nor its nodes' outputs
  defp free(graph) do
    constants = Enum.map(graph.initializers, & &1.name) ++ Map.keys(Map.get(graph, :values, %{}))
    own = MapSet.new(Enum.map(graph.inputs, & &1.name) ++ constants)

    {read, own} =
      Enum.reduce(graph.nodes, {[], own}, fn node, {read, own} ->
        inner =
          for {_, {:graph, g}} <- Map.get(node, :attributes, %{}),
              is_map(g),
              do: Map.get(g, :free) || free(g)

        names =
          Enum.reject(node.inputs ++ List.flatten(inner), &(&1 == "" or MapSet.member?(own, &1)))

        {names ++ read, Enum.reduce(node.outputs, own, &MapSet.put(&2, &1))}
      end)

    outputs = for %{name: n} <- graph.outputs, not MapSet.member?(own, n), do: n
    Enum.uniq(Enum.reverse(read) ++ outputs)
  end

  defp plan_bodies(node, ctx) do
    if node.op_type in Control.names() do
      attributes =
        Map.new(node.attributes, fn
          {name, {:graph, g}} when is_map(g) ->
            # the body's programs are cached under its place in the model
            id = {ctx.id, hd(node.outputs ++ [""]), name}
            {name, {:graph, plan_body(g, %{ctx | id: id})}}

          other ->
            other
        end)

      %{node | attributes: attributes}
    else
      node
    end
  end

  defp plan_body(graph, ctx) do
    case Cascade.ONNX.upload(graph.initializers, ctx.device) do
      {:ok, values} ->
        planned = plan(graph, values, ctx)
        Map.merge(planned, %{id: ctx.id, free: free(planned)})

      # the runs raise the initializer's error, naming it
      {:error, _} ->
        graph
    end
  end
end
