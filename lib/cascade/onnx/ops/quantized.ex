defmodule Cascade.ONNX.Ops.Quantized do
  @moduledoc false
  # The quantized operators (Cascade.ONNX.Ops hands them here): linear (de)quantization,
  # integer products and convolutions (through Ops' Conv).

  import Cascade.ONNX.Ops,
    only: [
      attr: 3,
      fail: 1,
      round_half_even: 1,
      axis: 2,
      float?: 1,
      matmul: 2,
      per_axis: 3,
      type_atom: 1,
      rank: 1
    ]

  @doc false
  # uint8 quantization: y = saturate(round_half_even(x / scale) + zero_point), per tensor or per
  # slice along `axis` (1) for a 1-D scale
  def run("QuantizeLinear", [x, scale | zp], attrs, _ctx) do
    a = axis(attr(attrs, "axis", 1), rank(x))
    zp = List.first(zp)
    type = if zp, do: type_atom(zp), else: :u8
    [quantize(x, per_axis(scale, x, a), zp && per_axis(zp, x, a), type)]
  end

  def run("DequantizeLinear", [x, scale | zp], attrs, _ctx) do
    a = axis(attr(attrs, "axis", 1), rank(x))
    zp = List.first(zp)
    xf = Cascade.as_type(x, :f32)
    xf = if zp, do: Cascade.subtract(xf, Cascade.as_type(per_axis(zp, x, a), :f32)), else: xf
    [Cascade.multiply(xf, per_axis(scale, x, a)) |> Cascade.as_type(:f32)]
  end

  def run("DynamicQuantizeLinear", [x], _attrs, _ctx) do
    lo = Cascade.min(Cascade.reduce_min(x), 0)
    hi = Cascade.max(Cascade.reduce_max(x), 0)
    scale = Cascade.divide(Cascade.subtract(hi, lo), 255) |> Cascade.as_type(:f32)

    zp =
      round_half_even(Cascade.negate(Cascade.divide(lo, scale)))
      |> Cascade.max(0)
      |> Cascade.min(255)

    zp = Cascade.as_type(zp, :u8)
    [quantize(x, scale, zp, :u8), scale, zp]
  end

  def run("MatMulInteger", [a, b | zps], _attrs, _ctx) do
    [azp, bzp] = Enum.take(zps ++ [nil, nil], 2)
    [matmul(shifted(a, azp, 0), shifted(b, bzp, 1)) |> Cascade.as_type(:s32)]
  end

  def run("ConvInteger", [x, w | zps], attrs, ctx) do
    [xzp, wzp] = Enum.take(zps ++ [nil, nil], 2)
    xs = shifted(x, xzp, nil) |> Cascade.as_type(:f64)
    ws = shifted(w, wzp, 0) |> Cascade.as_type(:f64)
    [y] = Cascade.ONNX.Ops.run("Conv", [xs, ws], attrs, ctx)
    [Cascade.as_type(Cascade.round(y), :s32)]
  end

  def run("QLinearMatMul", [a, as, azp, b, bs, bzp, ys, yzp], _attrs, _ctx) do
    av = Cascade.multiply(shifted(a, azp, 0) |> Cascade.as_type(:f64), Cascade.as_type(as, :f64))
    bv = Cascade.multiply(shifted(b, bzp, 1) |> Cascade.as_type(:f64), Cascade.as_type(bs, :f64))
    [quantize(matmul(av, bv), ys, yzp, type_atom(yzp))]
  end

  def run("QLinearConv", [x, xs, xzp, w, ws, wzp, ys, yzp | b], attrs, ctx) do
    xv =
      Cascade.multiply(shifted(x, xzp, nil) |> Cascade.as_type(:f64), Cascade.as_type(xs, :f64))

    wv =
      Cascade.multiply(
        shifted(w, wzp, 0) |> Cascade.as_type(:f64),
        per_axis(Cascade.as_type(ws, :f64), w, 0)
      )

    bias =
      case b do
        [b] when b != nil ->
          [
            Cascade.multiply(
              Cascade.as_type(b, :f64),
              Cascade.multiply(Cascade.as_type(xs, :f64), Cascade.as_type(ws, :f64))
            )
          ]

        _ ->
          []
      end

    [y] = Cascade.ONNX.Ops.run("Conv", [xv, wv | bias], attrs, ctx)
    [quantize(y, ys, yzp, type_atom(yzp))]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  # x - zero_point in s32 (a 1-D zero point along `axis`, when given)
  defp shifted(x, nil, _axis), do: Cascade.as_type(x, :s32)

  defp shifted(x, zp, axis) do
    zp = if axis != nil, do: per_axis(zp, x, axis), else: zp
    Cascade.subtract(Cascade.as_type(x, :s32), Cascade.as_type(zp, :s32))
  end

  defp quantize(x, scale, zp, type) do
    {lo, hi} = if type == :u8, do: {0, 255}, else: fail("quantizing to #{type}")
    # x / scale in x's own float type, rounded as ONNX's reference does it (np.rint in f32)
    t = if float?(x), do: type_atom(x), else: :f32
    q = round_half_even(Cascade.divide(Cascade.as_type(x, t), Cascade.as_type(scale, t)))
    q = if zp, do: Cascade.add(q, Cascade.as_type(zp, t)), else: q
    q |> Cascade.max(lo) |> Cascade.min(hi) |> Cascade.as_type(type)
  end
end
