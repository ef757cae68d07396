defmodule Cascade.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    check_native!()
    Cascade.Native.set_gc_interval(Application.fetch_env!(:cascade, :gc_interval))
    Cascade.Native.set_policy(fallback_policy!())
    Cascade.Native.set_reproducible(reproducible!())
    Cascade.Fallback.init()
    # Cascade.Compiler's programs, by function, input signature, device and hooks
    :ets.new(:cascade_compiled, [:set, :public, :named_table, read_concurrency: true])
    Supervisor.start_link([], strategy: :one_for_one, name: Cascade.Supervisor)
  end

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
