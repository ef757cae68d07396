defmodule Cascade.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    Cascade.Native.set_gc_interval(Application.fetch_env!(:cascade, :gc_interval))
    Supervisor.start_link([], strategy: :one_for_one, name: Cascade.Supervisor)
  end
end
