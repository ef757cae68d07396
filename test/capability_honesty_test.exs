# "A driver may not lie" (guides/design.md, The negotiation): every (op, type) that a device's driver
# claims as :native or :shape_dependent in `Cascade.capabilities/1` is run on a grid of shapes
# (odd sizes, broadcasting, rank 0, empty axes) on that device and on :cpu with the same inputs,
# and the results must agree: same shape and type, the same values (bitwise for the test driver,
# which runs the cpu kernels; within `tolerance/3` for real drivers), the result on the device,
# and a call that `Cascade.explain/3` routes :native must be counted as {device, op, :native} in
# `Cascade.stats/0` (the negotiation may not silently move a claimed op elsewhere).
#
# Every device other than :cpu is checked, whatever its driver: the test driver today, OpenCL or
# CUDA tomorrow, without changes here. An op claimed without a case generator below fails the
# test by name, so a new op cannot escape the check.

defmodule CascadeCapabilityHonestyTest do
  use ExUnit.Case, async: false

  import Bitwise
  alias Cascade.{Tensor, Type}

  # fallbacks taken by :shape_dependent cases log under the :warn policy
  @moduletag :capture_log
  @moduletag timeout: 300_000

  @types [:f16, :bf16, :f32, :f64, :u8, :s32, :s64]
  @float_types [:f16, :bf16, :f32, :f64]
  @ops Map.new(Cascade.__ops__(), &{&1.name, &1})

  # CASCADE_HONESTY_DEVICES=cuda,opencl: only the devices of these drivers (script/test's pass
  # with the emulated cuda device, whose other devices the first pass checked)
  @only "CASCADE_HONESTY_DEVICES" |> System.get_env("") |> String.split(",", trim: true)

  @devices for %{available: true, device: d, driver: driver} <- Cascade.devices(),
               d != :cpu,
               @only == [] or to_string(driver) in @only,
               do: d

  if @devices == [] do
    IO.puts(
      "capability honesty: skipped, no device other than :cpu is available " <>
        "(#{inspect(for d <- Cascade.devices(), not d.available, do: {d.device, d.reason})})"
    )

    @tag skip: "no device other than :cpu is available"
  end

  test "every :native or :shape_dependent claim of every device agrees with the cpu driver" do
    previous = Cascade.fallback_policy()
    Cascade.put_fallback_policy(:allow)
    on_exit(fn -> Cascade.put_fallback_policy(previous) end)

    claims =
      for device <- @devices,
          {{op, type}, claim} <- Enum.sort(Cascade.capabilities(device)),
          claim in [:native, :shape_dependent],
          do: {device, op, type, claim}

    missing = for {_, op, _, _} <- claims, not has_generator?(op), uniq: true, do: op

    assert missing == [],
           "ops claimed :native or :shape_dependent without a case generator in " <>
             "test/capability_honesty_test.exs (add one to cases/2): #{inspect(missing)}"

    results = Enum.map(claims, &check_claim/1)
    cases = Enum.flat_map(results, & &1.cases)
    failures = Enum.flat_map(results, & &1.failures)

    routes =
      cases
      |> Enum.frequencies_by(& &1.route)
      |> Enum.map_join(", ", fn {route, n} -> "#{route} #{n}" end)

    IO.puts(
      "capability honesty: #{length(@devices)} device(s) #{inspect(@devices)}, " <>
        "#{length(claims)} (op, type) claims " <>
        "(#{Enum.count(claims, &(elem(&1, 3) == :native))} native, " <>
        "#{Enum.count(claims, &(elem(&1, 3) == :shape_dependent))} shape-dependent), " <>
        "#{length(cases)} cases run (routes: #{routes}), #{length(failures)} failure(s)"
    )

    if failures != [] do
      shown = Enum.take(failures, 60)

      flunk(
        "#{length(failures)} broken claim(s) (#{length(shown)} shown):\n\n" <>
          Enum.join(shown, "\n\n")
      )
    end
  end

  # The generators serve drivers that do not exist yet: every case of every op and type the cpu
  # takes must be a valid call today, not only those of the ops the test driver claims.
  test "the case generators make valid calls of every op and type, on the cpu" do
    pairs = for {{op, type}, _} <- Enum.sort(Cascade.capabilities(:cpu)), do: {op, type}
    without = for {op, _} <- pairs, not has_generator?(op), uniq: true, do: op

    if without != [] do
      IO.puts(
        "capability honesty: no case generator yet for #{inspect(without)} " <>
          "(fails only once a device claims them)"
      )
    end

    bad =
      for {op, type} <- pairs,
          has_generator?(op),
          :rand.seed(:exsss, {:erlang.phash2(op), :erlang.phash2(type), 20_250_101}),
          c <- cases(op, type),
          error = invalid(c),
          do: "#{describe(c)}: #{error}"

    assert bad == [], "invalid cases:\n" <> Enum.join(Enum.take(bad, 40), "\n")
  end

  # The tolerances are not exercised by the test driver (it must agree bit for bit): check the
  # comparison itself, so that it is right on the day a real driver needs it.
  test "the comparison: bitwise, exact (NaN equal to NaN), ulps, infinities exact" do
    f32 = fn words -> for w <- words, into: <<>>, do: <<w::unsigned-native-32>> end
    one = 0x3F80_0000
    max = 0x7F7F_FFFF
    inf = 0x7F80_0000

    assert differences(f32.([one]), f32.([one]), :f32, :exact) == []
    assert [{0, _, _}] = differences(f32.([one]), f32.([one + 1]), :f32, :exact)
    assert differences(f32.([one, 0]), f32.([one + 1, 0x8000_0000]), :f32, {:ulp, 1}) == []
    assert [{1, _, _}] = differences(f32.([one, one]), f32.([one - 1, one + 2]), :f32, {:ulp, 1})
    assert differences(f32.([0x7FC0_0000]), f32.([0xFFC0_0001]), :f32, {:ulp, 0}) == []
    assert differences(f32.([0x7FC0_0000]), f32.([0xFFC0_0001]), :f32, :exact) == []
    assert [_] = differences(f32.([0x7FC0_0000]), f32.([0xFFC0_0001]), :f32, :bitwise)
    assert [_] = differences(f32.([0]), f32.([0x8000_0000]), :f32, :exact)
    assert [_] = differences(f32.([0x7FC0_0000]), f32.([one]), :f32, {:ulp, 4})
    assert [_] = differences(f32.([inf]), f32.([max]), :f32, {:ulp, 4})
    assert [_] = differences(f32.([inf]), f32.([inf ||| 0x8000_0000]), :f32, {:close, 1.0, 1.0})
    assert differences(f32.([one]), f32.([one + 3]), :f32, {:close, 1.0e-6, 0.0}) == []
    assert [_] = differences(f32.([one]), f32.([one + 30]), :f32, {:close, 1.0e-6, 0.0})
    # half types: 1.0 and the next number up
    assert differences(<<0x3C00::native-16>>, <<0x3C01::native-16>>, :f16, {:ulp, 1}) == []
    assert [_] = differences(<<0x3F80::native-16>>, <<0x3F82::native-16>>, :bf16, {:ulp, 1})
    assert [_] = differences(<<1::native-32>>, <<2::native-32>>, :s32, {:ulp, 8})
  end

  defp invalid(c) do
    plan =
      if c.call == :dot6,
        do: {:ok, nil},
        else: attempt(fn -> Cascade.explain(c.op, c.args, c.opts) end)

    case {attempt(fn -> call(c) end), plan} do
      {{:raised, e}, _} -> message(e)
      {_, {:raised, e}} -> "explain/3: " <> message(e)
      _ -> nil
    end
  end

  ## Checking one claim

  defp check_claim({device, op, type, claim}) do
    # the same inputs on every device: the seed depends on the op and the type only
    :rand.seed(:exsss, {:erlang.phash2(op), :erlang.phash2(type), 20_250_101})
    cases = cases(op, type)
    where = "#{inspect(device)} claims #{inspect({op, type})} #{inspect(claim)}"

    if cases == [] do
      %{cases: [], failures: ["#{where}: the generator gave no case for this type"]}
    else
      ran = Enum.map(cases, &run_case(device, op, claim, &1))
      failures = for %{failure: f} <- ran, f != nil, do: "#{where}, #{f}"

      failures =
        if claim == :shape_dependent and not Enum.any?(ran, &(&1.route == :native)) do
          failures ++
            ["#{where}: no case of the grid ran natively, so the claim went untested"]
        else
          failures
        end

      %{cases: ran, failures: failures}
    end
  end

  defp run_case(device, op, claim, c) do
    label = describe(c)
    expected = attempt(fn -> call(c) end)
    on_device = move(c, device)

    plan =
      if c.call == :dot6,
        do: nil,
        else: attempt(fn -> Cascade.explain(op, on_device.args, on_device.opts) end)

    Cascade.reset_stats()
    got = attempt(fn -> call(on_device) end)
    stats = Cascade.stats()

    case {expected, got, plan} do
      {{:raised, e}, _, _} ->
        %{route: :error, failure: "#{label}: the cpu raised (a bad case?): #{message(e)}"}

      {_, {:raised, e}, _} ->
        %{route: :error, failure: "#{label}: raised on the device: #{message(e)}"}

      {_, _, {:raised, e}} ->
        %{route: :error, failure: "#{label}: explain/3 raised: #{message(e)}"}

      {{:ok, want}, {:ok, have}, plan} ->
        route = route(plan, stats, device, op)

        problems =
          check_plan(plan, have, device) ++
            check_route(claim, route, plan) ++
            check_stats(route, stats, device, op, Cascade.size(have)) ++
            check_result(have, want, device, c)

        failure =
          if problems == [], do: nil, else: "#{label}:\n    " <> Enum.join(problems, "\n    ")

        %{route: route, failure: failure}
    end
  end

  defp attempt(fun) do
    {:ok, fun.()}
  rescue
    e -> {:raised, e}
  end

  defp message(e), do: "#{inspect(e.__struct__)}: #{Exception.message(e)}"

  # dot/6 has no explain/3 form (explain takes dot/2's arguments): its route is read from the
  # counters instead
  defp route({:ok, plan}, _stats, _device, _op), do: plan.route

  defp route(nil, stats, device, op) do
    case for({{^device, ^op, route}, _} <- stats, do: route) do
      [route] -> route
      [] -> :nothing_ran
      several -> {:several, several}
    end
  end

  defp check_plan(nil, _have, _device), do: []

  defp check_plan({:ok, plan}, have, device) do
    [
      plan.device == device || "explain/3 plans it on #{inspect(plan.device)}",
      plan.shape == have.shape ||
        "explain/3 gives shape #{inspect(plan.shape)}, the call #{inspect(have.shape)}",
      Type.normalize!(plan.type) == Type.normalize!(have.type) ||
        "explain/3 gives type #{inspect(plan.type)}, the call #{inspect(have.type)}"
    ]
    |> Enum.reject(&(&1 == true))
  end

  # a :native claim holds for every shape; a :shape_dependent one may go either way
  defp check_route(:native, :native, _plan), do: []
  defp check_route(:native, :nothing_ran, nil), do: []

  defp check_route(:native, route, plan) do
    reason = with {:ok, %{reason: r}} <- plan, do: ": #{r}"
    ["claimed :native, but routed #{inspect(route)}#{if is_binary(reason), do: reason}"]
  end

  defp check_route(:shape_dependent, _route, _plan), do: []

  defp check_stats(route, stats, device, op, size) do
    counted = for {{^device, ^op, r}, %{calls: n}} <- stats, n > 0, do: r
    on_cpu = for {{:cpu, cpu_op, r}, _} <- stats, do: {cpu_op, r}

    cond do
      route == :native and size > 0 and counted != [:native] ->
        [
          "explain/3 says :native but stats/0 counted #{inspect(counted)} for " <>
            "#{inspect({device, op})}: #{inspect(stats)}"
        ]

      route == :native and on_cpu != [] ->
        ["routed :native, yet ops ran on the cpu: #{inspect(on_cpu)}"]

      route in [:cpu_fallback, :decomposed] and size > 0 and route not in counted ->
        ["explain/3 says #{route} but stats/0 counted #{inspect(stats)}"]

      match?({:several, _}, route) ->
        ["one call counted under several routes: #{inspect(stats)}"]

      true ->
        []
    end
  end

  defp check_result(%Tensor{} = have, %Tensor{} = want, device, %{op: op} = c) do
    cond do
      have.device != device ->
        ["the result lives on #{inspect(have.device)}, not #{inspect(device)}"]

      have.shape != want.shape ->
        ["shape #{inspect(have.shape)} on the device, #{inspect(want.shape)} on the cpu"]

      Type.normalize!(have.type) != Type.normalize!(want.type) ->
        ["type #{inspect(have.type)} on the device, #{inspect(want.type)} on the cpu"]

      true ->
        type = Type.normalize!(want.type)
        stated = tolerance(device, op, type)
        tol = with_products(stated, c, type)
        a = Cascade.to_binary(have)
        b = Cascade.to_binary(want)

        case differences(a, b, type, tol) do
          [] ->
            []

          diffs ->
            [
              "#{length(diffs)} of #{Cascade.size(want)} elements differ " <>
                "(#{inspect(stated)}), first ones {index, device, cpu}: " <>
                inspect(Enum.take(diffs, 6), limit: :infinity)
            ]
        end
    end
  end

  ## Comparison

  @doc """
  How closely `device` must agree with the cpu for `op` with a result of `type`:
  `:bitwise`, `:exact` (the same value: bitwise, but any NaN equals any NaN), `{:ulp, n}` (at
  most n units in the last place apart), `{:close, rtol, atol}` (|device - cpu| <= atol +
  rtol * |cpu|) or `{:products, rtol, atol}` (:close, plus a part for the size of each
  element's products: `with_products/3`). NaN equals NaN (any payload, any sign) except under `:bitwise`, and
  infinities must match exactly. The test driver runs the cpu's own kernels, so it must agree
  bit for bit, and so must the layout ops, which only move elements; a GPU makes the NaNs it
  computes canonical where the cpu keeps their sign and payload, which Cascade does not
  promise. Real drivers get ulp-based tolerances.
  """
  def tolerance(device, op, type) do
    driver = Enum.find_value(Cascade.devices(), &(&1.device == device && &1.driver))
    kind = @ops[op].kind
    eps = if type in @float_types, do: epsilon(type), else: 0.0

    cond do
      driver == :test -> :bitwise
      type not in @float_types -> :exact
      kind in [:layout, :sort] or op == :indexed_put -> :bitwise
      op in [:window_max, :window_min] -> :exact
      kind in [:compare, :logical, :select, :cast, :argreduce] -> :exact
      op in [:full, :iota, :eye, :reduce_max, :reduce_min, :all, :any, :relu] -> :exact
      op in [:negate, :abs, :sign, :floor, :ceil, :round, :max, :min] -> :exact
      op in [:add, :subtract, :multiply, :divide, :sqrt] -> {:ulp, 1}
      kind in [:unary, :unary_float, :binary, :binary_float] -> {:ulp, 4}
      op in [:random_uniform, :random_normal] -> {:ulp, 8}
      # a convolution and its gradients sum each output's products in the driver's order
      # (CLBlast's, OpenBLAS's, oneDNN's), the cpu reference in its own (all in f32): under
      # cancellation the rounding error follows the size of the products, not of the result,
      # hence a part for that (with_products/3)
      op in [:conv2d, :conv2d_grad_input, :conv2d_grad_kernel] -> {:products, 64 * eps, 64 * eps}
      # singular vectors move by the rounding over the gap between their singular values
      # (dgesdd's against the one-sided Jacobi method's, both in double): 1e-13 of the f64
      # results here; the other types are these doubles rounded once
      op == :svd_packed and type == :f64 -> {:close, 1.0e-11, 1.0e-11}
      # summation order is the driver's: relative to the magnitude of the result
      true -> {:close, 64 * eps, 64 * eps}
    end
  end

  # {:products, rtol, atol}: {:close, rtol, atol} plus, for each element, 8 units of the
  # accumulator's rounding (f32's 2^-23, f64's 2^-52) times the sum of the magnitudes of its
  # products: the same op on the cpu, in f64, on the inputs' absolute values. (One blas
  # conv2d_grad_kernel element of the grid sums 56 products of magnitude 1,500 in all to -0.53:
  # oneDNN is 3.5e-6 from the exact sum, the cpu 2.5e-5.)
  defp with_products({:products, rtol, atol}, %{args: args} = c, type) do
    unit = if type == :f64, do: :math.pow(2, -52), else: :math.pow(2, -23)
    magnitude = fn %Tensor{} = t -> t |> Cascade.as_type(:f64) |> Cascade.abs() end

    mags =
      %{c | args: Enum.map(args, fn a -> if is_struct(a, Tensor), do: magnitude.(a), else: a end)}
      |> call()
      |> Cascade.to_binary()
      |> Type.decode(:f64)

    {:per_element, Enum.map(mags, &{:close, rtol, atol + 8 * unit * &1})}
  end

  defp with_products(tol, _c, _type), do: tol

  defp epsilon(:f16), do: :math.pow(2, -10)
  defp epsilon(:bf16), do: :math.pow(2, -7)
  defp epsilon(:f32), do: :math.pow(2, -23)
  defp epsilon(:f64), do: :math.pow(2, -52)

  # [{index, device value, cpu value}] for the elements that differ beyond `tol`
  defp differences(same, same, _type, _tol), do: []

  defp differences(a, b, type, tol) do
    xs = Type.decode(a, type)
    ys = Type.decode(b, type)
    bits = Type.byte_size(type) * 8

    bs =
      if type in @float_types,
        do: Enum.zip(words(a, bits), words(b, bits)),
        else: List.duplicate(nil, length(xs))

    tols =
      case tol do
        {:per_element, tols} -> tols
        tol -> List.duplicate(tol, length(xs))
      end

    [xs, ys, bs, tols]
    |> Enum.zip()
    |> Enum.with_index()
    |> Enum.reject(fn {{x, y, wb, tol}, _} -> same_value?(x, y, wb, type, tol) end)
    |> Enum.map(fn {{x, y, _, _}, k} -> {k, x, y} end)
  end

  defp words(bin, bits), do: for(<<w::size(bits)-unsigned-native <- bin>>, do: w)

  defp same_value?(x, y, {wx, wy}, type, tol) when type in @float_types do
    cond do
      wx == wy -> true
      tol == :bitwise -> false
      nan?(wx, type) or nan?(wy, type) -> nan?(wx, type) and nan?(wy, type)
      tol == :exact -> false
      is_atom(x) or is_atom(y) -> x == y
      true -> within?(x, y, wx, wy, type, tol)
    end
  end

  defp same_value?(x, y, _, _type, _tol), do: x == y

  defp within?(_x, _y, wx, wy, type, {:ulp, n}),
    do: abs(ordinal(wx, type) - ordinal(wy, type)) <= n

  defp within?(x, y, _wx, _wy, _type, {:close, rtol, atol}),
    do: abs(x - y) <= atol + rtol * abs(y)

  # the bit patterns of floats as integers in the order of the values (+0 and -0 both 0)
  defp ordinal(w, type) do
    bits = Type.byte_size(type) * 8
    mag = w &&& (1 <<< (bits - 1)) - 1
    if w >>> (bits - 1) == 1, do: -mag, else: mag
  end

  defp nan?(w, type) do
    {e, m} = layout(type)
    mag = w &&& (1 <<< (e + m)) - 1
    mag > ((1 <<< e) - 1) <<< m
  end

  defp layout(:f16), do: {5, 10}
  defp layout(:bf16), do: {8, 7}
  defp layout(:f32), do: {8, 23}
  defp layout(:f64), do: {11, 52}

  ## Cases
  #
  # A case is %{op, call: :op | :dot6, args, opts}: args as the function takes them, with cpu
  # tensors (or lists of them) in tensor positions. move/2 copies them to a device; creation ops
  # get `device:` instead.

  defp new_case(op, args, opts \\ []), do: %{op: op, call: :op, args: args, opts: opts}

  defp call(%{call: :dot6, args: args}), do: apply(Cascade, :dot, args)

  defp call(%{call: :window, op: op, args: args, opts: opts}),
    do: apply(Cascade, op, args ++ [opts])

  defp call(%{op: op, args: args, opts: opts}) do
    %{opts: specs, kind: kind} = @ops[op]

    if specs != [] or kind == :create,
      do: apply(Cascade, op, args ++ [opts]),
      else: apply(Cascade, op, args)
  end

  defp move(%{op: op} = c, device) do
    if @ops[op].kind == :create do
      %{c | opts: Keyword.put(c.opts, :device, device)}
    else
      %{c | args: Enum.map(c.args, &move_arg(&1, device))}
    end
  end

  defp move_arg(%Tensor{} = t, device), do: Cascade.transfer(t, device)

  defp move_arg(list, device) when is_list(list) and list != [] do
    if Enum.all?(list, &match?(%Tensor{}, &1)),
      do: Enum.map(list, &Cascade.transfer(&1, device)),
      else: list
  end

  defp move_arg(other, _device), do: other

  defp describe(%{op: op, args: args, opts: opts}) do
    args = Enum.map_join(args, ", ", &describe_arg/1)
    opts = if opts == [], do: "", else: ", " <> inspect(opts)
    "#{op}(#{args}#{opts})"
  end

  defp describe_arg(%Tensor{shape: shape, type: type}),
    do: "#{Type.normalize!(type)}#{inspect(shape)}"

  defp describe_arg([%Tensor{} | _] = list),
    do: "[" <> Enum.map_join(list, ", ", &describe_arg/1) <> "]"

  defp describe_arg(other), do: inspect(other)

  ## The generators: one per op, cases(op, type) -> [case]

  @elementwise [:unary, :unary_float, :binary, :binary_float, :compare, :logical]
  @composites_unary [:relu, :leaky_relu, :elu, :gelu, :silu, :softplus, :hard_sigmoid]
  @composites_reduce [:logsumexp, :mean, :variance, :standard_deviation]
  @losses [:categorical_cross_entropy, :binary_cross_entropy, :mean_squared_error]
  @conv [:conv2d, :conv2d_grad_input, :conv2d_grad_kernel]
  @pool [:max_pool2d, :avg_pool2d, :max_pool2d_grad, :avg_pool2d_grad]

  @special_cases [
                   :select,
                   :clip,
                   :as_type,
                   :reshape,
                   :transpose,
                   :broadcast,
                   :squeeze,
                   :slice,
                   :put_slice,
                   :pad,
                   :reverse,
                   :concatenate,
                   :fused,
                   :take,
                   :gather,
                   :take_along_axis,
                   :dot,
                   :full,
                   :iota,
                   :eye,
                   :random_uniform,
                   :random_normal,
                   :softmax,
                   :log_softmax,
                   :layer_norm,
                   :batch_norm,
                   :dense,
                   :recurrent,
                   :one_hot,
                   :triangular_solve,
                   :lu_factor,
                   :eigh_packed,
                   :svd_packed,
                   :fft,
                   :ifft
                 ] ++ @composites_unary ++ @composites_reduce ++ @losses ++ @conv ++ @pool

  defp has_generator?(op) do
    case @ops[op] do
      %{kind: kind}
      when kind in @elementwise or
             kind in [:reduce, :argreduce, :sort, :scan, :scatter, :window] ->
        true

      _ ->
        op in @special_cases
    end
  end

  @shapes [{}, {1}, {7}, {17}, {0}, {2, 0}, {3, 7}, {2, 3, 5}, {1, 17, 1}]

  # pairs that broadcast against each other, and a number in place of a tensor
  @broadcast_pairs [
    {{3, 1}, {1, 7}},
    {{7}, {3, 7}},
    {{}, {17}},
    {{2, 3, 5}, {5}},
    {{2, 1, 5}, {3, 1}},
    {{0, 1}, {1, 7}},
    {{1}, {0}},
    {{17, 1}, {}}
  ]

  defp cases(op, type) do
    case @ops[op] do
      %{kind: kind, args: args} when kind in @elementwise -> elementwise(op, kind, args, type)
      %{kind: :reduce} -> reductions(op, type, reduce_domain(op))
      %{kind: :argreduce} -> arg_reductions(op, type)
      %{kind: :sort} -> sorts(op, type)
      %{kind: :scan} -> scans(op, type)
      %{kind: :scatter} -> indexed(op, type)
      %{kind: :window} -> windows(op, type)
      _ -> special(op, type)
    end
  end

  defp elementwise(op, kind, [_], type) do
    domain = if kind == :logical, do: :small, else: :any
    for s <- @shapes, do: new_case(op, [r(s, type, domain)])
  end

  defp elementwise(op, kind, [_, _], type) do
    {dl, dr} =
      cond do
        kind in [:compare, :logical] -> {:small, :small}
        op == :pow and type not in @float_types -> {:small, :exponent}
        true -> {:any, :any}
      end

    number = if type in @float_types, do: 2.5, else: 3

    for(
      {a, b} <- Enum.map(@shapes, &{&1, &1}) ++ @broadcast_pairs,
      do: new_case(op, [r(a, type, dl), r(b, type, dr)])
    ) ++
      [
        new_case(op, [r({7}, type, dl), number]),
        new_case(op, [number, r({3, 7}, type, dr)])
      ]
  end

  defp reduce_domain(op) when op in [:all, :any, :product], do: :small
  defp reduce_domain(_op), do: :any

  @reduce_grid [
    {{}, nil},
    {{}, []},
    {{7}, nil},
    {{17}, [0]},
    {{0}, [0]},
    {{3, 0}, [1]},
    {{3, 0}, [0]},
    {{3, 7}, [1]},
    {{3, 7}, [0]},
    {{3, 7}, [0, 1]},
    {{2, 3, 5}, [0, 2]},
    {{2, 3, 5}, [1]},
    {{1, 17, 1}, [-2]},
    {{4, 65}, [1]}
  ]

  defp reductions(op, type, domain) do
    for {{shape, axes}, k} <- Enum.with_index(@reduce_grid) do
      opts = if axes == nil, do: [], else: [axes: axes]
      new_case(op, [r(shape, type, domain)], opts ++ [keep_axes: rem(k, 2) == 1])
    end
  end

  # window_scatter_max/min: a source of one element per window
  defp windows(op, type) when op in [:window_scatter_max, :window_scatter_min] do
    grid = [
      {{7}, {2}, [strides: [2]], :valid, {3}},
      {{7}, {3}, [], [{1, 1}], {7}},
      {{3, 7}, {2, 2}, [strides: [1, 2]], [{0, 1}, {1, 0}], {3, 4}},
      {{2, 4, 6}, {1, 2, 2}, [strides: [1, 2, 2]], :valid, {2, 2, 3}}
    ]

    value = if type in @float_types, do: 0.5, else: 1

    for {shape, window, opts, padding, src} <- grid do
      new_case(
        op,
        [r(shape, type, :small), r(src, type, :finite), value, window],
        [padding: padding] ++ opts
      )
    end
  end

  # windows, strides, dilations and padding on every axis, ranks 1 to 3
  defp windows(op, type) do
    grid = [
      {{7}, {2}, [], :valid},
      {{7}, {3}, [strides: [2]], [{1, 1}]},
      {{3, 7}, {2, 2}, [strides: [1, 2]], [{0, 1}, {1, 0}]},
      {{3, 7}, {1, 3}, [window_dilations: [1, 2]], :same},
      {{2, 3, 5}, {2, 3, 2}, [strides: [1, 1, 3], window_dilations: [1, 1, 2]], :valid},
      {{4}, {6}, [], :valid}
    ]

    domain = if type in @float_types, do: :any, else: :small

    for {shape, window, opts, padding} <- grid do
      %{
        op: op,
        call: :window,
        args: [r(shape, type, domain), window],
        opts: [padding: padding] ++ opts
      }
    end
  end

  # gather's grid with updates of the shape the indices ask for; few positions, so updates collide
  defp indexed(op, type) do
    grid = [
      {{3, 7}, {5}, [0, 1], nil},
      {{3, 7}, {4}, [1], [1]},
      {{2, 3, 5}, {9}, [0, 2], [0, 2]},
      {{4}, {40}, [0], nil},
      {{2, 0}, {3}, [0], [0]}
    ]

    for {shape, batch, axes, given} <- grid do
      rest = for a <- 0..(tuple_size(shape) - 1), a not in axes, do: elem(shape, a)
      updates = r(List.to_tuple([elem(batch, 0) | rest]), type, :small)
      opts = if given, do: [axes: given], else: []
      new_case(op, [r(shape, type, :small), gather_indices(shape, batch, axes), updates], opts)
    end
  end

  # {shape, axis} for the ops along one axis (sorts and scans)
  @line_grid [{{7}, 0}, {{}, 0}, {{3, 7}, 1}, {{3, 7}, 0}, {{2, 3, 5}, -1}, {{2, 0}, 1}]

  # small values (ties, NaN), both directions, every axis, lines the blas driver splits
  defp scans(op, type) do
    grid = @line_grid ++ [{{40, 500}, 1}]

    # products of values near 1 stay finite along a line
    domain = if op == :cumulative_product, do: :unit, else: :small

    for {shape, axis} <- grid, reverse <- [false, true] do
      new_case(op, [r(shape, type, domain)], axis: axis, reverse: reverse)
    end
  end

  # ties and NaN (small values), both directions, every axis; argsort into s64 and s32
  defp sorts(op, type) do
    grid = @line_grid ++ [{{300, 3}, 0}]

    for {{shape, axis}, k} <- Enum.with_index(grid), direction <- [:asc, :desc] do
      type_opt = if op == :argsort and rem(k, 2) == 1, do: [type: :s32], else: []
      new_case(op, [r(shape, type, :small)], [axis: axis, direction: direction] ++ type_opt)
    end
  end

  defp arg_reductions(op, type) do
    grid = [
      {{7}, nil},
      {{}, nil},
      {{17}, 0},
      {{3, 7}, 1},
      {{3, 7}, 0},
      {{3, 7}, nil},
      {{2, 3, 5}, 1},
      {{2, 3, 5}, -1},
      {{2, 0}, 0},
      {{1, 17, 1}, 1}
    ]

    for {{shape, axis}, k} <- Enum.with_index(grid) do
      opts =
        [tie_break: Enum.at([:low, :high], rem(k, 2)), keep_axis: rem(div(k, 2), 2) == 1] ++
          if(axis == nil, do: [], else: [axis: axis])

      new_case(op, [r(shape, type, :small)], opts)
    end
  end

  defp special(:select, type) do
    grid =
      Enum.map(@shapes, &{&1, &1, &1}) ++
        [
          {{7}, {}, {3, 7}},
          {{3, 1}, {1, 7}, {3, 7}},
          {{}, {7}, {7}},
          {{0}, {0}, {}},
          {{2, 3, 5}, {5}, {3, 1}}
        ]

    for({p, a, b} <- grid, do: new_case(:select, [r(p, :u8, :pred), r(a, type), r(b, type)])) ++
      [
        new_case(:select, [
          r({3, 7}, :u8, :pred),
          r({3, 7}, type),
          if(type in @float_types, do: 0.5, else: 2)
        ])
      ]
  end

  defp special(:clip, type) do
    grid =
      Enum.map(@shapes, &{&1, &1, &1}) ++
        [{{7}, {}, {}}, {{3, 7}, {7}, {3, 1}}, {{0}, {}, {}}, {{2, 3, 5}, {3, 1}, {}}]

    {lo, hi} = if type in @float_types, do: {-1.5, 2.5}, else: {1, 5}

    for({s, a, b} <- grid, do: new_case(:clip, [r(s, type), r(a, type, :low), r(b, type, :high)])) ++
      [new_case(:clip, [r({17}, type), lo, hi])]
  end

  defp special(:as_type, type) do
    for to <- @types,
        s <- [{}, {7}, {17}, {0}, {3, 5}],
        do: new_case(:as_type, [r(s, type, :wide), to])
  end

  defp special(:reshape, type) do
    for {from, to} <- [
          {{2, 3, 5}, {5, 6}},
          {{7}, {1, 7, 1}},
          {{}, {1, 1}},
          {{1}, {}},
          {{0, 3}, {3, 0}},
          {{17}, {17}},
          {{3, 7}, {21}}
        ],
        do: new_case(:reshape, [r(from, type), to])
  end

  defp special(:transpose, type) do
    for {s, axes} <- [
          {{3, 7}, nil},
          {{2, 3, 5}, [1, 0, 2]},
          {{2, 3, 5}, [2, 0, 1]},
          {{}, nil},
          {{7}, nil},
          {{0, 3}, nil},
          {{1, 17, 1}, [2, 1, 0]},
          {{2, 1, 3, 5}, [3, 1, 0, 2]}
        ],
        do: new_case(:transpose, [r(s, type)], opt(:axes, axes))
  end

  defp special(:broadcast, type) do
    for {s, to, axes} <- [
          {{7}, {3, 7}, nil},
          {{}, {2, 3}, nil},
          {{3, 1}, {3, 7}, nil},
          {{3}, {3, 4}, [0]},
          {{1, 7}, {0, 7}, nil},
          {{3, 7}, {2, 3, 7}, nil},
          {{2, 1, 5}, {2, 7, 5}, nil},
          {{5}, {5, 1, 17}, [0]},
          {{17}, {17}, nil}
        ],
        do: new_case(:broadcast, [r(s, type), to], opt(:axes, axes))
  end

  defp special(:squeeze, type) do
    for {s, axes} <- [
          {{1, 7, 1}, nil},
          {{1, 7, 1}, [0]},
          {{1}, nil},
          {{3, 1, 0}, [1]},
          {{1, 1}, nil},
          {{7}, nil},
          {{17, 1}, [-1]}
        ],
        do: new_case(:squeeze, [r(s, type)], opt(:axes, axes))
  end

  defp special(:slice, type) do
    for {s, start, lengths, strides} <- [
          {{17}, [1], [5], [3]},
          {{3, 7}, [1, 2], [2, 4], nil},
          {{3, 7}, [0, 0], [2, 3], [2, 3]},
          {{17}, [15], [5], nil},
          {{2, 3, 5}, [0, 1, 1], [2, 2, 3], [1, 2, 2]},
          {{7}, [0], [0], nil},
          {{0, 3}, [0, 0], [0, 2], nil},
          {{}, [], [], nil},
          {{1, 17, 1}, [0, 3, 0], [1, 7, 1], [1, 7, 1]}
        ],
        do: new_case(:slice, [r(s, type), start, lengths], opt(:strides, strides))
  end

  defp special(:put_slice, type) do
    for {s, start, u} <- [
          {{17}, [3], {5}},
          {{3, 7}, [1, 5], {2, 4}},
          {{2, 3, 5}, [0, 1, 1], {1, 2, 3}},
          {{7}, [2], {0}},
          {{}, [], {}},
          {{1, 17, 1}, [0, 16, 0], {1, 1, 1}},
          {{3, 7}, [0, 0], {3, 7}}
        ],
        do: new_case(:put_slice, [r(s, type), start, r(u, type)])
  end

  defp special(:pad, type) do
    value = if type in @float_types, do: -1.5, else: 7

    for {s, pads} <- [
          {{7}, [{1, 2, 0}]},
          {{7}, [{-2, 1, 1}]},
          {{3, 5}, [{0, 0, 2}, {-1, -1, 0}]},
          {{3, 5}, [{2, -1, 1}, {1, 3, 3}]},
          {{}, []},
          {{0}, [{1, 1, 0}]},
          {{0}, [{1, 1, 3}]},
          {{2, 3, 5}, [{1, 0, 0}, {0, 0, 1}, {-2, -2, 0}]},
          {{7}, [{-3, -4, 0}]},
          {{17}, [{-5, -4, 2}]}
        ],
        do: new_case(:pad, [r(s, type), value, pads])
  end

  defp special(:reverse, type) do
    for {s, axes} <- [
          {{7}, nil},
          {{3, 7}, [0]},
          {{3, 7}, [1]},
          {{2, 3, 5}, [0, 2]},
          {{}, nil},
          {{0, 3}, nil},
          {{17}, [0]}
        ],
        do: new_case(:reverse, [r(s, type)], opt(:axes, axes))
  end

  defp special(:concatenate, type) do
    for {shapes, axis} <- [
          {[{7}, {1}, {17}], 0},
          {[{3, 7}, {3, 1}], 1},
          {[{2, 3}, {0, 3}], 0},
          {[{2, 3, 5}, {2, 3, 5}], 2},
          {[{7}], 0},
          {[{1}, {0}], 0},
          {[{2, 3, 5}, {2, 1, 5}, {2, 4, 5}], -2}
        ],
        do: new_case(:concatenate, [Enum.map(shapes, &r(&1, type))], axis: axis)
  end

  # chains over tensors of one shape and numbers (rank 0), every value read
  defp special(:fused, type) do
    chains =
      for {shape, code} <- [
            {{7}, [{:add, 0, 1}, {:exp, 2}, {:multiply, 3, 0}]},
            {{3, 7}, [{:tanh, 0}, {:subtract, 2, 1}]},
            {{2, 3, 5}, [{:max, 0, 1}, {:negate, 2}, {:divide, 3, 1}, {:abs, 4}]},
            {{0, 3}, [{:add, 0, 1}]},
            {{17}, [{:exp, 1}, {:multiply, 0, 2}]}
          ],
          do:
            new_case(:fused, [
              [r(shape, type), r(if(shape == {17}, do: {}, else: shape), type)],
              code
            ])

    # chains with a sum at the end (f32 and f64: halves sum as steps of their own)
    sums =
      for {shape, opts} <- [
            {{3, 7}, [reduce: :sum, axes: [1]]},
            {{2, 3, 300}, [reduce: :sum, axes: [1, 2], keep_axes: true]},
            {{5, 0}, [reduce: :sum, axes: [1]]},
            {{4, 70}, [reduce: :sum]}
          ],
          type not in [:f16, :bf16],
          do:
            new_case(
              :fused,
              [[r(shape, type), r({}, type)], [{:multiply, 0, 1}, {:exp, 2}, {:add, 3, 0}]],
              opts
            )

    chains ++ sums
  end

  defp special(:take, type) do
    for {s, idx, axis} <- [
          {{7}, {5}, 0},
          {{3, 7}, {2, 4}, 1},
          {{3, 7}, {}, 0},
          {{3, 7}, {0}, 1},
          {{17}, {17}, 0},
          {{2, 3, 5}, {3}, 2}
        ] do
      new_case(:take, [r(s, type), indices(idx, elem(s, axis))], axis: axis)
    end
  end

  defp special(:take_along_axis, type) do
    # {shape, the indices' size along axis, axis}
    for {s, n, axis} <- [
          {{7}, 5, 0},
          {{3, 7}, 4, 1},
          {{3, 7}, 0, 1},
          {{4, 3, 5}, 2, 1},
          {{5, 2}, 6, 0}
        ] do
      new_case(:take_along_axis, [r(s, type), indices(put_elem(s, axis, n), elem(s, axis))],
        axis: axis
      )
    end
  end

  defp special(:gather, type) do
    # {shape, batch shape of the indices, axes the indices address, pass axes: or not}
    for {s, n, axes, given} <- [
          {{3, 7}, {5}, [0, 1], false},
          {{3, 7}, {4}, [1], true},
          {{2, 3, 5}, {2, 3}, [0, 1], false},
          {{2, 3, 5}, {2}, [0, 2], true},
          {{7}, {0}, [0], false},
          {{17}, {}, [0], true}
        ] do
      new_case(
        :gather,
        [r(s, type), gather_indices(s, n, axes)],
        if(given, do: [axes: axes], else: [])
      )
    end
  end

  # lu_factor and eigh_packed of finite values: no ties between candidate pivots (which of two
  # equal magnitudes wins depends on the rounding of the elimination: FMA or not) and distinct
  # eigenvalues (eigenvectors unique up to the sign the canonical form fixes). Triangular solves
  # on both sides, with matrices and vectors, every option, of matrices whose diagonal (25)
  # dominates the other values: well conditioned, so that another summation order stays close
  defp special(op, type) when op in [:lu_factor, :eigh_packed] do
    for s <- [{1, 1}, {3, 3}, {2, 5, 5}, {0, 4, 4}, {9, 9}],
        do: new_case(op, [r(s, type, :finite)])
  end

  # svd_packed of finite values (distinct singular values, whose vectors are unique up to the
  # sign the canonical form fixes), tall, wide, square and batched, full and thin
  defp special(:svd_packed, type) do
    for s <- [{1, 1}, {3, 3}, {2, 5, 3}, {0, 4, 4}, {4, 9}],
        full <- [true, false],
        do: new_case(:svd_packed, [r(s, type, :finite)], full_matrices: full)
  end

  defp special(:triangular_solve, type) do
    for {a, b, left} <- [
          {{3, 3}, {3, 2}, true},
          {{2, 4, 4}, {2, 4}, true},
          {{2, 4, 4}, {2, 4, 3}, true},
          {{5, 5}, {2, 5}, false},
          {{2, 3, 3}, {2, 3}, false},
          {{3, 3}, {3, 0}, true}
        ],
        lower <- [true, false],
        transform <- [:none, :transpose] do
      rank = tuple_size(a)
      diagonal = Cascade.equal(Cascade.iota(a, axis: rank - 2), Cascade.iota(a, axis: rank - 1))
      matrix = Cascade.select(diagonal, 25, r(a, type, :finite))

      new_case(:triangular_solve, [matrix, r(b, type, :finite)],
        lower: lower,
        left_side: left,
        transform_a: transform
      )
    end
  end

  # rows kept, padded and cut, with and without Nx's cleanup
  defp special(op, type) when op in [:fft, :ifft] do
    domain = if type in @float_types, do: :finite, else: :small

    for {shape, opts} <- [
          {{8}, []},
          {{3, 7}, []},
          {{5}, [length: 8]},
          {{2, 17}, [length: 4, eps: 1.0e-6]},
          {{2, 0}, [length: 3]},
          {{1}, []}
        ],
        do: new_case(op, [r(shape, type, domain)], opts)
  end

  defp special(:dot, type) do
    domain = if type in @float_types, do: :finite, else: :small

    for(
      {a, b} <- [
        {{3, 7}, {7, 5}},
        {{7}, {7}},
        {{3, 7}, {7}},
        {{7}, {7, 5}},
        {{1, 17}, {17, 1}},
        {{0, 7}, {7, 3}},
        {{3, 0}, {0, 4}},
        {{2, 64}, {64, 3}},
        {{2, 65}, {65, 3}},
        {{2, 3, 8}, {8, 5}},
        {{}, {3, 7}}
      ],
      do: new_case(:dot, [r(a, type, domain), r(b, type, domain)])
    ) ++
      [new_case(:dot, [r({2, 7}, type, :any), r({7, 3}, type, :any)])] ++
      for {sa, ca, ba, sb, cb, bb} <- [
            {{2, 3, 5}, [2], [0], {2, 5, 4}, [1], [0]},
            {{4, 2, 3}, [2], [1], {2, 3, 7}, [1], [0]},
            {{3, 5, 13}, [1, 2], [], {5, 13, 2}, [0, 1], []},
            {{2, 9, 8}, [1, 2], [0], {2, 8, 9}, [2, 1], [0]},
            {{2, 1, 17}, [2], [0], {2, 17}, [1], [0]},
            {{0, 3, 4}, [2], [0], {0, 4, 2}, [1], [0]}
          ] do
        %{
          new_case(:dot, [r(sa, type, domain), ca, ba, r(sb, type, domain), cb, bb])
          | call: :dot6
        }
      end
  end

  defp special(:full, type) do
    values =
      if type in @float_types,
        do: [1.5, -0.0, :nan, :infinity, -3.0e38, 7],
        else: [7, 0, -1, 255, 1 <<< 40]

    for {v, s} <- Enum.zip(values, Stream.cycle([{}, {7}, {0}, {3, 17}, {2, 3, 5}])),
        do: new_case(:full, [v, s], type: type)
  end

  defp special(:iota, type) do
    for {s, axis} <- [
          {{}, nil},
          {{7}, nil},
          {{0}, nil},
          {{3, 17}, 1},
          {{3, 17}, nil},
          {{2, 3, 5}, 0},
          {{300}, nil}
        ],
        do: new_case(:iota, [s], [type: type] ++ opt(:axis, axis))
  end

  defp special(:eye, type) do
    for s <- [1, 7, {3, 5}, {5, 3}, {2, 3, 3}, {0, 0}, {2, 0, 4}],
        do: new_case(:eye, [s], type: type)
  end

  defp special(op, type) when op in [:random_uniform, :random_normal] do
    if type in @float_types do
      params =
        if op == :random_uniform,
          do: [min: -2.0, max: 3.0],
          else: [mean: 1.0, standard_deviation: 2.0]

      for {s, key, p} <- [
            {{}, 0, []},
            {{7}, 42, []},
            {{17}, 42, params},
            {{0}, 1, []},
            {{3, 5}, 0xFFFF_FFFF_FFFF_FFFF, params},
            {{2, 3, 5}, 123_456_789, []}
          ],
          do: new_case(op, [s], [key: key, type: type] ++ p)
    else
      []
    end
  end

  defp special(op, type) when op in [:softmax, :log_softmax] do
    for {s, axis} <- [
          {{7}, -1},
          {{3, 7}, 0},
          {{3, 7}, 1},
          {{2, 3, 5}, 1},
          {{0, 3}, 1},
          {{1}, 0},
          {{1, 17, 1}, 1}
        ],
        do: new_case(op, [r(s, type)], axis: axis)
  end

  defp special(op, type) when op in @composites_unary do
    opts =
      case op do
        :leaky_relu -> [[], [alpha: 0.25]]
        :elu -> [[], [alpha: 0.5]]
        :gelu -> [[], [approximate: :tanh]]
        _ -> [[]]
      end

    for {s, o} <- Enum.zip(@shapes, Stream.cycle(opts)), do: new_case(op, [r(s, type)], o)
  end

  defp special(op, type) when op in @composites_reduce do
    for c <- reductions(op, type, :any) do
      if op in [:variance, :standard_deviation] and Keyword.get(c.opts, :keep_axes),
        do: %{c | opts: c.opts ++ [ddof: 1]},
        else: c
    end
  end

  defp special(:layer_norm, type) do
    [
      new_case(:layer_norm, [r({3, 7}, type), r({7}, type), r({7}, type)]),
      new_case(:layer_norm, [r({2, 3, 5}, type), r({3, 5}, type), r({1, 5}, type)], axes: [1, 2]),
      new_case(:layer_norm, [r({17}, type), 2, 1], epsilon: 1.0e-3),
      new_case(:layer_norm, [r({0, 7}, type), r({7}, type), r({1}, type)])
    ]
  end

  defp special(:batch_norm, type) do
    for {s, axis, f} <- [{{2, 3, 5}, 1, 3}, {{4, 3}, 1, 3}, {{2, 5, 7}, 2, 7}, {{0, 3}, 1, 3}] do
      new_case(
        :batch_norm,
        [r(s, type), r({f}, type), r({f}, type), r({f}, type), r({f}, type, :positive)],
        axis: axis
      )
    end ++ [new_case(:batch_norm, [r({4, 3}, type), 1, 0, r({1}, type), 2])]
  end

  defp special(:recurrent, type) do
    for {steps, batch, hidden} <- [{3, 1, 5}, {2, 9, 7}, {0, 2, 3}],
        {cell, gates} <- [lstm: 4, gru: 3, tanh: 1],
        reverse <- [false, true] do
      w = gates * hidden

      new_case(
        :recurrent,
        [
          r({steps, batch, w}, type, :finite),
          r({w, hidden}, type, :unit),
          r({w}, type, :unit),
          r({batch, hidden}, type, :unit),
          r({batch, hidden}, type, :unit)
        ],
        cell: cell,
        reverse: reverse
      )
    end
  end

  defp special(:dense, type) do
    for {x, k, b} <- [
          {{3, 7}, {7, 5}, {5}},
          {{7}, {7, 2}, {2}},
          {{2, 3, 7}, {7, 4}, {}},
          {{0, 7}, {7, 3}, {3}}
        ] do
      new_case(:dense, [r(x, type, :finite), r(k, type, :finite), r(b, type)])
    end ++ [new_case(:dense, [r({17, 3}, type), r({3, 1}, type), 2])]
  end

  # the capability's type is the result's (`type:`); integer indices of that type, s64 for floats
  defp special(:one_hot, type) do
    indices = if type in @float_types, do: :s64, else: type

    for s <- [{}, {7}, {3, 4}, {0}, {17}] do
      new_case(:one_hot, [r(s, indices, :onehot)], depth: 5, type: type)
    end
  end

  defp special(op, type) when op in @losses do
    reductions = [:mean, :sum, :none]

    for {{s, logits}, k} <-
          Enum.with_index([
            {{3, 7}, false},
            {{7}, false},
            {{2, 3, 4}, true},
            {{3, 7}, true},
            {{0, 5}, false}
          ]) do
      opts =
        [reduction: Enum.at(reductions, rem(k, 3))] ++
          if(op == :mean_squared_error, do: [], else: [from_logits: logits])

      pred_domain = if logits or op == :mean_squared_error, do: :any, else: :unit
      new_case(op, [r(s, type, :unit), r(s, type, pred_domain)], opts)
    end
  end

  defp special(op, type) when op in @conv do
    for {x, k, opts} <- [
          {{1, 2, 7, 7}, {3, 2, 3, 3}, []},
          {{2, 2, 7, 5}, {4, 1, 3, 2}, [strides: [2, 1], padding: :same, feature_group_size: 2]},
          {{1, 3, 9, 9}, {2, 3, 2, 2}, [kernel_dilation: [2, 3], padding: [{1, 0}, {-1, 2}]]},
          {{1, 5, 5, 2}, {3, 3, 2, 3}, [layout: :nhwc, strides: [2, 2]]},
          {{0, 2, 4, 4}, {1, 2, 3, 3}, []}
        ] do
      xt = r(x, type, :finite)
      kt = r(k, type, :finite)

      case op do
        :conv2d ->
          new_case(op, [xt, kt], opts)

        :conv2d_grad_input ->
          g = Cascade.conv2d(xt, kt, opts)
          new_case(op, [r(g.shape, type, :finite), kt, x], opts)

        :conv2d_grad_kernel ->
          g = Cascade.conv2d(xt, kt, opts)
          new_case(op, [xt, r(g.shape, type, :finite), k], opts)
      end
    end
  end

  defp special(op, type) when op in @pool do
    for {x, w, opts} <- [
          {{1, 2, 7, 7}, 2, []},
          {{2, 1, 7, 5}, {3, 2}, [strides: [2, 1], padding: :same]},
          {{1, 3, 9, 9}, 3, [strides: [2, 2], padding: [{1, 0}, {2, 1}]]},
          {{1, 5, 5, 2}, {2, 3}, [layout: :nhwc]},
          {{0, 2, 4, 4}, 2, []}
        ] do
      xt = r(x, type, :small)

      case op do
        :max_pool2d ->
          new_case(op, [xt, w], opts)

        :avg_pool2d ->
          new_case(op, [xt, w], opts)

        :max_pool2d_grad ->
          g = Cascade.max_pool2d(xt, w, opts)
          new_case(op, [xt, r(g.shape, type, :finite), w], opts)

        :avg_pool2d_grad ->
          g = Cascade.avg_pool2d(xt, w, opts)
          new_case(op, [r(g.shape, type, :finite), x, w], opts)
      end
    end
  end

  defp opt(_name, nil), do: []
  defp opt(name, value), do: [{name, value}]

  ## Inputs: random values of a type, built on the cpu

  defp r(shape, type, domain \\ :any) do
    n = shape |> Tuple.to_list() |> Enum.product()

    if type in @float_types do
      bin = for _ <- 1..n//1, into: <<>>, do: f64_bits(float_value(domain))
      t = Cascade.from_binary(bin, :f64, shape)
      if type == :f64, do: t, else: Cascade.as_type(t, type)
    else
      bin = for _ <- 1..n//1, into: <<>>, do: Type.encode_one(int_value(type, domain), type)
      Cascade.from_binary(bin, type, shape)
    end
  end

  defp indices(shape, bound) do
    n = shape |> Tuple.to_list() |> Enum.product()
    bin = for _ <- 1..n//1, into: <<>>, do: <<:rand.uniform(bound) - 1::signed-native-64>>
    Cascade.from_binary(bin, :s64, shape)
  end

  # indices of shape n + {length(axes)}, each within its axis
  defp gather_indices(s, n, axes) do
    count = n |> Tuple.to_list() |> Enum.product()

    bin =
      for _ <- 1..count//1,
          a <- axes,
          into: <<>>,
          do: <<:rand.uniform(elem(s, a)) - 1::signed-native-64>>

    Cascade.from_binary(bin, :s64, Tuple.append(n, length(axes)))
  end

  @specials [0.0, :neg_zero, :infinity, :neg_infinity, :nan]
  @wide [
    0.5,
    1.5,
    2.5,
    -0.5,
    -1.7,
    255.5,
    256.0,
    300.0,
    -300.0,
    65504.0,
    65520.0,
    70000.0,
    2_147_483_647.0,
    3.0e9,
    -3.0e9,
    1.0e19,
    -1.0e19,
    3.0e38,
    1.0e-8,
    6.0e-8,
    1.0e300
  ]

  defp float_value(:any) do
    case :rand.uniform(100) do
      n when n <= 6 -> Enum.random(@specials)
      n when n <= 10 -> (:rand.uniform() - 0.5) * 2.0e6
      _ -> (:rand.uniform() - 0.5) * 20
    end
  end

  defp float_value(:finite), do: (:rand.uniform() - 0.5) * 20
  defp float_value(:positive), do: 0.1 + :rand.uniform() * 5
  defp float_value(:unit), do: :rand.uniform()
  defp float_value(:low), do: -:rand.uniform() * 4
  defp float_value(:high), do: :rand.uniform() * 4
  defp float_value(:onehot), do: (:rand.uniform(8) - 2) * 1.0

  defp float_value(:small) do
    case :rand.uniform(20) do
      1 -> :nan
      2 -> :neg_zero
      _ -> (:rand.uniform(7) - 4) * 1.0
    end
  end

  defp float_value(:wide) do
    case :rand.uniform(10) do
      n when n <= 2 -> Enum.random(@specials)
      n when n <= 7 -> Enum.random(@wide) * Enum.random([1, -1])
      _ -> (:rand.uniform() - 0.5) * 600
    end
  end

  defp f64_bits(:nan), do: <<0x7FF8_0000_0000_0000::unsigned-native-64>>
  defp f64_bits(:infinity), do: <<0x7FF0_0000_0000_0000::unsigned-native-64>>
  defp f64_bits(:neg_infinity), do: <<0xFFF0_0000_0000_0000::unsigned-native-64>>
  defp f64_bits(:neg_zero), do: <<0x8000_0000_0000_0000::unsigned-native-64>>
  defp f64_bits(x), do: <<x::float-native-64>>

  defp int_value(type, domain) when domain in [:any, :wide] do
    {lo, hi} = range(type)

    cond do
      type != :u8 and :rand.uniform(10) == 1 -> Enum.random([lo, hi, 0, max(lo, -1), lo + 1])
      type in [:u8, :s8] -> :rand.uniform(256) - 1 + lo
      lo == 0 -> :rand.uniform(2001) - 1
      true -> :rand.uniform(2001) - 1001
    end
  end

  defp int_value(type, domain) when type in [:u16, :u32, :u64] and domain != :pred,
    do: int_value(:u8, domain)

  defp int_value(:u8, :pred), do: Enum.random([0, 0, 1, 1, 2, 255])
  defp int_value(_type, :pred), do: Enum.random([0, 1])
  defp int_value(:u8, :small), do: :rand.uniform(4) - 1
  defp int_value(_type, :small), do: :rand.uniform(7) - 4
  defp int_value(_type, :exponent), do: :rand.uniform(6) - 1
  defp int_value(:u8, :finite), do: :rand.uniform(16) - 1
  defp int_value(_type, :finite), do: :rand.uniform(21) - 11
  defp int_value(_type, :positive), do: :rand.uniform(5)
  defp int_value(_type, :unit), do: :rand.uniform(2) - 1
  defp int_value(:u8, :low), do: :rand.uniform(3) - 1
  defp int_value(_type, :low), do: -:rand.uniform(4)
  defp int_value(_type, :high), do: :rand.uniform(4) + 2
  defp int_value(:u8, :onehot), do: :rand.uniform(7) - 1
  defp int_value(_type, :onehot), do: :rand.uniform(8) - 2

  defp range(type) do
    {kind, bits} = Cascade.Type.to_tuple(type)
    if kind == :u, do: {0, (1 <<< bits) - 1}, else: {-(1 <<< (bits - 1)), (1 <<< (bits - 1)) - 1}
  end
end
