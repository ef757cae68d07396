defmodule CascadeValuesTest do
  # Small results as values (Cascade.Tensor, "Values"; c_src/nif/cascade_nif.c, value_view).
  use ExUnit.Case, async: true
  doctest Cascade.Tensor

  alias Cascade.Tensor

  defp value(list \\ [1.0, 2.0]) do
    v = Cascade.add(Cascade.tensor(list), 0.0)
    assert is_binary(v.ref)
    v
  end

  defp f32(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  test "a result of at most 48 bytes on a host device is a value; a larger one is a resource" do
    for device <- [:cpu, :blas] do
      at = fn n, type -> Cascade.add(Cascade.iota({n}, type: type, device: device), 1) end
      assert is_binary(at.(12, :f32).ref)
      assert is_reference(at.(13, :f32).ref)
      assert is_binary(at.(6, :f64).ref)
      assert is_reference(at.(7, :f64).ref)
      assert is_binary(at.(48, :u8).ref)
      assert is_reference(at.(49, :u8).ref)
      assert Cascade.to_list(at.(12, :f32)) == Enum.map(1..12, &(&1 * 1.0))
      # every rank up to 8, and a scalar
      assert is_binary(Cascade.iota({1, 2, 1, 1, 3, 1, 2, 1}, type: :s32, device: device).ref)
      assert Cascade.to_list(Cascade.add(Cascade.tensor(2.5, device: device), 1.0)) == 3.5
    end
  end

  test "tensors made from data, empty results and results on other devices are resources" do
    assert is_reference(Cascade.tensor([1.0]).ref)
    assert is_reference(Cascade.from_binary(f32([1.0]), :f32, {1}).ref)
    assert is_reference(Cascade.add(Cascade.iota({0, 3}), 1).ref)
    # the test device keeps its memory away from the host
    t = Cascade.tensor([1.0, 2.0], device: :test)
    r = Cascade.add(t, 1.0)
    assert is_reference(r.ref)
    assert Cascade.to_list(r) == [2.0, 3.0]
  end

  test "a value is a tensor in every position: ops, reading, explain, transfer, free" do
    v = value()
    r = Cascade.tensor([10.0, 20.0])
    assert Cascade.to_list(Cascade.add(v, r)) == [11.0, 22.0]
    assert Cascade.to_list(Cascade.subtract(r, v)) == [9.0, 18.0]
    assert Cascade.to_list(Cascade.add(v, v)) == [2.0, 4.0]
    assert Cascade.to_list(Cascade.sum(v)) == 3.0
    assert Cascade.to_list(Cascade.dot(v, v)) == 5.0
    assert Cascade.to_list(Cascade.select(Cascade.greater(v, 1.5), v, r)) == [10.0, 2.0]
    # more than eight inputs take the decoder's other path
    assert Cascade.to_list(Cascade.concatenate(List.duplicate(v, 10))) ==
             List.flatten(List.duplicate([1.0, 2.0], 10))

    assert Cascade.to_binary(v) == f32([1.0, 2.0])
    assert Cascade.to_binary(v, limit: 1) == f32([1.0])
    assert Cascade.dump(v) == {:f32, {2}, f32([1.0, 2.0])}
    assert inspect(v) =~ "[1.0, 2.0]"
    assert %{route: :native} = Cascade.explain(:add, [v, v])

    assert Cascade.to_list(Cascade.transfer(v, :cpu)) == [1.0, 2.0]
    on_test = Cascade.transfer(v, :test)
    assert is_reference(on_test.ref)
    assert Cascade.to_list(on_test) == [1.0, 2.0]

    assert Cascade.free(v) == :ok
    assert Cascade.free(v) == :ok
    refute Cascade.Native.freed?(v.ref)
    assert Cascade.to_list(v) == [1.0, 2.0]
  end

  test "values as a program's constants, inputs (donated or not) and loop state" do
    alias Cascade.Native
    op = fn name -> Enum.find_value(Cascade.__ops__(), &(&1.name == name && &1.id)) end
    dev = Cascade.Device.id!(:cpu)

    v = fn t ->
      r = Cascade.add(t, 0)
      assert is_binary(r.ref)
      r
    end

    results = fn
      {:cascade_gc, list} -> list
      list -> list
    end

    five = v.(Cascade.tensor(5, type: :s32, device: :cpu))
    one = v.(Cascade.tensor(1, type: :s32, device: :cpu))
    two = v.(Cascade.tensor(2.0, device: :cpu))
    state = [{:f32, {2}}, {:s32, {}}]
    cond = Native.program_new(dev, state, [five.ref], [{op.(:less), [1, 2], %{}}], [3], [])
    steps = [{op.(:multiply), [0, 3], %{}}, {op.(:add), [1, 2], %{}}]
    body = Native.program_new(dev, state, [one.ref, two.ref], steps, [4, 5], [])
    donating = Native.program_new(dev, state, [one.ref, two.ref], steps, [4, 5], [0])

    x = v.(Cascade.tensor([1.0, -3.0], device: :cpu))
    i = v.(Cascade.tensor(0, type: :s32, device: :cpu))
    [x2, i2] = Native.program_loop(cond, 0, body, [0, 1], [x.ref, i.ref])
    assert Cascade.to_list(%{x | ref: x2}) == [32.0, -96.0]
    assert Cascade.to_list(%{i | ref: i2}) == 5

    for prog <- [body, donating] do
      [{y, _, _, _}, {j, _, _, _}] = results.(Native.program_run(prog, [x.ref, i.ref]))
      assert Cascade.to_list(%{x | ref: y}) == [2.0, -6.0]
      assert Cascade.to_list(%{i | ref: j}) == 1
      # a donated value is copied, not written into
      assert Cascade.to_list(x) == [1.0, -3.0]
    end
  end

  test "values go to other processes as they are" do
    v = value([3.0, 4.0])
    task = Task.async(fn -> v |> Cascade.multiply(2.0) |> Cascade.to_list() end)
    assert Task.await(task) == [6.0, 8.0]
    assert Cascade.to_list(v) == [3.0, 4.0]
  end

  test "equal values are equal terms" do
    assert value([1.0, 2.0]) == value([1.0, 2.0])
    refute value([1.0, 2.0]) == value([1.0, 3.0])
  end

  test "values hold no device memory" do
    before = Cascade.memory().blas
    vs = for k <- 1..1000, do: Cascade.add(Cascade.tensor([k * 1.0], device: :blas), 1.0)
    assert Enum.all?(vs, &is_binary(&1.ref))
    # the inputs are resources, dropped by now or not: at most the 1000 of them
    assert Cascade.memory().blas.tensors - before.tensors <= 1000
    assert Enum.sum(Enum.map(vs, &Cascade.to_list(Cascade.reshape(&1, {})))) == 501_500.0
  end

  test "a binary that is not exactly a value is not a tensor" do
    v = value()
    <<head::binary-size(16), data::binary>> = v.ref
    <<c, x, type, dev, rank, pad::binary-size(3), dims::binary-size(8)>> = head
    test_id = Cascade.Device.id!(:test)

    forged = [
      {"magic", <<?D, x, type, dev, rank, pad::binary, dims::binary, data::binary>>},
      {"magic", <<c, ?y, type, dev, rank, pad::binary, dims::binary, data::binary>>},
      {"type", <<c, x, 200, dev, rank, pad::binary, dims::binary, data::binary>>},
      {"device", <<c, x, type, 15, rank, pad::binary, dims::binary, data::binary>>},
      {"device without host memory",
       <<c, x, type, test_id, rank, pad::binary, dims::binary, data::binary>>},
      {"rank", <<c, x, type, dev, 9, pad::binary, dims::binary, data::binary>>},
      {"rank too small", <<c, x, type, dev, 0, pad::binary, dims::binary, data::binary>>},
      {"padding", <<c, x, type, dev, rank, 0, 1, 0, dims::binary, data::binary>>},
      {"zero dimension", <<c, x, type, dev, rank, pad::binary, 0, 0::56, data::binary>>},
      {"dimension past the rank",
       <<c, x, type, dev, rank, pad::binary, 2, 1, 0::48, data::binary>>},
      {"short data", head <> binary_part(data, 0, 7)},
      {"long data", head <> data <> <<0>>},
      {"no data", head},
      {"short header", binary_part(head, 0, 15)},
      {"empty", <<>>},
      {"huge dimensions",
       <<c, x, type, dev, 8, pad::binary, 255, 255, 255, 255, 255, 255, 255, 255, data::binary>>},
      {"too large", <<c, x, type, dev, 1, pad::binary, 13, 0::56, 0::13*32>>}
    ]

    for {label, ref} <- forged do
      t = %Tensor{v | ref: ref}

      for {name, fun} <- [
            add: fn -> Cascade.add(t, 1.0) end,
            sum: fn -> Cascade.sum(t) end,
            to_binary: fn -> Cascade.to_binary(t) end,
            free: fn -> Cascade.free(t) end,
            transfer: fn -> Cascade.transfer(t, :test) end
          ] do
        message =
          try do
            fun.()
            "did not raise"
          rescue
            e in ArgumentError -> e.message
          end

        assert message =~ "Cascade tensor reference", "#{label}: #{name}: #{message}"
      end
    end

    # the genuine one passes the same calls
    assert Cascade.to_list(Cascade.add(v, 1.0)) == [2.0, 3.0]
  end
end
