if Code.ensure_loaded?(Nx) do
  defmodule Cascade.Compiler do
    @moduledoc """
    An `Nx.Defn.Compiler` that turns a `defn` function into one Cascade program per input
    signature, negotiated once, and runs each call in one trip into C.

        Nx.Defn.jit(&MyModel.step/3, compiler: Cascade.Compiler, device: :blas)

        Nx.Defn.global_default_options(compiler: Cascade.Compiler)

    ## How it works

    The first call with a given function, input types and shapes, device and options
    compiles:

      1. The function is traced into an `Nx.Defn.Expr` graph, as under any compiler.
      2. The graph is evaluated once, as `Nx.Defn.Evaluator` would, on zero-filled inputs of
         the right types and shapes through `Cascade.Backend`, recording every Cascade op it
         runs. Ops that read only constants are folded: their results become constants of
         the program. Ops whose results no output needs are dropped.
      3. The recorded ops become a program (`c_src/core/program.h`): every step is
         negotiated once (native, decomposed or moved to the cpu, as `Cascade.explain/3`
         would say) and each intermediate is freed after its last reader.
      4. The program is rewritten where one op does the work of several:
         * a transpose of a product's result becomes the product with its operands swapped
           (Nx's gradient of `Nx.dot/2` ends in such a transpose);
         * chains of elementwise ops (f32, f16 or bf16; a bias row may join) whose
           intermediates nothing else reads become one `Cascade.fused/2` step, where the
           device runs `fused` natively (`:blas`: one pass over memory in blocks that stay in
           cache; up to eight ops a step). On other devices the ops stay steps of their own.

    Every later call with that signature is one NIF call: the inputs are checked against the
    program's types, shapes and device, the steps run in order in C (on a dirty scheduler
    when the program's estimated cost is above half a millisecond), and the results come back
    as `Cascade.Backend` tensors. Steps are counted in `Cascade.stats/0` as any call (the
    recording run is counted too).

    A function the recording cannot capture runs through `Nx.Defn.Evaluator` on
    `Cascade.Backend` instead (only the decision is cached). That is the case when it has
    `while` or `cond` (they decide on data), when evaluating it reads an input-dependent
    tensor into Elixir or moves it between devices, falls back to `Nx.BinaryBackend`
    (complex types, Elixir functions), or has hooks (`Nx.Defn.Kernel.hook/3`) that must run. `explain/3` says which mode a
    function got and why.

    ## Options

      * `:device` - the Cascade device the program runs on (default:
        `Cascade.Device.default/0`). Inputs on other devices or backends are copied there.
      * `:hooks` - as for `Nx.Defn.Evaluator`.
      * `:max_concurrency` - the number of partitions `Nx.Serving` starts (default 1).
      * `:cache` - `false` compiles again on every call (default `true`).

    ## Example

        iex> fun = Nx.Defn.jit(fn a, b -> Nx.add(Nx.multiply(Nx.exp(a), b), 1) end, compiler: Cascade.Compiler)
        iex> fun.(Nx.tensor([0.0, 1.0]), Nx.tensor([2.0, 2.0])) |> Nx.to_flat_list()
        [3.0, 6.436563491821289]
    """

    @behaviour Nx.Defn.Compiler

    alias Cascade.{Device, Native, Op}
    alias Nx.Defn.Composite

    @table :cascade_compiled
    @cache_limit 512

    @impl true
    def __partitions_options__(opts),
      do: List.duplicate(opts, Keyword.get(opts, :max_concurrency, 1))

    @impl true
    def __to_backend__(opts), do: {Cascade.Backend, device: device(opts)}

    @impl true
    def __stream__(key, input, acc, vars, fun, args_list, opts),
      do: Nx.Defn.Evaluator.__stream__(key, input, acc, vars, fun, args_list, opts)

    @impl true
    def __jit__(key, vars, fun, args_list, opts),
      do: __compile__(key, vars, fun, opts).(args_list)

    @impl true
    def __compile__(key, vars, fun, opts) do
      device = device(opts)
      compiled = compiled(key, vars, fun, device, opts)

      # The evaluator's closure holds the traced expression, whose subterms are shared: it is
      # never stored in the cache, where copying would unshare them (the graph of an SVD's
      # loops grows without bound that way), but made here, as Nx.Defn.Evaluator would.
      compiled =
        case compiled.mode do
          :program -> compiled
          _ -> Map.put(compiled, :evaluator, evaluator(key, vars, fun, opts))
        end

      fn
        [params] ->
          if opts[:cascade_explain], do: throw({:cascade_explain, describe(compiled)})
          [run(compiled, params, device)]

        args_list ->
          Enum.map(args_list, &run(compiled, &1, device))
      end
    end

    defp evaluator(key, vars, fun, opts),
      do: Nx.Defn.Evaluator.__compile__(key, vars, fun, Keyword.take(opts, [:hooks]))

    @doc """
    How `fun` compiles for `args`: the mode (`:program`, or `{:evaluator, reason}`) and the
    program's steps, each with the route and library the negotiation chose, the values it
    reads (`reads`: slots, the inputs first, then the constants, then each step's result) and,
    for a fused step, the ops it runs (`fused`). Takes the options of `Nx.Defn.jit/2`.

        iex> info = Cascade.Compiler.explain(fn x -> Nx.sum(Nx.exp(x)) end, [Nx.iota({4}, type: :f32)])
        iex> info.mode
        :program
        iex> Enum.map(info.steps, & &1.op)
        [:exp, :sum]
    """
    def explain(fun, args, opts \\ []) when is_function(fun) and is_list(args) do
      opts = Keyword.merge(opts, compiler: __MODULE__, cascade_explain: true)
      Nx.Defn.jit_apply(fun, args, opts)
      raise "unreachable: Cascade.Compiler.explain/3 did not compile"
    catch
      :throw, {:cascade_explain, info} -> info
    end

    defp device(opts) do
      device = opts[:device] || Device.default()
      Device.id!(device)
      device
    end

    ## Compiling

    defp compiled(key, vars, fun, device, opts) do
      signature =
        vars
        |> Composite.flatten_list()
        |> Enum.map(&{&1.type, &1.shape, &1.names, &1.vectorized_axes})

      hooks = Keyword.get(opts, :hooks, %{})
      cache_key = {key, signature, device, hooks}

      if Keyword.get(opts, :cache, true) do
        case :ets.lookup(@table, cache_key) do
          [{_, compiled}] ->
            compiled

          [] ->
            compiled = compile(key, vars, fun, device, opts)
            if :ets.info(@table, :size) >= @cache_limit, do: :ets.delete_all_objects(@table)
            :ets.insert(@table, {cache_key, compiled})
            compiled
        end
      else
        compile(key, vars, fun, device, opts)
      end
    end

    defp compile(key, vars, fun, device, opts) do
      base = %{device: device}

      expr = fun.(vars)

      cond do
        Enum.any?(Composite.flatten_list(vars), &(&1.vectorized_axes != [])) ->
          Map.put(base, :mode, {:evaluator, "vectorized inputs"})

        op = control_op(expr) ->
          Map.put(base, :mode, {:evaluator, "it has #{op}, which decides on tensor data"})

        Nx.Defn.Tree.has_hooks?(expr, Keyword.get(opts, :hooks, %{})) ->
          Map.put(base, :mode, {:evaluator, "hooks run Elixir code on intermediate values"})

        true ->
          record(base, vars, evaluator(key, vars, fun, opts), device)
      end
    end

    # The first while or cond in the graph, or nil.
    defp control_op(expr) do
      Composite.reduce(expr, %{}, &scan/2)
      nil
    catch
      {:cascade_control, op} -> op
    end

    defp scan(%Nx.Tensor{data: %Nx.Defn.Expr{op: op}}, _seen) when op in [:while, :cond],
      do: throw({:cascade_control, op})

    defp scan(%Nx.Tensor{data: %Nx.Defn.Expr{id: id}} = t, seen) do
      if Map.has_key?(seen, id) do
        seen
      else
        {_, seen} = Nx.Defn.Tree.apply_args(t, Map.put(seen, id, true), &{&1, scan(&1, &2)})
        seen
      end
    end

    defp scan(_other, seen), do: seen

    defp record(base, vars, evaluator, device) do
      placeholders =
        vars
        |> Composite.flatten_list()
        |> Enum.map(fn var ->
          t = Cascade.full(0, var.shape, type: var.type, device: device)
          %{var | data: %Cascade.Backend{tensor: t, device: device}}
        end)

      run = fn ->
        Nx.with_default_backend({Cascade.Backend, device: device}, fn ->
          [result] = evaluator.([Enum.map(placeholders, &fn -> &1 end)])
          result
        end)
      end

      case Op.record(run, Enum.map(placeholders, & &1.data.tensor.ref)) do
        {:tainted, reason} ->
          Map.put(base, :mode, {:evaluator, "evaluating it " <> reason})

        {:ok, result, calls} ->
          inputs = Enum.map(placeholders, & &1.data.tensor)
          build(base, inputs, result, Enum.reverse(calls))
      end
    rescue
      e in [Cascade.Error, ArgumentError] ->
        Map.put(base, :mode, {:evaluator, "recording it raised: " <> Exception.message(e)})
    end

    # What each recorded ref is: {:in, i}, {:c, ref} (a constant: made outside the recording,
    # or computed from constants only) or {:s, k} (step k).
    defp build(base, inputs, result, calls) do
      known = inputs |> Enum.with_index() |> Map.new(fn {t, i} -> {t.ref, {:in, i}} end)

      {steps, n, known} =
        Enum.reduce(calls, {[], 0, known}, fn {id, refs, params, out}, {steps, n, known} ->
          args = Enum.map(refs, &Map.get(known, &1, {:c, &1}))

          if Enum.all?(args, &match?({:c, _}, &1)),
            do: {steps, n, Map.put(known, out, {:c, out})},
            else: {[{id, args, params} | steps], n + 1, Map.put(known, out, {:s, n})}
        end)

      leaves = Composite.flatten_list([result])
      template = Composite.traverse(result, &%{&1 | data: nil})

      # results that are constants get a copy each call, as the evaluator would make anew
      {leaves, {steps, _}} =
        Enum.map_reduce(leaves, {steps, n}, fn %Nx.Tensor{data: %Cascade.Backend{tensor: t}},
                                               {steps, n} ->
          case Map.get(known, t.ref, {:c, t.ref}) do
            {:c, _} = c -> {{:s, n}, {[{reshape_id(), [c], %{shape: t.shape}} | steps], n + 1}}
            other -> {other, {steps, n}}
          end
        end)

      steps = Enum.reverse(steps)

      descs = Enum.map(inputs, &{Cascade.Type.normalize!(&1.type), &1.shape})
      program(base, descs, steps, leaves, template)
    end

    defp reshape_id do
      Enum.find_value(Cascade.__ops__(), fn op -> op.name == :reshape && op.id end)
    end

    # Keeps the steps the results need, numbers the slots and builds the program.
    defp program(base, descs, steps, leaves, template) do
      n_inputs = length(descs)
      steps = List.to_tuple(steps)

      live =
        leaves
        |> Enum.flat_map(fn
          {:s, k} -> [k]
          _ -> []
        end)
        |> mark(steps, MapSet.new())

      kept = Enum.filter(0..(tuple_size(steps) - 1)//1, &MapSet.member?(live, &1))

      consts =
        kept
        |> Enum.flat_map(fn k -> for {:c, ref} <- elem(elem(steps, k), 1), do: ref end)
        |> Enum.uniq()

      const_slot = consts |> Enum.with_index(n_inputs) |> Map.new()
      first = n_inputs + length(consts)
      step_slot = kept |> Enum.with_index(first) |> Map.new()

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

      out_slots = for {:s, _} = leaf <- leaves, uniq: true, do: slot.(leaf)
      out_index = out_slots |> Enum.with_index() |> Map.new()

      outputs =
        Enum.map(leaves, fn
          {:in, i} -> {:input, i}
          {:s, _} = leaf -> {:result, Map.fetch!(out_index, slot.(leaf))}
        end)

      base
      |> Map.merge(%{
        mode: :program,
        n_inputs: n_inputs,
        n_consts: length(consts),
        outputs: outputs,
        template: template
      })
      |> then(fn compiled ->
        try do
          prog =
            Native.program_new(Device.id!(base.device), descs, consts, program_steps, out_slots)

          Map.put(compiled, :program, prog)
        rescue
          e in [Cascade.Error, ArgumentError] ->
            %{base | mode: {:evaluator, "building its program raised: " <> Exception.message(e)}}
        end
      end)
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

    ## Running

    defp run(%{mode: :program} = compiled, params, device) do
      %{program: prog, outputs: outputs, template: template} = compiled
      inputs = Enum.map(params, &input(&1.(), device))
      call = fn -> Native.program_run(prog, Enum.map(inputs, & &1.ref)) end

      results =
        case call.() do
          list when is_list(list) -> Op.tensors(list)
          other -> Op.after_run(other, call)
        end
        |> List.to_tuple()

      leaves =
        Enum.map(outputs, fn
          {:result, i} -> elem(results, i)
          {:input, i} -> Enum.at(inputs, i)
        end)

      {result, []} =
        Composite.traverse(template, leaves, fn out, [t | rest] ->
          {%{out | data: %Cascade.Backend{tensor: t, device: t.device}}, rest}
        end)

      result
    end

    defp run(%{evaluator: evaluator}, params, device) do
      Nx.with_default_backend({Cascade.Backend, device: device}, fn ->
        [result] = evaluator.([params])
        result
      end)
    end

    # The Cascade tensor of an input, on the program's device.
    defp input(%Nx.Tensor{data: %Cascade.Backend{tensor: %Cascade.Tensor{} = t}} = tensor, device) do
      if Device.id!(t.device) == Device.id!(device),
        do: t,
        else: copy_in(tensor, device)
    end

    defp input(%Nx.Tensor{} = tensor, device), do: copy_in(tensor, device)

    defp copy_in(tensor, device) do
      %Nx.Tensor{data: %Cascade.Backend{tensor: t}} =
        Nx.backend_copy(tensor, {Cascade.Backend, device: device})

      t
    end

    ## explain

    defp describe(%{mode: :program} = compiled) do
      steps =
        for {op, route, library, type, shape, reason, slots, fused} <-
              Native.program_steps(compiled.program) do
          %{
            op: op,
            fused: fused,
            route: route,
            library: library,
            type: type,
            shape: shape,
            reason: reason,
            reads: slots
          }
        end

      %{
        mode: :program,
        device: compiled.device,
        inputs: compiled.n_inputs,
        constants: compiled.n_consts,
        steps: steps
      }
    end

    defp describe(%{mode: mode, device: device}), do: %{mode: mode, device: device, steps: []}
  end
end
