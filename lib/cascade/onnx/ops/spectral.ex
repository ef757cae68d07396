defmodule Cascade.ONNX.Ops.Spectral do
  @moduledoc false
  # DFT (products with the transform matrix) and Det (Gaussian elimination); Cascade.ONNX.Ops
  # hands them here.

  import Cascade.ONNX.Ops,
    only: [attr: 3, fail: 1, axis: 2, values: 1, take_along: 3, dims: 1, rank: 1]

  @doc false
  # The discrete Fourier transform along `axis` as products with cos and sin matrices on the
  # device; the last axis holds (real) or (real, imaginary)
  def run("DFT", [x | rest], attrs, _ctx) do
    r = rank(x)
    a = axis(attr(attrs, "axis", 1), r)
    inverse = attr(attrs, "inverse", 0) == 1
    n0 = elem(Cascade.shape(x), a)

    len =
      case rest do
        [l | _] when l != nil -> trunc(hd(values(l)))
        _ -> n0
      end

    # pad or cut the signal to the length
    x =
      cond do
        len > n0 ->
          Cascade.pad(
            x,
            0,
            for(d <- 0..(r - 1), do: if(d == a, do: {0, len - n0, 0}, else: {0, 0, 0}))
          )

        len < n0 ->
          Cascade.slice(x, List.duplicate(0, r), List.replace_at(dims(x), a, len))

        true ->
          x
      end

    k = if attr(attrs, "onesided", 0) == 1, do: div(len, 2) + 1, else: len
    dev = Cascade.device(x)
    xs = Cascade.as_type(x, :f64)
    comps = List.last(dims(x))

    part = fn i ->
      Cascade.slice(
        xs,
        List.replace_at(List.duplicate(0, r), r - 1, i),
        List.replace_at(dims(x), r - 1, 1)
      )
    end

    re = part.(0)
    im = if comps == 2, do: part.(1), else: nil
    # theta[n][k] = 2 pi n k / len
    nk =
      Cascade.multiply(
        Cascade.iota({len, k}, axis: 0, type: :f64, device: dev),
        Cascade.iota({len, k}, axis: 1, type: :f64, device: dev)
      )

    theta = Cascade.multiply(nk, 2 * :math.pi() / len)
    cos = Cascade.cos(theta)
    sin = Cascade.sin(theta)

    # along axis a: contract the signal's axis with the matrices' first, the result's new axis last
    along = fn t, m ->
      y = Cascade.dot(t, [a], [], m, [0], [])
      perm = Enum.to_list(0..(r - 2)//1) |> List.insert_at(a, r - 1)
      Cascade.transpose(y, axes: perm)
    end

    sign = if inverse, do: 1, else: -1

    {out_re, out_im} =
      if im do
        {Cascade.subtract(along.(re, cos), Cascade.multiply(along.(im, sin), sign)),
         Cascade.add(along.(im, cos), Cascade.multiply(along.(re, sin), sign))}
      else
        {along.(re, cos), Cascade.multiply(along.(re, sin), sign)}
      end

    {out_re, out_im} =
      if inverse,
        do: {Cascade.divide(out_re, len), Cascade.divide(out_im, len)},
        else: {out_re, out_im}

    [Cascade.concatenate([out_re, out_im], axis: r - 1) |> Cascade.as_type(Cascade.type(x))]
  end

  # the determinant of {..., n, n} by Gaussian elimination with partial pivoting on the device:
  # each column's largest entry swapped up (the sign follows), the rows below cleared
  def run("Det", [a], _attrs, _ctx) do
    d = dims(a)
    {batch, [n, n]} = Enum.split(d, -2)
    b = Enum.product(batch)
    type = Cascade.type(a)
    m = a |> Cascade.as_type(:f64) |> Cascade.reshape({b, n, n})
    dev = Cascade.device(a)
    rows = Cascade.iota({b, n}, axis: 1, device: dev)
    one = Cascade.full(1, {b}, type: :f64, device: dev)

    {m, sign} =
      Enum.reduce(0..(n - 1)//1, {m, one}, fn j, {m, sign} ->
        col = m |> Cascade.slice([0, 0, j], [b, n, 1]) |> Cascade.reshape({b, n})
        # rows above j cannot be the pivot
        cand = Cascade.select(Cascade.less(rows, j), Cascade.multiply(col, 0), Cascade.abs(col))
        p = Cascade.argmax(cand, axis: 1, keep_axis: true)

        perm =
          Cascade.select(
            Cascade.equal(rows, j),
            p,
            Cascade.select(Cascade.equal(rows, p), j, rows)
          )

        m =
          take_along(
            m,
            Cascade.broadcast(Cascade.reshape(perm, {b, n, 1}), {b, n, n}, axes: [0, 1, 2]),
            1
          )

        swapped = Cascade.not_equal(Cascade.reshape(p, {b}), j)
        sign = Cascade.select(swapped, Cascade.negate(sign), sign)
        pivot_row = Cascade.slice(m, [0, j, 0], [b, 1, n])
        pivot = Cascade.slice(m, [0, j, j], [b, 1, 1])
        col = Cascade.slice(m, [0, 0, j], [b, n, 1])
        below = Cascade.reshape(Cascade.greater(rows, j), {b, n, 1})

        safe =
          Cascade.select(
            Cascade.equal(pivot, 0),
            Cascade.add(Cascade.multiply(pivot, 0), 1),
            pivot
          )

        factor = Cascade.select(below, Cascade.divide(col, safe), Cascade.multiply(col, 0))
        {Cascade.subtract(m, Cascade.multiply(factor, pivot_row)), sign}
      end)

    diag =
      take_along(m, Cascade.reshape(Cascade.iota({b, n}, axis: 1, device: dev), {b, n, 1}), 2)

    det = Cascade.multiply(Cascade.product(Cascade.reshape(diag, {b, n}), axes: [1]), sign)
    [det |> Cascade.reshape(List.to_tuple(batch)) |> Cascade.as_type(type)]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")
end
