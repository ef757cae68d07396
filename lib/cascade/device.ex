defmodule Cascade.Device do
  @moduledoc """
  Devices and the default device.

  Each device is named by an atom (`:cpu`). The default device for functions that create
  tensors comes from `config :cascade, default_device: :cpu` and can be changed at run time
  for the whole node with `Cascade.put_default_device/1`.
  """

  @doc """
  The devices this build knows, available or not, with the reason when not.

      iex> Cascade.Device.list() |> Enum.find(&(&1.name == :cpu))
      %{name: :cpu, available: true, reason: nil}
  """
  @spec list() :: [%{name: atom, available: boolean, reason: String.t() | nil}]
  def list do
    for {name, available, reason} <- Cascade.Native.devices() do
      %{name: name, available: available, reason: if(available, do: nil, else: reason)}
    end
  end

  @doc false
  # The C id of a device name, checked; cached because devices do not change after load.
  def id!(name) do
    ids =
      case :persistent_term.get({__MODULE__, :ids}, nil) do
        nil ->
          ids =
            Cascade.Native.devices()
            |> Enum.with_index()
            |> Map.new(fn {{name, available, reason}, id} -> {name, {id, available, reason}} end)

          :persistent_term.put({__MODULE__, :ids}, ids)
          ids

        ids ->
          ids
      end

    case ids do
      %{^name => {id, true, _}} ->
        id

      %{^name => {_, false, reason}} ->
        raise Cascade.Error,
          driver: name,
          code: :unavailable,
          message: "device #{inspect(name)} is unavailable: #{reason}"

      _ ->
        raise ArgumentError,
              "unknown device #{inspect(name)}, expected one of #{inspect(Map.keys(ids))}"
    end
  end

  @doc """
  The default device: the one set with `Cascade.put_default_device/1`, else the
  `:default_device` of the `:cascade` application's config, else `:cpu`.

      iex> Cascade.Device.default()
      :cpu
  """
  @spec default() :: atom
  def default do
    case :persistent_term.get({__MODULE__, :default}, nil) do
      nil -> Application.get_env(:cascade, :default_device, :cpu)
      device -> device
    end
  end

  @doc false
  def put_default(device) do
    id!(device)
    :persistent_term.put({__MODULE__, :default}, device)
    :ok
  end
end
