# Property tests of the nn composites (c_src/core/decompose_nn.c) on random shapes and values,
# against the plain-Elixir f64 references below.
#
# Tolerances. Every reference returns, with each value r, an error bound `err` of the
# computation the decomposition does: a sum over its steps of (the step's rounding, u times the
# magnitude it rounds) and of (the errors it receives, times how much it amplifies them), with
# u the unit roundoff of the type the composite computes in: 2^-24 for f32 (f16 and bf16
# compute in f32 too), 2^-53 for f64. libm functions are taken as 8 ulp (16 u); sums over n
# terms as n u times the sum of |term| (the bound of an f32 accumulator; the cpu driver
# accumulates in f64). The result, rounded once to the output type, must then be within
#
#     1 ulp of the output type * |r|  +  err  +  the type's smallest subnormal
#
# of r rounded to that type (the ulp covers the final rounding of each side). softmax, the
# model composite, computes each step in the input's own type: its u is that type's (2^-11 for
# f16, 2^-8 for bf16).

defmodule Cascade.CompositesNNTest.Ref do
  @moduledoc false
  # f64 references of the nn composites on flat lists of numbers (already rounded to their
  # type) and shapes. Each returns {values, errs}: see the tolerance comment above.

  @clip_lo 1.0e-7
  @clip_hi 1 - 1.0e-7

  def float(x), do: x * 1.0

  ## Lanes: the elements that reduce into one output

  defp coords(dims) do
    Enum.reduce(Enum.reverse(dims), [[]], fn d, acc ->
      for i <- 0..(d - 1)//1, rest <- acc, do: [i | rest]
    end)
  end

  @doc """
  The flat positions of each lane over the (sorted) axes, lanes in the row-major order of the
  other axes.
  """
  def lanes(shape, axes) do
    dims = Tuple.to_list(shape)
    st = Cascade.Reference.strides(shape)
    kept = for a <- 0..(length(dims) - 1)//1, a not in axes, do: a
    offset = fn as, cs -> Enum.zip_reduce(as, cs, 0, &(&3 + &2 * Enum.at(st, &1))) end

    for kc <- coords(Enum.map(kept, &Enum.at(dims, &1))) do
      base = offset.(kept, kc)
      for rc <- coords(Enum.map(axes, &Enum.at(dims, &1))), do: base + offset.(axes, rc)
    end
  end

  @doc "Applies fun (lane values -> [{r, err}]) to every lane along axes, results in place."
  def along(values, shape, axes, fun) do
    t = List.to_tuple(values)

    placed =
      for lane <- lanes(shape, axes),
          lane != [],
          {pos, re} <- Enum.zip(lane, fun.(Enum.map(lane, &elem(t, &1)))),
          into: %{},
          do: {pos, re}

    unzip(for i <- 0..(length(values) - 1)//1, do: Map.fetch!(placed, i))
  end

  @doc "Applies fun (lane values -> {r, err}) to every lane over axes: one result per lane."
  def over(values, shape, axes, fun) do
    t = List.to_tuple(values)
    unzip(for lane <- lanes(shape, axes), do: fun.(Enum.map(lane, &elem(t, &1))))
  end

  def unzip(pairs), do: {Enum.map(pairs, &elem(&1, 0)), Enum.map(pairs, &elem(&1, 1))}

  defp sum(xs), do: Enum.reduce(xs, 0.0, &(&1 + &2))
  defp sum_abs(xs), do: Enum.reduce(xs, 0.0, &(abs(&1) + &2))

  ## softmax, log_softmax, logsumexp

  # softmax rounds each step to the input's type (u), but sums in f32 or wider (acc_u)
  def softmax(xs, u, acc_u) do
    {_m, s, ds} = shifted(xs)
    n = length(xs)
    dmax = ds |> Enum.map(&abs/1) |> Enum.max()
    for d <- ds, r = :math.exp(d) / s, do: {r, r * (u * (abs(d) + dmax + 16) + n * acc_u)}
  end

  def log_softmax(xs, u) do
    {_m, s, ds} = shifted(xs)
    n = length(xs)
    ls = :math.log(s)
    dmax = ds |> Enum.map(&abs/1) |> Enum.max()
    for d <- ds, do: {d - ls, u * (abs(d) + dmax + n + 8 + abs(ls) + abs(d - ls))}
  end

  def logsumexp([], _u), do: {:neg_infinity, 0.0}

  def logsumexp(xs, u) do
    {m, s, ds} = shifted(xs)
    ls = :math.log(s)
    dmax = ds |> Enum.map(&abs/1) |> Enum.max()
    r = m + ls
    {r, u * (abs(m) + dmax + length(xs) + 8 + abs(ls) + abs(r))}
  end

  defp shifted(xs) do
    m = Enum.max(xs)
    ds = Enum.map(xs, &(&1 - m))
    {m, sum(Enum.map(ds, &:math.exp/1)), ds}
  end

  ## mean, variance, standard_deviation

  def mean([], _u), do: {:nan, 0.0}

  def mean(xs, u) do
    r = sum(xs) / length(xs)
    {r, u * (sum_abs(xs) + 2 * abs(r))}
  end

  def variance(xs, ddof, u) do
    n = length(xs)
    denom = n - ddof

    if denom <= 0 do
      # n <= ddof <= 1: every deviation is exactly 0, 0 / 0 or 0 / -1
      {if(denom == 0, do: :nan, else: 0.0), 0.0}
    else
      m = sum(xs) / n
      sd2 = sum(Enum.map(xs, &((&1 - m) * (&1 - m))))
      v = sd2 / denom
      dm = u * (sum_abs(xs) + abs(m))
      {v, ((n + 4) * u * sd2 + n * dm * dm) / denom + 2 * u * v}
    end
  end

  def standard_deviation(xs, ddof, u) do
    case variance(xs, ddof, u) do
      {v, dv} when is_float(v) ->
        s = :math.sqrt(v)
        # sqrt(v + dv) - sqrt(v) is at most dv / (2 sqrt v) and at most sqrt(dv)
        ds = if s > 0, do: min(dv / (2 * s), :math.sqrt(dv)), else: :math.sqrt(dv)
        {s, ds + 2 * u * s}

      other ->
        other
    end
  end

  ## activations

  def relu(x, _u), do: {max(x, 0), 0.0}

  def leaky_relu(x, alpha, u) do
    r = if x > 0, do: x, else: alpha * x
    {r, 2 * u * abs(r)}
  end

  def elu(x, alpha, u) do
    r = if x > 0, do: x, else: alpha * expm1(x)
    {r, 20 * u * abs(r)}
  end

  def gelu(x, :none, u) do
    r = 0.5 * x * erfc(-x / :math.sqrt(2))
    {r, u * (12 * abs(x) + 4 * abs(r))}
  end

  def gelu(x, :tanh, u) do
    c = :math.sqrt(2 / :math.pi())
    term = 0.044715 * x * x * x
    z = 2 * c * (x + term)
    p = sigmoid(z)
    r = x * p
    dz = u * (16 * c * abs(term) + 4 * abs(z))
    {r, abs(r) * ((1 - p) * dz + 18 * u)}
  end

  def silu(x, u) do
    r = x * sigmoid(x)
    {r, 18 * u * abs(r)}
  end

  def softplus(x, u) do
    l = log1p(:math.exp(-abs(x)))
    r = max(x, 0) + l
    {r, u * (34 * l + 2 * abs(r))}
  end

  def hard_sigmoid(x, u) do
    r = min(max(x + 3, 0), 6) / 6
    {r, u * (abs(x + 3) / 6 + 2 * abs(r))}
  end

  def sigmoid(z) when z >= 0, do: 1 / (1 + :math.exp(-z))
  def sigmoid(z), do: :math.exp(z) / (1 + :math.exp(z))

  # expm1 and log1p to a few ulp from exp and log (:math has neither): the rounding of
  # exp(x) or 1 + x is divided out again (Kahan's and Goldberg's tricks)
  def expm1(x) do
    e = :math.exp(x)

    cond do
      e == 1.0 -> x
      e - 1 == -1.0 -> -1.0
      true -> (e - 1) * x / :math.log(e)
    end
  end

  def log1p(x) do
    w = 1 + x
    if w == 1.0, do: x, else: :math.log(w) * x / (w - 1)
  end

  def erfc(x), do: :math.erfc(x)

  ## layer_norm, batch_norm, dense

  @doc "One lane of layer_norm: xs with the gamma and beta of each position."
  def layer_norm(xs, gs, bs, eps, u) do
    n = length(xs)
    m = sum(xs) / n
    ds = Enum.map(xs, &(&1 - m))
    sd2 = sum(Enum.map(ds, &(&1 * &1)))
    v = sd2 / n
    sigma = :math.sqrt(v + eps)
    dm = u * (sum_abs(xs) + abs(m))
    dv = ((n + 4) * u * sd2 + n * dm * dm) / n + u * (v + eps)
    rel = 16 * u + dv / (2 * (v + eps))

    for {d, g, b} <- Enum.zip([ds, gs, bs]) do
      nrm = d / sigma
      r = nrm * g + b
      en = abs(nrm) * (rel + 2 * u) + (dm + u * abs(d)) / sigma
      {r, abs(g) * en + 2 * u * (abs(nrm * g) + abs(r))}
    end
  end

  def batch_norm(x, g, b, m, v, eps, u) do
    s = g / :math.sqrt(v + eps)
    d = x - m
    r = d * s + b
    {r, u * (22 * abs(d * s) + 2 * abs(r))}
  end

  @doc "One output of dense: a row of the input, a column of the kernel, the bias."
  def dense(row, col, b, u) do
    prods = Enum.zip_with(row, col, &(&1 * &2))
    r = sum(prods) + b
    {r, (length(row) + 2) * u * (sum_abs(prods) + abs(b))}
  end

  def dense_exact(row, col, b), do: Enum.sum(Enum.zip_with(row, col, &(&1 * &2))) + b

  ## recurrent

  @doc """
  One batch row of recurrent: xs the row's input products per step (steps lists of gates *
  hidden), rs R's rows, rbs Rb, h0 and c0 the row's first states. The {value, err} of each
  step's state in time order (h, then c for :lstm), err a running bound of the step's roundings
  (sums as n u, libm 16 u) and of the state errors it receives (|R| times the error of h, the
  gates' slopes at most 1/4 and 1).
  """
  def recurrent(cell, reverse, xs, rs, rbs, h0, c0, u) do
    hidden = length(h0)
    order = if reverse, do: Enum.reverse(Enum.with_index(xs)), else: Enum.with_index(xs)
    r_norm = rs |> Enum.map(&sum_abs/1) |> Enum.max(fn -> 0.0 end)

    {steps, _} =
      Enum.map_reduce(order, {h0, c0, 0.0, 0.0}, fn {x, t}, {h, c, eh, ec} ->
        p = for {row, b} <- Enum.zip(rs, rbs), do: sum(Enum.zip_with(row, h, &(&1 * &2))) + b

        mags =
          for {row, b} <- Enum.zip(rs, rbs),
              do: sum(Enum.zip_with(row, h, &abs(&1 * &2))) + abs(b)

        ep = (hidden + 2) * u * Enum.max([0.0 | mags]) + r_norm * eh
        a = Enum.zip_with(x, p, &(&1 + &2))
        ea = ep + u * (sum_abs(a) + 1)
        es = ea / 4 + 16 * u
        et = ea + 16 * u
        gate = fn v, k -> Enum.slice(v, k * hidden, hidden) end
        sig = fn v -> Enum.map(v, &(1 / (1 + :math.exp(-&1)))) end
        tanh = fn v -> Enum.map(v, &:math.tanh/1) end

        {h2, c2, eh2, ec2} =
          case cell do
            :tanh ->
              {tanh.(a), c, et, 0.0}

            :lstm ->
              [i, o, f] = for k <- 0..2, do: sig.(gate.(a, k))
              g = tanh.(gate.(a, 3))
              c2 = Enum.zip_with([f, c, i, g], fn [f, c, i, g] -> f * c + i * g end)
              ec2 = ec + sum_abs(c) * es + et + es + 4 * u * (sum_abs(c2) + 2)
              h2 = Enum.zip_with(o, tanh.(c2), &(&1 * &2))
              {h2, c2, ec2 + 16 * u + es + 2 * u, ec2}

            :gru ->
              [z, r] = for k <- 0..1, do: sig.(gate.(a, k))
              pn = gate.(p, 2)
              n = tanh.(Enum.zip_with([gate.(x, 2), r, pn], fn [x, r, q] -> x + r * q end))
              h2 = Enum.zip_with([z, n, h], fn [z, n, h] -> (1 - z) * n + z * h end)
              en = ep + es * sum_abs(pn) + 2 * u * (sum_abs(pn) + sum_abs(gate.(x, 2))) + 16 * u
              {h2, c, en + es * (sum_abs(n) + sum_abs(h)) + eh + 4 * u * (sum_abs(h2) + 2), 0.0}
          end

        {{t, h2, c2, eh2, ec2}, {h2, c2, eh2, ec2}}
      end)

    for {_t, h, c, eh, ec} <- Enum.sort(steps) do
      hs = Enum.map(h, &{&1, 2 * eh})
      if cell == :lstm, do: hs ++ Enum.map(c, &{&1, 2 * ec}), else: hs
    end
  end

  ## losses: one sample (a lane along the last axis) each

  def clip(p, t), do: p |> max(round(@clip_lo, t)) |> min(round(@clip_hi, t))
  defp round(x, t), do: Cascade.Reference.round_to(x, t)

  def cce(ys, ps, false, u, t) do
    terms = Enum.zip_with(ys, ps, fn y, p -> y * :math.log(clip(p, t)) end)
    {-sum(terms), (length(ys) + 20) * u * sum_abs(terms)}
  end

  def cce(ys, zs, true, u, _t) do
    ls = log_softmax(zs, u)
    terms = Enum.zip_with(ys, ls, fn y, {l, _} -> y * l end)
    errs = Enum.zip_with(ys, ls, fn y, {_, e} -> abs(y) * e end)
    {-sum(terms), sum(errs) + (length(ys) + 2) * u * sum_abs(terms)}
  end

  def bce(ys, ps, from_logits, u, t) do
    pairs =
      Enum.zip_with(ys, ps, fn y, p ->
        if from_logits do
          l1p = log1p(:math.exp(-abs(p)))
          l = max(p, 0) - p * y + l1p
          {l, u * (abs(p * y) + abs(max(p, 0) - p * y) + 34 * l1p + abs(l))}
        else
          p = clip(p, t)
          a = y * :math.log(p)
          b = (1 - y) * log1p(-p)
          {-(a + b), 20 * u * (abs(a) + abs(b)) + 2 * u * abs(a + b)}
        end
      end)

    c = length(ys)
    {ls, es} = unzip(pairs)
    {sum(ls) / c, sum(es) / c + (c + 2) * u * sum_abs(ls) / c}
  end

  def mse(ys, ps, u) do
    d2 = Enum.zip_with(ys, ps, fn y, p -> (p - y) * (p - y) end)
    c = length(ys)
    {sum(d2) / c, (c + 5) * u * sum(d2) / c}
  end

  @doc "The reduction of per-sample losses: :mean, :sum or :none."
  def reduce_losses({ls, es}, :none, _u), do: {ls, es}

  def reduce_losses({ls, es}, :sum, u),
    do: {[sum(ls)], [sum(es) + (length(ls) + 1) * u * sum_abs(ls)]}

  def reduce_losses({[], _}, :mean, _u), do: {[:nan], [0.0]}

  def reduce_losses({ls, es}, :mean, u) do
    b = length(ls)
    r = sum(ls) / b
    {[r], [(sum(es) + (b + 1) * u * sum_abs(ls)) / b + u * abs(r)]}
  end
end

defmodule Cascade.CompositesNNTest do
  use Cascade.PropertyCase
  alias Cascade.CompositesNNTest.Ref

  ## Tolerances (see the top of this file)

  @ulp %{
    f32: :math.pow(2, -23),
    f16: :math.pow(2, -10),
    bf16: :math.pow(2, -7),
    f64: :math.pow(2, -52)
  }
  @tiny %{
    f32: :math.pow(2, -149),
    f16: :math.pow(2, -24),
    bf16: :math.pow(2, -133),
    f64: :math.pow(2, -1074)
  }

  # unit roundoff of the type a composite computes in, for a floating output type
  defp work_u(:f64), do: :math.pow(2, -53)
  defp work_u(_), do: :math.pow(2, -24)

  # softmax computes in the input's own floating type
  defp own_u(:f64), do: :math.pow(2, -53)
  defp own_u(:f32), do: :math.pow(2, -24)
  defp own_u(:f16), do: :math.pow(2, -11)
  defp own_u(:bf16), do: :math.pow(2, -8)

  defp bound(type, errs) do
    errs = List.to_tuple(errs)
    ulp = Map.fetch!(@ulp, type)
    tiny = Map.fetch!(@tiny, type)
    fn e, i -> ulp * mag(e) + elem(errs, i) + tiny end
  end

  defp mag(x) when is_number(x), do: abs(x)
  defp mag(_), do: 0.0

  defp check_ref!(call, inputs, fun, shape, {values, errs}, type) do
    tol = if R.float?(type), do: bound(type, errs), else: :exact
    check!(call, inputs, fun, {shape, values}, type, tol)
  end

  ## Generators

  @float_types [:f32, :f16, :bf16, :f64]

  # values of a float tensor argument: uniform in [lo, hi], now and then small integers (ties)
  defp values(lo, hi),
    do: fn -> if chance(0.15), do: int_between(-2, 2), else: float_between(lo, hi) end

  defp input(type, shape, lo, hi) do
    ilo = if type == :u8, do: max(0, trunc(lo)), else: trunc(lo)
    gen = if R.float?(type), do: values(lo, hi), else: fn -> int_between(ilo, trunc(hi)) end

    gen_tensor(type, shape, gen)
  end

  defp floats_of({_type, _shape, vs}), do: Enum.map(vs, &Ref.float/1)

  defp out_type(types) when is_list(types),
    do: types |> Enum.reduce(&R.merge/2) |> R.to_float()

  defp rank_axis(shape), do: int_between(0, tuple_size(shape) - 1)

  defp maybe_negative(axis, rank), do: if(chance(0.3), do: axis - rank, else: axis)

  # a subset of the axes in random order (nil now and then: all)
  defp some_axes(rank) do
    if chance(0.2),
      do: nil,
      else: Enum.filter(0..(rank - 1)//1, fn _ -> chance(0.5) end) |> Enum.shuffle()
  end

  defp reduced_shape(shape, axes, keep) do
    shape
    |> Tuple.to_list()
    |> Enum.with_index()
    |> Enum.flat_map(fn {d, k} ->
      cond do
        k not in axes -> [d]
        keep -> [1]
        true -> []
      end
    end)
    |> List.to_tuple()
  end

  ## softmax, log_softmax

  property [:softmax, :log_softmax], "along an axis, against f64" do
    for op <- [:softmax, :log_softmax], type <- @float_types ++ [:s32], _ <- 1..25 do
      s = shape_or_large(min_rank: 1)
      rank = tuple_size(s)
      axis = rank_axis(s)
      # f16/bf16 softmax works in the narrow type: keep its exponents small
      {lo, hi} = if op == :softmax and type in [:f16, :bf16], do: {-3.0, 3.0}, else: {-20.0, 20.0}
      x = input(type, s, lo, hi)
      out = R.to_float(type)
      opts = if axis == rank - 1 and chance(0.5), do: [], else: [axis: maybe_negative(axis, rank)]

      fun =
        if op == :softmax,
          do: &Ref.softmax(&1, own_u(out), work_u(out)),
          else: &Ref.log_softmax(&1, work_u(out))

      expected = Ref.along(floats_of(x), s, [axis], fun)

      check_ref!(
        "Cascade.#{op}/2",
        [tensor: x, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), opts]) end,
        s,
        expected,
        out
      )
    end
  end

  ## logsumexp, mean, variance, standard_deviation

  property [:logsumexp, :mean, :variance, :standard_deviation], "over axes, against f64" do
    for op <- [:logsumexp, :mean, :variance, :standard_deviation],
        type <- @float_types ++ [:u8, :s32],
        _ <- 1..25 do
      s = shape_or_large()
      rank = tuple_size(s)
      axes = some_axes(rank)
      keep = chance(0.3)

      ddof =
        if op in [:variance, :standard_deviation] and chance(0.5), do: pick([1, 1.0]), else: 0

      x = input(type, s, -10.0, 10.0)
      out = R.to_float(type)
      u = work_u(out)
      sorted = if axes, do: Enum.sort(axes), else: Enum.to_list(0..(rank - 1)//1)

      lane_fun =
        case op do
          :logsumexp -> &Ref.logsumexp(&1, u)
          :mean -> &Ref.mean(&1, u)
          :variance -> &Ref.variance(&1, ddof, u)
          :standard_deviation -> &Ref.standard_deviation(&1, ddof, u)
        end

      opts =
        if(axes, do: [axes: Enum.map(axes, &maybe_negative(&1, rank))], else: []) ++
          if(keep, do: [keep_axes: true], else: []) ++ if(ddof != 0, do: [ddof: ddof], else: [])

      check_ref!(
        "Cascade.#{op}/2",
        [tensor: x, options: opts],
        fn -> apply(Cascade, op, [tensor!(x), opts]) end,
        reduced_shape(s, sorted, keep),
        Ref.over(floats_of(x), s, sorted, lane_fun),
        out
      )
    end
  end

  ## elementwise activations

  @activations [:relu, :leaky_relu, :elu, :gelu, :silu, :softplus, :hard_sigmoid]

  defp activation_case(:relu, _u), do: {[], &Ref.relu(&1, 0)}

  defp activation_case(:leaky_relu, u) do
    alpha = pick([nil, 0.2, 0.5, 3])
    {if(alpha, do: [alpha: alpha], else: []), &Ref.leaky_relu(&1, alpha || 0.01, u)}
  end

  defp activation_case(:elu, u) do
    alpha = pick([nil, 0.5, 2])
    {if(alpha, do: [alpha: alpha], else: []), &Ref.elu(&1, alpha || 1.0, u)}
  end

  defp activation_case(:gelu, u) do
    approximate = pick([nil, :none, :tanh])

    {if(approximate, do: [approximate: approximate], else: []),
     &Ref.gelu(&1, approximate || :none, u)}
  end

  defp activation_case(op, u), do: {[], &apply(Ref, op, [&1, u])}

  property @activations, "elementwise activations, against f64" do
    for op <- @activations, type <- @float_types ++ [:u8, :s32, :s64], _ <- 1..20 do
      x = input(type, shape_or_large(), -8.0, 8.0)
      # relu keeps the type; the others are floating
      out = if op == :relu, do: type, else: R.to_float(type)
      {opts, fun} = activation_case(op, work_u(R.to_float(type)))
      expected = floats_of(x) |> Enum.map(fun) |> Ref.unzip()

      expected =
        if R.float?(out), do: expected, else: {Enum.map(elem(expected, 0), &trunc/1), nil}

      # ops with options are called with and without the (possibly empty) list
      args =
        if op in [:relu, :silu, :softplus, :hard_sigmoid] or (opts == [] and chance(0.5)),
          do: [tensor!(x)],
          else: [tensor!(x), opts]

      check_ref!(
        "Cascade.#{op}",
        [tensor: x, options: opts],
        fn -> apply(Cascade, op, args) end,
        elem(x, 1),
        expected,
        out
      )
    end
  end

  ## layer_norm

  # gamma or beta over the normalised axes: each of their sizes or 1, or a number
  defp per_feature(type, dims, lo, hi) do
    if chance(0.15) do
      {:number, Float.round(float_between(lo, hi), 2)}
    else
      shape = dims |> Enum.map(&if(chance(0.2), do: 1, else: &1)) |> List.to_tuple()
      input(type, shape, lo, hi)
    end
  end

  # The value of a per-feature argument at a position (coordinates over its axes). A number
  # is a scalar of the type Nx gives it beside the call's tensors (`base`, their merged type).
  defp feature_at({:number, n}, _coords, base), do: R.round_to(n, R.merge_number(base, n)) * 1.0

  defp feature_at({_type, shape, vs}, coords, _base) do
    dims = Tuple.to_list(shape)
    cs = Enum.zip_with(coords, dims, fn c, d -> if d == 1, do: 0, else: c end)
    Enum.at(vs, R.offset(cs, R.strides(shape))) * 1.0
  end

  # the merged type of the tensors among the arguments
  defp merged(args), do: for({t, _, _} <- args, t != :number, do: t) |> Enum.reduce(&R.merge/2)

  property [:layer_norm], "over axes, with gamma and beta, against f64" do
    for type <- @float_types ++ [:s32], _ <- 1..60 do
      s = shape_or_large(min_rank: 1)
      rank = tuple_size(s)

      axes =
        if chance(0.3),
          do: nil,
          else:
            Enum.filter(0..(rank - 1), fn _ -> chance(0.5) end)
            |> then(&if(&1 == [], do: [rank - 1], else: &1))

      sorted = axes || [rank - 1]
      dims = Enum.map(sorted, &elem(s, &1))
      ptype = if chance(0.2), do: pick(@float_types), else: type
      x = input(type, s, -10.0, 10.0)
      g = per_feature(ptype, dims, -2.0, 2.0)
      b = per_feature(ptype, dims, -2.0, 2.0)
      eps = pick([nil, 1.0e-3, 0.5])
      base = merged([x, g, b])
      out = R.to_float(base)
      u = work_u(out)
      # the coordinates over the normalised axes of each element of a lane, in lane order
      lane_coords = coords_of(dims)
      gs = Enum.map(lane_coords, &feature_at(g, &1, base))
      bs = Enum.map(lane_coords, &feature_at(b, &1, base))

      expected = Ref.along(floats_of(x), s, sorted, &Ref.layer_norm(&1, gs, bs, eps || 1.0e-5, u))

      opts =
        if(axes, do: [axes: Enum.map(axes, &maybe_negative(&1, rank))], else: []) ++
          if(eps, do: [epsilon: eps], else: [])

      check_ref!(
        "Cascade.layer_norm/4",
        [tensor: x, gamma: g, beta: b, options: opts],
        fn -> Cascade.layer_norm(tensor!(x), tensor!(g), tensor!(b), opts) end,
        s,
        expected,
        out
      )
    end
  end

  defp coords_of(dims) do
    Enum.reduce(Enum.reverse(dims), [[]], fn d, acc ->
      for i <- 0..(d - 1)//1, rest <- acc, do: [i | rest]
    end)
  end

  ## batch_norm

  property [:batch_norm], "per feature along an axis, against f64" do
    for type <- @float_types ++ [:u8], _ <- 1..60 do
      s = shape_or_large(min_rank: 1)
      rank = tuple_size(s)
      axis = if rank >= 2 and chance(0.6), do: 1, else: rank_axis(s)
      c = elem(s, axis)

      param = fn lo, hi ->
        if chance(0.15),
          do: {:number, Float.round(float_between(lo, hi), 2)},
          else: input(type, {if(chance(0.1), do: 1, else: c)}, lo, hi)
      end

      [g, b, m] = for _ <- 1..3, do: param.(-2.0, 2.0)
      v = param.(0.0, 4.0)
      v = if match?({:number, _}, v), do: v, else: put_elem(v, 2, Enum.map(elem(v, 2), &abs/1))
      eps = pick([nil, 1.0e-3, 0.5])
      x = input(type, s, -10.0, 10.0)
      base = merged([x, g, b, m, v])
      out = R.to_float(base)
      u = work_u(out)
      at = fn p, i -> feature_at(p, [i], base) end
      dims = Tuple.to_list(s)
      inner = dims |> Enum.drop(axis + 1) |> Enum.product()

      {vals, errs} =
        floats_of(x)
        |> Enum.with_index()
        |> Enum.map(fn {xv, k} ->
          i = div(k, inner) |> rem(max(c, 1))
          Ref.batch_norm(xv, at.(g, i), at.(b, i), at.(m, i), at.(v, i), eps || 1.0e-5, u)
        end)
        |> Ref.unzip()

      opts =
        if(axis == 1 and chance(0.5), do: [], else: [axis: maybe_negative(axis, rank)]) ++
          if(eps, do: [epsilon: eps], else: [])

      check_ref!(
        "Cascade.batch_norm/6",
        [tensor: x, gamma: g, beta: b, mean: m, variance: v, options: opts],
        fn ->
          Cascade.batch_norm(tensor!(x), tensor!(g), tensor!(b), tensor!(m), tensor!(v), opts)
        end,
        s,
        {vals, errs},
        out
      )
    end
  end

  ## dense

  property [:dense], "tensor . kernel + bias, against f64 (exact for integers)" do
    for type <- @float_types ++ [:s32, :s64], _ <- 1..40 do
      lead = shape(max_rank: 2, max_dim: 4)
      n_in = if chance(0.1), do: int_between(20, 300), else: dim(6)
      n_out = dim(5)
      x = input(type, Tuple.append(lead, n_in), -4.0, 4.0)
      k = input(type, {n_in, n_out}, -4.0, 4.0)

      b =
        if chance(0.15), do: {:number, int_between(-3, 3)}, else: input(type, {n_out}, -4.0, 4.0)

      xs = floats_of(x)
      ks = floats_of(k)
      bs = if match?({:number, _}, b), do: List.duplicate(elem(b, 1), n_out), else: floats_of(b)
      rows = if n_in == 0, do: List.duplicate([], R.size(lead)), else: Enum.chunk_every(xs, n_in)

      cols =
        for j <- 0..(n_out - 1)//1, do: for(i <- 0..(n_in - 1)//1, do: Enum.at(ks, i * n_out + j))

      u = work_u(R.to_float(type))

      expected =
        if R.float?(type) do
          Ref.unzip(for r <- rows, {c, bj} <- Enum.zip(cols, bs), do: Ref.dense(r, c, bj, u))
        else
          ints = fn t -> elem(t, 2) end
          irows = if n_in == 0, do: rows, else: Enum.chunk_every(ints.(x), n_in)

          icols =
            for j <- 0..(n_out - 1)//1,
                do: for(i <- 0..(n_in - 1)//1, do: Enum.at(ints.(k), i * n_out + j))

          ibs = if match?({:number, _}, b), do: bs, else: ints.(b)

          {for(
             r <- irows,
             {c, bj} <- Enum.zip(icols, ibs),
             do: R.round_to(Ref.dense_exact(r, c, bj), type)
           ), nil}
        end

      check_ref!(
        "Cascade.dense/3",
        [tensor: x, kernel: k, bias: b],
        fn -> Cascade.dense(tensor!(x), tensor!(k), tensor!(b)) end,
        Tuple.append(lead, n_out),
        expected,
        type
      )
    end
  end

  ## recurrent

  property [:recurrent], "every cell both ways, step by step against f64" do
    for type <- @float_types, _ <- 1..12 do
      {steps, batch, hidden} = {dim(4), dim(3), dim(5, 1)}
      cell = pick([:lstm, :gru, :tanh])
      gates = %{lstm: 4, gru: 3, tanh: 1}[cell]
      w = gates * hidden
      reverse = chance(0.5)
      x = input(type, {steps, batch, w}, -3.0, 3.0)
      # R's rows sum to at most 1/2 in magnitude: the recurrence shrinks the errors it carries
      r = gen_tensor(type, {w, hidden}, fn -> float_between(-0.5, 0.5) / hidden end)
      rb = input(type, {w}, -1.0, 1.0)
      h0 = input(type, {batch, hidden}, -1.0, 1.0)
      c0 = input(type, {batch, hidden}, -1.0, 1.0)
      u = work_u(type)
      row = fn list, b, n -> list |> Enum.chunk_every(max(n, 1)) |> Enum.at(b) end
      xs = floats_of(x)
      rs = Enum.chunk_every(floats_of(r), hidden)

      per_row =
        for b <- 0..(batch - 1)//1 do
          steps_x = for t <- 0..(steps - 1)//1, do: Enum.slice(xs, (t * batch + b) * w, w)
          hb = row.(floats_of(h0), b, hidden)
          cb = row.(floats_of(c0), b, hidden)
          Ref.recurrent(cell, reverse, steps_x, rs, floats_of(rb), hb, cb, u)
        end

      # {steps, batch, state}: step-major
      expected =
        for(t <- 0..(steps - 1)//1, b <- 0..(batch - 1)//1, do: Enum.at(Enum.at(per_row, b), t))
        |> List.flatten()
        |> Ref.unzip()

      opts = [cell: cell, reverse: reverse]

      check_ref!(
        "Cascade.recurrent/6",
        [input: x, weights: r, bias: rb, h0: h0, c0: c0, options: opts],
        fn ->
          Cascade.recurrent(tensor!(x), tensor!(r), tensor!(rb), tensor!(h0), tensor!(c0), opts)
        end,
        {steps, batch, if(cell == :lstm, do: 2 * hidden, else: hidden)},
        expected,
        type
      )
    end
  end

  ## one_hot

  property [:one_hot], "1 where the index is, in every type" do
    for itype <- [:s64, :s32, :u8], _ <- 1..30 do
      s = shape(max_rank: 3)
      depth = int_between(0, 6)
      lo = if itype == :u8, do: 0, else: -1
      idx = gen_tensor(itype, s, fn -> int_between(lo, depth + 1) end)
      type = pick([nil | all_types()])
      opts = [depth: depth] ++ if(type, do: [type: type], else: [])
      out = type || :f32
      one = if R.float?(out), do: 1.0, else: 1
      zero = if R.float?(out), do: 0.0, else: 0
      values = for i <- elem(idx, 2), j <- 0..(depth - 1)//1, do: if(i == j, do: one, else: zero)

      check!(
        "Cascade.one_hot/2",
        [indices: idx, options: opts],
        fn -> Cascade.one_hot(tensor!(idx), opts) end,
        {Tuple.append(s, depth), values},
        out,
        :exact
      )
    end
  end

  ## losses

  # y_true: one-hot rows (now and then as u8), rows of random probabilities, or 0/1 labels
  defp targets(op, type, shape) do
    c = elem(shape, tuple_size(shape) - 1)
    rows = div(R.size(shape), max(c, 1))

    case {op, chance(0.5)} do
      {:categorical_cross_entropy, true} ->
        hot =
          for _ <- 1..rows//1,
              k = int_between(0, c - 1),
              j <- 0..(c - 1)//1,
              do: if(j == k, do: 1, else: 0)

        t = if chance(0.3), do: :u8, else: type
        {t, shape, R.cast(hot, t)}

      {:categorical_cross_entropy, false} ->
        raw = for _ <- 1..rows//1, do: for(_ <- 1..c//1, do: float_between(0.0, 1.0))

        vals =
          raw
          |> Enum.flat_map(fn r ->
            s = Enum.sum(r)
            Enum.map(r, &(&1 / s))
          end)

        {type, shape, R.cast(vals, type)}

      {:binary_cross_entropy, true} ->
        gen_tensor(type, shape, fn -> int_between(0, 1) end)

      {_, _} ->
        gen_tensor(type, shape, fn -> float_between(0.0, 1.0) end)
    end
  end

  # y_pred: probabilities (now and then exactly 0 or 1, which are clipped) or logits
  defp predictions(type, shape, logits?) do
    gen =
      cond do
        logits? -> fn -> float_between(-12.0, 12.0) end
        chance(0.1) -> fn -> pick([0.0, 1.0, float_between(0.0, 1.0)]) end
        true -> fn -> float_between(0.001, 0.999) end
      end

    gen_tensor(type, shape, gen)
  end

  property [:categorical_cross_entropy, :binary_cross_entropy, :mean_squared_error],
           "losses with every reduction, against f64" do
    for op <- [:categorical_cross_entropy, :binary_cross_entropy, :mean_squared_error],
        type <- @float_types,
        _ <- 1..30 do
      s = shape(min_rank: 1, max_rank: 3, min_dim: 1)
      s = if chance(0.1), do: {int_between(20, 60), int_between(5, 20)}, else: s
      rank = tuple_size(s)
      logits? = op != :mean_squared_error and chance(0.5)
      reduction = pick([nil, :mean, :sum, :none])
      t = targets(op, type, s)

      p =
        if op == :mean_squared_error,
          do: input(type, s, -5.0, 5.0),
          else: predictions(type, s, logits?)

      out = out_type([elem(t, 0), elem(p, 0)])
      u = work_u(out)
      c = elem(s, rank - 1)

      lane =
        case op do
          :categorical_cross_entropy -> &Ref.cce(&1, &2, logits?, u, u_type(out))
          :binary_cross_entropy -> &Ref.bce(&1, &2, logits?, u, u_type(out))
          :mean_squared_error -> &Ref.mse(&1, &2, u)
        end

      per_sample =
        Enum.zip(Enum.chunk_every(floats_of(t), c), Enum.chunk_every(floats_of(p), c))
        |> Enum.map(fn {ys, ps} -> lane.(ys, ps) end)
        |> Ref.unzip()

      expected = Ref.reduce_losses(per_sample, reduction || :mean, u)
      out_shape = if reduction == :none, do: Tuple.delete_at(s, rank - 1), else: {}

      opts =
        if(logits?,
          do: [from_logits: true],
          else: if(op != :mean_squared_error and chance(0.3), do: [from_logits: false], else: [])
        ) ++
          if(reduction, do: [reduction: reduction], else: [])

      check_ref!(
        "Cascade.#{op}/3",
        [y_true: t, y_pred: p, options: opts],
        fn -> apply(Cascade, op, [tensor!(t), tensor!(p), opts]) end,
        out_shape,
        expected,
        out
      )
    end
  end

  # the type the clip bounds are rounded to: the work type
  defp u_type(:f64), do: :f64
  defp u_type(_), do: :f32
end
