# Generators, tolerances and the comparison of the property tests (test/property_test.exs and
# test/composites_*_test.exs), compiled with the test support code so every test file can use it.
defmodule Cascade.PropertyCase do
  @moduledoc false
  # Generators, tolerances and the comparison shared by the property test modules below.

  import ExUnit.Assertions
  alias Cascade.Reference, as: R

  defmacro __using__(_opts) do
    quote do
      use ExUnit.Case, async: true
      import Cascade.PropertyCase
      alias Cascade.Reference, as: R
      Module.register_attribute(__MODULE__, :covered, accumulate: true)
      @before_compile Cascade.PropertyCase
    end
  end

  defmacro __before_compile__(_env) do
    quote do
      @doc false
      def __covered__, do: @covered |> List.flatten() |> Enum.uniq()
    end
  end

  @doc """
  A property test of the ops in `ops` (recorded for the coverage test), with :rand seeded
  from its name so that every run draws the same cases.
  """
  defmacro property(ops, name, do: block) do
    quote do
      @covered unquote(ops)
      test "property: " <> unquote(name) do
        :rand.seed(:exsss, {1, 2, :erlang.phash2(unquote(name))})
        unquote(block)
      end
    end
  end

  ## Tolerances
  #
  # Each case compares the op's result g with the reference r (computed in f64, rounded once to
  # the output type) by |g - r| <= rel * |r| + abs. eps = 2^-(mantissa bits) is the spacing of
  # a type's numbers relative to a value: one unit in the last place (ulp) of r is at most
  # eps * |r|. `abs` is the type's smallest subnormal, where relative spacing ends.

  @f32 {:math.pow(2, -23), :math.pow(2, -149)}
  @f16 {:math.pow(2, -10), :math.pow(2, -24)}
  @bf16 {:math.pow(2, -7), :math.pow(2, -133)}
  # f64 results appear only where a mixed-type op promotes to f64
  @f64 {:math.pow(2, -52), :math.pow(2, -1074)}

  @tolerances %{
    # Ops that move, select or compare elements, max/min, remainder (fmod is exact), floor,
    # ceil, round, sign, abs, negate, casts (one rounding, as the reference), creation, and
    # every op on integers (wrapping as C's unsigned arithmetic): bit-exact, NaN equal to NaN.
    exact: :exact,
    # add, subtract, multiply, divide, sqrt, reciprocal: IEEE operations, rounded once by the
    # kernel (f16/bf16 compute in f32 and round once) and once by the reference: 1 ulp.
    arith: %{f32: @f32, f16: @f16, bf16: @bf16, f64: @f64},
    # exp, expm1, log, log1p, rsqrt, sin, cos, tanh, sigmoid, erf, pow, atan2: per op in
    # @transcendental_ulp below for f32; f16/bf16 compute in f32 and round once: an f32 error
    # of a few ulp can only flip that rounding, so 1 ulp of the narrow type (so too the blas
    # f16 exp on AVX-512, its own polynomial at 1.4e-7 relative in f32 registers: over every
    # f16, 6 results 1 ulp from exp rounded correctly, test_simd_kernels). f64: 4 ulp. The
    # f32 entry here (8 ulp) is for composites built from several of them (random_normal).
    transcendental: %{
      f32: {:math.pow(2, -20), :math.pow(2, -30)},
      f16: @f16,
      bf16: @bf16,
      f64: {:math.pow(2, -50), :math.pow(2, -1074)}
    }
  }

  # The bound, in ulp of an f32 result, of each transcendental op on every host driver: the
  # worse of the cpu driver (glibc's f32 functions: the maxima of glibc's table of known errors
  # for x86_64) and the blas driver's vector kernels (SLEEF's u10 functions: 1.0 ulp; tanh on
  # the u35 one: 3.5; erf its own approximation, 1.07 ulp; sigmoid from one exp, one add and
  # one division; rsqrt as 1 / sqrt, two correct roundings). A case allows the bound plus the reference's own rounding (0.5 ulp),
  # and 2^-30 absolute for results near zero, where a function's error is absolute, not
  # relative (sin and cos near their zeros).
  #
  # Beside each bound, the largest error measured on 2^20 values of the property test's domain
  # (2026-11-25, AVX2 machine; cpu / blas; results above 2^-30 in magnitude, against f64):
  @transcendental_ulp %{
    # 0.50 / 0.96
    exp: 1,
    # 0.78 / 0.52
    expm1: 1,
    # 0.74 / 0.57
    log: 1,
    # 0.78 / 0.60
    log1p: 2,
    # 0.56 / 0.81
    sin: 1,
    # 0.56 / 0.86
    cos: 1,
    # 0.82 / 0.85 (SLEEF's); the blas erf of 2026-11-26 (simd_kernels.c, erf_vf): 1.063 at
    # most over every f32 (test_simd_kernels checks 1.07)
    erf: 1.07,
    # 0.50 / 0.58
    pow: 1,
    # 1.42 / 0.89
    atan2: 2,
    # 1.48 / 1.48: two roundings of 2^-24 relative each, up to 2 ulp near a power of two
    rsqrt: 2,
    # 2.18 / 2.18
    sigmoid: 3,
    # 2.05 / 2.57
    tanh: 3.5
  }

  # Sums (sum, dot) and products over n terms: 1 ulp of the result (arith above) plus the
  # error bound of n steps in an f32 accumulator, n * 2^-24 * sum |term| for sums and
  # n * 2^-24 * |result| for products. f32 is the narrowest accumulator a driver may use
  # (cpu_kernels.h: f16/bf16 compute in f32); the cpu driver accumulates in f64.
  @accumulation :math.pow(2, -24)

  @doc "The tolerance table, for the report."
  def tolerances, do: {@tolerances, @accumulation}

  @doc """
  A tolerance function `fn expected, flat_index -> allowed |difference| end`, or :exact, for
  an op class and output type. Integers are always exact.
  """
  def tol(class, type, extra \\ nil)

  def tol(_class, type, _extra) when type in [:u8, :u16, :u32, :u64, :s8, :s16, :s32, :s64],
    do: :exact

  def tol(:exact, _type, _extra), do: :exact

  def tol(class, type, nil) when class in [:arith, :transcendental] do
    {rel, abs} = @tolerances |> Map.fetch!(class) |> Map.fetch!(type)
    fn e, _i -> rel * magnitude(e) + abs end
  end

  # one transcendental op: its own bound for f32 (@transcendental_ulp), the class's otherwise
  def tol({:transcendental, op}, :f32, nil) do
    rel = (Map.fetch!(@transcendental_ulp, op) + 0.5) * :math.pow(2, -23)
    abs = :math.pow(2, -30)
    fn e, _i -> rel * magnitude(e) + abs end
  end

  def tol({:transcendental, _op}, type, nil), do: tol(:transcendental, type)

  # mags: per output element, sum |term| (sums) over n terms
  def tol(:sum, type, {n, mags}) do
    {rel, abs} = Map.fetch!(@tolerances.arith, type)
    mags = List.to_tuple(mags)
    fn e, i -> rel * magnitude(e) + abs + n * @accumulation * magnitude(elem(mags, i)) end
  end

  def tol(:product, type, n) do
    {rel, abs} = Map.fetch!(@tolerances.arith, type)
    fn e, _i -> (rel + n * @accumulation) * magnitude(e) + abs end
  end

  defp magnitude(x) when is_number(x), do: abs(x)
  defp magnitude(_), do: 0.0

  ## Generators

  @floats [:f32, :f16, :bf16]
  @ints [:s32, :s64, :u8, :s8, :s16, :u16, :u32, :u64]
  def floats, do: @floats
  def ints, do: @ints
  def all_types, do: @floats ++ @ints ++ [:f64]

  def int_between(lo, hi), do: lo + :rand.uniform(hi - lo + 1) - 1
  def float_between(lo, hi), do: lo + (hi - lo) * :rand.uniform()
  def log_uniform(lo, hi), do: :math.exp(float_between(:math.log(lo), :math.log(hi)))
  def pick(list), do: Enum.at(list, :rand.uniform(length(list)) - 1)
  def chance(p), do: :rand.uniform() < p
  def random_sign, do: if(chance(0.5), do: -1, else: 1)

  @doc "A dimension: 0 now and then (empty tensors), else min..max."
  def dim(max \\ 5, min \\ 0) do
    if min == 0 and chance(1 / 12), do: 0, else: int_between(max(min, 1), max)
  end

  @doc "A random shape: rank 0..max_rank, dims via dim/2."
  def shape(opts \\ []) do
    max_rank = Keyword.get(opts, :max_rank, 4)
    min_rank = Keyword.get(opts, :min_rank, 0)
    max_dim = Keyword.get(opts, :max_dim, 5)
    min_dim = Keyword.get(opts, :min_dim, 0)
    rank = int_between(min_rank, max_rank)
    List.to_tuple(for _ <- 1..rank//1, do: dim(max_dim, min_dim))
  end

  @doc "Now and then a larger shape (past the kernels' chunk and tile sizes), else shape/1."
  def shape_or_large(opts \\ []) do
    cond do
      chance(0.05) -> high_rank(opts)
      chance(0.1) -> large(opts)
      true -> shape(opts)
    end
  end

  # rank 5..8 (the C core's limit) with small dimensions
  defp high_rank(opts) do
    min_dim = Keyword.get(opts, :min_dim, 0)
    List.to_tuple(for _ <- 1..int_between(5, 8), do: dim(3, min_dim))
  end

  # past the f16 chunk (512), the reduction lanes and chunks, and the transpose tile (16)
  defp large(opts) do
    min_rank = max(Keyword.get(opts, :min_rank, 1), 1)

    case int_between(min_rank, max(min_rank, 3)) do
      1 -> {int_between(500, 2100)}
      2 -> {int_between(17, 45), int_between(17, 70)}
      _ -> {int_between(2, 5), int_between(17, 40), int_between(9, 33)}
    end
  end

  @doc """
  A mixture of floats: small integers (ties, zeros), quarters, uniform, log-uniform, and now
  and then tiny values (subnormal in f16, or in f32 and bf16).
  """
  def mixed do
    case :rand.uniform(9) do
      n when n in [1, 2] -> int_between(-4, 4) * 1.0
      n when n in [3, 4] -> int_between(-40, 40) / 4
      n when n in [5, 6] -> float_between(-10.0, 10.0)
      n when n in [7, 8] -> random_sign() * log_uniform(1.0e-3, 1.0e3)
      9 -> random_sign() * pick([log_uniform(1.0e-8, 1.0e-4), log_uniform(1.0e-45, 1.0e-37)])
    end
  end

  @doc "With probability p a NaN or an infinity, else gen.()."
  def special_or(p, gen) do
    if chance(p), do: pick([:nan, :infinity, :neg_infinity]), else: gen.()
  end

  @doc "An integer of the type: mostly small, now and then anywhere in the type's range."
  def int_value(type) do
    {lo, hi} = R.int_range(type)

    cond do
      type == :u8 -> int_between(0, 255)
      chance(0.2) -> int_between(lo, hi)
      chance(0.05) -> pick([lo, hi, 0, max(lo, -1), 1])
      R.unsigned?(type) -> int_between(0, 200)
      true -> int_between(max(lo, -100), min(hi, 100))
    end
  end

  @doc "A default value of the type: mixed/0 for floats, int_value/1 for integers."
  def value(type), do: if(R.float?(type), do: mixed(), else: int_value(type))

  @doc "A typed tensor `{type, shape, values}`, values drawn by gen and rounded to the type."
  def gen_tensor(type, shape, gen \\ nil) do
    gen = gen || fn -> value(type) end
    {type, shape, for(_ <- 1..R.size(shape)//1, do: R.round_to(gen.(), type))}
  end

  ## Running and checking

  @doc "A Cascade tensor from a typed tensor; a number stays a number."
  def tensor!({:number, n}), do: n

  def tensor!({type, shape, values}),
    do: Cascade.from_binary(Cascade.Type.encode(values, type), type, shape)

  @doc "The type an argument takes beside tensors of type base (Nx.Type.merge_number)."
  def arg_type({:number, n}, base), do: R.merge_number(base, n)
  def arg_type({type, _, _}, _base), do: type

  @doc "The reference tensor of an argument, cast to the compute type."
  def ref({:number, n}, type), do: {{}, [R.round_to(n, type)]}
  def ref({_type, shape, values}, type), do: {shape, R.cast(values, type)}
  def ref({type, _, _} = t), do: ref(t, type)

  @doc "The merged type of the tensor arguments (numbers take it too)."
  def base_type(args) do
    case for({t, _, _} <- args, t != :number, do: t) do
      [] ->
        args
        |> Enum.map(fn {:number, n} -> if is_integer(n), do: :s64, else: :f32 end)
        |> Enum.reduce(&R.merge/2)

      types ->
        Enum.reduce(types, &R.merge/2)
    end
  end

  @doc """
  Runs `fun` (the op under test) on each of `host_devices/0` and compares its result with the reference `expected`
  (`{shape, values}`, not yet rounded) rounded to `out_type`, within `tol`. `inputs` is a
  keyword list of what the case was given, printed on failure.
  """
  def check!(call, inputs, fun, expected, out_type, tol) do
    for device <- host_devices() do
      check_on!(device, call, inputs, fun, expected, out_type, tol)
    end

    :ok
  end

  @doc """
  The devices every case runs on: the portable `:cpu` driver, the reference, and `:blas`
  (OpenBLAS and the vector kernels) where it is available.
  """
  def host_devices do
    for %{device: d, available: true} <- Cascade.devices(), d in [:cpu, :blas], do: d
  end

  defp check_on!(device, call, inputs, fun, {exp_shape, exp_values}, out_type, tol) do
    call = "#{call} on #{inspect(device)}"

    result =
      try do
        Cascade.with_device(device, fun)
      rescue
        e ->
          flunk(
            report(call, inputs) <> "\nraised: " <> Exception.format(:error, e, __STACKTRACE__)
          )
      end

    got_type = Cascade.Type.normalize!(Cascade.type(result))
    got_shape = Cascade.shape(result)
    got = Cascade.Type.decode(Cascade.to_binary(result), got_type)
    expected = R.cast(exp_values, out_type)

    header = fn ->
      report(call, inputs) <>
        "\nexpected: type #{inspect(out_type)}, shape #{inspect(exp_shape)}\n  #{inspect(expected, limit: :infinity)}" <>
        "\ngot:      type #{inspect(got_type)}, shape #{inspect(got_shape)}\n  #{inspect(got, limit: :infinity)}"
    end

    if got_type != out_type or got_shape != exp_shape,
      do: flunk(header.() <> "\nthe type or shape differs")

    mismatch =
      got
      |> Enum.zip(expected)
      |> Enum.with_index()
      |> Enum.find(fn {{g, e}, i} -> not close?(g, e, tol, i) end)

    case mismatch do
      nil ->
        :ok

      {{g, e}, i} ->
        allowed = if tol == :exact, do: "exactly", else: "within #{tol.(e, i)}"

        flunk(
          header.() <>
            "\nfirst mismatch at flat index #{i}: expected #{inspect(e)} #{allowed}, got #{inspect(g)}"
        )
    end
  end

  defp close?(g, e, _tol, _i) when is_atom(g) or is_atom(e), do: g == e
  defp close?(g, e, :exact, _i), do: g == e and is_integer(g) == is_integer(e)
  defp close?(g, e, tol, i), do: abs(g - e) <= tol.(e, i)

  defp report(call, inputs) do
    lines =
      for {name, input} <- inputs do
        case input do
          {:number, n} ->
            "  #{name}: the number #{inspect(n)}"

          {type, shape, values} when is_atom(type) and is_tuple(shape) and is_list(values) ->
            "  #{name}: #{inspect(type)} #{inspect(shape)} #{inspect(values, limit: :infinity)}"

          other ->
            "  #{name}: #{inspect(other, limit: :infinity)}"
        end
      end

    "#{call} failed on\n" <>
      Enum.join(lines, "\n") <>
      "\n(a tensor written `type shape values` is Cascade.from_binary(Cascade.Type.encode(values, type), type, shape))"
  end
end
