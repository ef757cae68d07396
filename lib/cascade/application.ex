defmodule Cascade.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    check_config!(Application.get_all_env(:cascade))
    check_native!()
    Cascade.Native.set_gc_interval(Application.fetch_env!(:cascade, :gc_interval))
    Cascade.Native.set_policy(fallback_policy!())
    Cascade.Native.set_reproducible(reproducible!())
    Cascade.Fallback.init()
    # Cascade.Compiler's programs, by function, input signature, device and hooks
    :ets.new(:cascade_compiled, [:set, :public, :named_table, read_concurrency: true])
    Supervisor.start_link([], strategy: :one_for_one, name: Cascade.Supervisor)
  end

  @doc false
  # Every key of `config :cascade` that Cascade reads, checked before anything uses it: a bad
  # value raises ArgumentError naming the key, the value and what it takes. Keys Cascade does
  # not read are left alone (another library's, or a later version's).
  def check_config!(env) do
    for {key, value} <- env do
      case config_expected(key, value) do
        :ok ->
          :ok

        {:error, expected} ->
          raise ArgumentError,
                "config :cascade, #{key}: expected #{expected}, got: #{inspect(value, limit: 5)}"
      end
    end

    :ok
  end

  defp config_expected(:fallback, v) when v in [:allow, :warn, :error], do: :ok
  defp config_expected(:fallback, _), do: {:error, ":allow, :warn or :error"}

  defp config_expected(key, v) when key in [:reproducible, :malloc_tuning] and is_boolean(v),
    do: :ok

  defp config_expected(key, _) when key in [:reproducible, :malloc_tuning],
    do: {:error, "true or false"}

  defp config_expected(:gc_interval, v) when is_integer(v) and v > 0, do: :ok
  defp config_expected(:gc_interval, _), do: {:error, "a positive number of bytes"}

  defp config_expected(:download_timeout, v) when (is_integer(v) and v >= 0) or v == :infinity,
    do: :ok

  defp config_expected(:download_timeout, _),
    do: {:error, "a number of milliseconds (0 or more) or :infinity"}

  defp config_expected(:drivers, list) when is_list(list) do
    if Enum.all?(
         list,
         &(is_atom(&1) or match?({name, path} when is_atom(name) and is_binary(path), &1))
       ),
       do: :ok,
       else:
         {:error, "a list of driver names (:cuda, :opencl, :blas, :cpu) or {name, path} pairs"}
  end

  defp config_expected(:drivers, _),
    do: {:error, "a list of driver names (:cuda, :opencl, :blas, :cpu) or {name, path} pairs"}

  defp config_expected(:default_device, v)
       when is_atom(v) or
              (is_tuple(v) and tuple_size(v) == 2 and is_atom(elem(v, 0)) and
                 is_integer(elem(v, 1))),
       do: :ok

  defp config_expected(:default_device, _),
    do: {:error, "a device such as :host, :cpu, :blas or {:opencl, 1}"}

  defp config_expected(_key, _value), do: :ok

  defp fallback_policy! do
    case Application.get_env(:cascade, :fallback, :warn) do
      policy when policy in [:allow, :warn, :error] ->
        policy

      other ->
        raise ArgumentError,
              "config :cascade, fallback: expected :allow, :warn or :error, got: #{inspect(other)}"
    end
  end

  defp reproducible! do
    case Application.get_env(:cascade, :reproducible, false) do
      on when is_boolean(on) ->
        on

      other ->
        raise ArgumentError,
              "config :cascade, reproducible: expected true or false, got: #{inspect(other)}"
    end
  end

  # A library that failed to load, or one built from another op table, must stop the start
  # with a message that says what to do, not with an UndefinedFunctionError later.
  defp check_native! do
    unless Code.ensure_loaded?(Cascade.Native) do
      raise "Cascade's NIF library (priv/cascade_nif.so) did not load: run `mix compile` " <>
              "and check the output of make"
    end

    compiled = Enum.map(Cascade.__ops__(), & &1.name)

    if Cascade.Native.ops() != compiled do
      raise "priv/cascade_nif.so was built from another op table than lib/cascade.ex: " <>
              "run `mix compile --force`"
    end
  end
end
