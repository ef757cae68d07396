defmodule Cascade.Bench.Report do
  @moduledoc """
  The results of `mix cascade.bench` as a Markdown table and as JSON (written by hand:
  Cascade depends on no hex package).

  A row is `%{case, device, type, cascade_s, numpy_s, numpy_type, ratio, cascade_check,
  numpy_check, agrees}`; ratio = Cascade time / NumPy time, below 1 when Cascade is faster.
  """

  alias Cascade.Bench.Timer

  # per element: a few units in the last place of the type, as the sums are compared to the sum
  # of absolute values
  @tolerance %{f64: 1.0e-12, f32: 1.0e-5, f16: 4.0e-3, bf16: 3.0e-2}

  @doc """
  A row from Cascade's and NumPy's results for one case. A check is `{sum, sum of absolute
  values}` of a result; `agrees` is nil without checks, otherwise whether the two sums differ
  by at most the type's tolerance times the larger sum of absolute values — the error that
  rounding each element by that much could make.

      iex> r = Cascade.Bench.Report.row("cpu", :f32, %{case: "add 1M", seconds: 2.0e-4, check: {10.0, 30.0}},
      ...>   %{seconds: 1.0e-4, check: {10.00001, 30.0}, numpy_type: "f32"})
      iex> {r.ratio, r.agrees}
      {2.0, true}
  """
  def row(device, type, ours, theirs) do
    agrees =
      case {ours.check, theirs.check} do
        {{sum, abs}, {their_sum, their_abs}} ->
          abs(sum - their_sum) <=
            Map.fetch!(@tolerance, type) * Enum.max([abs, their_abs, 1.0e-30])

        _ ->
          nil
      end

    %{
      case: ours.case,
      device: device,
      type: type,
      cascade_s: ours.seconds,
      numpy_s: theirs.seconds,
      numpy_type: theirs.numpy_type,
      ratio: ours.seconds / theirs.seconds,
      cascade_check: check_list(ours.check),
      numpy_check: check_list(theirs.check),
      agrees: agrees
    }
  end

  defp check_list({sum, abs}), do: [sum, abs]
  defp check_list(nil), do: nil

  @doc "The Markdown table of `rows`."
  def markdown(rows) do
    header = """
    | case | device | type | Cascade | NumPy | NumPy computes in | ratio | same result |
    |---|---|---|---:|---:|---|---:|:---:|
    """

    header <>
      Enum.map_join(rows, "\n", fn r ->
        "| #{r.case} | #{r.device} | #{r.type} | #{Timer.format(r.cascade_s)} | " <>
          "#{Timer.format(r.numpy_s)} | #{r.numpy_type} | #{fixed(r.ratio)} | #{agreement(r.agrees)} |"
      end) <> "\n"
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
