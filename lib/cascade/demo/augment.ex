defmodule Cascade.Demo.Augment do
  @moduledoc """
  Random translations of a batch of images, on the batch's device: each image moves by its
  own (dy, dx), each in `-max..max` pixels, and the pixels that come in are zero. With 8,000
  training digits an MLP learns the training set by heart within a few epochs; shifted copies
  are the cheapest way to show it more digits.

  How, in Cascade ops: the batch is padded by `max` on each side and flattened; a table holds,
  for each of the (2·max + 1)² shifts, the position in a padded image of every output pixel;
  `take/3` picks each image's row of the table, an offset per image makes the positions
  absolute, and one more `take/3` reads the pixels.
  """

  defstruct [:max, :rows, :cols, :table]

  @doc "A shifter for `rows` × `cols` images moved by up to `max` pixels, its table on `device`."
  def new(rows, cols, max, device) do
    {prows, pcols} = {rows + 2 * max, cols + 2 * max}

    positions =
      for dy <- -max..max,
          dx <- -max..max,
          r <- 0..(rows - 1),
          c <- 0..(cols - 1),
          do: (r + max - dy) * pcols + (c + max - dx)

    table =
      Cascade.tensor(positions, type: :s64, device: device)
      |> Cascade.reshape({(2 * max + 1) * (2 * max + 1), rows * cols})

    %__MODULE__{max: max, rows: rows, cols: cols, table: {table, prows * pcols}}
  end

  @doc "The number of distinct shifts, to draw each image's shift from (0 up to it, excluded)."
  def shifts(%__MODULE__{max: max}), do: (2 * max + 1) * (2 * max + 1)

  @doc """
  `x` ({batch, rows · cols}) with image i moved by shift number `Enum.at(choices, i)` (a
  number below `shifts/1`; the shift (0, 0) is `div(shifts, 2)`).
  """
  def apply(%__MODULE__{max: 0}, x, _choices), do: x

  def apply(%__MODULE__{max: max, rows: rows, cols: cols, table: {table, padded}}, x, choices) do
    batch = elem(Cascade.shape(x), 0)
    device = Cascade.device(x)

    flat =
      x |> Cascade.reshape({batch, rows, cols}) |> pad(max) |> Cascade.reshape({batch * padded})

    chosen = Cascade.take(table, Cascade.tensor(choices, type: :s64, device: device), axis: 0)
    offsets = Cascade.iota({batch, 1}, device: device) |> Cascade.multiply(padded)
    Cascade.take(flat, Cascade.add(chosen, offsets))
  end

  defp pad(x, max), do: Cascade.pad(x, 0, [{0, 0, 0}, {max, max, 0}, {max, max, 0}])
end
