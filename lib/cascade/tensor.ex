defmodule Cascade.Tensor do
  @moduledoc """
  An immutable tensor that lives on a device.

  The struct is what Cascade functions take and return. `:ref` is opaque: a reference to
  memory owned by the device, or a value (below); `:shape`, `:type` and `:device` are plain
  terms that can be read without calling into C. Tensors are garbage collected like any term;
  `Cascade.free/1` releases the device memory early.

  ## Values

  The result of an op that runs on a device with host memory (`:cpu`, `:blas`) and holds at
  most 48 bytes (twelve f32 numbers, six f64) is a *value*: `:ref` is then a binary of at most
  64 bytes that holds the result's type, shape, device and data, and lives on the process heap
  like any small binary. Making a device resource and collecting it costs the BEAM about
  250-330 ns, more than NumPy's whole one-element add; a small binary costs about 20. Values
  take part in every function like any tensor. What differs:

    * a value holds no device memory: `Cascade.free/1` has nothing to release (the value stays
      readable), `Cascade.memory/0` does not count it, and a compiled function that is donated
      a value copies it instead of writing into it;
    * two values of equal type, shape, device and data are equal terms (`==`), as two equal
      binaries are.

  Tensors made from data (`tensor/2`, `from_binary/4`, `load/2`) are always resources, and so
  are the results of ops on other devices and of the ops `Cascade.Compiler` records while it
  builds a program. A compiled function's small results on a host device are values, as an
  op's are.

      iex> small = Cascade.add(Cascade.tensor([1.0, 2.0]), 1.0)
      iex> is_binary(small.ref)
      true
      iex> Cascade.free(small)
      :ok
      iex> Cascade.to_list(small)
      [2.0, 3.0]
  """
  @enforce_keys [:ref, :shape, :type, :device]
  defstruct [:ref, :shape, :type, :device]

  @type t :: %__MODULE__{
          ref: reference | binary,
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
