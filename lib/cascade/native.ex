defmodule Cascade.Native do
  @moduledoc false
  # The NIF entry points. There is one generic `op/5` for every op of the table: the C side
  # decodes the parameter map with the same table, so no op is written out here.
  @on_load :load

  # The drivers to load come from `config :cascade, drivers: [...]` (cpu is always there) and
  # the fallback policy from `fallback:`, and whether C's malloc gets its thresholds back
  # (`malloc_tuning:`, cascade_nif.c); all are read once, when the library loads. A driver
  # that is not built or fails to load is listed as unavailable with the reason. An entry is a
  # name (the driver built into priv/) or {name, path} (a driver's shared object elsewhere: an
  # out-of-tree driver, or the cuda driver's cpu emulator build in the tests).
  def load do
    priv = :code.priv_dir(:cascade)

    drivers =
      for entry <- Application.get_env(:cascade, :drivers, [:cuda, :opencl, :blas, :cpu]),
          {name, path} = driver_path(entry, priv),
          is_atom(name) and name != :cpu,
          do: {name, path}

    info = %{
      drivers: drivers,
      fallback: Application.get_env(:cascade, :fallback, :warn),
      malloc_tuning: Application.get_env(:cascade, :malloc_tuning, true)
    }

    :erlang.load_nif(:filename.join(priv, ~c"cascade_nif"), info)
  end

  defp driver_path({name, path}, _priv) when is_binary(path), do: {name, Path.expand(path)}

  defp driver_path(name, priv),
    do: {name, IO.chardata_to_string(:filename.join(priv, ~c"cascade_driver_#{name}.so"))}

  defp nif!, do: :erlang.nif_error(:cascade_nif_not_loaded)

  # flags: the bits of c_src/nif/op_flags.h (Cascade.Op reads them from there)
  def op(_op_id, _refs, _params, _device_id, _flags), do: nif!()
  def from_binary(_binary, _type, _shape, _device_id), do: nif!()
  def to_binary(_ref, _limit, _tag), do: nif!()
  def async_downloads, do: nif!()
  def free(_ref), do: nif!()
  def freed?(_ref), do: nif!()
  def memory, do: nif!()
  def devices, do: nif!()
  def ops, do: nif!()
  def set_gc_interval(_bytes), do: nif!()
  def set_reproducible(_on), do: nif!()
  def explain(_op_id, _refs, _params, _device_id), do: nif!()
  def capabilities(_device_id), do: nif!()
  def stats, do: nif!()
  def reset_stats, do: nif!()
  def set_policy(_policy), do: nif!()
  def transfer(_ref, _device_id, _tag), do: nif!()
  def program_new(_device_id, _inputs, _consts, _steps, _outputs, _donated), do: nif!()
  def program_run(_program, _refs), do: nif!()
  def program_steps(_program), do: nif!()
  def program_loop(_cond, _cond_pick, _body, _body_picks, _refs), do: nif!()

  # Watching the normal schedulers (c_src/nif/normal_watch.h), for the scheduling tests:
  # watch_normal(limit_us | false) records every call into this library that ran on a normal
  # scheduler for limit_us or more of wall time, with its CPU time and context switches;
  # normal_records/0 returns {records, dropped} and clears them; set_dirty_thresholds(cost,
  # bytes) moves the point above which calls go to a dirty scheduler and returns the old one.
  def watch_normal(_limit_us), do: nif!()
  def normal_records, do: nif!()
  def set_dirty_thresholds(_cost, _bytes), do: nif!()
end
