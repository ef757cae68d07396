defmodule Cascade.Demo.DeviceArg do
  @moduledoc """
  Reads the `--device` and `--type` arguments of `mix cascade.demo` and `mix cascade.bench`
  against what this machine has: `Cascade.devices/0` decides, so a driver built later appears
  without a change here.
  """

  @types %{"f32" => :f32, "f16" => :f16, "bf16" => :bf16, "f64" => :f64}

  @doc """
  The device named `name` (`cpu`, `opencl`, `opencl:1`, or `host` for the device
  `Cascade.Device.host/0` stands for), or `{:error, message}` that lists the devices there
  are, and why each unavailable one is.

      iex> Cascade.Demo.DeviceArg.device("cpu")
      {:ok, :cpu}
      iex> Cascade.Demo.DeviceArg.device("host") == {:ok, Cascade.Device.host()}
      true
  """
  @spec device(String.t()) :: {:ok, Cascade.Device.t()} | {:error, String.t()}
  def device("host"), do: {:ok, Cascade.Device.host()}

  def device(name) do
    devices = Cascade.devices()
    found = Enum.find(devices, &(name(&1.device) == normalize(name)))

    cond do
      found && found.available ->
        {:ok, found.device}

      found ->
        {:error, "device #{name} is not available here: #{found.reason}\n" <> listing(devices)}

      true ->
        {:error, "no device #{name}\n" <> listing(devices)}
    end
  end

  @doc "The devices that are available, in `Cascade.devices/0`'s order."
  @spec available() :: [Cascade.Device.t()]
  def available, do: for(d <- Cascade.devices(), d.available, do: d.device)

  @doc """
  The type named `name`, one of f32, f16, bf16, f64.

      iex> Cascade.Demo.DeviceArg.type("bf16")
      {:ok, :bf16}
      iex> Cascade.Demo.DeviceArg.type("s8")
      {:error, "no type s8; types: bf16, f16, f32, f64"}
  """
  @spec type(String.t()) :: {:ok, atom} | {:error, String.t()}
  def type(name) do
    case Map.fetch(@types, name) do
      {:ok, type} ->
        {:ok, type}

      :error ->
        {:error,
         "no type #{name}; types: #{@types |> Map.keys() |> Enum.sort() |> Enum.join(", ")}"}
    end
  end

  @doc "The name of a device as the command line writes it: `cpu`, `opencl:1`."
  @spec name(Cascade.Device.t()) :: String.t()
  def name({driver, 0}), do: to_string(driver)
  def name({driver, index}), do: "#{driver}:#{index}"
  def name(driver), do: to_string(driver)

  defp normalize(name), do: String.replace_suffix(name, ":0", "")

  defp listing(devices) do
    available = for d <- devices, d.available, do: name(d.device)
    unavailable = for d <- devices, not d.available, do: "  #{name(d.device)}: #{d.reason}"

    "available devices: #{Enum.join(available, ", ")}" <>
      if(unavailable == [], do: "", else: "\nunavailable:\n" <> Enum.join(unavailable, "\n"))
  end
end
