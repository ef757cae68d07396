# Property tests: every primitive of the op table, on random shapes and values, against the
# plain-Elixir f64 reference in test/support/reference.ex.
#
# Each case builds its inputs already rounded to their type, runs the op, computes the same op
# in f64 (exactly for integers) on the same inputs in the op's compute type, rounds that once to
# the output type and compares within the tolerance stated below for the op's class and the
# output type. The generators are hand-written and seeded per test, so every run sees the same
# cases; a failing case prints its inputs (type, shape, values) and options.

defmodule Cascade.PropertyTest.ElementwiseTest do
  use Cascade.PropertyCase
  import Bitwise

  @exact_unary [:negate, :abs, :sign, :floor, :ceil, :round]
  @arith_unary [:sqrt, :reciprocal]
  @transcendental_unary [:exp, :expm1, :log, :log1p, :rsqrt, :sin, :cos, :tanh, :sigmoid, :erf]
  # within 1 ulp of the f64 result rounded once (f16/bf16: twice, through f32), the arith class:
  # the cpu computes them in f64; blas too for sinh, cosh, asinh and acosh, and the others with
  # SLEEF's f32 functions (simd_kernels.c; at most 1 ulp from the correctly rounded result)
  @more_math [:erfc, :erf_inv, :tan, :asin, :acos, :atan, :sinh, :cosh, :asinh, :acosh, :atanh] ++
               [:cbrt]

  # The values each unary op is tested on: its valid domain, with magnitudes that keep f16
  # results away from the overflow threshold.
  defp unary_gen(op, type) do
    case op do
      op when op in [:negate, :abs, :sign, :floor, :ceil, :round] ->
        fn -> special_or(0.05, &mixed/0) end

      op when op in [:log, :sqrt, :rsqrt] ->
        if type == :f16,
          do: fn -> log_uniform(1.0e-7, 6.0e4) end,
          else: fn -> log_uniform(1.0e-30, 1.0e30) end

      :reciprocal ->
        fn -> random_sign() * log_uniform(1.0e-3, 1.0e3) end

      :log1p ->
        fn ->
          if chance(0.3),
            do: random_sign() * log_uniform(1.0e-6, 1.0e-2),
            else: float_between(-0.9, 10.0)
        end

      :expm1 ->
        fn ->
          if chance(0.3),
            do: random_sign() * log_uniform(1.0e-6, 1.0e-2),
            else: float_between(-5.0, 5.0)
        end

      :exp ->
        if type == :f16,
          do: fn -> float_between(-10.0, 10.0) end,
          else: fn -> float_between(-20.0, 20.0) end

      op when op in [:sin, :cos] ->
        fn -> float_between(-10.0, 10.0) end

      op when op in [:tanh, :sigmoid, :erf] ->
        fn -> float_between(-8.0, 8.0) end

      op when op in [:asin, :acos, :atanh, :erf_inv] ->
        fn ->
          if chance(0.2),
            do: random_sign() * (1 - log_uniform(1.0e-7, 1.0e-2)),
            else: float_between(-1.0, 1.0)
        end

      :erfc ->
        fn -> float_between(-3.0, 9.0) end

      :tan ->
        fn -> float_between(-1.5, 1.5) end

      op when op in [:sinh, :cosh] ->
        fn -> float_between(-10.0, 10.0) end

      :acosh ->
        fn -> 1 + log_uniform(1.0e-6, 1.0e4) end

      op when op in [:atan, :asinh, :cbrt] ->
        &mixed/0
    end
  end

  defp unary_class(op) do
    cond do
      op in @exact_unary -> :exact
      op in @arith_unary -> :arith
      op in @transcendental_unary -> {:transcendental, op}
      op in @more_math -> :arith
    end
  end

  property @exact_unary ++ @arith_unary ++ @transcendental_unary ++ @more_math,
           "unary ops on f32/f16/bf16 match f64" do
    for op <- @exact_unary ++ @arith_unary ++ @transcendental_unary ++ @more_math,
        type <- floats(),
        _ <- 1..40 do
      x = gen_tensor(type, shape_or_large(), unary_gen(op, type))
      expected = R.unary(op, ref(x))

      check!(
        "Cascade.#{op}/1",
        [tensor: x],
        fn -> apply(Cascade, op, [tensor!(x)]) end,
        expected,
        type,
        tol(unary_class(op), type)
      )
    end
  end

  property [:negate, :abs, :sign, :floor, :ceil, :round],
           "unary ops on integers are exact and wrap" do
    for op <- [:negate, :abs, :sign, :floor, :ceil, :round], type <- ints(), _ <- 1..30 do
      x = gen_tensor(type, shape())

      check!(
        "Cascade.#{op}/1",
        [tensor: x],
        fn -> apply(Cascade, op, [tensor!(x)]) end,
        R.unary(op, ref(x)),
        type,
        :exact
      )
    end
  end

  property @transcendental_unary ++ @arith_unary ++ @more_math,
           "float unary ops on integers compute in f32" do
    for op <- @transcendental_unary ++ @arith_unary ++ @more_math,
        type <- [:u8, :s32, :s8, :u16],
        _ <- 1..8 do
      gen =
        case op do
          op when op in [:log, :sqrt, :rsqrt, :reciprocal] ->
            fn -> int_between(1, 200) end

          op when op in [:log1p, :acosh] ->
            fn -> int_between(0, 200) end

          op when op in [:exp, :expm1] ->
            fn -> int_between(0, 20) end

          op when op in [:asin, :acos, :atanh, :erf_inv] and type in [:u8, :u16] ->
            fn -> int_between(0, 2) end

          op when op in [:asin, :acos, :atanh, :erf_inv] ->
            fn -> int_between(-2, 2) end

          _ ->
            fn -> if R.unsigned?(type), do: int_between(0, 30), else: int_between(-30, 30) end
        end

      x = gen_tensor(type, shape(), gen)
      expected = R.unary(op, ref(x, :f32))

      check!(
        "Cascade.#{op}/1",
        [tensor: x],
        fn -> apply(Cascade, op, [tensor!(x)]) end,
        expected,
        :f32,
        tol(unary_class(op), :f32)
      )
    end
  end

  # NaN, infinities, zeros, overflow and values outside a function's domain, for every float
  # op: the reference spells out IEEE 754 / C99 Annex F results.
  @special_unary @exact_unary ++ @arith_unary ++ @transcendental_unary ++ @more_math
  @special_binary [:add, :subtract, :multiply, :divide, :pow, :max, :min, :remainder, :atan2]

  defp negative_zero do
    <<z::float-64>> = <<1::1, 0::63>>
    z
  end

  defp special_value do
    if chance(0.6),
      do:
        pick([
          :nan,
          :infinity,
          :neg_infinity,
          0.0,
          negative_zero(),
          1.0,
          -1.0,
          0.5,
          -2.0,
          3.0,
          100.0,
          -100.0,
          1.0e30,
          -1.0e30,
          1.0e-30
        ]),
      else: mixed()
  end

  property @special_unary ++ @special_binary,
           "float ops give IEEE results on NaN, infinities, zeros, overflow" do
    for op <- @special_unary, type <- floats(), _ <- 1..20 do
      x = gen_tensor(type, shape(max_rank: 2), &special_value/0)

      check!(
        "Cascade.#{op}/1",
        [tensor: x],
        fn -> apply(Cascade, op, [tensor!(x)]) end,
        R.unary(op, ref(x)),
        type,
        tol(unary_class(op), type)
      )
    end

    for op <- @special_binary, type <- floats(), _ <- 1..20 do
      {sa, sb} = broadcast_pair()
      left = gen_tensor(type, sa, &special_value/0)
      right = gen_tensor(type, sb, &special_value/0)
      run_binary(op, left, right, type)
    end
  end

  property [:logical_not], "logical_not gives u8 truth" do
    for type <- all_types(), _ <- 1..30 do
      gen =
        if R.float?(type),
          do: fn -> pick([0.0, 0.0, 1.0, -2.5, :nan, :infinity]) end,
          else: fn -> pick([0, 0, 1, 7]) end

      x = gen_tensor(type, shape(), gen)

      check!(
        "Cascade.logical_not/1",
        [tensor: x],
        fn -> Cascade.logical_not(tensor!(x)) end,
        R.unary(:logical_not, ref(x)),
        :u8,
        :exact
      )
    end
  end

  property [:is_nan, :is_infinity], "is_nan and is_infinity give u8 truth; integers never" do
    for op <- [:is_nan, :is_infinity], type <- all_types(), _ <- 1..20 do
      gen =
        if R.float?(type),
          do: fn -> special_or(0.4, &mixed/0) end,
          else: fn -> int_value(type) end

      x = gen_tensor(type, shape_or_large(), gen)

      check!(
        "Cascade.#{op}/1",
        [tensor: x],
        fn -> apply(Cascade, op, [tensor!(x)]) end,
        R.unary(op, ref(x)),
        :u8,
        :exact
      )
    end
  end

  ## Integer bits

  property [:bitwise_not, :population_count, :count_leading_zeros],
           "unary bit ops on integers, in the type's width" do
    for op <- [:bitwise_not, :population_count, :count_leading_zeros],
        type <- ints(),
        _ <- 1..30 do
      x = gen_tensor(type, shape_or_large(), fn -> int_value(type) end)

      expected =
        if op == :bitwise_not, do: R.unary(op, ref(x)), else: R.unary_bits(op, type, ref(x))

      check!(
        "Cascade.#{op}/1",
        [tensor: x],
        fn -> apply(Cascade, op, [tensor!(x)]) end,
        expected,
        type,
        :exact
      )
    end
  end

  @bit_binary [:bitwise_and, :bitwise_or, :bitwise_xor, :left_shift, :right_shift, :quotient]

  property @bit_binary, "binary bit ops, shifts as Elixir's bsl/bsr, quotient truncates" do
    for op <- @bit_binary, type <- ints(), _ <- 1..30 do
      {sa, sb} = broadcast_pair()
      {lo, _hi} = R.int_range(type)

      right_gen =
        case op do
          op when op in [:left_shift, :right_shift] ->
            fn -> if R.unsigned?(type), do: int_between(0, 70), else: int_between(-70, 70) end

          :quotient ->
            fn -> if chance(0.2), do: pick([0, 1, max(lo, -1)]), else: int_value(type) end

          _ ->
            fn -> int_value(type) end
        end

      left = gen_tensor(type, sa, fn -> if chance(0.1), do: lo, else: int_value(type) end)
      right = gen_tensor(type, sb, right_gen)
      run_binary(op, left, right, type)
    end

    # mixed integer types compute in the merged type; floats are refused
    for {ta, tb} <- [u8: :s32, s32: :s64, u8: :s64, u32: :s8, u16: :u64],
        op <- @bit_binary,
        _ <- 1..4 do
      {sa, sb} = broadcast_pair()
      left = gen_tensor(ta, sa, fn -> int_value(ta) end)
      right = gen_tensor(tb, sb, fn -> int_between(1, 7) end)
      run_binary(op, left, right, R.merge(ta, tb))
    end

    for op <- @bit_binary, type <- floats() do
      assert_raise ArgumentError, ~r/#{op}: expected integer tensors, got type #{type}/, fn ->
        apply(Cascade, op, [Cascade.tensor([1.0], type: type), Cascade.tensor([1])])
      end
    end
  end

  ## Binary

  # Two shapes that broadcast: each operand is a suffix of the output shape with some axes 1.
  defp broadcast_pair do
    out = shape_or_large()
    {operand(out), operand(out)}
  end

  defp operand(out) do
    dims = Tuple.to_list(out)
    dims = Enum.drop(dims, int_between(0, length(dims)))
    dims |> Enum.map(fn d -> if chance(0.25), do: 1, else: d end) |> List.to_tuple()
  end

  @binary_float [:add, :subtract, :multiply, :divide, :pow, :max, :min, :remainder, :atan2]
  @binary_int [:add, :subtract, :multiply, :pow, :max, :min, :remainder]

  defp binary_class(op) when op in [:add, :subtract, :multiply, :divide], do: :arith
  defp binary_class(op) when op in [:pow, :atan2], do: {:transcendental, op}
  defp binary_class(_op), do: :exact

  # {left generator, right generator} in each op's domain
  defp binary_gens(op, type) do
    float? = R.float?(type)

    case op do
      :divide when float? ->
        {&mixed/0, fn -> random_sign() * log_uniform(1.0e-2, 1.0e2) end}

      :remainder when float? ->
        {&mixed/0, fn -> random_sign() * log_uniform(1.0e-1, 1.0e1) end}

      # x rem 0 is 0; MIN rem -1 (which traps in C) is 0
      :remainder ->
        {fn -> if chance(0.1), do: elem(R.int_range(type), 0), else: int_value(type) end,
         fn -> if chance(0.2), do: pick([0, -1]), else: int_value(type) end}

      :pow when float? ->
        pow_gens()

      :pow ->
        {fn -> if R.unsigned?(type), do: int_between(0, 12), else: int_between(-12, 12) end,
         fn -> int_between(0, 6) end}

      :divide ->
        {fn -> int_value(type) end, fn -> random_sign() * int_between(1, 50) end}

      _ ->
        {fn -> value(type) end, fn -> value(type) end}
    end
  end

  defp pow_gens do
    if chance(0.2),
      do: {fn -> float_between(-4.0, 4.0) end, fn -> int_between(-3, 3) * 1.0 end},
      else: {fn -> log_uniform(0.1, 4.0) end, fn -> float_between(-3.0, 3.0) end}
  end

  defp binary_out(op, ta, tb) do
    t = R.merge(ta, tb)
    if op in [:divide, :atan2], do: R.to_float(t), else: t
  end

  defp run_binary(op, left, right, out_type) do
    base = base_type([left, right])
    ct = R.merge(arg_type(left, base), arg_type(right, base))
    ct = if op in [:divide, :atan2], do: R.to_float(ct), else: ct
    expected = R.binary(op, ref(left, ct), ref(right, ct))
    class = if R.float?(out_type), do: binary_class(op), else: :exact

    check!(
      "Cascade.#{op}/2",
      [left: left, right: right],
      fn -> apply(Cascade, op, [tensor!(left), tensor!(right)]) end,
      expected,
      out_type,
      tol(class, out_type)
    )
  end

  property @binary_float, "binary ops broadcast and match f64" do
    for op <- @binary_float,
        type <- floats() ++ ints(),
        op in @binary_int or R.float?(type) or op in [:divide, :atan2],
        _ <- 1..40 do
      {sa, sb} = broadcast_pair()
      {ga, gb} = binary_gens(op, type)
      left = gen_tensor(type, sa, ga)

      # now and then a plain number on the right, typed as Nx types it
      right =
        if chance(0.1) and op not in [:pow],
          do: {:number, R.round_to(gb.(), type)},
          else: gen_tensor(type, sb, gb)

      base = base_type([left, right])
      out = binary_out(op, type, arg_type(right, base))
      run_binary(op, left, right, out)
    end
  end

  @mixed_pairs [
    f16: :bf16,
    f16: :f32,
    bf16: :f32,
    s32: :f32,
    u8: :f16,
    s64: :bf16,
    u8: :s32,
    s32: :s64,
    u8: :s64,
    f32: :f64,
    u8: :s8,
    u16: :s16,
    u32: :s32,
    u64: :s8,
    u8: :u32,
    s8: :s16,
    u16: :f16
  ]

  property [:add, :subtract, :multiply, :divide, :max, :min],
           "binary ops promote mixed types like Nx" do
    for {ta, tb} <- @mixed_pairs,
        op <- [:add, :subtract, :multiply, :divide, :max, :min],
        _ <- 1..8 do
      {sa, sb} = broadcast_pair()

      {left, right} =
        if chance(0.5),
          do: {gen_tensor(ta, sa), gen_tensor(tb, sb)},
          else: {gen_tensor(tb, sa), gen_tensor(ta, sb)}

      right =
        if op == :divide,
          do:
            gen_tensor(elem(right, 0), elem(right, 1), fn ->
              random_sign() * int_between(1, 50)
            end),
          else: right

      out = binary_out(op, elem(left, 0), elem(right, 0))
      # a wider float output holds the exact result of +, -, * less often: keep the arith class
      run_binary(op, left, right, out)
    end

    # numbers beside tensors: an integer keeps the tensor's type, a float makes integers f32
    for type <- floats() ++ ints(), n <- [3, -2, 2.5, 0.1], op <- [:add, :multiply, :subtract] do
      x = gen_tensor(type, shape())
      out = R.merge_number(type, n)
      run_binary(op, x, {:number, n}, out)
      run_binary(op, {:number, n}, x, out)
    end
  end

  @compare [:equal, :not_equal, :less, :less_equal, :greater, :greater_equal]

  property @compare, "comparisons give exact u8 truth, NaN compares false (not_equal true)" do
    for op <- @compare, type <- all_types(), _ <- 1..30 do
      {sa, sb} = broadcast_pair()
      # few distinct values, so that equal pairs are common
      gen =
        if R.float?(type),
          do: fn -> special_or(0.1, fn -> pick([-1.5, 0.0, 1.0, 2.0, 1.0e4]) end) end,
          else: fn -> pick([0, 1, 2, 100, elem(R.int_range(type), 1)]) end

      left = gen_tensor(type, sa, gen)
      right = gen_tensor(type, sb, gen)
      expected = R.binary(op, ref(left), ref(right))

      check!(
        "Cascade.#{op}/2",
        [left: left, right: right],
        fn -> apply(Cascade, op, [tensor!(left), tensor!(right)]) end,
        expected,
        :u8,
        :exact
      )
    end

    # mixed types compare in the merged type
    for {ta, tb} <- @mixed_pairs, op <- @compare, _ <- 1..4 do
      {sa, sb} = broadcast_pair()
      left = gen_tensor(ta, sa, fn -> pick([0, 1, 3, 300]) end)
      right = gen_tensor(tb, sb, fn -> pick([0, 1, 3, 300]) end)
      ct = R.merge(ta, tb)
      expected = R.binary(op, ref(left, ct), ref(right, ct))

      check!(
        "Cascade.#{op}/2",
        [left: left, right: right],
        fn -> apply(Cascade, op, [tensor!(left), tensor!(right)]) end,
        expected,
        :u8,
        :exact
      )
    end
  end

  property [:logical_and, :logical_or, :logical_xor], "logical ops give u8 truth of non-zero" do
    for op <- [:logical_and, :logical_or, :logical_xor], type <- all_types(), _ <- 1..30 do
      {sa, sb} = broadcast_pair()

      gen =
        if R.float?(type),
          do: fn -> pick([0.0, 0.0, 1.0, -0.5, :nan]) end,
          else: fn -> pick([0, 0, 1, 5]) end

      other = if chance(0.3), do: pick(all_types()), else: type
      ogen = if R.float?(other), do: fn -> pick([0.0, 1.0, 3.5]) end, else: fn -> pick([0, 2]) end
      left = gen_tensor(type, sa, gen)
      right = gen_tensor(other, sb, ogen)
      ct = R.merge(type, other)
      expected = R.binary(op, ref(left, ct), ref(right, ct))

      check!(
        "Cascade.#{op}/2",
        [left: left, right: right],
        fn -> apply(Cascade, op, [tensor!(left), tensor!(right)]) end,
        expected,
        :u8,
        :exact
      )
    end
  end

  property [:select], "select picks by non-zero predicate, three-way broadcast" do
    for type <- all_types(), _ <- 1..30 do
      out = shape()
      ptype = pick([:u8, :s32, :f32, :f16])

      pgen =
        if R.float?(ptype),
          do: fn -> pick([0.0, 1.0, -2.0, :nan]) end,
          else: fn -> pick([0, 1, 2]) end

      pred = gen_tensor(ptype, operand(out), pgen)
      ftype = if chance(0.2), do: pick(all_types()), else: type
      on_true = gen_tensor(type, operand(out))

      on_false =
        if chance(0.1),
          do: {:number, R.round_to(value(type), type)},
          else: gen_tensor(ftype, operand(out))

      base = base_type([on_true, on_false])
      ct = R.merge(arg_type(on_true, base), arg_type(on_false, base))
      expected = R.select(ref(pred), ref(on_true, ct), ref(on_false, ct))

      check!(
        "Cascade.select/3",
        [pred: pred, on_true: on_true, on_false: on_false],
        fn -> Cascade.select(tensor!(pred), tensor!(on_true), tensor!(on_false)) end,
        expected,
        ct,
        :exact
      )
    end
  end

  property [:clip], "clip limits to [min, max] broadcast to the tensor's shape" do
    for type <- floats() ++ ints(), _ <- 1..40 do
      s = shape()
      x = gen_tensor(type, s)
      # now and then bounds of another type: all three compute in the merged type
      btype = if chance(0.2), do: pick(floats() ++ ints()), else: type
      ct = R.merge(type, btype)
      lo_v = R.round_to(value(btype), btype)
      hi_v = R.round_to(value(btype), btype)
      {lo_v, hi_v} = if lo_v <= hi_v, do: {lo_v, hi_v}, else: {hi_v, lo_v}

      {lo, hi} =
        if chance(0.3),
          do: {{:number, lo_v}, {:number, hi_v}},
          else:
            {gen_tensor(btype, operand(s), fn -> lo_v end),
             gen_tensor(btype, operand(s), fn -> hi_v end)}

      ct =
        if match?({:number, _}, lo),
          do: R.merge_number(type, lo_v) |> R.merge(R.merge_number(type, hi_v)),
          else: ct

      expected = R.clip(ref(x, ct), ref(lo, ct), ref(hi, ct))

      check!(
        "Cascade.clip/3",
        [tensor: x, min: lo, max: hi],
        fn -> Cascade.clip(tensor!(x), tensor!(lo), tensor!(hi)) end,
        expected,
        ct,
        :exact
      )
    end
  end

  property [:as_type],
           "as_type rounds once to nearest even, truncates and saturates into integers" do
    for from <- all_types(), to <- all_types(), _ <- 1..20 do
      gen =
        cond do
          chance(0.3) and near_ties?(from, to) ->
            fn -> near_tie(from, to) end

          R.float?(from) ->
            fn ->
              special_or(0.05, fn ->
                case :rand.uniform(4) do
                  1 -> mixed()
                  2 -> random_sign() * log_uniform(1.0e-8, 1.0e-3)
                  3 -> random_sign() * log_uniform(100.0, 1.0e20)
                  4 -> random_sign() * (int_between(0, 600) + 0.5)
                end
              end)
            end

          true ->
            fn -> int_value(from) end
        end

      x = gen_tensor(from, shape_or_large(), gen)
      expected = R.as_type(ref(x), to)

      check!(
        "Cascade.as_type/2",
        [tensor: x, type: to],
        fn -> Cascade.as_type(tensor!(x), to) end,
        expected,
        to,
        :exact
      )
    end
  end

  # Values of `from` at, just below and just above the midpoint of two neighbours of `to`:
  # where rounding twice (through f32 or f64) differs from rounding once.
  @precision %{
    f16: 11,
    bf16: 8,
    f32: 24,
    f64: 53,
    s8: 7,
    s16: 15,
    s32: 31,
    s64: 63,
    u8: 8,
    u16: 16,
    u32: 32,
    u64: 64
  }

  defp near_ties?(from, to),
    do: R.float?(to) and from != :u8 and @precision[from] > @precision[to] + 2

  defp near_tie(from, to) do
    p = @precision[to]
    mid = 2 * int_between(1 <<< (p - 1), (1 <<< p) - 1) + 1
    k = int_between(1, @precision[from] - p - 2)
    val = (mid <<< k) + pick([-1, 0, 0, 1])
    bits = p + 1 + k

    if R.float?(from) do
      # a normal exponent of `to`, or now and then its subnormal range
      top =
        case to do
          _ when from == :f16 -> int_between(-13, 15)
          :f16 -> if chance(0.2), do: -14 - int_between(1, 9), else: int_between(-13, 15)
          :bf16 -> if chance(0.1), do: -126 - int_between(1, 6), else: int_between(-60, 60)
          _ -> int_between(-60, 60)
        end

      val =
        if top < -14 and to == :f16, do: val >>> (p - (top + 24)) <<< (p - (top + 24)), else: val

      random_sign() * val * :math.pow(2, top - bits)
    else
      # an integer of `from`: shift the pattern up as far as the type allows
      shift = int_between(0, @precision[from] - bits)
      random_sign() * (val <<< shift)
    end
  end
end

defmodule Cascade.PropertyTest.ReduceTest do
  use Cascade.PropertyCase

  defp axes_for(shape) do
    rank = tuple_size(shape)

    if chance(0.25) do
      nil
    else
      0..(rank - 1)//1
      |> Enum.filter(fn _ -> chance(0.5) end)
      |> Enum.shuffle()
      |> Enum.map(fn a -> if chance(0.3), do: a - rank, else: a end)
    end
  end

  defp reduce_opts(axes, keep) do
    opts = if axes, do: [axes: axes], else: []
    if keep, do: opts ++ [keep_axes: true], else: opts
  end

  defp terms(shape, out_shape) do
    out = R.size(out_shape)
    if out == 0, do: 0, else: div(R.size(shape), out)
  end

  property [:sum], "sum over axes within n * 2^-24 * sum |x|; integers in s64, exact" do
    for type <- floats() ++ ints(), _ <- 1..60 do
      s = shape_or_large()

      # now and then NaN and infinities, which sum as IEEE says
      specials = if chance(0.1), do: 0.05, else: 0.0

      gen =
        if R.float?(type),
          do: fn -> special_or(specials, fn -> float_between(-10.0, 10.0) end) end,
          else: fn -> int_value(type) end

      x = gen_tensor(type, s, gen)
      axes = axes_for(s)
      keep = chance(0.3)
      {out_shape, _} = expected = R.reduce(:sum, ref(x), type, axes, keep)
      out = R.to_aggregate(type)
      {_, mags} = R.reduce(:sum, R.unary(:abs, ref(x)), type, axes, keep)
      tol = if R.float?(type), do: tol(:sum, type, {terms(s, out_shape), mags}), else: :exact

      check!(
        "Cascade.sum/2",
        [tensor: x, options: reduce_opts(axes, keep)],
        fn -> Cascade.sum(tensor!(x), reduce_opts(axes, keep)) end,
        expected,
        out,
        tol
      )
    end
  end

  property [:cumulative_sum, :cumulative_product, :cumulative_max, :cumulative_min],
           "cumulative ops along an axis, forwards and reversed; integers wrap in their type" do
    for op <- [:cumulative_sum, :cumulative_product, :cumulative_max, :cumulative_min],
        type <- floats() ++ ints() ++ [:f64],
        _ <- 1..12 do
      s = if chance(0.1), do: shape_or_large(), else: shape()
      rank = tuple_size(s)
      specials = if chance(0.2), do: 0.05, else: 0.0

      gen =
        cond do
          not R.float?(type) ->
            fn -> int_value(type) end

          # products near 1 stay finite over a line
          op == :cumulative_product ->
            fn -> special_or(specials, fn -> float_between(0.5, 1.5) end) end

          # few distinct values for max and min: ties of -0.0 and 0.0
          op in [:cumulative_max, :cumulative_min] ->
            fn -> special_or(specials, fn -> pick([-1.0, -0.0, 0.0, 2.5, 3.0]) end) end

          true ->
            fn -> special_or(specials, fn -> float_between(-4.0, 4.0) end) end
        end

      x = gen_tensor(type, s, gen)
      axis = if rank > 0, do: int_between(-rank, rank - 1), else: 0
      reverse = chance(0.5)
      opts = [axis: axis, reverse: reverse]
      expected = R.scan(op, ref(x), axis, reverse)
      n = if rank > 0, do: elem(s, if(axis < 0, do: axis + rank, else: axis)), else: 1

      tol =
        cond do
          not R.float?(type) or op in [:cumulative_max, :cumulative_min] -> :exact
          op == :cumulative_product -> tol(:product, type, n)
          true -> tol(:sum, type, {n, elem(R.scan(op, R.unary(:abs, ref(x)), axis, reverse), 1)})
        end

      check!(
        "Cascade.#{op}/2",
        [tensor: x, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), opts]) end,
        expected,
        type,
        tol
      )
    end
  end

  property [:product], "product over axes; integers in s64, wrapping" do
    for type <- floats() ++ ints(), _ <- 1..50 do
      s = shape(max_dim: 4, max_rank: 3)

      gen =
        if R.float?(type),
          do: fn -> special_or(0.02, fn -> random_sign() * float_between(0.7, 1.4) end) end,
          else: fn ->
            if chance(0.1),
              do: int_value(type),
              else: int_between(-3, 3) |> max(elem(R.int_range(type), 0))
          end

      x = gen_tensor(type, s, gen)
      axes = axes_for(s)
      keep = chance(0.3)
      {out_shape, _} = expected = R.reduce(:product, ref(x), type, axes, keep)
      out = R.to_aggregate(type)
      tol = if R.float?(type), do: tol(:product, type, terms(s, out_shape)), else: :exact

      check!(
        "Cascade.product/2",
        [tensor: x, options: reduce_opts(axes, keep)],
        fn -> Cascade.product(tensor!(x), reduce_opts(axes, keep)) end,
        expected,
        out,
        tol
      )
    end
  end

  property [:reduce_max, :reduce_min, :all, :any],
           "max/min/all/any over axes are exact, NaN wins" do
    for op <- [:reduce_max, :reduce_min, :all, :any], type <- all_types(), _ <- 1..30 do
      s = shape_or_large()

      gen =
        cond do
          op in [:all, :any] and R.float?(type) ->
            fn -> if chance(0.7), do: 1.5, else: pick([0.0, :nan]) end

          op in [:all, :any] ->
            fn -> if chance(0.7), do: 3, else: 0 end

          R.float?(type) ->
            fn -> special_or(0.02, &mixed/0) end

          true ->
            fn -> int_value(type) end
        end

      x = gen_tensor(type, s, gen)
      axes = axes_for(s)
      keep = chance(0.3)
      expected = R.reduce(op, ref(x), type, axes, keep)
      out = if op in [:all, :any], do: :u8, else: type

      check!(
        "Cascade.#{op}/2",
        [tensor: x, options: reduce_opts(axes, keep)],
        fn -> apply(Cascade, op, [tensor!(x), reduce_opts(axes, keep)]) end,
        expected,
        out,
        :exact
      )
    end
  end

  property [:sort, :argsort],
           "sort/argsort along an axis, stable, NaN last (asc) or first; argsort's first k" do
    for op <- [:sort, :argsort], type <- all_types(), _ <- 1..25 do
      s = if chance(0.1), do: shape_or_large(), else: shape()
      rank = tuple_size(s)
      # few distinct values: many ties, and -0.0 beside 0.0
      gen =
        if R.float?(type),
          do: fn -> special_or(0.05, fn -> pick([-1.0, -0.0, 0.0, 2.5, 3.0]) end) end,
          else: fn -> pick([0, 1, 7, elem(R.int_range(type), 0), elem(R.int_range(type), 1)]) end

      x = gen_tensor(type, s, gen)
      axis = if rank > 0, do: int_between(-rank, rank - 1), else: 0
      direction = pick([:asc, :desc])
      itype = pick([:s64, :s32, :u16])
      opts = [axis: axis, direction: direction] ++ if(op == :argsort, do: [type: itype], else: [])
      expected = R.sort(ref(x), axis, direction, if(op == :sort, do: :values, else: :positions))

      # argsort's first k positions (Nx.top_k's): the full argsort's, sliced
      n = if rank > 0, do: elem(s, rem(axis + rank, rank)), else: 1

      {opts, expected} =
        if op == :argsort and n > 0 and chance(0.5) do
          k = pick([1, min(2, n), min(3, n), n, int_between(1, n)])
          a = rem(axis + rank, max(rank, 1))

          lengths =
            for {d, i} <- Enum.with_index(Tuple.to_list(s)), do: if(i == a, do: k, else: d)

          start = List.duplicate(0, rank)
          {opts ++ [k: k], if(rank > 0, do: R.slice(expected, start, lengths), else: expected)}
        else
          {opts, expected}
        end

      check!(
        "Cascade.#{op}/2",
        [tensor: x, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), opts]) end,
        expected,
        if(op == :sort, do: type, else: itype),
        :exact
      )
    end
  end

  property [:argmax, :argmin], "argmax/argmin with axis, tie_break and keep_axis" do
    for op <- [:argmax, :argmin], type <- all_types(), _ <- 1..40 do
      s = if chance(0.1), do: shape_or_large(min_dim: 1), else: shape(min_dim: 1)
      rank = tuple_size(s)
      # few distinct values: many ties
      gen =
        if R.float?(type),
          do: fn -> special_or(0.03, fn -> pick([-1.0, 0.0, 2.5, 3.0]) end) end,
          else: fn -> pick([0, 1, 7, elem(R.int_range(type), 1)]) end

      x = gen_tensor(type, s, gen)
      axis = if rank > 0 and chance(0.75), do: int_between(-rank, rank - 1), else: nil
      tie = pick([:low, :high])
      keep = chance(0.3)
      opts = [tie_break: tie, keep_axis: keep] ++ if(axis, do: [axis: axis], else: [])
      expected = R.argreduce(op, ref(x), axis, tie, keep)

      check!(
        "Cascade.#{op}/2",
        [tensor: x, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), opts]) end,
        expected,
        :s64,
        :exact
      )
    end
  end
end

defmodule Cascade.PropertyTest.LayoutTest do
  use Cascade.PropertyCase

  # A random shape with `size` elements: its prime factors spread over 0..4 axes (and axes
  # of size 1); for 0, a shape with a zero dimension.
  defp shape_of_size(0) do
    s = shape(min_rank: 1)
    put_elem(s, :rand.uniform(tuple_size(s)) - 1, 0)
  end

  defp shape_of_size(n) do
    rank = int_between(if(n == 1, do: 0, else: 1), 4)

    n
    |> factor(2)
    |> Enum.reduce(List.duplicate(1, rank), fn f, dims ->
      List.update_at(dims, :rand.uniform(rank) - 1, &(&1 * f))
    end)
    |> List.to_tuple()
  end

  defp factor(1, _), do: []
  defp factor(n, p) when p * p > n, do: [n]

  defp factor(n, p),
    do: if(rem(n, p) == 0, do: [p | factor(div(n, p), p)], else: factor(n, p + 1))

  defp layout_type, do: pick(all_types())

  property [:reshape], "reshape keeps the row-major elements" do
    for _ <- 1..60 do
      type = layout_type()
      s = shape()
      x = gen_tensor(type, s)
      new = shape_of_size(R.size(s))

      check!(
        "Cascade.reshape/2",
        [tensor: x, shape: new],
        fn -> Cascade.reshape(tensor!(x), new) end,
        R.reshape(ref(x), new),
        type,
        :exact
      )
    end
  end

  property [:transpose], "transpose permutes axes" do
    for _ <- 1..80 do
      type = layout_type()
      s = shape_or_large()
      rank = tuple_size(s)
      x = gen_tensor(type, s)

      axes =
        if chance(0.2),
          do: nil,
          else:
            Enum.shuffle(0..(rank - 1)//1 |> Enum.to_list())
            |> Enum.map(fn a -> if chance(0.2), do: a - rank, else: a end)

      opts = if axes, do: [axes: axes], else: []

      check!(
        "Cascade.transpose/2",
        [tensor: x, options: opts],
        fn -> Cascade.transpose(tensor!(x), opts) end,
        R.transpose(ref(x), axes),
        type,
        :exact
      )
    end
  end

  property [:broadcast], "broadcast repeats to a shape, with or without axes" do
    for _ <- 1..80 do
      type = layout_type()
      s = shape(max_rank: 3)
      rin = tuple_size(s)
      rout = rin + int_between(0, 2)

      axes =
        if chance(0.3),
          do: nil,
          else: Enum.to_list(0..(rout - 1)//1) |> Enum.shuffle() |> Enum.take(rin) |> Enum.sort()

      mapped = axes || Enum.to_list((rout - rin)..(rout - 1)//1)

      out =
        for a <- 0..(rout - 1)//1 do
          case Enum.find_index(mapped, &(&1 == a)) do
            nil -> dim(4)
            k -> if elem(s, k) == 1, do: dim(4), else: elem(s, k)
          end
        end
        |> List.to_tuple()

      x = gen_tensor(type, s)
      opts = if axes, do: [axes: axes], else: []

      check!(
        "Cascade.broadcast/3",
        [tensor: x, shape: out, options: opts],
        fn -> Cascade.broadcast(tensor!(x), out, opts) end,
        R.broadcast(ref(x), out, axes),
        type,
        :exact
      )
    end
  end

  property [:squeeze], "squeeze drops size-1 axes" do
    for _ <- 1..60 do
      type = layout_type()

      s =
        shape()
        |> Tuple.to_list()
        |> Enum.map(fn d -> if chance(0.4), do: 1, else: d end)
        |> List.to_tuple()

      ones = for {1, k} <- Enum.with_index(Tuple.to_list(s)), do: k

      axes =
        if chance(0.3),
          do: nil,
          else: Enum.filter(ones, fn _ -> chance(0.6) end) |> Enum.shuffle()

      x = gen_tensor(type, s)
      opts = if axes, do: [axes: axes], else: []

      check!(
        "Cascade.squeeze/2",
        [tensor: x, options: opts],
        fn -> Cascade.squeeze(tensor!(x), opts) end,
        R.squeeze(ref(x), axes),
        type,
        :exact
      )
    end
  end

  property [:slice], "slice with strides; starts clip into range as in Nx" do
    for _ <- 1..80 do
      type = layout_type()
      s = shape_or_large()
      dims = Tuple.to_list(s)
      lengths = Enum.map(dims, &int_between(0, &1))
      start = Enum.map(dims, &int_between(-2, &1 + 2))
      strides = if chance(0.3), do: nil, else: Enum.map(dims, fn _ -> int_between(1, 3) end)
      x = gen_tensor(type, s)
      opts = if strides, do: [strides: strides], else: []

      check!(
        "Cascade.slice/4",
        [tensor: x, start: start, lengths: lengths, options: opts],
        fn -> Cascade.slice(tensor!(x), start, lengths, opts) end,
        R.slice(ref(x), start, lengths, strides),
        type,
        :exact
      )
    end
  end

  property [:put_slice], "put_slice writes a slice at a clipped start" do
    for _ <- 1..80 do
      type = layout_type()
      s = shape_or_large()
      stype = if chance(0.2), do: layout_type(), else: type
      sshape = s |> Tuple.to_list() |> Enum.map(&int_between(0, &1)) |> List.to_tuple()
      start = s |> Tuple.to_list() |> Enum.map(&int_between(-2, &1 + 2))
      x = gen_tensor(type, s)
      slice = gen_tensor(stype, sshape)
      out = R.merge(type, stype)
      expected = R.put_slice(ref(x, out), start, ref(slice, out))

      check!(
        "Cascade.put_slice/3",
        [tensor: x, start: start, slice: slice],
        fn -> Cascade.put_slice(tensor!(x), start, tensor!(slice)) end,
        expected,
        out,
        :exact
      )
    end
  end

  property [:pad], "pad with low/high (negative crops) and interior padding" do
    for _ <- 1..80 do
      type = layout_type()
      s = shape()

      pads =
        for d <- Tuple.to_list(s) do
          interior = int_between(0, 2)
          grown = if d == 0, do: 0, else: d + (d - 1) * interior
          lo = int_between(-2, 3)
          hi = int_between(-2, 3)
          # keep the size non-negative: crop at most what there is
          lo = max(lo, -grown)
          hi = max(hi, -(grown + lo))
          {lo, hi, interior}
        end

      value = if R.float?(type) and chance(0.7), do: mixed(), else: int_between(-5, 5)
      # a float value beside an integer tensor makes the result f32 (Nx.Type.merge_number)
      value = if not R.float?(type) and chance(0.15), do: 2.5, else: value
      out = R.merge_number(type, value)
      x = gen_tensor(type, s)
      expected = R.pad(ref(x, out), R.round_to(value, out), pads)

      check!(
        "Cascade.pad/3",
        [tensor: x, value: value, pads: pads],
        fn -> Cascade.pad(tensor!(x), value, pads) end,
        expected,
        out,
        :exact
      )
    end
  end

  property [:reverse], "reverse along axes" do
    for _ <- 1..60 do
      type = layout_type()
      s = shape_or_large()
      rank = tuple_size(s)

      axes =
        if chance(0.25),
          do: nil,
          else: Enum.filter(0..(rank - 1)//1, fn _ -> chance(0.5) end) |> Enum.shuffle()

      x = gen_tensor(type, s)
      opts = if axes, do: [axes: axes], else: []

      check!(
        "Cascade.reverse/2",
        [tensor: x, options: opts],
        fn -> Cascade.reverse(tensor!(x), opts) end,
        R.reverse(ref(x), axes),
        type,
        :exact
      )
    end
  end

  property [:concatenate], "concatenate along an axis, merging types" do
    for _ <- 1..60 do
      type = layout_type()
      s = shape(min_rank: 1)
      rank = tuple_size(s)
      axis = int_between(0, rank - 1)
      n = int_between(1, 4)

      tensors =
        for _ <- 1..n do
          t = if chance(0.15), do: layout_type(), else: type
          gen_tensor(t, put_elem(s, axis, dim(4)))
        end

      out = tensors |> Enum.map(&elem(&1, 0)) |> Enum.reduce(&R.merge/2)

      opts =
        if axis == 0 and chance(0.5),
          do: [],
          else: [axis: if(chance(0.3), do: axis - rank, else: axis)]

      expected = R.concatenate(Enum.map(tensors, &ref(&1, out)), axis)

      check!(
        "Cascade.concatenate/2",
        [tensors: tensors, options: opts],
        fn -> Cascade.concatenate(Enum.map(tensors, &tensor!/1), opts) end,
        expected,
        out,
        :exact
      )
    end
  end

  property [:take], "take slices at indices along an axis" do
    for _ <- 1..60 do
      type = layout_type()
      s = shape(min_rank: 1, min_dim: 1)
      rank = tuple_size(s)
      axis = int_between(0, rank - 1)
      ishape = shape(max_rank: 2, max_dim: 3)
      itype = pick([:s64, :s32, :u8])
      idx = gen_tensor(itype, ishape, fn -> int_between(0, elem(s, axis) - 1) end)
      x = gen_tensor(type, s)
      opts = [axis: if(chance(0.3), do: axis - rank, else: axis)]

      check!(
        "Cascade.take/3",
        [tensor: x, indices: idx, options: opts],
        fn -> Cascade.take(tensor!(x), tensor!(idx), opts) end,
        R.take(ref(x), ref(idx), axis),
        type,
        :exact
      )
    end
  end

  property [:take_along_axis], "take_along_axis: each line's elements at indices" do
    for _ <- 1..60 do
      type = layout_type()
      s = shape(min_rank: 1, min_dim: 1)
      rank = tuple_size(s)
      axis = int_between(0, rank - 1)
      ishape = put_elem(s, axis, int_between(0, 4))
      itype = pick([:s64, :s32, :u8])
      idx = gen_tensor(itype, ishape, fn -> int_between(0, elem(s, axis) - 1) end)
      x = gen_tensor(type, s)
      opts = [axis: if(chance(0.3), do: axis - rank, else: axis)]

      check!(
        "Cascade.take_along_axis/3",
        [tensor: x, indices: idx, options: opts],
        fn -> Cascade.take_along_axis(tensor!(x), tensor!(idx), opts) end,
        R.take_along_axis(ref(x), ref(idx), axis),
        type,
        :exact
      )
    end
  end

  property [:gather], "gather by coordinates along axes" do
    for _ <- 1..60 do
      type = layout_type()
      s = shape(min_rank: 1, min_dim: 1)
      rank = tuple_size(s)
      k = int_between(1, rank)

      axes =
        if chance(0.3),
          do: nil,
          else: Enum.to_list(0..(rank - 1)) |> Enum.shuffle() |> Enum.take(k) |> Enum.sort()

      used = axes || Enum.to_list(0..(k - 1))
      batch = shape(max_rank: 2, max_dim: 3)
      ishape = Tuple.append(batch, k)
      itype = pick([:s64, :s32, :u8])
      rows = R.size(batch)
      values = for _ <- 1..rows//1, a <- used, do: int_between(0, elem(s, a) - 1)
      idx = {itype, ishape, values}
      x = gen_tensor(type, s)
      opts = if axes, do: [axes: axes], else: []

      check!(
        "Cascade.gather/3",
        [tensor: x, indices: idx, options: opts],
        fn -> Cascade.gather(tensor!(x), tensor!(idx), opts) end,
        R.gather(ref(x), ref(idx), axes),
        type,
        :exact
      )
    end
  end

  property [:window_sum, :window_product, :window_max, :window_min],
           "window reductions with strides, dilations and padding" do
    ops = [:window_sum, :window_product, :window_max, :window_min]

    for op <- ops, type <- all_types(), _ <- 1..8 do
      s = shape(min_rank: 1, max_rank: 3, min_dim: 1, max_dim: 5)
      rank = tuple_size(s)
      window = List.to_tuple(for _ <- 1..rank, do: int_between(1, 3))
      strides = for _ <- 1..rank, do: int_between(1, 2)
      dilations = for _ <- 1..rank, do: int_between(1, 2)
      pairs = for _ <- 1..rank, do: {int_between(0, 2), int_between(0, 2)}
      # products of floats stay finite and exact enough: small values
      gen =
        cond do
          R.float?(type) and op == :window_product -> fn -> pick([-1.5, -1.0, 0.5, 1.0, 2.0]) end
          R.float?(type) -> fn -> special_or(0.03, fn -> int_between(-20, 20) * 0.25 end) end
          true -> fn -> int_value(type) end
        end

      x = gen_tensor(type, s, gen)
      opts = [strides: strides, padding: pairs, window_dilations: dilations]

      check!(
        "Cascade.#{op}/3",
        [tensor: x, window: window, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), window, opts]) end,
        R.window(op, ref(x), type, window, strides, pairs, dilations) |> R.cast(type),
        type,
        # the same folds in the same order in double, rounded once: exact
        :exact
      )
    end
  end

  property [:window_scatter_max, :window_scatter_min],
           "window_scatter_max/min: the last extreme of each window, overlapping and padded" do
    for op <- [:window_scatter_max, :window_scatter_min], type <- all_types(), _ <- 1..8 do
      s = shape(min_rank: 1, max_rank: 3, min_dim: 1, max_dim: 5)
      rank = tuple_size(s)
      window = List.to_tuple(for _ <- 1..rank, do: int_between(1, 3))
      strides = for _ <- 1..rank, do: int_between(1, 2)
      pairs = for _ <- 1..rank, do: {int_between(0, 1), int_between(0, 1)}

      src_shape = R.window_shape(s, window, strides, pairs)

      # few distinct values: ties; the value sometimes wins over the tensor in the padding
      gen =
        if R.float?(type),
          do: fn -> pick([-1.0, 0.5, 2.0, 3.5]) end,
          else: fn -> pick([0, 1, 5, 9]) end

      x = gen_tensor(type, s, gen)
      src = gen_tensor(type, src_shape, gen)
      value = if R.float?(type), do: pick([0.5, 2.0]), else: pick([1, 5])
      out_type = R.merge_number(type, value)
      opts = [strides: strides, padding: pairs]

      check!(
        "Cascade.#{op}/5",
        [tensor: x, source: src, value: value, window: window, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), tensor!(src), value, window, opts]) end,
        R.window_scatter(op, ref(x), type, ref(src), value, out_type, window, strides, pairs),
        out_type,
        :exact
      )
    end
  end

  # The pooling shape (windows over the last two axes only), which the cpu driver runs through
  # hoisted loops: the same results as the general ones, exactly
  property [:window_max, :window_sum, :window_scatter_max],
           "window ops over the last two axes of f32, as pooling and its gradient use them" do
    # the last four are large enough for the blas driver to split them by planes; every fourth
    # is max_pool 2 (2 x 2 windows, strides 2, no padding), which has a path of its own
    for k <- 1..28 do
      pool2 = rem(k, 4) == 0

      outer =
        if k > 24,
          do: [int_between(2, 3), int_between(4, 6)],
          else: for(_ <- 1..int_between(1, 2), do: int_between(1, 3))

      h = if k > 24, do: int_between(24, 40), else: int_between(1, 7)
      w = if k > 24, do: int_between(24, 40), else: int_between(1, 7)
      s = List.to_tuple(outer ++ [h, w])
      ones = Enum.map(outer, fn _ -> 1 end)
      zeros = Enum.map(outer, fn _ -> {0, 0} end)

      window =
        List.to_tuple(ones ++ if(pool2, do: [2, 2], else: [int_between(1, 3), int_between(1, 3)]))

      strides = ones ++ if pool2, do: [2, 2], else: [int_between(1, 2), int_between(1, 2)]
      dilations = ones ++ if pool2, do: [1, 1], else: [int_between(1, 2), int_between(1, 2)]

      pairs =
        zeros ++
          if pool2,
            do: [{0, 0}, {0, 0}],
            else: [{int_between(0, 2), int_between(0, 2)}, {int_between(0, 2), int_between(0, 2)}]

      ties = fn -> pick([-1.0, 0.5, 2.0, 3.5]) end
      x = gen_tensor(:f32, s, fn -> special_or(0.05, ties) end)

      for op <- [:window_max, :window_sum] do
        opts = [strides: strides, padding: pairs, window_dilations: dilations]

        check!(
          "Cascade.#{op}/3",
          [tensor: x, window: window, options: opts],
          fn -> apply(Cascade, op, [tensor!(x), window, opts]) end,
          R.window(op, ref(x), :f32, window, strides, pairs, dilations) |> R.cast(:f32),
          :f32,
          :exact
        )
      end

      # no NaN here: the reference compares as the kernel does, but a NaN source sums alike
      xs = gen_tensor(:f32, s, ties)

      scatter_pairs =
        zeros ++
          if pool2,
            do: [{0, 0}, {0, 0}],
            else: [{int_between(0, 1), int_between(0, 1)}, {int_between(0, 1), int_between(0, 1)}]

      src = gen_tensor(:f32, R.window_shape(s, window, strides, scatter_pairs), ties)
      value = pick([0.0, 0.5, 2.0])
      opts = [strides: strides, padding: scatter_pairs]

      check!(
        "Cascade.window_scatter_max/5",
        [tensor: xs, source: src, value: value, window: window, options: opts],
        fn -> Cascade.window_scatter_max(tensor!(xs), tensor!(src), value, window, opts) end,
        R.window_scatter(
          :window_scatter_max,
          ref(xs),
          :f32,
          ref(src),
          value,
          :f32,
          window,
          strides,
          scatter_pairs
        ),
        :f32,
        :exact
      )
    end
  end

  property [:indexed_add, :indexed_put], "indexed_add/indexed_put at colliding positions" do
    for op <- [:indexed_add, :indexed_put], type <- all_types(), _ <- 1..12 do
      s = shape(min_rank: 1, min_dim: 1, max_dim: 4)
      rank = tuple_size(s)
      k = int_between(1, rank)

      axes =
        if chance(0.3),
          do: nil,
          else: Enum.to_list(0..(rank - 1)) |> Enum.shuffle() |> Enum.take(k) |> Enum.sort()

      used = axes || Enum.to_list(0..(k - 1))
      rows = int_between(0, 8)
      values = for _ <- 1..rows//1, a <- used, do: int_between(0, elem(s, a) - 1)
      idx = {pick([:s64, :s32, :u8]), {rows, k}, values}
      rest = for a <- 0..(rank - 1), a not in used, do: elem(s, a)
      # small values: sums of f16/bf16 stay exact enough to compare after one rounding
      gen =
        if R.float?(type),
          do: fn -> int_between(-8, 8) * 0.25 end,
          else: fn -> int_value(type) end

      x = gen_tensor(type, s, gen)
      u = gen_tensor(type, List.to_tuple([rows | rest]), gen)
      opts = if axes, do: [axes: axes], else: []
      what = if op == :indexed_add, do: :add, else: :put

      check!(
        "Cascade.#{op}/4",
        [target: x, indices: idx, updates: u, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), tensor!(idx), tensor!(u), opts]) end,
        R.indexed(what, ref(x), ref(idx), ref(u), axes) |> R.cast(type),
        type,
        :exact
      )
    end
  end
end

defmodule Cascade.PropertyTest.DotCreateTest do
  use Cascade.PropertyCase

  # Integers anywhere in their range (products wrap) unless `small`: an operand whose type is
  # promoted to a float must stay finite there.
  defp dot_gen(type, small \\ false) do
    cond do
      R.float?(type) -> fn -> float_between(-4.0, 4.0) end
      small -> fn -> int_between(0, 20) end
      type == :u8 -> fn -> int_between(0, 255) end
      R.unsigned?(type) -> fn -> if chance(0.1), do: int_value(type), else: int_between(0, 20) end
      true -> fn -> if chance(0.1), do: int_value(type), else: int_between(-20, 20) end
    end
  end

  defp dot_check(call, inputs, fun, a, b, expected, abs_expected, k) do
    type = R.merge(elem(a, 0), elem(b, 0))
    {_, mags} = abs_expected
    tol = if R.float?(type), do: tol(:sum, type, {k, mags}), else: :exact
    check!(call, inputs, fun, expected, type, tol)
  end

  defp abs_of({type, shape, values}), do: {type, shape, Enum.map(values, &abs/1)}

  property [:dot], "dot/2 contracts like Nx.dot/2" do
    for type <- floats() ++ ints(), _ <- 1..40 do
      k = dim(5)

      {sa, sb} =
        cond do
          chance(0.1) ->
            pick([{{}, shape(max_rank: 2)}, {shape(max_rank: 2), {}}])

          # past the GEMM's register tile (6 x 8) and, now and then, its cache blocks
          # (MC = 96 rows, KC = 256 contracted)
          chance(0.1) ->
            {m, kk, n} =
              if chance(0.3),
                do: {int_between(95, 110), int_between(250, 290), int_between(3, 12)},
                else: {int_between(17, 40), int_between(20, 70), int_between(9, 40)}

            {{m, kk}, {kk, n}}

          true ->
            pa = shape(max_rank: 2, max_dim: 4)
            a = Tuple.append(pa, k)

            b =
              if chance(0.3),
                do: {k},
                else: shape(max_rank: 1, max_dim: 4) |> Tuple.append(k) |> Tuple.append(dim(4))

            {a, b}
        end

      btype = if chance(0.15), do: pick(floats() ++ ints()), else: type
      ct = R.merge(type, btype)
      a = gen_tensor(type, sa, dot_gen(type, type != ct))
      b = gen_tensor(btype, sb, dot_gen(btype, btype != ct))
      expected = R.dot(ref(a, ct), ref(b, ct))
      abs_exp = R.dot(ref(abs_of(a), ct), ref(abs_of(b), ct))

      kk =
        if tuple_size(sa) == 0 or tuple_size(sb) == 0, do: 1, else: elem(sa, tuple_size(sa) - 1)

      dot_check(
        "Cascade.dot/2",
        [left: a, right: b],
        fn -> Cascade.dot(tensor!(a), tensor!(b)) end,
        a,
        b,
        expected,
        abs_exp,
        kk
      )
    end
  end

  property [:dot], "dot/6 with batch and contracting axes like Nx.dot/6" do
    for type <- floats() ++ ints(), _ <- 1..40 do
      nb = int_between(0, 2)
      nc = int_between(0, 2)
      nfa = int_between(0, 2)
      nfb = int_between(0, 2)
      batch = for _ <- 1..nb//1, do: dim(3)
      contract = for _ <- 1..nc//1, do: dim(4)
      fa = for _ <- 1..nfa//1, do: dim(3)
      fb = for _ <- 1..nfb//1, do: dim(3)
      # each operand's axes in a random order: role and position
      roles_a =
        Enum.shuffle(
          Enum.map(0..(nb - 1)//1, &{:b, &1}) ++
            Enum.map(0..(nc - 1)//1, &{:c, &1}) ++ Enum.map(0..(nfa - 1)//1, &{:f, &1})
        )

      roles_b =
        Enum.shuffle(
          Enum.map(0..(nb - 1)//1, &{:b, &1}) ++
            Enum.map(0..(nc - 1)//1, &{:c, &1}) ++ Enum.map(0..(nfb - 1)//1, &{:f, &1})
        )

      size = fn
        {:b, i}, _ -> Enum.at(batch, i)
        {:c, i}, _ -> Enum.at(contract, i)
        {:f, i}, f -> Enum.at(f, i)
      end

      sa = roles_a |> Enum.map(&size.(&1, fa)) |> List.to_tuple()
      sb = roles_b |> Enum.map(&size.(&1, fb)) |> List.to_tuple()
      pos = fn roles, role -> Enum.find_index(roles, &(&1 == role)) end
      ca = for i <- 0..(nc - 1)//1, do: pos.(roles_a, {:c, i})
      cb = for i <- 0..(nc - 1)//1, do: pos.(roles_b, {:c, i})
      ba = for i <- 0..(nb - 1)//1, do: pos.(roles_a, {:b, i})
      bb = for i <- 0..(nb - 1)//1, do: pos.(roles_b, {:b, i})
      a = gen_tensor(type, sa, dot_gen(type))
      b = gen_tensor(type, sb, dot_gen(type))
      expected = R.dot(ref(a), ca, ba, ref(b), cb, bb)
      abs_exp = R.dot(ref(abs_of(a)), ca, ba, ref(abs_of(b)), cb, bb)
      k = Enum.product(contract)

      dot_check(
        "Cascade.dot/6",
        [left: a, contract_a: ca, batch_a: ba, right: b, contract_b: cb, batch_b: bb],
        fn -> Cascade.dot(tensor!(a), ca, ba, tensor!(b), cb, bb) end,
        a,
        b,
        expected,
        abs_exp,
        k
      )
    end
  end

  property [:full], "full fills with the value rounded to the type" do
    for type <- all_types() ++ [nil], _ <- 1..20 do
      s = shape()

      value =
        cond do
          type == nil -> if chance(0.5), do: int_between(-9, 9), else: mixed()
          R.float?(type) -> if chance(0.2), do: int_value(:s32), else: mixed()
          true -> int_value(type)
        end

      out = type || if(is_integer(value), do: :s64, else: :f32)
      opts = if type, do: [type: type], else: []

      check!(
        "Cascade.full/3",
        [value: value, shape: s, options: opts],
        fn -> Cascade.full(value, s, opts) end,
        R.full(value, s),
        out,
        :exact
      )
    end
  end

  property [:iota], "iota counts along an axis or across the tensor" do
    for type <- all_types() ++ [nil], _ <- 1..20 do
      s = shape_or_large()
      rank = tuple_size(s)
      axis = if rank > 0 and chance(0.6), do: int_between(-rank, rank - 1), else: nil
      opts = if(type, do: [type: type], else: []) ++ if(axis, do: [axis: axis], else: [])

      check!(
        "Cascade.iota/2",
        [shape: s, options: opts],
        fn -> Cascade.iota(s, opts) end,
        R.iota(s, axis),
        type || :s64,
        :exact
      )
    end
  end

  property [:eye], "eye has ones on the diagonal of the last two axes" do
    for type <- all_types() ++ [nil], _ <- 1..15 do
      s = shape(min_rank: 2)

      {arg, s} =
        if chance(0.2),
          do:
            (
              n = dim(5)
              {n, {n, n}}
            ),
          else: {s, s}

      opts = if type, do: [type: type], else: []

      check!(
        "Cascade.eye/2",
        [shape: arg, options: opts],
        fn -> Cascade.eye(arg, opts) end,
        R.eye(s),
        type || :s64,
        :exact
      )
    end
  end

  # Random numbers follow the element mapping of c_src/core/philox.h, reproduced in f64 by
  # the reference: uniform in [min, max) as min + (max - min) * u, normal as mean + std * z.
  # The kernels compute in f32 (f64 for f64 tensors), so the transcendental tolerance applies,
  # scaled to the interval for uniform numbers.
  property [:random_uniform], "random_uniform follows Philox-4x32-10 and stays in [min, max)" do
    for type <- floats() ++ [:f64], _ <- 1..15 do
      s = shape_or_large()
      key = if chance(0.3), do: int_between(0, 0xFFFFFFFFFFFF), else: int_between(0, 1000)
      {lo, hi} = pick([{0.0, 1.0}, {-3.0, 5.0}, {10.0, 10.5}])
      opts = [key: key, min: lo, max: hi, type: type]
      t = Cascade.random_uniform(s, opts)
      got = Cascade.Type.decode(Cascade.to_binary(t), type)

      outside = Enum.find(got, fn g -> not (is_float(g) and g >= lo and g < hi) end)

      assert outside == nil,
             "Cascade.random_uniform(#{inspect(s)}, #{inspect(opts)}) gave #{inspect(outside)}, outside [#{lo}, #{hi})"

      expected = for i <- 0..(R.size(s) - 1)//1, do: lo + (hi - lo) * R.uniform01(key, i, type)

      {rel, abs} =
        if type == :f64,
          do: {:math.pow(2, -50), 0.0},
          else: Map.fetch!(elem(tolerances(), 0).arith, type)

      scale = max(abs(lo), abs(hi))

      check!(
        "Cascade.random_uniform/2",
        [shape: s, options: opts],
        fn -> t end,
        {s, expected},
        type,
        fn _e, _i -> 2 * rel * scale + abs end
      )
    end
  end

  property [:random_normal], "random_normal follows Box-Muller over Philox-4x32-10" do
    for type <- floats() ++ [:f64], _ <- 1..15 do
      s = shape_or_large()
      key = int_between(0, 100_000)
      {mean, std} = pick([{0.0, 1.0}, {5.0, 0.5}, {-2.0, 3.0}])
      opts = [key: key, mean: mean, standard_deviation: std, type: type]
      expected = for i <- 0..(R.size(s) - 1)//1, do: mean + std * R.normal(key, i, type)
      # Box-Muller in f32 loses up to ~2^-20 of the radius in the log and the angle
      {rel, abs} =
        if type == :f64,
          do: {:math.pow(2, -44), 0.0},
          else: Map.fetch!(elem(tolerances(), 0).transcendental, type)

      check!(
        "Cascade.random_normal/2",
        [shape: s, options: opts],
        fn -> Cascade.random_normal(s, opts) end,
        {s, expected},
        type,
        fn e, _i -> rel * (abs(e) + std * 8) + abs end
      )
    end
  end
end

defmodule Cascade.PropertyTest.LinAlgTest do
  use Cascade.PropertyCase

  # The cpu kernels repeat the reference's f64 steps (one rounding apart: 1 ulp); blas runs
  # LAPACK and dtrsm, which order and fuse the same sums otherwise: in f64, an error of a few
  # units of 2^-52 of the largest value, which cancellation can leave where the reference has
  # an exact 0. So 1 ulp of the result type, plus 2^-40 of the result's largest magnitude.
  defp linalg_tol(type, {_shape, values}) do
    rel = eps(type)

    scale =
      Enum.reduce(values, 1.0, fn v, acc -> if is_number(v), do: max(abs(v), acc), else: acc end)

    fn e, _i -> rel * abs(e) + :math.pow(2, -40) * scale end
  end

  # the spacing of a type's numbers relative to a value (one ulp)
  defp eps(:f16), do: :math.pow(2, -10)
  defp eps(:bf16), do: :math.pow(2, -7)
  defp eps(:f32), do: :math.pow(2, -23)
  defp eps(:f64), do: :math.pow(2, -52)

  # every combination of the options, batched, with vectors and mixed types; the diagonal
  # (at least 4 in magnitude) dominates the other values of [-2, 2], so the solutions stay near
  # the scale of b; the kernel and the reference substitute in the same order in f64: one
  # rounding apart
  property [:triangular_solve], "triangular_solve by substitution, on either side" do
    for type <- all_types(), _ <- 1..12 do
      batch = shape(max_rank: 2, max_dim: 3)
      m = int_between(0, 6)
      a_shape = batch |> Tuple.append(m) |> Tuple.append(m)
      left = chance(0.5)
      lower = chance(0.5)
      transpose = chance(0.5)
      n = int_between(0, 4)

      b_shape =
        cond do
          chance(0.3) -> Tuple.append(batch, m)
          left -> batch |> Tuple.append(m) |> Tuple.append(n)
          true -> batch |> Tuple.append(n) |> Tuple.append(m)
        end

      btype = if chance(0.2), do: pick(all_types()), else: type
      out = R.to_float(R.merge(type, btype))

      small = fn t ->
        if R.float?(t), do: fn -> int_between(-8, 8) * 0.25 end, else: fn -> int_between(0, 2) end
      end

      {_, _, a_values} = gen_tensor(type, a_shape, small.(type))
      sign = if R.float?(type) or type in [:s8, :s16, :s32, :s64], do: [1, -1], else: [1]

      a_values =
        for {x, i} <- Enum.with_index(a_values) do
          if rem(rem(i, m * m), m + 1) == 0,
            do: R.round_to(int_between(4, 8) * pick(sign), type),
            else: x
        end

      a = {type, a_shape, a_values}
      b = gen_tensor(btype, b_shape, small.(btype))

      opts = [
        lower: lower,
        left_side: left,
        transform_a: if(transpose, do: :transpose, else: :none)
      ]

      expected = R.triangular_solve(ref(a, out), ref(b, out), lower, left, transpose)

      check!(
        "Cascade.triangular_solve/3",
        [a: a, b: b, options: opts],
        fn -> Cascade.triangular_solve(tensor!(a), tensor!(b), opts) end,
        expected,
        out,
        linalg_tol(out, expected)
      )
    end
  end

  property [:lu_factor], "lu_factor with partial pivoting, packed with its permutation" do
    for type <- all_types(), _ <- 1..12 do
      n = int_between(0, 6)
      s = shape(max_rank: 2, max_dim: 3) |> Tuple.append(n) |> Tuple.append(n)
      # spread values, no ties between candidate pivots: which of two equal magnitudes wins
      # depends on the rounding of the elimination (LAPACK with FMA or not); the cpu kernel's
      # ties and singular matrices are in c_src/tests/test_cpu_linalg.c
      gen =
        if R.float?(type),
          do: fn -> (:rand.uniform() - 0.5) * 16 end,
          else: fn -> int_value(type) end

      x = gen_tensor(type, s, gen)
      out = if type == :f64, do: :f64, else: :f32

      expected = R.lu_factor(ref(x, out))

      check!(
        "Cascade.lu_factor/1",
        [tensor: x],
        fn -> Cascade.lu_factor(tensor!(x)) end,
        expected,
        out,
        linalg_tol(out, expected)
      )
    end
  end

  # no reference to compare with (another algorithm may round otherwise: the cpu's Jacobi
  # method, blas's LAPACK): the defining properties instead, on every type and host device, in
  # f64 arithmetic on the returned values. A v = lambda v
  # and V^T V = I to the result type's precision relative to the matrix's scale, ascending
  # eigenvalues, each vector's largest component positive, only the lower triangle read
  property [:eigh_packed], "eigh_packed: eigenpairs of the lower triangle, in canonical order" do
    for type <- all_types(), _ <- 1..10, device <- host_devices() do
      n = int_between(0, 6)
      s = shape(max_rank: 1, max_dim: 3) |> Tuple.append(n) |> Tuple.append(n)

      gen =
        if R.float?(type),
          do: fn -> int_between(-16, 16) * 0.25 end,
          else: fn -> int_between(0, 4) end

      {_, _, values} = x = gen_tensor(type, s, gen)
      out = R.to_float(type)
      result = Cascade.with_device(device, fn -> Cascade.eigh_packed(tensor!(x)) end)
      assert Cascade.shape(result) == put_elem(s, tuple_size(s) - 2, n + 1)
      assert Cascade.Type.normalize!(Cascade.type(result)) == out
      got = Cascade.Type.decode(Cascade.to_binary(result), out)

      batches = div(length(values), max(n * n, 1))

      for b <- 0..(batches - 1)//1, n > 0 do
        a = values |> Enum.drop(b * n * n) |> Enum.take(n * n) |> List.to_tuple()
        sym = fn i, j -> if i >= j, do: elem(a, i * n + j), else: elem(a, j * n + i) end
        scale = Enum.reduce(Tuple.to_list(a), 1.0, &max(abs(&1), &2)) * n
        packed = got |> Enum.drop(b * (n + 1) * n) |> Enum.take((n + 1) * n) |> List.to_tuple()
        val = fn j -> elem(packed, j) end
        vec = fn i, j -> elem(packed, n + i * n + j) end
        tol = 8 * n * eps(out)

        for j <- 0..(n - 1) do
          if j > 0,
            do: assert(val.(j - 1) <= val.(j), "eigenvalues out of order: #{inspect(got)}")

          # the largest component is positive (of several equal once rounded, one of them)
          top = Enum.max(for i <- 0..(n - 1), do: abs(vec.(i, j)))
          assert Enum.any?(0..(n - 1), &(vec.(&1, j) == top)), "sign: #{inspect(got)}"

          for i <- 0..(n - 1) do
            av = Enum.reduce(0..(n - 1), 0.0, fn k, acc -> acc + sym.(i, k) * vec.(k, j) end)

            assert abs(av - val.(j) * vec.(i, j)) <= tol * scale,
                   "A v != lambda v for #{inspect(x)}: #{inspect(got)}"

            dot = Enum.reduce(0..(n - 1), 0.0, fn k, acc -> acc + vec.(k, i) * vec.(k, j) end)
            assert abs(dot - if(i == j, do: 1, else: 0)) <= tol, "V^T V != I: #{inspect(got)}"
          end
        end
      end
    end
  end

  # the defining properties again, in f64 arithmetic on the returned values: u diag(s) vt = a to
  # the result type's precision relative to the matrix's scale, u and vt orthonormal (square
  # with full matrices), the singular values descending and not negative, each right vector's
  # largest component positive (its left vector's sign goes with it); rank-deficient matrices
  # among the small integers
  property [:svd_packed], "svd_packed: u diag(s) vt, orthonormal vectors, canonical order" do
    for type <- all_types(), _ <- 1..6, device <- host_devices(), full <- [true, false] do
      {m, n} = {int_between(0, 5), int_between(0, 5)}
      k = min(m, n)
      {c, r} = if full, do: {m, n}, else: {k, k}
      w = max(c, n)
      s = shape(max_rank: 1, max_dim: 3) |> Tuple.append(m) |> Tuple.append(n)

      gen =
        if R.float?(type),
          do: fn -> int_between(-16, 16) * 0.25 end,
          else: fn -> int_between(0, 4) end

      {_, _, values} = x = gen_tensor(type, s, gen)
      out = R.to_float(type)

      result =
        Cascade.with_device(device, fn ->
          Cascade.svd_packed(tensor!(x), full_matrices: full)
        end)

      rank = tuple_size(s)
      assert Cascade.shape(result) == s |> put_elem(rank - 2, m + 1 + r) |> put_elem(rank - 1, w)
      assert Cascade.Type.normalize!(Cascade.type(result)) == out
      got = Cascade.Type.decode(Cascade.to_binary(result), out)
      batches = div(length(values), max(m * n, 1))

      for b <- 0..(batches - 1)//1, m * n > 0 do
        a = values |> Enum.drop(b * m * n) |> Enum.take(m * n) |> List.to_tuple()
        scale = Enum.reduce(Tuple.to_list(a), 1.0, &max(abs(&1), &2)) * max(m, n)
        packed = got |> Enum.drop(b * (m + 1 + r) * w) |> Enum.take((m + 1 + r) * w)
        packed = List.to_tuple(packed)
        u = fn i, j -> elem(packed, i * w + j) end
        sv = fn j -> elem(packed, m * w + j) end
        vt = fn i, j -> elem(packed, (m + 1 + i) * w + j) end
        tol = 16 * max(m, n) * eps(out)

        for j <- 0..(k - 1)//1 do
          assert sv.(j) >= 0 and (j == 0 or sv.(j) <= sv.(j - 1)), "order: #{inspect(got)}"
          top = Enum.max(for i <- 0..(n - 1), do: abs(vt.(j, i)))
          assert Enum.any?(0..(n - 1), &(vt.(j, &1) == top)), "sign: #{inspect(got)}"
        end

        for i <- 0..(m - 1), l <- 0..(n - 1) do
          back = Enum.reduce(0..(k - 1)//1, 0.0, &(&2 + u.(i, &1) * sv.(&1) * vt.(&1, l)))

          assert abs(back - elem(a, i * n + l)) <= tol * scale,
                 "u s vt != a for #{inspect(x)}: #{inspect(got)}"
        end

        for i <- 0..(c - 1)//1, j <- 0..(c - 1)//1 do
          dot = Enum.reduce(0..(m - 1), 0.0, &(&2 + u.(&1, i) * u.(&1, j)))
          assert abs(dot - if(i == j, do: 1, else: 0)) <= tol, "U^T U != I: #{inspect(got)}"
        end

        for i <- 0..(r - 1)//1, j <- 0..(r - 1)//1 do
          dot = Enum.reduce(0..(n - 1), 0.0, &(&2 + vt.(i, &1) * vt.(j, &1)))
          assert abs(dot - if(i == j, do: 1, else: 0)) <= tol, "V^T V != I: #{inspect(got)}"
        end
      end
    end
  end
end

defmodule Cascade.PropertyTest.LargeTest do
  use Cascade.PropertyCase

  # Calls whose cost passes the NIF's dirty-scheduler threshold (2^17 element operations) run
  # on a dirty CPU scheduler: the same kernels, reached another way.
  property [:exp, :add, :sum, :transpose, :as_type, :dot],
           "ops above the dirty-scheduler threshold match too" do
    for type <- floats() do
      x = gen_tensor(type, {300, 480}, fn -> float_between(-5.0, 5.0) end)
      y = gen_tensor(type, {480}, fn -> float_between(-5.0, 5.0) end)

      check!(
        "Cascade.exp/1",
        [tensor: x],
        fn -> Cascade.exp(tensor!(x)) end,
        R.unary(:exp, ref(x)),
        type,
        tol({:transcendental, :exp}, type)
      )

      check!(
        "Cascade.add/2",
        [left: x, right: y],
        fn -> Cascade.add(tensor!(x), tensor!(y)) end,
        R.binary(:add, ref(x), ref(y)),
        type,
        tol(:arith, type)
      )

      {_, mags} = R.reduce(:sum, R.unary(:abs, ref(x)), type, [0])

      check!(
        "Cascade.sum/2",
        [tensor: x, options: [axes: [0]]],
        fn -> Cascade.sum(tensor!(x), axes: [0]) end,
        R.reduce(:sum, ref(x), type, [0]),
        type,
        tol(:sum, type, {300, mags})
      )

      check!(
        "Cascade.transpose/1",
        [tensor: x],
        fn -> Cascade.transpose(tensor!(x)) end,
        R.transpose(ref(x)),
        type,
        :exact
      )

      check!(
        "Cascade.as_type/2",
        [tensor: x, type: :f64],
        fn -> Cascade.as_type(tensor!(x), :f64) end,
        R.as_type(ref(x), :f64),
        :f64,
        :exact
      )

      a = gen_tensor(type, {100, 270}, fn -> float_between(-2.0, 2.0) end)
      b = gen_tensor(type, {270, 17}, fn -> float_between(-2.0, 2.0) end)
      {_, mags} = R.dot(R.unary(:abs, ref(a)), R.unary(:abs, ref(b)))

      check!(
        "Cascade.dot/2",
        [left: a, right: b],
        fn -> Cascade.dot(tensor!(a), tensor!(b)) end,
        R.dot(ref(a), ref(b)),
        type,
        tol(:sum, type, {270, mags})
      )
    end
  end
end

defmodule Cascade.PropertyTest.Fused do
  # fused runs a chain of elementwise ops as one op: on every host device and on opencl its
  # result is the result of the same ops run one by one there, bit for bit (the blas driver's
  # fused kernel runs the same vector kernels on blocks; opencl's generated kernel the same
  # expressions, each rounded; the cpu driver runs the decomposition). Random
  # chains over tensors of one shape and numbers, with sizes around the kernel's blocks and
  # its split across threads.
  use ExUnit.Case, async: true
  use Cascade.PropertyCase

  @unary [:exp, :tanh, :negate, :abs, :sigmoid, :log, :sqrt, :erf, :sin, :floor]
  @binary [:add, :subtract, :multiply, :divide, :max, :min, :pow]

  defp chain(n_in) do
    len = int_between(1, 8)

    Enum.map(0..(len - 1), fn k ->
      regs = n_in + k
      # read the newest value most of the time, so that chains are deep
      a = if chance(0.6), do: regs - 1, else: int_between(0, regs - 1)

      if chance(0.5),
        do: {pick(@unary), a},
        else: {pick(@binary), a, int_between(0, regs - 1)}
    end)
  end

  defp one_by_one(inputs, code) do
    Enum.reduce(code, inputs, fn
      {op, a}, regs -> regs ++ [apply(Cascade, op, [Enum.at(regs, a)])]
      {op, a, b}, regs -> regs ++ [apply(Cascade, op, [Enum.at(regs, a), Enum.at(regs, b)])]
    end)
    |> List.last()
  end

  # the host devices, and opencl where it is available (its fused kernel is generated source)
  defp devices do
    opencl = for %{device: :opencl, available: true} <- Cascade.devices(), do: :opencl
    host_devices() ++ opencl
  end

  # n_in f32 tensors of `shape`, the second and later a number (rank 0), a row (the trailing
  # axes of shape, sometimes under a leading 1, as a bias) or a channel vector (a convolution's
  # bias) now and then
  defp gen_inputs(shape, n_in, type \\ :f32) do
    Enum.map(1..n_in, fn k ->
      s =
        cond do
          k > 1 and chance(0.25) -> {}
          k > 1 and chance(0.3) -> row_of(shape)
          k > 1 and tuple_size(shape) >= 2 and chance(0.3) -> channel_of(shape)
          true -> shape
        end

      gen_tensor(type, s, fn -> float_between(-3.0, 3.0) end)
    end)
  end

  defp row_of(shape) do
    rank = tuple_size(shape)
    keep = int_between(0, rank - 1)
    row = shape |> Tuple.to_list() |> Enum.drop(rank - keep) |> List.to_tuple()
    if chance(0.3), do: Tuple.insert_at(row, 0, 1), else: row
  end

  # axes first .. last of shape kept, 1 before and after them ({1, C, 1, 1} of {N, C, H, W}),
  # sometimes without the leading 1s ({C, 1, 1}); at least one axis after them
  defp channel_of(shape) do
    dims = Tuple.to_list(shape)
    rank = length(dims)
    last = int_between(0, rank - 2)
    first = int_between(0, last)

    c =
      dims
      |> Enum.with_index()
      |> Enum.map(fn {d, a} -> if a >= first and a <= last, do: d, else: 1 end)

    c = if chance(0.5), do: Enum.drop(c, first), else: c
    List.to_tuple(c)
  end

  # whether the chain's result reads an input of the full shape; when it reads rows only,
  # fused refuses it (its result would have a row's shape)
  defp reads(code, pred, n_in, inputs) do
    regs = Enum.map(Enum.take(inputs, n_in), pred)

    Enum.reduce(code, regs, fn
      {_, a}, regs -> regs ++ [Enum.at(regs, a)]
      {_, a, b}, regs -> regs ++ [Enum.at(regs, a) or Enum.at(regs, b)]
    end)
    |> List.last()
  end

  defp rows_only?(ts, code, shape) do
    n = length(ts)
    full = reads(code, &(Cascade.shape(&1) == shape), n, ts)
    tensor = reads(code, &(Cascade.shape(&1) != {}), n, ts)
    tensor and not full
  end

  property [:fused], "fused equals its ops run one by one" do
    for _ <- 1..40, device <- devices() do
      shape =
        pick([
          {7},
          {3, 5},
          {1023},
          {1025},
          {2, 2050},
          {20_000},
          {140_001},
          {2, 3, 5, 7},
          {3, 4, 33, 35}
        ])

      n_in = int_between(1, 4)
      # f16 and bf16 chains too: each instruction rounds to the type, as the op alone
      type = pick([:f32, :f32, :f16, :bf16])

      inputs = gen_inputs(shape, n_in, type)

      code = chain(n_in)

      Cascade.with_device(device, fn ->
        ts = Enum.map(inputs, &tensor!/1)

        if rows_only?(ts, code, shape) do
          assert_raise ArgumentError, ~r/reads rows only/, fn -> Cascade.fused(ts, code) end
        else
          got = Cascade.fused(ts, code)
          want = one_by_one(ts, code)

          assert {Cascade.shape(got), Cascade.to_binary(got)} ==
                   {Cascade.shape(want), Cascade.to_binary(want)},
                 "fused on #{inspect(device)} differs from its ops one by one: code " <>
                   inspect(code) <> ", input shapes " <> inspect(Enum.map(ts, &Cascade.shape/1))
        end
      end)
    end
  end

  # a convolution's bias and its ReLU6 ({1, C, 1, 1} or {C, 1, 1} of an {N, C, H, W} result),
  # on planes that do not fill the kernel's blocks, that cross them and that are split across
  # threads
  test "fused with channel vectors equals its ops run one by one" do
    code = [{:add, 0, 1}, {:max, 3, 2}, {:multiply, 4, 1}, {:tanh, 5}]

    for device <- devices(),
        type <- [:f32, :f16, :bf16],
        {n, c, h, w} <- [{3, 5, 7, 9}, {2, 16, 33, 35}],
        lead <- [true, false] do
      Cascade.with_device(device, fn ->
        x =
          Cascade.iota({n, c, h, w}, type: type)
          |> Cascade.divide(1000.0)
          |> Cascade.subtract(1.0)

        b =
          Cascade.iota(if(lead, do: {1, c, 1, 1}, else: {c, 1, 1}), type: type)
          |> Cascade.divide(7.0)

        ts = [
          Cascade.as_type(x, type),
          Cascade.as_type(b, type),
          Cascade.tensor(0.25, type: type)
        ]

        got = Cascade.fused(ts, code)
        want = one_by_one(ts, code)

        assert Cascade.to_binary(got) == Cascade.to_binary(want),
               "fused on #{inspect(device)}, #{type}, #{inspect({n, c, h, w})} differs"
      end)
    end
  end

  property [:fused], "fused with a sum at the end equals its ops, then sum/2" do
    for _ <- 1..30, device <- devices() do
      shape = pick([{7}, {3, 5}, {2, 1025}, {4, 3, 700}, {20_000}, {3, 50_000}])
      rank = tuple_size(shape)
      n_in = int_between(1, 3)

      inputs = gen_inputs(shape, n_in)

      code = chain(n_in)
      # every trailing run of axes, all of them, or (decomposed on blas) the first
      axes = pick([nil, [rank - 1], Enum.to_list(0..(rank - 1)), [0]])
      keep = chance(0.5)
      opts = [reduce: :sum, keep_axes: keep] ++ if(axes, do: [axes: axes], else: [])
      sum_opts = [keep_axes: keep] ++ if(axes, do: [axes: axes], else: [])

      Cascade.with_device(device, fn ->
        ts = Enum.map(inputs, &tensor!/1)
        # a chain of rows only is refused (above): end it by adding the full input instead
        code =
          if rows_only?(ts, code, shape) do
            code = Enum.take(code, 7)
            code ++ [{:add, 0, length(ts) + length(code) - 1}]
          else
            code
          end

        chain = one_by_one(ts, code)

        # a chain that reads only numbers is one value: a sum of it takes no axes
        {opts, sum_opts} =
          if Cascade.shape(chain) == {},
            do: {[reduce: :sum, keep_axes: keep], [keep_axes: keep]},
            else: {opts, sum_opts}

        got = Cascade.fused(ts, code, opts)
        want = Cascade.sum(chain, sum_opts)
        mags = Cascade.sum(Cascade.abs(chain), sum_opts)

        assert Cascade.shape(got) == Cascade.shape(want)
        g = Cascade.to_list(Cascade.reshape(got, {Cascade.size(got)}))
        w = Cascade.to_list(Cascade.reshape(want, {Cascade.size(want)}))
        m = Cascade.to_list(Cascade.reshape(mags, {Cascade.size(mags)}))

        for {{gv, wv}, mv} <- Enum.zip(Enum.zip(g, w), m) do
          ok =
            (is_number(gv) and is_number(wv) and abs(gv - wv) <= 1.0e-6 * mv + 1.0e-30) or
              gv == wv

          assert ok,
                 "fused with a sum on #{inspect(device)}: #{inspect(gv)} against #{inspect(wv)} " <>
                   "(code #{inspect(code)}, shape #{inspect(shape)}, options #{inspect(opts)})"
        end
      end)
    end
  end

  test "fused refuses what it cannot run, naming the instruction" do
    x = Cascade.tensor([1.0, 2.0])

    assert_raise ArgumentError, ~r/instruction 0 reads a value not yet computed/, fn ->
      Cascade.fused([x], [{:exp, 1}])
    end

    assert_raise ArgumentError, ~r/not an elementwise float op/, fn ->
      Cascade.fused([x], [{:sum, 0}])
    end

    assert_raise ArgumentError, ~r/expected f32, f16 or bf16 tensors/, fn ->
      Cascade.fused([Cascade.tensor([1, 2])], [{:exp, 0}])
    end

    assert_raise ArgumentError, ~r/one shape, rows or channel vectors that broadcast to it/, fn ->
      Cascade.fused([x, Cascade.tensor([1.0, 2.0, 3.0])], [{:add, 0, 1}])
    end

    assert_raise ArgumentError, ~r/at most 8 instructions/, fn ->
      Cascade.fused([x], List.duplicate({:exp, 0}, 9))
    end

    assert_raise ArgumentError, ~r/axes are given only with reduce: :sum/, fn ->
      Cascade.fused([x], [{:exp, 0}], axes: [0])
    end
  end
end

defmodule Cascade.PropertyTest do
  # Not async: sync modules run after every test file has loaded, so the property modules of
  # test/composites_*_test.exs are all there to be counted.
  use ExUnit.Case, async: false

  # every test module that uses Cascade.PropertyCase, in whichever file it is
  defp property_modules do
    for {mod, _} <- :code.all_loaded(),
        function_exported?(mod, :__covered__, 0),
        do: mod
  end

  test "every op of the table has a property test" do
    covered = property_modules() |> Enum.flat_map(& &1.__covered__()) |> MapSet.new()
    ops = Enum.map(Cascade.__ops__(), & &1.name)
    missing = Enum.reject(ops, &MapSet.member?(covered, &1))

    assert missing == [],
           "ops without a property test (use Cascade.PropertyCase): #{inspect(missing)}"

    unknown = covered |> MapSet.to_list() |> Enum.reject(&(&1 in ops))
    assert unknown == [], "property tests of ops that are not in the table: #{inspect(unknown)}"
  end
end
