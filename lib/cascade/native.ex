defmodule Cascade.Native do
  @moduledoc false
  # The NIF entry points. There is one generic `op/4` for every op of the table: the C side
  # decodes the parameter map with the same table, so no op is written out here.
  @on_load :load

  def load do
    path = :filename.join(:code.priv_dir(:cascade), ~c"cascade_nif")
    :erlang.load_nif(path, 0)
  end

  defp nif!, do: :erlang.nif_error(:cascade_nif_not_loaded)

  def op(_op_id, _refs, _params, _device_id), do: nif!()
  def from_binary(_binary, _type, _shape, _device_id), do: nif!()
  def to_binary(_ref, _limit), do: nif!()
  def free(_ref), do: nif!()
  def freed?(_ref), do: nif!()
  def memory, do: nif!()
  def devices, do: nif!()
  def ops, do: nif!()
  def set_gc_interval(_bytes), do: nif!()
end
