defmodule Cascade.ONNX.Ops.Indexing do
  @moduledoc false
  # Gathers and scatters by index, and Compress (Cascade.ONNX.Ops hands them here).

  import Cascade.ONNX.Ops,
    only: [attr: 3, fail: 1, axis: 2, values: 1, take_along: 3, row_strides: 1, dims: 1, rank: 1]

  @doc false
  def run("Gather", [x, idx], attrs, _ctx) do
    a = axis(attr(attrs, "axis", 0), rank(x))
    n = elem(Cascade.shape(x), a)
    # negative indices count from the end
    idx = Cascade.select(Cascade.less(idx, 0), Cascade.add(idx, n), idx)
    [Cascade.take(x, idx, axis: a)]
  end

  def run("GatherElements", [x, idx], attrs, _ctx) do
    a = axis(attr(attrs, "axis", 0), rank(x))
    n = elem(Cascade.shape(x), a)
    idx = Cascade.select(Cascade.less(idx, 0), Cascade.add(idx, n), idx) |> Cascade.as_type(:s64)
    [take_along(x, idx, a)]
  end

  def run("Compress", [x, cond], attrs, _ctx) do
    keep = for {v, i} <- Enum.with_index(values(cond)), v != 0, do: i

    {x, a} =
      case attr(attrs, "axis", nil) do
        nil -> {Cascade.reshape(x, {Cascade.size(x)}), 0}
        a -> {x, axis(a, rank(x))}
      end

    n = elem(Cascade.shape(x), a)
    keep = Enum.filter(keep, &(&1 < n))
    idx = Cascade.tensor(keep, type: :s64, device: Cascade.device(x))

    if keep == [] do
      [
        Cascade.full(0, put_elem(Cascade.shape(x), a, 0),
          type: Cascade.type(x),
          device: Cascade.device(x)
        )
      ]
    else
      [Cascade.take(x, idx, axis: a)]
    end
  end

  def run("GatherND", [x, idx], attrs, _ctx) do
    b = attr(attrs, "batch_dims", 0)
    k = List.last(dims(idx))
    shape = Cascade.shape(x)
    dev = Cascade.device(x)
    # negative indices count from the end of their axis
    sizes = Cascade.tensor(Enum.map(b..(b + k - 1)//1, &elem(shape, &1)), type: :s64, device: dev)
    idx = Cascade.as_type(idx, :s64)
    idx = Cascade.select(Cascade.less(idx, 0), Cascade.add(idx, sizes), idx)

    # batch_dims: each index row also names its batch entry, as leading coordinates
    idx =
      if b == 0 do
        idx
      else
        lead = idx |> Cascade.shape() |> Tuple.delete_at(rank(idx) - 1)
        one = Tuple.append(lead, 1)

        coords =
          for j <- 0..(b - 1), do: Cascade.reshape(Cascade.iota(lead, axis: j, device: dev), one)

        Cascade.concatenate(coords ++ [idx], axis: rank(idx) - 1)
      end

    [Cascade.gather(x, idx, axes: Enum.to_list(0..(b + k - 1)))]
  end

  def run(op, [data, idx, updates], attrs, _ctx) when op in ["ScatterElements", "Scatter"] do
    r = rank(data)
    a = axis(attr(attrs, "axis", 0), r)
    n = elem(Cascade.shape(data), a)
    idx = Cascade.as_type(idx, :s64)
    idx = Cascade.select(Cascade.less(idx, 0), Cascade.add(idx, n), idx)
    # one-hot along a new last axis, summed over the indices' axis a: each index's update lands
    # at its position; then the new axis goes to a and the result is padded to data's shape
    oh = Cascade.one_hot(idx, depth: n, type: Cascade.type(data))
    upd = Cascade.reshape(updates, Tuple.append(Cascade.shape(updates), 1))
    placed = Cascade.sum(Cascade.multiply(oh, upd), axes: [a])
    hits = Cascade.sum(oh, axes: [a])
    perm = Enum.to_list(0..(r - 2)//1) |> List.insert_at(a, r - 1)
    placed = Cascade.transpose(placed, axes: perm)
    hits = Cascade.transpose(hits, axes: perm)
    pads = Enum.zip_with(dims(data), dims(placed), fn d, p -> {0, d - p, 0} end)
    placed = Cascade.pad(placed, 0, pads)
    hits = Cascade.pad(hits, 0, pads)

    case attr(attrs, "reduction", "none") do
      "add" -> [Cascade.add(data, placed) |> Cascade.as_type(Cascade.type(data))]
      _ -> [Cascade.select(Cascade.greater(hits, 0), placed, data)]
    end
  end

  # indices {..., k} into data's first k axes: their flat positions one-hot, the updates placed
  # by a product with that one-hot matrix on the device
  def run("ScatterND", [data, idx, updates], attrs, _ctx) do
    k = List.last(dims(idx))
    {lead, rest} = Enum.split(dims(data), k)
    p = Enum.product(lead)
    r = Enum.product(rest)
    m = div(Cascade.size(idx), max(k, 1))
    dev = Cascade.device(data)
    strides = row_strides(lead)
    idx = Cascade.as_type(idx, :s64)
    sizes = Cascade.tensor(lead, type: :s64, device: dev)
    idx = Cascade.select(Cascade.less(idx, 0), Cascade.add(idx, sizes), idx)

    flat =
      Cascade.dot(Cascade.reshape(idx, {m, k}), Cascade.tensor(strides, type: :s64, device: dev))

    oh = Cascade.one_hot(flat, depth: p, type: Cascade.type(data))
    placed = Cascade.dot(oh, [0], [], Cascade.reshape(updates, {m, r}), [0], [])
    hits = Cascade.reshape(Cascade.sum(oh, axes: [0]), {p, 1})
    d = Cascade.reshape(data, {p, r})

    out =
      case attr(attrs, "reduction", "none") do
        "add" ->
          Cascade.add(d, placed) |> Cascade.as_type(Cascade.type(data))

        "mul" ->
          # each position times every update that lands on it: the product over the updates
          # of 1 + hit * (update - 1)
          u = Cascade.reshape(updates, {m, 1, r})
          hit = Cascade.reshape(oh, {m, p, 1})
          factors = Cascade.add(Cascade.multiply(hit, Cascade.subtract(u, 1)), 1)

          Cascade.multiply(d, Cascade.product(factors, axes: [0]))
          |> Cascade.as_type(Cascade.type(data))

        _ ->
          Cascade.select(Cascade.greater(hits, 0), placed, d)
      end

    [Cascade.reshape(out, Cascade.shape(data))]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")
end
