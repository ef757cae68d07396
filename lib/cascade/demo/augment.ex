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
  absolute, and one more `take/3` reads the pixels.
  """

  defstruct [:pad, :count, :rows, :cols, :table]

  @doc """
  A shifter for `rows` × `cols` images moved by up to `max` pixels, its table on `device`.

  Options: `rotate:` (degrees, 0 for none) turns each image also by one of -d, -d/2, 0, d/2
  or d degrees about its centre, and `scale:` (a fraction, 0 for none) scales it by one of
  1 - f, 1 or 1 + f; each output pixel takes the nearest input pixel, zero where that falls
  outside the image. Every combination of shift, angle and scale is one row of the table.
  """
  def new(rows, cols, max, device, opts \\ []) do
    rotate = Keyword.get(opts, :rotate, 0)
    scale = Keyword.get(opts, :scale, 0)
    angles = if rotate == 0, do: [0.0], else: Enum.map([-1, -0.5, 0, 0.5, 1], &(&1 * rotate))
    scales = if scale == 0, do: [1.0], else: [1 - scale, 1.0, 1 + scale]
    # a border of zeros, at least one pixel wide: where a source pixel lies outside the image
    # it is read from the padded image's first position, always zero
    pad = if angles == [0.0] and scales == [1.0], do: max, else: Kernel.max(max, 1)
    {prows, pcols} = {rows + 2 * pad, cols + 2 * pad}
    {cy, cx} = {(rows - 1) / 2, (cols - 1) / 2}

    positions =
      for dy <- -max..max//1,
          dx <- -max..max//1,
          angle <- angles,
          {sin, cos} = {:math.sin(angle * :math.pi() / 180), :math.cos(angle * :math.pi() / 180)},
          s <- scales,
          r <- 0..(rows - 1),
          c <- 0..(cols - 1) do
        # the source of output pixel (r, c): the shift undone, then the rotation and the scale
        {y, x} = {r - dy - cy, c - dx - cx}
        sr = round((cos * y - sin * x) / s + cy)
        sc = round((sin * y + cos * x) / s + cx)

        if sr in 0..(rows - 1) and sc in 0..(cols - 1),
          do: (sr + pad) * pcols + sc + pad,
          else: 0
      end

    count = (2 * max + 1) * (2 * max + 1) * length(angles) * length(scales)

    table =
      Cascade.tensor(positions, type: :s64, device: device)
      |> Cascade.reshape({count, rows * cols})

    %__MODULE__{pad: pad, count: count, rows: rows, cols: cols, table: {table, prows * pcols}}
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

  def apply(%__MODULE__{pad: pad, rows: rows, cols: cols, table: {table, padded}}, x, choices) do
    batch = elem(Cascade.shape(x), 0)
    device = Cascade.device(x)

    flat =
      x |> Cascade.reshape({batch, rows, cols}) |> pad(pad) |> Cascade.reshape({batch * padded})

    chosen = Cascade.take(table, Cascade.tensor(choices, type: :s64, device: device), axis: 0)
    offsets = Cascade.iota({batch, 1}, device: device) |> Cascade.multiply(padded)
    Cascade.take(flat, Cascade.add(chosen, offsets))
  end

  defp pad(x, n), do: Cascade.pad(x, 0, [{0, 0, 0}, {n, n, 0}, {n, n, 0}])
end
