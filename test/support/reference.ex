defmodule Cascade.Reference do
  @moduledoc """
  A plain-Elixir reference of every Cascade primitive, for the property tests.

  Tensors are `{shape, flat_list}` pairs: `shape` is a tuple, `flat_list` the elements in
  row-major order. Elements are Elixir integers (integer types, computed exactly) or floats
  (computed in f64), or `:nan`, `:infinity` and `:neg_infinity` as `Cascade.to_list/1` gives
  them.

  The functions compute the mathematical result of an op on inputs already in the op's
  compute type (`cast/2` puts them there) and return values that are *not* rounded to the
  output type: `cast/2` with the output type does that, as the C core's one final rounding.
  The type rules (`merge/2`, `merge_number/2`, `to_float/1`, `to_aggregate/1`) are written
  out here from Nx's rules, independently of `Cascade.Type`, so that the tests check them.

  Semantics follow the docs in `c_src/core/ops.def` and Nx.
  """

  import Bitwise

  @type shape :: tuple
  @type value :: number | :nan | :infinity | :neg_infinity
  @type t :: {shape, [value]}

  ## Types

  @float_types [:f16, :bf16, :f32, :f64]
  @int_bits %{u8: 8, u16: 16, u32: 32, u64: 64, s8: 8, s16: 16, s32: 32, s64: 64}
  @int_ranges Map.new(@int_bits, fn
                {type, bits} when type in [:u8, :u16, :u32, :u64] -> {type, {0, (1 <<< bits) - 1}}
                {type, bits} -> {type, {-(1 <<< (bits - 1)), (1 <<< (bits - 1)) - 1}}
              end)
  @int_types Map.keys(@int_bits)

  @doc "Whether the type holds floats."
  def float?(type), do: type in @float_types

  @doc "Whether the type is an unsigned integer type."
  def unsigned?(type), do: type in [:u8, :u16, :u32, :u64]

  @doc "The smallest and largest value of an integer type."
  def int_range(type), do: Map.fetch!(@int_ranges, type)

  @doc "Nx.Type.merge/2: the type two operands are computed in."
  def merge(same, same), do: same

  def merge(a, b) do
    case {float?(a), float?(b)} do
      {true, true} -> if :f64 in [a, b], do: :f64, else: :f32
      {true, false} -> a
      {false, true} -> b
      {false, false} -> merge_ints(a, b)
    end
  end

  # the wider of one signedness; unsigned with signed: signed, twice the unsigned width (at
  # most 64) or the signed width
  defp merge_ints(a, b) do
    {ba, bb} = {@int_bits[a], @int_bits[b]}

    case {unsigned?(a), unsigned?(b)} do
      {same, same} -> int_type(same, max(ba, bb))
      {true, false} -> int_type(false, max(min(2 * ba, 64), bb))
      {false, true} -> int_type(false, max(min(2 * bb, 64), ba))
    end
  end

  defp int_type(unsigned, bits),
    do: String.to_existing_atom(if(unsigned, do: "u", else: "s") <> Integer.to_string(bits))

  @doc "Nx.Type.merge_number/2: an integer keeps the tensor's type, a float makes integers f32."
  def merge_number(type, n) when is_integer(n), do: type
  def merge_number(type, _float), do: to_float(type)

  @doc "Nx.Type.to_floating/1."
  def to_float(type), do: if(float?(type), do: type, else: :f32)

  @doc "Nx.Type.to_aggregate/1: integer sums and products are s64, or u64 for unsigned types."
  def to_aggregate(type) do
    cond do
      float?(type) -> type
      unsigned?(type) -> :u64
      true -> :s64
    end
  end

  ## Rounding

  @doc """
  Rounds one value into `type`: floats round to nearest even once (through
  `Cascade.Type.encode_one/2`, straight from f64), integers wrap, a float given for an
  integer type truncates toward zero.
  """
  def round_to(x, type) when is_atom(x) do
    if float?(type), do: x, else: raise(ArgumentError, "cannot round #{inspect(x)} to #{type}")
  end

  def round_to(x, type) when type in @int_types do
    {lo, hi} = int_range(type)
    span = hi - lo + 1
    Integer.mod(trunc(x) - lo, span) + lo
  end

  # Integers beyond 2^53 would round twice through f64: round them to the type's precision
  # exactly first, so that the one rounding of the C core is what is compared.
  @precision %{f16: 11, bf16: 8, f32: 24, f64: 53}

  def round_to(x, type) when is_integer(x) and abs(x) >= 1 <<< 53 do
    p = Map.fetch!(@precision, type)
    m = abs(x)
    shift = bit_length(m) - p
    kept = m >>> shift
    rest = m &&& (1 <<< shift) - 1
    half = 1 <<< (shift - 1)
    kept = if rest > half or (rest == half and (kept &&& 1) == 1), do: kept + 1, else: kept
    round_to(sign(x) * (kept <<< shift) * 1.0, type)
  end

  def round_to(x, type) do
    [v] = Cascade.Type.decode(Cascade.Type.encode_one(x, type), type)
    v
  end

  defp bit_length(0), do: 0
  defp bit_length(m), do: 1 + bit_length(m >>> 1)

  @doc "Rounds every element of a tensor (or a flat list) into `type`."
  def cast({shape, data}, type), do: {shape, cast(data, type)}
  def cast(data, type) when is_list(data), do: Enum.map(data, &round_to(&1, type))

  @doc """
  `as_type/2`: floats into floats round to nearest even; floats into integers truncate toward
  zero and saturate, NaN becomes 0; integers into integers wrap; integers into floats round.
  """
  def as_type({shape, data}, to), do: {shape, Enum.map(data, &convert(&1, to))}

  defp convert(x, to) do
    if float?(to) do
      round_to(x, to)
    else
      {lo, hi} = int_range(to)

      case x do
        :nan -> 0
        :infinity -> hi
        :neg_infinity -> lo
        f when is_float(f) -> f |> trunc() |> max(lo) |> min(hi)
        i when is_integer(i) -> round_to(i, to)
      end
    end
  end

  ## Shapes and indices

  @doc "The number of elements of a shape."
  def size(shape), do: shape |> Tuple.to_list() |> Enum.product()

  @doc "Row-major strides of a shape, as a list."
  def strides(shape) do
    shape
    |> Tuple.to_list()
    |> Enum.reverse()
    |> Enum.reduce({[], 1}, fn d, {acc, s} -> {[s | acc], s * d} end)
    |> elem(0)
  end

  @doc "Every index (a list of coordinates) of a shape, in row-major order."
  def indices(shape) do
    shape
    |> Tuple.to_list()
    |> Enum.reverse()
    |> Enum.reduce([[]], fn d, acc -> for i <- 0..(d - 1)//1, rest <- acc, do: [i | rest] end)
  end

  @doc "The flat offset of an index."
  def offset(index, strides),
    do: Enum.zip_reduce(index, strides, 0, fn i, s, acc -> acc + i * s end)

  # The coordinates of `index` at `positions`.
  defp pick(index, positions) do
    tuple = List.to_tuple(index)
    Enum.map(positions, &elem(tuple, &1))
  end

  defp normalize_axis(axis, rank) when axis < 0, do: axis + rank
  defp normalize_axis(axis, _rank), do: axis

  defp normalize_axes(nil, rank), do: Enum.to_list(0..(rank - 1)//1)
  defp normalize_axes(axes, rank), do: Enum.map(axes, &normalize_axis(&1, rank))

  @doc "NumPy broadcasting of two shapes (aligned on the right); raises when they do not fit."
  def broadcast_shape(a, b) do
    ra = tuple_size(a)
    rb = tuple_size(b)
    rank = max(ra, rb)

    for k <- 0..(rank - 1)//1, reduce: {} do
      acc ->
        da = if k - (rank - ra) >= 0, do: elem(a, k - (rank - ra)), else: 1
        db = if k - (rank - rb) >= 0, do: elem(b, k - (rank - rb)), else: 1

        cond do
          da == db or db == 1 -> Tuple.append(acc, da)
          da == 1 -> Tuple.append(acc, db)
          true -> raise ArgumentError, "cannot broadcast #{inspect(a)} and #{inspect(b)}"
        end
    end
  end

  # A function from an output index (of `out`) to the flat offset in a tensor of `shape` that
  # broadcasts to it.
  defp broadcast_reader(shape, out) do
    drop = tuple_size(out) - tuple_size(shape)
    dims = Tuple.to_list(shape)
    strides = strides(shape)

    fn index ->
      index
      |> Enum.drop(drop)
      |> Enum.zip(dims)
      |> Enum.map(fn {i, d} -> if d == 1, do: 0, else: i end)
      |> offset(strides)
    end
  end

  @doc "Reads every tensor at the broadcast output index and maps `fun` over the values."
  def broadcast_map(tensors, fun) do
    out = tensors |> Enum.map(&elem(&1, 0)) |> Enum.reduce(&broadcast_shape(&2, &1))

    readers =
      for {shape, data} <- tensors, do: {List.to_tuple(data), broadcast_reader(shape, out)}

    data =
      for index <- indices(out) do
        fun.(Enum.map(readers, fn {tuple, reader} -> elem(tuple, reader.(index)) end))
      end

    {out, data}
  end

  ## Elementwise

  @unary [:negate, :abs, :sign, :exp, :expm1, :log, :log1p, :sqrt, :rsqrt, :sin, :cos, :tanh] ++
           [:sigmoid, :erf, :floor, :ceil, :round, :reciprocal, :logical_not] ++
           [:erfc, :erf_inv, :tan, :asin, :acos, :atan, :sinh, :cosh, :asinh, :acosh] ++
           [:atanh, :cbrt, :is_nan, :is_infinity, :bitwise_not]
  @binary [:add, :subtract, :multiply, :divide, :pow, :max, :min, :remainder, :atan2] ++
            [:equal, :not_equal, :less, :less_equal, :greater, :greater_equal] ++
            [:logical_and, :logical_or, :logical_xor] ++
            [:bitwise_and, :bitwise_or, :bitwise_xor, :left_shift, :right_shift, :quotient]
  @bits @int_bits

  @doc "The elementwise unary ops the reference knows."
  def unary_ops, do: @unary
  @doc "The elementwise binary ops the reference knows."
  def binary_ops, do: @binary

  @doc "An elementwise unary op on a tensor in its compute type."
  def unary(op, {shape, data}) when op in @unary, do: {shape, Enum.map(data, &unary1(op, &1))}

  @doc """
  population_count and count_leading_zeros of an integer tensor of `type`: bits of the
  value's two's complement in the type's width.
  """
  def unary_bits(op, type, {shape, data}) when op in [:population_count, :count_leading_zeros] do
    bits = Map.fetch!(@bits, type)

    {shape,
     Enum.map(data, fn x ->
       u = x &&& (1 <<< bits) - 1
       ones = for(i <- 0..(bits - 1), (u >>> i &&& 1) == 1, do: 1) |> length()
       width = if u == 0, do: 0, else: length(Integer.digits(u, 2))
       if op == :population_count, do: ones, else: bits - width
     end)}
  end

  @doc "An elementwise binary op, with broadcasting, on tensors in their compute type."
  def binary(op, a, b) when op in @binary,
    do: broadcast_map([a, b], fn [x, y] -> binary1(op, x, y) end)

  @doc "select: `on_true` where `pred` is non-zero, else `on_false`; all three broadcast."
  def select(pred, on_true, on_false) do
    broadcast_map([pred, on_true, on_false], fn [p, t, f] -> if truthy(p), do: t, else: f end)
  end

  @doc "clip: min(max(x, lo), hi), `lo` and `hi` broadcast to the tensor's shape."
  def clip(t, lo, hi) do
    broadcast_map([t, lo, hi], fn [x, l, h] -> binary1(:min, binary1(:max, x, l), h) end)
  end

  defp truthy(x), do: not (is_number(x) and x == 0)

  # Elementwise math in f64 (floats) or exactly (integers), with IEEE 754 / C99 Annex F
  # results for NaN, infinities, signed zeros, zero divisors and overflow (Elixir floats are
  # finite, so those are spelled out). The sign of a zero matters where it picks an infinity
  # or an angle (1 / -0.0, atan2(-0.0, -1)); comparisons of results treat -0.0 as 0.0.
  defp unary1(:negate, x), do: neg(x)
  defp unary1(:abs, x) when is_atom(x), do: if(x == :nan, do: :nan, else: :infinity)
  defp unary1(:abs, x), do: abs(x)
  defp unary1(:sign, :nan), do: :nan
  defp unary1(:sign, :infinity), do: 1.0
  defp unary1(:sign, :neg_infinity), do: -1.0
  defp unary1(:sign, x) when is_integer(x), do: sign(x)
  defp unary1(:sign, x), do: sign(x) * 1.0
  defp unary1(:logical_not, x), do: if(truthy(x), do: 0, else: 1)
  defp unary1(:is_nan, x), do: bool(x == :nan)
  defp unary1(:is_infinity, x), do: bool(inf?(x))
  # ~~~x wraps into the type like any integer result
  defp unary1(:bitwise_not, x), do: bnot(x)
  defp unary1(op, x) when op in [:floor, :ceil, :round] and (is_integer(x) or is_atom(x)), do: x
  defp unary1(:floor, x), do: Float.floor(x)
  defp unary1(:ceil, x), do: Float.ceil(x)
  # Kernel.round/1 rounds halves away from zero, as Nx does
  defp unary1(:round, x), do: round(x) * 1.0
  defp unary1(_op, :nan), do: :nan
  defp unary1(:exp, :infinity), do: :infinity
  defp unary1(:exp, :neg_infinity), do: 0.0
  defp unary1(:exp, x), do: if(x > 709.0, do: :infinity, else: :math.exp(x))
  defp unary1(:expm1, :infinity), do: :infinity
  defp unary1(:expm1, :neg_infinity), do: -1.0
  defp unary1(:expm1, x), do: if(x > 709.0, do: :infinity, else: expm1(x))
  defp unary1(:log, x), do: log_at(x, 0)
  defp unary1(:log1p, x), do: log_at(x, -1)
  defp unary1(:sqrt, :infinity), do: :infinity
  defp unary1(:sqrt, x) when is_atom(x) or x < 0, do: :nan
  defp unary1(:sqrt, x), do: :math.sqrt(x)
  defp unary1(:rsqrt, x), do: divide(1.0, unary1(:sqrt, x))
  defp unary1(op, x) when op in [:sin, :cos] and is_atom(x), do: :nan
  defp unary1(:sin, x), do: :math.sin(x)
  defp unary1(:cos, x), do: :math.cos(x)
  defp unary1(op, :infinity) when op in [:tanh, :sigmoid, :erf], do: 1.0
  defp unary1(:sigmoid, :neg_infinity), do: 0.0
  defp unary1(op, :neg_infinity) when op in [:tanh, :erf], do: -1.0
  defp unary1(:tanh, x), do: :math.tanh(x)
  defp unary1(:erf, x), do: :math.erf(x)
  # the form that cannot overflow, either side of zero
  defp unary1(:sigmoid, x) when x >= 0, do: 1.0 / (1.0 + :math.exp(-x))
  defp unary1(:sigmoid, x), do: :math.exp(x) / (1.0 + :math.exp(x))
  defp unary1(:reciprocal, x), do: divide(1.0, x)
  @half_pi :math.pi() / 2
  # the functions Nx has beyond the common ones, as C99 Annex F defines them at NaN (above),
  # infinities and the ends of their domains
  defp unary1(:erfc, :infinity), do: 0.0
  defp unary1(:erfc, :neg_infinity), do: 2.0
  defp unary1(:erfc, x), do: :math.erfc(x)
  defp unary1(:erf_inv, x) when is_atom(x) or x < -1 or x > 1, do: :nan
  defp unary1(:erf_inv, x) when x == 1, do: :infinity
  defp unary1(:erf_inv, x) when x == -1, do: :neg_infinity
  defp unary1(:erf_inv, x) when x == 0, do: x
  defp unary1(:erf_inv, x) when x < 0, do: -erf_inv(-x)
  defp unary1(:erf_inv, x), do: erf_inv(x)
  defp unary1(op, x) when op in [:tan, :asin, :acos] and is_atom(x), do: :nan
  defp unary1(op, x) when op in [:asin, :acos] and abs(x) > 1, do: :nan
  defp unary1(:tan, x), do: :math.tan(x)
  defp unary1(:asin, x), do: :math.asin(x)
  defp unary1(:acos, x), do: :math.acos(x)
  defp unary1(:atan, :infinity), do: @half_pi
  defp unary1(:atan, :neg_infinity), do: -@half_pi
  defp unary1(:atan, x), do: :math.atan(x)
  defp unary1(op, x) when op in [:sinh, :asinh, :cbrt] and is_atom(x), do: x
  defp unary1(:cosh, x) when is_atom(x), do: :infinity
  defp unary1(:sinh, x), do: finite(fn -> :math.sinh(x) end, sgn(x))
  defp unary1(:cosh, x), do: finite(fn -> :math.cosh(x) end, 1)
  defp unary1(:asinh, x), do: :math.asinh(x)
  defp unary1(:acosh, :infinity), do: :infinity
  defp unary1(:acosh, x) when is_atom(x) or x < 1, do: :nan
  defp unary1(:acosh, x), do: :math.acosh(x)
  defp unary1(:atanh, x) when is_atom(x) or abs(x) > 1, do: :nan
  defp unary1(:atanh, x) when x == 1, do: :infinity
  defp unary1(:atanh, x) when x == -1, do: :neg_infinity
  defp unary1(:atanh, x), do: :math.atanh(x)
  defp unary1(:cbrt, x) when x == 0, do: x
  defp unary1(:cbrt, x) when x < 0, do: -cbrt(-x)
  defp unary1(:cbrt, x), do: cbrt(x)

  # the cube root of x > 0: pow, then one Newton step, to f64 accuracy
  defp cbrt(x) do
    y = :math.pow(x, 1 / 3)
    y - (y * y * y - x) / (3 * y * y)
  end

  # erf_inv of 0 < a < 1 by bisection to the last bit of f64: on erf below 0.5, on
  # erfc(x) = 1 - a above, where 1 - a keeps its digits
  # (below 0.5, erf_inv(a) lies between 0.88 a and 0.96 a: the bracket is relative to a)
  defp erf_inv(a) when a <= 0.5, do: bisect(fn x -> :math.erf(x) < a end, 0.8 * a, a, 80)
  defp erf_inv(a), do: bisect(fn x -> :math.erfc(x) > 1 - a end, 0.0, 27.0, 80)

  defp bisect(_below?, lo, hi, 0), do: (lo + hi) / 2

  defp bisect(below?, lo, hi, n) do
    mid = (lo + hi) / 2

    cond do
      mid == lo or mid == hi -> mid
      below?.(mid) -> bisect(below?, mid, hi, n - 1)
      true -> bisect(below?, lo, mid, n - 1)
    end
  end

  # log(x) (pole 0) or log1p(x) (pole -1): -infinity at the pole, NaN below it
  defp log_at(:infinity, _pole), do: :infinity
  defp log_at(:neg_infinity, _pole), do: :nan
  defp log_at(x, pole) when x < pole, do: :nan
  defp log_at(x, pole) when x == pole, do: :neg_infinity
  defp log_at(x, 0), do: :math.log(x)
  defp log_at(x, -1), do: log1p(x)

  defp neg(:nan), do: :nan
  defp neg(:infinity), do: :neg_infinity
  defp neg(:neg_infinity), do: :infinity
  defp neg(x), do: -x

  defp sign(x) when x > 0, do: 1
  defp sign(x) when x < 0, do: -1
  defp sign(_), do: 0

  # the sign of a non-NaN value, from the sign bit for zeros
  defp sgn(:infinity), do: 1
  defp sgn(:neg_infinity), do: -1
  defp sgn(x) when x == 0, do: if(negative_zero?(x), do: -1, else: 1)
  defp sgn(x), do: if(x < 0, do: -1, else: 1)

  defp negative_zero?(x), do: is_float(x) and <<x::float-64>> == <<1::1, 0::63>>

  defp inf(s) when s > 0, do: :infinity
  defp inf(_), do: :neg_infinity

  defp inf?(x), do: x in [:infinity, :neg_infinity]

  # A finite f64 result, or an infinity where it would overflow f64.
  defp finite(fun, sign) do
    fun.()
  rescue
    ArithmeticError -> inf(sign)
  end

  # :math has neither expm1 nor log1p; Kahan's formulations keep f64 accuracy near zero.
  @doc false
  def expm1(x) do
    u = :math.exp(x)

    cond do
      u == 1.0 -> x
      u - 1.0 == -1.0 -> -1.0
      true -> (u - 1.0) * x / :math.log(u)
    end
  end

  @doc false
  def log1p(x) do
    u = 1.0 + x
    if u == 1.0, do: x, else: :math.log(u) * x / (u - 1.0)
  end

  defp add(x, y) when is_number(x) and is_number(y), do: x + y

  defp add(x, y) do
    cond do
      nan?(x) or nan?(y) -> :nan
      inf?(x) and inf?(y) -> if x == y, do: x, else: :nan
      inf?(x) -> x
      true -> y
    end
  end

  defp multiply(x, y) when is_number(x) and is_number(y),
    do: finite(fn -> x * y end, sgn(x) * sgn(y))

  defp multiply(x, y) do
    cond do
      nan?(x) or nan?(y) -> :nan
      x == 0 or y == 0 -> :nan
      true -> inf(sgn(x) * sgn(y))
    end
  end

  defp divide(x, y) do
    cond do
      nan?(x) or nan?(y) -> :nan
      inf?(x) and inf?(y) -> :nan
      inf?(x) -> inf(sgn(x) * sgn(y))
      inf?(y) -> 0.0
      y == 0 -> if x == 0, do: :nan, else: inf(sgn(x) * sgn(y))
      true -> finite(fn -> x / y end, sgn(x) * sgn(y))
    end
  end

  # pow as C99 Annex F defines it (F.9.4.4)
  defp pow(x, y) do
    integer? = is_float(y) and Float.floor(y) == y
    odd? = integer? and abs(y) < 9.0e15 and rem(trunc(y), 2) != 0

    cond do
      y == 0 -> 1.0
      x == 1.0 -> 1.0
      nan?(x) or nan?(y) -> :nan
      x == 0 -> if gt(y, 0), do: 0.0, else: inf(if(odd?, do: sgn(x), else: 1))
      y == :infinity -> pow_inf(abs_of(x), :infinity)
      y == :neg_infinity -> pow_inf(abs_of(x), :neg_infinity)
      x == :infinity -> if gt(y, 0), do: :infinity, else: 0.0
      x == :neg_infinity -> if gt(y, 0), do: inf(if(odd?, do: -1, else: 1)), else: 0.0
      x < 0 and not integer? -> :nan
      x < 0 -> finite(fn -> :math.pow(x, y) end, if(odd?, do: -1, else: 1))
      true -> finite(fn -> :math.pow(x, y) end, 1)
    end
  end

  defp abs_of(:neg_infinity), do: :infinity
  defp abs_of(x), do: unary1(:abs, x)

  # |x| ^ +-infinity
  defp pow_inf(ax, y) do
    cond do
      ax == 1.0 -> 1.0
      gt(ax, 1.0) == (y == :infinity) -> :infinity
      true -> 0.0
    end
  end

  defp remainder(x, y) do
    cond do
      nan?(x) or nan?(y) or inf?(x) or y == 0 -> :nan
      inf?(y) -> x
      true -> :math.fmod(x, y)
    end
  end

  @pi :math.pi()

  defp atan2(y, x) do
    cond do
      nan?(x) or nan?(y) -> :nan
      inf?(y) and inf?(x) -> sgn(y) * if(x == :infinity, do: @pi / 4, else: 3 * @pi / 4)
      inf?(y) -> sgn(y) * @pi / 2
      x == :infinity -> 0.0
      x == :neg_infinity -> sgn(y) * @pi
      true -> :math.atan2(y, x)
    end
  end

  defp binary1(:add, x, y), do: add(x, y)
  defp binary1(:subtract, x, y), do: add(x, neg(y))
  defp binary1(:multiply, x, y) when is_integer(x) and is_integer(y), do: x * y
  defp binary1(:multiply, x, y), do: multiply(x, y)
  defp binary1(:divide, x, y), do: divide(x, y)
  defp binary1(:pow, x, y) when is_integer(x) and is_integer(y) and y >= 0, do: Integer.pow(x, y)
  defp binary1(:pow, x, y), do: pow(x, y)

  defp binary1(:max, x, y),
    do: if(nan?(x) or nan?(y), do: :nan, else: if(gt(y, x), do: y, else: x))

  defp binary1(:min, x, y),
    do: if(nan?(x) or nan?(y), do: :nan, else: if(gt(x, y), do: y, else: x))

  defp binary1(:remainder, x, y) when is_integer(x) and is_integer(y),
    do: if(y == 0, do: 0, else: rem(x, y))

  defp binary1(:remainder, x, y), do: remainder(x, y)
  defp binary1(:atan2, x, y), do: atan2(x, y)
  defp binary1(:bitwise_and, x, y), do: band(x, y)
  defp binary1(:bitwise_or, x, y), do: bor(x, y)
  defp binary1(:bitwise_xor, x, y), do: bxor(x, y)
  # Elixir's bsl/bsr on the values (Nx.BinaryBackend's rule), then wrapped into the type; a
  # count beyond 100 shifts like 100 once wrapped into 64 bits (and keeps the numbers small)
  defp binary1(:left_shift, x, y), do: bsl(x, max(min(y, 100), -100))
  defp binary1(:right_shift, x, y), do: bsr(x, max(min(y, 100), -100))
  defp binary1(:quotient, _x, 0), do: 0
  defp binary1(:quotient, x, y), do: div(x, y)
  defp binary1(:equal, x, y), do: bool(not nan?(x) and not nan?(y) and x == y)
  defp binary1(:not_equal, x, y), do: bool(nan?(x) or nan?(y) or x != y)
  defp binary1(:less, x, y), do: bool(gt(y, x))
  defp binary1(:less_equal, x, y), do: bool(gt(y, x) or (not nan?(x) and x == y))
  defp binary1(:greater, x, y), do: bool(gt(x, y))
  defp binary1(:greater_equal, x, y), do: bool(gt(x, y) or (not nan?(x) and x == y))
  defp binary1(:logical_and, x, y), do: bool(truthy(x) and truthy(y))
  defp binary1(:logical_or, x, y), do: bool(truthy(x) or truthy(y))
  defp binary1(:logical_xor, x, y), do: bool(truthy(x) != truthy(y))

  defp bool(true), do: 1
  defp bool(false), do: 0

  defp nan?(x), do: x == :nan

  # Ordering on numbers and infinities; false whenever a NaN is involved.
  defp gt(x, y) do
    cond do
      nan?(x) or nan?(y) -> false
      x == y -> false
      x == :infinity or y == :neg_infinity -> true
      x == :neg_infinity or y == :infinity -> false
      true -> x > y
    end
  end

  ## Reductions

  @doc """
  sum, product, reduce_max, reduce_min, all, any over `axes` (all when nil), with
  `keep_axes`. `type` is the input's type: it gives the identity of empty reductions
  (reduce_max of nothing is -infinity for floats and the type's minimum for integers).
  """
  def reduce(op, {shape, data}, type, axes \\ nil, keep_axes \\ false) do
    rank = tuple_size(shape)
    axes = normalize_axes(axes, rank)
    dims = Tuple.to_list(shape)

    out_dims =
      dims
      |> Enum.with_index()
      |> Enum.flat_map(fn {d, k} ->
        cond do
          k not in axes -> [d]
          keep_axes -> [1]
          true -> []
        end
      end)

    out_shape = List.to_tuple(out_dims)
    kept = for k <- 0..(rank - 1)//1, k not in axes, do: k
    kept_shape = List.to_tuple(for k <- kept, do: elem(shape, k))
    kept_strides = strides(kept_shape)

    groups =
      indices(shape)
      |> Enum.zip(data)
      |> Enum.group_by(
        fn {index, _} -> index |> pick(kept) |> offset(kept_strides) end,
        fn {_, x} -> x end
      )

    out =
      for o <- 0..(size(out_shape) - 1)//1 do
        Enum.reduce(Map.get(groups, o, []), identity(op, type), &fold(op, &2, &1))
      end

    {out_shape, out}
  end

  defp identity(:sum, type), do: if(float?(type), do: 0.0, else: 0)
  defp identity(:product, type), do: if(float?(type), do: 1.0, else: 1)

  defp identity(:reduce_max, type),
    do: if(float?(type), do: :neg_infinity, else: elem(int_range(type), 0))

  defp identity(:reduce_min, type),
    do: if(float?(type), do: :infinity, else: elem(int_range(type), 1))

  defp identity(:all, _), do: 1
  defp identity(:any, _), do: 0

  defp fold(:sum, acc, x), do: add(acc, x)
  defp fold(:product, acc, x), do: binary1(:multiply, acc, x)
  defp fold(:reduce_max, acc, x), do: binary1(:max, acc, x)
  defp fold(:reduce_min, acc, x), do: binary1(:min, acc, x)
  defp fold(:all, acc, x), do: bool(acc == 1 and truthy(x))
  defp fold(:any, acc, x), do: bool(acc == 1 or truthy(x))

  # a tensor of `shape` as lines along `axis`: {the lines' length, the lines' blocks, the
  # lines of a block} (a scalar is one line of one)
  defp lines(shape, axis) do
    rank = tuple_size(shape)
    axis = if rank == 0, do: 0, else: normalize_axis(axis, rank)
    dims = Tuple.to_list(shape)
    n = if rank == 0, do: 1, else: elem(shape, axis)
    {n, dims |> Enum.take(axis) |> Enum.product(), dims |> Enum.drop(axis + 1) |> Enum.product()}
  end

  @doc """
  cumulative_sum/product/max/min along `axis`, from the end when `reverse`: element i of a line
  is the fold of the line up to i, starting from the line's first element.
  """
  def scan(op, {shape, data}, axis, reverse) do
    {n, outer, inner} = lines(shape, axis)
    flat = List.to_tuple(data)

    f =
      case op do
        :cumulative_sum -> :sum
        :cumulative_product -> :product
        :cumulative_max -> :reduce_max
        :cumulative_min -> :reduce_min
      end

    placed =
      for o <- 0..(outer - 1)//1, c <- 0..(inner - 1)//1, n > 0 do
        order = if reverse, do: (n - 1)..0//-1, else: 0..(n - 1)
        at = fn j -> (o * n + j) * inner + c end

        {line, _} =
          Enum.map_reduce(order, nil, fn j, acc ->
            x = elem(flat, at.(j))
            acc = if acc == nil, do: x, else: fold(f, acc, x)
            {{at.(j), acc}, acc}
          end)

        line
      end

    {shape, placed |> List.flatten() |> Enum.sort() |> Enum.map(&elem(&1, 1))}
  end

  @doc """
  sort (`what: :values`) or argsort (`what: :positions`) along `axis`, stably, as Nx: ascending
  puts NaN last, descending first; -0.0 equals 0.0 (Erlang compares them equal), so they keep
  their order.
  """
  def sort({shape, data}, axis, direction, what) do
    {n, outer, inner} = lines(shape, axis)
    flat = List.to_tuple(data)
    key = if direction == :asc, do: &asc_key/1, else: &desc_key/1

    placed =
      for o <- 0..(outer - 1)//1, c <- 0..(inner - 1)//1, n > 0 do
        line = for j <- 0..(n - 1), do: {j, elem(flat, (o * n + j) * inner + c)}
        sorted = Enum.sort_by(line, fn {_, x} -> key.(x) end, &<=/2)

        sorted
        |> Enum.with_index()
        |> Enum.map(fn {{p, x}, j} ->
          {(o * n + j) * inner + c, if(what == :values, do: x, else: p)}
        end)
      end

    out = placed |> List.flatten() |> Enum.sort() |> Enum.map(&elem(&1, 1))
    {shape, out}
  end

  defp asc_key(:neg_infinity), do: {0, 0}
  defp asc_key(:infinity), do: {2, 0}
  defp asc_key(:nan), do: {3, 0}
  defp asc_key(x), do: {1, x}

  defp desc_key(:nan), do: {0, 0}
  defp desc_key(:infinity), do: {1, 0}
  defp desc_key(:neg_infinity), do: {3, 0}
  defp desc_key(x), do: {2, -x}

  @doc """
  argmax/argmin along `axis` (of the flattened tensor when nil). `tie_break` :low picks the
  first of equal extremes, :high the last; NaN counts as the extreme (the first NaN when ties
  go low, the last when they go high).
  """
  def argreduce(op, {shape, data}, axis \\ nil, tie_break \\ :low, keep_axis \\ false) do
    rank = tuple_size(shape)

    {out_shape, groups} =
      case axis do
        nil ->
          out = if keep_axis, do: List.to_tuple(List.duplicate(1, rank)), else: {}
          {out, [data]}

        axis ->
          axis = normalize_axis(axis, rank)

          {shape_out, _} =
            reduce(:sum, {shape, Enum.map(data, fn _ -> 0 end)}, :s64, [axis], keep_axis)

          kept = for k <- 0..(rank - 1)//1, k != axis, do: k
          kept_strides = strides(List.to_tuple(for k <- kept, do: elem(shape, k)))

          by =
            indices(shape)
            |> Enum.zip(data)
            |> Enum.group_by(
              fn {i, _} -> i |> pick(kept) |> offset(kept_strides) end,
              &elem(&1, 1)
            )

          {shape_out, for(o <- 0..(size(shape_out) - 1)//1, do: Map.fetch!(by, o))}
      end

    {out_shape, Enum.map(groups, &best_index(op, &1, tie_break))}
  end

  defp best_index(op, values, tie_break) do
    values
    |> Enum.with_index()
    |> Enum.reduce(nil, fn
      {x, i}, nil ->
        {x, i}

      {x, i}, {b, _} = best ->
        better =
          cond do
            nan?(x) -> not nan?(b) or tie_break == :high
            nan?(b) -> false
            x == b -> tie_break == :high
            op == :argmax -> gt(x, b)
            true -> gt(b, x)
          end

        if better, do: {x, i}, else: best
    end)
    |> elem(1)
  end

  ## Layout

  @doc "reshape: the same elements, a new shape of the same size."
  def reshape({shape, data}, new_shape) do
    if size(shape) != size(new_shape), do: raise(ArgumentError, "cannot reshape")
    {new_shape, data}
  end

  @doc "transpose: output axis k is input axis `axes[k]` (reversed when nil)."
  def transpose({shape, data}, axes \\ nil) do
    rank = tuple_size(shape)
    axes = if axes, do: normalize_axes(axes, rank), else: Enum.to_list((rank - 1)..0//-1)
    out = List.to_tuple(for a <- axes, do: elem(shape, a))
    tuple = List.to_tuple(data)
    in_strides = strides(shape)
    # output coordinate k walks input axis axes[k]
    perm_strides = for a <- axes, do: Enum.at(in_strides, a)
    {out, for(index <- indices(out), do: elem(tuple, offset(index, perm_strides)))}
  end

  @doc "broadcast: repeats to `shape`; input axis k goes to output axis `axes[k]` (trailing when nil)."
  def broadcast({shape, data}, out, axes \\ nil) do
    rin = tuple_size(shape)
    rout = tuple_size(out)

    axes =
      if axes, do: normalize_axes(axes, rout), else: Enum.to_list((rout - rin)..(rout - 1)//1)

    tuple = List.to_tuple(data)
    in_strides = strides(shape)

    data =
      for index <- indices(out) do
        axes
        |> Enum.with_index()
        |> Enum.map(fn {a, k} -> if elem(shape, k) == 1, do: 0, else: Enum.at(index, a) end)
        |> offset(in_strides)
        |> then(&elem(tuple, &1))
      end

    {out, data}
  end

  @doc "squeeze: drops the size-1 axes in `axes` (all size-1 axes when nil)."
  def squeeze({shape, data}, axes \\ nil) do
    rank = tuple_size(shape)
    dims = Tuple.to_list(shape)

    axes =
      if axes,
        do: normalize_axes(axes, rank),
        else: for({1, k} <- Enum.with_index(dims), do: k)

    Enum.each(axes, fn a ->
      if elem(shape, a) != 1, do: raise(ArgumentError, "axis #{a} is not 1")
    end)

    out = for {d, k} <- Enum.with_index(dims), k not in axes, do: d
    {List.to_tuple(out), data}
  end

  @doc "slice: `lengths` elements from `start` every `strides`; starts clip into range as in Nx."
  def slice({shape, data}, start, lengths, strides \\ nil) do
    dims = Tuple.to_list(shape)
    strides = strides || List.duplicate(1, length(dims))
    start = clip_start(start, dims, lengths)

    out =
      Enum.zip_with([lengths, strides], fn [l, s] -> if l == 0, do: 0, else: div(l - 1, s) + 1 end)

    out = List.to_tuple(out)
    tuple = List.to_tuple(data)
    in_strides = strides(shape)

    data =
      for index <- indices(out) do
        Enum.zip_with([index, start, strides], fn [i, b, s] -> b + i * s end)
        |> offset(in_strides)
        |> then(&elem(tuple, &1))
      end

    {out, data}
  end

  defp clip_start(start, dims, lengths) do
    Enum.zip_with([start, dims, lengths], fn [b, d, l] -> b |> min(d - l) |> max(0) end)
  end

  @doc "put_slice: `t` with `slice` written at `start`, clipped so that it fits."
  def put_slice({shape, data}, start, {sshape, sdata}) do
    start = clip_start(start, Tuple.to_list(shape), Tuple.to_list(sshape))
    s_strides = strides(sshape)
    st = List.to_tuple(sdata)

    data =
      indices(shape)
      |> Enum.zip(data)
      |> Enum.map(fn {index, x} ->
        rel = Enum.zip_with(index, start, &(&1 - &2))

        if Enum.all?(Enum.zip(rel, Tuple.to_list(sshape)), fn {r, d} -> r >= 0 and r < d end),
          do: elem(st, offset(rel, s_strides)),
          else: x
      end)

    {shape, data}
  end

  @doc """
  pad: `{low, high, interior}` per axis; interior padding goes between elements, negative
  low/high crop. Input index j of an axis lands at `low + j * (interior + 1)`.
  """
  def pad({shape, data}, value, pads) do
    dims = Tuple.to_list(shape)

    out =
      Enum.zip_with(dims, pads, fn d, {lo, hi, interior} ->
        lo + hi + if(d == 0, do: 0, else: d + (d - 1) * interior)
      end)

    out_shape = List.to_tuple(out)
    out_strides = strides(out_shape)

    placed =
      indices(shape)
      |> Enum.zip(data)
      |> Enum.flat_map(fn {index, x} ->
        pos = Enum.zip_with(index, pads, fn j, {lo, _, interior} -> lo + j * (interior + 1) end)

        if Enum.all?(Enum.zip(pos, out), fn {p, d} -> p >= 0 and p < d end),
          do: [{offset(pos, out_strides), x}],
          else: []
      end)
      |> Map.new()

    {out_shape, for(o <- 0..(size(out_shape) - 1)//1, do: Map.get(placed, o, value))}
  end

  @doc "reverse: reverses the order along `axes` (all when nil)."
  def reverse({shape, data}, axes \\ nil) do
    rank = tuple_size(shape)
    axes = normalize_axes(axes, rank)
    tuple = List.to_tuple(data)
    st = strides(shape)
    dims = Tuple.to_list(shape)

    data =
      for index <- indices(shape) do
        index
        |> Enum.with_index()
        |> Enum.map(fn {i, k} -> if k in axes, do: Enum.at(dims, k) - 1 - i, else: i end)
        |> offset(st)
        |> then(&elem(tuple, &1))
      end

    {shape, data}
  end

  @doc "concatenate: joins tensors along `axis`."
  def concatenate([{shape0, _} | _] = tensors, axis \\ 0) do
    rank = tuple_size(shape0)
    axis = normalize_axis(axis, rank)
    total = tensors |> Enum.map(fn {s, _} -> elem(s, axis) end) |> Enum.sum()
    out = put_elem(shape0, axis, total)
    # every tensor as rows of "outer" blocks: outer = product of the axes before `axis`
    outer = shape0 |> Tuple.to_list() |> Enum.take(axis) |> Enum.product()

    blocks =
      for {s, d} <- tensors do
        chunk = div(size(s), max(outer, 1))
        if chunk == 0, do: List.duplicate([], outer), else: Enum.chunk_every(d, chunk)
      end

    data =
      if outer == 0,
        do: [],
        else: blocks |> Enum.zip_with(&Enum.concat/1) |> Enum.concat()

    {out, data}
  end

  @doc "take: the slices at `indices` along `axis`; the indices' shape replaces that axis."
  def take({shape, data}, {ishape, idata}, axis \\ 0) do
    rank = tuple_size(shape)
    axis = normalize_axis(axis, rank)
    dims = Tuple.to_list(shape)
    irank = tuple_size(ishape)

    out =
      List.to_tuple(Enum.take(dims, axis) ++ Tuple.to_list(ishape) ++ Enum.drop(dims, axis + 1))

    tuple = List.to_tuple(data)
    itup = List.to_tuple(idata)
    st = strides(shape)
    ist = strides(ishape)

    data =
      for index <- indices(out) do
        {pre, rest} = Enum.split(index, axis)
        {iidx, post} = Enum.split(rest, irank)
        elem(tuple, offset(pre ++ [elem(itup, offset(iidx, ist))] ++ post, st))
      end

    {out, data}
  end

  @doc "take_along_axis: element j along `axis` of each line is the line's element at indices[j]."
  def take_along_axis({shape, data}, {ishape, idata}, axis) do
    axis = normalize_axis(axis, tuple_size(shape))
    tuple = List.to_tuple(data)
    itup = List.to_tuple(idata)
    st = strides(shape)
    ist = strides(ishape)

    data =
      for index <- indices(ishape) do
        i = elem(itup, offset(index, ist))
        elem(tuple, offset(List.replace_at(index, axis, i), st))
      end

    {ishape, data}
  end

  @doc """
  gather: the last axis of `indices` lists coordinates along `axes` (the first ones when nil);
  the result's shape is the indices' shape without its last axis, then the tensor's other
  axes.
  """
  def gather({shape, data}, {ishape, idata}, axes \\ nil) do
    rank = tuple_size(shape)
    irank = tuple_size(ishape)
    k = elem(ishape, irank - 1)
    axes = if axes, do: normalize_axes(axes, rank), else: Enum.to_list(0..(k - 1)//1)
    free = for a <- 0..(rank - 1)//1, a not in axes, do: a
    batch = ishape |> Tuple.to_list() |> Enum.take(irank - 1)
    out = List.to_tuple(batch ++ Enum.map(free, &elem(shape, &1)))
    tuple = List.to_tuple(data)
    itup = List.to_tuple(idata)
    st = strides(shape)
    ist = strides(ishape)

    data =
      for index <- indices(out) do
        {b, rest} = Enum.split(index, irank - 1)

        coords =
          for j <- 0..(k - 1)//1,
              into: %{},
              do: {Enum.at(axes, j), elem(itup, offset(b ++ [j], ist))}

        frees = Enum.zip(free, rest) |> Map.new()
        pos = for a <- 0..(rank - 1)//1, do: Map.get(coords, a) || Map.fetch!(frees, a)
        elem(tuple, offset(pos, st))
      end

    {out, data}
  end

  @doc """
  The number of windows along each axis (a shape): positions o * stride - low whose window,
  `dilations` apart (1 when not given), lies inside the padded axis.
  """
  def window_shape(shape, window, strides, padding, dilations \\ nil) do
    for a <- 0..(tuple_size(shape) - 1)//1 do
      {lo, hi} = Enum.at(padding, a)
      eff = (elem(window, a) - 1) * if(dilations, do: Enum.at(dilations, a), else: 1) + 1
      padded = elem(shape, a) + lo + hi
      if padded >= eff, do: div(padded - eff, Enum.at(strides, a)) + 1, else: 0
    end
    |> List.to_tuple()
  end

  @doc """
  window_sum/product/max/min: each output element folds its window (positions
  o * stride + j * dilation - low per axis) from the fold's identity, which is also what the
  padding holds; `type` gives the identity of max and min for integers. Unrounded.
  """
  def window(op, {shape, data}, type, window, strides, padding, dilations) do
    rank = tuple_size(shape)
    tup = List.to_tuple(data)
    st = strides(shape)

    out_shape = window_shape(shape, window, strides, padding, dilations)
    {fold, start} = window_fold(op, type)

    out =
      for o <- indices(out_shape) do
        for w <- indices(window), reduce: start do
          acc ->
            pos =
              for a <- 0..(rank - 1)//1 do
                {lo, _} = Enum.at(padding, a)
                Enum.at(o, a) * Enum.at(strides, a) + Enum.at(w, a) * Enum.at(dilations, a) - lo
              end

            inside =
              Enum.with_index(pos) |> Enum.all?(fn {p, a} -> p >= 0 and p < elem(shape, a) end)

            if inside, do: fold.(acc, elem(tup, offset(pos, st))), else: acc
        end
      end

    {out_shape, out}
  end

  @doc """
  window_scatter_max/min: each window (in row-major order of `source`) selects the last position
  whose value is >= (max) or <= (min) the one selected so far, from its first; padding holds
  `value` rounded to `type`; the result starts as `value` and adds each source element at its
  window's position (dropped in the padding), rounding to `out_type` at every addition.
  """
  def window_scatter(
        op,
        {shape, data},
        type,
        {_sshape, sdata},
        value,
        out_type,
        window,
        strides,
        padding
      ) do
    rank = tuple_size(shape)
    tup = List.to_tuple(data)
    st = strides(shape)
    pad_value = round_to(value, type)
    better = if op == :window_scatter_max, do: &ge/2, else: &ge(&2, &1)

    src_shape = window_shape(shape, window, strides, padding)

    picks =
      for {o, v} <- Enum.zip(indices(src_shape), sdata) do
        {pos, _} =
          for {w, k} <- Enum.with_index(indices(window)), reduce: {nil, nil} do
            {best, acc} ->
              pos =
                for a <- 0..(rank - 1)//1 do
                  {lo, _} = Enum.at(padding, a)
                  Enum.at(o, a) * Enum.at(strides, a) + Enum.at(w, a) - lo
                end

              inside =
                Enum.with_index(pos) |> Enum.all?(fn {p, a} -> p >= 0 and p < elem(shape, a) end)

              x = if inside, do: elem(tup, offset(pos, st)), else: pad_value

              if k == 0 or better.(x, acc),
                do: {if(inside, do: pos, else: nil), x},
                else: {best, acc}
          end

        {pos, v}
      end

    start = round_to(value, out_type)

    sums =
      Enum.reduce(picks, %{}, fn
        {nil, _}, m ->
          m

        {pos, v}, m ->
          Map.update(
            m,
            offset(pos, st),
            round_to(add(start, v), out_type),
            &round_to(add(&1, v), out_type)
          )
      end)

    {shape, for(i <- 0..(length(data) - 1)//1, do: Map.get(sums, i, start))}
  end

  defp ge(x, acc), do: not nan?(x) and not nan?(acc) and (gt(x, acc) or x == acc)

  defp window_fold(:window_sum, type), do: {&add/2, if(float?(type), do: 0.0, else: 0)}

  defp window_fold(:window_product, type),
    do: {&binary1(:multiply, &1, &2), if(float?(type), do: 1.0, else: 1)}

  defp window_fold(:window_max, type), do: {&binary1(:max, &1, &2), identity(:reduce_max, type)}
  defp window_fold(:window_min, type), do: {&binary1(:min, &1, &2), identity(:reduce_min, type)}

  @doc """
  indexed_add (`op: :add`) and indexed_put (`op: :put`): each index row of `indices` (last axis:
  positions along `axes`) updates the block of the target's other axes from its slice of
  `updates`. :add sums the updates at a position in order (from 0), then adds the target's
  value; :put keeps the last. Values come back unrounded.
  """
  def indexed(op, {shape, data}, {ishape, idata}, {_ushape, udata}, axes \\ nil) do
    rank = tuple_size(shape)
    irank = tuple_size(ishape)
    k = elem(ishape, irank - 1)
    axes = if axes, do: normalize_axes(axes, rank), else: Enum.to_list(0..(k - 1)//1)
    free = for a <- 0..(rank - 1)//1, a not in axes, do: a
    rows = ishape |> Tuple.to_list() |> Enum.take(irank - 1) |> Enum.product()
    block_shape = List.to_tuple(Enum.map(free, &elem(shape, &1)))
    block = size(block_shape)
    st = strides(shape)
    itup = List.to_tuple(idata)
    utup = List.to_tuple(udata)

    updates =
      for r <- 0..(rows - 1)//1, {rest, e} <- Enum.with_index(indices(block_shape)), block > 0 do
        coords = Map.new(0..(k - 1)//1, fn j -> {Enum.at(axes, j), elem(itup, r * k + j)} end)
        frees = Enum.zip(free, rest) |> Map.new()
        pos = for a <- 0..(rank - 1)//1, do: Map.get(coords, a) || Map.fetch!(frees, a)
        {offset(pos, st), elem(utup, r * block + e)}
      end

    grouped = Enum.group_by(updates, &elem(&1, 0), &elem(&1, 1))

    out =
      data
      |> Enum.with_index()
      |> Enum.map(fn {x, i} ->
        case {op, Map.fetch(grouped, i)} do
          {_, :error} -> x
          {:put, {:ok, ups}} -> List.last(ups)
          {:add, {:ok, ups}} -> add(x, Enum.reduce(ups, 0, &add(&2, &1)))
        end
      end)

    {shape, out}
  end

  ## Linear algebra

  @doc """
  triangular_solve in f64 by substitution, in the kernel's order (forward from the first
  column, back from the last, as Nx.BinaryBackend): `a` {..., m, m}; `b` {..., m, n} on the
  left side, {..., n, m} on the right, {..., m} for a vector per matrix. Only the triangle
  `lower` names is read. Finite values only.
  """
  def triangular_solve({ashape, adata}, {bshape, bdata}, lower, left, transpose) do
    ar = tuple_size(ashape)
    br = tuple_size(bshape)
    m = elem(ashape, ar - 1)
    vector = br == ar - 1
    k = if vector, do: 1, else: if(left, do: elem(bshape, br - 1), else: elem(bshape, br - 2))
    b_transposed = not vector and not left
    m_transposed = transpose != not left
    forward = lower != m_transposed
    batches = ashape |> Tuple.to_list() |> Enum.take(ar - 2) |> Enum.product()
    a = List.to_tuple(adata)
    b = List.to_tuple(bdata)

    data =
      for n <- 0..(batches - 1)//1, m > 0 and k > 0 do
        mat = fn i, j ->
          {r, c} = if m_transposed, do: {j, i}, else: {i, j}
          elem(a, n * m * m + r * m + c) * 1.0
        end

        at = fn i, c -> n * m * k + if(b_transposed, do: c * m + i, else: i * k + c) end
        rows = if forward, do: Enum.to_list(0..(m - 1)), else: Enum.to_list((m - 1)..0//-1)

        x =
          for c <- 0..(k - 1), reduce: %{} do
            x ->
              Enum.reduce(rows, x, fn i, x ->
                known = if forward, do: 0..(i - 1)//1, else: (m - 1)..(i + 1)//-1
                sum = Enum.reduce(known, 0.0, fn j, acc -> acc + mat.(i, j) * x[{j, c}] end)
                Map.put(x, {i, c}, (elem(b, at.(i, c)) - sum) / mat.(i, i))
              end)
          end

        for p <- 0..(m * k - 1) do
          {i, c} = if b_transposed, do: {rem(p, m), div(p, m)}, else: {div(p, k), rem(p, k)}
          x[{i, c}]
        end
      end

    {bshape, List.flatten(data)}
  end

  @doc """
  lu_factor in f64: LAPACK getf2's elimination with partial pivoting (the first largest
  magnitude of the column; a zero pivot skips the column), packed as {..., n + 1, n}: L below
  the diagonal, U on and above it, then the permutation row. Finite values only.
  """
  def lu_factor({shape, data}) do
    rank = tuple_size(shape)
    n = elem(shape, rank - 1)
    batches = shape |> Tuple.to_list() |> Enum.take(rank - 2) |> Enum.product()
    flat = List.to_tuple(data)

    out =
      for b <- 0..(batches - 1)//1, n > 0 do
        w =
          for i <- 0..(n - 1),
              j <- 0..(n - 1),
              into: %{},
              do: {{i, j}, elem(flat, b * n * n + i * n + j) * 1.0}

        {w, perm} =
          Enum.reduce(0..(n - 1), {w, Enum.to_list(0..(n - 1))}, fn j, {w, perm} ->
            p =
              Enum.reduce((j + 1)..(n - 1)//1, j, fn i, p ->
                if abs(w[{i, j}]) > abs(w[{p, j}]), do: i, else: p
              end)

            {w, perm} =
              if p == j,
                do: {w, perm},
                else:
                  {Enum.reduce(0..(n - 1), w, fn c, w ->
                     w |> Map.put({j, c}, w[{p, c}]) |> Map.put({p, c}, w[{j, c}])
                   end),
                   perm
                   |> List.replace_at(j, Enum.at(perm, p))
                   |> List.replace_at(p, Enum.at(perm, j))}

            pivot = w[{j, j}]

            w =
              if pivot == 0,
                do: w,
                else:
                  Enum.reduce((j + 1)..(n - 1)//1, w, fn i, w ->
                    l = w[{i, j}] / pivot
                    w = Map.put(w, {i, j}, l)

                    Enum.reduce((j + 1)..(n - 1)//1, w, fn c, w ->
                      Map.put(w, {i, c}, w[{i, c}] - l * w[{j, c}])
                    end)
                  end)

            {w, perm}
          end)

        for(i <- 0..(n - 1), j <- 0..(n - 1), do: w[{i, j}]) ++ Enum.map(perm, &(&1 * 1.0))
      end

    {put_elem(shape, rank - 2, n + 1), List.flatten(out)}
  end

  ## Dot

  @doc "dot/2 as Nx.dot/2: contracts the last axis of `a` with the second to last (or only) of `b`."
  def dot({sa, _} = a, {sb, _} = b) do
    ra = tuple_size(sa)
    rb = tuple_size(sb)

    if ra == 0 or rb == 0,
      do: dot(a, [], [], b, [], []),
      else: dot(a, [ra - 1], [], b, [if(rb >= 2, do: rb - 2, else: 0)], [])
  end

  @doc """
  dot/6 as Nx.dot/6: the result's axes are the batch axes, then the free axes of `a`, then
  those of `b`. Sums the products over the contracted axes in f64 (exactly for integers).
  """
  def dot({sa, da}, ca, ba, {sb, db}, cb, bb) do
    ra = tuple_size(sa)
    rb = tuple_size(sb)
    [ca, ba] = Enum.map([ca, ba], &normalize_axes(&1, ra))
    [cb, bb] = Enum.map([cb, bb], &normalize_axes(&1, rb))
    free_a = for k <- 0..(ra - 1)//1, k not in ca and k not in ba, do: k
    free_b = for k <- 0..(rb - 1)//1, k not in cb and k not in bb, do: k
    nb = length(ba)
    nfa = length(free_a)

    out =
      List.to_tuple(
        Enum.map(ba, &elem(sa, &1)) ++
          Enum.map(free_a, &elem(sa, &1)) ++ Enum.map(free_b, &elem(sb, &1))
      )

    contract = List.to_tuple(Enum.map(ca, &elem(sa, &1)))
    ta = List.to_tuple(da)
    tb = List.to_tuple(db)
    sta = List.to_tuple(strides(sa))
    stb = List.to_tuple(strides(sb))
    zero = if Enum.all?(da ++ db, &is_integer/1), do: 0, else: 0.0
    # offsets of every contracted position in each operand
    coff_a = for c <- indices(contract), do: offset(c, Enum.map(ca, &elem(sta, &1)))
    coff_b = for c <- indices(contract), do: offset(c, Enum.map(cb, &elem(stb, &1)))
    # an output index is (batch, free of a, free of b): its base offset in each operand
    out_a = Enum.map(ba, &elem(sta, &1)) ++ Enum.map(free_a, &elem(sta, &1))

    out_b =
      Enum.map(bb, &elem(stb, &1)) ++ List.duplicate(0, nfa) ++ Enum.map(free_b, &elem(stb, &1))

    data =
      for index <- indices(out) do
        base_a = offset(Enum.take(index, nb + nfa), out_a)
        base_b = offset(index, out_b)

        Enum.zip_reduce(coff_a, coff_b, zero, fn oa, ob, acc ->
          acc + elem(ta, base_a + oa) * elem(tb, base_b + ob)
        end)
      end

    {out, data}
  end

  ## Creation

  @doc "full: `shape` filled with `value`."
  def full(value, shape), do: {shape, List.duplicate(value, size(shape))}

  @doc "iota: counts along `axis`, or across the whole tensor in row-major order when nil."
  def iota(shape, axis \\ nil) do
    case axis do
      nil ->
        {shape, Enum.to_list(0..(size(shape) - 1)//1)}

      axis ->
        {shape,
         for(index <- indices(shape), do: Enum.at(index, normalize_axis(axis, tuple_size(shape))))}
    end
  end

  @doc "eye: ones on the diagonal of the last two axes."
  def eye(shape) do
    {shape,
     for(
       index <- indices(shape),
       do: if(Enum.take(index, -2) |> then(fn [i, j] -> i == j end), do: 1, else: 0)
     )}
  end

  ## Random (Philox-4x32-10, as c_src/core/philox.h defines the element mapping)

  @m32 0xFFFFFFFF

  @doc "The Philox-4x32-10 block for `key` and `counter`, as a 4-tuple of 32-bit words."
  def philox(key, counter) do
    c = {counter &&& @m32, counter >>> 32 &&& @m32, 0, 0}
    k = {key &&& @m32, key >>> 32 &&& @m32}

    {c, _} =
      Enum.reduce(1..10, {c, k}, fn _, {{c0, c1, c2, c3}, {k0, k1}} ->
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        n0 = bxor(bxor(p1 >>> 32, c1), k0)
        n2 = bxor(bxor(p0 >>> 32, c3), k1)
        {{n0, p1 &&& @m32, n2, p0 &&& @m32}, {k0 + 0x9E3779B9 &&& @m32, k1 + 0xBB67AE85 &&& @m32}}
      end)

    c
  end

  @doc """
  Uniform [0, 1) of element i: 24 bits (word i % 4 of block i / 4) for f32/f16/bf16 tensors,
  53 bits (words 2(i % 2), 2(i % 2) + 1 of block i / 2) for f64 ones.
  """
  def uniform01(key, i, :f64) do
    b = philox(key, div(i, 2))
    hi = elem(b, 2 * rem(i, 2))
    lo = elem(b, 2 * rem(i, 2) + 1)
    (hi <<< 21 ||| lo >>> 11) * :math.pow(2, -53)
  end

  def uniform01(key, i, _type) do
    w = elem(philox(key, div(i, 4)), rem(i, 4))
    (w >>> 8) * :math.pow(2, -24)
  end

  @doc """
  Standard normal of element i by Box-Muller, in f64: for f32/f16/bf16, block i / 4, words
  (2p, 2p + 1) with p = (i % 4) / 2 give u1 in (0, 1] and u2 in [0, 1); even i takes
  r cos(2 pi u2), odd r sin. For f64, block i / 2, u1 from words 0, 1 and u2 from 2, 3.
  """
  def normal(key, i, :f64) do
    {w0, w1, w2, w3} = philox(key, div(i, 2))
    u1 = ((w0 <<< 21 ||| w1 >>> 11) + 1) * :math.pow(2, -53)
    u2 = (w2 <<< 21 ||| w3 >>> 11) * :math.pow(2, -53)
    box_muller(u1, u2, i)
  end

  def normal(key, i, _type) do
    b = philox(key, div(i, 4))
    p = div(rem(i, 4), 2)
    u1 = ((elem(b, 2 * p) >>> 8) + 1) * :math.pow(2, -24)
    u2 = (elem(b, 2 * p + 1) >>> 8) * :math.pow(2, -24)
    box_muller(u1, u2, i)
  end

  defp box_muller(u1, u2, i) do
    r = :math.sqrt(-2.0 * :math.log(u1))
    a = 6.283185307179586 * u2
    if rem(i, 2) == 1, do: r * :math.sin(a), else: r * :math.cos(a)
  end
end
