# Cascade's side of bench/onnx/models.sh: each case of CACHE/cases.txt run by Cascade.ONNX on
# the default device (:host unless CASCADE_DEVICE says otherwise), timed with
# Cascade.Bench.Timer, its outputs compared with ONNX Runtime's (CACHE/ort.txt, from ort.js).
#
#     mix run bench/onnx/models.exs CACHE MIN_SECONDS [CASE...]
#
# Prints one table row per case: Cascade's median, ORT's, the ratio, the largest difference of
# the outputs from ORT's and ORT's own spread (optimised against unoptimised), then the
# geometric mean of the ratios.
alias Cascade.Bench.Timer

[cache, min_seconds | only] = System.argv()
min_seconds = String.to_float(min_seconds)
device = String.to_atom(System.get_env("CASCADE_DEVICE", "host"))
Cascade.put_default_device(device)

# "case NAME ..." lines, each followed by its "input"/"output" lines
parse = fn file ->
  file
  |> File.read!()
  |> String.split("\n", trim: true)
  |> Enum.map(&String.split(&1, " "))
  |> Enum.chunk_while(
    nil,
    fn
      ["case" | rest], nil -> {:cont, {rest, []}}
      ["case" | rest], {c, items} -> {:cont, {c, Enum.reverse(items)}, {rest, []}}
      item, {c, items} -> {:cont, {c, [item | items]}}
    end,
    fn
      nil -> {:cont, nil}
      {c, items} -> {:cont, {c, Enum.reverse(items)}, nil}
    end
  )
end

sci = fn
  d when is_float(d) -> :erlang.float_to_binary(d, scientific: 1)
  other -> inspect(other)
end

num = fn s ->
  {f, _} = Float.parse(s)
  f
end

dims = fn
  "-" -> {}
  s -> s |> String.split(",") |> Enum.map(&String.to_integer/1) |> List.to_tuple()
end

ort =
  for {[name, ms, runs], outputs} <- parse.(Path.join(cache, "ort.txt")), into: %{} do
    {name,
     %{
       ms: num.(ms),
       runs: runs,
       outputs:
         for ["output", o, type, d, file, spread] <- outputs do
           {o, type, dims.(d), file, num.(spread)}
         end
     }}
  end

# the largest |a - b| over two f32 tensors, and the largest |b|
f32_diff = fn got, want_bin ->
  want = Cascade.from_binary(want_bin, :f32, Cascade.shape(got))
  d = Cascade.subtract(got, want) |> Cascade.abs() |> Cascade.reduce_max() |> Cascade.to_list()
  {d, want |> Cascade.abs() |> Cascade.reduce_max() |> Cascade.to_list()}
end

rows =
  for {[name, model_path, _batch], inputs} <- parse.(Path.join(cache, "cases.txt")),
      only == [] or name in only,
      Map.has_key?(ort, name) do
    feed =
      for ["input", i, type, d, file] <- inputs, into: %{} do
        {i, Cascade.from_binary(File.read!(file), String.to_atom(type), dims.(d))}
      end

    {load_us, loaded} = :timer.tc(fn -> Cascade.ONNX.load(model_path) end)

    case loaded do
      {:error, why} ->
        IO.puts("#{name}: does not load: #{why}")
        nil

      {:ok, model} ->
        out = Cascade.ONNX.run(model, feed)

        diffs =
          for {o, type, _dims, file, spread} <- ort[name].outputs do
            got = Map.fetch!(out, o)

            case type do
              "float32" ->
                {d, scale} = f32_diff.(got, File.read!(file))
                %{output: o, diff: d, scale: scale, spread: spread}

              _ ->
                same = Cascade.to_binary(got) == File.read!(file)
                %{output: o, diff: if(same, do: 0.0, else: :differs), scale: 0.0, spread: spread}
            end
          end

        s =
          Timer.median(
            fn -> Cascade.ONNX.run(model, feed) |> Map.values() |> hd() end,
            min_seconds
          )

        ms = s * 1000
        ratio = ms / ort[name].ms

        # (an older build, compared in the same run, has no describe/1)
        plan =
          if function_exported?(Cascade.ONNX, :describe, 1),
            do: Cascade.ONNX.describe(model),
            else: %{nodes: length(model.graph.nodes), folded: 0, rewrites: %{}, runs: []}

        how =
          Enum.map_join(plan.runs, "; ", fn
            %{graph: g, mode: {:program, n}} -> "#{g}: one program of #{n} steps"
            %{graph: g, mode: {:nodes, why}} -> "#{g}: node by node (#{why})"
          end)

        worst = Enum.max_by(diffs, &if(is_float(&1.diff), do: &1.diff, else: 1.0e30))

        IO.puts(
          "#{String.pad_trailing(name, 20)} Cascade #{Float.round(ms, 3)} ms, ORT #{Float.round(ort[name].ms, 3)} ms: " <>
            "#{Float.round(ratio, 2)}x; largest difference #{inspect(worst.diff)} " <>
            "(|y| up to #{Float.round(worst.scale, 3)}, ORT's spread #{worst.spread}); " <>
            "load #{div(load_us, 1000)} ms; #{plan.nodes} nodes after the plan " <>
            "(#{plan.folded} folded, #{Enum.sum(Map.values(plan.rewrites))} rewritten); #{how}"
        )

        {name, ms, ort[name].ms, ratio, worst}
    end
  end
  |> Enum.reject(&is_nil/1)

IO.puts("\n| case | Cascade ms | ORT ms | ratio | largest diff | ORT spread |")
IO.puts("|---|---:|---:|---:|---:|---:|")

for {name, ms, ort_ms, ratio, w} <- rows do
  IO.puts(
    "| #{name} | #{Float.round(ms, 3)} | #{Float.round(ort_ms, 3)} | #{Float.round(ratio, 2)} | " <>
      "#{sci.(w.diff)} | #{sci.(w.spread)} |"
  )
end

if rows != [] do
  geo = :math.exp(Enum.sum(Enum.map(rows, &:math.log(elem(&1, 3)))) / length(rows))
  IO.puts("\ngeometric mean of the ratios: #{Float.round(geo, 2)} over #{length(rows)} cases")
end
