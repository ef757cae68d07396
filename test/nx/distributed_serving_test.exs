if Code.ensure_loaded?(Nx.Serving) do
  defmodule Cascade.DistributedServingTest do
    # Nx.Serving on Cascade across nodes: peer nodes on the loopback address serve the dense
    # model of Cascade.ServingFixtures through Cascade.Compiler; this node sends requests
    # through {:distributed, name}. What a Cascade tensor does when it reaches another node.
    # A serving node killed under load, a client killed mid-request.
    use ExUnit.Case, async: false
    @moduletag :nx
    @moduletag :distributed
    @moduletag timeout: 180_000

    alias Cascade.ServingFixtures, as: F

    setup_all do
      :ok = F.distribute(:"cascade_test_#{System.unique_integer([:positive])}")
      # made once here, before clients race to make it
      F.params()
      :ok
    end

    defp unique(prefix), do: :"#{prefix}#{System.unique_integer([:positive])}"

    # peers named after the test, stopped at its end
    defp peers(names) do
      peers = for n <- names, do: F.start_peer(unique(n))
      on_exit(fn -> for {pid, _} <- peers, do: F.stop_peer(pid) end)
      Enum.map(peers, &elem(&1, 1))
    end

    # the model run here on the request alone (Nx.BinaryBackend takes a second a request)
    defp local(i, n) do
      params = Nx.backend_copy(F.params(), {Cascade.Backend, device: Cascade.Device.host()})
      Nx.Defn.jit(&F.predict/2, compiler: Cascade.Compiler).(F.request(i, n), params)
    end

    defp close?(a, b), do: Nx.to_number(Nx.all_close(a, b, atol: 1.0e-6, rtol: 1.0e-5)) == 1

    # waits until the servings of `nodes` are what :pg lists here
    defp await_members(nodes, tries \\ 100) do
      members = :pg.get_members(Nx.Serving.PG, Nx.Serving) |> Enum.map(&node/1) |> Enum.uniq()

      cond do
        Enum.sort(members) == Enum.sort(nodes) -> :ok
        tries == 0 -> flunk("the servings on #{inspect(nodes)} never joined: #{inspect(members)}")
        true -> Process.sleep(20) && await_members(nodes, tries - 1)
      end
    end

    test "requests from this node run on two serving nodes and equal the local results" do
      name = unique(:dense)
      nodes = peers([:serve_a, :serve_b])
      for node <- nodes, do: F.start_serving(node, name)
      await_members(nodes)

      results =
        1..200
        |> Task.async_stream(
          fn i ->
            n = rem(i, 3) + 1

            {i, n,
             Nx.Serving.batched_run({:distributed, name}, Nx.Batch.concatenate([F.request(i, n)]))}
          end,
          max_concurrency: 32,
          timeout: 30_000
        )
        |> Enum.map(fn {:ok, r} -> r end)

      for {i, n, got} <- results do
        assert got.data.__struct__ == Nx.BinaryBackend
        assert Nx.shape(got) == {n, 10}
        assert close?(got, local(i, n)), "request #{i}"
      end

      # both nodes served, in batches of more than one request
      fills = for node <- nodes, do: :erpc.call(node, F, :fill, [])
      assert Enum.all?(fills, fn {batches, _, _} -> batches > 0 end), inspect(fills)

      assert Enum.sum(for {_, rows, _} <- fills, do: rows) ==
               Enum.sum(for {_, n, _} <- results, do: n)
    end

    test "an ONNX model served on another node answers with tensors this node can read" do
      import Cascade.ONNXBuilder
      f32 = fn values -> for v <- values, into: <<>>, do: <<v::float-32-little>> end
      w = tensor("w", 1, [4, 3], f32.(for i <- 1..12, do: (i - 6) / 10))
      nodes = [node("MatMul", ["x", "w"], ["h"]), node("Relu", ["h"], ["y"])]
      bytes = model(graph(nodes, [{"x", 1, [-1, 4]}], [{"y", 1, [-1, 3]}], [w]))

      name = unique(:onnx)
      [node] = peers([:onnx])
      :erpc.call(node, F, :start_onnx_serving, [name, bytes])
      await_members([node])

      # the peer runs it on its default device, the host one
      {:ok, here} = Cascade.ONNX.load(bytes, device: Cascade.Device.host())
      x = Nx.iota({3, 4}, type: :f32) |> Nx.subtract(5)
      %{"y" => y} = Nx.Serving.batched_run({:distributed, name}, %{"x" => x})
      assert y.data.__struct__ == Nx.BinaryBackend

      want =
        Cascade.ONNX.run(here, %{"x" => {:f32, {3, 4}, Nx.to_binary(x)}})["y"]
        |> Cascade.to_binary()

      assert Nx.to_binary(y) == want

      # a request on Cascade.Backend goes as binaries with Nx.backend_copy/1
      cx = Nx.backend_copy(x, Cascade.Backend)
      %{"y" => y} = Nx.Serving.batched_run({:distributed, name}, %{"x" => cx}, &Nx.backend_copy/1)
      assert Nx.to_binary(y) == want
    end

    test "a Cascade tensor that reaches another node raises what to do; a small value is usable" do
      [node] = peers([:other])

      big = :erpc.call(node, Cascade, :iota, [{64}, [type: :f32]])
      assert %Cascade.Tensor{} = big

      error = assert_raise ArgumentError, fn -> Cascade.to_binary(big) end
      assert error.message =~ "made on another node"
      assert error.message =~ "Nx.backend_copy/1"

      assert_raise ArgumentError,
                   ~r/argument 1 is not a Cascade tensor reference of this node/,
                   fn ->
                     Cascade.add(big, 1.0)
                   end

      # the same tensor through Nx: an Nx tensor on Cascade.Backend from the other node
      nx = :erpc.call(node, Nx, :iota, [{64}, [type: :f32, backend: Cascade.Backend]])
      assert_raise ArgumentError, ~r/made on another node/, fn -> Nx.to_binary(nx) end
      assert_raise ArgumentError, ~r/made on another node/, fn -> Nx.add(nx, 1) end

      # a result of at most 48 bytes is a value: its data travels with it
      small = :erpc.call(node, Cascade, :add, [Cascade.iota({4}, type: :f32), 1.0])
      assert Cascade.to_list(small) == [1.0, 2.0, 3.0, 4.0]
      assert Cascade.to_list(Cascade.multiply(small, 2.0)) == [2.0, 4.0, 6.0, 8.0]

      # a serving that sends Cascade tensors back: the client's use of them says what to do
      name = unique(:raw)

      :erpc.call(node, F, :start_raw_serving, [name])
      await_members([node])

      got =
        Nx.Serving.batched_run({:distributed, name}, Nx.Batch.stack([Nx.iota({32}, type: :f32)]))

      assert_raise ArgumentError, ~r/distributed_postprocessing/, fn -> Nx.to_binary(got) end
    end

    test "a serving node killed under load: every request answers or exits, the survivor serves" do
      name = unique(:dense)
      [a, b] = nodes = peers([:live, :doomed])
      for node <- nodes, do: F.start_serving(node, name)
      await_members(nodes)

      # clients send requests one after the other until told to stop; each request is an
      # answer (checked) or an exit, within 10 s
      parent = self()

      clients =
        for c <- 1..16 do
          spawn_link(fn -> client_loop(parent, name, c, 0, []) end)
        end

      Process.sleep(300)
      doomed = :erpc.call(b, :os, :getpid, [])
      {_, 0} = System.cmd("kill", ["-9", List.to_string(doomed)])
      Process.sleep(500)
      for c <- clients, do: send(c, :stop)

      outcomes =
        for _ <- clients do
          receive do
            {:client_done, outcomes} -> outcomes
          after
            30_000 -> flunk("a client never finished: a request hangs")
          end
        end
        |> List.flatten()

      answered = Enum.count(outcomes, &(&1 == :ok))
      failed = Enum.reject(outcomes, &(&1 == :ok))
      assert answered > 0
      # a request in flight on the killed node exits with the lost connection; none other
      for {:exit, reason} <- failed, do: assert(noconnection?(reason), inspect(reason))
      assert Enum.all?(failed, &match?({:exit, _}, &1)), inspect(Enum.uniq(failed))

      # the survivor takes every new request
      await_members([a])
      {before, _, _} = :erpc.call(a, F, :fill, [])

      for i <- 1..20 do
        got = Nx.Serving.batched_run({:distributed, name}, Nx.Batch.concatenate([F.request(i)]))
        assert close?(got, local(i, 1))
      end

      {later, _, _} = :erpc.call(a, F, :fill, [])
      assert later > before

      # the node, started again, takes load again
      [c] = peers([:doomed])
      F.start_serving(c, name)
      await_members([a, c])

      for i <- 1..200 do
        Nx.Serving.batched_run({:distributed, name}, Nx.Batch.concatenate([F.request(i)]))
      end

      assert {batches, _, _} = :erpc.call(c, F, :fill, [])
      assert batches > 0
    end

    defp client_loop(parent, name, c, i, acc) do
      receive do
        :stop -> send(parent, {:client_done, acc})
      after
        0 ->
          outcome =
            try do
              got =
                Nx.Serving.batched_run(
                  {:distributed, name},
                  Nx.Batch.concatenate([F.request(c * 1000 + i)])
                )

              if close?(got, local(c * 1000 + i, 1)), do: :ok, else: {:wrong, c, i}
            catch
              :exit, reason -> {:exit, reason}
            end

          client_loop(parent, name, c, i + 1, [outcome | acc])
      end
    end

    defp noconnection?({:noconnection, _}), do: true
    defp noconnection?({{:nodedown, _}, _}), do: true
    defp noconnection?(_), do: false

    test "a client killed mid-request frees its place: the serving answers the next ones" do
      name = unique(:dense)
      [node] = peers([:serve])
      F.start_serving(node, name, [], batch_timeout: 50)
      await_members([node])

      # clients killed while their requests wait in the serving's batch
      for i <- 1..20 do
        pid =
          spawn(fn ->
            Nx.Serving.batched_run({:distributed, name}, Nx.Batch.concatenate([F.request(i, 8)]))
          end)

        Process.sleep(rem(i, 4) * 10)
        Process.exit(pid, :kill)
      end

      for i <- 1..20 do
        got = Nx.Serving.batched_run({:distributed, name}, Nx.Batch.concatenate([F.request(i)]))
        assert close?(got, local(i, 1))
      end

      # nothing of the killed clients is left waiting on the serving node
      pid = :erpc.call(node, Process, :whereis, [name])
      assert {:message_queue_len, 0} = :erpc.call(node, Process, :info, [pid, :message_queue_len])
    end
  end
end
