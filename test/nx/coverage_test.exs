defmodule Cascade.NxCoverageTest do
  # Nx's functions over every real Nx type on Cascade.Backend: each Nx.Backend callback's calls
  # (counted with call_count tracing) and how many fell back to Nx.BinaryBackend, and the Cascade
  # ops by route (native, decomposed). The callbacks Cascade runs
  # natively must never fall back (as_type of floats beyond an integer type's range, which
  # Cascade.Backend leaves to Nx.BinaryBackend on purpose -- Nx wraps them around the range --
  # and the callbacks still there -- complex numbers, fft, map/reduce with functions -- are not
  # driven here). The complex types c64 and c128 run the
  # callbacks Nx defines on complex numbers, fft and ifft among them. Needs Nx (tagged :nx).
  use ExUnit.Case, async: false

  @moduletag :nx

  # every real Nx type: Cascade has them all (the complex ones have a test of their own below)
  @types Cascade.Type.names()
         |> Enum.map(&Cascade.Type.to_tuple/1)
         |> Enum.reject(&match?({:c, _}, &1))

  setup do
    Cascade.reset_stats()
    Nx.default_backend(Cascade.Backend)
    Cascade.put_fallback_policy(:allow)
    on_exit(fn -> Cascade.put_fallback_policy(:warn) end)
    :ok
  end

  defp calls(type) do
    float = elem(type, 0) in [:f, :bf]
    x = Nx.iota({2, 3, 4}, type: type)
    y = Nx.add(Nx.remainder(x, 5), 1)
    m = Nx.iota({3, 3}, type: type)
    idx = Nx.tensor([[0, 1, 2], [1, 0, 3]])

    common = [
      fn -> Nx.add(x, y) end,
      fn -> Nx.subtract(x, y) end,
      fn -> Nx.multiply(x, y) end,
      fn -> Nx.divide(x, y) end,
      fn -> Nx.pow(y, 2) end,
      fn -> Nx.max(x, y) end,
      fn -> Nx.min(x, y) end,
      fn -> Nx.remainder(x, y) end,
      fn -> Nx.atan2(x, y) end,
      fn -> Nx.equal(x, y) end,
      fn -> Nx.less(x, y) end,
      fn -> Nx.greater_equal(x, y) end,
      fn -> Nx.logical_and(x, y) end,
      fn -> Nx.logical_not(x) end,
      fn -> Nx.select(Nx.greater(x, 3), x, y) end,
      fn -> Nx.clip(x, 1, 5) end,
      fn -> Nx.negate(x) end,
      fn -> Nx.abs(x) end,
      fn -> Nx.sign(x) end,
      fn -> Nx.exp(x) end,
      fn -> Nx.log(y) end,
      fn -> Nx.sqrt(y) end,
      fn -> Nx.tanh(x) end,
      fn -> Nx.sigmoid(x) end,
      fn -> Nx.erf_inv(Nx.divide(x, 30)) end,
      fn -> Nx.cbrt(x) end,
      fn -> Nx.erfc(x) end,
      fn -> Nx.tan(x) end,
      fn -> Nx.asin(Nx.divide(x, 30)) end,
      fn -> Nx.acos(Nx.divide(x, 30)) end,
      fn -> Nx.atan(x) end,
      fn -> Nx.sinh(x) end,
      fn -> Nx.cosh(x) end,
      fn -> Nx.asinh(x) end,
      fn -> Nx.acosh(y) end,
      fn -> Nx.atanh(Nx.divide(x, 30)) end,
      fn -> Nx.cumulative_sum(x, axis: 1) end,
      fn -> Nx.cumulative_product(y, axis: 2) end,
      fn -> Nx.cumulative_min(x, axis: 0, reverse: true) end,
      fn -> Nx.cumulative_max(x, axis: 2) end,
      fn -> Nx.is_nan(x) end,
      fn -> Nx.is_infinity(x) end,
      fn -> Nx.sum(x, axes: [1]) end,
      fn -> Nx.product(y, axes: [2]) end,
      fn -> Nx.reduce_max(x) end,
      fn -> Nx.reduce_min(x, axes: [0]) end,
      fn -> Nx.all(x) end,
      fn -> Nx.argmax(x, axis: 1) end,
      fn -> Nx.argmin(x) end,
      fn -> Nx.reshape(x, {6, 4}) end,
      fn -> Nx.transpose(x) end,
      fn -> Nx.slice(x, [0, 1, 1], [2, 2, 2]) end,
      fn -> Nx.put_slice(x, [0, 0, 0], Nx.slice(x, [1, 1, 1], [1, 2, 2])) end,
      fn -> Nx.pad(x, 0, [{1, 0, 0}, {0, 1, 1}, {0, 0, 0}]) end,
      fn -> Nx.reverse(x, axes: [2]) end,
      fn -> Nx.concatenate([x, y], axis: 1) end,
      fn -> Nx.take(x, Nx.tensor([1, 0]), axis: 0) end,
      fn -> Nx.gather(x, Nx.tensor([[0, 1, 2], [1, 2, 3]])) end,
      fn -> Nx.take_along_axis(x, Nx.argsort(x, axis: 2), axis: 2) end,
      fn -> Nx.sort(x, axis: 1, direction: :desc) end,
      fn -> Nx.argsort(x, axis: 2) end,
      fn -> Nx.indexed_add(x, idx, Nx.tensor([1, 2], type: type)) end,
      fn -> Nx.indexed_put(x, idx, Nx.tensor([1, 2], type: type)) end,
      fn -> Nx.dot(m, m) end,
      fn -> Nx.window_sum(x, {1, 2, 2}) end,
      fn -> Nx.window_max(x, {1, 2, 2}, padding: :same) end,
      fn -> Nx.window_min(x, {2, 1, 2}, strides: [1, 1, 2]) end,
      fn -> Nx.window_product(y, {1, 1, 2}) end,
      fn ->
        Nx.window_scatter_max(x, Nx.iota({2, 2, 2}, type: type), 0, {1, 2, 2}, strides: [1, 1, 2])
      end,
      fn ->
        Nx.window_scatter_min(x, Nx.iota({2, 2, 2}, type: type), 0, {1, 2, 2}, strides: [1, 1, 2])
      end,
      fn -> Nx.conv(Nx.reshape(x, {2, 3, 2, 2}), Nx.iota({1, 3, 1, 1}, type: type)) end,
      fn ->
        Nx.conv(Nx.reshape(x, {2, 2, 3, 2, 1}), Nx.iota({2, 2, 2, 1, 1}, type: type),
          input_dilation: [1, 2, 1],
          batch_group_size: 2
        )
      end,
      # a lower triangle with a non-zero diagonal; y's values are 1..5
      fn ->
        Nx.LinAlg.triangular_solve(
          Nx.add(Nx.eye(3, type: type), Nx.tril(m)),
          Nx.iota({3, 2}, type: type)
        )
      end,
      fn ->
        Nx.LinAlg.triangular_solve(
          Nx.add(Nx.eye(3, type: type), Nx.triu(m)),
          Nx.iota({3}, type: type),
          lower: false,
          left_side: false
        )
      end,
      fn -> m |> Nx.LinAlg.lu() |> elem(2) end,
      fn -> m |> Nx.add(Nx.transpose(m)) |> Nx.LinAlg.eigh() |> elem(1) end,
      fn -> m |> Nx.LinAlg.svd() |> elem(1) end,
      fn -> m |> Nx.LinAlg.qr() |> elem(1) end,
      fn ->
        Nx.LinAlg.cholesky(Nx.add(Nx.dot(m, Nx.transpose(m)), Nx.multiply(Nx.eye(3), 10)))
      end,
      fn -> m |> Nx.LinAlg.svd() |> elem(1) end,
      fn -> Nx.LinAlg.solve(Nx.add(m, Nx.multiply(Nx.eye(3), 20)), Nx.iota({3})) end,
      fn -> Nx.LinAlg.determinant(m) end,
      fn -> Nx.iota({3}, type: type) end,
      fn -> Nx.eye(3, type: type) end,
      fn -> Nx.broadcast(Nx.tensor(1, type: type), {2, 2}) end,
      fn -> Nx.as_type(x, :f32) end
    ]

    integer =
      if float,
        do: [],
        else: [
          fn -> Nx.bitwise_and(x, y) end,
          fn -> Nx.bitwise_or(x, y) end,
          fn -> Nx.bitwise_xor(x, y) end,
          fn -> Nx.bitwise_not(x) end,
          fn -> Nx.left_shift(x, Nx.remainder(y, 3)) end,
          fn -> Nx.right_shift(x, Nx.remainder(y, 3)) end,
          fn -> Nx.population_count(x) end,
          fn -> Nx.count_leading_zeros(x) end,
          fn -> Nx.quotient(x, y) end
        ]

    common ++ integer
  end

  defp random do
    key = Nx.Random.key(7)
    {u, key} = Nx.Random.uniform(key, shape: {4})
    {n, key} = Nx.Random.normal(key, shape: {4})
    {i, _} = Nx.Random.randint(key, 0, 10, shape: {4})
    [u, n, i, Nx.Random.split(key)]
  end

  # The Nx.Backend callbacks the issue "Nx, natively" lists for real types (complex numbers and
  # fft wait for c64/c128): each must be called here, and never fall back. qr, cholesky, svd,
  # solve, determinant and the cumulative ops are Nx's defn implementations over the others.
  @listed [:bitwise_and, :bitwise_or, :bitwise_xor, :bitwise_not, :left_shift, :right_shift] ++
            [:population_count, :count_leading_zeros, :quotient, :is_nan, :is_infinity] ++
            [:cbrt, :erfc, :erf_inv, :tan, :asin, :acos, :atan, :sinh, :cosh, :asinh] ++
            [:acosh, :atanh, :sort, :argsort, :indexed_add, :indexed_put, :conv] ++
            [:window_sum, :window_product, :window_max, :window_min] ++
            [:window_scatter_max, :window_scatter_min, :triangular_solve, :lu, :eigh]

  # Nx's functions on complex numbers, over c64 and c128
  defp complex_calls(type) do
    z = Nx.complex(Nx.iota({2, 4}, type: :f32), Nx.iota({2, 4}, type: :f32) |> Nx.negate())
    z = Nx.as_type(z, type)
    w = Nx.add(z, Nx.tensor(Complex.new(1.5, 0.25), type: type))

    [
      fn -> Nx.add(z, w) end,
      fn -> Nx.subtract(z, w) end,
      fn -> Nx.multiply(z, w) end,
      fn -> Nx.divide(z, w) end,
      fn -> Nx.pow(w, 2) end,
      fn -> Nx.equal(z, w) end,
      fn -> Nx.not_equal(z, w) end,
      fn -> Nx.negate(z) end,
      fn -> Nx.abs(z) end,
      fn -> Nx.exp(z) end,
      fn -> Nx.log(w) end,
      fn -> Nx.sqrt(w) end,
      fn -> Nx.sin(z) end,
      fn -> Nx.cos(z) end,
      fn -> Nx.tanh(z) end,
      fn -> Nx.is_nan(z) end,
      fn -> Nx.is_infinity(z) end,
      fn -> Nx.conjugate(z) end,
      fn -> Nx.real(z) end,
      fn -> Nx.imag(z) end,
      fn -> Nx.phase(z) end,
      fn -> Nx.sum(z, axes: [1]) end,
      fn -> Nx.product(z) end,
      fn -> Nx.dot(z, Nx.transpose(w)) end,
      fn -> Nx.transpose(z) end,
      fn -> Nx.reshape(z, {4, 2}) end,
      fn -> Nx.slice(z, [0, 1], [2, 2]) end,
      fn -> Nx.concatenate([z, w]) end,
      fn -> Nx.pad(z, Nx.tensor(0, type: type), [{1, 0, 0}, {0, 1, 1}]) end,
      fn -> Nx.reverse(z) end,
      fn -> Nx.take(z, Nx.tensor([1, 0])) end,
      fn -> Nx.select(Nx.tensor([[1, 0, 0, 1], [0, 1, 1, 0]], type: :u8), z, w) end,
      fn -> Nx.fft(z) end,
      fn -> Nx.ifft(z, length: 6) end,
      fn -> Nx.fft(z, axis: 0) end,
      fn -> Nx.fft(Nx.iota({3, 5}, type: :f32)) end
    ]
  end

  @listed_complex [:conjugate, :real, :imag, :fft, :ifft]

  test "Nx's functions on complex numbers run natively on c64 and c128" do
    :erlang.trace_pattern({Cascade.Backend, :_, :_}, true, [:call_count])

    try do
      for type <- [{:c, 64}, {:c, 128}], call <- complex_calls(type), do: Nx.to_binary(call.())
    after
      :erlang.trace_pattern({Cascade.Backend, :_, :_}, :pause, [:call_count])
    end

    called =
      for name <- @listed_complex,
          arity <- [2, 3],
          {:call_count, n} = :erlang.trace_info({Cascade.Backend, name, arity}, :call_count),
          is_integer(n) and n > 0,
          uniq: true,
          do: name

    :erlang.trace_pattern({Cascade.Backend, :_, :_}, false, [:call_count])

    fallbacks =
      for {{_, callback, :binary_fallback}, %{calls: n}} <- Cascade.stats(), do: {callback, n}

    assert @listed_complex -- called == []
    assert fallbacks == []

    # the values, against Nx.BinaryBackend
    for type <- [{:c, 64}, {:c, 128}], call <- complex_calls(type) do
      got = call.()
      want = Nx.with_default_backend(Nx.BinaryBackend, call)
      assert got.type == want.type and got.shape == want.shape
      tol = if type == {:c, 64}, do: 1.0e-4, else: 1.0e-10

      assert Nx.all_close(Nx.backend_copy(got, Nx.BinaryBackend), want, atol: tol, rtol: tol)
             |> Nx.to_number() == 1,
             "#{inspect(got)} vs #{inspect(want)}"
    end
  end

  test "every Nx function Cascade runs natively stays native over every real type" do
    :erlang.trace_pattern({Cascade.Backend, :_, :_}, true, [:call_count])

    try do
      for type <- @types, call <- calls(type), do: Nx.to_binary(call.())
      random()
    after
      :erlang.trace_pattern({Cascade.Backend, :_, :_}, :pause, [:call_count])
    end

    behaviour = Nx.Backend.behaviour_info(:callbacks)

    callbacks =
      for {name, arity} <- Cascade.Backend.__info__(:functions),
          {name, arity} in behaviour,
          {:call_count, n} = :erlang.trace_info({Cascade.Backend, name, arity}, :call_count),
          is_integer(n) and n > 0,
          do: {name, n}

    :erlang.trace_pattern({Cascade.Backend, :_, :_}, false, [:call_count])
    stats = Cascade.stats()

    fallbacks =
      for {{_, callback, :binary_fallback}, %{calls: n}} <- stats,
          reduce: %{},
          do: (acc -> Map.update(acc, callback, n, &(&1 + n)))

    routes =
      Enum.reduce(stats, %{}, fn {{_, _, route}, %{calls: n}}, acc ->
        Map.update(acc, route, n, &(&1 + n))
      end)

    table =
      callbacks
      |> Enum.sort()
      |> Enum.map_join(", ", fn {name, n} ->
        "#{name} #{n}" <> if(f = fallbacks[name], do: " (#{f} fell back)", else: "")
      end)

    IO.puts(
      "\n[nx coverage] #{length(@types)} types, #{length(callbacks)} Nx.Backend callbacks " <>
        "called #{Enum.sum(Enum.map(callbacks, &elem(&1, 1)))} times; Cascade ops by route " <>
        "#{inspect(routes)}\n[nx coverage] per callback: #{table}"
    )

    missing = @listed -- Enum.map(callbacks, &elem(&1, 0))
    assert missing == [], "listed callbacks never called: #{inspect(missing)}"
    assert fallbacks == %{}
  end
end
