defmodule Cascade.ONNXBuilder do
  @moduledoc false
  # ONNX files written by hand for the tests: the protobuf wire format of the few messages a
  # test needs (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto).

  import Bitwise

  def varint(v) when v < 0, do: varint(v + (1 <<< 64))
  def varint(v) when v < 0x80, do: <<v>>
  def varint(v), do: <<0x80 ||| (v &&& 0x7F), varint(v >>> 7)::binary>>

  def bytes(n, b), do: [varint(n <<< 3 ||| 2), varint(IO.iodata_length(b)), b]
  def int(n, v), do: [varint(n <<< 3), varint(v)]

  @doc "A model of opset 13 around `graph`."
  def model(graph, opset \\ 13) do
    IO.iodata_to_binary([int(1, 8), bytes(7, graph), bytes(8, int(2, opset))])
  end

  @doc "A graph: nodes, inputs and outputs as `{name, onnx_type, dims}`, initializers."
  def graph(nodes, inputs, outputs, initializers \\ []) do
    [
      Enum.map(nodes, &bytes(1, &1)),
      bytes(2, "g"),
      Enum.map(initializers, &bytes(5, &1)),
      Enum.map(inputs, &bytes(11, value_info(&1))),
      Enum.map(outputs, &bytes(12, value_info(&1)))
    ]
  end

  def node(op, inputs, outputs, attributes \\ []) do
    [
      Enum.map(inputs, &bytes(1, &1)),
      Enum.map(outputs, &bytes(2, &1)),
      bytes(4, op),
      Enum.map(attributes, &bytes(5, &1))
    ]
  end

  @doc "An attribute: `{:int, v}`, `{:ints, list}`, `{:float, v}`, `{:string, s}`, `{:graph, g}` or `{:code, c, body}`."
  def attribute(name, {:int, v}), do: [bytes(1, name), int(3, v), int(20, 2)]

  def attribute(name, {:float, v}),
    do: [bytes(1, name), [<<21>>, <<v::little-float-32>>], int(20, 1)]

  def attribute(name, {:string, s}), do: [bytes(1, name), bytes(4, s), int(20, 3)]
  def attribute(name, {:graph, g}), do: [bytes(1, name), bytes(6, g), int(20, 5)]

  def attribute(name, {:ints, list}),
    do: [bytes(1, name), bytes(8, Enum.map(list, &varint/1)), int(20, 7)]

  def attribute(name, {:code, code, body}), do: [bytes(1, name), body, int(20, code)]

  def tensor(name, onnx_type, dims, raw) do
    [bytes(1, Enum.map(dims, &varint/1)), int(2, onnx_type), bytes(8, name), bytes(9, raw)]
  end

  def value_info({name, type, dims}) do
    dim = Enum.map(dims, &bytes(1, int(1, &1)))
    [bytes(1, name), bytes(2, bytes(1, [int(1, type), bytes(2, dim)]))]
  end
end
