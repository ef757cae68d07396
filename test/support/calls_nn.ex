defmodule Cascade.TestCalls.NN do
  @moduledoc false
  # Valid calls of the nn composites for test/errors_test.exs.

  defp m22, do: Cascade.tensor([[1.0, 2.0], [3.0, 4.0]])
  defp v2, do: Cascade.tensor([1.0, 0.5])
  defp m11, do: Cascade.tensor([[0.5]])
  # an lstm of one unit over one step of a batch of one: input, weights, bias, h0, c0
  defp recurrent_args do
    [
      Cascade.tensor([[[1.0, 0.5, -0.5, 2.0]]]),
      Cascade.tensor([[0.5], [0.5], [0.5], [0.5]]),
      Cascade.tensor([0.5, 0.5, 0.5, 0.5]),
      m11(),
      m11()
    ]
  end

  defp probs, do: Cascade.tensor([[0.25, 0.75], [0.5, 0.5]])

  @unary [
    :softmax,
    :log_softmax,
    :logsumexp,
    :mean,
    :variance,
    :standard_deviation,
    :relu,
    :leaky_relu,
    :elu,
    :gelu,
    :silu,
    :softplus,
    :hard_sigmoid
  ]
  @losses [:categorical_cross_entropy, :binary_cross_entropy, :mean_squared_error]
  @no_opts [:relu, :silu, :softplus, :hard_sigmoid]

  @doc "A valid call: {input tensors, fun(inputs)}, or nil for ops of another family."
  def valid_call(name) when name in @unary, do: {[m22()], fn [x] -> apply(Cascade, name, [x]) end}

  def valid_call(:layer_norm),
    do: {[m22(), v2(), v2()], fn [x, g, b] -> Cascade.layer_norm(x, g, b) end}

  def valid_call(:batch_norm),
    do:
      {[m22(), v2(), v2(), v2(), v2()],
       fn [x, g, b, m, v] -> Cascade.batch_norm(x, g, b, m, v) end}

  def valid_call(:dense),
    do: {[m22(), m22(), v2()], fn [x, k, b] -> Cascade.dense(x, k, b) end}

  def valid_call(:recurrent), do: {recurrent_args(), &apply(Cascade, :recurrent, &1)}

  def valid_call(:one_hot),
    do: {[Cascade.tensor([0, 1])], fn [i] -> Cascade.one_hot(i, depth: 2) end}

  def valid_call(name) when name in @losses,
    do: {[probs(), probs()], fn [t, p] -> apply(Cascade, name, [t, p]) end}

  def valid_call(_), do: nil

  @doc "A valid call as a function of the options, or nil."
  def with_opts(name) when name in @unary and name not in @no_opts,
    do: &apply(Cascade, name, [m22(), &1])

  def with_opts(:layer_norm), do: &Cascade.layer_norm(m22(), v2(), v2(), &1)
  def with_opts(:batch_norm), do: &Cascade.batch_norm(m22(), v2(), v2(), v2(), v2(), &1)
  def with_opts(:dense), do: &Cascade.dense(m22(), m22(), v2(), &1)

  def with_opts(:recurrent), do: &apply(Cascade, :recurrent, recurrent_args() ++ [&1])
  # depth: is required; non-keyword options are passed on as given
  def with_opts(:one_hot), do: &Cascade.one_hot(Cascade.tensor([0, 1]), with_depth(&1))
  def with_opts(name) when name in @losses, do: &apply(Cascade, name, [probs(), probs(), &1])
  def with_opts(_), do: nil

  defp with_depth(opts),
    do: if(Keyword.keyword?(opts), do: Keyword.put_new(opts, :depth, 2), else: opts)
end
