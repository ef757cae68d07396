defmodule Cascade.RankTest do
  # Tensors of any rank up to 16 (CX_MAX_RANK): a rank-12 tensor through every op family on
  # the portable cpu driver and on blas, the two agreeing (the C differential suite runs the
  # same shapes on every driver against the cpu); rank 17 is refused with an ArgumentError.
  use ExUnit.Case, async: true

  @shape {2, 1, 3, 1, 1, 2, 1, 1, 3, 1, 2, 1}
  @n 72

  defp x(device), do: Cascade.reshape(Cascade.iota({@n}, type: :f32, device: device), @shape)

  defp close?(a, b) do
    a = Cascade.to_binary(a) |> floats()
    b = Cascade.to_binary(b) |> floats()

    length(a) == length(b) and
      Enum.all?(Enum.zip(a, b), fn {p, q} -> abs(p - q) <= 1.0e-5 * (1 + abs(q)) end)
  end

  defp floats(bin), do: for(<<v::float-32-native <- bin>>, do: v)

  defp families(x) do
    y = Cascade.add(Cascade.multiply(x, 0.5), 1.0)

    [
      elementwise: Cascade.exp(Cascade.divide(y, 100.0)),
      compare_select: Cascade.select(Cascade.greater(x, 30.0), x, y),
      sum: Cascade.sum(x, axes: [0, 5, 10]),
      max: Cascade.reduce_max(x, axes: [2, 8]),
      argmax: Cascade.argmax(x, axis: 8) |> Cascade.as_type(:f32),
      transpose: Cascade.transpose(x, axes: Enum.to_list(11..0//-1)),
      reshape: Cascade.reshape(x, {6, 12}),
      slice: Cascade.slice(x, List.duplicate(0, 12), [1, 1, 2, 1, 1, 2, 1, 1, 3, 1, 1, 1]),
      concatenate: Cascade.concatenate([x, y], axis: 8),
      broadcast:
        Cascade.broadcast(Cascade.tensor([1.0, 2.0], device: x.device), @shape, axes: [10]),
      pad: Cascade.pad(x, 0.0, List.duplicate({0, 0, 0}, 11) ++ [{1, 1, 0}]),
      reverse: Cascade.reverse(x, axes: [0, 8]),
      cumulative: Cascade.cumulative_sum(x, axis: 2),
      sort: Cascade.sort(Cascade.negate(x), axis: 8),
      window: Cascade.window_sum(x, Tuple.duplicate(1, 10) |> Tuple.append(2) |> Tuple.append(1)),
      dot: Cascade.dot(x, [11], [], Cascade.ones({1, 4}, type: :f32, device: x.device), [0], [])
    ]
  end

  test "a rank-12 tensor through every op family, on cpu and on blas alike" do
    on_cpu = families(x(:cpu))
    on_blas = families(x(:blas))

    for {{name, c}, {name, b}} <- Enum.zip(on_cpu, on_blas) do
      assert c.shape == b.shape,
             "#{name}: #{inspect(c.shape)} on cpu, #{inspect(b.shape)} on blas"

      assert b.device == :blas
      assert close?(c, b), "#{name} differs between cpu and blas"
    end

    assert on_cpu[:transpose].shape ==
             @shape |> Tuple.to_list() |> Enum.reverse() |> List.to_tuple()

    assert Cascade.to_list(Cascade.sum(x(:blas))) == Enum.sum(0..(@n - 1)) * 1.0
  end

  test "rank 16 is the limit: rank 17 is an ArgumentError naming it" do
    assert Cascade.reshape(x(:cpu), Tuple.duplicate(1, 16) |> put_elem(0, @n)).shape ==
             Tuple.duplicate(1, 16) |> put_elem(0, @n)

    assert_raise ArgumentError, ~r/at most 16 dimensions/, fn ->
      Cascade.reshape(x(:cpu), Tuple.duplicate(1, 17) |> put_elem(0, @n))
    end
  end
end
