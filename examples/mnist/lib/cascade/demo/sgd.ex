defmodule Cascade.Demo.SGD do
  @moduledoc """
  Stochastic gradient descent with momentum, on parameter lists shaped like
  `Cascade.Demo.MLP`'s: `v = momentum * v + g`, `p = p - rate * v`.
  """

  @doc "The optimiser's state for `params`: a zero velocity for each parameter."
  @spec init(Cascade.Demo.MLP.params()) :: Cascade.Demo.MLP.params()
  def init(params), do: map_pairs(params, &Cascade.multiply(&1, 0))

  @doc "One step: `{params, state}` after applying `grads` with learning rate `rate`."
  @spec step(list, list, list, float, float) :: {list, list}
  def step(params, grads, velocity, rate, momentum) do
    velocity = zip_pairs(velocity, grads, &Cascade.add(Cascade.multiply(&1, momentum), &2))
    params = zip_pairs(params, velocity, &Cascade.subtract(&1, Cascade.multiply(&2, rate)))
    {params, velocity}
  end

  defp map_pairs(pairs, fun), do: Enum.map(pairs, fn {a, b} -> {fun.(a), fun.(b)} end)

  defp zip_pairs(left, right, fun),
    do: Enum.zip_with(left, right, fn {a, b}, {c, d} -> {fun.(a, c), fun.(b, d)} end)
end
