defmodule Cascade.ONNX.Ops.Layout do
  @moduledoc false
  # The operators that move or copy elements without arithmetic (Cascade.ONNX.Ops hands them
  # here): reshapes, transposes, slices, concatenation, tiling, padding.

  import Cascade.ONNX.Ops,
    only: [
      attr: 3,
      fail: 1,
      axis: 2,
      values: 1,
      clamp: 3,
      take_along: 3,
      axes_arg: 4,
      dims: 1,
      rank: 1
    ]

  @doc false
  def run("Reshape", [x, shape], attrs, _ctx) do
    in_dims = dims(x)
    allowzero = attr(attrs, "allowzero", 0) == 1

    want =
      shape
      |> values()
      |> Enum.with_index()
      |> Enum.map(fn
        {0, i} when not allowzero -> Enum.at(in_dims, i) || fail("Reshape: no axis #{i} to copy")
        {d, _} -> d
      end)

    known = want |> Enum.reject(&(&1 == -1)) |> Enum.product()

    want =
      Enum.map(want, fn
        -1 -> if known == 0, do: 0, else: div(Enum.product(in_dims), known)
        d -> d
      end)

    [Cascade.reshape(x, List.to_tuple(want))]
  end

  def run("Flatten", [x], attrs, _ctx) do
    a = axis(attr(attrs, "axis", 1), rank(x))
    {outer, inner} = Enum.split(dims(x), a)
    [Cascade.reshape(x, {Enum.product(outer), Enum.product(inner)})]
  end

  def run("Transpose", [x], attrs, _ctx) do
    perm = attr(attrs, "perm", Enum.to_list((rank(x) - 1)..0//-1))
    [Cascade.transpose(x, axes: perm)]
  end

  def run("Squeeze", [x | rest], attrs, ctx) do
    axes = axes_arg(rest, attrs, ctx, 13)

    case axes do
      nil -> [Cascade.squeeze(x)]
      axes -> [Cascade.squeeze(x, axes: Enum.map(axes, &axis(&1, rank(x))))]
    end
  end

  def run("Unsqueeze", [x | rest], attrs, ctx) do
    axes = axes_arg(rest, attrs, ctx, 13) || fail("Unsqueeze: no axes")
    out_rank = rank(x) + length(axes)
    axes = axes |> Enum.map(&axis(&1, out_rank)) |> Enum.sort()

    shape = Enum.reduce(axes, dims(x), fn a, acc -> List.insert_at(acc, a, 1) end)

    [Cascade.reshape(x, List.to_tuple(shape))]
  end

  def run("Concat", args, attrs, _ctx) do
    args = Enum.reject(args, &is_nil/1)
    a = axis(attr(attrs, "axis", 0), rank(hd(args)))
    [Cascade.concatenate(args, axis: a)]
  end

  def run("Expand", [x, shape], _attrs, _ctx) do
    want = values(shape)
    have = dims(x)
    r = max(length(want), length(have))
    pad = fn l -> List.duplicate(1, r - length(l)) ++ l end

    out =
      Enum.zip_with(pad.(have), pad.(want), fn
        1, w -> w
        h, _ -> h
      end)

    lead = r - length(have)

    [
      Cascade.broadcast(x, List.to_tuple(out), axes: Enum.to_list(lead..(r - 1)//1))
    ]
  end

  def run("Slice", [x | rest], attrs, ctx) do
    {starts, ends, axes, steps} =
      if ctx.opset >= 10 do
        [s, e | more] = rest ++ [nil, nil]
        {values(s), values(e), values(Enum.at(more, 0)), values(Enum.at(more, 1))}
      else
        {attr(attrs, "starts", []), attr(attrs, "ends", []), attr(attrs, "axes", nil), nil}
      end

    r = rank(x)
    axes = Enum.map(axes || Enum.to_list(0..(length(starts) - 1)//1), &axis(&1, r))
    steps = steps || List.duplicate(1, length(starts))
    [slice(x, Enum.zip([axes, starts, ends, steps]))]
  end

  def run("Tile", [x, repeats], _attrs, _ctx) do
    reps = values(repeats)

    out =
      reps
      |> Enum.with_index()
      |> Enum.reduce(x, fn
        {1, _}, acc -> acc
        {n, a}, acc -> Cascade.concatenate(List.duplicate(acc, n), axis: a)
      end)

    [out]
  end

  def run("Trilu", [x | k], attrs, _ctx) do
    k = if k != [] and hd(k) != nil, do: hd(values(hd(k))), else: 0
    [n, m] = Enum.take(dims(x), -2)
    dev = Cascade.device(x)

    diag =
      Cascade.subtract(
        Cascade.iota({n, m}, axis: 1, device: dev),
        Cascade.iota({n, m}, axis: 0, device: dev)
      )

    keep =
      if attr(attrs, "upper", 1) == 1,
        do: Cascade.greater_equal(diag, k),
        else: Cascade.less_equal(diag, k)

    [Cascade.select(keep, x, Cascade.as_type(Cascade.multiply(x, 0), Cascade.type(x)))]
  end

  def run("Split", [x | rest], attrs, ctx) do
    r = rank(x)
    a = axis(attr(attrs, "axis", 0), r)
    n = elem(Cascade.shape(x), a)

    sizes =
      cond do
        ctx.opset >= 13 and rest != [] and hd(rest) != nil -> values(hd(rest))
        attr(attrs, "split", nil) -> attr(attrs, "split", nil)
        # equal parts, one per output
        rem(n, ctx.outputs) == 0 -> List.duplicate(div(n, ctx.outputs), ctx.outputs)
        true -> fail("Split: #{n} does not split into #{ctx.outputs} equal parts")
      end

    if Enum.sum(sizes) != n, do: fail("Split: sizes #{inspect(sizes)} do not add up to #{n}")

    {parts, _} =
      Enum.map_reduce(sizes, 0, fn size, at ->
        start = List.duplicate(0, r) |> List.replace_at(a, at)
        lengths = dims(x) |> List.replace_at(a, size)
        {Cascade.slice(x, start, lengths), at + size}
      end)

    parts
  end

  def run("Pad", [x | rest], attrs, ctx) do
    r = rank(x)

    {pads, value} =
      if ctx.opset >= 11 do
        [p | more] = rest
        v = Enum.at(more, 0)
        {values(p), if(v, do: hd(values(v)), else: 0)}
      else
        {attr(attrs, "pads", []), attr(attrs, "value", 0.0)}
      end

    axes =
      case Enum.at(rest, 2) do
        nil -> Enum.to_list(0..(r - 1)//1)
        t -> Enum.map(values(t), &axis(&1, r))
      end

    {begins, ends} = Enum.split(pads, length(axes))

    case attr(attrs, "mode", "constant") do
      "constant" ->
        per = Map.new(Enum.zip([axes, begins, ends]), fn {a, b, e} -> {a, {b, e, 0}} end)
        [Cascade.pad(x, value, for(a <- 0..(r - 1)//1, do: Map.get(per, a, {0, 0, 0})))]

      mode ->
        # edge: the first and last slices repeated; reflect: mirrored without the edge
        [
          Enum.zip([axes, begins, ends])
          |> Enum.reduce(x, fn {a, b, e}, acc -> pad_axis(acc, a, b, e, mode) end)
        ]
    end
  end

  def run("DepthToSpace", [x], attrs, _ctx) do
    b = attr(attrs, "blocksize", 1)
    [n, c, h, w] = dims(x)
    c2 = div(c, b * b)

    y =
      if attr(attrs, "mode", "DCR") == "DCR" do
        x |> Cascade.reshape({n, b, b, c2, h, w}) |> Cascade.transpose(axes: [0, 3, 4, 1, 5, 2])
      else
        x |> Cascade.reshape({n, c2, b, b, h, w}) |> Cascade.transpose(axes: [0, 1, 4, 2, 5, 3])
      end

    [Cascade.reshape(y, {n, c2, h * b, w * b})]
  end

  def run("SpaceToDepth", [x], attrs, _ctx) do
    b = attr(attrs, "blocksize", 1)
    [n, c, h, w] = dims(x)

    y =
      x
      |> Cascade.reshape({n, c, div(h, b), b, div(w, b), b})
      |> Cascade.transpose(axes: [0, 3, 5, 1, 2, 4])

    [Cascade.reshape(y, {n, c * b * b, div(h, b), div(w, b)})]
  end

  # along the time axis, each batch entry's first len elements reversed: a gather of
  # len - 1 - t where t < len, t elsewhere
  def run("ReverseSequence", [x, lens], attrs, _ctx) do
    b = attr(attrs, "batch_axis", 1)
    t = attr(attrs, "time_axis", 0)
    r = rank(x)
    time = Cascade.iota(Cascade.shape(x), axis: t, device: Cascade.device(x))
    len_shape = List.duplicate(1, r) |> List.replace_at(b, Cascade.size(lens)) |> List.to_tuple()
    len = Cascade.reshape(Cascade.as_type(lens, :s64), len_shape)
    reversed = Cascade.subtract(Cascade.subtract(len, 1), time)
    [take_along(x, Cascade.select(Cascade.less(time, len), reversed, time), t)]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  # Slice: per axis {axis, start, end, step}, clamped as ONNX says
  defp slice(x, specs) do
    shape = dims(x)

    {x, starts, lengths, strides} =
      Enum.reduce(
        specs,
        {x, Enum.map(shape, fn _ -> 0 end), shape, Enum.map(shape, fn _ -> 1 end)},
        fn {a, s, e, step}, {x, starts, lengths, strides} ->
          n = Enum.at(shape, a)
          if step == 0, do: fail("Slice: a step of 0")

          if step > 0 do
            s = clamp(if(s < 0, do: s + n, else: s), 0, n)
            e = clamp(if(e < 0, do: e + n, else: e), 0, n)
            count = max(div(e - s + step - 1, step), 0)

            {x, List.replace_at(starts, a, min(s, max(n - 1, 0))),
             List.replace_at(lengths, a, extent(count, step)), List.replace_at(strides, a, step)}
          else
            # a negative step: reverse the axis and slice forward
            s = clamp(if(s < 0, do: s + n, else: s), -1, n - 1)
            e = clamp(if(e < 0, do: e + n, else: e), -1, n - 1)
            count = max(div(s - e + -step - 1, -step), 0)
            x = Cascade.reverse(x, axes: [a])

            {x, List.replace_at(starts, a, min(n - 1 - s, max(n - 1, 0))),
             List.replace_at(lengths, a, extent(count, -step)),
             List.replace_at(strides, a, -step)}
          end
        end
      )

    if Enum.any?(lengths, &(&1 == 0)) do
      Cascade.full(0, List.to_tuple(lengths), type: Cascade.type(x), device: Cascade.device(x))
    else
      Cascade.slice(x, starts, lengths, strides: strides)
    end
  end

  defp pad_axis(x, _a, 0, 0, _mode), do: x

  defp pad_axis(x, a, b, e, mode) do
    n = elem(Cascade.shape(x), a)
    d = dims(x)

    part = fn start, len ->
      Cascade.slice(
        x,
        List.replace_at(List.duplicate(0, length(d)), a, start),
        List.replace_at(d, a, len)
      )
    end

    {front, back} =
      case mode do
        "edge" ->
          {List.duplicate(part.(0, 1), b), List.duplicate(part.(n - 1, 1), e)}

        "reflect" ->
          if b >= n or e >= n, do: fail("Pad: reflect by #{max(b, e)} on an axis of #{n}")

          {[Cascade.reverse(part.(1, b), axes: [a])],
           [Cascade.reverse(part.(n - 1 - e, e), axes: [a])]}
      end

    front = Enum.reject(front, &(elem(Cascade.shape(&1), a) == 0))
    back = Enum.reject(back, &(elem(Cascade.shape(&1), a) == 0))
    Cascade.concatenate(front ++ [x] ++ back, axis: a)
  end

  # Cascade.slice's lengths are the extent in the input; count elements `step` apart span this
  defp extent(0, _step), do: 0
  defp extent(count, step), do: (count - 1) * step + 1
end
