defmodule Cascade.ONNX.Ops do
  @moduledoc false
  # ONNX operators (default domain, opsets 7-17) as Cascade ops. Each takes the node's inputs
  # (tensors, nil for an omitted optional one), its attributes (%{name => {kind, value}}) and
  # the context (opset, device), and returns the list of its outputs. Numpy-style broadcasting
  # is Cascade's own.

  alias Cascade.ONNX.Error

  @unary %{
    "Abs" => &Cascade.abs/1,
    "Neg" => &Cascade.negate/1,
    "Exp" => &Cascade.exp/1,
    "Log" => &Cascade.log/1,
    "Sqrt" => &Cascade.sqrt/1,
    "Reciprocal" => &Cascade.reciprocal/1,
    "Floor" => &Cascade.floor/1,
    "Ceil" => &Cascade.ceil/1,
    "Sigmoid" => &Cascade.sigmoid/1,
    "Tanh" => &Cascade.tanh/1,
    "Relu" => &__MODULE__.relu/1,
    "Erf" => &Cascade.erf/1,
    "Sin" => &Cascade.sin/1,
    "Cos" => &Cascade.cos/1,
    "Sign" => &Cascade.sign/1,
    "Not" => &Cascade.logical_not/1,
    "Softplus" => &Cascade.softplus/1
  }

  @binary %{
    "Add" => &Cascade.add/2,
    "Sub" => &Cascade.subtract/2,
    "Mul" => &Cascade.multiply/2,
    "Equal" => &Cascade.equal/2,
    "Less" => &Cascade.less/2,
    "Greater" => &Cascade.greater/2,
    "LessOrEqual" => &Cascade.less_equal/2,
    "GreaterOrEqual" => &Cascade.greater_equal/2,
    "And" => &Cascade.logical_and/2,
    "Or" => &Cascade.logical_or/2,
    "Xor" => &Cascade.logical_xor/2
  }

  @variadic %{"Max" => &Cascade.max/2, "Min" => &Cascade.min/2, "Sum" => &Cascade.add/2}

  @reductions %{
    "ReduceSum" => :sum,
    "ReduceMean" => :mean,
    "ReduceMax" => :reduce_max,
    "ReduceMin" => :reduce_min,
    "ReduceProd" => :product,
    "ReduceSumSquare" => :sum_square,
    "ReduceL1" => :l1,
    "ReduceL2" => :l2,
    "ReduceLogSum" => :log_sum,
    "ReduceLogSumExp" => :logsumexp
  }

  @others ~w(Identity Dropout Div Mod Pow Mean Where PRelu LeakyRelu Elu Selu Celu HardSigmoid HardSwish
             Softsign MatMul Gemm Softmax LogSoftmax Reshape Flatten Transpose Squeeze Unsqueeze
             Concat Cast CastLike Constant Shape Size Expand Gather Slice ConstantOfShape Range
             ArgMax ArgMin Conv MaxPool AveragePool GlobalAveragePool GlobalMaxPool
             BatchNormalization LayerNormalization Clip Tile NegativeLogLikelihoodLoss
             SoftmaxCrossEntropyLoss Trilu GatherElements Split CumSum Hardmax Round OneHot IsInf
             IsNaN ThresholdedRelu EyeLike Pad DepthToSpace SpaceToDepth Tan Atan Sinh Cosh Asinh
             Acosh Atanh Asin Acos Shrink InstanceNormalization LRN Compress GatherND ConvTranspose
             Einsum Resize Upsample HannWindow HammingWindow BlackmanWindow
             MeanVarianceNormalization ReverseSequence TopK ScatterElements Scatter ScatterND
             QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger
             QLinearMatMul QLinearConv RNN GRU LSTM GridSample DFT MaxUnpool BitShift Det
             Adagrad Adam Momentum)

  @names Enum.sort(
           Map.keys(@unary) ++
             Map.keys(@binary) ++
             Map.keys(@variadic) ++
             Map.keys(@reductions) ++ @others
         )

  def names, do: @names
  def supported?(op), do: op in @names

  @doc """
  Why a node cannot run, from what is known before running it (its attributes and the number
  of its inputs and outputs), or nil.
  """
  def unsupported(%{op_type: op, attributes: attrs} = node, ranks \\ %{}) do
    outputs = Enum.count(node.outputs, &(&1 != ""))
    input_rank = Map.get(ranks, List.first(node.inputs))
    spatial = op in ["Conv", "ConvTranspose", "MaxPool", "AveragePool"]

    cond do
      spatial and input_rank != nil and input_rank not in [3, 4, 5] ->
        "#{input_rank - 2}-D input (1-D, 2-D and 3-D only)"

      spatial and length(attr(attrs, "kernel_shape", [1, 1])) not in [1, 2, 3] ->
        "#{length(attr(attrs, "kernel_shape", []))}-D kernels (1-D, 2-D and 3-D only)"

      op == "AveragePool" and attr(attrs, "ceil_mode", 0) != 0 and
          attr(attrs, "count_include_pad", 0) != 0 ->
        "ceil_mode and count_include_pad together"

      op == "MaxPool" and length(attr(attrs, "kernel_shape", [])) == 3 and
          (Enum.any?(attr(attrs, "dilations", []), &(&1 != 1)) or outputs > 1) ->
        "dilations or the Indices output in 3-D"

      op == "BatchNormalization" and outputs > 3 ->
        "the saved mean and variance outputs (opsets before 14)"

      op == "Dropout" and Enum.at(node.inputs, 2, "") != "" ->
        "training_mode (random masks)"

      op == "ScatterElements" and attr(attrs, "reduction", "none") not in ["none", "add"] ->
        "reduction #{attr(attrs, "reduction", "")}"

      op == "ScatterND" and attr(attrs, "reduction", "none") not in ["none", "add", "mul"] ->
        "reduction #{attr(attrs, "reduction", "")}"

      op in ["RNN", "GRU", "LSTM"] and
          attr(attrs, "direction", "forward") not in ["forward", "reverse", "bidirectional"] ->
        "direction #{attr(attrs, "direction", "")}"

      op in ["RNN", "GRU", "LSTM"] and
          (attr(attrs, "activations", nil) != nil or attr(attrs, "clip", nil) != nil or
             attr(attrs, "input_forget", 0) != 0) ->
        "activations, clip or input_forget other than the defaults"

      op == "Pad" and attr(attrs, "mode", "constant") not in ["constant", "edge", "reflect"] ->
        "mode #{attr(attrs, "mode", "")}"

      true ->
        nil
    end
  end

  ## Attributes

  @doc false
  # An attribute's value, or the default when the node does not set it (also for Control).
  def attr(attrs, name, default) do
    case Map.get(attrs, name) do
      nil -> default
      {_kind, value} -> value
    end
  end

  @doc false
  def fail(message), do: raise(Error, message: message)

  # The values of a small tensor (a shape, axes, a scalar bound) as a list.
  @doc false
  def values(nil), do: nil
  def values(t), do: t |> Cascade.to_list() |> List.wrap() |> List.flatten()

  @doc false
  def rank(t), do: tuple_size(Cascade.shape(t))
  @doc false
  def dims(t), do: Tuple.to_list(Cascade.shape(t))

  @doc false
  def axis(a, rank) when a < 0, do: a + rank
  def axis(a, _rank), do: a

  @doc false
  def float?(t), do: Cascade.Type.float?(Cascade.type(t))

  @doc false
  def type_atom(t), do: Cascade.Type.normalize!(Cascade.type(t))

  # The operators whose code lives in a module of their family (lib/cascade/onnx/ops/): each
  # has run(op, inputs, attributes, context) and says when a node's inputs do not fit.
  @families for {family, ops} <- [
                  Conv:
                    ~w(Conv ConvTranspose MaxPool AveragePool GlobalAveragePool GlobalMaxPool MaxUnpool),
                  Einsum: ~w(Einsum),
                  Indexing:
                    ~w(Gather GatherElements GatherND ScatterElements Scatter ScatterND Compress),
                  Layout:
                    ~w(Reshape Flatten Transpose Squeeze Unsqueeze Concat Expand Slice Tile Split Pad DepthToSpace SpaceToDepth ReverseSequence Trilu),
                  Loss: ~w(NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss),
                  Normalization:
                    ~w(BatchNormalization LayerNormalization InstanceNormalization LRN MeanVarianceNormalization),
                  Quantized:
                    ~w(QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger QLinearMatMul QLinearConv),
                  Recurrent: ~w(RNN GRU LSTM),
                  Resize: ~w(Upsample Resize GridSample),
                  Spectral: ~w(DFT Det),
                  Training: ~w(Adagrad Momentum Adam)
                ],
                op <- ops,
                into: %{},
                do: {op, Module.concat(Cascade.ONNX.Ops, family)}

  ## Dispatch

  def run(op, [x | _] = args, attrs, ctx)
      when op in ["Conv", "ConvTranspose", "MaxPool", "AveragePool"] do
    cond do
      x != nil and rank(x) == 5 and op == "ConvTranspose" ->
        run_3d_transpose(args, attrs, ctx)

      x != nil and rank(x) == 5 ->
        run_3d(op, args, attrs, ctx)

      true ->
        run_1d_or_2d(op, args, attrs, ctx)
    end
  end

  def run(op, args, attrs, ctx), do: run_any(op, args, attrs, ctx)

  # 3-D ConvTranspose: input depth i and kernel depth k add the 2-D ConvTranspose of their
  # slices to the output depth i * stride + k * dilation - pad_begin, when that is in range
  defp run_3d_transpose([x, w | b], attrs, ctx) do
    [_n, _c, d, h, wd] = dims(x)
    [_, m_per_group, kd, kh, kw] = dims(w)
    {[od | out2], [{bd, _} | pads2]} = conv_transpose_geometry([d, h, wd], [kd, kh, kw], attrs)
    [sd | s2] = attr(attrs, "strides", [1, 1, 1])
    [dd | d2] = attr(attrs, "dilations", [1, 1, 1])
    [_ | op2] = attr(attrs, "output_padding", [0, 0, 0])
    g = attr(attrs, "group", 1)

    attrs2 = %{
      "strides" => {:ints, s2},
      "dilations" => {:ints, d2},
      "output_padding" => {:ints, op2},
      "kernel_shape" => {:ints, [kh, kw]},
      "pads" => {:ints, Enum.map(pads2, &elem(&1, 0)) ++ Enum.map(pads2, &elem(&1, 1))},
      "group" => {:int, g}
    }

    slice_at = fn t, i ->
      {a, bb, _, hh, ww} = Cascade.shape(t)
      t |> Cascade.slice([0, 0, i, 0, 0], [a, bb, 1, hh, ww]) |> Cascade.reshape({a, bb, hh, ww})
    end

    {n, _, _, _, _} = Cascade.shape(x)
    [oh, ow] = out2

    planes =
      for o <- 0..(od - 1)//1 do
        taps = for i <- 0..(d - 1), k <- 0..(kd - 1), i * sd + k * dd - bd == o, do: {i, k}

        plane =
          case taps do
            [] ->
              Cascade.full(0, {n, m_per_group * g, oh, ow},
                type: Cascade.type(x),
                device: Cascade.device(x)
              )

            _ ->
              taps
              |> Enum.map(fn {i, k} ->
                [y] = run_any("ConvTranspose", [slice_at.(x, i), slice_at.(w, k)], attrs2, ctx)
                y
              end)
              |> Enum.reduce(&Cascade.add(&2, &1))
          end

        Cascade.reshape(plane, {n, m_per_group * g, 1, oh, ow})
      end

    y = Cascade.concatenate(planes, axis: 2)

    case b do
      [b] when b != nil -> [Cascade.add(y, Cascade.reshape(b, {1, Cascade.size(b), 1, 1, 1}))]
      _ -> [y]
    end
  end

  defp run_1d_or_2d(op, [x | rest] = args, attrs, ctx) do
    if x != nil and rank(x) == 3 do
      # 1-D: as 2-D with a height of 1
      {n, c, l} = Cascade.shape(x)
      x2 = Cascade.reshape(x, {n, c, 1, l})

      rest2 =
        case {op, rest} do
          {op, [w | more]} when op in ["Conv", "ConvTranspose"] and w != nil ->
            {a, b, k} = Cascade.shape(w)
            [Cascade.reshape(w, {a, b, 1, k}) | more]

          _ ->
            rest
        end

      attrs2 =
        Map.new(attrs, fn
          {name, {:ints, [v]}} when name in ["kernel_shape", "strides", "output_padding"] ->
            {name, {:ints, [1, v]}}

          {"dilations", {:ints, [v]}} ->
            {"dilations", {:ints, [1, v]}}

          {"output_shape", {:ints, [v]}} ->
            {"output_shape", {:ints, [1, v]}}

          {"pads", {:ints, [b, e]}} ->
            {"pads", {:ints, [0, b, 0, e]}}

          other ->
            other
        end)

      for y <- run(op, [x2 | rest2], attrs2, ctx) do
        {yn, yc, 1, yl} = Cascade.shape(y)
        Cascade.reshape(y, {yn, yc, yl})
      end
    else
      run_any(op, args, attrs, ctx)
    end
  end

  # 3-D: a sum (max, mean) over the kernel's depth of 2-D convolutions (poolings) of the input's
  # depth slices; slices in the depth padding are left out (zeros for Conv, never the maximum,
  # not counted by a mean that excludes padding)
  defp run_3d(op, [x | rest], attrs, ctx) do
    {n, _c, d, h, w} = Cascade.shape(x)

    {kd, k2, wt} =
      case op do
        "Conv" ->
          [wt | _] = rest
          {_, _, kd, kh, kw} = Cascade.shape(wt)
          {kd, [kh, kw], wt}

        _ ->
          [kd | k2] = attr(attrs, "kernel_shape", nil) || fail("#{op}: no kernel_shape")
          {kd, k2, nil}
      end

    [sd | s2] = attr(attrs, "strides", [1, 1, 1])
    [dd | d2] = attr(attrs, "dilations", [1, 1, 1])
    pads = conv_padding(attrs, [d, h, w], [kd | k2], [sd | s2], [dd | d2])
    [{bd, ed} | p2] = pads

    {bd, ed} =
      if op != "Conv" and attr(attrs, "ceil_mode", 0) == 1,
        do: ceil_padding([d, kd, sd, {bd, ed}]),
        else: {bd, ed}

    od = div(d + bd + ed - ((kd - 1) * dd + 1), sd) + 1

    attrs2 = %{
      "kernel_shape" => {:ints, k2},
      "strides" => {:ints, s2},
      "dilations" => {:ints, d2},
      "pads" => {:ints, Enum.map(p2, &elem(&1, 0)) ++ Enum.map(p2, &elem(&1, 1))},
      "group" => {:int, attr(attrs, "group", 1)},
      "ceil_mode" => {:int, attr(attrs, "ceil_mode", 0)},
      "count_include_pad" => {:int, attr(attrs, "count_include_pad", 0)}
    }

    slice_at = fn t, i ->
      {a, b, _, hh, ww} = Cascade.shape(t)
      t |> Cascade.slice([0, 0, i, 0, 0], [a, b, 1, hh, ww]) |> Cascade.reshape({a, b, hh, ww})
    end

    planes =
      for o <- 0..(od - 1)//1 do
        taps = for k <- 0..(kd - 1), i = o * sd + k * dd - bd, i >= 0 and i < d, do: {k, i}

        plane =
          case op do
            "Conv" ->
              taps
              |> Enum.map(fn {k, i} ->
                [y] = run_any("Conv", [slice_at.(x, i), slice_at.(wt, k)], attrs2, ctx)
                y
              end)
              |> Enum.reduce(&Cascade.add(&2, &1))

            "MaxPool" ->
              taps
              |> Enum.map(fn {_, i} -> hd(run_any(op, [slice_at.(x, i)], attrs2, ctx)) end)
              |> Enum.reduce(&Cascade.max(&2, &1))

            "AveragePool" ->
              avg = fn t -> hd(run_any(op, [t], attrs2, ctx)) end

              sum =
                taps
                |> Enum.map(fn {_, i} -> avg.(slice_at.(x, i)) end)
                |> Enum.reduce(&Cascade.add(&2, &1))

              if attr(attrs, "count_include_pad", 0) == 1 do
                Cascade.divide(sum, kd) |> Cascade.as_type(Cascade.type(x))
              else
                ones =
                  Cascade.full(1, {n, 1, 1, h, w},
                    type: Cascade.type(x),
                    device: Cascade.device(x)
                  )

                count =
                  taps
                  |> Enum.map(fn _ -> avg.(slice_at.(ones, 0)) end)
                  |> Enum.reduce(&Cascade.add(&2, &1))

                Cascade.divide(sum, count) |> Cascade.as_type(Cascade.type(x))
              end
          end

        {a, b, hh, ww} = Cascade.shape(plane)
        Cascade.reshape(plane, {a, b, 1, hh, ww})
      end

    y = Cascade.concatenate(planes, axis: 2)

    case {op, rest} do
      {"Conv", [_, b]} when b != nil ->
        [Cascade.add(y, Cascade.reshape(b, {1, Cascade.size(b), 1, 1, 1}))]

      _ ->
        [y]
    end
  end

  @doc false
  # Relu of floats as max(x, 0), NaN kept as relu keeps it: an elementwise op that a program
  # fuses with what comes before it (a convolution's bias add: one pass over the result)
  def relu(x) do
    if float?(x),
      do: Cascade.max(x, Cascade.tensor(0, type: Cascade.type(x))),
      else: Cascade.relu(x)
  end

  defp run_any(op, args, attrs, ctx) do
    cond do
      fun = @unary[op] -> [fun.(hd(args))]
      fun = @binary[op] -> [apply(fun, Enum.take(args, 2))]
      fun = @variadic[op] -> [args |> Enum.reject(&is_nil/1) |> Enum.reduce(&fun.(&2, &1))]
      how = @reductions[op] -> [reduce(how, args, attrs, ctx)]
      true -> other(op, args, attrs, ctx)
    end
  end

  defp other("Identity", [x], _attrs, _ctx), do: [x]

  # inference: the input as it is, and a mask of ones
  defp other("Dropout", [x | _], _attrs, _ctx),
    do: [x, Cascade.full(1, Cascade.shape(x), type: :u8, device: Cascade.device(x))]

  defp other("Div", [a, b], _attrs, _ctx) do
    if float?(a) or float?(b) do
      [Cascade.divide(a, b)]
    else
      # integers: the quotient truncated toward zero, as C
      q = Cascade.divide(Cascade.as_type(a, :f64), Cascade.as_type(b, :f64))
      t = Cascade.multiply(Cascade.sign(q), Cascade.floor(Cascade.abs(q)))
      [Cascade.as_type(t, Cascade.Type.merge(type_atom(a), type_atom(b)))]
    end
  end

  defp other("Mod", [a, b], attrs, _ctx) do
    r = Cascade.remainder(a, b)

    if attr(attrs, "fmod", 0) == 1 do
      [r]
    else
      # the sign of the divisor, as Python's %: r + b where r is not 0 and its sign differs
      fix =
        Cascade.logical_and(
          Cascade.not_equal(r, 0),
          Cascade.not_equal(Cascade.less(r, 0), Cascade.less(b, 0))
        )

      [Cascade.select(fix, Cascade.add(r, b), r)]
    end
  end

  # the result has the base's type
  defp other("Pow", [x, y], _attrs, _ctx),
    do: [Cascade.as_type(Cascade.pow(x, y), Cascade.type(x))]

  defp other("Mean", args, _attrs, _ctx) do
    args = Enum.reject(args, &is_nil/1)
    [Cascade.divide(Enum.reduce(args, &Cascade.add(&2, &1)), length(args))]
  end

  defp other("Where", [c, a, b], _attrs, _ctx), do: [Cascade.select(c, a, b)]

  defp other("PRelu", [x, slope], _attrs, _ctx) do
    # a slope of one value per channel ({C}, as older exporters write it) applies along axis 1
    slope =
      if rank(slope) == 1 and rank(x) > 2 and Cascade.size(slope) > 1 and
           Cascade.size(slope) == elem(Cascade.shape(x), 1) and
           Cascade.size(slope) != List.last(dims(x)),
         do: per_axis(slope, x, 1),
         else: slope

    [Cascade.select(Cascade.less(x, 0), Cascade.multiply(x, slope), x)]
  end

  defp other("LeakyRelu", [x], attrs, _ctx),
    do: [Cascade.leaky_relu(x, alpha: attr(attrs, "alpha", 0.01))]

  defp other("Elu", [x], attrs, _ctx), do: [Cascade.elu(x, alpha: attr(attrs, "alpha", 1.0))]

  defp other("Selu", [x], attrs, _ctx) do
    alpha = attr(attrs, "alpha", 1.67326319217681884765625)
    gamma = attr(attrs, "gamma", 1.05070102214813232421875)
    [Cascade.multiply(Cascade.elu(x, alpha: alpha), gamma)]
  end

  defp other("Celu", [x], attrs, _ctx) do
    alpha = attr(attrs, "alpha", 1.0)
    neg = Cascade.multiply(Cascade.expm1(Cascade.divide(x, alpha)), alpha)
    [Cascade.add(Cascade.max(x, 0), Cascade.min(neg, 0))]
  end

  defp other("HardSigmoid", [x], attrs, _ctx),
    do: [hard_sigmoid(x, attr(attrs, "alpha", 0.2), attr(attrs, "beta", 0.5))]

  defp other("HardSwish", [x], _attrs, _ctx),
    do: [Cascade.multiply(x, hard_sigmoid(x, 1 / 6, 0.5))]

  defp other("Softsign", [x], _attrs, _ctx),
    do: [Cascade.divide(x, Cascade.add(Cascade.abs(x), 1))]

  defp other("MatMul", [a, b], _attrs, _ctx), do: [matmul(a, b)]

  defp other("Gemm", [a, b | c], attrs, _ctx) do
    a = if attr(attrs, "transA", 0) == 1, do: Cascade.transpose(a), else: a
    b = if attr(attrs, "transB", 0) == 1, do: Cascade.transpose(b), else: b
    y = Cascade.dot(a, b)
    alpha = attr(attrs, "alpha", 1.0)
    y = if alpha == 1.0, do: y, else: Cascade.multiply(y, alpha)

    case c do
      [c] when c != nil ->
        beta = attr(attrs, "beta", 1.0)
        [Cascade.add(y, if(beta == 1.0, do: c, else: Cascade.multiply(c, beta)))]

      _ ->
        [y]
    end
  end

  defp other(op, [x], attrs, ctx) when op in ["Softmax", "LogSoftmax"] do
    fun = if op == "Softmax", do: &Cascade.softmax/2, else: &Cascade.log_softmax/2

    if ctx.opset >= 13 do
      [fun.(x, axis: axis(attr(attrs, "axis", -1), rank(x)))]
    else
      # before opset 13: over the input flattened to 2-D at `axis` (default 1)
      a = axis(attr(attrs, "axis", 1), rank(x))
      {outer, inner} = dims(x) |> Enum.split(a)
      flat = Cascade.reshape(x, {Enum.product(outer), Enum.product(inner)})
      [flat |> fun.(axis: 1) |> Cascade.reshape(Cascade.shape(x))]
    end
  end

  defp other("Cast", [x], attrs, _ctx) do
    case Cascade.ONNX.cascade_type(attr(attrs, "to", 1)) do
      {:ok, type} -> [Cascade.as_type(x, type)]
      :error -> fail("Cast: target type #{attr(attrs, "to", 1)} is not supported")
    end
  end

  defp other("CastLike", [x, like], _attrs, _ctx), do: [Cascade.as_type(x, Cascade.type(like))]

  defp other("Constant", [], attrs, ctx) do
    case Map.to_list(attrs) do
      [{"value", {:tensor, t}}] ->
        case Cascade.ONNX.to_tensor(t, ctx.device) do
          {:ok, tensor} -> [tensor]
          {:error, message} -> fail("Constant: " <> message)
        end

      [{"value_float", {_, v}}] ->
        [scalar(v, :f32, ctx)]

      [{"value_int", {_, v}}] ->
        [scalar(v, :s64, ctx)]

      [{"value_floats", {_, v}}] ->
        [Cascade.tensor(v, type: :f32, device: ctx.device || Cascade.Device.default())]

      [{"value_ints", {_, v}}] ->
        [Cascade.tensor(v, type: :s64, device: ctx.device || Cascade.Device.default())]

      other ->
        fail("Constant: unsupported value #{inspect(Enum.map(other, &elem(&1, 0)))}")
    end
  end

  defp other("Shape", [x], attrs, ctx) do
    d = dims(x)
    r = length(d)
    start = attr(attrs, "start", 0) |> axis(r) |> max(0) |> min(r)
    stop = attr(attrs, "end", r) |> axis(r) |> max(0) |> min(r)
    [ints_tensor(Enum.slice(d, start, max(stop - start, 0)), ctx)]
  end

  defp other("Size", [x], _attrs, ctx), do: [scalar(Cascade.size(x), :s64, ctx)]

  defp other("ConstantOfShape", [shape], attrs, ctx) do
    {value, type} =
      case attr(attrs, "value", nil) do
        nil ->
          {0.0, :f32}

        t ->
          case Cascade.ONNX.to_tensor(t, :cpu) do
            {:ok, v} -> {hd(values(v)), type_atom(v)}
            {:error, message} -> fail("ConstantOfShape: " <> message)
          end
      end

    [
      Cascade.full(value, List.to_tuple(values(shape)),
        type: type,
        device: ctx.device || Cascade.Device.default()
      )
    ]
  end

  defp other("Range", [start, limit, delta], _attrs, ctx) do
    [s, l, d] = Enum.map([start, limit, delta], &hd(values(&1)))
    n = max(ceil((l - s) / d), 0)
    type = type_atom(start)
    i = Cascade.iota({n}, type: type, device: ctx.device || Cascade.Device.default())
    [Cascade.add(Cascade.multiply(i, d), s) |> Cascade.as_type(type)]
  end

  defp other(op, [x], attrs, _ctx) when op in ["ArgMax", "ArgMin"] do
    a = axis(attr(attrs, "axis", 0), rank(x))
    tie = if attr(attrs, "select_last_index", 0) == 1, do: :high, else: :low
    keep = attr(attrs, "keepdims", 1) == 1
    fun = if op == "ArgMax", do: &Cascade.argmax/2, else: &Cascade.argmin/2
    [fun.(x, axis: a, keep_axis: keep, tie_break: tie)]
  end

  # The bounds stay on the device, as tensors of x's type (opset 11 on) or numbers (before).
  # Floats clipped by two single values (ReLU6) as max then min, which a program fuses into one
  # pass with the ops before them (a convolution's bias add); else clip/3, one op.
  defp other("Clip", [x | bounds], attrs, ctx) do
    {lo, hi} =
      if ctx.opset >= 11 do
        [lo, hi] = Enum.take(bounds ++ [nil, nil], 2)
        {lo, hi}
      else
        {attr(attrs, "min", nil), attr(attrs, "max", nil)}
      end

    type = Cascade.type(x)

    single = fn b -> not is_struct(b, Cascade.Tensor) or Cascade.size(b) == 1 end

    y =
      cond do
        lo != nil and hi != nil and float?(x) and single.(lo) and single.(hi) ->
          x |> Cascade.max(lo) |> Cascade.min(hi)

        lo != nil and hi != nil ->
          Cascade.clip(x, lo, hi)

        lo != nil ->
          Cascade.max(x, lo)

        hi != nil ->
          Cascade.min(x, hi)

        true ->
          x
      end

    [if(Cascade.type(y) == type, do: y, else: Cascade.as_type(y, type))]
  end

  defp other("CumSum", [x, ax], attrs, _ctx) do
    r = rank(x)
    a = axis(hd(values(ax)), r)
    n = elem(Cascade.shape(x), a)
    dev = Cascade.device(x)
    # sum over i of x[i] * M[i][j], M[i][j] = 1 where i contributes to j
    i = Cascade.iota({n, n}, axis: 0, device: dev)
    j = Cascade.iota({n, n}, axis: 1, device: dev)

    m =
      case {attr(attrs, "exclusive", 0), attr(attrs, "reverse", 0)} do
        {0, 0} -> Cascade.less_equal(i, j)
        {1, 0} -> Cascade.less(i, j)
        {0, 1} -> Cascade.greater_equal(i, j)
        {1, 1} -> Cascade.greater(i, j)
      end
      |> Cascade.as_type(Cascade.type(x))

    y = Cascade.dot(x, [a], [], m, [0], [])
    # dot puts the summed axis last: move it back
    perm = Enum.to_list(0..(r - 2)//1) |> List.insert_at(a, r - 1)
    [Cascade.transpose(y, axes: perm)]
  end

  defp other("Hardmax", [x], attrs, ctx) do
    if ctx.opset >= 13 do
      a = axis(attr(attrs, "axis", -1), rank(x))
      idx = Cascade.argmax(x, axis: a, keep_axis: true)
      iota = Cascade.iota(Cascade.shape(x), axis: a, device: Cascade.device(x))
      [Cascade.as_type(Cascade.equal(iota, idx), Cascade.type(x))]
    else
      a = axis(attr(attrs, "axis", 1), rank(x))
      {outer, inner} = Enum.split(dims(x), a)
      flat = Cascade.reshape(x, {Enum.product(outer), Enum.product(inner)})
      [h] = other("Hardmax", [flat], %{"axis" => {:int, 1}}, %{ctx | opset: 13})
      [Cascade.reshape(h, Cascade.shape(x))]
    end
  end

  # halves to even
  defp other("Round", [x], _attrs, _ctx) do
    f = Cascade.floor(x)
    d = Cascade.subtract(x, f)
    up = Cascade.add(f, 1)
    even = Cascade.add(f, Cascade.abs(Cascade.remainder(f, 2)))
    half = Cascade.select(Cascade.less(d, 0.5), f, even)
    [Cascade.select(Cascade.greater(d, 0.5), up, half)]
  end

  defp other("OneHot", [idx, depth, vals], attrs, _ctx) do
    depth = trunc(hd(values(depth)))
    [off, on] = values(vals)
    out_rank = rank(idx) + 1
    a = axis(attr(attrs, "axis", -1), out_rank)
    idx = Cascade.as_type(idx, :s64)
    idx = Cascade.select(Cascade.less(idx, 0), Cascade.add(idx, depth), idx)
    oh = Cascade.one_hot(idx, depth: depth, type: Cascade.type(vals))

    oh =
      if a == out_rank - 1,
        do: oh,
        else:
          Cascade.transpose(oh,
            axes: Enum.to_list(0..(out_rank - 2)//1) |> List.insert_at(a, out_rank - 1)
          )

    [Cascade.as_type(Cascade.add(Cascade.multiply(oh, on - off), off), Cascade.type(vals))]
  end

  defp other("IsInf", [x], attrs, _ctx) do
    pos = Cascade.equal(x, inf(x, :infinity))
    neg = Cascade.equal(x, inf(x, :neg_infinity))

    [
      case {attr(attrs, "detect_positive", 1), attr(attrs, "detect_negative", 1)} do
        {1, 1} -> Cascade.logical_or(pos, neg)
        {1, 0} -> pos
        {0, 1} -> neg
        {0, 0} -> Cascade.logical_and(pos, neg)
      end
    ]
  end

  defp other("IsNaN", [x], _attrs, _ctx), do: [Cascade.not_equal(x, x)]

  defp other("ThresholdedRelu", [x], attrs, _ctx) do
    zero = Cascade.as_type(Cascade.multiply(x, 0), Cascade.type(x))
    [Cascade.select(Cascade.greater(x, attr(attrs, "alpha", 1.0)), x, zero)]
  end

  defp other("EyeLike", [x], attrs, _ctx) do
    [n, m] = dims(x)
    dev = Cascade.device(x)

    diag =
      Cascade.subtract(
        Cascade.iota({n, m}, axis: 1, device: dev),
        Cascade.iota({n, m}, axis: 0, device: dev)
      )

    type =
      case attr(attrs, "dtype", nil) do
        nil -> Cascade.type(x)
        t -> elem(Cascade.ONNX.cascade_type(t), 1)
      end

    [Cascade.as_type(Cascade.equal(diag, attr(attrs, "k", 0)), type)]
  end

  defp other("Tan", [x], _attrs, _ctx), do: [Cascade.divide(Cascade.sin(x), Cascade.cos(x))]

  defp other("Atan", [x], _attrs, _ctx),
    do: [
      Cascade.atan2(x, Cascade.as_type(Cascade.add(Cascade.multiply(x, 0), 1), Cascade.type(x)))
    ]

  defp other("Sinh", [x], _attrs, _ctx),
    do: [Cascade.divide(Cascade.subtract(Cascade.exp(x), Cascade.exp(Cascade.negate(x))), 2)]

  defp other("Cosh", [x], _attrs, _ctx),
    do: [Cascade.divide(Cascade.add(Cascade.exp(x), Cascade.exp(Cascade.negate(x))), 2)]

  defp other("Asinh", [x], _attrs, _ctx),
    do: [Cascade.log(Cascade.add(x, Cascade.sqrt(Cascade.add(Cascade.multiply(x, x), 1))))]

  defp other("Acosh", [x], _attrs, _ctx),
    do: [Cascade.log(Cascade.add(x, Cascade.sqrt(Cascade.subtract(Cascade.multiply(x, x), 1))))]

  defp other("Atanh", [x], _attrs, _ctx) do
    ratio = Cascade.divide(Cascade.add(x, 1), Cascade.subtract(1, x))
    [Cascade.multiply(Cascade.log(ratio), 0.5)]
  end

  defp other(op, [x], _attrs, _ctx) when op in ["Asin", "Acos"] do
    c = Cascade.sqrt(Cascade.subtract(1, Cascade.multiply(x, x)))
    [if(op == "Asin", do: Cascade.atan2(x, c), else: Cascade.atan2(c, x))]
  end

  defp other("Shrink", [x], attrs, _ctx) do
    bias = attr(attrs, "bias", 0.0)
    lambd = attr(attrs, "lambd", 0.5)
    zero = Cascade.as_type(Cascade.multiply(x, 0), Cascade.type(x))
    low = Cascade.as_type(Cascade.add(x, bias), Cascade.type(x))
    high = Cascade.as_type(Cascade.subtract(x, bias), Cascade.type(x))
    rest = Cascade.select(Cascade.greater(x, lambd), high, zero)
    [Cascade.select(Cascade.less(x, -lambd), low, rest)]
  end

  # w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N = size (periodic) or size - 1
  defp other(op, [size], attrs, ctx)
       when op in ["HannWindow", "HammingWindow", "BlackmanWindow"] do
    n = trunc(hd(values(size)))
    big_n = if attr(attrs, "periodic", 1) == 1, do: n, else: n - 1

    {a0, a1, a2} =
      case op do
        "HannWindow" -> {0.5, 0.5, 0.0}
        "HammingWindow" -> {25 / 46, 21 / 46, 0.0}
        "BlackmanWindow" -> {0.42, 0.5, 0.08}
      end

    type =
      case Cascade.ONNX.cascade_type(attr(attrs, "output_datatype", 1)) do
        {:ok, t} -> t
        :error -> fail("#{op}: output_datatype #{attr(attrs, "output_datatype", 1)}")
      end

    i = Cascade.iota({n}, type: :f64, device: ctx.device || Cascade.Device.default())
    theta = Cascade.multiply(i, 2 * :math.pi() / max(big_n, 1))

    w =
      Cascade.subtract(a0, Cascade.multiply(Cascade.cos(theta), a1))
      |> Cascade.add(Cascade.multiply(Cascade.cos(Cascade.multiply(theta, 2)), a2))

    [Cascade.as_type(w, type)]
  end

  # the k largest (or smallest) along the axis by k rounds of argmax (argmin) on the device, each
  # taking the winner out of the running; ties go to the lower index, as ONNX asks
  defp other("TopK", [x, k], attrs, ctx) do
    k = if ctx.opset >= 10, do: trunc(hd(values(k))), else: attr(attrs, "k", 1)
    r = rank(x)
    a = axis(attr(attrs, "axis", -1), r)
    largest = attr(attrs, "largest", 1) == 1
    n = elem(Cascade.shape(x), a)
    if k > n, do: fail("TopK: k = #{k} for an axis of #{n}")

    if k == 0 do
      shape = put_elem(Cascade.shape(x), a, 0)
      dev = Cascade.device(x)

      [
        Cascade.full(0, shape, type: Cascade.type(x), device: dev),
        Cascade.full(0, shape, type: :s64, device: dev)
      ]
    else
      # the first k positions of a stable sort: equal values by position, as ONNX asks
      direction = if largest, do: :desc, else: :asc
      indices = Cascade.argsort(x, axis: a, direction: direction, k: k)
      [take_along(x, indices, a), indices]
    end
  end

  # x * 2^y (wrapping, as unsigned arithmetic does) or floor(x / 2^y), in x's unsigned type
  defp other("BitShift", [x, y], attrs, _ctx) do
    p = Cascade.pow(Cascade.as_type(Cascade.add(Cascade.multiply(y, 0), 2), Cascade.type(x)), y)

    case attr(attrs, "direction", "") do
      "LEFT" -> [Cascade.multiply(x, p)]
      "RIGHT" -> [Cascade.as_type(Cascade.floor(Cascade.divide(x, p)), Cascade.type(x))]
      other -> fail("BitShift: direction #{inspect(other)}")
    end
  end

  defp other(op, args, attrs, ctx) when is_map_key(@families, op),
    do: Map.fetch!(@families, op).run(op, args, attrs, ctx)

  defp other(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  ## Helpers

  defp inf(x, which), do: Cascade.tensor(which, type: Cascade.type(x), device: Cascade.device(x))

  # x's elements at `indices` along axis a (the shapes agree elsewhere): a gather of full
  # coordinates, as GatherElements
  @doc false
  def take_along(x, indices, a) do
    shape = Cascade.shape(indices)
    r = rank(x)
    dev = Cascade.device(x)
    one = Tuple.append(shape, 1)

    coords =
      for d <- 0..(r - 1) do
        c = if d == a, do: indices, else: Cascade.iota(shape, axis: d, device: dev)
        Cascade.reshape(c, one)
      end

    Cascade.gather(x, Cascade.concatenate(coords, axis: r))
  end

  # the row-major strides of a shape, in elements
  @doc false
  def row_strides(dims) do
    dims |> Enum.reverse() |> Enum.scan(1, &(&1 * &2)) |> Enum.reverse() |> tl() |> Kernel.++([1])
  end

  # a 1-D scale or zero point as the slices of x along axis a; a scalar as it is
  @doc false
  def per_axis(p, x, a) do
    if rank(p) == 1 and rank(x) > 1 do
      shape = List.duplicate(1, rank(x)) |> List.replace_at(a, Cascade.size(p)) |> List.to_tuple()
      Cascade.reshape(p, shape)
    else
      p
    end
  end

  @doc false
  def round_half_even(x) do
    [r] = other("Round", [x], %{}, %{})
    r
  end

  defp hard_sigmoid(x, alpha, beta),
    do: x |> Cascade.multiply(alpha) |> Cascade.add(beta) |> Cascade.max(0) |> Cascade.min(1)

  defp scalar(v, type, ctx),
    do: Cascade.full(v, {}, type: type, device: ctx.device || Cascade.Device.default())

  defp ints_tensor(list, ctx),
    do: Cascade.tensor(list, type: :s64, device: ctx.device || Cascade.Device.default())

  # Squeeze/Unsqueeze and ReduceSum take axes as an input from opset `from`, an attribute before.
  @doc false
  def axes_arg(rest, attrs, ctx, from) do
    if ctx.opset >= from do
      case rest do
        [t | _] when t != nil -> values(t)
        _ -> nil
      end
    else
      attr(attrs, "axes", nil)
    end
  end

  # numpy matmul: 1-D operands promoted, leading axes broadcast
  @doc false
  def matmul(a, b) do
    ra = rank(a)
    rb = rank(b)

    cond do
      ra <= 2 and rb <= 2 ->
        Cascade.dot(a, [ra - 1], [], b, [max(rb - 2, 0)], [])

      true ->
        a2 = if ra == 1, do: Cascade.reshape(a, {1, elem(Cascade.shape(a), 0)}), else: a
        b2 = if rb == 1, do: Cascade.reshape(b, {elem(Cascade.shape(b), 0), 1}), else: b
        {da, db} = {dims(a2), dims(b2)}
        {ba, [m, k]} = Enum.split(da, -2)
        {bb, [_k, n]} = Enum.split(db, -2)
        r = max(length(ba), length(bb))
        pad = fn l -> List.duplicate(1, r - length(l)) ++ l end

        batch =
          Enum.zip_with(pad.(ba), pad.(bb), fn
            1, y -> y
            x, _ -> x
          end)

        ea =
          Cascade.broadcast(a2, List.to_tuple(batch ++ [m, k]),
            axes: Enum.to_list((r - length(ba))..(r + 1)//1)
          )

        eb =
          Cascade.broadcast(b2, List.to_tuple(batch ++ [k, n]),
            axes: Enum.to_list((r - length(bb))..(r + 1)//1)
          )

        bt = Enum.to_list(0..(r - 1)//1)
        y = Cascade.dot(ea, [r + 1], bt, eb, [r], bt)

        shape = batch ++ if(ra == 1, do: [], else: [m]) ++ if(rb == 1, do: [], else: [n])

        Cascade.reshape(y, List.to_tuple(shape))
    end
  end

  # Padding {lo, hi} per spatial axis from pads ([b0, b1, e0, e1]) or auto_pad.
  # ConvTranspose's output sizes and {begin, end} paddings per spatial axis, from the input's
  # sizes, the kernel's and the attributes (pads, or output_shape / auto_pad SAME_*)
  @doc false
  def conv_transpose_geometry(sizes, kernel_dims, attrs) do
    n = length(sizes)
    ones = List.duplicate(1, n)
    strides = attr(attrs, "strides", ones)
    dil = attr(attrs, "dilations", ones)
    out_pad = attr(attrs, "output_padding", List.duplicate(0, n))
    kernel = attr(attrs, "kernel_shape", kernel_dims)
    auto = attr(attrs, "auto_pad", "NOTSET")

    full =
      Enum.zip_with([sizes, strides, kernel, dil, out_pad], fn [i, s, k, d, op] ->
        s * (i - 1) + op + (k - 1) * d + 1
      end)

    if attr(attrs, "output_shape", nil) != nil or auto in ["SAME_UPPER", "SAME_LOWER"] do
      out =
        attrs
        |> attr("output_shape", nil)
        |> Kernel.||(Enum.zip_with(sizes, strides, &(&1 * &2)))
        |> Enum.take(-n)

      pads =
        Enum.zip_with(full, out, fn f, o ->
          total = max(f - o, 0)

          if auto == "SAME_LOWER",
            do: {total - div(total, 2), div(total, 2)},
            else: {div(total, 2), total - div(total, 2)}
        end)

      {out, pads}
    else
      {begins, ends} = attrs |> attr("pads", List.duplicate(0, 2 * n)) |> Enum.split(n)
      out = Enum.zip_with([full, begins, ends], fn [f, pb, pe] -> f - pb - pe end)
      {out, Enum.zip(begins, ends)}
    end
  end

  @doc false
  def conv_padding(attrs, spatial, kernel, strides, dil) do
    case attr(attrs, "auto_pad", "NOTSET") do
      p when p in ["NOTSET", ""] ->
        pads = attr(attrs, "pads", List.duplicate(0, 2 * length(spatial)))
        {begins, ends} = Enum.split(pads, length(spatial))
        Enum.zip(begins, ends)

      "VALID" ->
        Enum.map(spatial, fn _ -> {0, 0} end)

      same when same in ["SAME_UPPER", "SAME_LOWER"] ->
        Enum.zip_with([spatial, kernel, strides, dil], fn [i, k, s, d] ->
          out = div(i + s - 1, s)
          total = max((out - 1) * s + (k - 1) * d + 1 - i, 0)
          small = div(total, 2)
          if same == "SAME_UPPER", do: {small, total - small}, else: {total - small, small}
        end)

      other ->
        fail("auto_pad #{inspect(other)} is not supported")
    end
  end

  # the padding at the end that makes floor division give ceil's output size (a last window
  # that would start past the input and its start padding is dropped, as PyTorch does)
  @doc false
  def ceil_padding([i, k, s, {pb, pe}]) do
    span = i + pb + pe - k
    out = div(span + s - 1, s) + 1
    out = if (out - 1) * s >= i + pb, do: out - 1, else: out
    {pb, max(pe, (out - 1) * s + k - i - pb)}
  end

  @doc false
  def clamp(v, lo, hi), do: v |> max(lo) |> min(hi)

  # Reductions: axes from the attribute (from the input for ReduceSum from opset 13), all when
  # none (unless noop_with_empty_axes), keepdims by default.
  defp reduce(how, [x | rest], attrs, ctx) do
    from = if how == :sum, do: 13, else: 18
    axes = axes_arg(rest, attrs, ctx, from)
    keep = attr(attrs, "keepdims", 1) == 1
    r = rank(x)

    axes =
      case axes do
        nil ->
          if attr(attrs, "noop_with_empty_axes", 0) == 1,
            do: [],
            else: Enum.to_list(0..(r - 1)//1)

        [] ->
          if attr(attrs, "noop_with_empty_axes", 0) == 1,
            do: [],
            else: Enum.to_list(0..(r - 1)//1)

        axes ->
          Enum.map(axes, &axis(&1, r))
      end

    if axes == [] do
      x
    else
      opts = [axes: axes, keep_axes: keep]

      case how do
        :sum -> Cascade.sum(x, opts)
        :mean -> Cascade.mean(x, opts)
        :reduce_max -> Cascade.reduce_max(x, opts)
        :reduce_min -> Cascade.reduce_min(x, opts)
        :product -> Cascade.product(x, opts)
        :sum_square -> Cascade.sum(Cascade.multiply(x, x), opts)
        :l1 -> Cascade.sum(Cascade.abs(x), opts)
        :l2 -> x |> Cascade.multiply(x) |> Cascade.sum(opts) |> Cascade.sqrt() |> same_type(x)
        :log_sum -> x |> Cascade.sum(opts) |> Cascade.log() |> same_type(x)
        :logsumexp -> x |> Cascade.logsumexp(opts) |> same_type(x)
      end
    end
  end

  defp same_type(t, like), do: Cascade.as_type(t, Cascade.type(like))
end
