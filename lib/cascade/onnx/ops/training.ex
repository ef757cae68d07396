defmodule Cascade.ONNX.Ops.Training do
  @moduledoc false
  # The optimizers of the ai.onnx.preview.training domain (Cascade.ONNX.Ops hands them here).

  import Cascade.ONNX.Ops, only: [attr: 3, fail: 1]

  @doc false
  # The optimizers of the ai.onnx.preview.training domain (version 1): inputs R (the learning
  # rate) and T (the update count, a scalar read here), then the groups X..., G... and the
  # optimizer's state (Adagrad: H...; Momentum: V...; Adam: V..., H...); outputs the new X...
  # then the new state, group by group, with the formulas of the ONNX operator docs.
  def run("Adagrad", [r, t | rest], attrs, _ctx) do
    [xs, gs, hs] = Enum.chunk_every(rest, div(length(rest), 3))
    decay = attr(attrs, "decay_factor", 0.0)
    eps = attr(attrs, "epsilon", 1.0e-6)
    norm = attr(attrs, "norm_coefficient", 0.0)
    r = Cascade.divide(r, 1 + scalar_value(t) * decay)

    {x_new, h_new} =
      Enum.zip_with([xs, gs, hs], fn [x, g, h] ->
        g = regularized(x, g, norm)
        h = Cascade.add(h, Cascade.multiply(g, g))
        step = Cascade.divide(Cascade.multiply(r, g), Cascade.add(Cascade.sqrt(h), eps))
        {Cascade.subtract(x, step), h}
      end)
      |> Enum.unzip()

    x_new ++ h_new
  end

  def run("Momentum", [r, t | rest], attrs, _ctx) do
    [xs, gs, vs] = Enum.chunk_every(rest, div(length(rest), 3))
    alpha = attr(attrs, "alpha", 0.0)
    beta = if scalar_value(t) > 0, do: attr(attrs, "beta", 0.0), else: 1.0
    norm = attr(attrs, "norm_coefficient", 0.0)
    nesterov = attr(attrs, "mode", "standard") == "nesterov"

    {x_new, v_new} =
      Enum.zip_with([xs, gs, vs], fn [x, g, v] ->
        g = regularized(x, g, norm)
        v = Cascade.add(Cascade.multiply(v, alpha), Cascade.multiply(g, beta))
        dir = if nesterov, do: Cascade.add(g, Cascade.multiply(v, alpha)), else: v
        {Cascade.subtract(x, Cascade.multiply(r, dir)), v}
      end)
      |> Enum.unzip()

    x_new ++ v_new
  end

  def run("Adam", [r, t | rest], attrs, _ctx) do
    [xs, gs, vs, hs] = Enum.chunk_every(rest, div(length(rest), 4))
    alpha = attr(attrs, "alpha", 0.9)
    beta = attr(attrs, "beta", 0.999)
    eps = attr(attrs, "epsilon", 1.0e-6)
    norm = attr(attrs, "norm_coefficient", 0.0)
    post = attr(attrs, "norm_coefficient_post", 0.0)
    steps = scalar_value(t)

    r =
      if steps > 0,
        do:
          Cascade.multiply(
            r,
            :math.sqrt(1 - :math.pow(beta, steps)) / (1 - :math.pow(alpha, steps))
          ),
        else: r

    {x_new, v_new, h_new} =
      Enum.zip_with([xs, gs, vs, hs], fn [x, g, v, h] ->
        g = regularized(x, g, norm)
        v = Cascade.add(Cascade.multiply(v, alpha), Cascade.multiply(g, 1 - alpha))

        h =
          Cascade.add(
            Cascade.multiply(h, beta),
            Cascade.multiply(Cascade.multiply(g, g), 1 - beta)
          )

        step = Cascade.multiply(r, Cascade.divide(v, Cascade.add(Cascade.sqrt(h), eps)))
        {Cascade.multiply(Cascade.subtract(x, step), 1 - post), v, h}
      end)
      |> Enum.reduce({[], [], []}, fn {x, v, h}, {xs, vs, hs} ->
        {[x | xs], [v | vs], [h | hs]}
      end)

    Enum.reverse(x_new) ++ Enum.reverse(v_new) ++ Enum.reverse(h_new)
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  defp regularized(_x, g, norm) when norm == 0, do: g
  defp regularized(x, g, norm), do: Cascade.add(Cascade.multiply(x, norm), g)

  defp scalar_value(t), do: t |> Cascade.reshape({}) |> Cascade.to_list()
end
