defmodule Cascade.Type do
  @moduledoc """
  Element types, written as Nx writes them: `{:f, 32}` or the shorthand `:f32`.

  | type     | tuple        | bytes |
  |----------|--------------|-------|
  | `:f16`   | `{:f, 16}`   | 2     |
  | `:bf16`  | `{:bf, 16}`  | 2     |
  | `:f32`   | `{:f, 32}`   | 4     |
  | `:f64`   | `{:f, 64}`   | 8     |
  | `:u8`    | `{:u, 8}`    | 1     |
  | `:s32`   | `{:s, 32}`   | 4     |
  | `:s64`   | `{:s, 64}`   | 8     |
  | `:s8`    | `{:s, 8}`    | 1     |
  | `:s16`   | `{:s, 16}`   | 2     |
  | `:u16`   | `{:u, 16}`   | 2     |
  | `:u32`   | `{:u, 32}`   | 4     |
  | `:u64`   | `{:u, 64}`   | 8     |
  | `:c64`   | `{:c, 64}`   | 8     |
  | `:c128`  | `{:c, 128}`  | 16    |

  Mixed types promote as in Nx: floats win over integers, the wider type wins, f16 with
  bf16 gives f32, an unsigned type with a signed one gives a signed type twice as wide as the
  unsigned one (at most 64 bits) or the signed one when that is wider; a number keeps a
  tensor's type unless it is a float and the tensor holds integers, which gives f32. Sums and
  products of integers are s64, or u64 for unsigned types, as in Nx.

  Complex numbers (`:c64`, two f32; `:c128`, two f64) are written `{re, im}` in lists: a
  tensor built from `[{1.0, 2.0}]` holds 1 + 2i, and `Cascade.to_list/1` gives such tuples
  back (a plain number is accepted too, as a complex number with no imaginary part). A complex
  type wins over every other and keeps its width, as in Nx (c64 with f64 is c64).
  """

  import Bitwise, only: [<<<: 2, >>>: 2, &&&: 2]

  @types [
    f16: {:f, 16},
    bf16: {:bf, 16},
    f32: {:f, 32},
    f64: {:f, 64},
    u8: {:u, 8},
    s32: {:s, 32},
    s64: {:s, 64},
    s8: {:s, 8},
    s16: {:s, 16},
    u16: {:u, 16},
    u32: {:u, 32},
    u64: {:u, 64},
    c64: {:c, 64},
    c128: {:c, 128}
  ]
  @names Keyword.keys(@types)

  @typedoc "A type atom such as `:f32`."
  @type name ::
          :f16
          | :bf16
          | :f32
          | :f64
          | :u8
          | :s32
          | :s64
          | :s8
          | :s16
          | :u16
          | :u32
          | :u64
          | :c64
          | :c128
  @typedoc "A type as Nx writes it, such as `{:f, 32}`."
  @type t ::
          {:f, 16 | 32 | 64}
          | {:bf, 16}
          | {:u, 8 | 16 | 32 | 64}
          | {:s, 8 | 16 | 32 | 64}
          | {:c, 64 | 128}

  @doc """
  The type atom for any accepted spelling; raises `ArgumentError` for an unknown one.

      iex> Cascade.Type.normalize!({:f, 32})
      :f32
      iex> Cascade.Type.normalize!(:bf16)
      :bf16
  """
  @spec normalize!(name | t) :: name
  for {name, tuple} <- @types do
    def normalize!(unquote(name)), do: unquote(name)
    def normalize!(unquote(tuple)), do: unquote(name)
  end

  def normalize!(other) do
    raise ArgumentError,
          "unknown type #{inspect(other)}, expected one of #{inspect(@names)} (or tuples such as {:f, 32})"
  end

  @doc """
  The `{kind, bits}` tuple of a type.

      iex> Cascade.Type.to_tuple(:u8)
      {:u, 8}
  """
  @spec to_tuple(name | t) :: t
  def to_tuple(type), do: Keyword.fetch!(@types, normalize!(type))

  @doc """
  Bytes per element.

      iex> Cascade.Type.byte_size(:bf16)
      2
  """
  @spec byte_size(name | t) :: pos_integer
  def byte_size(type), do: div(elem(to_tuple(type), 1), 8)

  @doc """
  Whether the type holds floats.

      iex> Cascade.Type.float?(:bf16)
      true
      iex> Cascade.Type.float?({:s, 32})
      false
  """
  @spec float?(name | t) :: boolean
  def float?(type), do: elem(to_tuple(type), 0) in [:f, :bf]

  @doc """
  Whether the type holds complex numbers.

      iex> Cascade.Type.complex?(:c64)
      true
      iex> Cascade.Type.complex?(:f64)
      false
  """
  @spec complex?(name | t) :: boolean
  def complex?(type), do: elem(to_tuple(type), 0) == :c

  @doc """
  The type two operands are computed in (Nx.Type.merge/2).

      iex> Cascade.Type.merge(:f16, :bf16)
      :f32
      iex> Cascade.Type.merge(:u8, :s32)
      :s32
      iex> Cascade.Type.merge(:u32, :s8)
      :s64
  """
  @spec merge(name, name) :: name
  def merge(same, same), do: same

  def merge(a, b) do
    case {to_tuple(a), to_tuple(b)} do
      {{:c, ba}, {:c, bb}} ->
        normalize!({:c, max(ba, bb)})

      {{:c, _}, _} ->
        a

      {_, {:c, _}} ->
        b

      {{ka, _}, {kb, _}} when ka in [:f, :bf] and kb in [:f, :bf] ->
        if a == :f64 or b == :f64, do: :f64, else: :f32

      {{ka, _}, _} when ka in [:f, :bf] ->
        a

      {_, {kb, _}} when kb in [:f, :bf] ->
        b

      {{k, ba}, {k, bb}} ->
        normalize!({k, max(ba, bb)})

      {{:u, ub}, {:s, sb}} ->
        normalize!({:s, max(min(ub * 2, 64), sb)})

      {{:s, sb}, {:u, ub}} ->
        normalize!({:s, max(min(ub * 2, 64), sb)})
    end
  end

  @doc """
  The type sums and products of `type` give (Nx.Type.to_aggregate/1): floats keep their type,
  signed integers give s64, unsigned ones u64.

      iex> Cascade.Type.to_aggregate(:u8)
      :u64
      iex> Cascade.Type.to_aggregate(:s16)
      :s64
  """
  @spec to_aggregate(name | t) :: name
  def to_aggregate(type) do
    case to_tuple(type) do
      {:u, _} -> :u64
      {:s, _} -> :s64
      _ -> normalize!(type)
    end
  end

  @doc """
  The type a number takes beside a tensor of type `type` (Nx.Type.merge_number/2).

      iex> Cascade.Type.merge_number(:s32, 2.5)
      :f32
      iex> Cascade.Type.merge_number(:f16, 2)
      :f16
  """
  @spec merge_number(name, number | atom) :: name
  def merge_number(type, number) when is_integer(number), do: type

  def merge_number(type, _float),
    do: if(float?(type) or complex?(type), do: type, else: :f32)

  @doc """
  The type of a number on its own: s64 for integers, f32 for floats.

      iex> Cascade.Type.of_number(3)
      :s64
      iex> Cascade.Type.of_number(:nan)
      :f32
  """
  @spec of_number(number | :nan | :infinity | :neg_infinity) :: name
  def of_number(n) when is_integer(n), do: :s64
  def of_number(_), do: :f32

  @doc false
  def names, do: @names

  @doc """
  Encodes numbers as native-endian elements of `type`. Floats round to nearest even;
  integers wrap; a float given for an integer type truncates toward zero.

      iex> Cascade.Type.encode([1, 2], :u8)
      <<1, 2>>
  """
  @spec encode([number | atom], name) :: binary
  def encode(numbers, type) when is_list(numbers) do
    type = normalize!(type)
    for n <- numbers, into: <<>>, do: encode_one(n, type)
  end

  def encode(other, _type) do
    raise ArgumentError,
          "Cascade.Type.encode/2: expected a list of numbers, got: #{inspect(other, limit: 5)}"
  end

  @doc false
  def encode_one(n, :f32), do: float_bits(n, 32)
  def encode_one(n, :f64), do: float_bits(n, 64)
  def encode_one(n, :f16), do: float_bits(n, 16)
  def encode_one(n, :bf16), do: bf16_bits(n)
  def encode_one(n, :u8), do: <<to_int(n, :u8)::unsigned-8>>
  def encode_one(n, :s32), do: <<to_int(n, :s32)::signed-native-32>>
  def encode_one(n, :s64), do: <<to_int(n, :s64)::signed-native-64>>
  def encode_one(n, :s8), do: <<to_int(n, :s8)::signed-8>>
  def encode_one(n, :s16), do: <<to_int(n, :s16)::signed-native-16>>
  def encode_one(n, :u16), do: <<to_int(n, :u16)::unsigned-native-16>>
  def encode_one(n, :u32), do: <<to_int(n, :u32)::unsigned-native-32>>
  def encode_one(n, :u64), do: <<to_int(n, :u64)::unsigned-native-64>>
  def encode_one(n, :c64), do: complex_bits(n, 32)
  def encode_one(n, :c128), do: complex_bits(n, 64)

  # {re, im}, an Elixir Complex struct (as Nx gives), or a real number
  defp complex_bits({re, im}, bits), do: float_bits(re, bits) <> float_bits(im, bits)
  defp complex_bits(%{re: re, im: im}, bits), do: complex_bits({re, im}, bits)
  defp complex_bits(n, bits), do: complex_bits({n, 0.0}, bits)

  @int_ranges %{
    u8: {0, 255},
    u16: {0, 2 ** 16 - 1},
    u32: {0, 2 ** 32 - 1},
    u64: {0, 2 ** 64 - 1},
    s8: {-128, 127},
    s16: {-2 ** 15, 2 ** 15 - 1},
    s32: {-2 ** 31, 2 ** 31 - 1},
    s64: {-2 ** 63, 2 ** 63 - 1}
  }

  # Integers must fit: a number that silently wrapped would be a surprise.
  defp to_int(n, type) when is_float(n), do: to_int(trunc(n), type)

  defp to_int(n, type) when is_integer(n) do
    {lo, hi} = Map.fetch!(@int_ranges, type)

    if n < lo or n > hi do
      raise ArgumentError, "#{inspect(n)} does not fit in #{type} (#{lo}..#{hi})"
    end

    n
  end

  defp to_int(other, _type),
    do: raise(ArgumentError, "cannot store #{inspect(other)} in an integer type")

  defp to_float(n) when is_float(n), do: n

  defp to_float(n) when is_integer(n) do
    n * 1.0
  rescue
    ArithmeticError ->
      reraise ArgumentError, "#{n} is beyond the range of a double", __STACKTRACE__
  end

  @doc """
  An integer wrapped into an integer type, as the type's arithmetic would wrap it (Nx
  gives `u8` 254 for -2 beside a `u8` tensor). Raises for integers beyond s64.

      iex> Cascade.Type.wrap(-2, :u8)
      254
  """
  @spec wrap(number, name) :: number
  def wrap(n, type) when is_integer(n) do
    case to_tuple(type) do
      {:u, bits} ->
        <<v::unsigned-size(bits)>> = <<wide(n)::size(bits)>>
        v

      {:s, bits} ->
        <<v::signed-size(bits)>> = <<wide(n)::size(bits)>>
        v

      _ ->
        n
    end
  end

  def wrap(n, _type), do: n

  # integers from -2^63 to 2^64 - 1: s64's and u64's values
  defp wide(n) when n >= -0x8000000000000000 and n <= 0xFFFFFFFFFFFFFFFF, do: n
  defp wide(n), do: to_int(n, :s64)

  @specials %{
    16 => {0x7E00, 0x7C00, 0xFC00},
    32 => {0x7FC00000, 0x7F800000, 0xFF800000},
    64 => {0x7FF8000000000000, 0x7FF0000000000000, 0xFFF0000000000000}
  }

  defp float_bits(n, bits) when is_atom(n) do
    {nan, inf, neg} = Map.fetch!(@specials, bits)
    v = %{nan: nan, infinity: inf, neg_infinity: neg}[n] || bad_number(n)
    <<v::unsigned-native-size(bits)>>
  end

  defp float_bits(n, bits) when is_integer(n) do
    case to_float(n) do
      f when is_float(f) -> float_bits(f, bits)
      inf -> float_bits(inf, bits)
    end
  end

  defp float_bits(n, 16) when is_number(n), do: <<small_float(n, 5, 10)::unsigned-native-16>>

  defp float_bits(n, 32) when is_number(n) do
    f = n * 1.0

    if abs(f) >= 3.4028235677973366e38,
      do: float_bits(if(f > 0, do: :infinity, else: :neg_infinity), 32),
      else: <<f::float-native-32>>
  end

  defp float_bits(n, 64) when is_number(n), do: <<n * 1.0::float-native-64>>

  defp bf16_bits(n) when is_atom(n) do
    v = %{nan: 0x7FC0, infinity: 0x7F80, neg_infinity: 0xFF80}[n] || bad_number(n)
    <<v::unsigned-native-16>>
  end

  defp bf16_bits(n) when is_integer(n), do: n |> to_float() |> bf16_bits()
  defp bf16_bits(n) when is_number(n), do: <<small_float(n, 8, 7)::unsigned-native-16>>

  # Rounds a number straight from its f64 bits to a float with `ebits` exponent and `mbits`
  # mantissa bits, ties to even, so f16 and bf16 round once, exactly as the C core does.
  defp small_float(n, ebits, mbits) do
    <<sign::1, exp::11, man::52>> = <<n * 1.0::float-64>>
    sign_bit = sign <<< (ebits + mbits)

    if exp == 0 do
      sign_bit
    else
      e = exp - 1023 + (1 <<< (ebits - 1)) - 1
      full = man + (1 <<< 52)
      shift = if e <= 0, do: 52 - mbits + 1 - e, else: 52 - mbits

      if shift > 60 do
        sign_bit
      else
        kept = full >>> shift
        rest = full &&& (1 <<< shift) - 1
        half = 1 <<< (shift - 1)
        kept = if rest > half or (rest == half and (kept &&& 1) == 1), do: kept + 1, else: kept
        # for normals `kept` carries the implicit bit, which adds one to the exponent field
        value = if e <= 0, do: kept, else: ((e - 1) <<< mbits) + kept
        inf = ((1 <<< ebits) - 1) <<< mbits
        sign_bit + min(value, inf)
      end
    end
  end

  defp bad_number(n),
    do:
      raise(
        ArgumentError,
        "expected a number, :nan, :infinity or :neg_infinity, got: #{inspect(n)}"
      )

  @doc """
  Decodes a native-endian binary of `type` into a flat list of numbers. Non-finite floats
  come back as `:nan`, `:infinity` and `:neg_infinity`, as in Nx.

      iex> Cascade.Type.decode(<<0, 0, 128, 127>>, :f32)
      [:infinity]
  """
  @spec decode(binary, name) :: [number | atom]
  def decode(bin, type) when is_binary(bin) do
    type = normalize!(type)
    size = div(elem(to_tuple(type), 1), 8)

    if rem(Kernel.byte_size(bin), size) != 0 do
      raise ArgumentError,
            "Cascade.Type.decode/2: #{Kernel.byte_size(bin)} bytes are not a whole number of " <>
              "#{type} elements (#{size} bytes each)"
    end

    decode_as(bin, type)
  end

  def decode(other, _type) do
    raise ArgumentError,
          "Cascade.Type.decode/2: expected a binary, got: #{inspect(other, limit: 5)}"
  end

  defp decode_as(bin, :f32), do: for(<<x::unsigned-native-32 <- bin>>, do: f32(x))
  defp decode_as(bin, :f64), do: for(<<x::unsigned-native-64 <- bin>>, do: f64(x))
  defp decode_as(bin, :f16), do: for(<<x::unsigned-native-16 <- bin>>, do: f16(x))
  defp decode_as(bin, :bf16), do: for(<<x::unsigned-native-16 <- bin>>, do: f32(x <<< 16))
  defp decode_as(bin, :u8), do: for(<<x::unsigned-8 <- bin>>, do: x)
  defp decode_as(bin, :s32), do: for(<<x::signed-native-32 <- bin>>, do: x)
  defp decode_as(bin, :s64), do: for(<<x::signed-native-64 <- bin>>, do: x)
  defp decode_as(bin, :s8), do: for(<<x::signed-8 <- bin>>, do: x)
  defp decode_as(bin, :s16), do: for(<<x::signed-native-16 <- bin>>, do: x)
  defp decode_as(bin, :u16), do: for(<<x::unsigned-native-16 <- bin>>, do: x)
  defp decode_as(bin, :u32), do: for(<<x::unsigned-native-32 <- bin>>, do: x)
  defp decode_as(bin, :u64), do: for(<<x::unsigned-native-64 <- bin>>, do: x)

  defp decode_as(bin, :c64),
    do: for(<<re::unsigned-native-32, im::unsigned-native-32 <- bin>>, do: {f32(re), f32(im)})

  defp decode_as(bin, :c128),
    do: for(<<re::unsigned-native-64, im::unsigned-native-64 <- bin>>, do: {f64(re), f64(im)})

  defp f32(x) when (x &&& 0x7F800000) == 0x7F800000, do: special(x &&& 0x7FFFFF, x >>> 31)

  defp f32(x) do
    <<f::float-32>> = <<x::32>>
    f
  end

  defp f64(x) when (x &&& 0x7FF0000000000000) == 0x7FF0000000000000,
    do: special(x &&& 0xFFFFFFFFFFFFF, x >>> 63)

  defp f64(x) do
    <<f::float-64>> = <<x::64>>
    f
  end

  defp f16(x) when (x &&& 0x7C00) == 0x7C00, do: special(x &&& 0x3FF, x >>> 15)

  defp f16(x) do
    <<f::float-16>> = <<x::16>>
    f
  end

  defp special(0, 0), do: :infinity
  defp special(0, 1), do: :neg_infinity
  defp special(_, _), do: :nan
end
