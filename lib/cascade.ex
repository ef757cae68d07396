defmodule Cascade do
  @moduledoc """
  Tensors for Elixir with a C core.

  A tensor (`Cascade.Tensor`) is immutable, lives on a device and is released when it is
  garbage collected (or early, with `free/1`). Functions take the names and options Elixir
  developers know from Nx: `sum(t, axes: [1], keep_axes: true)`, `transpose(t, axes: ...)`,
  `as_type(t, :f16)`, types such as `{:f, 32}` or `:f32`.

      iex> t = Cascade.tensor([[1.0, 2.0], [3.0, 4.0]])
      iex> t |> Cascade.dot(t) |> Cascade.add(1.0) |> Cascade.sum(axes: [1], keep_axes: true) |> Cascade.to_list()
      [[19.0], [39.0]]

  Numbers may stand wherever a tensor is expected and are typed as Nx would type them.
  Inputs of different types are promoted (`Cascade.Type`). Calls estimated to take more than
  half a millisecond run on dirty CPU schedulers, so they never block the BEAM's schedulers;
  smaller ones stay on the calling scheduler (a one-element add costs about a quarter
  of a microsecond) and count their share of its time slice.

  Every op of the table in `c_src/core/ops.def` is a function of this module: the functions,
  their options and their documentation are generated from that table at compile time.

  Errors: misuse (a binary of the wrong size, shapes that do not fit, a bad axis, an unknown
  type or option) raises `ArgumentError` naming what was expected and what was given;
  failures of a device raise `Cascade.Error`.
  """

  alias Cascade.{Device, Native, Op, Tensor, Type}

  @external_resource Cascade.OpTable.ops_def_path()
  @external_resource Cascade.OpTable.params_def_path()

  @ops Cascade.OpTable.ops()
  @op_names Enum.map(@ops, & &1.name)

  @doc false
  def __ops__, do: @ops

  ## Generated from the op table

  for op <- @ops do
    %{id: id, name: name, args: args, opts: opts, kind: kind} = op
    vars = for {arg, _} <- args, do: Macro.var(arg, __MODULE__)
    spec = Map.take(op, [:id, :name, :fun, :args, :opts, :kind])
    has_opts = opts != [] or kind == :create

    options_doc =
      for {oname, okind, default} <- opts do
        kind_text =
          case okind do
            {:choice, atoms} -> Enum.map_join(atoms, " or ", &inspect/1)
            other -> to_string(other)
          end

        "  * `#{oname}:` (#{kind_text})" <>
          if(default == nil, do: "", else: ", default `#{inspect(default)}`")
      end ++
        if(kind == :create,
          do: [
            "  * `device:` (`:host`, `:cpu`, `{:opencl, 1}` ...), default `Cascade.Device.default()`"
          ],
          else: []
        )

    @doc """
    #{op.doc}
    #{if options_doc != [], do: "\n## Options\n\n" <> Enum.join(options_doc, "\n") <> "\n", else: ""}
    ## Examples

        iex> #{op.example}
        #{op.result}
    """
    cond do
      has_opts ->
        def unquote(name)(unquote_splicing(vars), opts \\ []),
          do: Op.call(unquote(Macro.escape(spec)), unquote(vars), opts)

      Enum.all?(args, fn {_, k} -> k in [:tensor, :pred] end) ->
        # elementwise fast path: tensors straight to the NIF
        refs =
          for v <- vars,
              do: quote(do: %Tensor{ref: unquote(Macro.var(:"#{elem(v, 0)}_ref", __MODULE__))})

        ref_vars = for v <- vars, do: Macro.var(:"#{elem(v, 0)}_ref", __MODULE__)

        def unquote(name)(unquote_splicing(refs)),
          do: Op.run(unquote(id), unquote(ref_vars), %{}, 0)

        if match?([{_, :tensor}, {_, :tensor}], args) do
          # tensor with a number, the other common case: the number becomes a scalar directly
          def unquote(name)(%Tensor{ref: ref} = t, n) when is_number(n),
            do: Op.run(unquote(id), [ref, Op.scalar_ref(t, n)], %{}, 0)

          def unquote(name)(n, %Tensor{ref: ref} = t) when is_number(n),
            do: Op.run(unquote(id), [Op.scalar_ref(t, n), ref], %{}, 0)
        end

        def unquote(name)(unquote_splicing(vars)),
          do: Op.call(unquote(Macro.escape(spec)), unquote(vars), [])

      true ->
        def unquote(name)(unquote_splicing(vars)),
          do: Op.call(unquote(Macro.escape(spec)), unquote(vars), [])
    end
  end

  @dot_spec @ops |> Enum.find(&(&1.name == :dot)) |> Map.take([:id, :name, :args, :opts, :kind])

  @doc """
  Batched dot product, like `Nx.dot/6`: contracts `contract_a` axes of `a` with
  `contract_b` axes of `b`, and pairs the `batch_a` axes of `a` with the `batch_b` axes of `b`.
  The result's axes are the batch axes, then the free axes of `a`, then those of `b`.

  ## Examples

      iex> a = Cascade.iota({2, 2, 3}, type: :f32)
      iex> b = Cascade.ones({2, 3, 1})
      iex> Cascade.dot(a, [2], [0], b, [1], [0]) |> Cascade.to_list()
      [[[3.0], [12.0]], [[21.0], [30.0]]]
  """
  def dot(a, contract_a, batch_a, b, contract_b, batch_b) do
    params = dot_params(contract_a, batch_a, contract_b, batch_b)
    %Tensor{ref: ra} = to_tensor(a, b)
    %Tensor{ref: rb} = to_tensor(b, a)
    Op.run(@dot_spec.id, [ra, rb], params, 0)
  end

  defp dot_params(contract_a, batch_a, contract_b, batch_b) do
    for {name, value} <- [
          contract_a: contract_a,
          batch_a: batch_a,
          contract_b: contract_b,
          batch_b: batch_b
        ],
        into: %{},
        do: {name, Op.convert!("Cascade.dot/6", name, :ints, value)}
  end

  @doc """
  The LU factorisation of each square matrix of `tensor` ({..., n, n}) with partial pivoting,
  as `{p, l, u}` with `tensor = p · l · u`, like `Nx.LinAlg.lu/2`: `p` is a permutation matrix
  of ones and zeros (in `p_type:`, default `:s64`), `l` is lower triangular with ones on its diagonal,
  `u` upper triangular, both in the tensor's floating type (integers give f32). It runs
  `lu_factor/1` and unpacks its result on the tensor's device.

  ## Options

    * `p_type:` the type of `p`, default `:s64`

  ## Examples

      iex> {p, l, u} = Cascade.lu(Cascade.tensor([[1.0, 2.0], [3.0, 4.0]]))
      iex> Cascade.to_list(p)
      [[0, 1], [1, 0]]
      iex> Cascade.to_list(l)
      [[1.0, 0.0], [0.3333333432674408, 1.0]]
      iex> Cascade.to_list(u)
      [[3.0, 4.0], [0.0, 0.6666666865348816]]

      iex> Cascade.lu(Cascade.tensor([1.0, 2.0]))
      ** (ArgumentError) lu_factor: expected the tensor to be a square matrix or a batch of square matrices, got shape: {2}
  """
  @spec lu(Tensor.t(), keyword) :: {Tensor.t(), Tensor.t(), Tensor.t()}
  def lu(tensor, opts \\ [])

  def lu(%Tensor{shape: shape, type: type, device: device} = tensor, opts) do
    p_type = only_option!("lu/2", opts, :p_type, :s64)
    packed = lu_factor(tensor)
    rank = tuple_size(shape)
    n = elem(shape, rank - 1)
    start = List.duplicate(0, rank)
    lengths = Tuple.to_list(shape)
    factors = slice(packed, start, lengths)

    perm =
      slice(packed, List.replace_at(start, rank - 2, n), List.replace_at(lengths, rank - 2, 1))

    row = iota(shape, axis: rank - 2, type: packed.type, device: device)
    col = iota(shape, axis: rank - 1, type: packed.type, device: device)
    float = if Type.float?(type), do: type, else: :f32
    l = select(greater(row, col), factors, equal(row, col)) |> as_type(float)
    u = select(less_equal(row, col), factors, 0) |> as_type(float)
    # p[r][c] is 1 where row c of l · u is row r of the tensor
    p = equal(perm, row) |> as_type(p_type)
    {p, l, u}
  end

  def lu(other, _opts), do: not_a_tensor!("lu/2", other)

  # The value of `key`, the only option of function `fun` (its default when not given)
  defp only_option!(fun, opts, key, default) do
    case Keyword.keyword?(opts) && Keyword.validate(opts, [{key, default}]) do
      {:ok, [{^key, value}]} ->
        value

      {:error, unknown} ->
        raise ArgumentError,
              "Cascade.#{fun}: unknown option(s) #{inspect(unknown)}, expected one of " <>
                inspect([key])

      false ->
        raise ArgumentError,
              "Cascade.#{fun}: expected options as a keyword list, got: #{inspect(opts, limit: 5)}"
    end
  end

  @doc """
  The eigenvalues and eigenvectors of each symmetric matrix of `tensor` ({..., n, n}), as
  `{eigenvalues, eigenvectors}` like `Nx.LinAlg.eigh/2`: the eigenvalues ({..., n}) in
  ascending order, and the eigenvectors as the columns of {..., n, n}, in the same order, each
  of unit length with its largest component positive. Only the lower triangle is read. It runs
  `eigh_packed/1` and splits its result on the tensor's device.

  ## Examples

      iex> {values, vectors} = Cascade.eigh(Cascade.tensor([[2.0, 0.0], [0.0, 1.0]]))
      iex> Cascade.to_list(values)
      [1.0, 2.0]
      iex> Cascade.to_list(vectors)
      [[0.0, 1.0], [1.0, 0.0]]
  """
  @spec eigh(Tensor.t()) :: {Tensor.t(), Tensor.t()}
  def eigh(%Tensor{shape: shape} = tensor) do
    packed = eigh_packed(tensor)
    rank = tuple_size(shape)
    start = List.duplicate(0, rank)
    lengths = Tuple.to_list(shape)
    values = slice(packed, start, List.replace_at(lengths, rank - 2, 1))
    values = reshape(values, Tuple.delete_at(shape, rank - 2))
    vectors = slice(packed, List.replace_at(start, rank - 2, 1), lengths)
    {values, vectors}
  end

  def eigh(other), do: not_a_tensor!("eigh/1", other)

  @doc """
  The singular value decomposition of each matrix of `tensor` ({..., m, n}), as `{u, s, vt}`
  with `tensor = u · diag(s) · vt`, like `Nx.LinAlg.svd/2`: the k = min(m, n) singular values
  ({..., k}) in descending order, the left singular vectors as the columns of `u` ({..., m, m},
  or {..., m, k} with `full_matrices?: false`) and the right ones as the rows of `vt`
  ({..., n, n}, or {..., k, n}). Computed in double whatever the type (one-sided Jacobi on the
  `cpu` device, LAPACK's dgesdd on `blas`), so each singular value is accurate relative to the
  largest: a matrix of rank r gives its other singular values at about 1e-16 of the largest,
  not at the type's rounding. It runs `svd_packed/2` and splits its result on the tensor's
  device.

  ## Options

    * `full_matrices?:` whether `u` and `vt` are square, default `true`

  ## Examples

      iex> {u, s, vt} = Cascade.svd(Cascade.tensor([[3.0, 0.0], [0.0, 4.0]]))
      iex> Cascade.to_list(s)
      [4.0, 3.0]
      iex> Cascade.to_list(u)
      [[0.0, 1.0], [1.0, 0.0]]
      iex> Cascade.to_list(vt)
      [[0.0, 1.0], [1.0, 0.0]]
      iex> {u, s, _} = Cascade.svd(Cascade.tensor([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]]), full_matrices?: false)
      iex> {u.shape, Enum.map(Cascade.to_list(s), &Float.round(&1, 4))}
      {{3, 2}, [5.0, 0.0]}
  """
  @spec svd(Tensor.t(), keyword) :: {Tensor.t(), Tensor.t(), Tensor.t()}
  def svd(tensor, opts \\ [])

  def svd(%Tensor{shape: shape} = tensor, opts) when tuple_size(shape) >= 2 do
    full = svd_full_matrices!(opts)
    packed = svd_packed(tensor, full_matrices: full)
    rank = tuple_size(shape)
    {m, n} = {elem(shape, rank - 2), elem(shape, rank - 1)}
    k = Kernel.min(m, n)
    {c, r} = if full, do: {m, n}, else: {k, k}
    batch = shape |> Tuple.to_list() |> Enum.take(rank - 2)
    zeros = List.duplicate(0, rank - 2)
    u = slice(packed, zeros ++ [0, 0], batch ++ [m, c])
    s = packed |> slice(zeros ++ [m, 0], batch ++ [1, k]) |> reshape(List.to_tuple(batch ++ [k]))
    vt = slice(packed, zeros ++ [m + 1, 0], batch ++ [r, n])
    {u, s, vt}
  end

  def svd(%Tensor{shape: shape}, _opts) do
    raise ArgumentError,
          "Cascade.svd/2: expected a matrix or a batch of matrices, got shape: #{inspect(shape)}"
  end

  def svd(other, _opts), do: not_a_tensor!("svd/2", other)

  defp svd_full_matrices!(opts) do
    case only_option!("svd/2", opts, :full_matrices?, true) do
      full when is_boolean(full) ->
        full

      other ->
        raise ArgumentError,
              "Cascade.svd/2: expected full_matrices? to be a boolean, got: #{inspect(other)}"
    end
  end

  defp to_tensor(%Tensor{} = t, _other), do: t

  defp to_tensor(n, %Tensor{type: type, device: device}) when is_number(n),
    do:
      from_binary(
        Type.encode_one(n, Type.merge_number(Type.normalize!(type), n)),
        Type.merge_number(Type.normalize!(type), n),
        {},
        device: device
      )

  defp to_tensor(other, _),
    do: raise(ArgumentError, "Cascade.dot/6: expected tensors, got: #{inspect(other)}")

  ## Creation

  @doc """
  A tensor from a native-endian, row-major binary of `type` elements with `shape`.

  ## Options

    * `device:` the device to create the tensor on, default `Cascade.Device.default()`

  ## Examples

      iex> t = Cascade.from_binary(<<1.0::float-32-native, 2.0::float-32-native>>, :f32, {2})
      iex> Cascade.to_list(t)
      [1.0, 2.0]

      iex> Cascade.from_binary(<<1, 2, 3>>, :f32, {1})
      ** (ArgumentError) expected a binary of 4 bytes for a f32 tensor of 1 elements, got: 3 bytes
  """
  @spec from_binary(binary, Type.name() | Type.t(), tuple, keyword) :: Tensor.t()
  def from_binary(binary, type, shape, opts \\ []) do
    unless is_binary(binary),
      do:
        raise(ArgumentError, "Cascade.from_binary/4: expected a binary, got: #{inspect(binary)}")

    type = Type.normalize!(type)
    shape = Op.convert!("Cascade.from_binary/4", :shape, :shape, shape)

    device =
      Keyword.get(
        check_opts!("Cascade.from_binary/4", opts, [:device]),
        :device,
        Device.default()
      )

    id = Device.id!(device)

    case Native.from_binary(binary, type, shape, id) do
      {_, _, _, _} = t -> Op.tensors(t)
      other -> Op.after_run(other, fn -> Native.from_binary(binary, type, shape, id) end)
    end
  end

  @doc """
  A tensor from a number or nested lists of numbers (`:nan`, `:infinity` and
  `:neg_infinity` included). The type is s64 for integers, f32 when any float is present and
  c64 when any complex number `{re, im}` is, unless given.

  ## Options

    * `type:` the element type
    * `device:` the device, default `Cascade.Device.default()`

  ## Examples

      iex> Cascade.tensor([[1, 2], [3, 4]], type: :f16) |> Cascade.type()
      {:f, 16}

      iex> Cascade.tensor([1, 2.5]) |> Cascade.to_list()
      [1.0, 2.5]

      iex> Cascade.tensor([{1.0, -2.0}, 3]) |> Cascade.to_list()
      [{1.0, -2.0}, {3.0, 0.0}]

      iex> Cascade.tensor([[1, 2], [3]])
      ** (ArgumentError) Cascade.tensor/2: expected a regular nested list, got rows of lengths 2 and 1 at depth 1
  """
  @spec tensor(number | list, keyword) :: Tensor.t()
  def tensor(data, opts \\ []) do
    opts = check_opts!("Cascade.tensor/2", opts, [:type, :device])
    shape = list_shape(data, 0)
    flat = if is_list(data), do: List.flatten(data), else: [data]

    Enum.each(flat, fn n ->
      unless real?(n) or (match?({_, _}, n) and real?(elem(n, 0)) and real?(elem(n, 1))) do
        raise ArgumentError,
              "Cascade.tensor/2: expected numbers or complex numbers {re, im}, got: #{inspect(n)}"
      end
    end)

    type =
      case opts[:type] do
        nil ->
          cond do
            Enum.any?(flat, &is_tuple/1) -> :c64
            Enum.all?(flat, &is_integer/1) -> :s64
            true -> :f32
          end

        type ->
          type = Type.normalize!(type)

          if Enum.any?(flat, &is_tuple/1) and not Type.complex?(type) do
            raise ArgumentError,
                  "Cascade.tensor/2: complex numbers need a complex type (:c64, :c128), got: #{inspect(type)}"
          end

          type
      end

    from_binary(Type.encode(flat, type), type, shape, Keyword.take(opts, [:device]))
  end

  defp real?(n), do: is_number(n) or n in [:nan, :infinity, :neg_infinity]

  defp list_shape(list, depth) when is_list(list) do
    if List.improper?(list) do
      raise ArgumentError,
            "Cascade.tensor/2: expected a proper nested list, got: #{inspect(list, limit: 10)}"
    end

    case list do
      [] ->
        {0}

      [first | rest] ->
        inner = list_shape(first, depth + 1)

        Enum.each(rest, fn row ->
          other = list_shape(row, depth + 1)

          if other != inner do
            raise ArgumentError,
                  "Cascade.tensor/2: expected a regular nested list, got rows of lengths #{describe(inner)} and #{describe(other)} at depth #{depth + 1}"
          end
        end)

        shape = Tuple.insert_at(inner, 0, length(list))

        if tuple_size(shape) > Cascade.Op.max_rank(),
          do:
            raise(
              ArgumentError,
              "Cascade.tensor/2: expected at most #{Cascade.Op.max_rank()} nesting levels, " <>
                "got: #{tuple_size(shape)}"
            )

        shape
    end
  end

  defp list_shape(_scalar, _depth), do: {}

  defp describe({}), do: "scalar"
  defp describe(shape), do: elem(shape, 0)

  @doc """
  A tensor of zeros, f32 unless `type:` is given.

  ## Examples

      iex> Cascade.zeros({2}, type: :s32) |> Cascade.to_list()
      [0, 0]
  """
  @spec zeros(tuple, keyword) :: Tensor.t()
  def zeros(shape, opts \\ []), do: filled(0, shape, opts, "Cascade.zeros/2")

  @doc """
  A tensor of ones, f32 unless `type:` is given.

  ## Examples

      iex> Cascade.ones({2, 1}) |> Cascade.to_list()
      [[1.0], [1.0]]
  """
  @spec ones(tuple, keyword) :: Tensor.t()
  def ones(shape, opts \\ []), do: filled(1, shape, opts, "Cascade.ones/2")

  # zeros and ones are full/3 with f32 as the default type
  defp filled(value, shape, opts, fun) do
    full(value, shape, Keyword.put_new(check_opts!(fun, opts, [:type, :device]), :type, :f32))
  end

  ## Reading

  @doc """
  The tensor's shape.

      iex> Cascade.shape(Cascade.zeros({2, 3}))
      {2, 3}
  """
  @spec shape(Tensor.t()) :: tuple
  def shape(%Tensor{shape: shape}), do: shape
  def shape(other), do: not_a_tensor!("shape/1", other)

  @doc """
  The tensor's type, as Nx writes it.

      iex> Cascade.type(Cascade.tensor([1, 2], type: :f16))
      {:f, 16}
  """
  @spec type(Tensor.t()) :: Type.t()
  def type(%Tensor{type: type}), do: type
  def type(other), do: not_a_tensor!("type/1", other)

  @doc """
  The number of axes.

      iex> Cascade.rank(Cascade.zeros({2, 3}))
      2
  """
  @spec rank(Tensor.t()) :: non_neg_integer
  def rank(%Tensor{shape: shape}), do: tuple_size(shape)
  def rank(other), do: not_a_tensor!("rank/1", other)

  @doc """
  The number of elements.

      iex> Cascade.size(Cascade.zeros({2, 3}))
      6
  """
  @spec size(Tensor.t()) :: non_neg_integer
  def size(%Tensor{shape: shape}), do: shape |> Tuple.to_list() |> Enum.product()
  def size(other), do: not_a_tensor!("size/1", other)

  @doc """
  The device the tensor lives on.

      iex> Cascade.device(Cascade.zeros({1}))
      :cpu
  """
  @spec device(Tensor.t()) :: atom
  def device(%Tensor{device: device}), do: device
  def device(other), do: not_a_tensor!("device/1", other)

  @doc """
  The tensor's elements as a native-endian, row-major binary.

  From a device whose driver downloads asynchronously (cuda, opencl, the test driver) the calling
  process waits in a `receive` while the device copies, so no BEAM scheduler waits for the
  device; elsewhere the copy runs in the call (on a dirty scheduler above 1 MiB).

  ## Options

    * `limit:` at most this many elements
    * `timeout:` milliseconds to wait for an asynchronous download before raising
      `Cascade.Error` (code `:timeout`); default `config :cascade, download_timeout:`
      (60 000). The wait includes the work queued on the device before the download.

  ## Examples

      iex> Cascade.to_binary(Cascade.tensor([1, 2, 3], type: :u8))
      <<1, 2, 3>>
      iex> Cascade.to_binary(Cascade.tensor([1, 2, 3], type: :u8), limit: 2)
      <<1, 2>>
  """
  @spec to_binary(Tensor.t(), keyword) :: binary
  def to_binary(tensor, opts \\ [])

  def to_binary(%Tensor{type: type} = t, opts) do
    opts = check_opts!("Cascade.to_binary/2", opts, [:limit, :timeout])

    limit =
      case opts[:limit] do
        nil ->
          nil

        n when is_integer(n) and n >= 0 ->
          n * Type.byte_size(type)

        other ->
          raise ArgumentError,
                "Cascade.to_binary/2: expected limit to be a non-negative integer, got: #{inspect(other)}"
      end

    timeout =
      case Keyword.get_lazy(opts, :timeout, &download_timeout/0) do
        ms when (is_integer(ms) and ms >= 0) or ms == :infinity ->
          ms

        other ->
          raise ArgumentError,
                "Cascade.to_binary/2: expected timeout to be a non-negative integer or :infinity, got: #{inspect(other)}"
      end

    Op.taint("reads a tensor's data into Elixir", t.ref)
    download(t, limit, timeout)
  end

  def to_binary(other, _opts), do: not_a_tensor!("to_binary/2", other)

  defp download_timeout, do: Application.get_env(:cascade, :download_timeout, 60_000)

  # One call into C that may answer :cascade_async; the reply, a message tagged with a
  # reference made here (so the receive skips the rest of the mailbox), is then awaited, and
  # the caller sees the answer the call would have given synchronously.
  defp awaited(native, device, timeout) do
    tag = make_ref()

    case native.(tag) do
      :cascade_async -> await_download(tag, device, timeout)
      other -> other
    end
  end

  # Out of memory (the binary, or the device): Op.after_run collects garbage and retries once.
  defp download(%Tensor{ref: ref, device: device}, limit, timeout) do
    call = fn -> awaited(&Native.to_binary(ref, limit, &1), device, timeout) end

    case call.() do
      bin when is_binary(bin) -> bin
      other -> Op.after_run(other, call)
    end
  end

  # What a driver thread sends when an asynchronous download from `device` ends.
  defp await_download(tag, device, timeout) do
    receive do
      {:cascade_download, ^tag, {:error, code, driver, message}} ->
        raise Cascade.Error, driver: driver, code: code, message: message

      {:cascade_download, ^tag, result} ->
        result
    after
      timeout ->
        driver = with {driver, _index} <- device, do: driver

        raise Cascade.Error,
          driver: driver,
          code: :timeout,
          message:
            "the download from #{inspect(device)} did not complete within #{timeout} ms " <>
              "(the device busy with earlier work, or hung; pass timeout: or set " <>
              "config :cascade, download_timeout: to wait longer). Its reply, if it comes, " <>
              "is a message this process will not read"
    end
  end

  @doc """
  The elements as nested lists (a number for a scalar). Non-finite floats are `:nan`,
  `:infinity` and `:neg_infinity`.

      iex> Cascade.to_list(Cascade.tensor([[1, 2], [3, 4]]))
      [[1, 2], [3, 4]]
      iex> Cascade.to_list(Cascade.tensor(5))
      5
  """
  @spec to_list(Tensor.t()) :: number | atom | list
  def to_list(%Tensor{shape: shape, type: type} = t) do
    flat = Type.decode(to_binary(t), Type.normalize!(type))

    case Tuple.to_list(shape) do
      [] -> hd(flat)
      dims -> if 0 in dims, do: empty_nested(dims), else: nest(flat, dims)
    end
  end

  def to_list(other), do: not_a_tensor!("to_list/1", other)

  defp nest(flat, dims) do
    dims |> tl() |> Enum.reverse() |> Enum.reduce(flat, &Enum.chunk_every(&2, &1))
  end

  # No elements, but the outer dimensions still give lists of empty lists: {2, 0} is [[], []].
  defp empty_nested([0 | _]), do: []
  defp empty_nested([n | rest]), do: List.duplicate(empty_nested(rest), n)

  @doc """
  The tensor as a plain BEAM term, `{type, shape, binary}`, that `load/1` reads back.

      iex> Cascade.dump(Cascade.tensor([1, 2], type: :u8))
      {:u8, {2}, <<1, 2>>}
  """
  @spec dump(Tensor.t()) :: {Type.name(), tuple, binary}
  def dump(%Tensor{shape: shape, type: type} = t),
    do: {Type.normalize!(type), shape, to_binary(t)}

  def dump(other), do: not_a_tensor!("dump/1", other)

  @doc """
  A tensor from `{type, shape, binary}` (as `dump/1` gives) or `{type, binary}` (rank 1).

  ## Options

    * `device:` the device, default `Cascade.Device.default()`

  ## Examples

      iex> Cascade.load({:u8, <<1, 2, 3>>}) |> Cascade.shape()
      {3}
      iex> Cascade.load({:f32, {1}, <<0, 0, 128, 63>>}) |> Cascade.to_list()
      [1.0]
  """
  @spec load(tuple, keyword) :: Tensor.t()
  def load(term, opts \\ [])
  def load({type, shape, bin}, opts) when is_tuple(shape), do: from_binary(bin, type, shape, opts)

  def load({type, bin}, opts) when is_binary(bin) do
    size = Type.byte_size(type)

    if rem(byte_size(bin), size) != 0 do
      raise ArgumentError,
            "Cascade.load/2: expected a binary whose size is a multiple of #{size} for #{inspect(type)}, got: #{byte_size(bin)} bytes"
    end

    from_binary(bin, type, {div(byte_size(bin), size)}, opts)
  end

  def load(other, _opts) do
    raise ArgumentError,
          "Cascade.load/2: expected {type, shape, binary} or {type, binary}, got: #{inspect(other, limit: 5)}"
  end

  ## Memory and devices

  @doc """
  Releases the tensor's device memory now, without waiting for garbage collection.
  Idempotent, and safe while another process runs an op on the same tensor (the memory
  goes when that op ends). Using the tensor afterwards raises `ArgumentError`.

  A value (a small result of an op, see `Cascade.Tensor`) holds no device memory: freeing it
  returns `:ok` and changes nothing; it stays readable.

      iex> t = Cascade.zeros({4})
      iex> Cascade.free(t)
      :ok
      iex> Cascade.free(t)
      :ok
  """
  @spec free(Tensor.t()) :: :ok
  def free(%Tensor{ref: ref}), do: Native.free(ref)
  def free(other), do: not_a_tensor!("free/1", other)

  @doc """
  Live bytes per device: `%{device => %{bytes: live, peak_bytes: peak, tensors: count}}`.
  Counts device buffers only (not the BEAM's own memory, where values live: see
  `Cascade.Tensor`), among them the block of working memory a compiled program keeps between
  runs on a host device (`Cascade.Compiler`, `Cascade.ONNX`; at most 1 GiB for all programs
  together), one tensor each.

      iex> %{cpu: %{bytes: bytes}} = Cascade.memory()
      iex> is_integer(bytes)
      true
  """
  @spec memory() :: %{atom => %{bytes: integer, peak_bytes: integer, tensors: integer}}
  def memory do
    for {device, bytes, peak, tensors} <- Native.memory(), into: %{} do
      {device, %{bytes: bytes, peak_bytes: peak, tensors: tensors}}
    end
  end

  @doc """
  Every device of every driver Cascade was asked to load (`config :cascade, drivers: [...]`),
  available or not, with the reason when not: a driver that was not built, a library or device
  missing at run time. Each entry has `:device` (the name to pass as `device:`), `:driver`,
  `:available`, `:reason`, and the device's `:name`, `:kind`, `:memory` (bytes),
  `:host_memory` and `:detail`.

      iex> cpu = Cascade.devices() |> Enum.find(&(&1.device == :cpu))
      iex> {cpu.available, cpu.reason, cpu.host_memory}
      {true, nil, true}
  """
  @spec devices() :: [map]
  def devices, do: Device.list()

  @doc """
  Sets the default device for the whole node (see `Cascade.Device` for the order in which
  defaults apply).

      iex> Cascade.put_default_device(:cpu)
      :ok
  """
  @spec put_default_device(Device.t()) :: :ok
  def put_default_device(device), do: Device.put_default(device)

  @doc """
  Runs `fun` with `device` as the default device of the calling process and of the tasks it
  starts (`Task.async/1` and friends, which inherit it through `$callers`). The previous
  default comes back afterwards, even when `fun` raises.

      iex> Cascade.with_device(:cpu, fn -> Task.await(Task.async(fn -> Cascade.iota({2}) end)).device end)
      :cpu
  """
  @spec with_device(Device.t(), (() -> result)) :: result when result: term
  def with_device(device, fun), do: Device.with_device(device, fun)

  @doc """
  Copies `tensor` to `device` and returns the copy (the tensor itself when it is already
  there). Counted in `stats/0` as a `:transfer` onto the target device. From a device that
  downloads asynchronously (cuda, opencl) to the cpu, the calling process waits in a `receive`, as
  `to_binary/2` does, within `config :cascade, download_timeout:`.

      iex> t = Cascade.tensor([1.0, 2.0])
      iex> Cascade.transfer(t, :cpu) == t
      true
  """
  @spec transfer(Tensor.t(), Device.t()) :: Tensor.t()
  def transfer(%Tensor{device: from} = t, device) do
    id = Device.id!(device)

    if Device.id!(from) == id,
      do: t,
      else: Op.taint("moves a tensor to another device", t.ref) && transfer_to(t, id)
  end

  def transfer(other, _device), do: not_a_tensor!("transfer/2", other)

  # From a device that downloads asynchronously to the cpu the copy is a download: the new
  # tensor comes as a message, within the download timeout.
  defp transfer_to(%Tensor{ref: ref, device: from}, id) do
    call = fn -> awaited(&Native.transfer(ref, id, &1), from, download_timeout()) end

    case call.() do
      {_, _, _, _} = t -> Op.tensors(t)
      other -> Op.after_run(other, call)
    end
  end

  @doc """
  What each op does on `device` for each type its tensor arguments may have:
  `%{{op, type} => route}` where route is

    * `:native` — the device's driver runs it;
    * `:shape_dependent` — native for some shapes only (`explain/3` tells for given inputs);
    * `{:decomposed, steps}` — a composite the driver does not run itself: its decomposition
      runs on the device; `steps` lists `{op, route}` for each step on representative inputs;
    * `:cpu_fallback` — the inputs are copied to the cpu, the op runs there and the result is
      copied back (subject to the `fallback:` policy).

  `mix cascade.devices` prints this as a table.

      iex> caps = Cascade.capabilities(:cpu)
      iex> caps[{:add, :f32}]
      :native
      iex> {:decomposed, steps} = caps[{:softmax, :f32}]
      iex> {:exp, :native} in steps
      true
  """
  @spec capabilities(Device.t()) :: %{{atom, atom} => term}
  def capabilities(device \\ Device.default()) do
    for {op, type, route, steps} <- Native.capabilities(Device.id!(device)), into: %{} do
      value =
        case {route, steps} do
          {:decomposed, [_ | children]} ->
            {:decomposed,
             for({1, op, _, route, _, _, _, _, _} <- children, do: {op, route}) |> Enum.uniq()}

          {route, _} ->
            route
        end

      {{op, type}, value}
    end
  end

  @doc """
  Which library runs each op that `device` runs natively, by the type of its tensor
  arguments, on representative inputs: `%{{op, type} => library}`. Libraries: `"portable"`
  (the cpu driver's C), `"openblas"`, `"onednn"` (conv2d; bf16 products on a processor with
  AVX512-BF16), `"avx512"` / `"avx2"` (the blas driver's vector kernels,
  SLEEF for transcendental functions, chosen for the processor at run time), or the driver's
  name (`"opencl"`, `"cuda"`). For given inputs, `explain/3` says it per step, and `stats/0`
  counts the calls each library ran. `mix cascade.devices` prints it beside the routes.

      iex> Cascade.libraries(:cpu)[{:add, :f32}]
      "portable"
  """
  @spec libraries(Device.t()) :: %{{atom, atom} => String.t()}
  def libraries(device \\ Device.default()) do
    for {op, type, route, [{0, _, _, _, _, _, _, _, library} | _]} <-
          Native.capabilities(Device.id!(device)),
        route in [:native, :shape_dependent] and library != nil,
        into: %{},
        do: {{op, type}, library}
  end

  @doc """
  The plan for `Cascade.<op>(args..., opts)`, without running it: a map with the op, the
  device, the route (`:native`, `:decomposed` or `:cpu_fallback`), the `:library` that runs a
  native or fallback step (see `libraries/1`), the result's type and shape, the reason when the
  route is not native, the bytes a fallback would move, and for a decomposed op its `:steps`,
  each planned the same way. Arguments are checked as the op
  itself checks them. The batched dot is `explain(:dot, [a, contract_a, batch_a, b,
  contract_b, batch_b])`.

      iex> x = Cascade.tensor([[1.0, 2.0, 3.0]])
      iex> plan = Cascade.explain(:softmax, [x])
      iex> {plan.route, plan.device, plan.shape}
      {:decomposed, :cpu, {1, 3}}
      iex> Enum.map(plan.steps, & &1.op)
      [:reduce_max, :subtract, :exp, :sum, :divide]
  """
  @spec explain(atom, list, keyword) :: map
  def explain(op, args, opts \\ [])

  # the batched dot/6
  def explain(:dot, [a, contract_a, batch_a, b, contract_b, batch_b], []) do
    params = dot_params(contract_a, batch_a, contract_b, batch_b)
    %Tensor{ref: ra} = to_tensor(a, b)
    %Tensor{ref: rb} = to_tensor(b, a)
    Op.explain(@dot_spec.id, [ra, rb], params)
  end

  def explain(op, args, opts) when is_atom(op) and is_list(args) do
    spec =
      Enum.find(@ops, &(&1.name == op)) ||
        raise ArgumentError,
              "Cascade.explain/3: unknown op #{inspect(op)}, expected one of #{inspect(@op_names)}"

    if length(args) != length(spec.args) do
      raise ArgumentError,
            "Cascade.explain/3: #{op} takes #{length(spec.args)} positional argument(s) " <>
              "(#{Enum.map_join(spec.args, ", ", &elem(&1, 0))}), got: #{length(args)}"
    end

    Op.call(Map.take(spec, [:id, :name, :fun, :args, :opts, :kind]), args, opts, :explain)
  end

  def explain(op, args, _opts) when is_atom(op) do
    raise ArgumentError,
          "Cascade.explain/3: expected the op's arguments as a list, as in " <>
            "explain(#{inspect(op)}, [a, b]), got: #{inspect(args, limit: 5)}"
  end

  def explain(op, _args, _opts) do
    raise ArgumentError,
          "Cascade.explain/3: expected an op name (an atom such as :add), got: " <>
            inspect(op, limit: 5)
  end

  @doc """
  How many times each op ran on each device by each route, and the bytes each route moved
  between devices: `%{{device, op, route} => %{calls: n, bytes: b}}`; native entries also
  say which library ran the calls, `libraries: %{"avx512" => n, "portable" => m}` (see
  `libraries/1`). Steps of decompositions
  count as ops of their own; explicit transfers appear as `{device, :transfer, :transfer}`.
  Nx callbacks that `Cascade.Backend` runs on `Nx.BinaryBackend` appear as
  `{device, nx_callback, :binary_fallback}`.

      iex> Cascade.add(Cascade.tensor([1.0]), Cascade.tensor([2.0]))
      iex> %{calls: calls, bytes: 0, libraries: %{"portable" => n}} = Cascade.stats()[{:cpu, :add, :native}]
      iex> calls >= 1 and n >= 1
      true

  The counters are the node's: other processes' calls count too.
  """
  @spec stats() :: %{{Device.t(), atom, atom} => map}
  def stats do
    for {device, op, route, calls, bytes, libraries} <- Native.stats(),
        into: Cascade.Fallback.stats() do
      value = %{calls: calls, bytes: bytes}

      value = if route == :native, do: Map.put(value, :libraries, Map.new(libraries)), else: value

      {{device, op, route}, value}
    end
  end

  @doc """
  Sets every counter of `stats/0` to zero.

      iex> Cascade.reset_stats()
      :ok
  """
  @spec reset_stats() :: :ok
  def reset_stats do
    Cascade.Fallback.reset()
    Native.reset_stats()
  end

  @doc """
  Sets what a fallback to the cpu costs the caller, for the whole node: `:allow` (copy
  silently), `:warn` (copy and log once per device, op, type and reason) or `:error` (raise
  `Cascade.Error` with code `:unsupported` instead of moving data). The initial policy is
  `config :cascade, fallback: ...` (`:warn` by default).

      iex> Cascade.put_fallback_policy(:warn)
      :ok
  """
  @spec put_fallback_policy(:allow | :warn | :error) :: :ok
  def put_fallback_policy(policy) when policy in [:allow, :warn, :error] do
    :persistent_term.put({__MODULE__, :fallback}, policy)
    Native.set_policy(policy)
  end

  def put_fallback_policy(other) do
    raise ArgumentError,
          "Cascade.put_fallback_policy/1: expected :allow, :warn or :error, got: #{inspect(other)}"
  end

  @doc """
  The fallback policy in force (see `put_fallback_policy/1`).

      iex> Cascade.fallback_policy()
      :warn
  """
  @spec fallback_policy() :: :allow | :warn | :error
  def fallback_policy do
    :persistent_term.get({__MODULE__, :fallback}, Application.get_env(:cascade, :fallback, :warn))
  end

  @doc """
  Makes every run of a program give the same bits (`true`), or lets the drivers choose how to
  run each op by timing (`false`, the initial setting unless `config :cascade, reproducible:
  true`), for the whole node; returns `:ok`.

  The `blas` device chooses between two libraries for some ops by measuring both on the shape:
  conv2d on oneDNN or on im2col + OpenBLAS, an f32 3×3 conv2d with oneDNN's Winograd algorithm
  or its direct one, a product that oneDNN may take (bf16 with AVX512-BF16, f32 of 2^20
  multiply-adds or more) on oneDNN or on OpenBLAS. Every way gives the result within its
  type's rounding, but not the same last bits, and timings change from run to run: a training
  run that repeats every operation thousands of times ends at a slightly different model each
  time. Reproducible, these choices follow fixed rules instead and nothing is timed: conv2d on
  oneDNN wherever it builds the shape, with its direct algorithm; products on OpenBLAS (oneDNN
  builds a new product shape in the background and its calls run on OpenBLAS until it is
  ready, so which calls run where would depend on timing). The same
  program on the same inputs, machine and thread count (`CASCADE_BLAS_THREADS`) then gives the
  same bits on every run. It can be slower where the rule picks the slower way: bf16 products
  (OpenBLAS runs them on f32 copies), f32 products of 2^20 multiply-adds or more, large f32
  3×3 convolutions that Winograd's algorithm would speed up. The other drivers have no timed
  choices.

  The setting applies from the next call; each op already running finishes as it started.

      iex> Cascade.put_reproducible(true)
      :ok
      iex> Cascade.reproducible?()
      true
      iex> Cascade.put_reproducible(false)
      :ok
  """
  @spec put_reproducible(boolean()) :: :ok
  def put_reproducible(on) when is_boolean(on) do
    :persistent_term.put({__MODULE__, :reproducible}, on)
    Native.set_reproducible(on)
    :ok
  end

  def put_reproducible(other) do
    raise ArgumentError,
          "Cascade.put_reproducible/1: expected true or false, got: #{inspect(other)}"
  end

  @doc """
  Whether the drivers take fixed paths (see `put_reproducible/1`).

      iex> Cascade.reproducible?()
      false
  """
  @spec reproducible?() :: boolean()
  def reproducible? do
    :persistent_term.get(
      {__MODULE__, :reproducible},
      Application.get_env(:cascade, :reproducible, false)
    )
  end

  @doc false
  def __op_names__, do: @op_names

  defp check_opts!(fun, opts, allowed) do
    unless Keyword.keyword?(opts),
      do:
        raise(ArgumentError, "#{fun}: expected options as a keyword list, got: #{inspect(opts)}")

    for {key, _} <- opts, key not in allowed do
      raise ArgumentError,
            "#{fun}: unknown option #{inspect(key)}, expected one of #{inspect(allowed)}"
    end

    opts
  end

  defp not_a_tensor!(fun, other),
    do:
      raise(
        ArgumentError,
        "Cascade.#{fun}: expected a Cascade.Tensor, got: #{inspect(other, limit: 5)}"
      )
end
