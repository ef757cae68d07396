defmodule Cascade.Bench.Report do
  @moduledoc """
  The results of `mix cascade.bench` as a Markdown table and as JSON (written by hand:
  Cascade depends on no hex package).

  A row is `%{case, device, type, cascade_s, numpy_s, numpy_type, torch_s, torch_type, ratio,
  round_ratios, anchor, floor_s, cascade_check, numpy_check, torch_check, agrees}`; `ratio` =
  Cascade time / the time of the faster of NumPy and PyTorch (`anchor` names it), below 1 when
  Cascade is faster; `round_ratios` the same ratio in each round (`mix cascade.bench --rounds`);
  `floor_s` the machine's floor for the case (`Cascade.Bench.Floor`), nil where it has none. A
  library that did not run the case has nil figures.
  """

  alias Cascade.Bench.Timer

  # per element: a few units in the last place of the type, as the sums are compared to the sum
  # of absolute values
  @tolerance %{f64: 1.0e-12, f32: 1.0e-5, f16: 4.0e-3, bf16: 3.0e-2}

  @doc """
  A row from Cascade's result for one case and the anchors' (`%{numpy: result | nil, torch:
  result | nil}`, at least one of them). A check is `{sum, sum of absolute values}` of a
  result; `agrees` is nil without checks, otherwise whether Cascade's sums differ from each
  anchor's by at most the type's tolerance times the larger sum of absolute values — the error
  that rounding each element by that much could make. `rounds` are each round's `{Cascade's
  time, the faster anchor's time}`; `round_ratios` their ratios, which show how far the machine
  moved between rounds (`ratio` compares each side's fastest round). `floor` is the case's floor
  in seconds, or nil.

      iex> r = Cascade.Bench.Report.row("cpu", :f32, %{case: "add 1M", seconds: 2.0e-4, check: {10.0, 30.0}},
      ...>   %{numpy: %{seconds: 1.0e-4, check: {10.00001, 30.0}, numpy_type: "f32"},
      ...>     torch: %{seconds: 0.8e-4, check: {10.0, 30.0}, numpy_type: "f32"}},
      ...>   [{2.0e-4, 1.0e-4}, {4.0e-4, 1.6e-4}], 0.5e-4)
      iex> {r.ratio, r.anchor, r.agrees, r.round_ratios, r.floor_s}
      {2.5, "PyTorch", true, [2.0, 2.5], 5.0e-5}
  """
  def row(device, type, ours, %{} = anchors, rounds \\ [], floor \\ nil) do
    numpy = anchors[:numpy]
    torch = anchors[:torch]

    {anchor, best} =
      [{"NumPy", numpy}, {"PyTorch", torch}]
      |> Enum.reject(&is_nil(elem(&1, 1)))
      |> Enum.min_by(&elem(&1, 1).seconds)

    checks = for r <- [numpy, torch], r && r.check, do: r.check

    agrees =
      if ours.check && checks != [] do
        {sum, abs} = ours.check

        Enum.all?(checks, fn {their_sum, their_abs} ->
          abs(sum - their_sum) <=
            Map.fetch!(@tolerance, type) * Enum.max([abs, their_abs, 1.0e-30])
        end)
      end

    %{
      case: ours.case,
      device: device,
      type: type,
      cascade_s: ours.seconds,
      numpy_s: numpy && numpy.seconds,
      numpy_type: numpy && numpy.numpy_type,
      torch_s: torch && torch.seconds,
      torch_type: torch && torch.numpy_type,
      ratio: ours.seconds / best.seconds,
      round_ratios: Enum.map(rounds, fn {mine, theirs} -> mine / theirs end),
      anchor: anchor,
      floor_s: floor,
      cascade_check: check_list(ours.check),
      numpy_check: numpy && check_list(numpy.check),
      torch_check: torch && check_list(torch.check),
      agrees: agrees
    }
  end

  defp check_list({sum, abs}), do: [sum, abs]
  defp check_list(nil), do: nil

  @doc """
  The Markdown table of `rows`; a figure is followed by the type it was computed in where that
  differs. The floor column gives the case's floor and, after it, Cascade's time as a multiple of
  it.
  """
  def markdown(rows) do
    header = """
    | case | device | type | Cascade | NumPy | PyTorch | ratio to the faster | by round | floor (Cascade ×) | same result |
    |---|---|---|---:|---:|---:|---:|---:|---:|:---:|
    """

    header <>
      Enum.map_join(rows, "\n", fn r ->
        "| #{r.case} | #{r.device} | #{r.type} | #{Timer.format(r.cascade_s)} | " <>
          "#{anchor_time(r.numpy_s, r.numpy_type, r.type)} | " <>
          "#{anchor_time(r.torch_s, r.torch_type, r.type)} | #{fixed(r.ratio)} | " <>
          "#{by_round(r[:round_ratios])} | #{floor(r[:floor_s], r.cascade_s)} | " <>
          "#{agreement(r.agrees)} |"
      end) <> "\n"
  end

  defp floor(nil, _), do: "–"
  defp floor(s, ours), do: "#{Timer.format(s)} (#{fixed(ours / s)})"

  # each round's ratio, where there was more than one round
  defp by_round(ratios) when is_list(ratios) and length(ratios) > 1,
    do: Enum.map_join(ratios, " / ", &fixed/1)

  defp by_round(_), do: "–"

  @doc """
  The geometric mean of the ratios per device and type, as Markdown lines.

      iex> rows = [%{device: "cpu", type: :f32, ratio: 2.0}, %{device: "cpu", type: :f32, ratio: 0.5}]
      iex> Cascade.Bench.Report.geomeans(rows)
      "Geometric mean of the ratios: cpu f32 1.00 (2 cases)\\n"
  """
  def geomeans(rows) do
    parts =
      rows
      |> Enum.group_by(&{&1.device, &1.type})
      |> Enum.sort()
      |> Enum.map_join(", ", fn {{device, type}, rs} ->
        mean = :math.exp(Enum.sum(Enum.map(rs, &:math.log(&1.ratio))) / length(rs))
        "#{device} #{type} #{fixed(mean)} (#{length(rs)} cases)"
      end)

    "Geometric mean of the ratios: #{parts}\n"
  end

  defp anchor_time(nil, _, _), do: "–"

  defp anchor_time(s, computes_in, type) do
    if computes_in == to_string(type),
      do: Timer.format(s),
      else: "#{Timer.format(s)} (#{computes_in})"
  end

  defp agreement(true), do: "yes"
  defp agreement(false), do: "**no**"
  defp agreement(nil), do: "–"

  defp fixed(x) when x >= 100, do: :erlang.float_to_binary(x, decimals: 0)
  defp fixed(x), do: :erlang.float_to_binary(x, decimals: 2)

  @doc """
  `term` (maps with atom or string keys, lists, strings, numbers, booleans, nil) as JSON.

      iex> Cascade.Bench.Report.json(%{a: [1, 2.5, nil, true], b: "x\\"y"})
      ~s({"a": [1, 2.5, null, true], "b": "x\\\\"y"})
  """
  def json(term) when is_map(term) do
    body =
      term
      |> Enum.sort_by(fn {k, _} -> to_string(k) end)
      |> Enum.map_join(", ", fn {k, v} -> json(to_string(k)) <> ": " <> json(v) end)

    "{" <> body <> "}"
  end

  def json(list) when is_list(list), do: "[" <> Enum.map_join(list, ", ", &json/1) <> "]"
  def json(nil), do: "null"
  def json(b) when is_boolean(b), do: to_string(b)
  def json(a) when is_atom(a), do: json(to_string(a))
  def json(n) when is_integer(n), do: Integer.to_string(n)
  def json(x) when is_float(x), do: :erlang.float_to_binary(x, [:short])

  def json(s) when is_binary(s) do
    escaped =
      for <<c::utf8 <- s>>, into: "" do
        case c do
          ?" -> "\\\""
          ?\\ -> "\\\\"
          ?\n -> "\\n"
          c when c < 0x20 -> "\\u" <> String.pad_leading(Integer.to_string(c, 16), 4, "0")
          c -> <<c::utf8>>
        end
      end

    "\"" <> escaped <> "\""
  end
end
