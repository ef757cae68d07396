defmodule Cascade.ProgramLoopTest do
  # Cascade.Native.program_loop/5, the loop Cascade.Compiler runs a compiled while with, called
  # directly: right answers, and bad arguments refused with an exception, never a crash.
  use ExUnit.Case, async: true

  alias Cascade.Native

  defp op_id(name), do: Enum.find_value(Cascade.__ops__(), &(&1.name == name && &1.id))
  defp device, do: Cascade.Device.id!(:cpu)

  # state {x f32[2], i s32}: cond i < 5; body {x * 2, i + 1}
  defp programs do
    state = [{:f32, {2}}, {:s32, {}}]
    five = Cascade.tensor(5, type: :s32, device: :cpu)
    one = Cascade.tensor(1, type: :s32, device: :cpu)
    two = Cascade.tensor(2.0, type: :f32, device: :cpu)
    cond = Native.program_new(device(), state, [five.ref], [{op_id(:less), [1, 2], %{}}], [3], [])

    body =
      Native.program_new(
        device(),
        state,
        [one.ref, two.ref],
        [{op_id(:multiply), [0, 3], %{}}, {op_id(:add), [1, 2], %{}}],
        [4, 5],
        []
      )

    {cond, body}
  end

  test "runs the body while the condition holds" do
    {cond, body} = programs()
    x = Cascade.tensor([1.0, -3.0], device: :cpu)
    i = Cascade.tensor(0, type: :s32, device: :cpu)
    [x2, i2] = Native.program_loop(cond, 0, body, [0, 1], [x.ref, i.ref])
    assert Cascade.to_list(%{x | ref: x2}) == [32.0, -96.0]
    assert Cascade.to_list(%{i | ref: i2}) == 5
    # no turn: the state given comes back
    done = Cascade.tensor(9, type: :s32, device: :cpu)
    assert [x.ref, done.ref] == Native.program_loop(cond, 0, body, [0, 1], [x.ref, done.ref])
  end

  test "refuses bad arguments" do
    {cond, body} = programs()
    x = Cascade.tensor([1.0, -3.0], device: :cpu)
    i = Cascade.tensor(0, type: :s32, device: :cpu)
    wrong = Cascade.tensor([1.0, 2.0, 3.0], device: :cpu)

    for args <- [
          [cond, 0, body, [0, 1], [x.ref]],
          [cond, 0, body, [0, 7], [x.ref, i.ref]],
          [cond, 3, body, [0, 1], [x.ref, i.ref]],
          [cond, 0, body, [0, 1], [x.ref, :nope]],
          [:nope, 0, body, [0, 1], [x.ref, i.ref]],
          [cond, 0, body, [0, :a], [x.ref, i.ref]]
        ] do
      assert_raise ArgumentError, fn -> apply(Native, :program_loop, args) end
    end

    # a pick that would overflow its negation
    assert_raise ArgumentError, fn ->
      Native.program_loop(cond, 0, body, [-2_147_483_648, 1], [x.ref, i.ref])
    end

    # a state of the wrong shape, and a predicate of two elements (the state's x, pick -1)
    assert_raise ArgumentError, ~r/input 0/, fn ->
      Native.program_loop(cond, 0, body, [0, 1], [wrong.ref, i.ref])
    end

    assert_raise ArgumentError, ~r/2 elements/, fn ->
      Native.program_loop(cond, -1, body, [0, 1], [x.ref, i.ref])
    end
  end

  test "a freed predicate passed through raises, and does not crash" do
    {cond, body} = programs()
    x = Cascade.tensor([1.0, -3.0], device: :cpu)
    flag = Cascade.tensor(1, type: :s32, device: :cpu)
    Cascade.free(flag)

    # the predicate is the state's second value itself (pick -2)
    assert_raise ArgumentError, ~r/freed/, fn ->
      Native.program_loop(cond, -2, body, [0, 1], [x.ref, flag.ref])
    end
  end
end
