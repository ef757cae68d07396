defmodule Cascade.BackendTest do
  # Cascade.Backend under Nx: memory semantics, conversion, inspect, devices, and the
  # fallback to Nx.BinaryBackend (counted, policed). Needs Nx (CASCADE_NX_PATH, see mix.exs);
  # tagged :nx, which test_helper.exs excludes when Nx is absent. Stats and the policy are
  # global: not async.
  use ExUnit.Case, async: false
  import ExUnit.CaptureLog

  @moduletag :nx

  setup do
    Cascade.reset_stats()
    Nx.default_backend(Cascade.Backend)

    on_exit(fn -> Cascade.put_fallback_policy(:warn) end)
    :ok
  end

  defp cx(tensor), do: tensor.data.tensor

  # `fun`'s results with Cascade.Backend as the default backend, then with Nx.BinaryBackend
  defp on_both(fun),
    do:
      {Nx.with_default_backend(Cascade.Backend, fun),
       Nx.with_default_backend(Nx.BinaryBackend, fun)}

  # no callback since the last Cascade.reset_stats/0 ran on Nx.BinaryBackend
  defp assert_no_fallback,
    do: assert(Cascade.stats() |> Enum.filter(&match?({{_, _, :binary_fallback}, _}, &1)) == [])

  describe "conversion" do
    test "tensors are Cascade tensors, and read back as Nx expects" do
      t = Nx.tensor([[1.0, 2.0], [3.0, 4.0]])
      assert %{__struct__: Cascade.Backend, device: :cpu} = t.data
      assert %Cascade.Tensor{type: {:f, 32}, shape: {2, 2}} = cx(t)
      assert Nx.to_flat_list(t) == [1.0, 2.0, 3.0, 4.0]
      assert Nx.to_binary(t, limit: 2) == <<1.0::float-32-native, 2.0::float-32-native>>
      assert Nx.to_binary(t, limit: 0) == ""
    end

    test "rank 12 runs natively; above 16 dimensions, Nx.BinaryBackend's, counted as fallbacks" do
      Cascade.put_fallback_policy(:error)
      shape12 = {2, 1, 3, 1, 1, 2, 1, 1, 3, 1, 2, 1}
      {c, b} = on_both(fn -> Nx.iota(shape12, type: :f32) |> Nx.exp() |> Nx.sum(axes: [2, 8]) end)
      assert %Cascade.Tensor{} = cx(c)
      assert Nx.to_flat_list(c) == Nx.to_flat_list(b)
      assert_no_fallback()

      Cascade.put_fallback_policy(:allow)
      shape17 = Tuple.duplicate(1, 16) |> Tuple.append(6)

      {c, b} =
        on_both(fn ->
          Nx.iota({2, 3}, type: :f32) |> Nx.reshape(shape17) |> Nx.add(1) |> Nx.reshape({3, 2})
        end)

      assert Nx.to_flat_list(c) == Nx.to_flat_list(b)
      assert Nx.to_flat_list(c) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
      assert %Cascade.Tensor{shape: {3, 2}} = cx(c)
      fallbacks = for {{_, op, :binary_fallback}, _} <- Cascade.stats(), do: op
      assert :add in fallbacks
    end

    test "floats into integers: Cascade's when they truncate into the range, else Nx's wrap" do
      Cascade.put_fallback_policy(:allow)
      floats = [:f32, :f64, :f16, :bf16]
      ints = [:u8, :s8, :u16, :s16, :u32, :s32, :u64, :s64]

      # in range, with NaN and infinities nowhere: native; -0.9 truncates to 0, in u8's range
      for ft <- floats, it <- ints do
        Cascade.reset_stats()

        {got, want} =
          on_both(fn -> Nx.tensor([1.9, -0.9, 0.0, 127.5], type: ft) |> Nx.as_type(it) end)

        assert Nx.to_flat_list(got) == Nx.to_flat_list(want)
        assert_no_fallback()
      end

      # beyond the range (Nx wraps: -1.5 into u8 is 255; Cascade would give 0), or a NaN or an
      # infinity that hides the other values: Nx.BinaryBackend's answer, counted
      for vals <- [[-1.5, 2.0], [300.0, 1.0], [1.0, :nan], [:infinity, -3.0e9]], it <- ints do
        Cascade.reset_stats()
        {got, want} = on_both(fn -> Nx.tensor(vals, type: :f32) |> Nx.as_type(it) end)
        assert Nx.to_flat_list(got) == Nx.to_flat_list(want)
      end

      Cascade.reset_stats()
      assert Nx.to_flat_list(Nx.as_type(Nx.tensor([-1.5, 2.0]), :u8)) == [255, 2]
      assert %{calls: 1} = Cascade.stats()[{:cpu, :as_type, :binary_fallback}]
    end

    test "the cumulative functions run natively, with Nx.BinaryBackend's answers" do
      cases = [
        {[3.0, :nan, 5.0, 1.0], :f32},
        {[-0.0, 0.0, -1.0, :infinity, :neg_infinity, 2.0], :f16},
        {[[1.5, -2.25, 3.0], [0.5, 4.0, -1.0]], :bf16},
        {[[100, 27, 3], [7, 1, 90]], :u8},
        {[[100, -27, 3], [7, 1, -90]], :s8}
      ]

      for {vals, type} <- cases,
          op <- [:cumulative_sum, :cumulative_product, :cumulative_max, :cumulative_min],
          axis <- [0, -1],
          reverse <- [false, true] do
        Cascade.reset_stats()

        {got, want} =
          on_both(fn ->
            apply(Nx, op, [Nx.tensor(vals, type: type), [axis: axis, reverse: reverse]])
          end)

        # the same values, -0.0 told from 0.0 (any NaN for a NaN: inf + -inf is x86's negative
        # NaN on Cascade, a positive one on Nx.BinaryBackend)
        exact = fn t ->
          Enum.map(Nx.to_flat_list(t), fn x -> if is_float(x), do: <<x::float-64>>, else: x end)
        end

        assert exact.(got) == exact.(want), inspect({op, type, axis, reverse})
        assert_no_fallback()
      end
    end

    test "inspect prints as Nx.BinaryBackend does" do
      for t <- [Nx.iota({2, 3}), Nx.tensor([1.5, :nan], type: :f16), Nx.iota({100})] do
        expected = inspect(Nx.backend_copy(t, Nx.BinaryBackend))
        assert inspect(t) == expected
      end

      assert inspect(Nx.iota({1000}), limit: 3) =~ "[0, 1, 2, ...]"
    end

    test "a tensor on another device than the call's moves to it, counted as a transfer" do
      Cascade.reset_stats()
      x = Nx.tensor([1.0, 2.0]) |> Nx.backend_transfer({Cascade.Backend, device: :blas})
      # the scalar is made on the default backend's device (:cpu), as Nx.Defn.Evaluator does
      y = Nx.multiply(x, Nx.tensor(3.0))
      assert Nx.to_flat_list(y) == [3.0, 6.0]
      assert %{device: :blas} = y.data
      # the scalar moves, not the data, whichever comes first
      z = Nx.multiply(Nx.tensor(3.0), x)
      assert %{device: :blas} = z.data
      assert %{calls: calls} = Cascade.stats()[{:blas, :transfer, :transfer}]
      assert calls >= 1
    end

    test "complex tensors (c64, c128) are Cascade tensors and run natively" do
      Cascade.put_fallback_policy(:error)

      for type <- [:c64, :c128] do
        t = Nx.tensor([1.0, Complex.new(2.0, -1.0)], type: type)
        assert %{__struct__: Cascade.Backend, tensor: %Cascade.Tensor{}} = t.data

        assert t |> Nx.add(1) |> Nx.to_flat_list() ==
                 [Complex.new(2.0, 0.0), Complex.new(3.0, -1.0)]

        assert t |> Nx.conjugate() |> Nx.imag() |> Nx.to_flat_list() == [-0.0, 1.0]

        assert t |> Nx.fft() |> Nx.to_flat_list() == [
                 Complex.new(3.0, -1.0),
                 Complex.new(-1.0, 1.0)
               ]
      end
    end

    test "every integer type of Nx is a Cascade type: s8, s16, u16, u32 and u64 run natively" do
      Cascade.put_fallback_policy(:error)

      for type <- [:s8, :s16, :u16, :u32, :u64, :u8, :s32, :s64] do
        t = Nx.tensor([1, 2, 3], type: type)
        assert %{__struct__: Cascade.Backend, tensor: %Cascade.Tensor{}} = t.data
        assert t |> Nx.add(1) |> Nx.to_flat_list() == [2, 3, 4]
        assert t |> Nx.bitwise_xor(3) |> Nx.to_flat_list() == [2, 1, 0]
        assert t |> Nx.sum() |> Nx.type() == Nx.Type.to_aggregate(Nx.Type.normalize!(type))
      end

      # u32 wraps as Nx.BinaryBackend's u32 does (Nx.Random's threefry runs on it)
      big = Nx.tensor([4_294_967_295, 7], type: :u32)
      assert big |> Nx.add(1) |> Nx.to_flat_list() == [0, 8]
      assert big |> Nx.left_shift(4) |> Nx.to_flat_list() == [4_294_967_280, 112]

      assert Nx.tensor([2 ** 64 - 1], type: :u64) |> Nx.reduce_max() |> Nx.to_number() ==
               2 ** 64 - 1

      assert_no_fallback()
    end
  end

  describe "memory" do
    test "backend_deallocate releases the tensor, and says so the second time" do
      t = Nx.tensor([1, 2, 3])
      assert Nx.backend_deallocate(t) == :ok
      assert Nx.backend_deallocate(t) == :already_deallocated
      assert inspect(t) =~ "(deallocated)"
    end

    test "backend_copy keeps the original, backend_transfer releases it" do
      t = Nx.tensor([1.0, 2.0])
      copy = Nx.backend_copy(t, Nx.BinaryBackend)
      assert %{__struct__: Nx.BinaryBackend} = copy.data
      assert Nx.to_flat_list(t) == [1.0, 2.0]

      moved = Nx.backend_transfer(t, Nx.BinaryBackend)
      assert Nx.to_flat_list(moved) == [1.0, 2.0]
      assert Nx.backend_deallocate(t) == :already_deallocated

      back = Nx.backend_transfer(moved, Cascade.Backend)
      assert %{__struct__: Cascade.Backend} = back.data
      assert Nx.to_flat_list(back) == [1.0, 2.0]
    end

    test "a transfer between devices moves the data and counts it" do
      t = Nx.tensor([1.0, 2.0], backend: {Cascade.Backend, device: :cpu})
      on_test = Nx.backend_transfer(t, {Cascade.Backend, device: :test})
      assert %{__struct__: Cascade.Backend, device: :test} = on_test.data
      assert Cascade.device(cx(on_test)) == :test
      assert Nx.backend_deallocate(t) == :already_deallocated
      assert %{calls: 1} = Cascade.stats()[{:test, :transfer, :transfer}]
      assert on_test |> Nx.exp() |> Nx.to_flat_list() |> length() == 2
    end

    test "a copy on the same device outlives the original" do
      t = Nx.tensor([1.0, 2.0])
      copy = Nx.backend_copy(t, Cascade.Backend)
      assert Nx.backend_deallocate(t) == :ok
      assert Nx.to_flat_list(copy) == [1.0, 2.0]
    end

    test "a transfer to the same device keeps the tensor usable" do
      t = Nx.tensor([1.0, 2.0])
      same = Nx.backend_transfer(t, Cascade.Backend)
      assert Nx.to_flat_list(same) == [1.0, 2.0]
    end

    test "to_batched splits along the first axis, repeating or discarding the leftover" do
      t = Nx.iota({5, 2})
      batches = t |> Nx.to_batched(2) |> Enum.map(&Nx.to_flat_list/1)
      assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
      assert t |> Nx.to_batched(2, leftover: :discard) |> Enum.count() == 2
    end
  end

  describe "the fallback to Nx.BinaryBackend" do
    test "is counted in Cascade.stats/0 with the bytes it copied" do
      Cascade.put_fallback_policy(:allow)
      t = Nx.tensor([3, 1, 2])
      # 24 bytes of s64 and the 8 of the initial value in, 8 bytes of s64 out: reduce runs an
      # Elixir function
      assert t |> Nx.reduce(0, &Nx.add/2) |> Nx.to_number() == 6
      assert %{calls: 1, bytes: 40} = Cascade.stats()[{:cpu, :reduce, :binary_fallback}]
    end

    test "logs once under :warn" do
      Cascade.put_fallback_policy(:warn)
      # a type no other test reduces with a function: the warning is once per (device, op, type)
      t = Nx.tensor([3.0, 1.0], type: :f16)

      log = capture_log(fn -> Nx.reduce(t, 0, &Nx.add/2) end)
      assert log =~ "reduce on :cpu"
      assert log =~ "Nx.BinaryBackend"
      assert capture_log(fn -> Nx.reduce(t, 0, &Nx.add/2) end) == ""
    end

    test "raises before running under :error" do
      Cascade.put_fallback_policy(:error)

      assert_raise Cascade.Error, ~r/reduce on :cpu .* fallback policy is :error/, fn ->
        Nx.reduce(Nx.tensor([3, 1, 2]), 0, &Nx.add/2)
      end

      refute Cascade.stats()[{:cpu, :reduce, :binary_fallback}]
      # native callbacks are unaffected
      assert Nx.tensor([1, 2]) |> Nx.add(1) |> Nx.to_flat_list() == [2, 3]
    end

    test "runs functions given to map and reduce on Nx.BinaryBackend" do
      Cascade.put_fallback_policy(:allow)
      t = Nx.tensor([1, 2, 3])
      assert t |> Nx.map(&Nx.add(&1, 1)) |> Nx.to_flat_list() == [2, 3, 4]
      assert t |> Nx.reduce(0, &Nx.add/2) |> Nx.to_number() == 6
    end
  end

  describe "native callbacks" do
    test "run through Cascade's negotiation" do
      a = Nx.iota({2, 3}, type: :f32)
      b = Nx.iota({3, 2}, type: :f32)
      assert Nx.dot(a, b) |> Nx.to_flat_list() == [10.0, 13.0, 28.0, 40.0]
      assert Nx.exp(a) |> Nx.sum(axes: [1]) |> Nx.shape() == {2}
      assert %{calls: 1} = Cascade.stats()[{:cpu, :dot, :native}]
      refute Enum.any?(Cascade.stats(), &match?({{_, _, :binary_fallback}, _}, &1))
    end

    test "follow Nx's output types" do
      assert Nx.divide(Nx.tensor([1, 2]), 2) |> Nx.type() == {:f, 32}

      assert Nx.add(Nx.tensor([1], type: :u8), Nx.tensor([1.0], type: :f64)) |> Nx.type() ==
               {:f, 64}

      assert Nx.equal(Nx.tensor([1, 2]), 2) |> Nx.to_flat_list() == [0, 1]
      assert Nx.argmax(Nx.tensor([[1, 9], [7, 2]]), axis: 1) |> Nx.to_flat_list() == [1, 0]
    end

    test "sort and argsort run natively and give Nx.BinaryBackend's order" do
      Cascade.put_fallback_policy(:error)

      {cascade, binary} =
        on_both(fn ->
          x = Nx.tensor([[3.0, :nan, -1.0, 3.0], [0.0, -0.0, :infinity, 2.0]])
          i = Nx.tensor([[5, 1, 5], [-2, 7, 7]], type: :s8)

          for t <- [x, i], axis <- [0, 1], direction <- [:asc, :desc] do
            {Nx.sort(t, axis: axis, direction: direction) |> Nx.to_binary(),
             Nx.argsort(t, axis: axis, direction: direction, stable: true) |> Nx.to_binary(),
             Nx.argsort(t, axis: axis, direction: direction, type: :u8) |> Nx.to_binary()}
          end
        end)

      assert cascade == binary
      assert_no_fallback()
    end

    test "triangular_solve runs natively and gives Nx.BinaryBackend's bits" do
      Cascade.put_fallback_policy(:error)

      {cascade, binary} =
        on_both(fn ->
          a = Nx.tensor([[3.0, 0.5, -1.0], [1.5, -2.0, 0.25], [0.75, 1.0, 4.0]])
          batch = Nx.tensor([[[1, 0], [2, 3]], [[4, 0], [5, 6]]])

          for left <- [true, false],
              lower <- [true, false],
              transform <- [:none, :transpose],
              b <- [
                Nx.tensor([[1.0, -2.0, 0.5], [3.0, 1.0, -1.0], [0.1, 0.2, 0.3]]),
                Nx.tensor([1, 2, 3])
              ] do
            Nx.LinAlg.triangular_solve(a, b, left_side: left, lower: lower, transform_a: transform)
            |> Nx.to_binary()
          end ++
            [
              Nx.LinAlg.triangular_solve(batch, Nx.tensor([[2, -1], [3, 7]])) |> Nx.to_binary(),
              Nx.LinAlg.triangular_solve(Nx.as_type(a, :f64), Nx.tensor([1, 2, 3], type: :f16))
              |> Nx.to_binary()
            ]
        end)

      assert cascade == binary

      assert_raise ArgumentError, "can't solve for singular matrix", fn ->
        Nx.LinAlg.triangular_solve(Nx.tensor([[1.0, 0.0], [1.0, 0.0]]), Nx.tensor([1.0, 2.0]))
      end

      assert_no_fallback()
    end

    # Partial pivoting (LAPACK's getrf): where Nx.BinaryBackend's pivoting picks the same rows,
    # the same factors; elsewhere p · l · u is the matrix still
    test "lu runs natively: p · l · u is the matrix, with LAPACK's pivots" do
      Cascade.put_fallback_policy(:error)
      t = Nx.tensor([[1, 2, 0], [3, 8, 1], [6, 4, 2]], type: :f64)
      {p, l, u} = Nx.LinAlg.lu(t)
      {bp, bl, bu} = Nx.LinAlg.lu(Nx.backend_transfer(t, Nx.BinaryBackend))
      assert Nx.to_list(p) == Nx.to_list(bp)
      assert Nx.all_close(l, Nx.backend_transfer(bl, Cascade.Backend)) |> Nx.to_number() == 1
      assert Nx.all_close(u, Nx.backend_transfer(bu, Cascade.Backend)) |> Nx.to_number() == 1

      # singular: Nx.BinaryBackend keeps the rows in place, getrf swaps the second and third
      s = Nx.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
      {p, l, u} = Nx.LinAlg.lu(s)
      assert Nx.to_list(p) == [[0, 1, 0], [0, 0, 1], [1, 0, 0]]
      assert p.type == {:s, 64} and l.type == {:f, 32} and u.type == {:f, 32}
      back = p |> Nx.dot(l) |> Nx.dot(u)
      assert Nx.all_close(back, Nx.as_type(s, :f32)) |> Nx.to_number() == 1
      assert Nx.LinAlg.determinant(Nx.tensor([[2.0, 1.0], [1.0, 3.0]])) |> Nx.to_number() == 5.0
      assert_no_fallback()
    end

    # The Jacobi method to full precision, eigenvalues ascending; Nx.BinaryBackend's QR
    # iterations stop at eps (1.0e-4) and leave the eigenvalues in the order they converge in
    test "eigh runs natively: eigenpairs to full precision, eigenvalues ascending" do
      Cascade.put_fallback_policy(:error)
      t = Nx.tensor([[[2, 5], [5, 6]], [[1, 0], [0, 4]]])
      {values, vectors} = Nx.LinAlg.eigh(t)
      assert values.type == {:f, 32} and vectors.shape == {2, 2, 2}
      assert Nx.to_list(values) == [[-1.3851648569107056, 9.385165214538574], [1.0, 4.0]]
      {b_values, _} = Nx.LinAlg.eigh(Nx.backend_copy(t, Nx.BinaryBackend))
      assert Nx.to_list(Nx.sort(b_values, axis: 1) |> Nx.round()) == Nx.to_list(Nx.round(values))

      # A V = V diag(values)
      av = Nx.dot(Nx.as_type(t, :f32), [2], [0], vectors, [1], [0])
      vl = Nx.multiply(vectors, Nx.new_axis(values, 1))
      assert Nx.all_close(av, vl, atol: 1.0e-5) |> Nx.to_number() == 1
      assert_no_fallback()
    end

    # In double (Jacobi on :cpu, LAPACK on :blas): a rank-deficient f32 matrix's zero singular
    # value stays below pinv's 1e-10 (Nx's default SVD left it at 8e-8-2e-7, and pinv's entries
    # at 1e6-1e8 where Nx.BinaryBackend's are 0.59)
    test "svd runs natively; pinv of a rank-deficient matrix stays finite" do
      Cascade.put_fallback_policy(:error)
      a = [[1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0], [1.0, 0.0, 1.0, 0.0]]

      for device <- [:cpu, :blas], type <- [:f32, :f64] do
        t = Nx.tensor(a, type: type, backend: {Cascade.Backend, device: device})
        {u, s, vt} = Nx.LinAlg.svd(t)
        assert {u.shape, s.shape, vt.shape} == {{3, 3}, {3}, {4, 4}}
        [s0, s1, s2] = Nx.to_flat_list(s)
        # LAPACK's (NumPy's) 12.2694165, 1.2088918
        assert_in_delta s0, 12.2694165, 1.0e-5
        assert_in_delta s1, 1.2088918, 1.0e-6
        assert s2 < 1.0e-12

        {u, s, vt} = Nx.LinAlg.svd(t, full_matrices?: false)
        back = Nx.dot(Nx.multiply(u, s), vt)
        assert Nx.all_close(back, t, atol: 1.0e-5) |> Nx.to_number() == 1

        # the exact pseudo-inverse (NumPy's to 1e-15)
        exact =
          [[-1, -2, 65], [2, 4, -20], [1, 2, 45], [4, 8, -40]]
          |> Nx.tensor(type: :f64, backend: Nx.BinaryBackend)
          |> Nx.divide(110)

        p = Nx.LinAlg.pinv(t)
        tol = if type == :f32, do: 1.0e-5, else: 1.0e-12

        assert Nx.all_close(Nx.backend_copy(p, Nx.BinaryBackend), exact, atol: tol, rtol: 0)
               |> Nx.to_number() == 1

        # the Moore-Penrose conditions hold: a p a = a
        apa = Nx.dot(Nx.dot(t, p), t)
        assert Nx.all_close(apa, t, atol: 1.0e-4) |> Nx.to_number() == 1
      end

      assert_no_fallback()
    end

    test "indexed_add, indexed_put and take_along_axis run natively as on Nx.BinaryBackend" do
      Cascade.put_fallback_policy(:error)

      {cascade, binary} =
        on_both(fn ->
          t = Nx.iota({2, 3}, type: :f32)
          i = Nx.tensor([[1, 2], [0, 0], [1, 2]])
          u = Nx.tensor([0.5, 1.25, 2.0])
          cols = Nx.tensor([[2], [0]])
          block = Nx.tensor([[1.0, 2.0], [3.0, 4.0]])
          h = Nx.tensor([2048.0, 0.0], type: :f16)
          along = Nx.tensor([[2, 0, 0], [1, 1, 2]])

          [
            Nx.indexed_add(t, i, u),
            Nx.indexed_put(t, i, u),
            Nx.indexed_add(t, cols, block, axes: [1]),
            Nx.indexed_put(
              Nx.tensor([1, 2, 3], type: :u8),
              Nx.tensor([[0], [0]]),
              Nx.tensor([7, 9], type: :u8)
            ),
            Nx.indexed_add(h, Nx.tensor([[0], [0]]), Nx.tensor([1.0, 1.0], type: :f16)),
            Nx.indexed_add(Nx.tensor([1, 2], type: :s32), Nx.tensor([[1]]), Nx.tensor([0.5])),
            Nx.take_along_axis(t, along, axis: 1),
            Nx.take_along_axis(t, Nx.tensor([[1, 0, 1]]), axis: 0)
          ]
          |> Enum.map(&{Nx.type(&1), Nx.shape(&1), Nx.to_binary(&1)})
        end)

      assert cascade == binary
      assert_no_fallback()
    end

    test "conv runs on Cascade's conv2d for any rank, input dilation and batch groups" do
      Cascade.put_fallback_policy(:error)

      {cascade, binary} =
        on_both(fn ->
          x = Nx.iota({2, 3, 6, 5}, type: :f32) |> Nx.divide(17) |> Nx.sin()
          k = Nx.iota({4, 3, 3, 2}, type: :f32) |> Nx.divide(7) |> Nx.cos()
          g = Nx.iota({4, 1, 2, 2}, type: :f32) |> Nx.subtract(5)
          x1 = Nx.iota({2, 3, 9}, type: :f32) |> Nx.multiply(0.25)
          k1 = Nx.iota({2, 3, 3}, type: :f32) |> Nx.subtract(4)
          nhwc = Nx.transpose(x, axes: [0, 2, 3, 1])
          hwio = Nx.transpose(k, axes: [2, 3, 1, 0])
          x3 = Nx.iota({2, 2, 3, 6, 5}, type: :f32) |> Nx.divide(13) |> Nx.cos()
          k3 = Nx.iota({3, 2, 2, 3, 2}, type: :f32) |> Nx.divide(5) |> Nx.sin()

          [
            Nx.conv(x, k),
            Nx.conv(x, k, strides: [2, 1], padding: [{1, 0}, {2, 1}], kernel_dilation: [1, 2]),
            Nx.conv(x, k, padding: :same),
            Nx.conv(
              Nx.slice_along_axis(x, 0, 2, axis: 1)
              |> Nx.pad(0.0, [{0, 0, 0}, {0, 2, 0}, {0, 0, 0}, {0, 0, 0}]),
              g,
              feature_group_size: 4
            ),
            Nx.conv(x1, k1, strides: 2, padding: [{1, 1}]),
            Nx.conv(nhwc, hwio,
              input_permutation: [0, 3, 1, 2],
              kernel_permutation: [3, 2, 0, 1],
              output_permutation: [0, 3, 1, 2]
            ),
            Nx.conv(Nx.iota({1, 1, 4, 4}), Nx.iota({1, 1, 2, 2})),
            # input dilation, batch groups, negative padding
            Nx.conv(x1, k1, input_dilation: [2], padding: [{2, 1}]),
            Nx.conv(x, k, input_dilation: [2, 1], padding: :same),
            Nx.conv(Nx.concatenate([x, x]), k, batch_group_size: 2),
            Nx.conv(x, k, padding: [{-1, 1}, {2, -1}]),
            # 3-D (and 4-D) by folding the first spatial axis into the batch
            Nx.conv(x3, k3),
            Nx.conv(x3, k3,
              strides: [2, 1, 2],
              padding: [{1, 0}, {0, 1}, {1, 1}],
              kernel_dilation: [1, 2, 1]
            ),
            Nx.conv(Nx.reshape(x3, {1, 2, 2, 3, 6, 5}), Nx.iota({2, 2, 2, 2, 2, 2}, type: :f32))
          ]
          |> Enum.map(&{Nx.type(&1), Nx.shape(&1), Nx.to_flat_list(&1)})
        end)

      for {{ta, sa, a}, {tb, sb, b}} <- Enum.zip(cascade, binary) do
        assert {ta, sa} == {tb, sb}
        for {x, y} <- Enum.zip(a, b), do: assert_in_delta(x, y, 1.0e-4 * (1 + abs(y)))
      end

      assert_no_fallback()
    end

    test "window_sum, window_product, window_max and window_min run natively" do
      Cascade.put_fallback_policy(:error)

      {cascade, binary} =
        on_both(fn ->
          x = Nx.iota({2, 3, 6, 5}, type: :f32) |> Nx.divide(7) |> Nx.sin()
          i = Nx.tensor([[3, -1, 4, 1], [5, -9, 2, 6]], type: :s16)

          [
            Nx.window_max(x, {1, 1, 2, 2}, strides: [1, 1, 2, 2]),
            Nx.window_sum(x, {1, 2, 3, 2}, padding: :same),
            Nx.window_min(x, {1, 1, 2, 3},
              padding: [{0, 0}, {0, 0}, {1, 1}, {2, 0}],
              window_dilations: [1, 1, 2, 1]
            ),
            Nx.window_product(i, {1, 2}, strides: [1, 1]),
            Nx.window_max(i, {2, 2}, padding: :same),
            Nx.window_sum(Nx.tensor([2048.0, 1.0, 1.0], type: :f16), {3})
          ]
          |> Enum.map(&{Nx.type(&1), Nx.shape(&1), Nx.to_binary(&1)})
        end)

      assert cascade == binary
      assert_no_fallback()
    end

    test "top_k runs natively (argsort's first k) and equals Nx's default, ties and NaN included" do
      Cascade.put_fallback_policy(:error)

      for device <- [:cpu, Cascade.Device.host()] do
        Cascade.reset_stats()

        {cascade, binary} =
          on_both(fn ->
            # many ties and a few NaNs: Nx's default is a stable descending argsort, NaN first
            values =
              for i <- 0..(3 * 4 * 70 - 1),
                  do: if(rem(i, 23) == 0, do: :nan, else: round(4 * :math.sin(i * 0.37)) * 1.0)

            x = values |> Nx.tensor(type: :f32) |> Nx.reshape({3, 4, 70})
            ints = values |> Enum.map(&if(&1 == :nan, do: 0, else: trunc(&1)))
            i = ints |> Nx.tensor(type: :s16) |> Nx.reshape({3, 4, 70})

            on_device = fn t ->
              if Nx.default_backend() == Nx.BinaryBackend,
                do: t,
                else: Nx.backend_copy(t, {Cascade.Backend, device: device})
            end

            for k <- [1, 5, 40, 70], t <- [on_device.(x), on_device.(i)] do
              {values, indices} = Nx.top_k(t, k: k)
              {Nx.to_binary(values), Nx.shape(values), Nx.to_binary(indices), Nx.type(indices)}
            end
          end)

        assert cascade == binary
        assert_no_fallback()

        assert Cascade.stats() |> Map.has_key?({device, :argsort, :native}),
               inspect(Cascade.stats() |> Map.keys())
      end
    end

    test "window_scatter_max and window_scatter_min run natively (valid padding as Nx.BinaryBackend)" do
      Cascade.put_fallback_policy(:error)

      {cascade, binary} =
        on_both(fn ->
          x = Nx.tensor([[1.0, 7.0, 3.0, 3.0], [2.0, 2.0, 5.0, -1.0]])
          src = Nx.tensor([[10.0, 20.0], [30.0, 40.0]])
          i = Nx.tensor([[1, 3, 2], [3, 0, 3]], type: :s32)
          si = Nx.tensor([[5, 6], [7, 8]], type: :s32)

          [
            Nx.window_scatter_max(x, src, 0.0, {1, 2}, strides: [1, 2]),
            Nx.window_scatter_min(x, src, 0.5, {1, 2}, strides: [1, 2]),
            Nx.window_scatter_max(i, si, 0, {1, 2}),
            Nx.window_scatter_min(i, Nx.tensor([[1.5]]), 0, {2, 3}, strides: [1, 1])
          ]
          |> Enum.map(&{Nx.type(&1), Nx.shape(&1), Nx.to_binary(&1)})
        end)

      assert cascade == binary
      assert_no_fallback()
    end

    # Nx.Random's threefry iterates over a constant of its defn (a Nx.BinaryBackend tensor),
    # sliced with a Cascade index: the slice must land on the device of the default backend,
    # not on Cascade's default device, or the next op meets two devices
    test "foreign tensors join the device of the call or of Nx's default backend" do
      Cascade.put_fallback_policy(:error)
      previous = Cascade.Device.default()
      other = if Enum.any?(Cascade.devices(), &(&1.device == :blas and &1.available)), do: :blas

      try do
        if other, do: Cascade.put_default_device(other)
        Nx.default_backend({Cascade.Backend, device: :cpu})
        {x, _key} = Nx.Random.normal(Nx.Random.key(7), shape: {4})
        assert x.data.device == :cpu
        binary = Nx.tensor([1.0, 2.0], backend: Nx.BinaryBackend)
        assert Nx.add(Nx.tensor([1.0, 1.0]), binary).data.device == :cpu
      after
        Cascade.put_default_device(previous)
        Nx.default_backend(Cascade.Backend)
      end

      assert_no_fallback()
    end

    test "Nx.Random runs natively and gives Nx.BinaryBackend's bits" do
      Cascade.put_fallback_policy(:error)

      {cascade, binary} =
        on_both(fn ->
          key = Nx.Random.key(1701)
          [k1, k2] = key |> Nx.Random.split() |> Nx.to_batched(1) |> Enum.map(&Nx.squeeze/1)

          {u32, _} = Nx.Random.uniform(k1, shape: {64})
          {u64, _} = Nx.Random.uniform(k1, -2.0, 3.0, shape: {4, 8}, type: :f64)
          {u16, _} = Nx.Random.uniform(k2, shape: {16}, type: :bf16)
          {n32, _} = Nx.Random.normal(k2, shape: {64})
          {n64, _} = Nx.Random.normal(k1, 1.0, 2.5, shape: {32}, type: :f64)
          {i, _} = Nx.Random.randint(k2, -5, 9, shape: {32}, type: :s32)

          Enum.map([key, Nx.Random.split(key, parts: 3), u32, u64, u16, n32, n64, i], fn t ->
            {Nx.type(t), Nx.to_binary(t)}
          end)
        end)

      assert cascade == binary
      assert_no_fallback()
    end

    test "the math, bit and truth callbacks give Nx.BinaryBackend's results without a fallback" do
      floats = [-0.75, -0.0, 0.0, 0.3, 0.9, 1.0, 2.5, 27.0]
      ints = [-(2 ** 31), -7, -1, 0, 1, 5, 2 ** 31 - 1]
      shifts = [31, 1, 40, 0, 3, 2, 1]

      unary =
        [:erfc, :erf_inv, :tan, :asin, :acos, :atan, :sinh, :cosh, :asinh, :acosh, :atanh] ++
          [:cbrt]

      # (inside each function's domain: Nx.BinaryBackend raises outside some of them)
      domain = fn
        op when op in [:asin, :acos, :atanh, :erf_inv] -> Enum.filter(floats, &(abs(&1) < 1))
        :acosh -> Enum.filter(floats, &(&1 >= 1))
        _ -> floats
      end

      for op <- unary, type <- [:f32, :f64] do
        t = Nx.tensor(domain.(op), type: type)
        got = apply(Nx, op, [t]) |> Nx.to_flat_list()
        want = apply(Nx, op, [Nx.backend_copy(t, Nx.BinaryBackend)]) |> Nx.to_flat_list()

        for {g, w} <- Enum.zip(got, want) do
          assert g == w or (is_float(g) and is_float(w) and abs(g - w) <= 1.0e-6 * abs(w)),
                 "#{op} #{type}: #{inspect(got)} vs #{inspect(want)}"
        end
      end

      for type <- [:u8, :s32, :s64] do
        a = Nx.tensor(if(type == :u8, do: [0, 1, 7, 200, 255, 128, 3], else: ints), type: type)
        b = Nx.tensor(if(type == :u8, do: [7, 1, 9, 0, 3, 2, 1], else: shifts), type: type)
        [ha, hb] = Enum.map([a, b], &Nx.backend_copy(&1, Nx.BinaryBackend))

        for op <- [:bitwise_and, :bitwise_or, :bitwise_xor, :left_shift, :right_shift] do
          assert apply(Nx, op, [a, b]) |> Nx.to_flat_list() ==
                   apply(Nx, op, [ha, hb]) |> Nx.to_flat_list(),
                 "#{op} #{type}"
        end

        for op <- [:bitwise_not, :population_count, :count_leading_zeros] do
          assert apply(Nx, op, [a]) |> Nx.to_flat_list() ==
                   apply(Nx, op, [ha]) |> Nx.to_flat_list(),
                 "#{op} #{type}"
        end

        divisor = Nx.add(b, 1)

        assert Nx.quotient(a, divisor) |> Nx.to_flat_list() ==
                 Nx.quotient(ha, Nx.backend_copy(divisor, Nx.BinaryBackend)) |> Nx.to_flat_list()
      end

      t = Nx.tensor([1.0, :nan, :infinity, :neg_infinity])
      assert Nx.is_nan(t) |> Nx.to_flat_list() == [0, 1, 0, 0]
      assert Nx.is_infinity(t) |> Nx.to_flat_list() == [0, 0, 1, 1]
      assert Nx.is_nan(Nx.tensor([1, 2])) |> Nx.to_flat_list() == [0, 0]
      refute Enum.any?(Cascade.stats(), &match?({{_, _, :binary_fallback}, _}, &1))
    end

    test "quotient by zero and a negative shift raise as Nx does (on Nx.BinaryBackend)" do
      Cascade.put_fallback_policy(:allow)
      assert_raise ArithmeticError, fn -> Nx.quotient(Nx.tensor([1, 2]), Nx.tensor([1, 0])) end

      assert_raise ArgumentError, ~r/cannot left shift by -1/, fn ->
        Nx.left_shift(Nx.tensor([1, 2]), Nx.tensor([1, -1]))
      end

      assert_raise ArgumentError, ~r/cannot right shift by -2/, fn ->
        Nx.right_shift(Nx.tensor([1, 2]), -2)
      end
    end

    test "work on the test device, where the C dispatcher negotiates" do
      Cascade.put_fallback_policy(:allow)
      t = Nx.tensor([[1.0, -2.0, 3.0]], backend: {Cascade.Backend, device: :test})
      assert t |> Nx.abs() |> Nx.sum() |> Nx.to_number() == 6.0
      assert %{calls: 1} = Cascade.stats()[{:test, :abs, :native}]
      # erf is not native on the test driver: the C dispatcher moves it to the cpu
      assert t |> Nx.erf() |> Nx.shape() == {1, 3}
      assert %{calls: 1} = Cascade.stats()[{:test, :erf, :cpu_fallback}]
    end
  end
end
