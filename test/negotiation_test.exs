defmodule CascadeNegotiationTest do
  # Every route of the negotiation, from Elixir, through the test driver (config/config.exs
  # loads it in the test environment): native, decomposed on the device, moved to the cpu,
  # refused under `fallback: :error`; explain, capabilities, stats, transfers, the default
  # device per node, process and task. Stats and the policy are global: not async.
  use ExUnit.Case, async: false

  defp cuda_available?, do: Enum.any?(Cascade.devices(), &(&1.device == :cuda and &1.available))
  import ExUnit.CaptureLog
  import ExUnit.CaptureIO

  setup do
    Cascade.reset_stats()
    on_exit(fn -> Cascade.put_fallback_policy(:warn) end)
    :ok
  end

  defp on_test(list, opts \\ []), do: list |> Cascade.tensor(opts) |> Cascade.transfer(:test)

  defp same_bits?(a, b), do: Cascade.to_binary(a) == Cascade.to_binary(b)

  describe "devices" do
    test "lists the test devices, and drivers that are not built with the reason" do
      devices = Map.new(Cascade.devices(), &{&1.device, &1})
      assert %{available: true, kind: "test", host_memory: false} = devices[:test]
      assert %{available: true, driver: :test} = devices[{:test, 1}]
      assert %{available: true, kind: "cpu", host_memory: true} = devices[:cpu]

      # an optional driver is "not built" only where its shared object is absent; a built one
      # is either available or unavailable with the reason (no device, a library missing)
      for name <- [:cuda, :opencl, :blas] do
        built = File.exists?(Path.join(:code.priv_dir(:cascade), "cascade_driver_#{name}.so"))

        case devices[name] do
          %{available: true, driver: ^name} -> assert built
          %{available: false, reason: "not built: " <> _} -> refute built
          %{available: false, reason: reason} -> assert built and reason != ""
        end
      end
    end

    test "an unavailable device raises Cascade.Error, an unknown one ArgumentError" do
      # no GPU where the ExUnit tests run: cuda is not built, or built and without a device
      # (unless CASCADE_CUDA_EMULATOR loads its cpu emulator build)
      unless cuda_available?() do
        assert_raise Cascade.Error, ~r/device :cuda is unavailable: \S/, fn ->
          Cascade.tensor([1.0], device: :cuda)
        end
      end

      assert_raise ArgumentError, ~r/unknown device :tpu, expected one of/, fn ->
        Cascade.iota({2}, device: :tpu)
      end

      assert_raise ArgumentError, ~r/unknown device \{:test, 7\}/, fn ->
        Cascade.transfer(Cascade.tensor([1]), {:test, 7})
      end
    end

    test "{driver, 0} names the driver's first device" do
      t = Cascade.transfer(Cascade.tensor([1, 2]), {:test, 0})
      assert t.device == :test
      assert Cascade.transfer(t, {:test, 1}).device == {:test, 1}
      assert inspect(Cascade.transfer(t, {:test, 1})) =~ "test:1"
    end
  end

  describe "routes" do
    test "native: the device runs it, nothing moves" do
      a = on_test([1.0, 2.0])
      c = Cascade.add(a, a)
      assert c.device == :test
      assert Cascade.to_list(c) == [2.0, 4.0]
      stats = Cascade.stats()
      assert stats[{:test, :add, :native}] == %{calls: 1, bytes: 0, libraries: %{"test" => 1}}
      refute Map.has_key?(stats, {:test, :add, :cpu_fallback})
      assert %{route: :native, device: :test} = Cascade.explain(:add, [a, a])
    end

    test "decomposed: softmax runs as primitives on the device, bit for bit as on the cpu" do
      x = [[1.0, 2.0, 3.0], [-1.0, 0.0, 1000.0]]
      on_device = Cascade.softmax(on_test(x))
      assert on_device.device == :test
      assert same_bits?(on_device, Cascade.softmax(Cascade.tensor(x)))
      stats = Cascade.stats()
      assert stats[{:test, :softmax, :decomposed}].calls == 1
      assert stats[{:test, :exp, :native}].calls == 1
      assert stats[{:test, :reduce_max, :native}].calls == 1
      refute Enum.any?(stats, fn {{_, _, route}, _} -> route == :cpu_fallback end)
    end

    test "cpu fallback: copied to the cpu and back, counted, reported once under :warn" do
      x = on_test([0.0, 0.5])

      log =
        capture_log(fn ->
          assert Cascade.erf(x) |> Cascade.to_list() ==
                   Cascade.to_list(Cascade.erf(Cascade.tensor([0.0, 0.5])))
        end)

      # the report is once per (device, op, type, reason) for the life of the node: another
      # test may have triggered it first
      if log != "", do: assert(log =~ "erf on test ran on the cpu")
      second = capture_log(fn -> Cascade.erf(x) end)
      refute second =~ "erf on test"

      assert %{calls: 2, bytes: 32} = Cascade.stats()[{:test, :erf, :cpu_fallback}]
      assert %{route: :cpu_fallback, bytes_moved: 16, reason: reason} = Cascade.explain(:erf, [x])
      assert reason =~ "the test driver has no native erf for f32"
    end

    test "the :warn report names the op, the device, the reason and the bytes" do
      # remainder on s32 is used nowhere else in the suite, so its report is the first
      x = on_test([7, 9], type: :s32)

      log = capture_log(fn -> Cascade.remainder(x, x) end)
      assert log =~ "remainder on test ran on the cpu"
      assert log =~ "no native remainder for s32, s32"
      assert log =~ "24 bytes copied"
    end

    test "fallback: :error raises instead of moving data; :allow moves silently" do
      x = on_test([1.0])
      Cascade.put_fallback_policy(:error)
      assert Cascade.fallback_policy() == :error

      error = assert_raise Cascade.Error, fn -> Cascade.erf(x) end
      assert error.code == :unsupported
      assert error.message =~ "erf on test would move its inputs to the cpu"
      assert error.message =~ "fallback policy is :error"
      refute Map.has_key?(Cascade.stats(), {:test, :erf, :cpu_fallback})
      # native and decomposed routes move nothing and still run
      assert Cascade.softmax(x) |> Cascade.to_list() == [1.0]

      Cascade.put_fallback_policy(:allow)
      assert capture_log(fn -> Cascade.atan2(x, x) end) == ""
      assert Cascade.stats()[{:test, :atan2, :cpu_fallback}].calls == 1

      assert_raise ArgumentError, ~r/expected :allow, :warn or :error, got: :maybe/, fn ->
        Cascade.put_fallback_policy(:maybe)
      end
    end

    test "a composite none of whose steps the device runs moves once, as a whole" do
      x = on_test([1.0, 2.0], type: :f16)
      plan = Cascade.explain(:softmax, [x])
      assert %{route: :cpu_fallback, bytes_moved: 8} = plan
      assert plan.reason =~ "no native softmax for f16, nor any step of its decomposition"

      capture_log(fn ->
        assert same_bits?(
                 Cascade.softmax(x),
                 Cascade.softmax(Cascade.tensor([1.0, 2.0], type: :f16))
               )
      end)

      stats = Cascade.stats()
      assert stats[{:test, :softmax, :cpu_fallback}] == %{calls: 1, bytes: 8}
      refute Map.has_key?(stats, {:test, :exp, :cpu_fallback})
    end

    test "a decomposition with some steps on the device: decomposed there, the others moved" do
      # the test device runs f64 reduce_max, subtract, exp, sum natively: log_softmax stays
      x = on_test([[1.0, 2.0]], type: :f64)
      plan = Cascade.explain(:log_softmax, [x])
      assert plan.route == :decomposed
      assert Enum.any?(plan.steps, &(&1.route == :native))

      capture_log(fn ->
        assert same_bits?(
                 Cascade.log_softmax(x),
                 Cascade.log_softmax(Cascade.tensor([[1.0, 2.0]], type: :f64))
               )
      end)
    end

    test "shape refinement: dot is native up to 64 contracted elements" do
      small = on_test(List.duplicate(1.0, 64))
      large = on_test(List.duplicate(1.0, 65))
      assert %{route: :native} = Cascade.explain(:dot, [small, small])
      assert %{route: :cpu_fallback, reason: reason} = Cascade.explain(:dot, [large, large])
      assert reason =~ "dot contracts 65 elements, more than the test device's 64"
      capture_log(fn -> assert Cascade.to_list(Cascade.dot(large, large)) == 65.0 end)
    end

    test "a composite a device runs natively is not decomposed" do
      x = on_test([-1.0, 2.0])
      assert %{route: :native} = Cascade.explain(:relu, [x])
      assert Cascade.relu(x) |> Cascade.to_list() == [0.0, 2.0]
      assert Cascade.stats()[{:test, :relu, :native}].calls == 1
      # f64 is not claimed: decomposed on the device
      assert %{route: :decomposed} = Cascade.explain(:relu, [on_test([1.0], type: :f64)])
    end

    test "mixing devices in one op needs a transfer" do
      assert_raise ArgumentError,
                   ~r/expected all tensors on one device, got test and cpu.*transfer/,
                   fn ->
                     Cascade.add(on_test([1.0]), Cascade.tensor([1.0]))
                   end
    end
  end

  describe "explain" do
    test "plans without running, with types, shapes and nested steps" do
      x = Cascade.tensor([[1, 2, 3]])
      plan = Cascade.explain(:softmax, [x], axis: 0)

      assert %{op: :softmax, device: :cpu, route: :decomposed, type: {:f, 32}, shape: {1, 3}} =
               plan

      assert [%{op: :as_type} | _] = plan.steps
      assert Cascade.stats() == %{}
    end

    test "the batched dot/6" do
      a = Cascade.iota({2, 2, 3}, type: :f32)
      b = Cascade.ones({2, 3, 1})

      assert %{op: :dot, route: :native, shape: {2, 2, 1}} =
               Cascade.explain(:dot, [a, [2], [0], b, [1], [0]])

      assert %{op: :dot, shape: {2, 2}} =
               Cascade.explain(:dot, [Cascade.iota({2, 3}), Cascade.iota({3, 2})])
    end

    test "checks arguments as the op does" do
      assert_raise ArgumentError, ~r/unknown op :nope/, fn -> Cascade.explain(:nope, []) end

      assert_raise ArgumentError, ~r/softmax takes 1 positional/, fn ->
        Cascade.explain(:softmax, [])
      end

      assert_raise ArgumentError, ~r/axis/, fn ->
        Cascade.explain(:softmax, [Cascade.tensor([1.0])], axis: 3)
      end
    end
  end

  describe "capabilities" do
    test "say native, decomposed with steps, shape dependent or cpu fallback per op and type" do
      caps = Cascade.capabilities(:test)
      assert caps[{:add, :f32}] == :native
      assert caps[{:add, :f16}] == :cpu_fallback
      assert caps[{:erf, :f32}] == :cpu_fallback
      assert caps[{:dot, :f32}] == :shape_dependent
      assert caps[{:relu, :f32}] == :native
      assert {:decomposed, steps} = caps[{:softmax, :f32}]
      assert {:exp, :native} in steps
      assert caps[{:softmax, :f16}] == :cpu_fallback
      # the cpu runs every primitive natively and every composite as its decomposition
      for {{op, _type}, route} <- Cascade.capabilities(:cpu) do
        composite? = Enum.find(Cascade.__ops__(), &(&1.name == op)).kind == :composite
        if composite?, do: assert(match?({:decomposed, _}, route)), else: assert(route == :native)
      end
    end

    test "mix cascade.devices prints the devices and the matrices" do
      out = capture_io(fn -> Mix.Tasks.Cascade.Devices.run([]) end)
      # cuda is not built, or built without a GPU here: either way "no" and a reason
      if cuda_available?(),
        do: assert(out =~ ~r/cuda\s+yes\s+gpu/),
        else: assert(out =~ ~r/cuda\s+no\s+\S/)

      assert out =~ ~r/^softmax\s+composite/m
      assert out =~ "test:1"
      ops = capture_io(fn -> Mix.Tasks.Cascade.Devices.run(["--device", "test", "--ops"]) end)
      assert ops =~ ~r/erf\s+f32\s+cpu_fallback/
    end
  end

  describe "default device" do
    test "with_device/2 sets it for the process and the tasks it starts, and restores it" do
      assert Cascade.iota({1}).device == :cpu

      Cascade.with_device(:test, fn ->
        assert Cascade.iota({1}).device == :test
        assert Task.await(Task.async(fn -> Cascade.iota({1}).device end)) == :test

        nested =
          Task.async(fn -> Task.await(Task.async(fn -> Cascade.tensor([1]).device end)) end)

        assert Task.await(nested) == :test

        Cascade.with_device({:test, 1}, fn ->
          assert Cascade.zeros({1}).device == {:test, 1}
        end)

        assert Cascade.zeros({1}).device == :test
      end)

      assert Cascade.iota({1}).device == :cpu
      assert_raise RuntimeError, fn -> Cascade.with_device(:test, fn -> raise "boom" end) end
      assert Cascade.iota({1}).device == :cpu
      assert_raise ArgumentError, fn -> Cascade.with_device(:tpu, fn -> :ok end) end
    end

    test "put_default_device/1 sets it for the node" do
      try do
        :ok = Cascade.put_default_device(:test)
        assert Cascade.iota({1}).device == :test
        assert Task.await(Task.async(fn -> Cascade.iota({1}).device end)) == :test
      after
        Cascade.put_default_device(:cpu)
      end
    end
  end

  describe "transfer" do
    test "round trips between devices and counts the bytes" do
      t = Cascade.tensor([[1, -2], [3, 4]], type: :s32)
      a = Cascade.transfer(t, :test)
      b = Cascade.transfer(a, {:test, 1})
      c = Cascade.transfer(b, :cpu)
      assert Cascade.to_list(c) == [[1, -2], [3, 4]]
      assert Cascade.to_list(b) == [[1, -2], [3, 4]]
      assert Cascade.stats()[{{:test, 1}, :transfer, :transfer}] == %{calls: 1, bytes: 16}
      assert Cascade.transfer(c, :cpu) == c
      Cascade.free(a)
      assert_raise ArgumentError, ~r/freed/, fn -> Cascade.transfer(a, :cpu) end

      assert_raise ArgumentError, ~r/expected a Cascade.Tensor/, fn ->
        Cascade.transfer(:x, :cpu)
      end
    end

    test "memory is counted per device" do
      t = Cascade.transfer(Cascade.iota({1000}, type: :f64), {:test, 1})
      assert Cascade.memory()[{:test, 1}].bytes >= 8000
      Cascade.free(t)
    end
  end
end
