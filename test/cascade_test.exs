defmodule CascadeTest do
  use ExUnit.Case, async: true

  doctest Cascade
  doctest Cascade.Type
  doctest Cascade.Device

  alias Cascade.Tensor

  @types [:f16, :bf16, :f32, :f64, :u8, :s32, :s64]

  defp f32s(list), do: for(x <- list, into: <<>>, do: <<x::float-32-native>>)

  describe "the issue's user story" do
    test "dot, add a number, sum over an axis keeping it" do
      t =
        Cascade.from_binary(
          <<1.0::float-32-native, 2.0::float-32-native, 3.0::float-32-native,
            4.0::float-32-native>>,
          :f32,
          {2, 2}
        )

      result = Cascade.dot(t, t) |> Cascade.add(1.0) |> Cascade.sum(axes: [1], keep_axes: true)

      # [[1, 2], [3, 4]] . [[1, 2], [3, 4]] = [[7, 10], [15, 22]]; + 1 = [[8, 11], [16, 23]]
      assert %Tensor{shape: {2, 1}, type: {:f, 32}, device: :cpu} = result
      assert Cascade.to_list(result) == [[19.0], [39.0]]
      assert inspect(result) == "#Cascade.Tensor<f32[2][1] cpu [[19.0], [39.0]]>"
    end
  end

  describe "the op table" do
    test "the C table and the Elixir table list the same ops in the same order" do
      assert Cascade.Native.ops() == Enum.map(Cascade.__ops__(), & &1.name)
    end

    test "every op of the table is a public function with a doc" do
      {:docs_v1, _, :elixir, _, _, _, docs} = Code.fetch_docs(Cascade)

      for %{name: name, args: args, opts: opts, kind: kind} <- Cascade.__ops__() do
        arity = length(args) + if(opts != [] or kind == :create, do: 1, else: 0)
        assert function_exported?(Cascade, name, arity), "Cascade.#{name}/#{arity} is missing"

        assert Enum.any?(docs, fn
                 {{:function, ^name, ^arity}, _, _, %{"en" => doc}, _} -> doc =~ "iex>"
                 _ -> false
               end),
               "Cascade.#{name}/#{arity} has no doc with an example"
      end
    end
  end

  describe "from_binary/3,4" do
    test "reads native-endian row-major f32" do
      t = Cascade.from_binary(f32s([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), :f32, {2, 3})
      assert t.shape == {2, 3}
      assert t.type == {:f, 32}
      assert t.device == :cpu
      assert Cascade.to_list(t) == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    end

    test "accepts the tuple spelling of types" do
      t = Cascade.from_binary(<<1, 2>>, {:u, 8}, {2})
      assert t.type == {:u, 8}
      assert Cascade.to_list(t) == [1, 2]
    end

    test "every type" do
      for type <- @types do
        size = Cascade.Type.byte_size(type)
        bin = :binary.copy(<<0>>, 3 * size)
        t = Cascade.from_binary(bin, type, {3})
        assert Cascade.type(t) == Cascade.Type.to_tuple(type)
        assert Cascade.to_binary(t) == bin
      end
    end

    test "rank 0 and empty shapes" do
      assert Cascade.from_binary(<<7>>, :u8, {}) |> Cascade.to_list() == 7
      assert Cascade.from_binary(<<>>, :f32, {0}) |> Cascade.to_list() == []
      assert Cascade.from_binary(<<>>, :f32, {2, 0}) |> Cascade.to_list() == [[], []]
      assert Cascade.from_binary(<<>>, :s64, {0, 3}) |> Cascade.shape() == {0, 3}
    end

    test "rank 8" do
      t = Cascade.from_binary(<<1.0::float-32-native>>, :f32, Tuple.duplicate(1, 8))
      assert Cascade.rank(t) == 8
      assert Cascade.to_list(t) == [[[[[[[[1.0]]]]]]]]
    end

    test "device: option" do
      t = Cascade.from_binary(<<1, 2>>, :u8, {2}, device: :cpu)
      assert t.device == :cpu
      assert Cascade.from_binary(<<1, 2>>, :u8, {2}, []).device == :cpu
    end

    test "a 4 MB binary" do
      bin = :crypto.strong_rand_bytes(4 * 1024 * 1024)
      t = Cascade.from_binary(bin, :u8, {4 * 1024 * 1024})
      assert Cascade.to_binary(t) == bin
    end
  end

  describe "to_binary/1,2" do
    test "the whole tensor" do
      t = Cascade.tensor([1, 2, 3], type: :s32)
      assert Cascade.to_binary(t) == <<1::32-native, 2::32-native, 3::32-native>>
    end

    test "limit: counts elements, not bytes" do
      t = Cascade.tensor([1.0, 2.0, 3.0])
      assert Cascade.to_binary(t, limit: 2) == f32s([1.0, 2.0])
      assert Cascade.to_binary(t, limit: 0) == <<>>
      assert Cascade.to_binary(t, limit: 3) == f32s([1.0, 2.0, 3.0])
      assert Cascade.to_binary(t, limit: 1000) == f32s([1.0, 2.0, 3.0])
      assert Cascade.to_binary(t, limit: nil) == f32s([1.0, 2.0, 3.0])
      assert Cascade.to_binary(t, []) == f32s([1.0, 2.0, 3.0])
    end

    test "limit: with an 8-byte type" do
      t = Cascade.iota({5}, type: :s64)
      assert Cascade.to_binary(t, limit: 2) == <<0::64-native, 1::64-native>>
    end

    test "empty and scalar tensors" do
      assert Cascade.to_binary(Cascade.zeros({0})) == <<>>
      assert Cascade.to_binary(Cascade.zeros({0}), limit: 5) == <<>>
      assert Cascade.to_binary(Cascade.tensor(3, type: :u8)) == <<3>>
    end
  end

  describe "tensor/2" do
    test "nested lists of integers give s64" do
      t = Cascade.tensor([[1, 2, 3], [4, 5, 6]])
      assert t.shape == {2, 3}
      assert t.type == {:s, 64}
      assert Cascade.to_list(t) == [[1, 2, 3], [4, 5, 6]]
    end

    test "any float gives f32" do
      t = Cascade.tensor([[1, 2.5], [3, 4]])
      assert t.type == {:f, 32}
      assert Cascade.to_list(t) == [[1.0, 2.5], [3.0, 4.0]]
    end

    test "numbers give scalars" do
      assert %Tensor{shape: {}, type: {:s, 64}} = t = Cascade.tensor(5)
      assert Cascade.to_list(t) == 5
      assert %Tensor{shape: {}, type: {:f, 32}} = t = Cascade.tensor(2.5)
      assert Cascade.to_list(t) == 2.5
      assert Cascade.to_list(Cascade.tensor(-3, type: :s32)) == -3
    end

    test ":nan, :infinity and :neg_infinity" do
      t = Cascade.tensor([:nan, :infinity, :neg_infinity, 1])
      assert t.type == {:f, 32}
      assert Cascade.to_list(t) == [:nan, :infinity, :neg_infinity, 1.0]

      for type <- [:f16, :bf16, :f32, :f64] do
        t = Cascade.tensor([:nan, :infinity, :neg_infinity, 1.5], type: type)
        assert Cascade.to_list(t) == [:nan, :infinity, :neg_infinity, 1.5], "type #{type}"
      end

      assert Cascade.tensor(:nan) |> Cascade.to_list() == :nan
      assert Cascade.tensor(:infinity, type: :f64) |> Cascade.to_list() == :infinity
    end

    test "type: in both spellings" do
      assert Cascade.tensor([1, 2], type: :f16).type == {:f, 16}
      assert Cascade.tensor([1, 2], type: {:bf, 16}).type == {:bf, 16}
      assert Cascade.tensor([1, 2], type: {:f, 64}) |> Cascade.to_list() == [1.0, 2.0]
      assert Cascade.tensor([1.7, -1.7], type: :s32) |> Cascade.to_list() == [1, -1]
    end

    test "every type holds its extremes" do
      cases = [
        u8: [0, 255],
        s32: [-2_147_483_648, 2_147_483_647],
        s64: [-9_223_372_036_854_775_808, 9_223_372_036_854_775_807],
        f16: [65504.0, -65504.0, 6.103515625e-5],
        bf16: [1.0, -2.0, 0.5],
        f32: [3.4028234663852886e38, 1.401298464324817e-45],
        f64: [1.7976931348623157e308, 5.0e-324]
      ]

      for {type, values} <- cases do
        assert Cascade.tensor(values, type: type) |> Cascade.to_list() == values, "type #{type}"
      end
    end

    test "empty lists" do
      t = Cascade.tensor([])
      assert t.shape == {0}
      assert Cascade.to_list(t) == []
      t = Cascade.tensor([[], []], type: :f32)
      assert t.shape == {2, 0}
      assert Cascade.to_list(t) == [[], []]
    end

    test "16 nesting levels" do
      deep = Enum.reduce(1..16, 1, fn _, acc -> [acc] end)
      assert Cascade.tensor(deep).shape == Tuple.duplicate(1, 16)
    end

    test "device:" do
      assert Cascade.tensor([1], device: :cpu).device == :cpu
    end
  end

  describe "to_list/1" do
    test "rank 0" do
      assert Cascade.to_list(Cascade.tensor(1.5)) == 1.5
      assert Cascade.to_list(Cascade.full(7, {})) == 7
    end

    test "empty shapes" do
      assert Cascade.to_list(Cascade.zeros({0})) == []
      assert Cascade.to_list(Cascade.zeros({2, 0})) == [[], []]
      assert Cascade.to_list(Cascade.zeros({0, 2})) == []
      assert Cascade.to_list(Cascade.zeros({2, 3, 0})) == [[[], [], []], [[], [], []]]
      assert Cascade.to_list(Cascade.zeros({2, 0, 3})) == [[], []]
    end

    test "rank 3 in row-major order" do
      assert Cascade.to_list(Cascade.iota({2, 2, 2})) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    end

    test "100k elements" do
      list = Enum.to_list(1..100_000)
      assert Cascade.to_list(Cascade.tensor(list)) == list
    end
  end

  describe "dump/1 and load/1,2" do
    @values %{
      f16: [1.0, -2.5, 0.0, 65504.0, :infinity, :nan],
      bf16: [1.0, -2.5, 0.5, :neg_infinity],
      f32: [1.5, -0.125, 2.0e10, :nan],
      f64: [1.0e300, -1.0e-300, :infinity],
      u8: [0, 1, 255],
      s32: [-2_147_483_648, 0, 2_147_483_647],
      s64: [-9_223_372_036_854_775_808, 0, 9_223_372_036_854_775_807]
    }

    test "round trips for every type" do
      for type <- @types do
        values = Map.fetch!(@values, type)
        t = Cascade.tensor(values, type: type)
        {^type, {n}, bin} = dump = Cascade.dump(t)
        assert n == length(values)
        assert byte_size(bin) == n * Cascade.Type.byte_size(type)

        back = Cascade.load(dump)
        assert back.type == t.type
        assert back.shape == t.shape
        assert Cascade.to_list(back) == values, "type #{type}"
        assert Cascade.dump(back) == dump

        # {type, binary} gives rank 1
        assert Cascade.load({type, bin}) |> Cascade.to_list() == values
        # the tuple spelling of the type
        assert Cascade.load({Cascade.Type.to_tuple(type), {n}, bin}) |> Cascade.dump() == dump
      end
    end

    test "shapes of every rank survive" do
      for shape <- [{}, {0}, {3}, {2, 0}, {2, 3}, {1, 2, 1, 2}, Tuple.duplicate(1, 8)] do
        t = Cascade.iota(shape, type: :f32)
        dump = Cascade.dump(t)
        assert {:f32, ^shape, _} = dump
        assert Cascade.load(dump) |> Cascade.to_list() == Cascade.to_list(t)
      end
    end

    test "the dump is a plain term" do
      dump = Cascade.dump(Cascade.tensor([[1, 2], [3, 4]], type: :s32))
      assert dump |> :erlang.term_to_binary() |> :erlang.binary_to_term() == dump
    end

    test "load/2 takes device:" do
      assert Cascade.load({:u8, <<1, 2>>}, device: :cpu).device == :cpu
      assert Cascade.load({:u8, {2}, <<1, 2>>}, device: :cpu) |> Cascade.to_list() == [1, 2]
    end
  end

  describe "creation" do
    test "zeros/2 and ones/2" do
      assert %Tensor{shape: {2, 3}, type: {:f, 32}} = z = Cascade.zeros({2, 3})
      assert Cascade.to_list(z) == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
      assert Cascade.ones({2}) |> Cascade.to_list() == [1.0, 1.0]

      for type <- @types do
        assert Cascade.zeros({2}, type: type).type == Cascade.Type.to_tuple(type)
        assert Cascade.ones({2}, type: type) |> Cascade.to_list() |> Enum.all?(&(&1 == 1))
        assert Cascade.zeros({2}, type: type) |> Cascade.to_list() |> Enum.all?(&(&1 == 0))
      end

      assert Cascade.zeros({}) |> Cascade.to_list() == 0.0
      assert Cascade.ones({0, 5}) |> Cascade.to_list() == []
      assert Cascade.zeros({1}, device: :cpu).device == :cpu
    end

    test "full/3" do
      assert %Tensor{type: {:s, 64}} = t = Cascade.full(7, {2})
      assert Cascade.to_list(t) == [7, 7]
      assert %Tensor{type: {:f, 32}} = t = Cascade.full(2.5, {2, 1})
      assert Cascade.to_list(t) == [[2.5], [2.5]]
      assert Cascade.full(3, {2}, type: :f16) |> Cascade.to_list() == [3.0, 3.0]
      assert Cascade.full(-1, {3}, type: :s32) |> Cascade.to_list() == [-1, -1, -1]
      assert Cascade.full(:nan, {1}) |> Cascade.to_list() == [:nan]
      assert Cascade.full(:neg_infinity, {1}, type: :f64) |> Cascade.to_list() == [:neg_infinity]
      assert Cascade.full(1, {2}, device: :cpu).device == :cpu
    end

    test "iota/2" do
      assert Cascade.iota({5}) |> Cascade.to_list() == [0, 1, 2, 3, 4]
      assert Cascade.iota({5}).type == {:s, 64}
      assert Cascade.iota({2, 3}) |> Cascade.to_list() == [[0, 1, 2], [3, 4, 5]]
      assert Cascade.iota({2, 3}, axis: 0) |> Cascade.to_list() == [[0, 0, 0], [1, 1, 1]]
      assert Cascade.iota({2, 3}, axis: -1) |> Cascade.to_list() == [[0, 1, 2], [0, 1, 2]]
      assert Cascade.iota({3}, type: :f32) |> Cascade.to_list() == [0.0, 1.0, 2.0]
      assert Cascade.iota({}) |> Cascade.to_list() == 0
      assert Cascade.iota({0}) |> Cascade.to_list() == []
    end

    test "eye/2" do
      assert Cascade.eye({2, 3}) |> Cascade.to_list() == [[1, 0, 0], [0, 1, 0]]

      assert Cascade.eye({3, 2}, type: :f32) |> Cascade.to_list() == [
               [1.0, 0.0],
               [0.0, 1.0],
               [0.0, 0.0]
             ]

      assert Cascade.eye({2, 2, 2}) |> Cascade.to_list() == [[[1, 0], [0, 1]], [[1, 0], [0, 1]]]
    end

    test "eye/2 with an integer n means {n, n}, as documented" do
      assert Cascade.eye(3) |> Cascade.to_list() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    end

    test "random_uniform/2: same key, same numbers; other keys, other numbers; in [min, max)" do
      a = Cascade.random_uniform({10_000}, key: 42) |> Cascade.to_list()
      assert a == Cascade.random_uniform({10_000}, key: 42) |> Cascade.to_list()
      refute a == Cascade.random_uniform({10_000}, key: 43) |> Cascade.to_list()
      assert Enum.all?(a, &(is_float(&1) and &1 >= 0.0 and &1 < 1.0))
      assert length(Enum.uniq(a)) > 9_900
      mean = Enum.sum(a) / length(a)
      assert_in_delta mean, 0.5, 0.02

      b = Cascade.random_uniform({10_000}, key: 1, min: -2.0, max: 3.0) |> Cascade.to_list()
      assert Enum.all?(b, &(&1 >= -2.0 and &1 < 3.0))
      assert_in_delta Enum.sum(b) / length(b), 0.5, 0.1
      assert Enum.min(b) < -1.9 and Enum.max(b) > 2.9

      c = Cascade.random_uniform({1000}, key: 5, type: :f64)
      assert c.type == {:f, 64}
      assert Enum.all?(Cascade.to_list(c), &(&1 >= 0.0 and &1 < 1.0))

      for type <- [:f16, :bf16] do
        d = Cascade.random_uniform({1000}, key: 5, type: type)
        assert d.type == Cascade.Type.to_tuple(type)
        assert Enum.all?(Cascade.to_list(d), &(&1 >= 0.0 and &1 <= 1.0))
      end

      # the whole 64-bit key space
      assert Cascade.random_uniform({4}, key: 0xFFFF_FFFF_FFFF_FFFF) |> Cascade.to_list() ==
               Cascade.random_uniform({4}, key: 0xFFFF_FFFF_FFFF_FFFF) |> Cascade.to_list()

      assert Cascade.random_uniform({2, 0}, key: 1) |> Cascade.to_list() == [[], []]
    end

    test "random_normal/2: same key, same numbers; mean and standard deviation" do
      a = Cascade.random_normal({20_000}, key: 7) |> Cascade.to_list()
      assert a == Cascade.random_normal({20_000}, key: 7) |> Cascade.to_list()
      refute a == Cascade.random_normal({20_000}, key: 8) |> Cascade.to_list()
      assert Enum.all?(a, &is_float/1)
      {mean, sd} = mean_sd(a)
      assert_in_delta mean, 0.0, 0.05
      assert_in_delta sd, 1.0, 0.05

      b = Cascade.random_normal({20_000}, key: 3, mean: 10.0, standard_deviation: 2.0, type: :f64)

      assert b.type == {:f, 64}
      {mean, sd} = mean_sd(Cascade.to_list(b))
      assert_in_delta mean, 10.0, 0.1
      assert_in_delta sd, 2.0, 0.1
    end
  end

  defp mean_sd(list) do
    n = length(list)
    mean = Enum.sum(list) / n
    var = Enum.reduce(list, 0.0, fn x, acc -> acc + (x - mean) * (x - mean) end) / n
    {mean, :math.sqrt(var)}
  end

  describe "shape/1, type/1, rank/1, size/1, device/1" do
    test "read the struct" do
      t = Cascade.zeros({2, 3}, type: :s32)
      assert Cascade.shape(t) == {2, 3}
      assert Cascade.type(t) == {:s, 32}
      assert Cascade.rank(t) == 2
      assert Cascade.size(t) == 6
      assert Cascade.device(t) == :cpu
    end

    test "scalars and empty tensors" do
      s = Cascade.tensor(1)
      assert {Cascade.shape(s), Cascade.rank(s), Cascade.size(s)} == {{}, 0, 1}
      e = Cascade.zeros({2, 0, 4})
      assert {Cascade.shape(e), Cascade.rank(e), Cascade.size(e)} == {{2, 0, 4}, 3, 0}
    end

    test "every type's tuple" do
      for type <- @types do
        assert Cascade.type(Cascade.zeros({1}, type: type)) == Cascade.Type.to_tuple(type)
      end
    end

    test "still readable after free/1" do
      t = Cascade.zeros({3})
      :ok = Cascade.free(t)
      assert {Cascade.shape(t), Cascade.type(t), Cascade.size(t)} == {{3}, {:f, 32}, 3}
    end
  end

  describe "free/1" do
    test "is idempotent" do
      t = Cascade.ones({8})
      assert Cascade.free(t) == :ok
      assert Cascade.free(t) == :ok
      assert Cascade.free(t) == :ok
    end

    test "other tensors are unaffected" do
      a = Cascade.tensor([1, 2, 3])
      b = Cascade.add(a, 0)
      :ok = Cascade.free(a)
      assert Cascade.to_list(b) == [1, 2, 3]
    end

    test "a freed tensor cannot be read" do
      t = Cascade.tensor([1.0])
      :ok = Cascade.free(t)
      assert_raise ArgumentError, ~r/freed/, fn -> Cascade.to_binary(t) end
      assert_raise ArgumentError, ~r/freed/, fn -> Cascade.to_list(t) end
      assert_raise ArgumentError, ~r/freed/, fn -> Cascade.dump(t) end
    end
  end

  describe "memory/0 and devices/0" do
    test "memory/0 lists every available device with integer counters" do
      memory = Cascade.memory()
      assert %{cpu: %{bytes: bytes, peak_bytes: peak, tensors: tensors}} = memory
      assert is_integer(bytes) and bytes >= 0
      assert is_integer(peak) and peak >= bytes
      assert is_integer(tensors) and tensors >= 0

      assert Map.keys(memory) |> Enum.sort() ==
               Cascade.devices()
               |> Enum.filter(& &1.available)
               |> Enum.map(& &1.device)
               |> Enum.sort()
    end

    test "devices/0" do
      devices = Cascade.devices()

      assert %{device: :cpu, driver: :cpu, available: true, reason: nil} =
               Enum.find(devices, &(&1.device == :cpu))

      for d <- devices do
        assert %{device: device, driver: driver, available: available, reason: reason} = d
        assert is_atom(device) or match?({^driver, i} when is_integer(i) and i > 0, device)
        assert is_boolean(available)
        if available, do: assert(reason == nil), else: assert(is_binary(reason) and reason != "")
        assert %{name: name, kind: kind, memory: memory, host_memory: host, detail: detail} = d
        assert is_binary(name) and is_binary(kind) and is_binary(detail)
        assert is_integer(memory) and memory >= 0 and is_boolean(host)
      end
    end
  end

  describe "Inspect" do
    test "small tensors show every element" do
      t = Cascade.tensor([[1.0, 2.0], [3.0, 4.0]])
      assert inspect(t) == "#Cascade.Tensor<f32[2][2] cpu [[1.0, 2.0], [3.0, 4.0]]>"
    end

    test "lists of small integers are not printed as charlists" do
      assert inspect(Cascade.tensor([72, 105])) == "#Cascade.Tensor<s64[2] cpu [72, 105]>"

      assert inspect(Cascade.tensor([[7, 8], [9, 10]], type: :u8)) ==
               "#Cascade.Tensor<u8[2][2] cpu [[7, 8], [9, 10]]>"
    end

    test "every type's name" do
      assert inspect(Cascade.tensor([1, 2], type: :u8)) == "#Cascade.Tensor<u8[2] cpu [1, 2]>"
      assert inspect(Cascade.tensor([1], type: :bf16)) == "#Cascade.Tensor<bf16[1] cpu [1.0]>"
      assert inspect(Cascade.tensor([1], type: :f16)) == "#Cascade.Tensor<f16[1] cpu [1.0]>"
      assert inspect(Cascade.tensor([-1], type: :s32)) == "#Cascade.Tensor<s32[1] cpu [-1]>"
      assert inspect(Cascade.tensor([1], type: :f64)) == "#Cascade.Tensor<f64[1] cpu [1.0]>"
    end

    test "scalars, empty tensors and non-finite values" do
      assert inspect(Cascade.tensor(5)) == "#Cascade.Tensor<s64 cpu 5>"
      assert inspect(Cascade.zeros({0})) == "#Cascade.Tensor<f32[0] cpu []>"
      assert inspect(Cascade.zeros({2, 0})) == "#Cascade.Tensor<f32[2][0] cpu [[], []]>"

      assert inspect(Cascade.tensor([:nan, :infinity, :neg_infinity])) ==
               "#Cascade.Tensor<f32[3] cpu [:nan, :infinity, :neg_infinity]>"
    end

    test "big tensors are truncated to the inspect limit" do
      t = Cascade.iota({100})
      expected = Enum.map_join(0..49, ", ", &Integer.to_string/1)
      assert inspect(t) == "#Cascade.Tensor<s64[100] cpu [#{expected}, ...]>"

      assert inspect(Cascade.iota({3, 4}), limit: 5) ==
               "#Cascade.Tensor<s64[3][4] cpu [0, 1, 2, 3, 4, ...]>"

      assert inspect(Cascade.iota({3, 4}), limit: :infinity) ==
               "#Cascade.Tensor<s64[3][4] cpu [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]>"
    end

    test "a huge tensor is inspected without reading all of it" do
      t = Cascade.zeros({4_000_000})
      assert inspect(t, limit: 2) == "#Cascade.Tensor<f32[4000000] cpu [0.0, 0.0, ...]>"
    end

    test "freed tensors" do
      t = Cascade.tensor([[1.0, 2.0], [3.0, 4.0]])
      :ok = Cascade.free(t)
      assert inspect(t) == "#Cascade.Tensor<f32[2][2] cpu (freed)>"
    end
  end

  describe "zero-size tensors with huge dimensions" do
    test "ops return at once (no loop over the dimensions of an empty result)" do
      big = 200_000_000
      z = Cascade.from_binary(<<>>, :f32, {big, 0})

      cases = [
        iota_axis: fn -> Cascade.iota({big, 0}, axis: 0) end,
        iota: fn -> Cascade.iota({big, 0}) end,
        full: fn -> Cascade.full(1, {big, 0}) end,
        eye: fn -> Cascade.eye({big, 0, 2}) end,
        random_uniform: fn -> Cascade.random_uniform({big, 0}, key: 1) end,
        random_normal: fn -> Cascade.random_normal({0, big}, key: 1) end,
        add: fn -> Cascade.add(z, 1.0) end,
        exp: fn -> Cascade.exp(z) end,
        as_type: fn -> Cascade.as_type(z, :f16) end,
        sum: fn -> Cascade.sum(z, axes: [0]) end,
        transpose: fn -> Cascade.transpose(z) end,
        reverse: fn -> Cascade.reverse(z) end,
        slice: fn -> Cascade.slice(z, [1, 0], [big - 1, 0]) end,
        pad: fn -> Cascade.pad(z, 0.0, [{0, 0, 1}, {0, 0, 0}]) end,
        concatenate: fn -> Cascade.concatenate([z, z], axis: 1) end,
        broadcast: fn -> Cascade.broadcast(Cascade.zeros({1, 0}), {big, 0}) end,
        select: fn -> Cascade.select(z, z, z) end,
        put_slice: fn -> Cascade.put_slice(z, [0, 0], z) end
      ]

      # the fastest of three tries: a loop over 200,000,000 rows is slow every time, while a
      # busy machine or a garbage collection slows one try
      slow =
        for {name, fun} <- cases,
            {us, result} = Enum.min_by(for(_ <- 1..3, do: :timer.tc(fun)), &elem(&1, 0)),
            not match?(%Tensor{}, result) or us > 100_000,
            do: {name, div(us, 1000)}

      assert slow == [], "ops slower than 100 ms on an empty result (name, ms): #{inspect(slow)}"
    end

    test "inspect does not list every empty row" do
      t = Cascade.from_binary(<<>>, :f32, {100_000, 0})
      text = inspect(t)
      assert text =~ "#Cascade.Tensor<f32[100000][0] cpu"
      assert String.length(text) < 200, "inspect gave #{String.length(text)} characters"
    end
  end

  describe "type promotion with numbers (Nx rules)" do
    test "the numbers a process keeps as scalars: 1 and 1.0, 0.0 and -0.0 stay apart" do
      bits = fn t -> Cascade.to_binary(t) end
      neg = Cascade.tensor([-0.0])

      # alternately, so that each call finds the other's scalar kept
      for _ <- 1..3 do
        assert bits.(Cascade.add(neg, -0.0)) == <<-0.0::float-32-native>>
        assert bits.(Cascade.add(neg, 0.0)) == <<0.0::float-32-native>>
        assert bits.(Cascade.add(neg, 0)) == <<0.0::float-32-native>>
        assert bits.(Cascade.multiply(-0.0, Cascade.tensor([1.0]))) == <<-0.0::float-32-native>>
        assert bits.(Cascade.multiply(0.0, Cascade.tensor([1.0]))) == <<0.0::float-32-native>>

        i = Cascade.tensor([1], type: :s32)
        assert Cascade.add(i, 1).type == {:s, 32}
        assert Cascade.add(i, 1.0).type == {:f, 32}
        assert Cascade.to_list(Cascade.add(i, 1)) == [2]
        assert Cascade.to_list(Cascade.add(i, 1.0)) == [2.0]
        # the same number beside another type or device is another scalar
        assert Cascade.add(Cascade.tensor([1.0], type: :f64), 1.5).type == {:f, 64}
        assert Cascade.add(Cascade.tensor([1.0], device: :cpu), 1.5).device == :cpu
        assert Cascade.add(Cascade.tensor([1.0], device: :blas), 1.5).device == :blas
      end
    end

    test "s64 tensor + 1.5 gives f32" do
      t = Cascade.add(Cascade.tensor([1, 2]), 1.5)
      assert t.type == {:f, 32}
      assert Cascade.to_list(t) == [2.5, 3.5]
      t = Cascade.add(1.5, Cascade.tensor([1, 2]))
      assert t.type == {:f, 32}
      assert Cascade.to_list(t) == [2.5, 3.5]
    end

    test "f16 tensor + 2 stays f16" do
      t = Cascade.add(Cascade.tensor([1.0, 2.0], type: :f16), 2)
      assert t.type == {:f, 16}
      assert Cascade.to_list(t) == [3.0, 4.0]
    end

    test "a float keeps a float tensor's type" do
      assert Cascade.add(Cascade.tensor([1.0], type: :bf16), 0.5).type == {:bf, 16}
      assert Cascade.add(Cascade.tensor([1.0], type: :f64), 0.5).type == {:f, 64}
    end

    test "an integer keeps an integer tensor's type" do
      assert Cascade.add(Cascade.tensor([1, 2], type: :u8), 1).type == {:u, 8}
      assert Cascade.add(Cascade.tensor([1, 2], type: :s32), 1) |> Cascade.to_list() == [2, 3]
      assert Cascade.add(Cascade.tensor([1, 2], type: :s32), 1).type == {:s, 32}
    end

    test "u8 + s32 gives s32" do
      t = Cascade.add(Cascade.tensor([250, 1], type: :u8), Cascade.tensor([10, -2], type: :s32))
      assert t.type == {:s, 32}
      assert Cascade.to_list(t) == [260, -1]
    end

    test "tensor with tensor follows Cascade.Type.merge/2" do
      for a <- @types, b <- @types do
        t = Cascade.add(Cascade.zeros({1}, type: a), Cascade.zeros({1}, type: b))
        assert t.type == Cascade.Type.to_tuple(Cascade.Type.merge(a, b)), "#{a} + #{b}"
      end
    end

    test "two numbers" do
      assert %Tensor{type: {:s, 64}, shape: {}} = t = Cascade.add(1, 2)
      assert Cascade.to_list(t) == 3
      assert %Tensor{type: {:f, 32}} = t = Cascade.add(1, 2.5)
      assert Cascade.to_list(t) == 3.5
    end

    test "divide and unary float ops give floats, comparisons u8, integer sums s64 or u64" do
      assert Cascade.divide(Cascade.tensor([1, 2], type: :s32), 2).type == {:f, 32}
      assert Cascade.exp(Cascade.tensor([0], type: :u8)).type == {:f, 32}
      assert Cascade.less(Cascade.tensor([1.0]), 2).type == {:u, 8}
      assert Cascade.sum(Cascade.tensor([200, 100], type: :u8)) |> Cascade.to_list() == 300
      assert Cascade.sum(Cascade.tensor([200, 100], type: :u8)).type == {:u, 64}
      assert Cascade.sum(Cascade.tensor([-2, 1], type: :s8)).type == {:s, 64}

      assert Cascade.add(Cascade.tensor([1], type: :u32), Cascade.tensor([1], type: :s8)).type ==
               {:s, 64}

      assert Cascade.sum(Cascade.tensor([1.0], type: :f16)).type == {:f, 16}
    end

    test "ops with a number in the middle position" do
      t = Cascade.select(Cascade.tensor([1, 0]), 1.5, Cascade.tensor([7, 8]))
      assert t.type == {:f, 32}
      assert Cascade.to_list(t) == [1.5, 8.0]
      t = Cascade.clip(Cascade.tensor([1, 5, 9], type: :s32), 2, 6)
      assert t.type == {:s, 32}
      assert Cascade.to_list(t) == [2, 5, 6]
    end
  end

  describe "dot/6" do
    test "batched product" do
      a = Cascade.iota({2, 2, 3}, type: :f32)
      b = Cascade.ones({2, 3, 1})

      assert Cascade.dot(a, [2], [0], b, [1], [0]) |> Cascade.to_list() == [
               [[3.0], [12.0]],
               [[21.0], [30.0]]
             ]
    end

    test "outer product with no contracting axes" do
      a = Cascade.tensor([1, 2])
      b = Cascade.tensor([3, 4, 5])
      assert Cascade.dot(a, [], [], b, [], []) |> Cascade.to_list() == [[3, 4, 5], [6, 8, 10]]
    end

    test "a number on one side" do
      assert Cascade.dot(Cascade.tensor([1, 2]), [], [], 3, [], []) |> Cascade.to_list() == [3, 6]
    end
  end
end

defmodule CascadeNodeDefaultDeviceTest do
  # Not async: put_default_device/1 sets the default for the whole node, and the async tests
  # create tensors on the default device (errors_test asserts it is :cpu).
  use ExUnit.Case, async: false

  test "put_default_device/1" do
    assert Cascade.put_default_device(:cpu) == :ok
    assert Cascade.Device.default() == :cpu
    assert Cascade.zeros({1}).device == :cpu
  end

  test "the default device: :host, the fastest device in host memory" do
    # the application's default (the test config names :cpu for the other tests)
    assert Mix.Project.get!().application()[:env][:default_device] == :host
    blas? = Enum.any?(Cascade.devices(), &(&1.device == :blas and &1.available))
    host = if blas?, do: :blas, else: :cpu
    assert Cascade.Device.host() == host
    assert Cascade.with_device(:host, fn -> Cascade.iota({2}).device end) == host
    assert Cascade.tensor([1.0], device: :host).device == host
    assert Cascade.transfer(Cascade.tensor([1.0]), :host).device == host

    try do
      assert Cascade.put_default_device(:host) == :ok
      assert Cascade.Device.default() == host
      assert Cascade.zeros({1}).device == host
    after
      Cascade.put_default_device(:cpu)
    end
  end
end

defmodule CascadeMemoryAccountingTest do
  # Not async: reads the node-wide byte counters.
  use ExUnit.Case, async: false

  defp gc_all do
    for pid <- Process.list(), do: :erlang.garbage_collect(pid)
    :ok
  end

  test "creating and freeing a tensor moves memory().cpu.bytes by its size" do
    gc_all()
    %{cpu: %{bytes: before, tensors: tensors_before}} = Cascade.memory()
    t = Cascade.zeros({1024})
    %{cpu: %{bytes: during, tensors: tensors_during, peak_bytes: peak}} = Cascade.memory()
    assert during - before == 4096
    assert tensors_during - tensors_before == 1
    assert peak >= during
    :ok = Cascade.free(t)
    %{cpu: %{bytes: bytes_after, tensors: tensors_after}} = Cascade.memory()
    assert bytes_after == before
    assert tensors_after == tensors_before
    # a second free/1 must not count the bytes twice
    :ok = Cascade.free(t)
    assert Cascade.memory().cpu.bytes == before
  end

  test "dropped tensors are released by garbage collection" do
    gc_all()
    before = Cascade.memory().cpu.bytes

    {:ok, pid} =
      Task.start(fn ->
        _ = for _ <- 1..10, do: Cascade.zeros({1000})

        receive do
          :stop -> :ok
        end
      end)

    ref = Process.monitor(pid)
    send(pid, :stop)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}
    gc_all()
    assert Cascade.memory().cpu.bytes == before
  end
end
