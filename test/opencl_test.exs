defmodule CascadeOpenCLTest do
  # The opencl driver from Elixir: listed with its properties, devices chosen by index, ops
  # planned native and agreeing with the cpu, and 16 processes using the one device at once.
  # Skipped, with the reason printed, where no OpenCL device is available (no ICD, or the
  # driver was not built). The differential suite over every claim is
  # capability_honesty_test.exs; the C side is c_src/tests/test_opencl.c.
  use ExUnit.Case, async: false

  @opencl Enum.find(Cascade.devices(), &(&1.device == :opencl))

  if @opencl == nil or not @opencl.available do
    IO.puts("opencl: skipped, #{inspect(@opencl && @opencl.reason)}")
    @moduletag skip: "the opencl device is unavailable"
  end

  defp f32(list, shape), do: Cascade.tensor(list, type: :f32) |> Cascade.reshape(shape)

  test "is listed with the device's own properties, not host memory" do
    assert %{driver: :opencl, available: true, host_memory: false, kind: kind, memory: memory} =
             @opencl

    assert kind in ["cpu", "gpu", "accelerator"]
    assert memory > 0
    assert @opencl.detail =~ "f16 stored, computed in f32"
    # device 0 is :opencl itself; an index past the last is refused by name
    assert Cascade.transfer(Cascade.tensor([1.0]), {:opencl, 0}).device in [:opencl, {:opencl, 0}]

    assert_raise ArgumentError, ~r/unknown device \{:opencl, 99\}/, fn ->
      Cascade.transfer(Cascade.tensor([1.0]), {:opencl, 99})
    end
  end

  test "claimed ops run natively and agree with the cpu" do
    x = f32(Enum.map(1..24, &(&1 / 7 - 1.5)), {4, 6})
    d = Cascade.transfer(x, :opencl)

    idx = Cascade.transfer(Cascade.tensor([2, 0, 2]), :opencl)

    for {op, args} <- [
          {:add, [d, d]},
          {:exp, [d]},
          {:softmax, [d]},
          {:sum, [d]},
          {:argmax, [d]},
          {:take, [d, idx]}
        ] do
      assert %{route: :native, device: :opencl} = Cascade.explain(op, args)
    end

    assert Cascade.to_list(Cascade.argmax(d, axis: 1)) ==
             Cascade.to_list(Cascade.argmax(x, axis: 1))

    assert Cascade.to_list(Cascade.take(d, idx, axis: 1)) ==
             Cascade.to_list(Cascade.take(x, Cascade.tensor([2, 0, 2]), axis: 1))

    want = Cascade.softmax(x, axis: 1) |> Cascade.to_list() |> List.flatten()
    got = Cascade.softmax(d, axis: 1)
    assert got.device == :opencl

    for {a, b} <- Enum.zip(List.flatten(Cascade.to_list(got)), want),
        do: assert_in_delta(a, b, 1.0e-6)

    assert Cascade.to_list(Cascade.sum(Cascade.multiply(d, 2))) ==
             Cascade.to_list(Cascade.sum(Cascade.multiply(x, 2)))
  end

  test "ops it does not claim are refused and run elsewhere, visibly" do
    d = Cascade.transfer(Cascade.tensor([3, 1, 2]), :opencl)
    # integer dot has no opencl kernel: the plan says so and moves it to the cpu
    assert %{route: :cpu_fallback, reason: reason} = Cascade.explain(:dot, [d, d])
    assert reason =~ "opencl"
    Cascade.put_fallback_policy(:allow)
    on_exit(fn -> Cascade.put_fallback_policy(:warn) end)
    assert Cascade.to_list(Cascade.dot(d, d)) == 14
  end

  test "16 processes at once on the one device each get their own results" do
    tasks =
      for k <- 1..16 do
        Task.async(fn ->
          n = 100 + k
          x = f32(Enum.map(1..(4 * n), &rem(&1 * k, 17)), {4, n})
          d = Cascade.transfer(x, :opencl)

          for _ <- 1..25 do
            got = d |> Cascade.multiply(d) |> Cascade.sum(axes: [1]) |> Cascade.to_list()
            want = x |> Cascade.multiply(x) |> Cascade.sum(axes: [1]) |> Cascade.to_list()
            {got, want}
          end
        end)
      end

    for results <- Task.await_many(tasks, 120_000),
        {got, want} <- results,
        do: assert(got == want)
  end
end
