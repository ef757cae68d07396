defmodule Cascade.TestCalls.NN do
  @moduledoc false
  # Valid calls of the nn composites for test/errors_test.exs.

  defp m22, do: Cascade.tensor([[1.0, 2.0], [3.0, 4.0]])

  @doc "A valid call: {input tensors, fun(inputs)}, or nil for ops of another family."
  def valid_call(:softmax), do: {[m22()], fn [x] -> Cascade.softmax(x) end}
  def valid_call(_), do: nil

  @doc "A valid call as a function of the options, or nil."
  def with_opts(:softmax), do: &Cascade.softmax(m22(), &1)
  def with_opts(_), do: nil
end
