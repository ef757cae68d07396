if Code.ensure_loaded?(Nx.Serving) do
  defmodule Cascade.ServingFixtures do
    @moduledoc false
    # What the serving tests and bench/serving.exs run on every node: a dense 784-256-10 model
    # whose parameters are made from fixed numbers (every node makes the same), served through
    # Cascade.Compiler; and the helpers that start peer nodes on the loopback address with this
    # node's code paths and Cascade started.

    @inputs 784
    @hidden 256
    @classes 10
    @fill :cascade_serving_fill

    @doc "The model's parameters, the same on every node: {w1, b1, w2, b2} as Nx tensors."
    def params do
      case :persistent_term.get({__MODULE__, :params}, nil) do
        nil ->
          params = make_params()
          :persistent_term.put({__MODULE__, :params}, params)
          params

        params ->
          params
      end
    end

    # on Nx.BinaryBackend, which takes a while for 200K numbers: made once a node
    defp make_params do
      w1 = Nx.iota({@inputs, @hidden}, type: :f32) |> Nx.sin() |> Nx.multiply(0.05)
      b1 = Nx.iota({@hidden}, type: :f32) |> Nx.cos() |> Nx.multiply(0.01)
      w2 = Nx.iota({@hidden, @classes}, type: :f32) |> Nx.cos() |> Nx.multiply(0.5)
      b2 = Nx.iota({@classes}, type: :f32) |> Nx.sin() |> Nx.multiply(0.01)
      {w1, b1, w2, b2}
    end

    @doc "The class probabilities of a batch x {n, 784}."
    def predict(x, {w1, b1, w2, b2}) do
      x
      |> Nx.dot(w1)
      |> Nx.add(b1)
      |> Nx.max(0)
      |> Nx.dot(w2)
      |> Nx.add(b2)
      |> then(&Nx.exp(Nx.subtract(&1, Nx.reduce_max(&1, axes: [1], keep_axes: true))))
      |> then(&Nx.divide(&1, Nx.sum(&1, axes: [1], keep_axes: true)))
    end

    @doc """
    The serving: batches of rows {n, 784} f32, each request's probabilities back as binary
    tensors (they may cross nodes). `defn_options` go to the compiler (`device:`, `devices:`,
    `max_concurrency:`). `model`: `:dense` (the model above through Cascade.Compiler) or
    `:cnn` (`Cascade.Demo.CNN`, the main job's network on Cascade ops, randomly initialised:
    its logits).
    """
    def serving(defn_options \\ [], model \\ :dense) do
      Nx.Serving.new(
        fn opts ->
          run = batch_fun(model, opts)

          # the batches run and the rows they held, on this node (the table lives as long as
          # the serving that made it)
          if :ets.whereis(@fill) == :undefined, do: :ets.new(@fill, [:named_table, :public])

          fn batch ->
            t0 = System.monotonic_time(:microsecond)
            out = run.(batch)
            us = System.monotonic_time(:microsecond) - t0

            :ets.update_counter(
              @fill,
              :batches,
              [{2, 1}, {3, batch.size}, {4, us}],
              {:batches, 0, 0, 0}
            )

            out
          end
        end,
        [compiler: Cascade.Compiler] ++ defn_options
      )
      |> Nx.Serving.distributed_postprocessing(&Nx.backend_copy(&1, Nx.BinaryBackend))
    end

    # the model as a function of an Nx.Batch, on the device of `opts`
    defp batch_fun(:dense, opts) do
      params = params() |> Nx.backend_copy({Cascade.Backend, device: opts[:device]})
      predict = Nx.Defn.jit(&predict/2, opts)
      &predict.(&1, params)
    end

    defp batch_fun(:cnn, opts) do
      device = opts[:device] || Cascade.Device.default()
      params = Cascade.Demo.CNN.init(device: device)
      &cnn_batch(&1, params, device)
    end

    # The batch padded with zero rows to the next power of two (blas times its convolution
    # paths once per shape: 7 shapes instead of 64), its logits back on Nx.BinaryBackend.
    defp cnn_batch(%Nx.Batch{size: n} = batch, params, device) do
      {x, nil} = Nx.LazyContainer.traverse(batch, nil, fn _, fun, nil -> {fun.(), nil} end)
      rows = 2 ** ceil(:math.log2(max(n, 1)))
      padding = :binary.copy(<<0::float-32-native>>, (rows - n) * @inputs)

      (Nx.to_binary(x) <> padding)
      |> Cascade.from_binary(:f32, {rows, @inputs}, device: device)
      |> then(&Cascade.Demo.CNN.logits(params, &1))
      |> Cascade.slice([0, 0], [n, @classes])
      |> Cascade.to_binary()
      |> Nx.from_binary(:f32)
      |> Nx.reshape({n, @classes})
    end

    @doc """
    `{batches, rows, microseconds}`: the batches the servings of this node ran since it
    started, the rows they held and the time they took to run.
    """
    def fill do
      with ref when ref != :undefined <- :ets.whereis(@fill),
           [{:batches, b, r, us}] <- :ets.lookup(@fill, :batches),
           do: {b, r, us},
           else: (_ -> {0, 0, 0})
    end

    @doc """
    The plain loop beside a serving: `model` (see serving/2) on one batch of 64 one-row
    requests, again and again for `seconds`, on the default device; rows/s.
    """
    def plain_loop(seconds, model \\ :dense) do
      run = batch_fun(model, device: Cascade.Device.default(), compiler: Cascade.Compiler)
      batch = Nx.Batch.concatenate(for i <- 0..63, do: request(i))
      run.(batch)
      stop_at = System.monotonic_time(:millisecond) + seconds * 1000
      plain_loop(run, batch, stop_at, 0) * 64 / seconds
    end

    defp plain_loop(run, batch, stop_at, n) do
      if System.monotonic_time(:millisecond) >= stop_at do
        n
      else
        run.(batch)
        plain_loop(run, batch, stop_at, n + 1)
      end
    end

    @doc "Request `i`: `n` rows of pixels in [0, 1), the same for the same `i` on any node."
    def request(i, n \\ 1) do
      Nx.iota({n, @inputs}, type: :f32)
      |> Nx.add(i * 7919)
      |> Nx.multiply(0.618034)
      |> then(&Nx.subtract(&1, Nx.floor(&1)))
    end

    @doc """
    Starts a peer node `name@127.0.0.1` (this node must be alive) that has this node's code
    paths, with `env` set in the peer's OS environment and `args` for its VM; starts
    Cascade and Nx there. Returns `{pid, node}` (`:peer.stop(pid)` stops it).
    """
    def start_peer(name, env \\ [], args \\ []) do
      paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])

      {:ok, pid, node} =
        :peer.start(%{
          name: name,
          host: ~c"127.0.0.1",
          longnames: true,
          # connected to this node only: a peer killed makes no other peer drop its connections
          args: [~c"-connect_all", ~c"false"] ++ paths ++ Enum.map(args, &String.to_charlist/1),
          env: Enum.map(env, fn {k, v} -> {String.to_charlist(k), String.to_charlist(v)} end)
        })

      {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:cascade])
      {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:nx])
      {pid, node}
    end

    @doc """
    Starts the serving as `name` on `node`, unlinked from the caller (it lives until the node
    stops); `opts` go to `Nx.Serving.start_link/1`.
    """
    def start_serving(node, name, defn_options \\ [], opts \\ [], model \\ :dense) do
      :erpc.call(node, fn ->
        {:ok, pid} =
          Nx.Serving.start_link(
            Keyword.merge(
              [
                serving: serving(defn_options, model),
                name: name,
                batch_size: 64,
                batch_timeout: 2
              ],
              opts
            )
          )

        Process.unlink(pid)
        pid
      end)
    end

    @doc "Stops a peer node from start_peer/3, if it still runs."
    def stop_peer(pid) do
      :peer.stop(pid)
    catch
      :exit, _ -> :ok
    end

    @doc """
    Starts as `name` a serving that doubles its input through Cascade.Compiler and sends its
    results back as they are: Cascade tensors, which do not travel between nodes.
    """
    def start_raw_serving(name) do
      serving =
        Nx.Serving.new(fn opts -> Nx.Defn.jit(&Nx.multiply(&1, 2), opts) end,
          compiler: Cascade.Compiler
        )

      {:ok, pid} = Nx.Serving.start_link(serving: serving, name: name, batch_size: 8)
      Process.unlink(pid)
      pid
    end

    @doc "Loads the ONNX model of `bytes` and serves it as `name` (Cascade.ONNX.serving/2)."
    def start_onnx_serving(name, bytes) do
      {:ok, model} = Cascade.ONNX.load(bytes)

      {:ok, pid} =
        Nx.Serving.start_link(
          serving: Cascade.ONNX.serving(model, batch_size: 16),
          name: name,
          batch_timeout: 2
        )

      Process.unlink(pid)
      pid
    end

    @doc "Makes this node a distributed node on the loopback address (epmd started if needed)."
    def distribute(name) do
      unless Node.alive?() do
        {_, 0} = System.cmd("epmd", ["-daemon"])
        {:ok, _} = Node.start(:"#{name}@127.0.0.1", :longnames)
      end

      {:ok, _} = Application.ensure_all_started(:nx)
      :ok
    end
  end
end
