defmodule Cascade.Op do
  @moduledoc false
  # Runs ops of the table: turns the Elixir arguments and options of a generated function
  # into tensor references and a parameter map, using the argument kinds of ops.def, and
  # handles the results the NIF may return besides a tensor.

  alias Cascade.{Device, Native, Tensor, Type}
  require Logger

  # the most dimensions a tensor has (CX_MAX_RANK, c_src/core/params.h)
  @max_rank 16
  @doc false
  def max_rank, do: @max_rank

  # Native.op/5's flags, read from the C header that declares them: a small result may be a
  # value; the call may ask for a collection before it runs (:cascade_gc_first); the caller has
  # just collected (the call made again after a collection: its result comes without a request
  # for another)
  @op_flags_h Path.expand("../../c_src/nif/op_flags.h", __DIR__)
  @external_resource @op_flags_h
  @op_flags Map.new(
              Regex.scan(~r/\bOP_([A-Z_]+) = (\d+)/, File.read!(@op_flags_h)),
              fn [_, name, value] -> {name, String.to_integer(value)} end
            )
  @op_values Map.fetch!(@op_flags, "VALUES")
  @op_gc_first Map.fetch!(@op_flags, "GC_FIRST")
  @op_collected Map.fetch!(@op_flags, "COLLECTED")

  @doc false
  # The one call into C for an op. A tensor is the usual answer; {:cascade_gc, tensor} (or
  # :cascade_gc_major) asks the caller to collect garbage (dropped tensors are only released
  # by a collection of the process that held them); {:cascade_oom, driver, message} means the
  # device is full: collect and retry once before raising.
  def run(id, refs, params, device_id) do
    # A recording tells tensors apart by their refs: its results stay resources, never values
    # (two equal values are one term).
    calls = Process.get(:cascade_record)
    values = if calls == nil, do: @op_values, else: 0

    t =
      case Native.op(id, refs, params, device_id, values + @op_gc_first) do
        {_, _, _, _} = t ->
          tensors(t)

        other ->
          after_run(other, fn ->
            Native.op(id, refs, params, device_id, values + @op_collected)
          end)
      end

    case calls do
      nil ->
        t

      calls ->
        Process.put(:cascade_record, [{id, refs, params, t.ref} | calls])
        deps = Process.get(:cascade_record_deps)

        if Enum.any?(refs, &MapSet.member?(deps, &1)),
          do: Process.put(:cascade_record_deps, MapSet.put(deps, t.ref))

        t
    end
  end

  @doc false
  # Cascade.Compiler records the ops that evaluating an expression runs (a list, newest first,
  # of {op_id, refs, params, result_ref}) to build a program from them; fun's result comes
  # with the calls, or with {:tainted, reason} when the evaluation did something a program
  # cannot repeat: read into Elixir or move to another device a tensor that depends on the
  # `inputs` (refs), or fall back to Nx.BinaryBackend. Reading a constant is fine: its value
  # is the same on every call, and the ops recorded after carry it as a parameter. The
  # recording stops at the first such thing, before it happens: the placeholder inputs (zeros)
  # must not reach code that may raise on them, as Nx.BinaryBackend's integer quotient does.
  def record(fun, inputs) do
    keys = [:cascade_record, :cascade_record_deps, :cascade_record_token]
    previous = Enum.map(keys, &Process.get/1)
    token = make_ref()
    Process.put(:cascade_record, [])
    Process.put(:cascade_record_deps, MapSet.new(inputs))
    Process.put(:cascade_record_token, token)

    try do
      result = fun.()
      {:ok, result, Process.get(:cascade_record)}
    catch
      :throw, {:cascade_record_taint, ^token, reason} -> {:tainted, reason}
    after
      Enum.zip(keys, previous) |> Enum.each(fn {k, v} -> restore(k, v) end)
    end
  end

  defp restore(key, nil), do: Process.delete(key)
  defp restore(key, value), do: Process.put(key, value)

  @doc false
  # Stops the recording under way, if any, as one a program cannot repeat: always, or when
  # `ref` is given, if the tensor depends on the recording's inputs.
  def taint(reason, ref \\ nil) do
    deps = Process.get(:cascade_record_deps)

    if Process.get(:cascade_record) && (ref == nil or MapSet.member?(deps, ref)),
      do: throw({:cascade_record_taint, Process.get(:cascade_record_token), reason})

    :ok
  end

  @doc false
  # The tensor as a resource: a value (a small result, see Cascade.Tensor) is copied into one,
  # for the places that tell tensors apart by their refs (a recording's inputs).
  def resource(%Tensor{ref: ref} = t) when is_binary(ref),
    do: Cascade.from_binary(Cascade.to_binary(t), t.type, t.shape, device: t.device)

  def resource(%Tensor{} = t), do: t

  @doc false
  # A tensor as the NIF gives it, {ref, shape, type, device}, or a list of them (a program's
  # results), as %Tensor{} structs.
  def tensors({ref, shape, type, device}),
    do: %Tensor{ref: ref, shape: shape, type: type, device: device}

  def tensors(list) when is_list(list), do: Enum.map(list, &tensors/1)
  # a bare reference or value (program_loop/5 answers with the state's refs) stays one
  def tensors(ref) when is_reference(ref) or is_binary(ref), do: ref

  # whether a NIF answer is the tensors themselves, with nothing asked of the caller
  defp tensors?(answer), do: is_list(answer) or match?({_, _, _, _}, answer)

  @doc false
  # The answers of a call into C (op/5, program_run/2 ...) besides its tensors, handled;
  # `retry` makes the call again. Fallback reports under `fallback: :warn` come once per
  # (device, op, type, reason).
  def after_run({:cascade_warn, messages, result}, retry) do
    for message <- messages, do: Logger.warning(message)
    if tensors?(result), do: tensors(result), else: after_run(result, retry)
  end

  # The device asks for a collection once its tensors have grown by the gc interval: a minor
  # one releases the tensors dropped since the last; a full one (:cascade_gc_major) also those
  # that outlived a collection first.
  @gc_tags [:cascade_gc, :cascade_gc_major]
  def after_run({tag, result}, _retry) when tag in @gc_tags do
    collect(tag == :cascade_gc)
    tensors(result)
  end

  # The same, asked before the op ran (so that its result can take the memory of the tensors
  # the collection releases): collect, then run it.
  @gc_first_tags [:cascade_gc_first, :cascade_gc_major_first]
  def after_run(tag, retry) when tag in @gc_first_tags do
    collect(tag == :cascade_gc_first)
    result = retry.()
    if tensors?(result), do: tensors(result), else: after_run(result, retry)
  end

  # the BEAM had no memory for a result's resource (the result itself is freed)
  def after_run({:cascade_oom, :resource}, _retry) do
    raise Cascade.Error,
      driver: "cascade",
      code: :out_of_memory,
      message: "out of memory: the BEAM could not allocate a tensor's resource"
  end

  def after_run({:cascade_oom, _, _}, retry) do
    :erlang.garbage_collect()

    case retry.() do
      {:cascade_oom, driver, message} ->
        raise Cascade.Error, driver: driver, code: :out_of_memory, message: to_string(message)

      bin when is_binary(bin) ->
        bin

      other ->
        if tensors?(other), do: tensors(other), else: after_run(other, retry)
    end
  end

  # A minor or full collection of the calling process, then a yield. The BEAM runs the
  # destructors of the released tensors as its scheduler's aux work, between processes: yielding
  # lets it run them now, so that their buffers are back before the next op asks for one (a loop
  # of 1M-element adds: 84 us a call against 290 us without, whose results' pages were faulted
  # in again).
  defp collect(minor?) do
    if minor?,
      do: :erlang.garbage_collect(self(), type: :minor),
      else: :erlang.garbage_collect()

    :erlang.yield()
  end

  # the most tensors one call into C takes (CX_MAX_INPUTS in c_src/core/ops.h)
  @max_inputs 256

  @doc false
  # The general path: spec is the op's entry of the table.
  def call(spec, args, opts, mode \\ :run) do
    %{id: id, fun: fun, args: arg_specs, opts: opt_specs, kind: kind} = spec

    {device, opts} = take_device(fun, kind, opts)
    params = opts_to_params(fun, opt_specs, opts)
    {tensor_args, params} = args_to_params(fun, arg_specs, args, params)

    case {kind, tensor_args} do
      {:layout, [{_, :tensors, list}]} when is_list(list) and length(list) > @max_inputs ->
        # One call takes at most @max_inputs tensors (the C limit); concatenation is
        # associative, so longer lists are joined in rounds.
        list
        |> Enum.chunk_every(@max_inputs)
        |> Enum.map(&call(spec, [&1], opts))
        |> then(&call(spec, [&1], opts, mode))

      _ ->
        {refs, device_id} =
          case kind do
            :create -> {[], Device.id!(device || Device.default())}
            _ -> {tensor_refs(fun, tensor_args), 0}
          end

        case mode do
          :run -> run(id, refs, params, device_id)
          :explain -> explain(id, refs, params, device_id)
        end
    end
  end

  @doc false
  def explain(id, refs, params, device_id \\ 0),
    do: Native.explain(id, refs, params, device_id) |> plan_tree()

  # The steps of explain come depth-first with their depth; nest them.
  defp plan_tree(steps) do
    {[root], []} = nest(steps, 0)
    root
  end

  defp nest([{depth, op, device, route, type, shape, bytes, reason, library} | rest], depth) do
    {children, rest} = nest(rest, depth + 1)

    step =
      %{op: op, device: device, route: route, type: type, shape: shape}
      |> put_if(library != nil, :library, library)
      |> put_if(reason != "", :reason, reason)
      |> put_if(route == :cpu_fallback, :bytes_moved, bytes)
      |> put_if(route == :decomposed, :steps, children)

    {siblings, rest} = nest(rest, depth)
    {[step | siblings], rest}
  end

  defp nest(rest, _depth), do: {[], rest}

  defp put_if(map, true, key, value), do: Map.put(map, key, value)
  defp put_if(map, false, _key, _value), do: map

  defp take_device(fun, :create, opts) do
    check_keyword!(fun, opts)
    Keyword.pop(opts, :device)
  end

  defp take_device(fun, _kind, opts) do
    check_keyword!(fun, opts)
    {nil, opts}
  end

  defp check_keyword!(fun, opts) do
    unless Keyword.keyword?(opts) do
      raise ArgumentError, "#{fun}: expected options as a keyword list, got: #{inspect(opts)}"
    end
  end

  defp opts_to_params(fun, specs, opts) do
    known = for {name, _, _} <- specs, do: name

    for {key, _} <- opts, key not in known do
      raise ArgumentError,
            "#{fun}: unknown option #{inspect(key)}, expected one of #{inspect(known)}"
    end

    Enum.reduce(specs, %{}, fn {name, kind, default}, acc ->
      case Keyword.get(opts, name, default) do
        nil -> acc
        value -> Map.put(acc, name, convert!(fun, name, kind, value))
      end
    end)
  end

  defp args_to_params(fun, specs, args, params) do
    Enum.zip(specs, args)
    |> Enum.reduce({[], params}, fn
      {{name, kind}, value}, {tensors, params}
      when kind in [:tensor, :tensors, :indices, :pred] ->
        {[{name, kind, value} | tensors], params}

      {{name, kind}, value}, {tensors, params} ->
        {tensors, Map.put(params, name, convert!(fun, name, kind, value))}
    end)
    |> then(fn {tensors, params} -> {Enum.reverse(tensors), params} end)
  end

  # Tensors and numbers in tensor positions become references; numbers turn into scalar
  # tensors of the type Nx would give them beside the other arguments.
  defp tensor_refs(fun, tensor_args) do
    flat =
      Enum.flat_map(tensor_args, fn
        {name, :tensors, list} when is_list(list) ->
          if List.improper?(list), do: bad!(fun, name, "a list of tensors", list)
          Enum.map(list, &{name, :tensor, &1})

        {name, :tensors, other} ->
          bad!(fun, name, "a list of tensors", other)

        arg ->
          [arg]
      end)

    tensors = for {_, kind, %Tensor{} = t} <- flat, kind == :tensor, do: t

    # the type numbers are promoted against: the tensors', else the numbers' own
    base =
      case {tensors, flat} do
        {[], []} ->
          :s64

        {[], _} ->
          flat |> Enum.map(fn {_, _, v} -> number_type(v) end) |> Enum.reduce(&Type.merge/2)

        _ ->
          tensors |> Enum.map(&Type.normalize!(&1.type)) |> Enum.reduce(&Type.merge/2)
      end

    device =
      case Enum.find(flat, &match?({_, _, %Tensor{}}, &1)) do
        {_, _, %Tensor{device: d}} -> d
        nil -> Device.default()
      end

    Enum.map(flat, fn
      {_, _, %Tensor{ref: ref}} -> ref
      {_, :indices, n} when is_integer(n) -> scalar(n, :s64, device).ref
      {name, :pred, n} -> scalar(number!(fun, name, n), Type.of_number(n), device).ref
      {name, :indices, other} -> bad!(fun, name, "an integer tensor", other)
      {name, :tensor, n} -> scalar(number!(fun, name, n), Type.merge_number(base, n), device).ref
    end)
  end

  defp number_type(%Tensor{type: t}), do: Type.normalize!(t)

  defp number_type(n) when is_number(n) or n in [:nan, :infinity, :neg_infinity],
    do: Type.of_number(n)

  defp number_type(_), do: :s64

  @doc false
  # A number beside tensor `t`, as a scalar of the type Nx would give it, on t's device.
  # The scalars a process made last are kept in its dictionary (tensors are immutable, so one
  # can stand for every use of the same number): `x * 2.0` in a loop then costs one NIF call,
  # not two (one-element add with a number: 1,006 -> 614 ns on :host, 2026-11-25). At most
  # @scalars_kept per process; the whole set is dropped when it is full.
  # A plain number other than zero is kept under itself with the tensor's type and device (the
  # scalar's type follows from them; 1 and 1.0 are different keys), so that a kept one is found
  # without encoding it (one-element add with a number: 370-387 -> 283-320 ns, 2026-11-26). Zeros
  # (0.0 and -0.0 are one map key on Erlang 25) and anything else are kept under their bytes.
  @scalars_kept 64
  def scalar_ref(%Tensor{type: type, device: device}, n) do
    kept = Process.get(:cascade_scalars, %{})
    by_number = if is_number(n) and n != 0, do: {n, type, device}

    case kept do
      %{^by_number => ref} when by_number != nil -> ref
      _ -> kept_or_new_scalar(kept, by_number, type, device, n)
    end
  end

  # not kept under the number: kept under its bytes (zeros and the rest), or made now
  defp kept_or_new_scalar(kept, by_number, type, device, n) do
    type = Type.merge_number(Type.normalize!(type), n)
    bin = Type.encode_one(Type.wrap(n, type), type)
    key = by_number || {bin, type, device}

    case kept do
      %{^key => ref} when by_number == nil ->
        ref

      _ ->
        ref = new_scalar(bin, type, device)
        kept = if map_size(kept) >= @scalars_kept, do: %{}, else: kept
        Process.put(:cascade_scalars, Map.put(kept, key, ref))
        ref
    end
  end

  defp new_scalar(bin, type, device) do
    case Native.from_binary(bin, type, {}, Device.id!(device)) do
      {ref, _, _, _} ->
        ref

      other ->
        other
        |> after_run(fn -> Native.from_binary(bin, type, {}, Device.id!(device)) end)
        |> Map.fetch!(:ref)
    end
  end

  # Numbers beside tensors wrap into integer types as the arithmetic would (Nx does the same).
  defp scalar(n, type, device) do
    Cascade.from_binary(Type.encode_one(Type.wrap(n, type), type), type, {}, device: device)
  end

  defp number!(_fun, _name, n) when is_number(n) or n in [:nan, :infinity, :neg_infinity], do: n
  defp number!(fun, name, other), do: bad!(fun, name, "a tensor or a number", other)

  @doc false
  def convert!(fun, name, kind, value)

  def convert!(fun, name, kind, value) when kind in [:shape, :square] do
    case value do
      %Tensor{shape: shape} ->
        shape

      n when kind == :square and is_integer(n) ->
        {n, n}

      t when is_tuple(t) and tuple_size(t) <= @max_rank ->
        if ints?(Tuple.to_list(t)),
          do: t,
          else: bad!(fun, name, "a shape tuple of integers in -2^63..2^63-1", t)

      t when is_tuple(t) ->
        bad!(fun, name, "a shape tuple of at most #{@max_rank} dimensions", t)

      other ->
        bad!(fun, name, "a shape tuple of integers", other)
    end
  end

  def convert!(fun, name, kind, value) when kind in [:ints, :axes] do
    if proper_list?(value) and length(value) <= 24 and ints?(value),
      do: value,
      else: bad!(fun, name, "a list of at most 24 integers in -2^63..2^63-1", value)
  end

  # fused's instructions, {op, a} or {op, a, b} with op an op's name, as [op_id, a, b] triples
  # (b = -1 for a unary op)
  def convert!(fun, name, :code, value) do
    expected = "a list of at most 8 instructions {op, a} or {op, a, b}"
    ids = Map.new(Cascade.__ops__(), &{&1.name, &1.id})

    unless proper_list?(value) and length(value) in 1..8, do: bad!(fun, name, expected, value)

    Enum.flat_map(value, fn
      {op, a} when is_map_key(ids, op) and is_integer(a) -> [ids[op], a, -1]
      {op, a, b} when is_map_key(ids, op) and is_integer(a) and is_integer(b) -> [ids[op], a, b]
      _ -> bad!(fun, name, expected, value)
    end)
    |> tap(&(ints?(&1) || bad!(fun, name, expected, value)))
  end

  def convert!(fun, name, kind, value) when kind in [:axis, :int] do
    if int64?(value), do: value, else: bad!(fun, name, "an integer in -2^63..2^63-1", value)
  end

  def convert!(fun, name, :key, value) do
    if is_integer(value) and value >= 0 and value < 0x1_0000_0000_0000_0000,
      do: value,
      else: bad!(fun, name, "an integer in 0..2^64-1", value)
  end

  def convert!(fun, name, :bool, value) do
    if is_boolean(value), do: value, else: bad!(fun, name, "a boolean", value)
  end

  # C reads numeric parameters as int64 or double; integers up to 2^64-1 (u64's) arrive as their
  # bits, which the integer types wrap
  def convert!(fun, name, :number, value) when is_integer(value) do
    if int64?(value) or (value > 0 and value <= 0xFFFF_FFFF_FFFF_FFFF),
      do: value,
      else: bad!(fun, name, "a number (integers in -2^63..2^64-1)", value)
  end

  def convert!(fun, name, :number, value), do: number!(fun, name, value)

  def convert!(_fun, _name, :type, value), do: Type.normalize!(value)

  def convert!(fun, name, :pads, value) do
    with true <- proper_list?(value) and length(value) <= @max_rank,
         flat when is_list(flat) <- flatten_pads(value),
         true <- ints?(flat) do
      flat
    else
      _ ->
        bad!(
          fun,
          name,
          "a list of at most #{@max_rank} {low, high, interior} integer tuples",
          value
        )
    end
  end

  # conv and pool padding: :valid -> [0], :same -> [1], [{lo, hi}, {lo, hi}] -> [lo, hi, lo, hi]
  def convert!(fun, name, :padding, value) do
    case value do
      :valid ->
        [0]

      :same ->
        [1]

      [{lo_h, hi_h}, {lo_w, hi_w}] ->
        if ints?([lo_h, hi_h, lo_w, hi_w]),
          do: [lo_h, hi_h, lo_w, hi_w],
          else: bad!(fun, name, ":valid, :same or [{low, high}, {low, high}] integers", value)

      _ ->
        bad!(fun, name, ":valid, :same or [{low, high}, {low, high}] integers", value)
    end
  end

  # window padding: :valid -> [0], :same -> [1], one {lo, hi} per axis -> [lo, hi, lo, hi, ...]
  def convert!(fun, name, :window_padding, value) do
    expected = ":valid, :same or a list of {low, high} integer tuples, one per axis"

    case value do
      :valid ->
        [0]

      :same ->
        [1]

      [_ | _] = pairs when length(pairs) <= @max_rank ->
        Enum.flat_map(pairs, fn
          {lo, hi} when is_integer(lo) and is_integer(hi) -> [lo, hi]
          _ -> bad!(fun, name, expected, value)
        end)

      _ ->
        bad!(fun, name, expected, value)
    end
  end

  def convert!(fun, name, {:choice, atoms}, value) do
    Enum.find_index(atoms, &(&1 == value)) || bad!(fun, name, "one of #{inspect(atoms)}", value)
  end

  defp flatten_pads(pads) do
    Enum.reduce_while(pads, [], fn
      {lo, hi, interior}, acc when is_integer(lo) and is_integer(hi) and is_integer(interior) ->
        {:cont, [interior, hi, lo | acc]}

      _, _ ->
        {:halt, :error}
    end)
    |> case do
      :error -> :error
      acc -> Enum.reverse(acc)
    end
  end

  defp ints?(list), do: Enum.all?(list, &int64?/1)

  defp proper_list?(value), do: is_list(value) and not List.improper?(value)

  defp int64?(n), do: is_integer(n) and n >= -0x8000_0000_0000_0000 and n <= 0x7FFF_FFFF_FFFF_FFFF

  defp bad!(fun, name, expected, got) do
    raise ArgumentError, "#{fun}: expected #{name} to be #{expected}, got: #{inspect(got)}"
  end
end
