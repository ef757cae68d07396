defmodule Cascade.Program do
  @moduledoc false
  # A function of Cascade tensors recorded once, as it runs, and made into one program in C
  # (c_src/core/program.c: one call into C per run, its elementwise chains fused, its steps'
  # buffers planned there): the planner the front ends share. Cascade.ONNX records a graph's
  # run per input signature; what reads a value that depends on the inputs back into Elixir
  # (a branch on data, a shape computed from data) cannot be a program, and the recording says
  # so instead.

  alias Cascade.{Device, Native, Op}

  defstruct [:program, :device, :outputs, :steps]

  @doc """
  Runs `fun.(inputs)` (a list of tensors in, a list of tensors out) once, recording the ops it
  calls: `{:ok, results, program}` where program is a `%Cascade.Program{}` that computes the
  same from other inputs of the same types and shapes, or `{:error, reason}` when none could be
  built from the recording (the results are fun's all the same); `{:tainted, reason}` when fun did something a program cannot
  repeat (the recording stops there, before it happens: run fun again without recording).
  """
  def record(fun, inputs, device) do
    inputs = Enum.map(inputs, &Op.resource/1)
    refs = Enum.map(inputs, & &1.ref)

    if length(Enum.uniq(refs)) != length(refs) do
      {:tainted, "the same tensor is given as two inputs"}
    else
      case Op.record(fn -> fun.(inputs) end, refs) do
        {:tainted, reason} ->
          {:tainted, reason}

        {:ok, results, calls} ->
          {:ok, results, build(device, inputs, results, Enum.reverse(calls))}
      end
    end
  end

  # What each recorded ref is: {:in, i}, {:c, ref} (a constant: made outside the recording,
  # or computed from constants only) or {:s, k} (step k); then the steps the results need,
  # numbered into the slots program_new takes: inputs, constants, steps.
  defp build(device, inputs, results, calls) do
    known = inputs |> Enum.with_index() |> Map.new(fn {t, i} -> {t.ref, {:in, i}} end)

    {steps, _n, known} =
      Enum.reduce(calls, {[], 0, known}, fn {id, refs, params, out}, {steps, n, known} ->
        args = Enum.map(refs, &Map.get(known, &1, {:c, &1}))

        if Enum.all?(args, &match?({:c, _}, &1)),
          do: {steps, n, Map.put(known, out, {:c, out})},
          else: {[{id, args, params} | steps], n + 1, Map.put(known, out, {:s, n})}
      end)

    steps = steps |> Enum.reverse() |> List.to_tuple()
    leaves = Enum.map(results, &{Map.get(known, &1.ref, {:c, &1.ref}), &1})
    live = mark(for({{:s, k}, _} <- leaves, do: k), steps, MapSet.new())
    kept = Enum.filter(0..(tuple_size(steps) - 1)//1, &MapSet.member?(live, &1))
    n_inputs = length(inputs)

    consts =
      kept
      |> Enum.flat_map(fn k -> for {:c, ref} <- elem(elem(steps, k), 1), do: ref end)
      |> Enum.uniq()

    const_slot = consts |> Enum.with_index(n_inputs) |> Map.new()
    step_slot = kept |> Enum.with_index(n_inputs + length(consts)) |> Map.new()

    slot = fn
      {:in, i} -> i
      {:c, ref} -> Map.fetch!(const_slot, ref)
      {:s, k} -> Map.fetch!(step_slot, k)
    end

    program_steps =
      Enum.map(kept, fn k ->
        {id, args, params} = elem(steps, k)
        {id, Enum.map(args, slot), params}
      end)

    out_slots = for {{:s, _} = leaf, _} <- leaves, uniq: true, do: slot.(leaf)
    out_index = out_slots |> Enum.with_index() |> Map.new()

    # a result that is an input or a constant is given back as it is: tensors are values
    outputs =
      Enum.map(leaves, fn
        {{:in, i}, _} -> {:input, i}
        {{:c, _}, t} -> {:const, t}
        {{:s, _} = leaf, _} -> {:result, Map.fetch!(out_index, slot.(leaf))}
      end)

    descs = Enum.map(inputs, &{Cascade.Type.normalize!(&1.type), &1.shape})

    program =
      if program_steps == [],
        do: nil,
        else: Native.program_new(Device.id!(device), descs, consts, program_steps, out_slots, [])

    %__MODULE__{program: program, device: device, outputs: outputs, steps: length(kept)}
  rescue
    e in [Cascade.Error, ArgumentError] ->
      {:error, "building its program raised: " <> Exception.message(e)}
  end

  defp mark([], _steps, live), do: live

  defp mark([k | rest], steps, live) do
    if MapSet.member?(live, k) do
      mark(rest, steps, live)
    else
      {_, args, _} = elem(steps, k)
      mark(for({:s, j} <- args, do: j) ++ rest, steps, MapSet.put(live, k))
    end
  end

  @doc "The program's results on `inputs` (tensors of the recorded types and shapes), in order."
  def run(%__MODULE__{program: nil, outputs: outputs}, inputs), do: pick(outputs, {}, inputs)

  def run(%__MODULE__{program: prog, outputs: outputs}, inputs) do
    call = fn -> Native.program_run(prog, Enum.map(inputs, & &1.ref)) end

    results =
      case call.() do
        list when is_list(list) -> Op.tensors(list)
        other -> Op.after_run(other, call)
      end

    pick(outputs, List.to_tuple(results), inputs)
  end

  defp pick(outputs, results, inputs) do
    Enum.map(outputs, fn
      {:result, i} -> elem(results, i)
      {:input, i} -> Enum.at(inputs, i)
      {:const, t} -> t
    end)
  end
end
