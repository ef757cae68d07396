defmodule Cascade.Bench.SVG do
  @moduledoc """
  A bar chart of the ratios of `mix cascade.bench` as a standalone SVG file that a browser
  opens: one group of bars per case, one bar per device and type, on a logarithmic axis
  centred on 1 (bars to the left: Cascade faster than the faster of NumPy and PyTorch; to the right: slower).
  """

  @colors ~w(#4e79a7 #f28e2b #59a14f #e15759 #76b7b2 #edc948 #b07aa1 #ff9da7 #9c755f #bab0ac)
  @left 250
  @plot 560
  @bar 13
  @gap 12
  @legend_columns 5
  @min 0.01
  @max 100.0

  @doc "The chart for `rows` (see `Cascade.Bench.Report`), titled `title`."
  def chart(rows, title, subtitle) do
    series = rows |> Enum.map(&{&1.device, &1.type}) |> Enum.uniq()
    cases = rows |> Enum.map(& &1.case) |> Enum.uniq()
    group = length(series) * @bar + @gap
    top = 70 + div(length(series) - 1, @legend_columns) * 16
    height = top + length(cases) * group + 60
    width = @left + @plot + 90

    bars =
      for {name, i} <- Enum.with_index(cases),
          {s, j} <- Enum.with_index(series),
          row = Enum.find(rows, &(&1.case == name and {&1.device, &1.type} == s)),
          row != nil do
        bar(row, top + i * group + j * @bar, Enum.at(@colors, rem(j, length(@colors))))
      end

    labels =
      for {name, i} <- Enum.with_index(cases) do
        y = top + i * group + div(length(series) * @bar, 2) + 4
        ~s(<text x="#{@left - 8}" y="#{y}" text-anchor="end">#{escape(name)}</text>)
      end

    [
      ~s(<svg xmlns="http://www.w3.org/2000/svg" width="#{width}" height="#{height}" ) <>
        ~s(font-family="sans-serif" font-size="12">),
      ~s(<rect width="100%" height="100%" fill="white"/>),
      ~s(<text x="10" y="20" font-size="15" font-weight="bold">#{escape(title)}</text>),
      ~s(<text x="10" y="38" fill="#555">#{escape(subtitle)}</text>),
      axis(top, height),
      legend(series),
      labels,
      bars,
      "</svg>\n"
    ]
    |> List.flatten()
    |> Enum.join("\n")
  end

  defp x(ratio) do
    r = ratio |> max(@min) |> min(@max)

    round(
      @left +
        (:math.log10(r) - :math.log10(@min)) / (:math.log10(@max) - :math.log10(@min)) * @plot
    )
  end

  defp bar(row, y, color) do
    {x0, x1} = {x(1.0), x(row.ratio)}
    {from, w} = if x1 >= x0, do: {x0, x1 - x0}, else: {x1, x0 - x1}
    label_x = if x1 >= x0, do: x1 + 4, else: x1 - 4
    anchor = if x1 >= x0, do: "start", else: "end"

    ~s(<rect x="#{from}" y="#{y}" width="#{max(w, 1)}" height="#{@bar - 2}" fill="#{color}">) <>
      ~s(<title>#{escape("#{row.case}, #{row.device} #{row.type}: #{ratio(row.ratio)}")}</title></rect>\n) <>
      ~s(<text x="#{label_x}" y="#{y + @bar - 3}" font-size="10" text-anchor="#{anchor}">#{ratio(row.ratio)}</text>)
  end

  defp axis(top, height) do
    ticks =
      for r <- [0.01, 0.1, 1, 10, 100] do
        xx = x(r / 1)
        stroke = if r == 1, do: ~s(stroke="#000" stroke-width="1.5"), else: ~s(stroke="#ddd")

        ~s(<line x1="#{xx}" y1="#{top - 8}" x2="#{xx}" y2="#{height - 40}" #{stroke}/>\n) <>
          ~s(<text x="#{xx}" y="#{height - 26}" text-anchor="middle">#{r}×</text>)
      end

    ticks ++
      [
        ~s(<text x="#{x(0.1)}" y="#{height - 10}" text-anchor="middle" fill="#555">← Cascade faster</text>),
        ~s(<text x="#{x(10.0)}" y="#{height - 10}" text-anchor="middle" fill="#555">Cascade slower →</text>)
      ]
  end

  defp legend(series) do
    for {{device, type}, j} <- Enum.with_index(series) do
      x = @left + rem(j, @legend_columns) * 110
      y = 48 + div(j, @legend_columns) * 16
      color = Enum.at(@colors, rem(j, length(@colors)))

      ~s(<rect x="#{x}" y="#{y}" width="12" height="12" fill="#{color}"/>) <>
        ~s(<text x="#{x + 16}" y="#{y + 10}">#{escape("#{device} #{type}")}</text>)
    end
  end

  defp ratio(r) when r >= 100, do: "#{round(r)}×"
  defp ratio(r), do: "#{:erlang.float_to_binary(r, decimals: 2)}×"

  defp escape(text) do
    text
    |> to_string()
    |> String.replace("&", "&amp;")
    |> String.replace("<", "&lt;")
    |> String.replace(">", "&gt;")
    |> String.replace("\"", "&quot;")
  end
end
