# Property tests of the conv composites (conv2d, pools and their gradients) on random shapes
# and options against the naive plain-Elixir f64 references below, written from the
# definitions (a loop per output element), independently of the C decompositions.
#
# The references work on logical {N, C, H, W} inputs and {O, C/groups, KH, KW} kernels; nhwc
# cases are transposed into that order and the results back. Tolerances (see
# Cascade.PropertyCase for the terms):
#   conv2d and both gradients: one dot each (an f32 or wider accumulator, rounded once to the
#     output type): tol(:sum, type, {terms, sum |terms|}) per output element;
#   max_pool2d: exact (it selects an element);
#   avg_pool2d: a sum of KH*KW terms rounded to the type, then a division rounded again:
#     2 ulp of the result plus 2 ulp of sum |terms| / (KH*KW), plus the accumulation bound;
#   max_pool2d_grad, avg_pool2d_grad: up to KH*KW contributions added one by one in the
#     output type (one rounding each; the avg also divides first): (KH*KW + 1) ulp of
#     sum |contributions|.

defmodule Cascade.PropertyTest.ConvTest do
  use Cascade.PropertyCase

  @f32 :math.pow(2, -23)
  @eps %{f64: :math.pow(2, -52), f32: @f32, f16: :math.pow(2, -10), bf16: :math.pow(2, -7)}
  @tiny %{f64: 0.0, f32: :math.pow(2, -149), f16: :math.pow(2, -24), bf16: :math.pow(2, -133)}

  defp r(n), do: 0..(n - 1)//1
  defp idx4({_, b, c, d}, i0, i1, i2, i3), do: ((i0 * b + i1) * c + i2) * d + i3

  ## Geometry, from the definitions

  defp geometry({h, w}, {kh, kw}, {s0, s1}, {d0, d1}, padding) do
    for {size, k, s, d, a} <- [{h, kh, s0, d0, 0}, {w, kw, s1, d1, 1}] do
      e = (k - 1) * d + 1

      {lo, hi} =
        case padding do
          :valid ->
            {0, 0}

          :same ->
            total = max((div(size + s - 1, s) - 1) * s + e - size, 0)
            {div(total, 2), total - div(total, 2)}

          pads ->
            Enum.at(pads, a)
        end

      %{lo: lo, hi: hi, s: s, d: d, k: k, size: size, out: div(size + lo + hi - e, s) + 1}
    end
  end

  ## Layouts

  defp logical_input(t, :nchw), do: t
  defp logical_input(t, :nhwc), do: R.transpose(t, [0, 3, 1, 2])
  defp input_layout(t, :nchw), do: t
  defp input_layout(t, :nhwc), do: R.transpose(t, [0, 2, 3, 1])
  defp logical_kernel(t, :nchw), do: t
  defp logical_kernel(t, :nhwc), do: R.transpose(t, [3, 2, 0, 1])
  defp kernel_layout(t, :nchw), do: t
  defp kernel_layout(t, :nhwc), do: R.transpose(t, [2, 3, 1, 0])

  defp in_shape({n, c, h, w}, :nchw), do: {n, c, h, w}
  defp in_shape({n, c, h, w}, :nhwc), do: {n, h, w, c}
  defp k_shape({o, cg, kh, kw}, :nchw), do: {o, cg, kh, kw}
  defp k_shape({o, cg, kh, kw}, :nhwc), do: {kh, kw, cg, o}

  # {logical shape, tuple of values} of a generated tensor in the layout
  defp logical(t, layout, fun) do
    {shape, data} = fun.(ref(t), layout)
    {shape, List.to_tuple(data)}
  end

  ## References (f64): {values, magnitudes} with magnitudes the sum |terms| per element

  defp conv_ref({xs, xt}, {ks, kt}, [gh, gw], groups) do
    {n, _c, h, w} = xs
    {o, cg, kh, kw} = ks
    og = div(o, groups)

    for b <- r(n), oc <- r(o), p <- r(gh.out), q <- r(gw.out) do
      g = div(oc, og)

      for ci <- r(cg), i <- r(kh), j <- r(kw), reduce: {0.0, 0.0} do
        {acc, mag} ->
          hh = p * gh.s + i * gh.d - gh.lo
          ww = q * gw.s + j * gw.d - gw.lo

          if hh in r(h) and ww in r(w) do
            term = elem(xt, idx4(xs, b, g * cg + ci, hh, ww)) * elem(kt, idx4(ks, oc, ci, i, j))
            {acc + term, mag + abs(term)}
          else
            {acc, mag}
          end
      end
    end
    |> Enum.unzip()
    |> then(fn {v, m} -> {{n, o, gh.out, gw.out}, v, m} end)
  end

  # The output position a kernel tap at input position pos came from, or nil.
  defp source(pos, tap, g) do
    p = pos + g.lo - tap * g.d
    if p >= 0 and rem(p, g.s) == 0 and div(p, g.s) < g.out, do: div(p, g.s)
  end

  defp grad_input_ref({ys, yt}, {ks, kt}, {n, c, h, w}, [gh, gw], groups) do
    {o, cg, kh, kw} = ks
    og = div(o, groups)

    for b <- r(n), ch <- r(c), hh <- r(h), ww <- r(w) do
      g = div(ch, cg)

      for oc <- (g * og)..(g * og + og - 1)//1, i <- r(kh), j <- r(kw), reduce: {0.0, 0.0} do
        {acc, mag} ->
          with p when p != nil <- source(hh, i, gh), q when q != nil <- source(ww, j, gw) do
            term = elem(yt, idx4(ys, b, oc, p, q)) * elem(kt, idx4(ks, oc, rem(ch, cg), i, j))
            {acc + term, mag + abs(term)}
          else
            _ -> {acc, mag}
          end
      end
    end
    |> Enum.unzip()
    |> then(fn {v, m} -> {{n, c, h, w}, v, m} end)
  end

  defp grad_kernel_ref({xs, xt}, {ys, yt}, {o, cg, kh, kw}, [gh, gw], groups) do
    {n, _c, h, w} = xs
    og = div(o, groups)

    for oc <- r(o), ci <- r(cg), i <- r(kh), j <- r(kw) do
      g = div(oc, og)

      for b <- r(n), p <- r(gh.out), q <- r(gw.out), reduce: {0.0, 0.0} do
        {acc, mag} ->
          hh = p * gh.s + i * gh.d - gh.lo
          ww = q * gw.s + j * gw.d - gw.lo

          if hh in r(h) and ww in r(w) do
            term = elem(yt, idx4(ys, b, oc, p, q)) * elem(xt, idx4(xs, b, g * cg + ci, hh, ww))
            {acc + term, mag + abs(term)}
          else
            {acc, mag}
          end
      end
    end
    |> Enum.unzip()
    |> then(fn {v, m} -> {{o, cg, kh, kw}, v, m} end)
  end

  # The real input elements of each window, row-major: [{flat index, value}]
  defp windows({xs, xt}, [gh, gw]) do
    {n, c, h, w} = xs

    for b <- r(n), ch <- r(c), p <- r(gh.out), q <- r(gw.out) do
      for i <- r(gh.k),
          j <- r(gw.k),
          hh = p * gh.s + i - gh.lo,
          ww = q * gw.s + j - gw.lo,
          hh in r(h) and ww in r(w) do
        at = idx4(xs, b, ch, hh, ww)
        {at, elem(xt, at)}
      end
    end
  end

  defp max_ref(wins),
    do: Enum.map(wins, fn win -> win |> Enum.map(&elem(&1, 1)) |> Enum.max() end)

  defp avg_ref(wins, area) do
    wins
    |> Enum.map(fn win ->
      {Enum.sum(Enum.map(win, &elem(&1, 1))) / area,
       Enum.sum(Enum.map(win, &abs(elem(&1, 1)))) / area}
    end)
    |> Enum.unzip()
  end

  # Sums contributions {flat index, value} into a tensor of n elements: {values, magnitudes}.
  defp scatter(contributions, n) do
    acc =
      Enum.reduce(contributions, %{}, fn {at, v}, acc ->
        Map.update(acc, at, {v, abs(v)}, fn {s, m} -> {s + v, m + abs(v)} end)
      end)

    {for(i <- r(n), do: acc |> Map.get(i, {0.0, 0.0}) |> elem(0)),
     for(i <- r(n), do: acc |> Map.get(i, {0.0, 0.0}) |> elem(1))}
  end

  # The first maximum of each window gets the window's gradient.
  defp max_grad_contributions(wins, gy) do
    Enum.zip_with(wins, gy, fn win, g ->
      {at, _} =
        Enum.reduce(win, nil, fn
          {at, v}, nil -> {at, v}
          {at, v}, {_, best} when v > best -> {at, v}
          _, best -> best
        end)

      {at, g}
    end)
  end

  defp avg_grad_contributions(wins, gy, area) do
    Enum.zip_with(wins, gy, fn win, g -> for {at, _} <- win, do: {at, g / area} end)
    |> List.flatten()
  end

  ## Tolerances

  # (ulps + 1) ulp of |e| and `ulps` ulp of the magnitude, plus the type's smallest subnormal
  defp tol_mag(type, ulps, mags) do
    eps = Map.fetch!(@eps, type)
    tiny = Map.fetch!(@tiny, type)
    mags = List.to_tuple(mags)
    fn e, i -> eps * abs(e) + ulps * eps * elem(mags, i) + tiny end
  end

  # avg_pool2d: 2 ulp of the result and of the magnitude, and the accumulation of n terms
  defp tol_avg(type, n, mags) do
    eps = Map.fetch!(@eps, type)
    tiny = Map.fetch!(@tiny, type)
    acc = :math.pow(2, -24) * n
    mags = List.to_tuple(mags)
    fn e, i -> 2 * eps * abs(e) + (2 * eps + acc) * elem(mags, i) + tiny end
  end

  ## Generators

  defp conv_type do
    case :rand.uniform(10) do
      n when n <= 6 -> {pick(floats()), nil}
      7 -> {:f64, nil}
      # integers are computed as f32, mixed with a float kernel they take its type
      8 -> {pick([:u8, :s32]), :f32}
      _ -> {:f32, pick([:f16, :f64])}
    end
  end

  defp value_for(type) when type in [:u8, :s32, :s64], do: fn -> int_between(0, 5) end
  defp value_for(_type), do: fn -> float_between(-2.0, 2.0) end

  defp conv_case do
    layout = pick([:nchw, :nhwc])
    groups = pick([1, 1, 1, 2, 3])
    cg = int_between(1, 3)
    og = int_between(1, 3)
    {kh, kw} = {int_between(1, 3), int_between(1, 3)}
    strides = {pick([1, 1, 2, 3]), pick([1, 1, 2])}
    dilation = {pick([1, 1, 1, 2]), pick([1, 1, 2])}

    padding =
      pick([
        :valid,
        :same,
        [{int_between(-1, 2), int_between(-1, 2)}, {int_between(0, 2), int_between(-1, 1)}]
      ])

    {lo_hi_h, lo_hi_w} =
      case padding do
        [{a, b}, {c, d}] -> {a + b, c + d}
        _ -> {0, 0}
      end

    e_h = (kh - 1) * elem(dilation, 0) + 1
    e_w = (kw - 1) * elem(dilation, 1) + 1
    h = max(1, max(e_h - lo_hi_h, 1) + int_between(0, 4))
    w = max(1, max(e_w - lo_hi_w, 1) + int_between(0, 4))
    # padding that crops more than the input has is not a convolution
    padding = if h + lo_hi_h < e_h or w + lo_hi_w < e_w, do: :valid, else: padding
    h = max(h, e_h)
    w = max(w, e_w)

    %{
      layout: layout,
      groups: groups,
      n: pick([1, 1, 2, 0]),
      c: groups * cg,
      o: groups * og,
      k: {kh, kw},
      h: h,
      w: w,
      strides: strides,
      dilation: dilation,
      padding: padding
    }
  end

  defp conv_opts(cc) do
    opts = [padding: cc.padding, layout: cc.layout]
    opts = if cc.groups > 1, do: [{:feature_group_size, cc.groups} | opts], else: opts

    opts =
      if cc.strides != {1, 1} or chance(0.3),
        do: [{:strides, Tuple.to_list(cc.strides)} | opts],
        else: opts

    if cc.dilation != {1, 1} or chance(0.3),
      do: [{:kernel_dilation, Tuple.to_list(cc.dilation)} | opts],
      else: opts
  end

  property [:conv2d, :conv2d_grad_input, :conv2d_grad_kernel],
           "conv2d and its gradients match the direct loops" do
    for _ <- 1..80 do
      cc = conv_case()
      {xtype, ktype} = conv_type()
      ktype = ktype || xtype
      out_type = R.to_float(R.merge(xtype, ktype))
      gtype = out_type
      {kh, kw} = cc.k
      xs = {cc.n, cc.c, cc.h, cc.w}
      ks = {cc.o, div(cc.c, cc.groups), kh, kw}
      geo = geometry({cc.h, cc.w}, cc.k, cc.strides, cc.dilation, cc.padding)
      [gh, gw] = geo
      ys = {cc.n, cc.o, gh.out, gw.out}
      x = gen_tensor(xtype, in_shape(xs, cc.layout), value_for(xtype))
      k = gen_tensor(ktype, k_shape(ks, cc.layout), value_for(ktype))
      gy = gen_tensor(gtype, in_shape(ys, cc.layout), value_for(gtype))
      xl = logical(x, cc.layout, &logical_input/2)
      kl = logical(k, cc.layout, &logical_kernel/2)
      gl = logical(gy, cc.layout, &logical_input/2)
      opts = conv_opts(cc)
      inputs = [input: x, kernel: k, options: opts]

      {shape, v, mags} = conv_ref(xl, kl, geo, cc.groups)
      expected = input_layout({shape, v}, cc.layout)
      {_, mags} = input_layout({shape, mags}, cc.layout)
      terms = elem(ks, 1) * kh * kw

      check!(
        "Cascade.conv2d/3",
        inputs,
        fn -> Cascade.conv2d(tensor!(x), tensor!(k), opts) end,
        expected,
        out_type,
        tol(:sum, out_type, {terms, mags})
      )

      {shape, v, mags} = grad_input_ref(gl, kl, xs, geo, cc.groups)
      expected = input_layout({shape, v}, cc.layout)
      {_, mags} = input_layout({shape, mags}, cc.layout)
      terms = div(cc.o, cc.groups) * kh * kw
      input_shape = in_shape(xs, cc.layout)

      check!(
        "Cascade.conv2d_grad_input/4",
        [grad_output: gy, kernel: k, input_shape: input_shape, options: opts],
        fn -> Cascade.conv2d_grad_input(tensor!(gy), tensor!(k), input_shape, opts) end,
        expected,
        R.to_float(R.merge(gtype, ktype)),
        tol(:sum, R.to_float(R.merge(gtype, ktype)), {terms, mags})
      )

      {shape, v, mags} = grad_kernel_ref(xl, gl, ks, geo, cc.groups)
      expected = kernel_layout({shape, v}, cc.layout)
      {_, mags} = kernel_layout({shape, mags}, cc.layout)
      terms = cc.n * gh.out * gw.out
      kernel_shape = k_shape(ks, cc.layout)

      check!(
        "Cascade.conv2d_grad_kernel/4",
        [input: x, grad_output: gy, kernel_shape: kernel_shape, options: opts],
        fn -> Cascade.conv2d_grad_kernel(tensor!(x), tensor!(gy), kernel_shape, opts) end,
        expected,
        R.to_float(R.merge(xtype, gtype)),
        tol(:sum, R.to_float(R.merge(xtype, gtype)), {terms, mags})
      )
    end
  end

  # sum(conv2d(x, k) * gy), by Cascade, in f64
  defp loss(x, k, gy, opts) do
    Cascade.conv2d(x, k, opts) |> Cascade.multiply(gy) |> Cascade.sum() |> Cascade.to_list()
  end

  defp nudge({:f64, shape, values}, at, delta),
    do: tensor!({:f64, shape, List.update_at(values, at, &(&1 + delta))})

  property [:conv2d_grad_input, :conv2d_grad_kernel],
           "the gradients are the finite differences of conv2d" do
    # conv2d is linear in each argument: in f64 the central difference is exact but for
    # rounding, 1e-9 relative to the gradient's magnitude
    for _ <- 1..12 do
      cc = %{conv_case() | n: 1}
      {kh, kw} = cc.k
      [gh, gw] = geometry({cc.h, cc.w}, cc.k, cc.strides, cc.dilation, cc.padding)
      x = gen_tensor(:f64, in_shape({cc.n, cc.c, cc.h, cc.w}, cc.layout), &mixed/0)
      k = gen_tensor(:f64, k_shape({cc.o, div(cc.c, cc.groups), kh, kw}, cc.layout), &mixed/0)
      gy = gen_tensor(:f64, in_shape({cc.n, cc.o, gh.out, gw.out}, cc.layout), &mixed/0)
      opts = conv_opts(cc)
      {_, xshape, xv} = x
      {_, kshape, kv} = k
      dx = Cascade.conv2d_grad_input(tensor!(gy), tensor!(k), xshape, opts) |> Cascade.to_binary()

      dk =
        Cascade.conv2d_grad_kernel(tensor!(x), tensor!(gy), kshape, opts) |> Cascade.to_binary()

      dx = Cascade.Type.decode(dx, :f64)
      dk = Cascade.Type.decode(dk, :f64)

      for _ <- 1..3 do
        at = int_between(0, length(xv) - 1)

        fd =
          (loss(nudge(x, at, 0.5), tensor!(k), tensor!(gy), opts) -
             loss(nudge(x, at, -0.5), tensor!(k), tensor!(gy), opts)) / 1.0

        g = Enum.at(dx, at)
        assert abs(fd - g) <= 1.0e-9 * (1 + abs(g)), "d/dx[#{at}]: #{fd} vs #{g}, #{inspect(cc)}"

        at = int_between(0, length(kv) - 1)

        fd =
          (loss(tensor!(x), nudge(k, at, 0.5), tensor!(gy), opts) -
             loss(tensor!(x), nudge(k, at, -0.5), tensor!(gy), opts)) / 1.0

        g = Enum.at(dk, at)
        assert abs(fd - g) <= 1.0e-9 * (1 + abs(g)), "d/dk[#{at}]: #{fd} vs #{g}, #{inspect(cc)}"
      end
    end
  end

  defp pool_case do
    layout = pick([:nchw, :nhwc])
    {kh, kw} = {int_between(1, 3), int_between(1, 3)}
    # strides: the window (the default: tiled windows), or anything from 1 to 3
    strides = if chance(0.5), do: nil, else: [int_between(1, 3), int_between(1, 3)]
    {sh, sw} = if strides, do: List.to_tuple(strides), else: {kh, kw}

    # explicit padding below the window, so that every window holds a real element
    padding =
      pick([
        :valid,
        :same,
        [{int_between(-1, kh - 1), int_between(0, kh - 1)}, {int_between(0, kw - 1), 0}]
      ])

    {ph, pw} =
      case padding do
        [{a, b}, {c, d}] -> {a + b, c + d}
        _ -> {0, 0}
      end

    %{
      layout: layout,
      n: pick([1, 1, 2, 0]),
      c: int_between(1, 3),
      h: max(kh - ph, 1) + int_between(0, 5),
      w: max(kw - pw, 1) + int_between(0, 5),
      k: {kh, kw},
      strides: {sh, sw},
      strides_opt: strides,
      padding: padding,
      window: if(kh == kw and chance(0.5), do: kh, else: {kh, kw})
    }
  end

  defp pool_opts(pc) do
    opts = [padding: pc.padding, layout: pc.layout]
    if pc.strides_opt, do: [{:strides, pc.strides_opt} | opts], else: opts
  end

  property [:max_pool2d, :avg_pool2d, :max_pool2d_grad, :avg_pool2d_grad],
           "pools and their gradients match the direct loops" do
    for _ <- 1..100 do
      pc = pool_case()
      type = pick(floats() ++ [:f64, :f64, :s32, :u8])
      ft = R.to_float(type)
      geo = geometry({pc.h, pc.w}, pc.k, pc.strides, {1, 1}, pc.padding)
      [gh, gw] = geo
      {kh, kw} = pc.k
      area = kh * kw
      xs = {pc.n, pc.c, pc.h, pc.w}
      ys = {pc.n, pc.c, gh.out, gw.out}
      # few distinct values now and then: ties decide which element gets the gradient
      gen = if chance(0.3), do: fn -> int_between(0, 2) end, else: value_for(type)

      gen = if type in [:s32, :u8], do: fn -> int_between(0, 100) end, else: gen
      x = gen_tensor(type, in_shape(xs, pc.layout), gen)
      gy = gen_tensor(ft, in_shape(ys, pc.layout), value_for(ft))
      wins = windows(logical(x, pc.layout, &logical_input/2), geo)
      {_, gyl} = logical(gy, pc.layout, &logical_input/2)
      gyl = Tuple.to_list(gyl)
      opts = pool_opts(pc)
      window = pc.window
      inputs = [input: x, window: window, options: opts]
      out = fn values -> input_layout({ys, values}, pc.layout) end
      back = fn values -> input_layout({xs, values}, pc.layout) end

      check!(
        "Cascade.max_pool2d/3",
        inputs,
        fn -> Cascade.max_pool2d(tensor!(x), window, opts) end,
        out.(max_ref(wins)),
        type,
        :exact
      )

      {avg, mags} = avg_ref(wins, area)

      check!(
        "Cascade.avg_pool2d/3",
        inputs,
        fn -> Cascade.avg_pool2d(tensor!(x), window, opts) end,
        out.(avg),
        ft,
        tol_avg(ft, area, elem(out.(mags), 1))
      )

      n = R.size(xs)
      {dx, mags} = wins |> max_grad_contributions(gyl) |> scatter(n)

      check!(
        "Cascade.max_pool2d_grad/4",
        [input: x, grad_output: gy, window: window, options: opts],
        fn -> Cascade.max_pool2d_grad(tensor!(x), tensor!(gy), window, opts) end,
        back.(dx),
        ft,
        tol_mag(ft, area + 1, elem(back.(mags), 1))
      )

      {dx, mags} = wins |> avg_grad_contributions(gyl, area) |> scatter(n)
      input_shape = in_shape(xs, pc.layout)

      check!(
        "Cascade.avg_pool2d_grad/4",
        [grad_output: gy, input_shape: input_shape, window: window, options: opts],
        fn -> Cascade.avg_pool2d_grad(tensor!(gy), input_shape, window, opts) end,
        back.(dx),
        ft,
        tol_mag(ft, area + 1, elem(back.(mags), 1))
      )
    end
  end
end

defmodule Cascade.ConvTest do
  use ExUnit.Case, async: true

  defp list(t), do: Cascade.to_list(t)

  test "shapes may be given as the tensors themselves" do
    x = Cascade.iota({1, 2, 5, 5}, type: :f32)
    k = Cascade.ones({3, 2, 3, 3})
    y = Cascade.conv2d(x, k, padding: :same)
    assert Cascade.shape(y) == {1, 3, 5, 5}
    assert Cascade.shape(Cascade.conv2d_grad_input(y, k, x, padding: :same)) == {1, 2, 5, 5}
    assert Cascade.shape(Cascade.conv2d_grad_kernel(x, y, k, padding: :same)) == {3, 2, 3, 3}
    p = Cascade.avg_pool2d(x, 2)
    assert Cascade.shape(Cascade.avg_pool2d_grad(p, x, 2)) == {1, 2, 5, 5}
  end

  test "max_pool2d pads with the lowest value, avg_pool2d counts padding as zeros" do
    x = Cascade.tensor([[[[-5.0, -6.0], [-7.0, -8.0]]]])

    assert list(Cascade.max_pool2d(x, 2, strides: [1, 1], padding: :same)) ==
             [[[[-5.0, -6.0], [-7.0, -8.0]]]]

    assert list(Cascade.avg_pool2d(x, 2, padding: [{0, 1}, {0, 1}])) == [[[[-6.5]]]]

    assert list(Cascade.avg_pool2d(x, 2, strides: [1, 1], padding: :same)) ==
             [[[[-6.5, -3.5], [-3.75, -2.0]]]]

    xi = Cascade.tensor([[[[-5, -6], [-7, -8]]]], type: :s32)

    assert list(Cascade.max_pool2d(xi, 3, strides: [1, 1], padding: :same)) ==
             [[[[-5, -5], [-5, -5]]]]

    # a window wholly in the padding
    assert list(Cascade.max_pool2d(x, 1, padding: [{1, 0}, {0, 0}])) ==
             [[[[:neg_infinity, :neg_infinity], [-5.0, -6.0], [-7.0, -8.0]]]]
  end

  test "bad calls raise ArgumentError naming the expected and the given" do
    x = Cascade.iota({1, 3, 5, 5}, type: :f32)

    assert_raise ArgumentError, ~r/conv2d: expected the kernel's input channels \(2\)/, fn ->
      Cascade.conv2d(x, Cascade.ones({2, 2, 3, 3}))
    end

    assert_raise ArgumentError,
                 ~r/expected input of rank 4 \{N, H, W, C\}, got shape \{5, 5\}/,
                 fn ->
                   Cascade.conv2d(Cascade.ones({5, 5}), Cascade.ones({1, 1, 1, 1}), layout: :nhwc)
                 end

    assert_raise ArgumentError, ~r/feature_group_size.*got: 2/, fn ->
      Cascade.conv2d(x, Cascade.ones({2, 3, 3, 3}), feature_group_size: 2)
    end

    assert_raise ArgumentError,
                 ~r/expected padding to be :valid, :same or \[\{low, high\}, \{low, high\}\].*got: \[\{1, 1\}\]/,
                 fn -> Cascade.conv2d(x, Cascade.ones({1, 3, 3, 3}), padding: [{1, 1}]) end

    assert_raise ArgumentError,
                 ~r/expected layout to be one of \[:nchw, :nhwc\], got: :chwn/,
                 fn ->
                   Cascade.max_pool2d(x, 2, layout: :chwn)
                 end

    assert_raise ArgumentError, ~r/window spanning 6 x 6 does not fit/, fn ->
      Cascade.max_pool2d(x, 6)
    end

    assert_raise ArgumentError, ~r/expected window to be 2 integers in 1..2\^48.*\[0, 0\]/, fn ->
      Cascade.avg_pool2d(x, 0)
    end

    assert_raise ArgumentError, ~r/expected grad_output of shape \{1, 3, 2, 2\}/, fn ->
      Cascade.max_pool2d_grad(x, Cascade.ones({1, 3, 3, 3}), 2)
    end

    assert_raise ArgumentError, ~r/expected input_shape to have 4 dimensions/, fn ->
      Cascade.avg_pool2d_grad(Cascade.ones({1, 3, 2, 2}), {5, 5}, 2)
    end
  end
end
