defmodule CascadeWrongArgumentsTest do
  # Every documented public function of Cascade's API driven with wrong kinds of arguments
  # (atoms, numbers, strings, lists, maps, tuples, pids, funs, tensors where options go, options
  # where tensors go...): each call either works or raises ArgumentError (Cascade.Error for a
  # device's failure, Cascade.ONNX.Error for a model that cannot run), never a
  # FunctionClauseError, a KeyError, a Protocol.UndefinedError or any other crash of its own.
  use ExUnit.Case, async: false

  @modules [Cascade, Cascade.Device, Cascade.Tensor, Cascade.Type, Cascade.ONNX]
  @allowed [ArgumentError, Cascade.Error, Cascade.ONNX.Error]
  # calls of each function and arity, drawn with a fixed seed from every combination of the
  # wrong arguments below
  @calls_per_function 150

  defp wrong_arguments do
    t = Cascade.tensor([[1.0, 2.0], [3.0, 4.0]])
    ti = Cascade.tensor([1, 2, 3], type: :s32)

    [nil, :foo, 1, -1, 2.5, "x", <<1, 2>>, [], [1, 2], [foo: 1], [axes: :x], [type: :bogus]] ++
      [%{}, {1, 2}, {:f32, <<0, 0>>}, self(), make_ref(), t, ti, fn -> 1 end, fn _ -> 1 end] ++
      [[t], {t, t}, 10_000_000_000_000, [device: :nope], [device: :cpu, foo: 1]]
  end

  # the documented public functions of a module (not @doc false), at every arity their default
  # arguments give them
  defp documented(module) do
    {:docs_v1, _, _, _, _, _, docs} = Code.fetch_docs(module)

    for {{:function, name, arity}, _, _, doc, meta} <- docs,
        doc != :hidden,
        arity <- (arity - Map.get(meta, :defaults, 0))..arity,
        do: {name, arity}
  end

  # What a call did: :ok, or the exception's module and message
  defp outcome(module, fun, args) do
    task =
      Task.async(fn ->
        try do
          apply(module, fun, args)
          :ok
        rescue
          e -> {e.__struct__, Exception.message(e)}
        catch
          kind, value -> {kind, inspect(value, limit: 5)}
        end
      end)

    case Task.yield(task, 10_000) || Task.shutdown(task, :brutal_kill) do
      {:ok, result} -> result
      nil -> {:timeout, "no answer in 10 s"}
    end
  end

  # global settings a call may change, put back after each
  defp with_settings_restored(fun) do
    device = Cascade.Device.default()
    fallback = Cascade.fallback_policy()
    reproducible = Cascade.reproducible?()

    try do
      fun.()
    after
      Cascade.put_default_device(device)
      Cascade.put_fallback_policy(fallback)
      Cascade.put_reproducible(reproducible)
    end
  end

  test "no public function raises anything but ArgumentError (or a device's error) on wrong arguments" do
    functions =
      for module <- @modules, {fun, arity} <- documented(module), do: {module, fun, arity}

    # the API as it stands, not a list that lost its modules' docs
    assert length(functions) > 190
    assert_only_allowed(functions)
  end

  @tag :nx
  test "Cascade.Compiler's public functions too" do
    functions =
      for {fun, arity} <- documented(Cascade.Compiler), do: {Cascade.Compiler, fun, arity}

    assert {Cascade.Compiler, :explain, 2} in functions
    assert_only_allowed(functions)

    assert_raise ArgumentError, ~r/expected a function, a list of its arguments.*got: :x/, fn ->
      Cascade.Compiler.explain(:x, [])
    end
  end

  defp assert_only_allowed(functions) do
    :rand.seed(:exsss, {49, 3, 2026})

    failures =
      for {module, fun, arity} <- functions, reduce: [] do
        failures ->
          pool = wrong_arguments()
          calls = if arity == 0, do: 1, else: min(@calls_per_function, length(pool) ** arity)

          Enum.reduce(1..calls, failures, fn _, failures ->
            args = for _ <- 1..arity//1, do: Enum.random(pool)

            case with_settings_restored(fn -> outcome(module, fun, args) end) do
              :ok ->
                failures

              {exception, _message} when exception in @allowed ->
                failures

              {other, message} ->
                [
                  "#{inspect(module)}.#{fun}/#{arity}(#{Enum.map_join(args, ", ", &inspect(&1, limit: 3))}) " <>
                    "raised #{inspect(other)}: #{String.slice(message, 0, 200)}"
                  | failures
                ]
            end
          end)
      end

    # one line per function is enough to find it
    by_function = Enum.uniq_by(failures, &(String.split(&1, "(") |> hd()))
    assert by_function == [], Enum.join(Enum.reverse(by_function), "\n")
  end

  test "the wrong arguments the issue found raise ArgumentError naming what was expected" do
    t = Cascade.tensor([1.0, 2.0])

    assert_raise ArgumentError, ~r/expected an op name.*got: #Cascade.Tensor/, fn ->
      Cascade.explain(t, t, t)
    end

    assert_raise ArgumentError, ~r/expected the op's arguments as a list.*got: :x/, fn ->
      Cascade.explain(:add, :x)
    end

    assert_raise ArgumentError, ~r/expected an op name.*got: "add"/, fn ->
      Cascade.explain("add", [t, t])
    end

    assert_raise ArgumentError, ~r/lu\/2: expected options as a keyword list, got: :f32/, fn ->
      Cascade.lu(Cascade.tensor([[1.0, 2.0], [3.0, 4.0]]), :f32)
    end

    assert_raise ArgumentError, ~r/lu\/2: unknown option\(s\) \[:type\]/, fn ->
      Cascade.lu(Cascade.tensor([[1.0, 2.0], [3.0, 4.0]]), type: :f32)
    end

    assert_raise ArgumentError, ~r/Type.decode\/2: 3 bytes are not a whole number of f32/, fn ->
      Cascade.Type.decode(<<1, 2, 3>>, :f32)
    end

    assert_raise ArgumentError, ~r/unknown type :bogus/, fn ->
      Cascade.Type.encode([1], :bogus)
    end

    assert_raise ArgumentError, ~r/ONNX.load\/2: expected a path or the bytes/, fn ->
      Cascade.ONNX.load(:model)
    end

    assert_raise ArgumentError, ~r/ONNX.run\/2: expected a model from Cascade.ONNX.load\/2/, fn ->
      Cascade.ONNX.run(nil, %{})
    end
  end
end
