defmodule Mix.Tasks.Compile.Cascade do
  @moduledoc """
  Builds Cascade's C library with `make` and installs `cascade_nif.so`, and the optional
  drivers that were built (`cascade_driver_<name>.so`, and the programs their probes run,
  `cascade_<name>_probe`), into `priv/`. In the test environment
  it also builds the test driver, a device double that the tests load.

  Each shared object is copied to a temporary file and renamed into place, so a running VM
  that has the old library loaded keeps its mapping intact. `make`'s exit status is honoured:
  a failed build fails `mix compile`.
  """
  use Mix.Task.Compiler

  @impl true
  def run(_args) do
    root = Path.dirname(__ENV__.file)
    build = Path.join(Mix.Project.build_path(), "cascade_c")
    erts = Path.join([:code.root_dir(), "erts-#{:erlang.system_info(:version)}", "include"])

    make =
      System.find_executable("make") || Mix.raise("make is not installed (apt-get install make)")

    targets = if Mix.env() == :test, do: ["all", "test-driver"], else: ["all"]

    {_, status} =
      System.cmd(
        make,
        ["-s", "--no-print-directory", "-j#{System.schedulers_online()}", "-C", root] ++
          ["BUILD=#{build}", "ERTS_INCLUDE_DIR=#{erts}"] ++ targets,
        into: IO.stream(:stdio, :line),
        stderr_to_stdout: true
      )

    if status != 0, do: Mix.raise("make failed with exit status #{status}")

    priv = Path.join(root, "priv")
    File.mkdir_p!(priv)

    installed =
      for built <-
            [Path.join(build, "cascade_nif.so") | Path.wildcard("#{build}/cascade_driver_*.so")] ++
              Path.wildcard("#{build}/cascade_*_probe"),
          install(built, Path.join(priv, Path.basename(built))),
          do: built

    if installed == [], do: {:noop, []}, else: {:ok, []}
  end

  defp install(built, target) do
    if stale?(built, target) do
      tmp = target <> ".#{System.unique_integer([:positive])}.tmp"
      File.cp!(built, tmp)
      File.rename!(tmp, target)
      true
    else
      false
    end
  end

  defp stale?(built, target) do
    case {File.stat(built), File.stat(target)} do
      {{:ok, b}, {:ok, t}} -> b.size != t.size or b.mtime > t.mtime
      _ -> true
    end
  end
end

defmodule Cascade.MixProject do
  use Mix.Project

  @version "0.1.0"

  def project do
    [
      app: :cascade,
      version: @version,
      elixir: "~> 1.14",
      elixirc_paths: elixirc_paths(Mix.env()),
      compilers: [:cascade] ++ Mix.compilers(),
      start_permanent: Mix.env() == :prod,
      deps: deps(),
      build_path: build_path(),
      description:
        "Tensors for Elixir with a C core and devices that negotiate what they can run.",
      docs: [main: "readme", extras: ["README.md" | Path.wildcard("guides/*.md")]],
      test_coverage: [ignore_modules: [Mix.Tasks.Compile.Cascade]]
    ]
  end

  # Nx is optional: Cascade.Backend (lib/cascade/backend.ex) is compiled only when Nx is
  # present. An optional hex dependency must still be fetched to compile Cascade itself, and
  # hex is unreachable on some machines, so it is declared only where it can be had:
  #
  #   * CASCADE_NX_PATH=/path/to/nx (a local checkout of Nx's `nx` folder): Nx from there;
  #   * otherwise, when Hex is installed: `{:nx, "~> 0.7", optional: true}`, so that an
  #     application depending on Cascade and on Nx compiles Nx first;
  #   * otherwise no dependency at all: `mix compile` and `mix test` need no hex package
  #     (the Nx tests are then skipped).
  #
  # With CASCADE_NX_PATH, CASCADE_AXON_PATH and CASCADE_POLARIS_PATH (local checkouts of Axon
  # 0.6 and Polaris 0.1, whose own mix.exs point at the same Nx) add them in the test
  # environment: test/axon checks Cascade with a real client, and skips without them.
  defp deps do
    cond do
      path = System.get_env("CASCADE_NX_PATH") -> [{:nx, path: path, optional: true}] ++ axon()
      Code.ensure_loaded?(Hex) -> [{:nx, "~> 0.7", optional: true}]
      true -> []
    end
  end

  defp axon do
    case {System.get_env("CASCADE_AXON_PATH"), System.get_env("CASCADE_POLARIS_PATH")} do
      {axon, polaris} when is_binary(axon) and is_binary(polaris) ->
        [{:axon, path: axon, only: :test}, {:polaris, path: polaris, only: :test, override: true}]

      _ ->
        []
    end
  end

  # A build with Nx has its own build folder: Cascade.Backend exists only there, so going
  # back to a build without Nx never finds a stale Cascade.Backend compiled against it.
  defp build_path do
    cond do
      System.get_env("CASCADE_AXON_PATH") -> "_build/axon"
      System.get_env("CASCADE_NX_PATH") -> "_build/nx"
      true -> "_build"
    end
  end

  # The library is lib/. Cascade's own environments add the main job (the MNIST demo and its
  # `mix cascade.demo`) and the benchmarks' code (`mix cascade.bench`, `mix cascade.onnx`): an
  # application that depends on Cascade compiles it in :prod, without them.
  @tools ["examples/mnist/lib", "bench/lib"]
  defp elixirc_paths(:test), do: ["lib", "test/support" | @tools]
  defp elixirc_paths(:dev), do: ["lib" | @tools]
  defp elixirc_paths(_), do: ["lib"]

  def application do
    [
      extra_applications: [:logger],
      mod: {Cascade.Application, []},
      env: [
        default_device: :host,
        fallback: :warn,
        drivers: [:cuda, :opencl, :blas, :cpu],
        gc_interval: 4 * 1024 * 1024,
        # malloc's mmap and trim thresholds set to what glibc's own adaptation reaches (the BEAM
        # fixes them at 128 KiB); false leaves them as the BEAM set them
        malloc_tuning: true,
        # drivers choose how to run an op by timing (false) or by fixed rules (true)
        reproducible: false,
        # milliseconds Cascade.to_binary/2 waits for an asynchronous download (cuda)
        download_timeout: 60_000
      ]
    ]
  end
end
