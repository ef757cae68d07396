defmodule Cascade.Error do
  @moduledoc """
  A run-time failure in a driver: out of memory, device unavailable, device lost.

  Programmer errors (bad shapes, types, options) raise `ArgumentError` instead.

  Fields: `:driver` (an atom such as `:cpu`), `:code` (`:out_of_memory`, `:device_error`,
  `:unsupported`) and `:message`.
  """
  defexception [:driver, :code, :message]
end
