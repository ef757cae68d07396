defmodule Cascade.ONNX.Proto do
  @moduledoc false
  # A decoder of the protobuf wire format and of the subset of ONNX's schema (onnx.proto) that
  # running a model needs: ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto,
  # ValueInfoProto and OperatorSetIdProto.
  #
  # Why pure Elixir rather than protobuf-c (Debian) in the NIF: the input is untrusted, and a
  # decoder in Elixir cannot crash the VM whatever the bytes — a malformed, truncated or hostile
  # file is an {:error, reason}; the files are read once per model, so the decoder's speed
  # matters little beside the weights' upload; and it needs no generated code.
  #
  # Memory is bounded. Each message is decoded in one pass over its bytes, each field folded into
  # the message's accumulator as it comes: no list of every field, and unknown fields are skipped
  # without a term. Weights stay sub-binaries of the file (raw_data, packed floats). What a file
  # of many tiny fields can still ask for (a node, a list cell per field) is held by running the
  # decoder in a process whose heap is capped at a multiple of the file's size: past it the
  # process is killed and the caller gets an error saying so, so a 16 MB file of 8M empty nodes
  # costs tens of MB, not gigabytes. Every length is checked against what is left, varints are at
  # most ten bytes, messages nest at most @max_depth deep, strings must be UTF-8.

  import Bitwise

  @max_depth 64
  # a tensor's rank; Cascade holds at most 16 dimensions, the rest is refused with a message
  @max_dims 64
  # protobuf's own limit on a message
  @max_file 2_147_483_648
  # the decoder's heap: @heap_per_byte bytes per byte of the file, plus @heap_base
  @heap_per_byte 3 / 2
  @heap_base 24 * 1024 * 1024

  defmodule Error do
    @moduledoc false
    defexception [:message]
  end

  @doc "A ModelProto: `{:ok, model}` or `{:error, message}`."
  def decode_model(bin) when is_binary(bin), do: bounded(bin, &model/1)

  @doc "A TensorProto on its own (the test data's .pb files): `{:ok, tensor}` or `{:error, message}`."
  def decode_tensor(bin) when is_binary(bin), do: bounded(bin, &msg(&1, :tensor, 0))

  @doc "The heap, in bytes, the decoder may use for a file of `size` bytes."
  def heap_limit(size), do: round(size * @heap_per_byte) + @heap_base

  # Runs `fun.(bin)` in a process whose heap is capped at heap_limit/1; its result or its
  # Error's message.
  defp bounded(bin, _fun) when byte_size(bin) >= @max_file,
    do: {:error, "the file has #{byte_size(bin)} bytes; protobuf messages hold less than 2 GiB"}

  defp bounded(bin, fun) do
    limit = heap_limit(byte_size(bin))
    words = div(limit, :erlang.system_info(:wordsize))

    {pid, ref} =
      spawn_monitor(fn ->
        Process.flag(:max_heap_size, %{size: words, kill: true, error_logger: false})

        result =
          try do
            {:ok, fun.(bin)}
          rescue
            e in Error -> {:error, e.message}
            # a case the decoder does not foresee is still this file's error, not a crash
            e -> {:error, "the decoder failed: " <> Exception.message(e)}
          end

        exit({:shutdown, {__MODULE__, result}})
      end)

    receive do
      {:DOWN, ^ref, :process, ^pid, {:shutdown, {__MODULE__, result}}} ->
        result

      {:DOWN, ^ref, :process, ^pid, :killed} ->
        {:error,
         "decoding it needs more than #{div(limit, 1_048_576)} MB for a file of " <>
           "#{byte_size(bin)} bytes (the limit: 1.5 times the file's size plus 24 MB); " <>
           "a model has far fewer fields than its size allows"}

      {:DOWN, ^ref, :process, ^pid, reason} ->
        {:error, "the decoder failed: #{inspect(reason, limit: 5)}"}
    end
  end

  @doc "`text` with each byte that is not part of a UTF-8 character written as `\\xHH`."
  def utf8(text) do
    if String.valid?(text), do: text, else: utf8(text, "")
  end

  defp utf8(<<>>, acc), do: acc

  defp utf8(text, acc) do
    {c, rest} = String.next_codepoint(text)

    if String.valid?(c),
      do: utf8(rest, acc <> c),
      else: utf8(rest, acc <> "\\x" <> Base.encode16(c))
  end

  ## The wire format

  # Folds the fields of one message of `kind` into its accumulator.
  defp msg(_bin, _kind, depth) when depth >= @max_depth,
    do: fail("messages nested more than #{@max_depth} deep")

  defp msg(bin, kind, depth), do: finish(kind, fold(bin, kind, depth + 1, init(kind)))

  defp fold(<<>>, _kind, _depth, acc), do: acc

  defp fold(bin, kind, depth, acc) do
    {key, rest} = varint(bin)
    n = key >>> 3

    if n == 0 or n > 536_870_911, do: fail("field number #{n} is out of range")

    case key &&& 7 do
      0 ->
        {v, rest} = varint(rest)
        fold(rest, kind, depth, field(kind, n, :varint, v, depth, acc))

      1 ->
        case rest do
          <<v::binary-size(8), rest::binary>> ->
            fold(rest, kind, depth, field(kind, n, :fixed64, v, depth, acc))

          _ ->
            fail("a 64-bit field runs past the end")
        end

      2 ->
        {len, rest} = varint(rest)

        case rest do
          <<v::binary-size(len), rest::binary>> ->
            fold(rest, kind, depth, field(kind, n, :bytes, v, depth, acc))

          _ ->
            fail("a field of #{len} bytes runs past the end (#{byte_size(rest)} left)")
        end

      5 ->
        case rest do
          <<v::binary-size(4), rest::binary>> ->
            fold(rest, kind, depth, field(kind, n, :fixed32, v, depth, acc))

          _ ->
            fail("a 32-bit field runs past the end")
        end

      wire ->
        fail("wire type #{wire} (groups or invalid) in field #{n}")
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

  # int64 as two's complement
  defp signed(v) when v >= 0x8000000000000000, do: v - 0x10000000000000000
  defp signed(v), do: v

  defp wrong(n, what, wire), do: fail("field #{n}: expected #{what}, got #{wire}")

  defp string(_n, :bytes, s) do
    if String.valid?(s), do: s, else: fail("a name or string that is not UTF-8")
  end

  defp string(n, wire, _), do: wrong(n, "a string", wire)

  defp int(_n, :varint, v), do: signed(v)
  defp int(n, wire, _), do: wrong(n, "an integer", wire)

  # A repeated integer field's values prepended to `acc` (reversed): packed or one per field.
  defp ints(_n, :varint, v, acc), do: [signed(v) | acc]
  defp ints(_n, :bytes, b, acc), do: packed_varints(b, acc)
  defp ints(n, wire, _, _), do: wrong(n, "integers", wire)

  defp packed_varints(<<>>, acc), do: acc

  defp packed_varints(b, acc) do
    {v, rest} = varint(b)
    packed_varints(rest, [signed(v) | acc])
  end

  # A repeated float or double field's little-endian bytes, prepended as iodata (reversed).
  defp fixed(_n, :bytes, b, size, acc) when rem(byte_size(b), size) == 0, do: [b | acc]
  defp fixed(_n, :fixed32, b, 4, acc), do: [b | acc]
  defp fixed(_n, :fixed64, b, 8, acc), do: [b | acc]
  defp fixed(n, _wire, _, size, _), do: fail("field #{n}: expected packed #{size * 8}-bit values")

  defp sub(_n, :bytes, b, kind, depth), do: msg(b, kind, depth)
  defp sub(n, wire, _, _kind, _depth), do: wrong(n, "a message", wire)

  ## The schema: per message, its accumulator, each field folded into it, and its final form

  defp model(bin) do
    m = msg(bin, :model, 0)
    m.graph || fail("the model has no graph")
    m
  end

  defp init(:model), do: %{ir_version: 0, producer: "", opset: %{}, graph: nil}

  defp init(:graph),
    do: %{name: "", nodes: [], initializers: [], inputs: [], outputs: []}

  defp init(:node),
    do: %{inputs: [], outputs: [], name: "", op_type: "", domain: "", attributes: %{}}

  defp init(:attribute), do: %{name: "", type: 0, values: %{}}
  defp init(:opset), do: {"", 1}
  defp init(:value_info), do: %{name: "", type: :other}
  defp init(:type), do: :other
  defp init(:tensor_type), do: %{elem_type: 0, shape: nil}
  defp init(:shape), do: []
  defp init(:dim), do: nil

  defp init(:tensor),
    do: %{dims: [], rank: 0, data_type: 0, name: "", raw: nil, typed: %{}, external: false}

  # ModelProto
  defp field(:model, 1, w, v, _d, m), do: %{m | ir_version: int(1, w, v)}
  defp field(:model, 2, w, v, _d, m), do: %{m | producer: string(2, w, v)}
  defp field(:model, 7, w, v, d, m), do: %{m | graph: sub(7, w, v, :graph, d)}

  defp field(:model, 8, w, v, d, m) do
    {domain, version} = sub(8, w, v, :opset, d)
    %{m | opset: Map.put(m.opset, domain, version)}
  end

  # OperatorSetIdProto
  defp field(:opset, 1, w, v, _d, {_, version}), do: {string(1, w, v), version}
  defp field(:opset, 2, w, v, _d, {domain, _}), do: {domain, int(2, w, v)}

  # GraphProto
  defp field(:graph, 1, w, v, d, g), do: %{g | nodes: [sub(1, w, v, :node, d) | g.nodes]}
  defp field(:graph, 2, w, v, _d, g), do: %{g | name: string(2, w, v)}

  defp field(:graph, 5, w, v, d, g),
    do: %{g | initializers: [sub(5, w, v, :tensor, d) | g.initializers]}

  defp field(:graph, 11, w, v, d, g),
    do: %{g | inputs: [sub(11, w, v, :value_info, d) | g.inputs]}

  defp field(:graph, 12, w, v, d, g),
    do: %{g | outputs: [sub(12, w, v, :value_info, d) | g.outputs]}

  # NodeProto
  defp field(:node, 1, w, v, _d, n), do: %{n | inputs: [string(1, w, v) | n.inputs]}
  defp field(:node, 2, w, v, _d, n), do: %{n | outputs: [string(2, w, v) | n.outputs]}
  defp field(:node, 3, w, v, _d, n), do: %{n | name: string(3, w, v)}
  defp field(:node, 4, w, v, _d, n), do: %{n | op_type: string(4, w, v)}
  defp field(:node, 7, w, v, _d, n), do: %{n | domain: string(7, w, v)}

  defp field(:node, 5, w, v, d, n) do
    {name, value} = sub(5, w, v, :attribute, d)
    %{n | attributes: Map.put(n.attributes, name, value)}
  end

  # AttributeProto: the values kept by field until the type (field 20, which may come last)
  # says which one is the attribute's
  defp field(:attribute, 1, w, v, _d, a), do: %{a | name: string(1, w, v)}
  defp field(:attribute, 20, w, v, _d, a), do: %{a | type: int(20, w, v)}

  defp field(:attribute, n, w, v, d, a) when n in 2..11 do
    value =
      case n do
        2 -> fixed(2, w, v, 4, []) |> IO.iodata_to_binary() |> floats32() |> List.last()
        3 -> int(3, w, v)
        # AttributeProto.s is bytes: kept as they are
        4 -> if w == :bytes, do: v, else: wrong(4, "bytes", w)
        5 -> sub(5, w, v, :tensor, d)
        6 -> sub(6, w, v, :graph, d)
        7 -> fixed(7, w, v, 4, Map.get(a.values, 7, []))
        8 -> ints(8, w, v, Map.get(a.values, 8, []))
        9 -> [if(w == :bytes, do: v, else: wrong(9, "bytes", w)) | Map.get(a.values, 9, [])]
        10 -> [sub(10, w, v, :tensor, d) | Map.get(a.values, 10, [])]
        11 -> [sub(11, w, v, :graph, d) | Map.get(a.values, 11, [])]
      end

    %{a | values: Map.put(a.values, n, value)}
  end

  # ValueInfoProto, TypeProto, TypeProto.Tensor, TensorShapeProto and its Dimension
  defp field(:value_info, 1, w, v, _d, i), do: %{i | name: string(1, w, v)}
  defp field(:value_info, 2, w, v, d, i), do: %{i | type: sub(2, w, v, :type, d)}
  defp field(:type, 1, w, v, d, _), do: sub(1, w, v, :tensor_type, d)
  defp field(:tensor_type, 1, w, v, _d, t), do: %{t | elem_type: int(1, w, v)}
  defp field(:tensor_type, 2, w, v, d, t), do: %{t | shape: sub(2, w, v, :shape, d)}
  defp field(:shape, 1, w, v, d, dims), do: [sub(1, w, v, :dim, d) | dims]
  defp field(:dim, 1, w, v, _d, _), do: int(1, w, v)
  defp field(:dim, 2, w, v, _d, _), do: string(2, w, v)

  # TensorProto: the data as little-endian bytes of its element type, from raw_data or the
  # typed repeated fields (kept as they come until the element type is known)
  defp field(:tensor, 1, w, v, _d, t) do
    rank = t.rank + if(w == :bytes, do: varint_count(v), else: 1)
    if rank > @max_dims, do: fail("a tensor of more than #{@max_dims} dimensions")
    %{t | dims: ints(1, w, v, t.dims), rank: rank}
  end

  defp field(:tensor, 2, w, v, _d, t), do: %{t | data_type: int(2, w, v)}
  defp field(:tensor, 8, w, v, _d, t), do: %{t | name: string(8, w, v)}

  defp field(:tensor, 9, w, v, _d, t),
    do: %{t | raw: if(w == :bytes, do: v, else: fail("raw_data: expected bytes"))}

  defp field(:tensor, 14, w, v, _d, t), do: %{t | external: int(14, w, v) == 1}

  defp field(:tensor, n, w, v, _d, t) when n in [4, 5, 6, 7, 10, 11] do
    chunks =
      case n do
        4 -> fixed(4, w, v, 4, Map.get(t.typed, 4, []))
        10 -> fixed(10, w, v, 8, Map.get(t.typed, 10, []))
        6 -> [if(w == :bytes, do: v, else: wrong(6, "bytes", w)) | Map.get(t.typed, 6, [])]
        # varints: packed chunks stay sub-binaries, converted once the type is known
        _ when w == :bytes -> [v | Map.get(t.typed, n, [])]
        _ when w == :varint -> [v | Map.get(t.typed, n, [])]
        _ -> wrong(n, "integers", w)
      end

    %{t | typed: Map.put(t.typed, n, chunks)}
  end

  # anything else (a field of a newer schema, metadata, doc strings...) is skipped
  defp field(_kind, _n, _w, _v, _d, acc), do: acc

  defp finish(:graph, g) do
    %{
      g
      | nodes: Enum.reverse(g.nodes),
        initializers: Enum.reverse(g.initializers),
        inputs: Enum.reverse(g.inputs),
        outputs: Enum.reverse(g.outputs)
    }
  end

  defp finish(:node, n),
    do: %{n | inputs: Enum.reverse(n.inputs), outputs: Enum.reverse(n.outputs)}

  defp finish(:shape, dims), do: Enum.reverse(dims)
  defp finish(:attribute, a), do: {a.name, attribute_value(a)}
  defp finish(:tensor, t), do: tensor(t)
  defp finish(_kind, acc), do: acc

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
    10 => :graphs,
    # sparse tensors and types: decoded as such, refused by the load's checks
    11 => :unsupported,
    12 => :unsupported,
    13 => :unsupported,
    14 => :unsupported
  }
  @attr_fields %{
    float: 2,
    int: 3,
    string: 4,
    tensor: 5,
    graph: 6,
    floats: 7,
    ints: 8,
    strings: 9,
    tensors: 10,
    graphs: 11,
    unsupported: nil
  }

  defp attribute_value(%{name: name, type: code, values: values}) do
    type =
      case code do
        # an old file without the type: the kind of the value present
        0 ->
          guess_attr_type(values)

        code ->
          Map.get(@attr_types, code) ||
            fail("attribute #{inspect(name)}: #{code} is not an attribute type")
      end

    value = Map.get(values, @attr_fields[type])

    value =
      case type do
        :float -> value || 0.0
        :int -> value || 0
        :string -> value || ""
        :floats -> (value || []) |> Enum.reverse() |> IO.iodata_to_binary() |> floats32()
        t when t in [:ints, :strings, :tensors, :graphs] -> Enum.reverse(value || [])
        _ -> value
      end

    {type, value}
  end

  defp guess_attr_type(values) do
    Enum.find_value([float: 2, int: 3, string: 4, tensor: 5, graph: 6], fn {t, n} ->
      if Map.has_key?(values, n), do: t
    end) ||
      Enum.find_value([floats: 7, ints: 8, strings: 9, tensors: 10, graphs: 11], :ints, fn
        {t, n} -> if Map.has_key?(values, n), do: t
      end)
  end

  defp floats32(bin), do: for(<<x::little-float-32 <- bin>>, do: x)

  defp tensor(t) do
    dims = Enum.reverse(t.dims)
    if Enum.any?(dims, &(&1 < 0)), do: fail("a tensor has a negative dimension: #{inspect(dims)}")
    count = Enum.reduce(dims, 1, &(&1 * &2))

    data =
      cond do
        t.raw != nil -> t.raw
        t.external -> :external
        true -> typed_data(t.typed, t.data_type, count)
      end

    %{name: t.name, dims: dims, data_type: t.data_type, data: data, count: count}
  end

  # ONNX's element types: FLOAT 1, UINT8 2, INT8 3, UINT16 4, INT16 5, INT32 6, INT64 7,
  # STRING 8, BOOL 9, FLOAT16 10, DOUBLE 11, UINT32 12, UINT64 13, COMPLEX64 14,
  # COMPLEX128 15, BFLOAT16 16. The typed field each type's values are in, and their layout.
  @typed %{
    1 => {4, :fixed},
    11 => {10, :fixed},
    2 => {5, {8, :unsigned}},
    9 => {5, {8, :unsigned}},
    3 => {5, {8, :signed}},
    4 => {5, {16, :unsigned}},
    10 => {5, {16, :unsigned}},
    16 => {5, {16, :unsigned}},
    5 => {5, {16, :signed}},
    6 => {5, {32, :signed}},
    7 => {7, {64, :signed}},
    12 => {11, {32, :unsigned}},
    13 => {11, {64, :unsigned}}
  }

  defp typed_data(typed, 8, _count),
    do: {:strings, typed |> Map.get(6, []) |> Enum.reverse()}

  defp typed_data(typed, type, count) do
    case Map.fetch(@typed, type) do
      {:ok, {n, :fixed}} ->
        typed |> Map.get(n, []) |> Enum.reverse() |> IO.iodata_to_binary()

      {:ok, {n, {bits, sign}}} ->
        chunks = typed |> Map.get(n, []) |> Enum.reverse()
        # counted before anything is built: a file cannot make a tensor larger than it says
        have = Enum.reduce(chunks, 0, &(varint_count(&1) + &2))

        if have == count,
          do: Enum.reduce(chunks, <<>>, &pack(&1, bits, sign, &2)),
          else: {:values, have}

      :error ->
        <<>>
    end
  end

  defp varint_count(v) when is_integer(v), do: 1
  defp varint_count(b), do: for(<<0::1, _::7 <- b>>, reduce: 0, do: (n -> n + 1))

  defp pack(v, bits, sign, acc) when is_integer(v), do: put(acc, signed(v), bits, sign)

  defp pack(<<>>, _bits, _sign, acc), do: acc

  defp pack(b, bits, sign, acc) do
    {v, rest} = varint(b)
    pack(rest, bits, sign, put(acc, signed(v), bits, sign))
  end

  defp put(acc, v, bits, :signed), do: <<acc::binary, v::little-signed-size(bits)>>
  defp put(acc, v, bits, :unsigned), do: <<acc::binary, v::little-unsigned-size(bits)>>
end
