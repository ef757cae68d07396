defmodule Cascade.Demo.Augment do
  @moduledoc """
  Random translations of a batch of images, on the batch's device: each image moves by its
  own (dy, dx), each in `-max..max` pixels, and the pixels that come in are zero. With 8,000
  training digits an MLP learns the training set by heart within a few epochs; shifted copies
  are the cheapest way to show it more digits.

  How, in Cascade ops: the batch is padded by `max` on each side (at least 1 when images also
  turn or scale) and flattened; a table holds, for each of the moves (the (2·max + 1)² shifts,
  times the angles and scales of `new/5`), the position in a padded image of every output pixel;
  `take/3` picks each image's row of the table, an offset per image makes the positions
  absolute, and one more `take/3` reads the pixels. With `interpolation: :linear` a row holds
  four positions a pixel and a second table their weights: the four pixels read are weighted
  and summed (`sum/2` over the middle axis of {batch, 4, pixels}).
  """

  defstruct [:pad, :count, :rows, :cols, :table, weights: nil]

  @doc """
  A shifter for `rows` × `cols` images moved by up to `max` pixels, its table on `device`.

  Options: `rotate:` (degrees, 0 for none) turns each image also by one of -d, -d/2, 0, d/2
  or d degrees about its centre, and `scale:` (a fraction, 0 for none) scales it by one of
  1 - f, 1 or 1 + f; each output pixel takes the nearest input pixel, zero where that falls
  outside the image. Every combination of shift, angle and scale is one row of the table.
  `interpolation: :linear` instead mixes the four input pixels around each output pixel's
  source, weighted by how near it lies to each (bilinear; the default, `:nearest`, takes the
  nearest one); shifts alone move by whole pixels either way.
  """
  def new(rows, cols, max, device, opts \\ []) do
    rotate = Keyword.get(opts, :rotate, 0)
    scale = Keyword.get(opts, :scale, 0)
    interpolation = Keyword.get(opts, :interpolation, :nearest)

    unless interpolation in [:nearest, :linear],
      do:
        raise(
          ArgumentError,
          "interpolation: expected :nearest or :linear, got: #{inspect(interpolation)}"
        )

    angles = if rotate == 0, do: [0.0], else: Enum.map([-1, -0.5, 0, 0.5, 1], &(&1 * rotate))
    scales = if scale == 0, do: [1.0], else: [1 - scale, 1.0, 1 + scale]
    # a border of zeros, at least one pixel wide: where a source pixel lies outside the image
    # it is read from the padded image's first position, always zero
    pad = if angles == [0.0] and scales == [1.0], do: max, else: Kernel.max(max, 1)
    {prows, pcols} = {rows + 2 * pad, cols + 2 * pad}
    {cy, cx} = {(rows - 1) / 2, (cols - 1) / 2}

    moves =
      for dy <- -max..max//1,
          dx <- -max..max//1,
          angle <- angles,
          {sin, cos} = {:math.sin(angle * :math.pi() / 180), :math.cos(angle * :math.pi() / 180)},
          s <- scales,
          do: {dy, dx, sin, cos, s}

    count = length(moves)
    shifter = %__MODULE__{pad: pad, count: count, rows: rows, cols: cols}

    if interpolation == :linear and count > (2 * max + 1) * (2 * max + 1) do
      {table, weights} = corners(moves, {rows, cols}, pad, device)
      %{shifter | table: {table, prows * pcols}, weights: weights}
    else
      positions =
        for {dy, dx, sin, cos, s} <- moves, r <- 0..(rows - 1), c <- 0..(cols - 1) do
          # the source of output pixel (r, c): the shift undone, then the rotation and the scale
          {y, x} = {r - dy - cy, c - dx - cx}
          sr = round((cos * y - sin * x) / s + cy)
          sc = round((sin * y + cos * x) / s + cx)

          if sr in 0..(rows - 1) and sc in 0..(cols - 1),
            do: (sr + pad) * pcols + sc + pad,
            else: 0
        end

      table =
        Cascade.tensor(positions, type: :s64, device: device)
        |> Cascade.reshape({count, rows * cols})

      %{shifter | table: {table, prows * pcols}}
    end
  end

  # Bilinear sampling, computed on the device (the same numbers in Elixir took 3.4 s for the
  # CNN's 375 moves): for every move and output pixel, the positions in the padded image of the
  # four input pixels around its source, {count, 4 · rows · cols} corner by corner, and their
  # weights (f32); position 0 (always zero) for a corner outside the image.
  defp corners(moves, {rows, cols}, pad, device) do
    count = length(moves)
    {cy, cx} = {(rows - 1) / 2, (cols - 1) / 2}

    [dy, dx, sin, cos, s] =
      for k <- 0..4 do
        moves
        |> Enum.map(&elem(&1, k))
        |> Cascade.tensor(type: :f64, device: device)
        |> Cascade.reshape({count, 1})
      end

    p = Cascade.iota({1, rows * cols}, type: :s64, device: device)

    y =
      p
      |> Cascade.quotient(cols)
      |> Cascade.as_type(:f64)
      |> Cascade.subtract(dy)
      |> Cascade.subtract(cy)

    x =
      p
      |> Cascade.remainder(cols)
      |> Cascade.as_type(:f64)
      |> Cascade.subtract(dx)
      |> Cascade.subtract(cx)

    # the source, as in new/5's nearest table: a row of the rotation, scaled, about the centre
    # (a - b and a + (-b) round alike)
    source = fn a, b, centre ->
      a
      |> Cascade.multiply(y)
      |> Cascade.add(Cascade.multiply(b, x))
      |> Cascade.divide(s)
      |> Cascade.add(centre)
    end

    {sy, sx} = {source.(cos, Cascade.negate(sin), cy), source.(sin, cos, cx)}

    {y0, x0} = {Cascade.floor(sy), Cascade.floor(sx)}
    {fy, fx} = {Cascade.subtract(sy, y0), Cascade.subtract(sx, x0)}

    {positions, weights} =
      Enum.unzip(
        for {oy, ox} <- [{0, 0}, {0, 1}, {1, 0}, {1, 1}] do
          {r, c} = {Cascade.add(y0, oy), Cascade.add(x0, ox)}
          wy = if oy == 0, do: Cascade.subtract(1, fy), else: fy
          wx = if ox == 0, do: Cascade.subtract(1, fx), else: fx

          inside =
            Cascade.greater_equal(r, 0)
            |> Cascade.logical_and(Cascade.less_equal(r, rows - 1))
            |> Cascade.logical_and(Cascade.greater_equal(c, 0))
            |> Cascade.logical_and(Cascade.less_equal(c, cols - 1))

          at =
            r
            |> Cascade.add(pad)
            |> Cascade.multiply(cols + 2 * pad)
            |> Cascade.add(c)
            |> Cascade.add(pad)

          {Cascade.select(inside, at, 0) |> Cascade.as_type(:s64),
           wy |> Cascade.multiply(wx) |> Cascade.as_type(:f32)}
        end
      )

    {Cascade.concatenate(positions, axis: 1), Cascade.concatenate(weights, axis: 1)}
  end

  @doc """
  The number of distinct moves (shift, angle and scale), to draw each image's from (0 up to it,
  excluded).
  """
  def shifts(%__MODULE__{count: count}), do: count

  @doc """
  `x` ({batch, rows · cols}) with image i moved by shift number `Enum.at(choices, i)` (a
  number below `shifts/1`; the identity, shift (0, 0) at angle 0 and scale 1, is
  `div(shifts, 2)`).
  """
  def apply(%__MODULE__{count: 1}, x, _choices), do: x

  def apply(
        %__MODULE__{pad: pad, rows: rows, cols: cols, table: {table, padded}} = shifter,
        x,
        choices
      ) do
    batch = elem(Cascade.shape(x), 0)
    device = Cascade.device(x)

    flat =
      x |> Cascade.reshape({batch, rows, cols}) |> pad(pad) |> Cascade.reshape({batch * padded})

    rows_chosen = Cascade.tensor(choices, type: :s64, device: device)
    chosen = Cascade.take(table, rows_chosen, axis: 0)
    offsets = Cascade.iota({batch, 1}, device: device) |> Cascade.multiply(padded)
    pixels = Cascade.take(flat, Cascade.add(chosen, offsets))

    case shifter.weights do
      nil ->
        pixels

      weights ->
        weights
        |> Cascade.take(rows_chosen, axis: 0)
        |> Cascade.as_type(Cascade.type(x))
        |> Cascade.multiply(pixels)
        |> Cascade.reshape({batch, 4, rows * cols})
        |> Cascade.sum(axes: [1])
    end
  end

  defp pad(x, n), do: Cascade.pad(x, 0, [{0, 0, 0}, {n, n, 0}, {n, n, 0}])
end
