defmodule Cascade.Demo.Adam do
  @moduledoc """
  Adam (Kingma and Ba), on parameter lists of `{kernel, bias}` pairs like the demo models':

      m = β₁ m + (1 − β₁) g        v = β₂ v + (1 − β₂) g²
      p = p − rate · √(1 − β₂ᵗ) / (1 − β₁ᵗ) · m / (√v + ε √(1 − β₂ᵗ))

  (the bias-corrected update, written with the corrections folded into the step size), with
  β₁ = 0.9, β₂ = 0.999, ε = 1e-8 as in PyTorch's `torch.optim.Adam`. A `weight_decay` λ above
  zero decays the parameters as AdamW does (decoupled from the moments): p is first scaled by
  1 − rate · λ, one multiply per parameter tensor and step.
  """

  @b1 0.9
  @b2 0.999
  @eps 1.0e-8

  @doc "The optimiser's state for `params`: zero moments, no step taken."
  def init(params) do
    zeros = Enum.map(params, fn {a, b} -> {Cascade.multiply(a, 0), Cascade.multiply(b, 0)} end)
    %{m: zeros, v: zeros, t: 0}
  end

  @doc """
  One step: `{params, state}` after applying `grads` with learning rate `rate` and decoupled
  weight decay `weight_decay` (default 0: plain Adam).
  """
  def step(params, grads, %{m: m, v: v, t: t}, rate, weight_decay \\ 0.0) do
    t = t + 1
    decay = 1 - rate * weight_decay

    m =
      zip(m, grads, fn m, g ->
        Cascade.add(Cascade.multiply(m, @b1), Cascade.multiply(g, 1 - @b1))
      end)

    v =
      zip(v, grads, fn v, g ->
        Cascade.add(Cascade.multiply(v, @b2), Cascade.multiply(Cascade.multiply(g, g), 1 - @b2))
      end)

    c2 = :math.sqrt(1 - :math.pow(@b2, t))
    size = rate * c2 / (1 - :math.pow(@b1, t))

    params =
      zip3(params, m, v, fn p, m, v ->
        update = Cascade.divide(m, Cascade.add(Cascade.sqrt(v), @eps * c2))
        p = if weight_decay > 0, do: Cascade.multiply(p, decay), else: p
        Cascade.subtract(p, Cascade.multiply(update, size))
      end)

    {params, %{m: m, v: v, t: t}}
  end

  defp zip(left, right, fun),
    do: Enum.zip_with(left, right, fn {a, b}, {c, d} -> {fun.(a, c), fun.(b, d)} end)

  defp zip3(ps, ms, vs, fun) do
    Enum.zip_with([ps, ms, vs], fn [{p1, p2}, {m1, m2}, {v1, v2}] ->
      {fun.(p1, m1, v1), fun.(p2, m2, v2)}
    end)
  end
end
