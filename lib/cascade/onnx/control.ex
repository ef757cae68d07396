defmodule Cascade.ONNX.Control do
  @moduledoc false
  # ONNX's control flow: If, Loop and Scan. Their bodies are graphs (node attributes) that see
  # every value of the enclosing graphs by name; each body runs through `run_body`, given in the
  # context by `Cascade.ONNX`, so its nodes go through the same negotiation as the graph's own.
  # The loop counter and the condition are read back to the BEAM once per iteration.

  alias Cascade.ONNX.Ops

  @names ~w(If Loop Scan)

  def names, do: @names

  @doc "The body graphs of a control-flow node, with the names they bind (empty for others)."
  def bodies(%{op_type: op, attributes: attrs}) when op in @names do
    for {name, {:graph, g}} <- attrs, g != nil, do: {name, g}
  end

  def bodies(_node), do: []

  def run("If", [c], attrs, ctx) do
    branch = if truthy?(c), do: "then_branch", else: "else_branch"
    ctx.run_body.(body!(attrs, branch), [])
  end

  # Loop (opset 11-17): inputs M (trip count) and cond, both optional, then the loop-carried
  # values; the body takes (iteration, cond, carried...) and gives (cond, carried..., scans...);
  # the outputs are the final carried values, then each scan output stacked along a new axis 0
  def run("Loop", [m, c | initial], attrs, ctx) do
    body = body!(attrs, "body")
    n = length(initial)
    k = length(body.outputs) - 1 - n
    if k < 0, do: fail("Loop: the body gives #{length(body.outputs)} outputs for #{n} values")
    trips = if m, do: scalar(m), else: :infinity
    device = if ctx.device, do: [device: ctx.device], else: []
    cond0 = if c, do: truthy?(c), else: true

    {carried, scans} = loop(body, ctx, device, trips, 0, cond0, initial, List.duplicate([], k))

    stacked =
      Enum.map(scans, fn
        [] -> fail("Loop: no iteration ran, so its scan outputs have no element type or shape")
        slices -> slices |> Enum.reverse() |> stack(0)
      end)

    carried ++ stacked
  end

  # Scan (opset 9-17): N state values, then `num_scan_inputs` tensors sliced along their scan
  # axes; opset 8's form has a leading optional sequence_lens and a batch axis 0 on every input
  def run("Scan", args, attrs, ctx) do
    if ctx.opset < 9, do: scan8(args, attrs, ctx), else: scan(args, attrs, ctx)
  end

  defp loop(_body, _ctx, _device, trips, i, go, carried, scans)
       when not go or (trips != :infinity and i >= trips),
       do: {carried, scans}

  defp loop(body, ctx, device, trips, i, true, carried, scans) do
    iter = Cascade.full(i, {}, [type: :s64] ++ device)
    c = Cascade.full(1, {}, [type: :u8] ++ device)
    [c_out | rest] = ctx.run_body.(body, [iter, c | carried])
    {carried, new} = Enum.split(rest, length(carried))
    scans = Enum.zip_with(scans, new, &[&2 | &1])
    loop(body, ctx, device, trips, i + 1, truthy?(c_out), carried, scans)
  end

  defp scan(args, attrs, ctx) do
    body = body!(attrs, "body")
    m = attr(attrs, "num_scan_inputs", nil) || fail("Scan: no num_scan_inputs")
    {states, xs} = Enum.split(args, length(args) - m)
    k = length(body.outputs) - length(states)
    in_axes = attr(attrs, "scan_input_axes", List.duplicate(0, m))
    in_dirs = attr(attrs, "scan_input_directions", List.duplicate(0, m))
    out_axes = attr(attrs, "scan_output_axes", List.duplicate(0, k))
    out_dirs = attr(attrs, "scan_output_directions", List.duplicate(0, k))

    xs =
      Enum.zip_with([xs, in_axes], fn [x, a] ->
        a = if a < 0, do: a + tuple_size(Cascade.shape(x)), else: a
        {x, a}
      end)

    lengths = Enum.uniq(for {x, a} <- xs, do: elem(Cascade.shape(x), a))

    steps =
      case lengths do
        [t] -> t
        [] -> fail("Scan: no scan input")
        _ -> fail("Scan: the scan inputs have different lengths #{inspect(lengths)}")
      end

    {states, outs} =
      Enum.reduce(0..(steps - 1)//1, {states, List.duplicate([], k)}, fn t, {states, outs} ->
        slices =
          Enum.zip_with(xs, in_dirs, fn {x, a}, dir ->
            take(x, a, if(dir == 1, do: steps - 1 - t, else: t))
          end)

        results = ctx.run_body.(body, states ++ slices)
        {states, new} = Enum.split(results, length(states))
        {states, Enum.zip_with(outs, new, &[&2 | &1])}
      end)

    stacked =
      Enum.zip_with([outs, out_axes, out_dirs], fn [slices, a, dir] ->
        if slices == [], do: fail("Scan: no step ran, so its outputs have no shape")
        slices = if dir == 1, do: slices, else: Enum.reverse(slices)
        a = if a < 0, do: a + tuple_size(Cascade.shape(hd(slices))) + 1, else: a
        stack(slices, a)
      end)

    states ++ stacked
  end

  # opset 8: every input has a batch axis 0 and scans along axis 1; one opset-9 scan per batch
  defp scan8([lens | args], attrs, ctx) do
    if lens != nil, do: fail("Scan: sequence_lens (opset 8) is not supported")
    m = attr(attrs, "num_scan_inputs", nil) || fail("Scan: no num_scan_inputs")
    dirs = attr(attrs, "directions", List.duplicate(0, m))
    batch = elem(Cascade.shape(hd(args)), 0)

    attrs9 = %{
      "body" => attrs["body"],
      "num_scan_inputs" => {:int, m},
      "scan_input_directions" => {:ints, dirs}
    }

    per_batch =
      for b <- 0..(batch - 1)//1 do
        scan(Enum.map(args, &take(&1, 0, b)), attrs9, ctx)
      end

    per_batch |> Enum.zip_with(& &1) |> Enum.map(&stack(&1, 0))
  end

  # The i-th slice of x along axis a, without that axis.
  defp take(x, a, i) do
    shape = Cascade.shape(x)
    start = List.duplicate(0, tuple_size(shape)) |> List.replace_at(a, i)
    lengths = shape |> put_elem(a, 1) |> Tuple.to_list()
    x |> Cascade.slice(start, lengths) |> Cascade.reshape(Tuple.delete_at(shape, a))
  end

  defp stack(slices, a) do
    slices
    |> Enum.map(&Cascade.reshape(&1, Tuple.insert_at(Cascade.shape(&1), a, 1)))
    |> Cascade.concatenate(axis: a)
  end

  defp body!(attrs, name) do
    case Map.get(attrs, name) do
      {:graph, g} when is_map(g) -> g
      _ -> fail("no #{name} graph")
    end
  end

  defp truthy?(t), do: scalar(t) not in [0, 0.0]

  defp scalar(t) do
    case Cascade.size(t) do
      1 -> t |> Cascade.reshape({}) |> Cascade.to_list()
      n -> fail("expected one element, got #{n}")
    end
  end

  defp attr(attrs, name, default), do: Ops.attr(attrs, name, default)
  defp fail(message), do: Ops.fail(message)
end
