defmodule Cascade.ONNX.Ops.Recurrent do
  @moduledoc false
  # RNN, GRU and LSTM (Cascade.ONNX.Ops hands them here): Cascade.recurrent/6 where it has the
  # node's cell, else one time step after the other.

  import Cascade.ONNX.Ops, only: [attr: 3, dims: 1, fail: 1]

  @doc false
  # The recurrent operators, forward, reverse or bidirectional, with their default activations
  # (sigmoid for the gates, tanh for the cell), one time step after the other on the device.
  # Gates come from x_t W^T + h R^T + Wb + Rb; a batch entry past its sequence_lens keeps its
  # state and gives zeros (so the reverse direction starts at each entry's own last step).
  def run(op, [x, w, r | rest], attrs, _ctx) when op in ["RNN", "GRU", "LSTM"] do
    [b, lens, h0, c0, peep] = Enum.take(rest ++ List.duplicate(nil, 5), 5)
    layout = attr(attrs, "layout", 0)
    batch_first = fn t -> if layout == 1, do: Cascade.transpose(t, axes: [1, 0, 2]), else: t end
    x = batch_first.(x)
    [steps, batch, _] = dims(x)
    hidden = attr(attrs, "hidden_size", nil) || elem(Cascade.shape(r), 2)
    gates = div(elem(Cascade.shape(w), 1), hidden)
    type = Cascade.type(x)
    zero = fn shape -> Cascade.full(0, shape, type: type, device: Cascade.device(x)) end
    lens = if lens, do: Cascade.reshape(Cascade.as_type(lens, :s64), {batch, 1}), else: nil

    directions =
      case attr(attrs, "direction", "forward") do
        "forward" -> [false]
        "reverse" -> [true]
        "bidirectional" -> [false, true]
      end

    passes =
      for {reverse, d} <- Enum.with_index(directions) do
        {wb, rb} =
          case b do
            nil -> {zero.({gates * hidden}), zero.({gates * hidden})}
            b -> b |> index0(d) |> split_even(2) |> List.to_tuple()
          end

        h = if h0, do: h0 |> batch_first.() |> index0(d), else: zero.({batch, hidden})
        c = if c0, do: c0 |> batch_first.() |> index0(d), else: zero.({batch, hidden})
        p = if peep, do: peep |> index0(d) |> split_even(3), else: nil
        r0 = index0(r, d)
        kind = recurrent_cell(op, attrs)

        if kind && lens == nil && p == nil && steps > 0 do
          xws = input_products(x, index0(w, d), wb)
          y = Cascade.recurrent(xws, r0, rb, h, c, cell: kind, reverse: reverse)
          last = if reverse, do: 0, else: steps - 1
          state = fn k -> y |> Cascade.slice([last, 0, k * hidden], [1, batch, hidden]) end
          ys = Cascade.slice(y, [0, 0, 0], [steps, batch, hidden])
          c = if kind == :lstm, do: Cascade.reshape(state.(1), {batch, hidden}), else: c
          {ys, Cascade.reshape(state.(0), {batch, hidden}), c}
        else
          order = if reverse, do: (steps - 1)..0//-1, else: 0..(steps - 1)//1
          cell = fn xw, h, c -> cell(op, xw, h, c, r0, rb, p, hidden, attrs) end

          {ys, h, c} =
            rnn_pass(x, index0(w, d), wb, {h, c}, lens, order, cell, zero.({batch, hidden}))

          ys = ys |> Enum.map(&Cascade.reshape(&1, {1, batch, hidden})) |> Cascade.concatenate()
          {ys, h, c}
        end
      end

    # Y {steps, directions, batch, hidden}, Y_h and Y_c {directions, batch, hidden}
    y =
      passes
      |> Enum.map(fn {ys, _, _} -> Cascade.reshape(ys, {steps, 1, batch, hidden}) end)
      |> Cascade.concatenate(axis: 1)

    final = fn k ->
      passes
      |> Enum.map(&Cascade.reshape(elem(&1, k), {1, batch, hidden}))
      |> Cascade.concatenate(axis: 0)
    end

    if layout == 1 do
      [
        Cascade.transpose(y, axes: [2, 0, 1, 3]),
        Cascade.transpose(final.(1), axes: [1, 0, 2]),
        Cascade.transpose(final.(2), axes: [1, 0, 2])
      ]
    else
      [y, final.(1), final.(2)]
    end
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  # t[d] of a tensor with the directions first
  defp index0(t, d) do
    [_ | rest] = dims(t)

    t
    |> Cascade.slice([d | Enum.map(rest, fn _ -> 0 end)], [1 | rest])
    |> Cascade.reshape(List.to_tuple(rest))
  end

  # The cell Cascade.recurrent/6 runs for a node (default activations, no peepholes and no
  # sequence lengths checked by the caller): GRU only with linear_before_reset, as PyTorch
  # exports it; nil for the others, which run step by step.
  defp recurrent_cell("LSTM", _attrs), do: :lstm
  defp recurrent_cell("RNN", _attrs), do: :tanh

  defp recurrent_cell("GRU", attrs),
    do: if(attr(attrs, "linear_before_reset", 0) == 1, do: :gru, else: nil)

  # x W^T + Wb for every step {steps, batch, gates * hidden}: one product, the steps' rows
  # stacked
  defp input_products(x, w0, wb) do
    [steps, batch, input] = dims(x)
    width = elem(Cascade.shape(w0), 0)

    x
    |> Cascade.reshape({steps * batch, input})
    |> Cascade.dot([1], [], w0, [1], [])
    |> Cascade.add(wb)
    |> Cascade.reshape({steps, batch, width})
  end

  # One direction over the steps in `order`: {outputs in time order, last h, last c}. The
  # inputs' products with W for every step are one product before the loop, which leaves each
  # step its recurrent product alone.
  defp rnn_pass(x, w0, wb, state, lens, order, cell, zeros) do
    [_steps, batch, _input] = dims(x)
    width = elem(Cascade.shape(w0), 0)
    xws = input_products(x, w0, wb)

    {ys, {h, c}} =
      Enum.map_reduce(order, state, fn t, {h, c} ->
        xw =
          xws
          |> Cascade.slice([t, 0, 0], [1, batch, width])
          |> Cascade.reshape({batch, width})

        {h2, c2} = cell.(xw, h, c)

        case lens do
          nil ->
            {h2, {h2, c2}}

          lens ->
            live = Cascade.less(t, lens)
            state = {Cascade.select(live, h2, h), Cascade.select(live, c2, c)}
            {Cascade.select(live, h2, zeros), state}
        end
      end)

    ys = if order.step < 0, do: Enum.reverse(ys), else: ys
    {ys, h, c}
  end

  # a 1-D tensor cut into n equal parts
  defp split_even(t, n) do
    size = div(Cascade.size(t), n)
    for k <- 0..(n - 1), do: Cascade.slice(t, [k * size], [size])
  end

  # columns k*hidden .. of a {batch, gates*hidden} matrix
  defp gate(m, k, hidden) do
    [batch, _] = dims(m)
    Cascade.slice(m, [0, k * hidden], [batch, hidden])
  end

  # h R^T + Rb
  defp recurrent(h, r0, rb), do: Cascade.add(Cascade.dot(h, [1], [], r0, [1], []), rb)

  defp cell("RNN", xw, h, c, r0, rb, _p, _hidden, _attrs),
    do: {Cascade.tanh(Cascade.add(xw, recurrent(h, r0, rb))), c}

  # gates z, r, h; the recurrent products that read h itself as one product (z and r, and h's
  # too with linear_before_reset, as PyTorch exports), its columns then taken per gate
  defp cell("GRU", xw, h, c, r0, rb, _p, hidden, attrs) do
    linear = attr(attrs, "linear_before_reset", 0) == 1
    n = if linear, do: 3, else: 2
    rzr = Cascade.slice(r0, [0, 0], [n * hidden, hidden])
    brz = Cascade.slice(rb, [0], [n * hidden])
    rec = recurrent(h, rzr, brz)
    z = Cascade.sigmoid(Cascade.add(gate(xw, 0, hidden), gate(rec, 0, hidden)))
    rt = Cascade.sigmoid(Cascade.add(gate(xw, 1, hidden), gate(rec, 1, hidden)))

    pre =
      if linear do
        Cascade.multiply(rt, gate(rec, 2, hidden))
      else
        rh = Cascade.slice(r0, [2 * hidden, 0], [hidden, hidden])
        recurrent(Cascade.multiply(rt, h), rh, Cascade.slice(rb, [2 * hidden], [hidden]))
      end

    ht = Cascade.tanh(Cascade.add(gate(xw, 2, hidden), pre))
    one_minus = Cascade.subtract(1, z) |> Cascade.as_type(Cascade.type(z))
    {Cascade.add(Cascade.multiply(one_minus, ht), Cascade.multiply(z, h)), c}
  end

  # gates i, o, f, c; peepholes i, o, f
  defp cell("LSTM", xw, h, c, r0, rb, p, hidden, _attrs) do
    g = Cascade.add(xw, recurrent(h, r0, rb))
    peep = fn k, state -> if p, do: Cascade.multiply(Enum.at(p, k), state), else: nil end
    with_peep = fn x, k, state -> if p, do: Cascade.add(x, peep.(k, state)), else: x end
    i = Cascade.sigmoid(with_peep.(gate(g, 0, hidden), 0, c))
    f = Cascade.sigmoid(with_peep.(gate(g, 2, hidden), 2, c))
    ct = Cascade.tanh(gate(g, 3, hidden))
    c2 = Cascade.add(Cascade.multiply(f, c), Cascade.multiply(i, ct))
    o = Cascade.sigmoid(with_peep.(gate(g, 1, hidden), 1, c2))
    {Cascade.multiply(o, Cascade.tanh(c2)), c2}
  end
end
