defmodule Cascade.ONNX.Ops.Resize do
  @moduledoc false
  # Upsample, Resize and GridSample (Cascade.ONNX.Ops hands them here): taps gathered on the
  # device and weighted.

  import Cascade.ONNX.Ops,
    only: [attr: 3, fail: 1, values: 1, clamp: 3, round_half_even: 1, dims: 1, rank: 1]

  @doc false
  # Upsample (opset 7-9): Resize with scales, asymmetric coordinates, nearest (floor) or linear
  def run("Upsample", [x | rest], attrs, _ctx) do
    scales = if rest != [] and hd(rest), do: values(hd(rest)), else: attr(attrs, "scales", nil)
    mode = attr(attrs, "mode", "nearest")

    opts = %{
      mode: mode,
      coord: "asymmetric",
      nearest: "floor",
      a: -0.75,
      exclude: false,
      extrap: 0.0,
      roi: nil
    }

    sizes = Enum.zip_with(dims(x), scales, fn d, sc -> floor(d * sc) end)
    [resize(x, sizes, scales, opts)]
  end

  def run("Resize", [x | rest], attrs, ctx) do
    {roi, scales, sizes} =
      if ctx.opset >= 11 do
        [roi, scales, sizes] = Enum.take(rest ++ [nil, nil, nil], 3)
        {values(roi), values(scales), values(sizes)}
      else
        {nil, values(Enum.at(rest, 0)), nil}
      end

    in_dims = dims(x)

    {sizes, scales} =
      cond do
        sizes not in [nil, []] -> {sizes, Enum.zip_with(sizes, in_dims, &(&1 / &2))}
        scales not in [nil, []] -> {Enum.zip_with(in_dims, scales, &floor(&1 * &2)), scales}
        true -> fail("Resize: neither scales nor sizes")
      end

    opts = %{
      mode: attr(attrs, "mode", "nearest"),
      coord: attr(attrs, "coordinate_transformation_mode", "half_pixel"),
      nearest: attr(attrs, "nearest_mode", "round_prefer_floor"),
      a: attr(attrs, "cubic_coeff_a", -0.75),
      exclude: attr(attrs, "exclude_outside", 0) == 1,
      extrap: attr(attrs, "extrapolation_value", 0.0),
      roi: if(roi in [nil, []], do: nil, else: roi)
    }

    [resize(x, sizes, scales, opts)]
  end

  # Sampling X {N, C, H, W} at the grid's {N, Ho, Wo, 2} normalised (x, y) points, as PyTorch's
  # grid_sample (which ONNX's tests follow): bilinear, nearest or bicubic taps, each gathered on
  # the device and weighted; zeros, border or reflection padding.
  def run("GridSample", [x, grid], attrs, _ctx) do
    mode = attr(attrs, "mode", "bilinear")
    pad = attr(attrs, "padding_mode", "zeros")
    align = attr(attrs, "align_corners", 0) == 1
    [_n, _c, h, w] = dims(x)
    {gn, gh, gw, _} = Cascade.shape(grid)
    g = Cascade.as_type(grid, :f64)

    coord = fn k ->
      g |> Cascade.slice([0, 0, 0, k], [gn, gh, gw, 1]) |> Cascade.reshape({gn, gh, gw})
    end

    ix = unnormalize(coord.(0), w, align)
    iy = unnormalize(coord.(1), h, align)

    taps =
      case mode do
        "bicubic" ->
          fx = Cascade.floor(ix)
          fy = Cascade.floor(iy)
          wx = cubic_weights(Cascade.subtract(ix, fx))
          wy = cubic_weights(Cascade.subtract(iy, fy))

          for i <- 0..3, j <- 0..3 do
            xi = sample_index(Cascade.add(fx, j - 1), w, pad, align)
            yi = sample_index(Cascade.add(fy, i - 1), h, pad, align)
            {xi, yi, Cascade.multiply(Enum.at(wx, j), Enum.at(wy, i))}
          end

        other ->
          ix = source_index(ix, w, pad, align)
          iy = source_index(iy, h, pad, align)

          if other == "nearest" do
            [{round_half_even(ix), round_half_even(iy), nil}]
          else
            x0 = Cascade.floor(ix)
            y0 = Cascade.floor(iy)
            dx = Cascade.subtract(ix, x0)
            dy = Cascade.subtract(iy, y0)
            ex = Cascade.subtract(1, dx)
            ey = Cascade.subtract(1, dy)
            x1 = Cascade.add(x0, 1)
            y1 = Cascade.add(y0, 1)

            [
              {x0, y0, Cascade.multiply(ex, ey)},
              {x1, y0, Cascade.multiply(dx, ey)},
              {x0, y1, Cascade.multiply(ex, dy)},
              {x1, y1, Cascade.multiply(dx, dy)}
            ]
          end
      end

    out =
      taps
      |> Enum.map(fn {xi, yi, wt} -> grid_tap(x, xi, yi, wt) end)
      |> Enum.reduce(&Cascade.add(&2, &1))

    [Cascade.as_type(out, Cascade.type(x))]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  # Resize one axis at a time (the interpolations are separable): for each output position the
  # taps (input index, weight) from ONNX's coordinate transform and mode, as in its reference
  # implementation; the taps are gathered with take/3 and weighted on the device.
  defp resize(x, sizes, scales, opts) do
    r = rank(x)

    Enum.reduce(0..(r - 1), x, fn a, x ->
      n = elem(Cascade.shape(x), a)
      out = Enum.at(sizes, a)
      scale = Enum.at(scales, a)
      roi = opts.roi && {Enum.at(opts.roi, a), Enum.at(opts.roi, a + r)}

      if out == n and scale == 1 and opts.coord != "tf_crop_and_resize" do
        x
      else
        resize_axis(x, a, n, out, scale, roi, opts)
      end
    end)
  end

  defp resize_axis(x, a, n, out, scale, roi, opts) do
    positions =
      for j <- 0..(out - 1)//1 do
        # the resized length as ONNX's reference takes it: n * scale, not rounded
        xo = source_coordinate(j, n, n * scale, scale, roi, opts.coord)
        outside = opts.coord == "tf_crop_and_resize" and (xo < 0 or xo > n - 1)
        {outside, taps(xo, n, opts)}
      end

    k = positions |> hd() |> elem(1) |> length()
    dev = Cascade.device(x)
    shape = List.duplicate(1, rank(x)) |> List.replace_at(a, out) |> List.to_tuple()
    type = Cascade.type(x)

    y =
      Enum.reduce(0..(k - 1), nil, fn t, acc ->
        idx =
          Cascade.tensor(Enum.map(positions, fn {_, taps} -> elem(Enum.at(taps, t), 0) end),
            type: :s64,
            device: dev
          )

        w = Enum.map(positions, fn {_, taps} -> elem(Enum.at(taps, t), 1) end)
        part = Cascade.take(x, idx, axis: a)

        part =
          if k == 1,
            do: part,
            else:
              Cascade.multiply(
                part,
                Cascade.reshape(Cascade.tensor(w, type: :f64, device: dev), shape)
              )

        if acc, do: Cascade.add(acc, part), else: part
      end)

    y = Cascade.as_type(y, type)

    if Enum.any?(positions, &elem(&1, 0)) do
      mask =
        Cascade.reshape(
          Cascade.tensor(Enum.map(positions, &if(elem(&1, 0), do: 1, else: 0)),
            type: :u8,
            device: dev
          ),
          shape
        )

      fill = Cascade.as_type(Cascade.add(Cascade.multiply(y, 0), opts.extrap), type)
      Cascade.select(mask, fill, y)
    else
      y
    end
  end

  defp source_coordinate(j, n, len, scale, roi, coord) do
    case coord do
      "half_pixel" ->
        (j + 0.5) / scale - 0.5

      "pytorch_half_pixel" ->
        if len > 1, do: (j + 0.5) / scale - 0.5, else: 0.0

      "align_corners" ->
        if len == 1, do: 0.0, else: j * (n - 1) / (len - 1)

      "asymmetric" ->
        j / scale

      "tf_half_pixel_for_nn" ->
        (j + 0.5) / scale

      "tf_crop_and_resize" ->
        {s, e} = roi || {0.0, 1.0}

        if len > 1,
          do: s * (n - 1) + j * (e - s) * (n - 1) / (len - 1),
          else: 0.5 * (s + e) * (n - 1)

      other ->
        fail("Resize: coordinate_transformation_mode #{inspect(other)} is not supported")
    end
  end

  # [{index, weight}] of one output position, indices clamped to the axis (edge padding)
  defp taps(xo, n, %{mode: "nearest", nearest: how}) do
    f = :math.floor(xo)
    frac = xo - f

    i =
      case how do
        "round_prefer_floor" -> if frac == 0.5, do: f, else: Float.round(xo)
        "round_prefer_ceil" -> if frac == 0.5, do: f + 1, else: Float.round(xo)
        "floor" -> f
        "ceil" -> :math.ceil(xo)
        other -> fail("Resize: nearest_mode #{inspect(other)} is not supported")
      end

    [{clamp(trunc(i), 0, n - 1), 1.0}]
  end

  defp taps(xo, n, %{mode: "linear"}) do
    x0 = :math.floor(xo)
    w = xo - x0
    [{clamp(trunc(x0), 0, n - 1), 1 - w}, {clamp(trunc(x0) + 1, 0, n - 1), w}]
  end

  defp taps(xo, n, %{mode: "cubic", a: a, exclude: exclude}) do
    x0 = trunc(:math.floor(xo))
    s = xo - x0

    ws = [
      ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
      ((a + 2) * s - (a + 3)) * s * s + 1,
      ((a + 2) * (1 - s) - (a + 3)) * (1 - s) * (1 - s) + 1,
      ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a
    ]

    idx = [x0 - 1, x0, x0 + 1, x0 + 2]

    ws =
      if exclude do
        kept = Enum.zip_with(idx, ws, fn i, w -> if i < 0 or i > n - 1, do: 0.0, else: w end)
        total = Enum.sum(kept)
        Enum.map(kept, &(&1 / total))
      else
        ws
      end

    Enum.zip(Enum.map(idx, &clamp(&1, 0, n - 1)), ws)
  end

  defp taps(_xo, _n, %{mode: mode}), do: fail("Resize: mode #{inspect(mode)} is not supported")

  defp unnormalize(c, size, true),
    do: Cascade.multiply(Cascade.divide(Cascade.add(c, 1), 2), size - 1)

  defp unnormalize(c, size, false),
    do: Cascade.divide(Cascade.subtract(Cascade.multiply(Cascade.add(c, 1), size), 1), 2)

  # the continuous coordinate after padding: clipped (border), reflected then clipped
  # (reflection), or as it is (zeros)
  defp source_index(i, size, "border", _align), do: i |> Cascade.max(0) |> Cascade.min(size - 1)

  defp source_index(i, size, "reflection", align) do
    r = if align, do: reflect(i, 0, 2 * (size - 1)), else: reflect(i, -1, 2 * size - 1)
    r |> Cascade.max(0) |> Cascade.min(size - 1)
  end

  defp source_index(i, _size, _zeros, _align), do: i

  # an integer tap's coordinate under the padding (bicubic pads each tap)
  defp sample_index(i, _size, "zeros", _align), do: i
  defp sample_index(i, size, pad, align), do: source_index(i, size, pad, align)

  defp reflect(i, twice_low, twice_high) when twice_low == twice_high, do: Cascade.multiply(i, 0)

  defp reflect(i, twice_low, twice_high) do
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    d = Cascade.abs(Cascade.subtract(i, low))
    extra = Cascade.remainder(d, span)
    flips = Cascade.floor(Cascade.divide(d, span))
    even = Cascade.equal(Cascade.remainder(flips, 2), 0)
    Cascade.select(even, Cascade.add(extra, low), Cascade.add(Cascade.subtract(span, extra), low))
  end

  # the cubic convolution weights (A = -0.75) of the four taps around t in [0, 1)
  defp cubic_weights(t) do
    a = -0.75

    near = fn x ->
      Cascade.add(
        Cascade.multiply(
          Cascade.multiply(Cascade.subtract(Cascade.multiply(x, a + 2), a + 3), x),
          x
        ),
        1
      )
    end

    far = fn x ->
      x
      |> Cascade.multiply(a)
      |> Cascade.subtract(5 * a)
      |> Cascade.multiply(x)
      |> Cascade.add(8 * a)
      |> Cascade.multiply(x)
      |> Cascade.subtract(4 * a)
    end

    [
      far.(Cascade.add(t, 1)),
      near.(t),
      near.(Cascade.subtract(1, t)),
      far.(Cascade.subtract(2, t))
    ]
  end

  # x at integer coordinates (xi, yi) {N, Ho, Wo} for every channel, 0 outside, times the weight
  defp grid_tap(x, xi, yi, weight) do
    [n, c, h, w] = dims(x)
    {_, ho, wo} = Cascade.shape(xi)

    inside =
      Cascade.logical_and(
        Cascade.logical_and(Cascade.greater_equal(xi, 0), Cascade.less(xi, w)),
        Cascade.logical_and(Cascade.greater_equal(yi, 0), Cascade.less(yi, h))
      )

    out = {n, c, ho, wo}
    dev = Cascade.device(x)

    spread = fn t ->
      Cascade.broadcast(Cascade.reshape(t, {n, 1, ho, wo}), out, axes: [0, 1, 2, 3])
    end

    safe = fn t, size -> t |> Cascade.max(0) |> Cascade.min(size - 1) |> Cascade.as_type(:s64) end
    one = Tuple.append(out, 1)

    coords =
      [
        Cascade.iota(out, axis: 0, device: dev),
        Cascade.iota(out, axis: 1, device: dev),
        spread.(safe.(yi, h)),
        spread.(safe.(xi, w))
      ]
      |> Enum.map(&Cascade.reshape(&1, one))
      |> Cascade.concatenate(axis: 4)

    v =
      Cascade.multiply(
        Cascade.as_type(Cascade.gather(x, coords), :f64),
        spread.(Cascade.as_type(inside, :f64))
      )

    if weight, do: Cascade.multiply(v, spread.(weight)), else: v
  end
end
