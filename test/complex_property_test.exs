# Property tests of the complex types (c64, c128) and of the ops made for them: real, imag,
# conjugate, fft and ifft, and the complex arithmetic, against references computed here in f64
# (Erlang floats), on every host device.
defmodule Cascade.ComplexPropertyTest do
  use Cascade.PropertyCase

  @complex [:c64, :c128]

  defp value, do: int_between(-64, 64) * 0.125

  defp complex_list(n), do: for(_ <- 1..n//1, do: {value(), value()})

  defp eps(:c64), do: :math.pow(2, -23)
  defp eps(:c128), do: :math.pow(2, -52)

  defp round_to(:c64, x), do: <<x::float-32>> |> then(fn <<f::float-32>> -> f end)
  defp round_to(:c128, x), do: x

  defp close?({a, b}, {c, d}, tol), do: abs(a - c) <= tol and abs(b - d) <= tol

  defp cmul({a, b}, {c, d}), do: {a * c - b * d, a * d + b * c}

  defp cdiv({a, b}, {c, d}) do
    m = c * c + d * d
    {(a * c + b * d) / m, (b * c - a * d) / m}
  end

  defp cexp({a, b}), do: {:math.exp(a) * :math.cos(b), :math.exp(a) * :math.sin(b)}

  # the DFT of one row, directly, in f64
  defp dft(row, inverse) do
    n = length(row)
    sign = if inverse, do: 1, else: -1
    indexed = Enum.with_index(row)

    for k <- 0..(n - 1) do
      {re, im} =
        Enum.reduce(indexed, {0.0, 0.0}, fn {x, j}, {sr, si} ->
          angle = sign * 2 * :math.pi() * rem(j * k, n) / n
          {pr, pi} = cmul(x, {:math.cos(angle), :math.sin(angle)})
          {sr + pr, si + pi}
        end)

      if inverse, do: {re / n, im / n}, else: {re, im}
    end
  end

  property [:real, :imag, :conjugate], "real, imag and conjugate: the parts, exactly" do
    for type <- @complex, device <- host_devices(), _ <- 1..5 do
      xs = complex_list(int_between(0, 20))
      t = Cascade.tensor(xs, type: type, device: device)
      assert Cascade.to_list(Cascade.real(t)) == Enum.map(xs, &round_to(type, elem(&1, 0)))
      assert Cascade.to_list(Cascade.imag(t)) == Enum.map(xs, &round_to(type, elem(&1, 1)))

      assert Cascade.to_list(Cascade.conjugate(t)) ==
               Enum.map(xs, fn {a, b} -> {round_to(type, a), round_to(type, -b)} end)
    end

    # real tensors read as complex: f64 gives c128, the rest c64
    t = Cascade.tensor([1.5, -2.0], type: :f64)
    assert Cascade.type(Cascade.conjugate(t)) == {:c, 128}
    assert Cascade.to_list(Cascade.imag(Cascade.tensor([3, 4]))) == [0.0, 0.0]
  end

  property [:fft, :ifft], "fft and ifft: the DFT of each row, padded or cut to length" do
    for type <- @complex ++ [:f32, :f64, :s32], device <- host_devices(), _ <- 1..6 do
      rows = int_between(1, 3)
      n = Enum.random([1, 2, 3, 5, 8, 12, 16, 17, int_between(1, 40)])
      length = Enum.random([nil, n, int_between(1, 2 * n + 1)])

      xs =
        if type in @complex,
          do: for(_ <- 1..rows, do: complex_list(n)),
          else: for(_ <- 1..rows, do: for(_ <- 1..n, do: int_between(-8, 8)))

      t = Cascade.tensor(xs, type: type, device: device)
      out_type = if type in [:f64, :c128], do: :c128, else: :c64
      opts = if length, do: [length: length], else: []
      m = length || n

      for {op, inverse} <- [fft: false, ifft: true] do
        got = apply(Cascade, op, [t, opts])
        assert Cascade.shape(got) == {rows, m}
        assert Cascade.Type.normalize!(Cascade.type(got)) == out_type

        for {row, got_row} <- Enum.zip(xs, Cascade.to_list(got)) do
          row =
            Enum.map(row, fn
              {a, b} -> {a, b}
              r -> {r * 1.0, 0.0}
            end)

          row = Enum.take(row ++ List.duplicate({0.0, 0.0}, max(m - n, 0)), m)
          want = dft(row, inverse)
          scale = Enum.reduce(row, 1.0, fn {a, b}, acc -> acc + abs(a) + abs(b) end)
          tol = 8 * eps(out_type) * scale

          for {g, w} <- Enum.zip(got_row, want) do
            assert close?(g, w, tol),
                   "#{op} #{inspect(row)} (length #{m}) on #{device}: #{inspect(got_row)}, want #{inspect(want)}"
          end
        end
      end
    end
  end

  property [], "fft: eps zeroes the parts at most eps in magnitude, as Nx.fft/2" do
    t = Cascade.tensor([1.0, 1.0, 1.0], type: :f64)
    clean = Cascade.fft(t, eps: 1.0e-10) |> Cascade.to_list()
    assert clean == [{3.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}]
  end

  property [], "complex arithmetic against f64 references" do
    for type <- @complex, device <- host_devices(), _ <- 1..5 do
      n = int_between(1, 12)
      xs = complex_list(n)
      ys = for _ <- 1..n, do: {value() + 0.5, value() - 0.25}
      x = Cascade.tensor(xs, type: type, device: device)
      y = Cascade.tensor(ys, type: type, device: device)
      tol = fn v -> 4 * eps(type) * max(1.0, abs(elem(v, 0)) + abs(elem(v, 1))) end

      checks = [
        {Cascade.add(x, y), Enum.zip_with(xs, ys, fn {a, b}, {c, d} -> {a + c, b + d} end)},
        {Cascade.multiply(x, y), Enum.zip_with(xs, ys, &cmul/2)},
        {Cascade.divide(x, y), Enum.zip_with(xs, ys, &cdiv/2)},
        {Cascade.exp(Cascade.multiply(x, 0.125)),
         Enum.map(xs, fn {a, b} -> cexp({a * 0.125, b * 0.125}) end)}
      ]

      for {got, want} <- checks, {g, w} <- Enum.zip(Cascade.to_list(got), want) do
        assert close?(g, w, tol.(w)), "#{inspect(g)} vs #{inspect(w)} on #{device}"
      end

      for {g, {a, b}} <- Enum.zip(Cascade.to_list(Cascade.abs(x)), xs),
          do: assert(abs(g - :math.sqrt(a * a + b * b)) <= 2 * eps(type) * max(1.0, abs(g)))

      {sr, si} = Enum.reduce(xs, {0.0, 0.0}, fn {a, b}, {c, d} -> {a + c, b + d} end)
      assert close?(Cascade.to_list(Cascade.sum(x)), {sr, si}, n * eps(type) * 64)

      # dot: a row by a column
      d = Cascade.dot(x, y) |> Cascade.to_list()

      want =
        Enum.zip_with(xs, ys, &cmul/2)
        |> Enum.reduce({0.0, 0.0}, fn {a, b}, {c, e} -> {a + c, b + e} end)

      assert close?(d, want, n * eps(type) * 256)
    end
  end
end
