defmodule Cascade.Tensor do
  @moduledoc """
  An immutable tensor that lives on a device.

  The struct is what Cascade functions take and return. `:ref` is an opaque reference to
  memory owned by the device; `:shape`, `:type` and `:device` are plain terms that can be
  read without calling into C. Tensors are garbage collected like any term; `Cascade.free/1`
  releases the device memory early.
  """
  @enforce_keys [:ref, :shape, :type, :device]
  defstruct [:ref, :shape, :type, :device]

  @type t :: %__MODULE__{
          ref: reference,
          shape: tuple,
          type: Cascade.Type.t(),
          device: Cascade.Device.t()
        }

  defimpl Inspect do
    import Inspect.Algebra

    def inspect(%{shape: shape, type: {kind, bits}, device: device} = t, opts) do
      dims = shape |> Tuple.to_list() |> Enum.map_join(&"[#{&1}]")
      header = "#{kind}#{bits}#{dims} #{device_name(device)}"
      concat(["#Cascade.Tensor<", header, " ", body(t, opts), ">"])
    end

    defp device_name({driver, index}), do: "#{driver}:#{index}"
    defp device_name(driver), do: to_string(driver)

    defp body(t, opts) do
      if Cascade.Native.freed?(t.ref) do
        "(freed)"
      else
        dims = Tuple.to_list(t.shape)
        numel = Enum.product(dims)
        # :infinity compares above every integer in Erlang's term order
        limit = opts.limit
        # an empty tensor still prints one list per row before its first zero dimension
        rows = dims |> Enum.take_while(&(&1 != 0)) |> Enum.product()

        cond do
          (numel == 0 and rows > limit) or limit == 0 ->
            "[...]"

          numel <= limit ->
            t |> Cascade.to_list() |> inspect_value(opts)

          true ->
            # Only the first `limit` elements cross from the device.
            type = Cascade.Type.normalize!(t.type)
            bin = Cascade.to_binary(t, limit: limit)
            flat = Cascade.Type.decode(bin, type) |> Enum.map_join(", ", &Kernel.inspect/1)
            "[#{flat}, ...]"
        end
      end
    end

    defp inspect_value(value, opts),
      do: Kernel.inspect(value, limit: :infinity, width: opts.width, charlists: :as_lists)
  end
end
