defmodule Cascade.ONNX.Proto do
  @moduledoc false
  # A decoder of the protobuf wire format and of the subset of ONNX's schema (onnx.proto3) that
  # running a model needs: ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto,
  # ValueInfoProto and OperatorSetIdProto.
  #
  # Why pure Elixir rather than protobuf-c (Debian) in the NIF: the input is untrusted, and a
  # decoder in Elixir cannot crash the VM whatever the bytes — a malformed, truncated or hostile
  # file is an {:error, reason}; the files are read once per model, so the decoder's speed
  # (tens of MB/s here) matters little beside the weights' upload; and it needs no generated
  # code. Every length is checked against what is left, varints are at most ten bytes, nested
  # messages at most @max_depth deep, and unknown fields are skipped as the format allows.

  import Bitwise

  @max_depth 64

  defmodule Error do
    @moduledoc false
    defexception [:message]
  end

  ## The wire format

  @doc """
  The fields of one message: `[{field_number, value}]` in the order they come, where value is
  `{:varint, integer}`, `{:fixed64, <<_::64>>}`, `{:bytes, binary}` or `{:fixed32, <<_::32>>}`.
  Raises `Cascade.ONNX.Proto.Error` on malformed input.
  """
  def fields(bin), do: fields(bin, [])

  defp fields(<<>>, acc), do: Enum.reverse(acc)

  defp fields(bin, acc) do
    {key, rest} = varint(bin)
    field = key >>> 3

    if field == 0 or field > 536_870_911, do: fail("field number #{field} is out of range")

    case key &&& 7 do
      0 ->
        {v, rest} = varint(rest)
        fields(rest, [{field, {:varint, v}} | acc])

      1 ->
        case rest do
          <<v::binary-size(8), rest::binary>> -> fields(rest, [{field, {:fixed64, v}} | acc])
          _ -> fail("a 64-bit field runs past the end")
        end

      2 ->
        {len, rest} = varint(rest)

        case rest do
          <<v::binary-size(len), rest::binary>> -> fields(rest, [{field, {:bytes, v}} | acc])
          _ -> fail("a field of #{len} bytes runs past the end (#{byte_size(rest)} left)")
        end

      5 ->
        case rest do
          <<v::binary-size(4), rest::binary>> -> fields(rest, [{field, {:fixed32, v}} | acc])
          _ -> fail("a 32-bit field runs past the end")
        end

      wire ->
        fail("wire type #{wire} (groups or invalid) in field #{field}")
    end
  end

  # A varint of at most ten bytes, as an unsigned 64-bit integer.
  defp varint(bin), do: varint(bin, 0, 0)

  defp varint(<<1::1, b::7, rest::binary>>, shift, acc) when shift < 63,
    do: varint(rest, shift + 7, acc ||| b <<< shift)

  defp varint(<<0::1, b::7, rest::binary>>, shift, acc) when shift <= 63 do
    v = acc ||| b <<< shift
    if v > 0xFFFFFFFFFFFFFFFF, do: fail("a varint exceeds 64 bits")
    {v, rest}
  end

  defp varint(<<>>, _shift, _acc), do: fail("a varint runs past the end")
  defp varint(_, _shift, _acc), do: fail("a varint is longer than ten bytes")

  defp fail(message), do: raise(Error, message: message)

  # The values of a field, in order.
  defp all(fields, n), do: for({^n, v} <- fields, do: v)

  defp last(fields, n, default) do
    case all(fields, n) do
      [] -> default
      values -> List.last(values)
    end
  end

  defp string(fields, n, default \\ "") do
    case last(fields, n, nil) do
      nil -> default
      {:bytes, s} -> s
      other -> fail("field #{n}: expected a string, got #{elem(other, 0)}")
    end
  end

  defp strings(fields, n) do
    for v <- all(fields, n) do
      case v do
        {:bytes, s} -> s
        other -> fail("field #{n}: expected a string, got #{elem(other, 0)}")
      end
    end
  end

  defp int(fields, n, default) do
    case last(fields, n, nil) do
      nil -> default
      {:varint, v} -> signed(v)
      other -> fail("field #{n}: expected an integer, got #{elem(other, 0)}")
    end
  end

  # int64 as two's complement
  defp signed(v) when v >= 0x8000000000000000, do: v - 0x10000000000000000
  defp signed(v), do: v

  # A repeated integer field: packed (bytes of varints) or one varint per entry.
  defp ints(fields, n) do
    Enum.flat_map(all(fields, n), fn
      {:varint, v} -> [signed(v)]
      {:bytes, b} -> packed_varints(b, [])
      other -> fail("field #{n}: expected integers, got #{elem(other, 0)}")
    end)
  end

  defp packed_varints(<<>>, acc), do: Enum.reverse(acc)

  defp packed_varints(b, acc) do
    {v, rest} = varint(b)
    packed_varints(rest, [signed(v) | acc])
  end

  # A repeated float or double field: packed or one fixed value per entry, as little-endian bytes.
  defp fixed_bytes(fields, n, size) do
    all(fields, n)
    |> Enum.map(fn
      {:bytes, b} when rem(byte_size(b), size) == 0 -> b
      {:fixed32, b} when size == 4 -> b
      {:fixed64, b} when size == 8 -> b
      _ -> fail("field #{n}: expected packed #{size * 8}-bit values")
    end)
    |> IO.iodata_to_binary()
  end

  defp message(fields, n, depth, fun) do
    case last(fields, n, nil) do
      nil -> nil
      {:bytes, b} -> sub(b, depth, fun)
      other -> fail("field #{n}: expected a message, got #{elem(other, 0)}")
    end
  end

  defp messages(fields, n, depth, fun) do
    for v <- all(fields, n) do
      case v do
        {:bytes, b} -> sub(b, depth, fun)
        other -> fail("field #{n}: expected a message, got #{elem(other, 0)}")
      end
    end
  end

  defp sub(_bin, depth, _fun) when depth >= @max_depth,
    do: fail("messages nested more than #{@max_depth} deep")

  defp sub(bin, depth, fun), do: fun.(fields(bin), depth + 1)

  ## The schema

  @doc "A ModelProto: `{:ok, model}` or `{:error, message}`."
  def decode_model(bin) when is_binary(bin) do
    f = fields(bin)
    graph = message(f, 7, 0, &graph/2) || fail("the model has no graph")

    opsets =
      for o <- messages(f, 8, 0, fn f, _ -> {string(f, 1), int(f, 2, 1)} end), into: %{}, do: o

    {:ok,
     %{
       ir_version: int(f, 1, 0),
       producer: string(f, 2),
       opset: opsets,
       graph: graph
     }}
  rescue
    e in Error -> {:error, e.message}
  end

  @doc "A TensorProto on its own (the test data's .pb files): `{:ok, tensor}` or `{:error, message}`."
  def decode_tensor(bin) when is_binary(bin) do
    {:ok, tensor(fields(bin), 0)}
  rescue
    e in Error -> {:error, e.message}
  end

  defp graph(f, depth) do
    %{
      name: string(f, 2),
      nodes: messages(f, 1, depth, &node/2),
      initializers: messages(f, 5, depth, &tensor/2),
      inputs: messages(f, 11, depth, &value_info/2),
      outputs: messages(f, 12, depth, &value_info/2)
    }
  end

  defp node(f, depth) do
    %{
      inputs: strings(f, 1),
      outputs: strings(f, 2),
      name: string(f, 3),
      op_type: string(f, 4),
      domain: string(f, 7),
      attributes: for(a <- messages(f, 5, depth, &attribute/2), into: %{}, do: a)
    }
  end

  # AttributeProto.AttributeType
  @attr_types %{
    1 => :float,
    2 => :int,
    3 => :string,
    4 => :tensor,
    5 => :graph,
    6 => :floats,
    7 => :ints,
    8 => :strings,
    9 => :tensors,
    10 => :graphs
  }

  defp attribute(f, depth) do
    name = string(f, 1)

    type =
      case int(f, 20, 0) do
        0 -> guess_attr_type(f)
        t -> Map.get(@attr_types, t, :unsupported)
      end

    value =
      case type do
        :float -> f |> fixed_bytes(2, 4) |> floats32() |> List.last()
        :int -> int(f, 3, 0)
        :string -> string(f, 4)
        :tensor -> message(f, 5, depth, &tensor/2)
        :graph -> message(f, 6, depth, &graph/2)
        :floats -> f |> fixed_bytes(7, 4) |> floats32()
        :ints -> ints(f, 8)
        :strings -> strings(f, 9)
        :tensors -> messages(f, 10, depth, &tensor/2)
        :graphs -> messages(f, 11, depth, &graph/2)
        :unsupported -> :unsupported
      end

    {name, {type, value}}
  end

  defp guess_attr_type(f) do
    present = for {n, _} <- f, into: MapSet.new(), do: n

    Enum.find_value([{2, :float}, {3, :int}, {4, :string}, {5, :tensor}, {6, :graph}], fn
      {n, t} -> if MapSet.member?(present, n), do: t
    end) ||
      Enum.find_value([{7, :floats}, {8, :ints}, {9, :strings}, {10, :tensors}], :ints, fn
        {n, t} -> if MapSet.member?(present, n), do: t
      end)
  end

  defp floats32(bin), do: for(<<x::little-float-32 <- bin>>, do: x)

  defp value_info(f, depth) do
    type = message(f, 2, depth, &type_proto/2)
    %{name: string(f, 1), type: type}
  end

  defp type_proto(f, depth) do
    case message(f, 1, depth, &tensor_type/2) do
      nil -> :other
      t -> t
    end
  end

  defp tensor_type(f, depth) do
    dims =
      case message(f, 2, depth, fn f, d -> messages(f, 1, d, &dim/2) end) do
        nil -> nil
        dims -> dims
      end

    %{elem_type: int(f, 1, 0), shape: dims}
  end

  defp dim(f, _depth) do
    case last(f, 1, nil) do
      {:varint, v} -> signed(v)
      _ -> string(f, 2, nil)
    end
  end

  # TensorProto: the data as little-endian bytes of its element type, from raw_data or the
  # typed repeated fields.
  defp tensor(f, _depth) do
    dims = ints(f, 1)
    type = int(f, 2, 0)
    count = Enum.reduce(dims, 1, &(&1 * &2))

    if Enum.any?(dims, &(&1 < 0)), do: fail("a tensor has a negative dimension: #{inspect(dims)}")

    data =
      case last(f, 9, nil) do
        {:bytes, raw} -> raw
        nil -> typed_data(f, type)
        _ -> fail("raw_data: expected bytes")
      end

    %{name: string(f, 8), dims: dims, data_type: type, data: data, count: count}
  end

  # ONNX's element types: FLOAT 1, UINT8 2, INT8 3, UINT16 4, INT16 5, INT32 6, INT64 7,
  # STRING 8, BOOL 9, FLOAT16 10, DOUBLE 11, UINT32 12, UINT64 13, COMPLEX64 14,
  # COMPLEX128 15, BFLOAT16 16.
  defp typed_data(f, type) do
    case type do
      1 -> fixed_bytes(f, 4, 4)
      11 -> fixed_bytes(f, 10, 8)
      7 -> for v <- ints(f, 7), into: <<>>, do: <<v::little-signed-64>>
      t when t in [2, 9] -> for v <- ints(f, 5), into: <<>>, do: <<v::8>>
      t when t in [3] -> for v <- ints(f, 5), into: <<>>, do: <<v::signed-8>>
      t when t in [4, 10, 16] -> for v <- ints(f, 5), into: <<>>, do: <<v::little-16>>
      5 -> for v <- ints(f, 5), into: <<>>, do: <<v::little-signed-16>>
      6 -> for v <- ints(f, 5), into: <<>>, do: <<v::little-signed-32>>
      12 -> for v <- ints(f, 11), into: <<>>, do: <<v::little-32>>
      13 -> for v <- ints(f, 11), into: <<>>, do: <<v::little-64>>
      8 -> {:strings, strings(f, 6)}
      _ -> <<>>
    end
  end
end
