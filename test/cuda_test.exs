defmodule CascadeCudaTest do
  # The cuda driver from Elixir. Where the ExUnit tests run there is no GPU: cuda is listed as
  # unavailable with the reason (not built where nvcc was missing, no NVIDIA driver or no GPU
  # where it was built), asking for it raises Cascade.Error, and everything else runs. On a
  # machine with a GPU the same tests check that it is available and computes.
  use ExUnit.Case, async: true

  defp cuda, do: Enum.find(Cascade.devices(), &(&1.device == :cuda))

  defp built?,
    do: File.exists?(Path.join(:code.priv_dir(:cascade), "cascade_driver_cuda.so"))

  test "cuda is listed, with the reason when it is unavailable" do
    device = cuda()
    assert %{driver: :cuda} = device

    if device.available do
      assert %{kind: "gpu", host_memory: false, reason: nil} = device
    else
      assert is_binary(device.reason) and device.reason != ""

      cond do
        not built?() ->
          assert device.reason =~ "not built"

        not File.exists?("/dev/nvidiactl") ->
          # built, but this machine has no NVIDIA driver or GPU: the reason says which
          assert device.reason =~ ~r/NVIDIA driver|no GPU|CUDA runtime/

        true ->
          :ok
      end
    end
  end

  test "asking for an unavailable cuda raises Cascade.Error with the reason" do
    device = cuda()

    unless device.available do
      error = assert_raise Cascade.Error, fn -> Cascade.tensor([1.0, 2.0], device: :cuda) end

      assert error.code == :unavailable
      assert error.driver == :cuda
      assert Exception.message(error) =~ device.reason

      assert_raise Cascade.Error, ~r/device :cuda is unavailable/, fn ->
        Cascade.with_device(:cuda, fn -> Cascade.iota({3}) end)
      end

      assert_raise Cascade.Error, ~r/device :cuda is unavailable/, fn ->
        Cascade.transfer(Cascade.tensor([1.0]), :cuda)
      end
    end
  end

  test "everything else still runs on the cpu" do
    x = Cascade.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert Cascade.to_list(Cascade.add(x, 1)) == [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]

    [row | _] = Cascade.to_list(Cascade.softmax(x, axis: 1))
    assert_in_delta Enum.sum(row), 1.0, 1.0e-6

    assert Cascade.to_list(Cascade.dot(x, Cascade.transpose(x))) == [
             [14.0, 32.0],
             [32.0, 77.0]
           ]
  end

  test "on a GPU, cuda computes what the cpu computes" do
    if cuda().available do
      x = Cascade.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.5]])
      g = Cascade.transfer(x, :cuda)
      assert g.device == :cuda

      for {cpu_result, gpu_result} <- [
            {Cascade.exp(x), Cascade.exp(g)},
            {Cascade.softmax(x, axis: 1), Cascade.softmax(g, axis: 1)},
            {Cascade.dot(x, Cascade.transpose(x)), Cascade.dot(g, Cascade.transpose(g))}
          ] do
        for {a, b} <-
              Enum.zip(
                List.flatten(Cascade.to_list(cpu_result)),
                List.flatten(Cascade.to_list(Cascade.transfer(gpu_result, :cpu)))
              ),
            do: assert_in_delta(a, b, 1.0e-5 * (1 + abs(a)))
      end
    end
  end
end
