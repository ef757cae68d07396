defmodule Cascade.ONNX.Ops.Einsum do
  @moduledoc false
  # Einsum (Cascade.ONNX.Ops hands it here): the equation parsed, each operand's diagonals
  # and summed labels, then pairwise products.

  import Cascade.ONNX.Ops, only: [attr: 3, fail: 1, rank: 1]

  @doc false
  # Einsum of one or two operands onto sums, transposes and dot/6; "..." and a label repeated
  # within one operand (a diagonal) are not taken
  def run("Einsum", args, attrs, _ctx) do
    eq = attrs |> attr("equation", "") |> String.replace(" ", "")
    eq = einsum_expand_ellipsis(eq, Enum.map(args, &rank/1))
    {ins, out} = einsum_parse(eq, length(args))
    # a label repeated within an operand takes its diagonal first
    {args, ins} =
      args |> Enum.zip(ins) |> Enum.map(fn {x, l} -> einsum_diagonal(x, l) end) |> Enum.unzip()

    case {args, ins} do
      {[x], [l]} -> [einsum_one(x, l, out)]
      {[a, b], [la, lb]} -> [einsum_two(a, la, b, lb, out)]
      _ -> fail("Einsum: #{length(args)} operands (one or two only)")
    end
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  # "..." as capital letters, as many as the operand's axes the other labels leave
  defp einsum_expand_ellipsis(eq, ranks) do
    if String.contains?(eq, "...") do
      {lhs, rhs} =
        case String.split(eq, "->") do
          [l, r] -> {l, r}
          [l] -> {l, nil}
        end

      ops = String.split(lhs, ",")

      widths =
        Enum.zip_with(ops, ranks, fn op, r ->
          if String.contains?(op, "..."),
            do: r - String.length(String.replace(op, "...", "")),
            else: 0
        end)

      width = Enum.max(widths ++ [0])
      letters = Enum.map(0..(width - 1)//1, &<<?A + &1>>)

      lhs =
        Enum.zip_with(ops, widths, fn op, n ->
          String.replace(op, "...", Enum.join(Enum.take(letters, -n)))
        end)
        |> Enum.join(",")

      rhs = rhs && String.replace(rhs, "...", Enum.join(letters))
      if rhs, do: lhs <> "->" <> rhs, else: lhs
    else
      eq
    end
  end

  # x with a label repeated: its diagonal over those axes, one axis per distinct label (in the
  # order they first come), by a gather of coordinates
  defp einsum_diagonal(x, labels) do
    uniq = Enum.uniq(labels)

    if uniq == labels do
      {x, labels}
    else
      size = fn l -> elem(Cascade.shape(x), Enum.find_index(labels, &(&1 == l))) end
      shape = uniq |> Enum.map(size) |> List.to_tuple()
      one = Tuple.append(shape, 1)
      dev = Cascade.device(x)

      coords =
        for l <- labels do
          Cascade.reshape(
            Cascade.iota(shape, axis: Enum.find_index(uniq, &(&1 == l)), device: dev),
            one
          )
        end

      {Cascade.gather(x, Cascade.concatenate(coords, axis: tuple_size(shape))), uniq}
    end
  end

  defp einsum_parse(eq, n) do
    {lhs, out} =
      case String.split(eq, "->") do
        [lhs, out] -> {lhs, String.graphemes(out)}
        [lhs] -> {lhs, nil}
      end

    ins = lhs |> String.split(",") |> Enum.map(&String.graphemes/1)
    if length(ins) != n, do: fail("Einsum: #{length(ins)} operands in the equation, #{n} given")
    # implicit output: the labels that appear once, in alphabetical order
    out =
      out ||
        ins
        |> List.flatten()
        |> Enum.frequencies()
        |> Enum.filter(&(elem(&1, 1) == 1))
        |> Enum.map(&elem(&1, 0))
        |> Enum.sort()

    {ins, out}
  end

  # sum the labels not kept, then order the rest as the output
  defp einsum_one(x, labels, out) do
    drop = for {l, i} <- Enum.with_index(labels), l not in out, do: i
    x = if drop == [], do: x, else: Cascade.sum(x, axes: drop)
    kept = Enum.reject(labels, &(&1 not in out))
    perm = Enum.map(out, fn l -> Enum.find_index(kept, &(&1 == l)) end)

    if perm == Enum.to_list(0..(length(perm) - 1)//1),
      do: x,
      else: Cascade.transpose(x, axes: perm)
  end

  defp einsum_two(a, la, b, lb, out) do
    # labels of one operand only and not in the output are summed first
    only = fn l, other -> Enum.filter(l, &(&1 not in other and &1 not in out)) end
    {a, la} = einsum_sum_away(a, la, only.(la, lb))
    {b, lb} = einsum_sum_away(b, lb, only.(lb, la))
    batch = Enum.filter(la, &(&1 in lb and &1 in out))
    contract = Enum.filter(la, &(&1 in lb and &1 not in out))
    idx = fn labels, list -> Enum.map(list, fn l -> Enum.find_index(labels, &(&1 == l)) end) end

    y =
      Cascade.dot(a, idx.(la, contract), idx.(la, batch), b, idx.(lb, contract), idx.(lb, batch))

    # dot gives batch, then a's free axes, then b's
    got =
      batch ++
        Enum.reject(la, &(&1 in batch or &1 in contract)) ++
        Enum.reject(lb, &(&1 in batch or &1 in contract))

    einsum_one(y, got, out)
  end

  defp einsum_sum_away(x, labels, []), do: {x, labels}

  defp einsum_sum_away(x, labels, drop) do
    axes = for {l, i} <- Enum.with_index(labels), l in drop, do: i
    {Cascade.sum(x, axes: axes), Enum.reject(labels, &(&1 in drop))}
  end
end
