defmodule Cascade.TestCalls.Conv do
  @moduledoc false
  # Valid calls of the conv composites for test/errors_test.exs.

  @doc "A valid call: {input tensors, fun(inputs)}, or nil for ops of another family."
  def valid_call(_), do: nil

  @doc "A valid call as a function of the options, or nil."
  def with_opts(_), do: nil
end
