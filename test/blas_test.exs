# The blas driver (c_src/drivers/blas) as Elixir users see it: listed, its GEMMs counted as
# native, nothing copied between :blas and :cpu, and two processes multiplying at once. Its
# every claim is also checked against the cpu by test/capability_honesty_test.exs.

defmodule CascadeBlasTest do
  use ExUnit.Case, async: false

  @blas Enum.find(Cascade.devices(), &(&1.device == :blas))

  unless @blas && @blas.available do
    IO.puts("blas: skipped, the device is unavailable: #{inspect(@blas && @blas.reason)}")
    @moduletag skip: "the blas device is unavailable"
  end

  setup do
    Cascade.reset_stats()
    :ok
  end

  test "out of memory on blas names blas, the device asked for" do
    huge = {1_048_576, 1_048_576}
    x = Cascade.tensor([1.0], device: :blas)

    for f <- [
          fn -> Cascade.full(0.0, huge, device: :blas) end,
          fn -> Cascade.iota(huge, device: :blas, type: :f32) end,
          fn -> Cascade.broadcast(x, huge) end
        ] do
      error = assert_raise Cascade.Error, f
      assert error.message == "blas: could not allocate 4398046511104 bytes"
      assert error.code == :out_of_memory
    end
  end

  # n x m numbers in [-1, 1) from a seed, as a list of rows
  defp matrix(n, m, seed) do
    :rand.seed(:exsss, {seed, 7, 11})
    for _ <- 1..n, do: for(_ <- 1..m, do: :rand.uniform() * 2 - 1)
  end

  defp close?(a, b, tol) do
    Enum.zip(List.flatten(Cascade.to_list(a)), List.flatten(Cascade.to_list(b)))
    |> Enum.all?(fn {x, y} -> abs(x - y) <= tol * (1 + abs(y)) end)
  end

  test "argsort's first k on :blas (rows split across its threads) equals the cpu's" do
    # 64 rows of 400: above the size blas splits a sort's rows at; ties and NaNs
    values =
      for i <- 0..(64 * 400 - 1),
          do: if(rem(i, 37) == 0, do: :nan, else: rem(i * 7919, 13) * 1.0)

    for k <- [1, 7, 256, 257, 400], direction <- [:asc, :desc], axis <- [1, 0] do
      n = if axis == 1, do: 400, else: 64
      k = min(k, n)

      [blas, cpu] =
        for device <- [:blas, :cpu] do
          values
          |> Cascade.tensor(type: :f32, device: device)
          |> Cascade.reshape({64, 400})
          |> Cascade.argsort(axis: axis, direction: direction, k: k)
          |> Cascade.to_binary()
        end

      assert blas == cpu, "k #{k} #{direction} axis #{axis}"
    end
  end

  test "the device is listed: host memory, a cpu, OpenBLAS and its threads named" do
    assert %{available: true, driver: :blas, kind: "cpu", host_memory: true} = @blas
    assert @blas.name =~ "OpenBLAS"
    assert @blas.detail =~ ~r/\d+ threads; OpenBLAS: dot, dense; /
    assert Cascade.libraries(:blas)[{:dot, :f32}] == "openblas"
    assert Cascade.libraries(:blas)[{:exp, :f32}] in ["avx512", "avx2", "portable"]
  end

  test "dot on :blas runs natively there and agrees with the cpu" do
    a = matrix(37, 53, 1)
    b = matrix(53, 29, 2)
    got = Cascade.dot(Cascade.tensor(a, device: :blas), Cascade.tensor(b, device: :blas))
    want = Cascade.dot(Cascade.tensor(a), Cascade.tensor(b))

    assert got.device == :blas
    assert got.shape == {37, 29}
    assert close?(got, want, 1.0e-5)

    assert Cascade.stats()[{:blas, :dot, :native}] ==
             %{calls: 1, bytes: 0, libraries: %{"openblas" => 1}}

    assert %{route: :native, device: :blas} =
             Cascade.explain(:dot, [
               Cascade.tensor(a, device: :blas),
               Cascade.tensor(b, device: :blas)
             ])
  end

  test "dense, conv2d and its gradients are native on :blas (OpenBLAS, oneDNN); no bytes move" do
    x = Cascade.tensor(matrix(8, 16, 3), device: :blas)
    w = Cascade.tensor(matrix(16, 4, 4), device: :blas)
    bias = Cascade.tensor(hd(matrix(1, 4, 5)), device: :blas)
    y = Cascade.dense(x, w, bias)

    want =
      Cascade.dense(
        Cascade.transfer(x, :cpu),
        Cascade.transfer(w, :cpu),
        Cascade.transfer(bias, :cpu)
      )

    assert close?(y, want, 1.0e-5)

    img = Cascade.reshape(Cascade.iota({2 * 3 * 9 * 9}, type: :f32, device: :blas), {2, 3, 9, 9})
    kern = Cascade.ones({4, 3, 3, 3}, device: :blas)
    conv = Cascade.conv2d(img, kern, strides: [2, 2], padding: :same)

    cpu_conv =
      Cascade.conv2d(Cascade.transfer(img, :cpu), Cascade.transfer(kern, :cpu),
        strides: [2, 2],
        padding: :same
      )

    assert conv.device == :blas
    assert close?(conv, cpu_conv, 1.0e-6)
    _ = Cascade.softmax(y)

    stats = Cascade.stats()
    assert stats[{:blas, :dense, :native}].calls == 1
    assert stats[{:blas, :conv2d, :native}].calls == 1

    # the kernel gradient runs on oneDNN's backward-weights primitive (one group); with two
    # groups it decomposes into an im2col and a dot, which runs on OpenBLAS
    gk =
      Cascade.conv2d_grad_kernel(img, conv, Cascade.shape(kern), strides: [2, 2], padding: :same)

    cpu_gk =
      Cascade.conv2d_grad_kernel(Cascade.transfer(img, :cpu), cpu_conv, Cascade.shape(kern),
        strides: [2, 2],
        padding: :same
      )

    assert close?(gk, cpu_gk, 1.0e-5)
    stats = Cascade.stats()

    assert stats[{:blas, :conv2d_grad_kernel, :native}] ==
             %{calls: 1, bytes: 0, libraries: %{"onednn" => 1}}

    img2 = Cascade.reshape(Cascade.iota({2 * 4 * 6 * 6}, type: :f32, device: :blas), {2, 4, 6, 6})
    gy2 = Cascade.ones({2, 4, 4, 4}, device: :blas)
    gk2 = Cascade.conv2d_grad_kernel(img2, gy2, {4, 2, 3, 3}, feature_group_size: 2)

    cpu_gk2 =
      Cascade.conv2d_grad_kernel(
        Cascade.transfer(img2, :cpu),
        Cascade.transfer(gy2, :cpu),
        {4, 2, 3, 3},
        feature_group_size: 2
      )

    assert close?(gk2, cpu_gk2, 1.0e-6)
    stats = Cascade.stats()
    assert stats[{:blas, :conv2d_grad_kernel, :decomposed}].calls == 1
    assert stats[{:blas, :dot, :native}].calls >= 1

    on_blas = for {{:blas, _, _} = key, s} <- stats, do: {key, s}
    assert on_blas != []
    assert for({{_, _, :cpu_fallback} = key, _} <- on_blas, do: key) == []
    assert for({key, %{bytes: b}} <- on_blas, b != 0, do: key) == []
  end

  test "reproducible: conv2d on oneDNN from the first call, the same bits every call" do
    onednn? = @blas.detail =~ "oneDNN" and System.get_env("CASCADE_BLAS_CONV") in [nil, "onednn"]
    refute Cascade.reproducible?()
    # a shape no other test runs: timed, its first call would run im2col too
    img =
      Cascade.tensor(Enum.chunk_every(List.flatten(matrix(3 * 5, 11 * 7, 6)), 7), device: :blas)

    img = Cascade.reshape(img, {3, 5, 11, 7})
    kern = Cascade.reshape(Cascade.tensor(matrix(6, 5 * 9, 7), device: :blas), {6, 5, 3, 3})

    try do
      assert Cascade.put_reproducible(true) == :ok
      assert Cascade.reproducible?()
      Cascade.reset_stats()
      first = Cascade.to_binary(Cascade.conv2d(img, kern, padding: :same))

      for _ <- 1..11,
          do: assert(Cascade.to_binary(Cascade.conv2d(img, kern, padding: :same)) == first)

      %{calls: 12, libraries: libraries} = Cascade.stats()[{:blas, :conv2d, :native}]
      assert libraries == if(onednn?, do: %{"onednn" => 12}, else: %{"openblas" => 12})
    after
      Cascade.put_reproducible(false)
    end

    refute Cascade.reproducible?()

    assert_raise ArgumentError, ~r/expected true or false, got: :yes/, fn ->
      Cascade.put_reproducible(:yes)
    end
  end

  test "two processes multiplying at once on :blas both get the right products" do
    jobs =
      for k <- 1..2 do
        a = matrix(96 + 32 * k, 96 + 32 * k, 10 + k)
        b = matrix(96 + 32 * k, 96 + 32 * k, 20 + k)
        want = Cascade.dot(Cascade.tensor(a), Cascade.tensor(b))
        {Cascade.tensor(a, device: :blas), Cascade.tensor(b, device: :blas), want}
      end

    results =
      jobs
      |> Enum.map(fn {a, b, want} ->
        Task.async(fn -> for _ <- 1..20, do: close?(Cascade.dot(a, b), want, 1.0e-5) end)
      end)
      |> Task.await_many(60_000)

    assert Enum.all?(List.flatten(results))
    assert length(List.flatten(results)) == 40
    assert Cascade.stats()[{:blas, :dot, :native}].calls == 40
  end
end
