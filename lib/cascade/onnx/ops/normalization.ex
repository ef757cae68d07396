defmodule Cascade.ONNX.Ops.Normalization do
  @moduledoc false
  # The normalisations (Cascade.ONNX.Ops hands them here): batch, layer, instance, local
  # response, mean-variance.

  import Cascade.ONNX.Ops, only: [attr: 3, fail: 1, axis: 2, dims: 1, rank: 1]

  @doc false
  def run("BatchNormalization", [x, scale, b, mean, var | _], attrs, ctx) do
    eps = attr(attrs, "epsilon", 1.0e-5)

    if attr(attrs, "training_mode", 0) == 1 or ctx.outputs > 1 do
      # the batch's own statistics, and the running ones updated with momentum
      r = rank(x)
      axes = [0 | Enum.to_list(2..(r - 1)//1)]
      m = Cascade.mean(x, axes: axes)
      v = Cascade.variance(x, axes: axes)
      per_channel = List.to_tuple([1, Cascade.size(scale)] ++ List.duplicate(1, r - 2))
      c = fn t -> Cascade.reshape(t, per_channel) end
      norm = Cascade.multiply(Cascade.subtract(x, c.(m)), Cascade.rsqrt(Cascade.add(c.(v), eps)))
      y = Cascade.add(Cascade.multiply(norm, c.(scale)), c.(b))
      momentum = attr(attrs, "momentum", 0.9)

      blend = fn old, new ->
        Cascade.add(Cascade.multiply(old, momentum), Cascade.multiply(new, 1 - momentum))
      end

      [y, blend.(mean, m), blend.(var, v)]
    else
      [Cascade.batch_norm(x, scale, b, mean, var, axis: 1, epsilon: eps)]
    end
  end

  def run("LayerNormalization", [x, scale | b], attrs, ctx) do
    r = rank(x)
    a = axis(attr(attrs, "axis", -1), r)
    axes = Enum.to_list(a..(r - 1)//1)
    eps = attr(attrs, "epsilon", 1.0e-5)

    b =
      case b do
        [b] when b != nil ->
          b

        _ ->
          Cascade.full(0, Cascade.shape(scale),
            type: Cascade.type(scale),
            device: Cascade.device(scale)
          )
      end

    # gamma and beta broadcast over the normalised axes: give them those axes' rank
    norm_rank = length(axes)
    fit = fn t -> Cascade.reshape(t, fit_shape(dims(t), norm_rank)) end
    y = Cascade.layer_norm(x, fit.(scale), fit.(b), axes: axes, epsilon: eps)

    if Map.get(ctx, :outputs, 3) > 1 do
      # the optional Mean and InvStdDev outputs, over the same axes, kept as 1s (in f32), only
      # for a node that names them
      x32 = Cascade.as_type(x, :f32)
      mean = Cascade.mean(x32, axes: axes, keep_axes: true)
      var = Cascade.variance(x32, axes: axes, keep_axes: true)
      [y, mean, Cascade.rsqrt(Cascade.add(var, eps))]
    else
      [y]
    end
  end

  def run("InstanceNormalization", [x, scale, b], attrs, _ctx) do
    r = rank(x)
    axes = Enum.to_list(2..(r - 1)//1)
    eps = attr(attrs, "epsilon", 1.0e-5)
    mean = Cascade.mean(x, axes: axes, keep_axes: true)
    var = Cascade.variance(x, axes: axes, keep_axes: true)
    per_channel = List.to_tuple([1, Cascade.size(scale)] ++ List.duplicate(1, r - 2))
    norm = Cascade.multiply(Cascade.subtract(x, mean), Cascade.rsqrt(Cascade.add(var, eps)))

    [
      Cascade.add(
        Cascade.multiply(norm, Cascade.reshape(scale, per_channel)),
        Cascade.reshape(b, per_channel)
      )
    ]
  end

  # x / (bias + alpha / size * (sum of x^2 over `size` channels around))^beta
  def run("LRN", [x], attrs, _ctx) do
    size = attr(attrs, "size", 1)
    alpha = attr(attrs, "alpha", 1.0e-4)
    beta = attr(attrs, "beta", 0.75)
    bias = attr(attrs, "bias", 1.0)
    r = rank(x)
    c = elem(Cascade.shape(x), 1)
    sq = Cascade.multiply(x, x)
    lo = div(size - 1, 2)
    hi = size - 1 - lo
    pads = for a <- 0..(r - 1), do: if(a == 1, do: {lo, hi, 0}, else: {0, 0, 0})
    padded = Cascade.pad(sq, 0, pads)
    d = dims(x)

    sum =
      Enum.reduce(0..(size - 1), nil, fn k, acc ->
        part =
          Cascade.slice(
            padded,
            List.replace_at(List.duplicate(0, r), 1, k),
            List.replace_at(d, 1, c)
          )

        if acc, do: Cascade.add(acc, part), else: part
      end)

    den = Cascade.pow(Cascade.add(Cascade.multiply(sum, alpha / size), bias), beta)
    [Cascade.divide(x, den)]
  end

  def run("MeanVarianceNormalization", [x], attrs, _ctx) do
    axes = attrs |> attr("axes", [0, 2, 3]) |> Enum.map(&axis(&1, rank(x)))
    mean = Cascade.mean(x, axes: axes, keep_axes: true)
    var = Cascade.variance(x, axes: axes, keep_axes: true)
    [Cascade.divide(Cascade.subtract(x, mean), Cascade.add(Cascade.sqrt(var), 1.0e-9))]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  defp fit_shape(d, n) when length(d) >= n, do: d |> Enum.take(-n) |> List.to_tuple()
  defp fit_shape(d, n), do: List.to_tuple(List.duplicate(1, n - length(d)) ++ d)
end
