defmodule Cascade.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    check_native!()
    Cascade.Native.set_gc_interval(Application.fetch_env!(:cascade, :gc_interval))
    Supervisor.start_link([], strategy: :one_for_one, name: Cascade.Supervisor)
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
