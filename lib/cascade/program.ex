defmodule Cascade.Program do
  @moduledoc false
  # A function of Cascade tensors recorded once, as it runs, and made into one program in C
  # (c_src/core/program.c: one call into C per run, its elementwise chains fused, its steps'
  # buffers planned there): the planner the front ends share. Cascade.ONNX records a graph's
  # run per input signature; what reads a value that depends on the inputs back into Elixir
  # (a branch on data, a shape computed from data) cannot be a program, and the recording says
  # so instead.

  alias Cascade.{Device, Native, Op}

  defstruct [:program, :device, :outputs, :steps, :used, :donated, :n_inputs, :n_consts]

  @doc """
  Runs `fun.(inputs)` (a list of tensors in, a list of tensors out) once, recording the ops it
  calls: `{:ok, results, program}` where program is a `%Cascade.Program{}` that computes the
  same from other inputs of the same types and shapes, or `{:error, reason}` when none could be
  built from the recording (the results are fun's all the same); `{:tainted, reason}` when fun
  did something a program cannot repeat (the recording stops there, before it happens: run fun
  again without recording).
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
          {:ok, results, build(device, inputs, Enum.reverse(calls), results, constants: :keep)}
      end
    end
  end

  @doc """
  The program of recorded `calls` (oldest first, as `Cascade.Op.record/2` gives them, reversed)
  from `inputs` (the tensors the recording started from) to `results` (tensors): a
  `%Cascade.Program{}`, or `{:error, reason}` when the device refuses it. Options:

    * `:constants` - a result that is a constant (made outside the recording, or computed from
      constants only): `:keep` gives that tensor back on every run (tensors are values), `:copy`
      (the default) a copy made by the program, as an evaluator would make it anew.
    * `:prune` - the program takes only the inputs its steps read or its results are
      (`:used`: their positions among `inputs`); default `false`, all of them.
    * `:donated` - positions of inputs whose buffers the program may take over.
  """
  def build(device, inputs, calls, results, opts \\ []) do
    known = inputs |> Enum.with_index() |> Map.new(fn {t, i} -> {t.ref, {:in, i}} end)

    {steps, n, known} =
      Enum.reduce(calls, {[], 0, known}, fn {id, refs, params, out}, {steps, n, known} ->
        args = Enum.map(refs, &Map.get(known, &1, {:c, &1}))

        if Enum.all?(args, &match?({:c, _}, &1)),
          do: {steps, n, Map.put(known, out, {:c, out})},
          else: {[{id, args, params} | steps], n + 1, Map.put(known, out, {:s, n})}
      end)

    # results that are constants: kept as they are, or copied by a reshape step
    {leaves, {steps, _}} =
      Enum.map_reduce(results, {steps, n}, fn t, {steps, n} ->
        case {Map.get(known, t.ref, {:c, t.ref}), Keyword.get(opts, :constants, :copy)} do
          {{:c, _}, :keep} ->
            {{:const, t}, {steps, n}}

          {{:c, _} = c, :copy} ->
            {{:s, n}, {[{reshape_id(), [c], %{shape: t.shape}} | steps], n + 1}}

          {other, _} ->
            {other, {steps, n}}
        end
      end)

    steps = steps |> Enum.reverse() |> List.to_tuple()
    live = mark(for({:s, k} <- leaves, do: k), steps, MapSet.new())
    kept = Enum.filter(0..(tuple_size(steps) - 1)//1, &MapSet.member?(live, &1))

    used =
      if Keyword.get(opts, :prune, false) do
        reads = for k <- kept, {:in, i} <- elem(elem(steps, k), 1), do: i
        Enum.uniq(Enum.sort(reads ++ for({:in, i} <- leaves, do: i)))
      else
        Enum.to_list(0..(length(inputs) - 1)//1)
      end

    input_slot = used |> Enum.with_index() |> Map.new()
    all_inputs = List.to_tuple(inputs)
    descs = Enum.map(used, &desc(elem(all_inputs, &1)))
    n_inputs = length(descs)

    consts =
      kept
      |> Enum.flat_map(fn k -> for {:c, ref} <- elem(elem(steps, k), 1), do: ref end)
      |> Enum.uniq()

    const_slot = consts |> Enum.with_index(n_inputs) |> Map.new()
    step_slot = kept |> Enum.with_index(n_inputs + length(consts)) |> Map.new()

    slot = fn
      {:in, i} -> Map.fetch!(input_slot, i)
      {:c, ref} -> Map.fetch!(const_slot, ref)
      {:s, k} -> Map.fetch!(step_slot, k)
    end

    program_steps =
      Enum.map(kept, fn k ->
        {id, args, params} = elem(steps, k)
        {id, Enum.map(args, slot), params}
      end)

    out_slots = for {:s, _} = leaf <- leaves, uniq: true, do: slot.(leaf)
    out_index = out_slots |> Enum.with_index() |> Map.new()

    outputs =
      Enum.map(leaves, fn
        {:in, i} -> {:input, Map.fetch!(input_slot, i)}
        {:const, t} -> {:const, t}
        {:s, _} = leaf -> {:result, Map.fetch!(out_index, slot.(leaf))}
      end)

    # a donated input the function returns as it is keeps its buffer
    donated = for i <- Keyword.get(opts, :donated, []), slot = input_slot[i], do: slot
    donated = donated -- for {:input, i} <- outputs, do: i
    id = Device.id!(device)

    %__MODULE__{
      program: Native.program_new(id, descs, consts, program_steps, out_slots, donated),
      device: device,
      outputs: outputs,
      steps: length(kept),
      used: used,
      donated: donated,
      n_inputs: n_inputs,
      n_consts: length(consts)
    }
  rescue
    e in [Cascade.Error, ArgumentError] ->
      {:error, "building its program raised: " <> Exception.message(e)}
  end

  defp desc(t), do: {Cascade.Type.normalize!(t.type), t.shape}

  defp reshape_id do
    Enum.find_value(Cascade.__ops__(), fn op -> op.name == :reshape && op.id end)
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

  @doc """
  The program's results on `inputs` (tensors of the recorded types and shapes, all of them even
  where the program was pruned), in order.
  """
  def run(%__MODULE__{program: prog, outputs: outputs, used: used}, inputs) do
    all = List.to_tuple(inputs)
    inputs = Enum.map(used, &elem(all, &1))
    call = fn -> Native.program_run(prog, Enum.map(inputs, & &1.ref)) end

    results =
      case call.() do
        list when is_list(list) -> Op.tensors(list)
        other -> Op.after_run(other, call)
      end
      |> List.to_tuple()

    Enum.map(outputs, fn
      {:result, i} -> elem(results, i)
      {:input, i} -> Enum.at(inputs, i)
      {:const, t} -> t
    end)
  end

  @doc """
  The condition and body programs as one loop in C (`cx_program_loop`): the body runs while the
  condition's result `cond_pick` is true, its results `body_picks` (k for its result k,
  -(i + 1) for its input i) the next turn's state; `refs` the state's first refs. Gives the last
  state's refs. When the device asks for a collection before the loop is done (the states of
  earlier slices are garbage holding device memory) the loop hands its state back: collected,
  and the loop goes on from there.
  """
  def loop(cond, cond_pick, body, body_picks, refs) do
    call = fn -> Native.program_loop(cond, cond_pick, body, body_picks, refs) end

    case call.() do
      list when is_list(list) ->
        list

      {:cascade_loop, refs} ->
        :erlang.garbage_collect()
        :erlang.yield()
        loop(cond, cond_pick, body, body_picks, refs)

      other ->
        Op.after_run(other, call)
    end
  end
end
