defmodule Cascade.Device do
  @moduledoc """
  Devices and the default device.

  A device is named by its driver's atom for the driver's first device (`:cpu`, `:opencl`)
  and by `{driver, index}` for the others (`{:opencl, 1}`); `{:opencl, 0}` is the same device
  as `:opencl`.

  `:host` names the fastest device that computes in the machine's own memory: `:blas`
  (OpenBLAS for products and convolutions, vector kernels chosen for the processor at run
  time for the rest) where it loaded, else `:cpu` (portable C, the reference every other
  driver is checked against). It is the default device unless configured otherwise, and it
  is resolved when used: tensors carry the device it stands for.

  The device that creation functions use when no `device:` is given is, in order:

    1. the one set for the calling process with `Cascade.with_device/2`, or for the process
       that started it (tasks started inside `with_device/2` inherit it, through `$callers`);
    2. the one set for the node with `Cascade.put_default_device/1`;
    3. `config :cascade, default_device: ...`;
    4. `:host`.

  Operations run on the device of their inputs; tensors on different devices must be moved
  with `Cascade.transfer/2` first.
  """

  @type t :: atom | {atom, non_neg_integer}

  @process_key {__MODULE__, :device}

  @doc """
  Every device of every driver that was asked for, available or not, with the reason when
  not, and the device's properties.

      iex> cpu = Cascade.Device.list() |> Enum.find(&(&1.device == :cpu))
      iex> {cpu.available, cpu.kind, cpu.host_memory}
      {true, "cpu", true}
  """
  @spec list() :: [map]
  def list do
    for {_id, device, driver, available, reason, props} <- Cascade.Native.devices() do
      Map.merge(props, %{
        device: device,
        driver: driver,
        available: available,
        reason: if(available, do: nil, else: reason)
      })
    end
  end

  @doc false
  # The C id of a device, checked; cached because devices do not change after load.
  def id!(device) do
    ids =
      case :persistent_term.get({__MODULE__, :ids}, nil) do
        nil ->
          ids =
            Map.new(Cascade.Native.devices(), fn {id, device, _driver, available, reason, _} ->
              {device, {id, available, reason}}
            end)

          :persistent_term.put({__MODULE__, :ids}, ids)
          ids

        ids ->
          ids
      end

    case Map.get(ids, normalize(device)) do
      {id, true, _} ->
        id

      {_, false, reason} ->
        raise Cascade.Error,
          driver: driver_of(device),
          code: :unavailable,
          message: "device #{inspect(device)} is unavailable: #{reason}"

      nil ->
        raise ArgumentError,
              "unknown device #{inspect(device)}, expected one of " <>
                inspect(ids |> Enum.filter(fn {_, {_, a, _}} -> a end) |> Enum.map(&elem(&1, 0)))
    end
  end

  defp normalize({driver, 0}) when is_atom(driver), do: driver
  defp normalize(:host), do: host()
  defp normalize(device), do: device

  @doc """
  The device `:host` stands for: `:blas` where it is available, else `:cpu`.

      iex> Cascade.Device.host() in [:blas, :cpu]
      true
  """
  @spec host() :: :blas | :cpu
  def host do
    case :persistent_term.get({__MODULE__, :host}, nil) do
      nil ->
        available = for {_, d, _, true, _, _} <- Cascade.Native.devices(), do: d
        host = if :blas in available, do: :blas, else: :cpu
        :persistent_term.put({__MODULE__, :host}, host)
        host

      host ->
        host
    end
  end

  @doc false
  # The driver of a device (`:host` resolved): `:opencl` for `{:opencl, 1}`.
  def driver(device), do: device |> normalize() |> driver_of()

  defp driver_of({driver, _}), do: driver
  defp driver_of(driver), do: driver

  @doc """
  The default device for the calling process (see the module documentation for the order).

      iex> Cascade.Device.default()
      :cpu
  """
  @spec default() :: t
  def default do
    case Process.get(@process_key) do
      nil -> inherited() || node_default()
      {:inherited, nil} -> node_default()
      {:inherited, device} -> device
      device -> device
    end
  end

  defp node_default do
    case :persistent_term.get({__MODULE__, :default}, nil) do
      nil -> normalize(Application.get_env(:cascade, :default_device, :host))
      device -> device
    end
  end

  # The device of the first caller (Task's `$callers`) that set one, remembered in this
  # process so that later calls read only its own dictionary.
  defp inherited do
    case Process.get(:"$callers") do
      [_ | _] = callers ->
        device = Enum.find_value(callers, &caller_device/1)
        Process.put(@process_key, {:inherited, device})
        device

      _ ->
        nil
    end
  end

  defp caller_device(pid) when is_pid(pid) do
    with {:dictionary, dict} <- Process.info(pid, :dictionary),
         {_, device} <- List.keyfind(dict, @process_key, 0) do
      case device do
        {:inherited, device} -> device
        device -> device
      end
    else
      _ -> nil
    end
  end

  defp caller_device(_), do: nil

  @doc false
  def put_default(device) do
    id!(device)
    :persistent_term.put({__MODULE__, :default}, normalize(device))
    :ok
  end

  @doc false
  def with_device(device, fun) when is_function(fun, 0) do
    id!(device)
    previous = Process.get(@process_key)
    Process.put(@process_key, normalize(device))

    try do
      fun.()
    after
      if previous == nil,
        do: Process.delete(@process_key),
        else: Process.put(@process_key, previous)
    end
  end

  def with_device(_device, fun) do
    raise ArgumentError,
          "Cascade.with_device/2: expected a function of no arguments, got: #{inspect(fun)}"
  end
end
