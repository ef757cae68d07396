defmodule Cascade.ONNX.Ops.Conv do
  @moduledoc false
  # Convolutions and pooling on 1-D and 2-D images (Cascade.ONNX.Ops hands them here; its run/4
  # turns 1-D into 2-D and 3-D into slices of depth).

  import Cascade.ONNX.Ops,
    only: [
      attr: 3,
      fail: 1,
      float?: 1,
      row_strides: 1,
      values: 1,
      ceil_padding: 1,
      conv_padding: 5,
      conv_transpose_geometry: 3,
      dims: 1,
      rank: 1
    ]

  @doc false
  def run("Conv", [x, w | b], attrs, _ctx) do
    if rank(x) != 4, do: fail("Conv: #{rank(x) - 2}-D convolutions are not supported (2-D only)")
    [_, _, kh, kw] = dims(w)
    kernel = attr(attrs, "kernel_shape", [kh, kw])
    dil = attr(attrs, "dilations", [1, 1])
    strides = attr(attrs, "strides", [1, 1])
    [_, _, h, wd] = dims(x)
    padding = conv_padding(attrs, [h, wd], kernel, strides, dil)

    y =
      Cascade.conv2d(x, w,
        strides: strides,
        padding: padding,
        kernel_dilation: dil,
        feature_group_size: attr(attrs, "group", 1)
      )

    case b do
      [b] when b != nil -> [Cascade.add(y, Cascade.reshape(b, {1, Cascade.size(b), 1, 1}))]
      _ -> [y]
    end
  end

  def run(op, [x], attrs, ctx) when op in ["MaxPool", "AveragePool"] do
    if rank(x) != 4, do: fail("#{op}: #{rank(x) - 2}-D pooling is not supported (2-D only)")
    dilated = Enum.any?(attr(attrs, "dilations", []), &(&1 != 1))

    if op == "AveragePool" and dilated, do: fail("AveragePool: dilations are not supported")

    kernel = attr(attrs, "kernel_shape", nil) || fail("#{op}: no kernel_shape")
    strides = attr(attrs, "strides", [1, 1])
    [_, _, h, w] = dims(x)
    padding = conv_padding(attrs, [h, w], kernel, strides, [1, 1])

    # ceil_mode: the last, partial window too, as padding at the end that never wins (max) and
    # is not counted (mean)
    padding =
      if attr(attrs, "ceil_mode", 0) == 1,
        do: Enum.zip_with([[h, w], kernel, strides, padding], &ceil_padding/1),
        else: padding

    opts = [strides: strides, padding: padding]

    cond do
      op == "MaxPool" and (dilated or ctx.outputs > 1) ->
        max_pool_taps(x, kernel, strides, attr(attrs, "dilations", [1, 1]), padding, attrs)

      op == "MaxPool" ->
        [Cascade.max_pool2d(x, List.to_tuple(kernel), opts)]

      attr(attrs, "count_include_pad", 0) == 1 or Enum.all?(padding, &(&1 == {0, 0})) ->
        [Cascade.avg_pool2d(x, List.to_tuple(kernel), opts)]

      true ->
        # the mean of the elements inside the input only: divided by how many there are
        ones = Cascade.full(1, Cascade.shape(x), type: Cascade.type(x), device: Cascade.device(x))

        [
          Cascade.divide(
            Cascade.avg_pool2d(x, List.to_tuple(kernel), opts),
            Cascade.avg_pool2d(ones, List.to_tuple(kernel), opts)
          )
        ]
    end
  end

  def run("GlobalAveragePool", [x], _attrs, _ctx),
    do: [Cascade.mean(x, axes: Enum.to_list(2..(rank(x) - 1)//1), keep_axes: true)]

  def run("GlobalMaxPool", [x], _attrs, _ctx),
    do: [Cascade.reduce_max(x, axes: Enum.to_list(2..(rank(x) - 1)//1), keep_axes: true)]

  def run("ConvTranspose", [x, w | b], attrs, _ctx) do
    if rank(x) != 4, do: fail("ConvTranspose: 2-D only")
    [n, _c, h, wd] = dims(x)
    [_, m_per_group, kh, kw] = dims(w)
    g = attr(attrs, "group", 1)
    {out, padding} = conv_transpose_geometry([h, wd], [kh, kw], attrs)

    y =
      Cascade.conv2d_grad_input(x, w, List.to_tuple([n, m_per_group * g | out]),
        strides: attr(attrs, "strides", [1, 1]),
        padding: padding,
        kernel_dilation: attr(attrs, "dilations", [1, 1]),
        feature_group_size: g
      )

    case b do
      [b] when b != nil -> [Cascade.add(y, Cascade.reshape(b, {1, Cascade.size(b), 1, 1}))]
      _ -> [y]
    end
  end

  # values X at the flat positions I of an output of zeros (output_shape, or the pooling undone)
  def run("MaxUnpool", [x, idx | rest], attrs, _ctx) do
    [n, c | spatial] = dims(x)
    kernel = attr(attrs, "kernel_shape", nil) || fail("MaxUnpool: no kernel_shape")
    strides = attr(attrs, "strides", List.duplicate(1, length(kernel)))
    pads = attr(attrs, "pads", List.duplicate(0, 2 * length(kernel)))
    {begins, ends} = Enum.split(pads, length(kernel))

    default =
      [n, c] ++
        Enum.zip_with([spatial, strides, kernel, begins, ends], fn [i, st, k, b, e] ->
          (i - 1) * st + k - b - e
        end)

    out =
      case rest do
        [s | _] when s != nil -> values(s)
        _ -> default
      end

    m = Cascade.size(x)
    idx = Cascade.reshape(Cascade.as_type(idx, :s64), {m})

    # the indices count in the default shape: the same coordinates in a larger output_shape
    idx =
      if out == default do
        idx
      else
        f = Cascade.as_type(idx, :f64)

        {flat, _} =
          default
          |> row_strides()
          |> Enum.zip(row_strides(out))
          |> Enum.reduce({nil, f}, fn {ds, os}, {acc, left} ->
            q = Cascade.floor(Cascade.divide(left, ds))
            term = Cascade.multiply(q, os)

            {if(acc, do: Cascade.add(acc, term), else: term),
             Cascade.subtract(left, Cascade.multiply(q, ds))}
          end)

        Cascade.as_type(flat, :s64)
      end

    oh = Cascade.one_hot(idx, depth: Enum.product(out), type: Cascade.type(x))
    placed = Cascade.dot(Cascade.reshape(x, {m}), [0], [], oh, [0], [])
    [Cascade.reshape(placed, List.to_tuple(out))]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  # max pooling as the maximum over the window's taps, each a strided slice of the input padded
  # with the lowest value: any dilation, and the Indices output (the first maximum's position in
  # the flattened input, row-major, or column-major within a plane for storage_order 1)
  defp max_pool_taps(x, [kh, kw], [sh, sw], [dh, dw], [{pt, pb}, {pl, pr}], attrs) do
    [n, c, h, w] = dims(x)
    low = if float?(x), do: :neg_infinity, else: -1_000_000_000_000
    xp = Cascade.pad(x, low, [{0, 0, 0}, {0, 0, 0}, {pt, pb, 0}, {pl, pr, 0}])
    oh = div(h + pt + pb - ((kh - 1) * dh + 1), sh) + 1
    ow = div(w + pl + pr - ((kw - 1) * dw + 1), sw) + 1
    out = {n, c, oh, ow}
    dev = Cascade.device(x)
    io = fn axis -> Cascade.iota(out, axis: axis, device: dev) end
    base = Cascade.add(Cascade.multiply(io.(0), c * h * w), Cascade.multiply(io.(1), h * w))
    row0 = Cascade.subtract(Cascade.multiply(io.(2), sh), pt)
    col0 = Cascade.subtract(Cascade.multiply(io.(3), sw), pl)
    col_major = attr(attrs, "storage_order", 0) == 1

    {best, index} =
      for i <- 0..(kh - 1), j <- 0..(kw - 1), reduce: {nil, nil} do
        {best, index} ->
          v =
            Cascade.slice(
              xp,
              [0, 0, i * dh, j * dw],
              [n, c, (oh - 1) * sh + 1, (ow - 1) * sw + 1],
              strides: [1, 1, sh, sw]
            )

          r = Cascade.add(row0, i * dh)
          q = Cascade.add(col0, j * dw)

          at =
            if col_major,
              do: Cascade.add(base, Cascade.add(Cascade.multiply(q, h), r)),
              else: Cascade.add(base, Cascade.add(Cascade.multiply(r, w), q))

          if best == nil do
            {v, at}
          else
            better = Cascade.greater(v, best)
            {Cascade.select(better, v, best), Cascade.select(better, at, index)}
          end
      end

    [best, Cascade.as_type(index, :s64)]
  end
end
