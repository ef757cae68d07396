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

      1. The function is traced into an `Nx.Defn.Expr` graph, as under any compiler. Each
         `cond` whose branches have no `while` becomes a `select` per result: every branch is
         computed and the taken branch's values chosen (the same values; the cost of all
         branches).
      2. The graph is evaluated once, as `Nx.Defn.Evaluator` would, on zero-filled inputs of
         the right types and shapes through `Cascade.Backend`, recording every Cascade op it
         runs. Ops that read only constants are folded: their results become constants of
         the program. Ops whose results no output needs are dropped.
      3. The recorded ops become a program (`c_src/core/program.h`): every step is
         negotiated once (native, decomposed or moved to the cpu, as `Cascade.explain/3`
         would say) and each intermediate is freed after its last reader. On host devices
         (`:cpu`, `:blas`) the native steps' intermediates get offsets in one block, planned
         from when each is written and last read, which the program keeps for its next call
         (at most 1 GiB kept by all programs together, counted in `Cascade.memory/0`).
      4. The program is rewritten where one op does the work of several:
         * a transpose of a product's result becomes the product with its operands swapped
           (Nx's gradient of `Nx.dot/2` ends in such a transpose);
         * chains of elementwise ops (f32, f16 or bf16; a bias row may join) whose
           intermediates nothing else reads become one `Cascade.fused/2` step, where the
           device runs `fused` natively (`:blas`: one pass over memory in blocks that stay in
           cache; up to eight ops a step). On other devices the ops stay steps of their own;
         * such a chain whose full input is a convolution's result that nothing else reads
           (its bias, an activation, a residual add) becomes that convolution's epilogue,
           where the device runs one (`:blas`, f32: on each block of the result as it is
           written); the step shows the chain in `fused`.

    Every later call with that signature is one NIF call: the inputs are checked against the
    program's types, shapes and device, the steps run in order in C (on a dirty scheduler
    when the program's estimated cost is above half a millisecond), and the results come back
    as `Cascade.Backend` tensors. Steps are counted in `Cascade.stats/0` as any call (the
    recording run is counted too).

    A function with a `while` compiles in stages (mode `:staged`): the loop's initial state,
    its condition, its body and the rest of the function (with the loop's results as inputs)
    are each compiled as above, a `while` in any of them in stages again. A call runs the
    initial state's program, then the loop, then the rest's program. When the condition and
    the body are programs the whole loop is one NIF call: turn after turn in C, the state
    passed from one turn to the next without reaching the BEAM (on a dirty scheduler, 20 ms
    of turns a call, when a turn is estimated above half a millisecond; else on the normal
    scheduler, yielding about every millisecond). A body with a `while` of its own is staged
    itself and the outer loop runs on the BEAM, one call per stage a turn. Work that the
    initial state and the rest share is done in both.

    A function the recording cannot capture runs through `Nx.Defn.Evaluator` on
    `Cascade.Backend` instead (only the decision is cached). That is the case when it has a
    `cond` with a `while` in a branch (the loop must run only when its branch is taken), when
    evaluating it reads an input-dependent tensor into Elixir or moves it between devices,
    falls back to `Nx.BinaryBackend` (Elixir functions, ops Cascade lacks), or has hooks
    (`Nx.Defn.Kernel.hook/3`) that must run; for a staged function, when any stage is such a
    case. The recording stops at the first of these, before it happens. `explain/3` says
    which mode a function got and why.

    ## Options

      * `:device` - the Cascade device the program runs on (default:
        `Cascade.Device.default/0`). Inputs on other devices or backends are copied there.
      * `:hooks` - as for `Nx.Defn.Evaluator`.
      * `:devices` - the devices `Nx.Serving` starts partitions on when it is given
        `partitions: true` (default: every available device of the driver of `:device`: each
        GPU of a `:cuda` machine, each OpenCL device, the host device once). Each partition
        runs the function with `device:` set to its device.
      * `:max_concurrency` - the number of partitions `Nx.Serving` starts on each of those
        devices (default 1). On `:blas` the partitions share the driver's threads: an op
        takes the cores the others leave idle, so a partition has every core when it runs
        alone and two running at once split them; on `:cpu` each op runs on its caller's
        thread.
      * `:cache` - `false` compiles again on every call (default `true`).
      * `:donate` - the positions of arguments (every tensor of a container) whose buffers
        the call may reuse, e.g. `donate: [0]` for a training step's parameters (default
        `[]`). The last elementwise step (native, unary, binary or fused) that reads a donated
        input, with a result of its type and shape, writes that result into the input's
        buffer instead of a new one: `w - lr * g` updates `w` in place, and the device holds
        one copy of the parameters instead of two. A donated tensor is freed by the call (using
        it again raises, as after `Cascade.free/1`), except when the function returns it as it
        is, when it is also another argument of the call, when the function never reads it, or
        while another process's op reads it. A staged function (with `while`) donates nothing.
        `explain/3` gives each step's `donated` input slot, or `nil`.

    A bad value for any of these raises `ArgumentError` naming the option. Options of other
    compilers and of Nx's clients (EXLA's `:client`, `Nx.Serving`'s `:batch_keys`, Axon's
    `:debug`) are passed over, as `Nx.Defn.Evaluator` passes them over, so one option list can
    serve several compilers.

        iex> Nx.Defn.jit(&Nx.exp/1, compiler: Cascade.Compiler, cache: :maybe).(1.0)
        ** (ArgumentError) Cascade.Compiler: option :cache takes true or false, got: :maybe

    ## Example

        iex> fun = Nx.Defn.jit(fn a, b -> Nx.add(Nx.multiply(Nx.exp(a), b), 1) end, compiler: Cascade.Compiler)
        iex> fun.(Nx.tensor([0.0, 1.0]), Nx.tensor([2.0, 2.0])) |> Nx.to_flat_list()
        [3.0, 6.436563491821289]
    """

    @behaviour Nx.Defn.Compiler

    alias Cascade.{Device, Native, Op, Program}
    alias Nx.Defn.Composite

    @table :cascade_compiled
    @cache_limit 512

    @impl true
    def __partitions_options__(opts) do
      check_options!(opts)
      n = Keyword.get(opts, :max_concurrency, 1)

      for device <- partition_devices(opts),
          _ <- 1..n,
          do: opts |> Keyword.delete(:devices) |> Keyword.put(:device, device)
    end

    # :devices as given; else every available device of the driver of :device (or of the
    # default device): each GPU of a machine, each OpenCL device, the host device once (its
    # driver's threads are shared by the calls running on it)
    defp partition_devices(opts) do
      case opts[:devices] do
        nil ->
          driver = opts |> device() |> Device.driver()
          for %{driver: ^driver, available: true, device: d} <- Device.list(), do: d

        devices ->
          Enum.each(devices, &Device.id!/1)
          devices
      end
    end

    @impl true
    def __to_backend__(opts), do: {Cascade.Backend, device: device(opts)}

    @impl true
    def __stream__(key, input, acc, vars, fun, args_list, opts) do
      check_options!(opts)
      Nx.Defn.Evaluator.__stream__(key, input, acc, vars, fun, args_list, opts)
    end

    @impl true
    def __jit__(key, vars, fun, args_list, opts),
      do: __compile__(key, vars, fun, opts).(args_list)

    @impl true
    def __compile__(key, vars, fun, opts) do
      check_options!(opts)
      device = device(opts)
      compiled = compiled(key, vars, fun, device, opts)

      # The evaluator's closure holds the traced expression, whose subterms are shared: it is
      # never stored in the cache, where copying would unshare them (the graph of an SVD's
      # loops grows without bound that way), but made here, as Nx.Defn.Evaluator would.
      compiled =
        case compiled.mode do
          {:evaluator, _} -> Map.put(compiled, :evaluator, evaluator(key, vars, fun, opts))
          _ -> compiled
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
    How `fun` compiles for `args`: the mode (`:program`, `:staged`, or `{:evaluator, reason}`)
    and the program's steps, each with the route and library the negotiation chose, the values it
    reads (`reads`: slots, the inputs first, then the constants, then each step's result), for
    a fused step the ops it runs (`fused`; for a convolution, the chain it runs as its
    epilogue, whose inputs follow its own in `reads`), and the donated input whose buffer it writes
    (`donated`, see the `:donate` option). A staged function's info has `stages`, the
    info of its `:init`, `:cond`, `:body` and `:rest` stages, and their steps together as
    `steps`. A program's `inputs` are the tensors it reads or returns, `input_positions` their
    positions among the function's flat arguments: a call does not evaluate the others (an
    `Nx.template/2`, a lazy container's tensor). Takes the options of `Nx.Defn.jit/2`.

        iex> info = Cascade.Compiler.explain(fn x -> Nx.sum(Nx.exp(x)) end, [Nx.iota({4}, type: :f32)])
        iex> info.mode
        :program
        iex> Enum.map(info.steps, & &1.op)
        [:exp, :sum]

        iex> defmodule Halve do
        ...>   import Nx.Defn
        ...>   defn run(x), do: elem(while({x}, Nx.reduce_max(x) > 1, do: {x / 2}), 0)
        ...> end
        iex> info = Cascade.Compiler.explain(&Halve.run/1, [Nx.tensor([6.0, 3.0])])
        iex> info.mode
        :staged
        iex> for {stage, stage_info} <- info.stages, do: {stage, Enum.map(stage_info.steps, & &1.op)}
        [init: [], cond: [:reduce_max, :greater], body: [:divide], rest: []]
    """
    def explain(fun, args, opts \\ [])

    def explain(fun, args, opts) when is_function(fun) and is_list(args) and is_list(opts) do
      unless Keyword.keyword?(opts) do
        raise ArgumentError,
              "Cascade.Compiler.explain/3: expected options as a keyword list, got: " <>
                inspect(opts, limit: 5)
      end

      unless is_function(fun, length(args)) do
        {:arity, arity} = Function.info(fun, :arity)

        raise ArgumentError,
              "Cascade.Compiler.explain/3: the function takes #{arity} argument(s), " <>
                "got #{length(args)}: #{inspect(args, limit: 3)}"
      end

      explained(fun, args, Keyword.merge(opts, compiler: __MODULE__, cascade_explain: true))
    end

    def explain(fun, args, opts) do
      raise ArgumentError,
            "Cascade.Compiler.explain/3: expected a function, a list of its arguments and a " <>
              "keyword list of options, got: #{inspect(fun, limit: 3)}, " <>
              "#{inspect(args, limit: 3)} and #{inspect(opts, limit: 3)}"
    end

    defp explained(fun, args, opts) do
      Nx.Defn.jit_apply(fun, args, opts)
      raise "unreachable: Cascade.Compiler.explain/3 did not compile"
    rescue
      # an argument that is no tensor, number or container (Nx's own error names its type)
      e in Protocol.UndefinedError ->
        reraise ArgumentError,
                [
                  message:
                    "Cascade.Compiler.explain/3: expected arguments that are tensors, numbers " <>
                      "or containers of them, got: #{inspect(args, limit: 3)} (" <>
                      Exception.message(e) <> ")"
                ],
                __STACKTRACE__
    catch
      :throw, {:cascade_explain, info} -> info
    end

    defp device(opts) do
      device = opts[:device] || Device.default()
      Device.id!(device)
      device
    end

    # The values of this compiler's own options. Other keys pass: Nx and its clients hand every
    # compiler the options of all of them (Nx.Serving adds :batch_keys, Axon.Loop forwards its
    # :debug, a global default list may hold EXLA's :client), as Nx.Defn.Evaluator and EXLA let
    # them pass. :donate's positions are checked against the arguments in donated/2.
    defp check_options!(opts) do
      unless is_list(opts) and Keyword.keyword?(opts) do
        raise ArgumentError,
              "Cascade.Compiler: expected options as a keyword list, got: #{inspect(opts, limit: 5)}"
      end

      for {key, value} <- opts do
        case {key, value} do
          {:device, device} when device != nil and not is_atom(device) and not is_tuple(device) ->
            bad_option!(key, value, "a device such as :cpu, :blas or {:opencl, 0}")

          {:max_concurrency, n} when not (is_integer(n) and n >= 1) ->
            bad_option!(key, value, "a positive integer")

          {:devices, devices} when not (is_list(devices) and devices != []) ->
            bad_option!(key, value, "a non-empty list of devices")

          {:devices, devices} ->
            for d <- devices,
                not is_atom(d) and not is_tuple(d),
                do: bad_option!(key, value, "a non-empty list of devices")

          {:cache, flag} when not is_boolean(flag) ->
            bad_option!(key, value, "true or false")

          {:hooks, hooks} when not is_map(hooks) ->
            bad_option!(key, value, "a map of hook names to functions")

          {:donate, donate} when not is_list(donate) ->
            bad_option!(key, value, "a list of argument positions")

          {:donate, donate} ->
            unless Enum.all?(donate, &(is_integer(&1) and &1 >= 0)),
              do: bad_option!(key, value, "a list of argument positions (integers from 0)")

          _ ->
            :ok
        end
      end

      :ok
    end

    defp bad_option!(key, value, expected) do
      raise ArgumentError,
            "Cascade.Compiler: option #{inspect(key)} takes #{expected}, got: " <>
              inspect(value, limit: 5)
    end

    ## Compiling

    defp compiled(key, vars, fun, device, opts) do
      # The arguments as they are, each tensor replaced by what a program depends on: two calls
      # whose flat tensors agree but whose containers differ (`%{a: x}` and `%{b: x}`, a tuple
      # and a map, a struct's other fields) build different results and must not share one.
      signature =
        Enum.map(
          vars,
          &Composite.traverse(&1, fn t -> {t.type, t.shape, t.names, t.vectorized_axes} end)
        )

      hooks = Keyword.get(opts, :hooks, %{})
      donated = donated(vars, Keyword.get(opts, :donate, []))
      opts = Keyword.put(opts, :cascade_donated, donated)
      cache_key = {key, signature, device, hooks, donated}

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

    # The flat input positions of the arguments `donate` names (positions in the argument list;
    # every tensor of a container argument).
    defp donated(_vars, []), do: []

    defp donated(vars, donate) when is_list(donate) do
      case Enum.reject(donate, &(&1 < length(vars))) do
        [] ->
          :ok

        beyond ->
          raise ArgumentError,
                "Cascade.Compiler: option :donate names argument position(s) " <>
                  "#{inspect(beyond)}, but the function takes #{length(vars)} argument(s) " <>
                  "(positions from 0)"
      end

      {positions, _} =
        vars
        |> Enum.with_index()
        |> Enum.flat_map_reduce(0, fn {var, arg}, at ->
          n = length(Composite.flatten_list([var]))
          {if(arg in donate, do: Enum.to_list(at..(at + n - 1)//1), else: []), at + n}
        end)

      positions
    end

    defp compile(key, vars, fun, device, opts) do
      base = %{device: device}

      expr = fun.(vars)

      cond do
        Enum.any?(Composite.flatten_list(vars), &(&1.vectorized_axes != [])) ->
          Map.put(base, :mode, {:evaluator, "vectorized inputs"})

        Nx.Defn.Tree.has_hooks?(expr, Keyword.get(opts, :hooks, %{})) ->
          Map.put(base, :mode, {:evaluator, "hooks run Elixir code on intermediate values"})

        true ->
          # the whole function: its program takes only the inputs it reads (below)
          compile_expr(key, vars, expr, device, Keyword.put(opts, :cascade_prune, true))
      end
    end

    # The graph `expr` on the parameters `vars`, without hooks: its conds become selects where
    # they can; then a program, or stages around its first while (each stage compiled the same
    # way), or the evaluator where neither can capture it.
    defp compile_expr(key, vars, expr, device, opts) do
      base = %{device: device}
      donated = Keyword.get(opts, :cascade_donated, [])
      expr = lower_conds(expr)

      case control(expr) do
        nil ->
          prune = Keyword.get(opts, :cascade_prune, false)
          evaluator = evaluator(key, vars, fn _ -> expr end, opts)
          record(base, vars, evaluator, device, donated, prune)

        {:while, while} ->
          stage(key, vars, expr, while, device, opts)

        :cond ->
          Map.put(
            base,
            :mode,
            {:evaluator,
             "it has a cond with a while in a branch, which must run only when the branch " <>
               "is taken (other conds run both branches and select)"}
          )
      end
    end

    ## Control flow

    # A cond whose branches have no while becomes a select per result, on the clauses'
    # predicates, last clause first: every branch is computed (no branch has effects: graphs
    # with hooks run under the evaluator) and the taken one's values chosen, the same bits
    # the taken branch alone gives. The rewriting keeps the graph's sharing (one new node per
    # node id).
    defp lower_conds(expr) do
      {expr, _} = Composite.traverse(expr, %{}, &lower/2)
      expr
    end

    defp lower(t, memo), do: rewrite(t, memo, &lower_node/2)

    defp lower_node(%Nx.Tensor{data: %Nx.Defn.Expr{op: :elem, args: [tuple, i]}} = t, memo) do
      case lower(tuple, memo) do
        {{:selects, results}, memo} -> {Enum.at(results, i), memo}
        {tuple, memo} -> {put_args(t, [tuple, i]), memo}
      end
    end

    defp lower_node(%Nx.Tensor{data: %Nx.Defn.Expr{op: :cond, args: [clauses, last]}} = t, memo) do
      {clauses, memo} =
        Enum.map_reduce(clauses, memo, fn {pred, branch}, memo ->
          {pred, memo} = lower(pred, memo)
          {branch, memo} = Composite.traverse(branch, memo, &lower/2)
          {{pred, branch}, memo}
        end)

      {last, memo} = Composite.traverse(last, memo, &lower/2)

      if last == {} or Enum.any?([last | Enum.map(clauses, &elem(&1, 1))], &has_while?/1) do
        {put_args(t, [clauses, last]), memo}
      else
        flat = &Composite.flatten_list([&1])

        results =
          List.foldr(clauses, flat.(last), fn {pred, branch}, acc ->
            Enum.zip_with(flat.(branch), acc, &Nx.select(pred, &1, &2))
          end)

        case t.type do
          {:tuple, _} -> {{:selects, results}, memo}
          _ -> {hd(results), memo}
        end
      end
    end

    defp lower_node(_t, _memo), do: nil

    # Rebuilds the graph of `t` in its own scope, once per node id (so the graph keeps its
    # sharing): `node.(t, memo)` gives a node's replacement and the memo, or nil to rebuild
    # the node from its rewritten arguments.
    defp rewrite(%Nx.Tensor{data: %Nx.Defn.Expr{id: id}} = t, memo, node) do
      case memo do
        %{^id => new} ->
          {new, memo}

        %{} ->
          {new, memo} =
            case node.(t, memo) do
              nil ->
                {args, memo} = Nx.Defn.Tree.apply_args(t, :scope, memo, &rewrite(&1, &2, node))

                {put_args(t, args), memo}

              found ->
                found
            end

          {new, Map.put(memo, id, new)}
      end
    end

    defp rewrite(other, memo, _node), do: {other, memo}

    defp put_args(%Nx.Tensor{data: expr} = t, args), do: %{t | data: %{expr | args: args}}

    defp has_while?(branch) do
      Composite.reduce(branch, %{}, &find_while/2)
      false
    catch
      :cascade_while -> true
    end

    defp find_while(%Nx.Tensor{data: %Nx.Defn.Expr{op: :while}}, _seen),
      do: throw(:cascade_while)

    defp find_while(%Nx.Tensor{data: %Nx.Defn.Expr{id: id}} = t, seen) do
      if Map.has_key?(seen, id) do
        seen
      else
        seen = Map.put(seen, id, true)
        {_, seen} = Nx.Defn.Tree.apply_args(t, :scope, seen, &{&1, find_while(&1, &2)})
        seen
      end
    end

    defp find_while(_other, seen), do: seen

    # In the graph's own scope (not inside a while's condition and body, or a function's):
    # {:while, node} for the first while whose initial state has no while, else :cond where a
    # cond is left (one with a while in a branch; only its first predicate is looked into),
    # else nil.
    defp control(expr) do
      {_, cond?} = Composite.reduce(expr, {%{}, false}, &scan/2)
      if cond?, do: :cond
    catch
      {:cascade_while, while} -> {:while, while}
    end

    defp scan(%Nx.Tensor{data: %Nx.Defn.Expr{id: id, op: op}} = t, {seen, cond?}) do
      cond do
        Map.has_key?(seen, id) ->
          {seen, cond?}

        op == :cond ->
          # the first predicate is evaluated whatever the branch: a while there can be staged
          %Nx.Defn.Expr{args: [[{pred, _} | _], _]} = t.data
          scan(pred, {Map.put(seen, id, true), true})

        true ->
          acc = {Map.put(seen, id, true), cond?}
          {_, acc} = Nx.Defn.Tree.apply_args(t, :scope, acc, &{&1, scan(&1, &2)})
          if op == :while, do: throw({:cascade_while, t}), else: acc
      end
    end

    defp scan(_other, acc), do: acc

    # A while in stages: its initial state (a function of `vars`), its condition and its body
    # (functions of the state), and the rest of the graph (a function of `vars` and the
    # while's results, which take the while's place). Each is compiled on its own; a call
    # runs the initial state's, then the loop (loop/3), then the rest's. The function runs
    # under the evaluator unless every stage is a program or stages itself.
    defp stage(key, vars, expr, while, device, opts) do
      %Nx.Tensor{data: %Nx.Defn.Expr{id: id, args: [initial, arg, condition, body]}} = while
      state = Composite.flatten_list([arg])

      # parameter positions count the flat tensors of the arguments, not the arguments
      params =
        state
        |> Enum.with_index(length(Composite.flatten_list(vars)))
        |> Enum.map(fn {t, pos} -> Nx.Defn.Expr.parameter(t, :root, pos) end)

      {rest, _} = Composite.traverse(expr, %{}, &replace(&1, &2, id, params))
      # the stages pass values to each other: nothing is donated, and each stage's program takes
      # every input (the loop in C hands the condition and the body the whole state)
      opts = Keyword.drop(opts, [:cascade_donated, :cascade_prune])

      parts = [
        init: compile_expr(key, vars, initial, device, opts),
        cond: compile_expr(key, state, condition, device, opts),
        body: compile_expr(key, state, body, device, opts),
        rest: compile_expr(key, vars ++ params, rest, device, opts)
      ]

      case Enum.find(parts, fn {_, part} -> match?({:evaluator, _}, part.mode) end) do
        nil ->
          Map.merge(%{device: device, mode: :staged}, Map.new(parts))

        {name, %{mode: {:evaluator, reason}}} ->
          what = %{init: "initial state", cond: "condition", body: "body", rest: "rest"}[name]
          %{device: device, mode: {:evaluator, "its while's #{what}: #{reason}"}}
      end
    end

    # `expr` with the results of the while `id` (the node itself, or its elems) replaced by
    # `params`.
    defp replace(t, memo, id, params) do
      rewrite(t, memo, fn
        %Nx.Tensor{data: %Nx.Defn.Expr{id: ^id}}, memo when tl(params) == [] ->
          {hd(params), memo}

        %Nx.Tensor{data: %Nx.Defn.Expr{op: :elem, args: [%Nx.Tensor{data: %{id: ^id}}, i]}},
        memo ->
          {Enum.at(params, i), memo}

        _, _ ->
          nil
      end)
    end

    defp record(base, vars, evaluator, device, donated, prune) do
      placeholders =
        vars
        |> Composite.flatten_list()
        |> Enum.map(fn var ->
          # resources: the recording tells its inputs apart by their refs
          t = Cascade.full(0, var.shape, type: var.type, device: device) |> Op.resource()
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
          build(base, inputs, result, Enum.reverse(calls), donated, prune)
      end
    rescue
      e in [Cascade.Error, ArgumentError] ->
        Map.put(base, :mode, {:evaluator, "recording it raised: " <> Exception.message(e)})
    end

    # The program of the recorded calls (Cascade.Program: the planner Cascade.ONNX shares),
    # with the template the results are put back into. A result the function returns as it
    # captured it (a tensor made outside the function on another backend, e.g. a random key)
    # never passed through a Cascade op: it becomes a constant of the program, on its device,
    # copied on each call as the evaluator would make it anew. With `prune`, the program's
    # inputs are only those its steps read or its results are (`used`): a call materialises no
    # other argument, so an argument the function never reads may be an Nx.template/2 or a lazy
    # container left unevaluated, as under Nx.Defn.Evaluator.
    defp build(base, inputs, result, calls, donated, prune) do
      leaves = Enum.map(Composite.flatten_list([result]), &to_cascade(&1, base.device))
      tensors = Enum.map(leaves, fn %Nx.Tensor{data: %Cascade.Backend{tensor: t}} -> t end)
      template = Composite.traverse(result, &%{&1 | data: nil})

      case Program.build(base.device, inputs, calls, tensors, prune: prune, donated: donated) do
        %Program{} = p ->
          Map.merge(base, %{
            mode: :program,
            program: p.program,
            donated: p.donated,
            n_inputs: p.n_inputs,
            used: p.used,
            n_consts: p.n_consts,
            outputs: p.outputs,
            template: template
          })

        {:error, why} ->
          %{base | mode: {:evaluator, why}}
      end
    end

    ## Running

    defp run(%{mode: :program} = compiled, params, device) do
      %{program: prog, outputs: outputs, template: template, used: used} = compiled
      params = List.to_tuple(params)
      inputs = Enum.map(used, &input(elem(params, &1).(), device))
      call = fn -> Native.program_run(prog, Enum.map(inputs, & &1.ref)) end

      results =
        case call.() do
          list when is_list(list) ->
            Op.tensors(list)

          # a failed run may have consumed donated inputs already: it cannot be made again
          {:cascade_oom, driver, message} when compiled.donated != [] ->
            raise Cascade.Error,
              driver: driver,
              code: :out_of_memory,
              message: "#{message} (the call's donated inputs may be consumed: it is not retried)"

          other ->
            Op.after_run(other, call)
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

    defp run(%{mode: :staged} = compiled, params, device) do
      inputs = Enum.map(params, &on_device(&1.(), device))
      state = compiled.init |> run(lazy(inputs), device) |> flat()
      state = loop(compiled, state, device)
      run(compiled.rest, lazy(inputs ++ state), device)
    end

    # The evaluator's inputs and results on the device too, as a program's: an input left on
    # Nx.BinaryBackend would take its ops there (a broadcast to 4 TiB then aborts the VM in
    # binary_alloc where Cascade raises :out_of_memory). Still lazy: an argument the function
    # never reads is never evaluated.
    defp run(%{evaluator: evaluator}, params, device) do
      params = Enum.map(params, fn param -> fn -> on_device(param.(), device) end end)

      Nx.with_default_backend({Cascade.Backend, device: device}, fn ->
        [result] = evaluator.([params])
        Composite.traverse(result, &to_cascade(&1, device))
      end)
    end

    # Condition and body programs: the whole loop is one call into C (which hands the state
    # back when the device asks for a collection before it is done: the states of its earlier
    # slices are garbage resources holding device memory).
    defp loop(%{cond: %{mode: :program} = cond, body: %{mode: :program} = body}, state, _device) do
      [cond_pick] = picks(cond.outputs)
      refs = Enum.map(state, & &1.data.tensor.ref)
      refs = Program.loop(cond.program, cond_pick, body.program, picks(body.outputs), refs)

      # the state keeps its types, shapes and device from turn to turn
      Enum.zip_with(state, refs, fn %{data: %{tensor: t} = data} = nx, ref ->
        %{nx | data: %{data | tensor: %{t | ref: ref}}}
      end)
    end

    defp loop(%{cond: cond, body: body} = compiled, state, device) do
      if Nx.to_number(run(cond, lazy(state), device)) != 0,
        do: loop(compiled, body |> run(lazy(state), device) |> flat(), device),
        else: state
    end

    # A program's outputs as cx_program_loop's picks: k for its result k, -(i + 1) for input i.
    defp picks(outputs) do
      Enum.map(outputs, fn
        {:result, k} -> k
        {:input, i} -> -(i + 1)
      end)
    end

    defp lazy(tensors), do: Enum.map(tensors, &fn -> &1 end)
    defp flat(container), do: Composite.flatten_list([container])

    defp on_device(tensor, device) do
      t = input(tensor, device)
      %{tensor | data: %Cascade.Backend{tensor: t, device: t.device}}
    end

    # A tensor of another backend, copied onto the device; a Cascade.Backend one as it is.
    defp to_cascade(%Nx.Tensor{data: %Cascade.Backend{}} = tensor, _device), do: tensor
    defp to_cascade(%Nx.Tensor{} = tensor, device), do: on_device(tensor, device)

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
        for {op, route, library, type, shape, reason, slots, fused, donated} <-
              Native.program_steps(compiled.program) do
          %{
            op: op,
            fused: fused,
            donated: donated,
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
        input_positions: compiled.used,
        constants: compiled.n_consts,
        steps: steps
      }
    end

    defp describe(%{mode: :staged} = compiled) do
      stages = for part <- [:init, :cond, :body, :rest], do: {part, describe(compiled[part])}

      %{
        mode: :staged,
        device: compiled.device,
        stages: stages,
        steps: Enum.flat_map(stages, fn {_, info} -> info.steps end)
      }
    end

    defp describe(%{mode: mode, device: device}), do: %{mode: mode, device: device, steps: []}
  end
end
