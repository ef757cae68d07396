# A short tour of Cascade on the cpu device: `script/tour` runs it.

section = fn title -> IO.puts("\n== " <> title) end
show = fn label, value -> IO.puts(String.pad_trailing(label, 44) <> inspect(value)) end

section.("Tensors from binaries, lists and BEAM terms")

t =
  Cascade.from_binary(
    <<1.0::float-32-native, 2.0::float-32-native, 3.0::float-32-native, 4.0::float-32-native>>,
    :f32,
    {2, 2}
  )

u = Cascade.tensor([[1, 2], [3, 4]], type: :f16)
show.("t", t)
show.("u = tensor([[1, 2], [3, 4]], type: :f16)", u)
show.("shape(t), type(u)", {Cascade.shape(t), Cascade.type(u)})
show.("dump(t)", Cascade.dump(t))
show.("load({:f32, <<0, 0, 128, 63>>})", Cascade.load({:f32, <<0, 0, 128, 63>>}))

section.("Ops, with broadcasting and Nx's type promotion")

show.(
  "dot(t, t) |> add(1.0) |> sum(axes: [1], keep_axes: true)",
  t |> Cascade.dot(t) |> Cascade.add(1.0) |> Cascade.sum(axes: [1], keep_axes: true)
)

show.("add(u, 1) stays f16", Cascade.add(u, 1))
show.("add(tensor([1, 2]), 0.5) becomes f32", Cascade.add(Cascade.tensor([1, 2]), 0.5))
show.("exp(tensor([0.0, 1.0]))", Cascade.exp(Cascade.tensor([0.0, 1.0])))
show.("argmax(t, axis: 1)", Cascade.argmax(t, axis: 1))
show.("transpose(iota({2, 3}))", Cascade.transpose(Cascade.iota({2, 3})))

show.(
  "slice(iota({6}), [1], [4], strides: [2])",
  Cascade.slice(Cascade.iota({6}), [1], [4], strides: [2])
)

show.("as_type(tensor([1.7, 300.0]), :u8)", Cascade.as_type(Cascade.tensor([1.7, 300.0]), :u8))
show.("random_normal({4}, key: 42)", Cascade.random_normal({4}, key: 42))

section.("Errors name the expected and the given")

for {label, fun} <- [
      {"add({2, 2}, {3})", fn -> Cascade.add(t, Cascade.zeros({3})) end},
      {"from_binary of 3 bytes as f32 {1}",
       fn -> Cascade.from_binary(<<1, 2, 3>>, :f32, {1}) end},
      {"sum(t, axes: [2])", fn -> Cascade.sum(t, axes: [2]) end}
    ] do
  try do
    fun.()
  rescue
    e in ArgumentError -> show.(label, e.message)
  end
end

section.("Memory")
big = Cascade.zeros({1024, 1024})
show.("after zeros({1024, 1024})", Cascade.memory())
Cascade.free(big)
show.("after free/1", Cascade.memory())
show.("the freed tensor", big)

section.("Large ops run on dirty schedulers; small ones stay on the caller's scheduler")
x = Cascade.random_uniform({1_000_000}, key: 1)
{us, s} = :timer.tc(fn -> Cascade.sum(x) end)
show.("sum of 1M f32 (#{us} µs)", s)

defmodule Tour.Loop do
  # a compiled loop that drops each result, as real code would
  def adds(_a, 0), do: :ok

  def adds(a, n) do
    Cascade.add(a, a)
    adds(a, n - 1)
  end
end

one = Cascade.tensor([1.0])
Tour.Loop.adds(one, 10_000)
{us, _} = :timer.tc(fn -> Tour.Loop.adds(one, 100_000) end)
show.("one-element add, ns per call", div(us * 1000, 100_000))
