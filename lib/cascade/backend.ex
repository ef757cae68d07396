if Code.ensure_loaded?(Nx) do
  defmodule Cascade.Backend do
    @moduledoc """
    An `Nx.Backend` that runs Nx through Cascade's negotiation.

        config :nx, default_backend: {Cascade.Backend, device: :opencl}

    or `Nx.default_backend({Cascade.Backend, device: :cpu})`. The option `device:` names the
    Cascade device tensors are created on (default: `Cascade.Device.default/0`).

    Each callback that Cascade has an op for calls that op, so the device negotiates it as
    any Cascade call (native, decomposed on the device, or the C dispatcher's cpu fallback).
    Every type of Nx is a Cascade type (u8/u16/u32/u64, s8/s16/s32/s64, f16/bf16/f32/f64 and
    the complex c64/c128), so `Nx.Random` (threefry on u32) runs natively, bit for bit as on
    `Nx.BinaryBackend`, and so do complex arithmetic, `conjugate`, `real`, `imag`, `fft` and
    `ifft` (any axis; `length:` and `eps:` as Nx). `conv` of rank 3 and 4 runs on Cascade's
    conv2d in any layout. A callback Cascade cannot run — `map`/`reduce` with Elixir
    functions, the callbacks Nx defines on complex numbers that Cascade does not (sorting or
    windows of complex tensors, for instance) — runs on `Nx.BinaryBackend`: its inputs are
    copied to host binaries and the result copied back. Such a fallback obeys the `fallback:`
    policy (`Cascade.put_fallback_policy/1`: `:error` raises `Cascade.Error` with code
    `:unsupported` before anything moves) and is counted in `Cascade.stats/0` as
    `{device, callback, :binary_fallback}`.

    The tensors of one call are brought to one device: the largest Cascade tensor's. Another
    backend's tensor is copied there; a Cascade tensor on another device is moved with
    `Cascade.transfer/2` (counted in `Cascade.stats/0` as a transfer) — as when
    `Nx.Defn.Evaluator` makes a constant on the default backend's device beside inputs on
    another.

    Only compiled when Nx is a dependency of the application.
    """
    @behaviour Nx.Backend

    # tensor: a Cascade.Tensor; binary: the data of a tensor whose type Cascade lacks.
    defstruct [:tensor, :binary, :device]

    alias Nx.Tensor, as: T
    alias Cascade.Backend, as: B

    @max_rank Cascade.Op.max_rank()

    @native_types [
      {:f, 16},
      {:bf, 16},
      {:f, 32},
      {:f, 64},
      {:u, 8},
      {:u, 16},
      {:u, 32},
      {:u, 64},
      {:s, 8},
      {:s, 16},
      {:s, 32},
      {:s, 64},
      {:c, 64},
      {:c, 128}
    ]

    # a type Cascade stores, in no more dimensions than it holds (Cascade.Op.max_rank/0)
    defguardp storable(type, shape)
              when type in @native_types and tuple_size(shape) <= @max_rank

    # The callbacks Cascade runs on complex tensors; any other falls back when a tensor of the
    # call is complex (Cascade's ops refuse complex types they do not define).
    @complex_callbacks [
      :reshape,
      :squeeze,
      :broadcast,
      :transpose,
      :pad,
      :reverse,
      :slice,
      :put_slice,
      :take,
      :gather,
      :take_along_axis,
      :select,
      :dot,
      :sum,
      :product,
      :add,
      :subtract,
      :multiply,
      :divide,
      :pow,
      :equal,
      :not_equal,
      :negate,
      :abs,
      :exp,
      :expm1,
      :log,
      :log1p,
      :sqrt,
      :rsqrt,
      :sin,
      :cos,
      :tan,
      :tanh,
      :sinh,
      :cosh,
      :asin,
      :acos,
      :atan,
      :asinh,
      :acosh,
      :atanh,
      :sigmoid,
      :is_nan,
      :is_infinity,
      :conjugate,
      :real,
      :imag,
      :fft,
      :ifft
    ]

    ## Creation

    @impl true
    def init(opts) do
      case Keyword.validate(opts, [:device]) do
        {:ok, opts} ->
          if device = opts[:device], do: Cascade.Device.id!(device)
          opts

        {:error, keys} ->
          raise ArgumentError,
                "Cascade.Backend: unknown option(s) #{inspect(keys)}, expected :device"
      end
    end

    defp device(opts), do: opts[:device] || Cascade.Device.default()

    @impl true
    def constant(%T{type: type, shape: shape} = out, number, opts)
        when storable(type, shape) and (is_number(number) or is_atom(number)) do
      value = if is_atom(number), do: number, else: cast_number(number, type)
      out(out, Cascade.full(value, shape, type: type, device: device(opts)))
    end

    # a complex constant: one element encoded, broadcast to the shape
    def constant(%T{type: {:c, _} = type, shape: shape} = out, number, opts)
        when tuple_size(shape) <= @max_rank do
      value = if is_struct(number), do: {number.re, number.im}, else: number

      bin = Cascade.Type.encode([value], Cascade.Type.normalize!(type))
      one = Cascade.from_binary(bin, type, {}, device: device(opts))

      out(out, Cascade.broadcast(one, shape))
    end

    def constant(out, number, opts),
      do: fallback_create(:constant, out, [number, []], device(opts))

    # a float given for an integer type truncates, as Nx's BinaryBackend does
    defp cast_number(n, {k, _}) when k in [:s, :u] and is_float(n), do: trunc(n)
    defp cast_number(n, _), do: n

    @impl true
    def from_binary(%T{type: type, shape: shape} = out, binary, opts) do
      device = device(opts)

      if storable(type, shape) do
        out(out, Cascade.from_binary(binary, type, shape, device: device))
      else
        %{out | data: %B{binary: binary, device: device}}
      end
    end

    @impl true
    def eye(%T{type: type, shape: shape} = out, opts) when storable(type, shape) do
      rank = tuple_size(shape)
      rows = Cascade.iota(shape, axis: rank - 2, type: :s64, device: device(opts))
      cols = Cascade.iota(shape, axis: rank - 1, type: :s64, device: device(opts))
      out(out, Cascade.equal(rows, cols) |> Cascade.as_type(type))
    end

    def eye(out, opts), do: fallback_create(:eye, out, [[]], device(opts))

    @impl true
    def iota(%T{type: type, shape: shape} = out, axis, opts) when storable(type, shape) do
      out(out, Cascade.iota(shape, axis: axis, type: type, device: device(opts)))
    end

    def iota(out, axis, opts), do: fallback_create(:iota, out, [axis, []], device(opts))

    ## Memory and conversion

    @impl true
    def to_binary(%T{data: %B{binary: bin}, type: {_, bits}}, limit) when is_binary(bin),
      do: binary_part(bin, 0, min(byte_size(bin), limit * div(bits, 8)))

    def to_binary(%T{data: %B{tensor: t}}, limit), do: Cascade.to_binary(t, limit: limit)

    # A copy is a tensor of its own (deallocating the original leaves it intact), so on the
    # same device it is a real copy (reshape copies), elsewhere a transfer.
    @impl true
    def backend_copy(%T{data: %B{tensor: %Cascade.Tensor{} = t}} = tensor, B, opts) do
      device = device(opts)

      copy =
        if Cascade.Device.id!(device) == Cascade.Device.id!(t.device),
          do: Cascade.reshape(t, t.shape),
          else: Cascade.transfer(t, device)

      %{tensor | data: %B{tensor: copy, device: device}}
    end

    def backend_copy(%T{data: %B{binary: bin}} = tensor, B, opts) when is_binary(bin),
      do: %{tensor | data: %B{binary: bin, device: device(opts)}}

    def backend_copy(tensor, Nx.Tensor, opts), do: backend_copy(tensor, Nx.BinaryBackend, opts)

    def backend_copy(tensor, backend, opts),
      do: backend.from_binary(tensor, to_binary(tensor, Nx.size(tensor)), opts)

    # A transfer to the same device keeps the tensor as it is; any other frees the original.
    @impl true
    def backend_transfer(%T{data: %B{tensor: %Cascade.Tensor{} = t}} = tensor, B, opts) do
      device = device(opts)

      if Cascade.Device.id!(device) == Cascade.Device.id!(t.device) do
        %{tensor | data: %B{tensor: t, device: device}}
      else
        tap(backend_copy(tensor, B, opts), fn _ -> backend_deallocate(tensor) end)
      end
    end

    def backend_transfer(tensor, backend, opts),
      do: tap(backend_copy(tensor, backend, opts), fn _ -> backend_deallocate(tensor) end)

    @impl true
    def backend_deallocate(%T{data: %B{tensor: %Cascade.Tensor{ref: ref} = t}}) do
      if Cascade.Native.freed?(ref) do
        :already_deallocated
      else
        Cascade.free(t)
      end
    end

    def backend_deallocate(%T{data: %B{}}), do: :ok

    @impl true
    def inspect(%T{} = tensor, inspect_opts) do
      limit = if inspect_opts.limit == :infinity, do: :infinity, else: inspect_opts.limit + 1
      size = Nx.size(tensor)

      binary =
        case tensor.data do
          %B{tensor: %Cascade.Tensor{ref: ref}} when ref != nil ->
            if Cascade.Native.freed?(ref), do: nil, else: to_binary(tensor, min(limit, size))

          _ ->
            to_binary(tensor, min(limit, size))
        end

      if binary,
        do: Nx.Backend.inspect(tensor, binary, inspect_opts),
        else: Inspect.Algebra.string("(deallocated)")
    end

    @impl true
    def to_batched(out, tensor, opts) do
      if native?([out, tensor]) do
        t = cx(tensor)
        batch = elem(out.shape, 0)
        size = elem(tensor.shape, 0)
        full = div(size, batch)
        rest = tl(Tuple.to_list(tensor.shape))
        zeros = Enum.map(rest, fn _ -> 0 end)
        ranges = for i <- 0..(full - 1)//1, do: {i * batch, batch}

        ranges =
          if rem(size, batch) != 0 and opts[:leftover] == :repeat,
            do: ranges ++ [{full * batch, rem(size, batch)}],
            else: ranges

        Stream.map(ranges, fn
          {start, ^batch} ->
            out(out, Cascade.slice(t, [start | zeros], [batch | rest]))

          {start, len} ->
            tail = Cascade.slice(t, [start | zeros], [len | rest])
            head = Cascade.slice(t, [0 | zeros], [batch - len | rest])
            out(out, Cascade.concatenate([tail, head], axis: 0))
        end)
      else
        fallback(:to_batched, out, [tensor, opts])
      end
    end

    ## Shape and type

    @impl true
    def as_type(%T{type: type} = out, tensor) do
      cond do
        not native?([out, tensor]) ->
          fallback(:as_type, out, [tensor])

        Nx.Type.complex?(tensor.type) and Nx.Type.integer?(type) ->
          fallback(
            :as_type,
            out,
            [tensor],
            "Nx's own conversion of complex numbers into integers"
          )

        Nx.Type.float?(tensor.type) and Nx.Type.integer?(type) ->
          t = cx(tensor)

          if truncates_in_range?(t, type),
            do: out(out, Cascade.as_type(t, type)),
            else: fallback(:as_type, out, [tensor], "floats beyond the integer type's range")

        true ->
          out(out, Cascade.as_type(cx(tensor), type))
      end
    end

    # Floats into integers: Nx truncates and wraps a value beyond the type's range around it
    # (-1.5 into u8 is 255), Cascade saturates (0); NaN (0) and the infinities (the type's
    # extremes) agree. So Cascade converts when the extremes of the tensor truncate into the
    # range (two reductions, exact in every float type), Nx.BinaryBackend otherwise, and when
    # a NaN or an infinity hides the other values.
    defp truncates_in_range?(t, type) do
      {lo, hi} =
        case type do
          {:u, bits} -> {0, Bitwise.bsl(1, bits) - 1}
          {:s, bits} -> {-Bitwise.bsl(1, bits - 1), Bitwise.bsl(1, bits - 1) - 1}
        end

      if Tuple.product(t.shape) == 0 do
        true
      else
        max = Cascade.to_list(Cascade.reduce_max(t))
        min = Cascade.to_list(Cascade.reduce_min(t))
        is_float(max) and is_float(min) and trunc(max) <= hi and trunc(min) >= lo
      end
    end

    @impl true
    def bitcast(out, tensor),
      do: from_binary(out, to_binary(tensor, Nx.size(tensor)), dev(tensor))

    @impl true
    def reshape(out, tensor),
      do: native_or(:reshape, out, [tensor], &Cascade.reshape(&1, out.shape))

    @impl true
    def squeeze(out, tensor, axes),
      do: native_or(:squeeze, out, [tensor, axes], fn t, _ -> Cascade.reshape(t, out.shape) end)

    @impl true
    def broadcast(out, tensor, shape, axes) do
      native_or(:broadcast, out, [tensor, shape, axes], fn t, shape, axes ->
        Cascade.broadcast(t, shape, axes: axes)
      end)
    end

    @impl true
    def transpose(out, tensor, axes),
      do: native_or(:transpose, out, [tensor, axes], &Cascade.transpose(&1, axes: &2))

    @impl true
    def pad(out, tensor, pad_value, config) do
      case pad_value do
        # Cascade pads with a real number: a complex pad value with an imaginary part falls back
        %T{type: {:c, _}} = v when v.data.__struct__ == B ->
          case Nx.to_number(v) do
            %{im: im} when im != 0 -> fallback(:pad, out, [tensor, pad_value, config])
            _ -> pad_native(out, tensor, pad_value, config)
          end

        _ ->
          pad_native(out, tensor, pad_value, config)
      end
    end

    defp pad_native(out, tensor, pad_value, config) do
      native_or(:pad, out, [tensor, pad_value, config], fn t, v, config ->
        Cascade.pad(cast(t, out.type), scalar(v), config)
      end)
    end

    @impl true
    def reverse(out, tensor, axes),
      do: native_or(:reverse, out, [tensor, axes], &Cascade.reverse(&1, axes: &2))

    ## Indexing

    @impl true
    def slice(out, tensor, start, lengths, strides),
      do: slice_any(out, tensor, start, lengths, strides)

    defp slice_any(out, tensor, start, lengths, strides) do
      native_or(:slice, out, [tensor, start, lengths, strides], fn t, start, lengths, strides ->
        Cascade.slice(t, Enum.map(start, &index/1), lengths, strides: strides)
      end)
    end

    @impl true
    def put_slice(out, tensor, start, slice) do
      native_or(:put_slice, out, [tensor, start, slice], fn t, start, s ->
        Cascade.put_slice(cast(t, out.type), Enum.map(start, &index/1), cast(s, out.type))
      end)
    end

    @impl true
    def take(out, tensor, indices, axis) do
      native_or(:take, out, [tensor, indices, axis], fn t, i, axis ->
        Cascade.take(t, Cascade.as_type(i, :s64), axis: axis)
      end)
    end

    @impl true
    def gather(out, tensor, indices, opts) do
      native_or(:gather, out, [tensor, indices, opts], fn t, i, opts ->
        Cascade.gather(t, Cascade.as_type(i, :s64), axes: opts[:axes])
      end)
    end

    @impl true
    def concatenate(out, tensors, axis) do
      if native?([out | tensors]) do
        device = call_device(tensors)

        out(
          out,
          Cascade.concatenate(Enum.map(tensors, &cast(cx(&1, device), out.type)), axis: axis)
        )
      else
        fallback(:concatenate, out, [tensors, axis])
      end
    end

    @impl true
    def select(out, pred, on_true, on_false) do
      native_or(:select, out, [pred, on_true, on_false], fn p, t, f ->
        Cascade.select(p, cast(t, out.type), cast(f, out.type))
      end)
    end

    @impl true
    def clip(out, tensor, min, max) do
      native_or(:clip, out, [tensor, min, max], fn t, min, max ->
        Cascade.clip(cast(t, out.type), cast(min, out.type), cast(max, out.type))
      end)
    end

    @impl true
    def dot(out, a, contract_a, batch_a, b, contract_b, batch_b) do
      native_or(:dot, out, [a, contract_a, batch_a, b, contract_b, batch_b], fn a,
                                                                                ca,
                                                                                ba,
                                                                                b,
                                                                                cb,
                                                                                bb ->
        Cascade.dot(cast(a, out.type), ca, ba, cast(b, out.type), cb, bb)
      end)
    end

    ## Reductions

    for op <- [:sum, :product, :reduce_max, :reduce_min, :all, :any] do
      @impl true
      def unquote(op)(out, tensor, opts) do
        native_or(unquote(op), out, [tensor, opts], fn t, opts ->
          t = if unquote(op) in [:sum, :product], do: cast(t, out.type), else: t
          Cascade.unquote(op)(t, axes: opts[:axes], keep_axes: opts[:keep_axes] || false)
        end)
      end
    end

    # Nx's optional cumulative callbacks (without them Nx scans with window ops: 1000 x 1000 f32
    # along axis 1 took 11.6 ms, natively 1.2)
    for op <- [:cumulative_sum, :cumulative_product, :cumulative_max, :cumulative_min] do
      @impl true
      def unquote(op)(out, tensor, opts) do
        native_or(unquote(op), out, [tensor, opts], fn t, opts ->
          Cascade.unquote(op)(t, axis: opts[:axis], reverse: opts[:reverse] || false)
        end)
      end
    end

    for op <- [:argmax, :argmin] do
      @impl true
      def unquote(op)(out, tensor, opts) do
        native_or(unquote(op), out, [tensor, opts], fn t, opts ->
          Cascade.unquote(op)(t,
            axis: opts[:axis],
            tie_break: opts[:tie_break] || :low,
            keep_axis: opts[:keep_axis] || false
          )
        end)
      end
    end

    ## Element-wise

    # Arithmetic runs in the output type, as Nx defines it.
    for op <- [:add, :subtract, :multiply, :divide, :pow, :max, :min, :atan2] do
      @impl true
      def unquote(op)(out, left, right) do
        native_or(unquote(op), out, [left, right], fn l, r ->
          Cascade.unquote(op)(cast(l, out.type), cast(r, out.type))
        end)
      end
    end

    # Comparisons compare in the inputs' merged type and give u8.
    for op <- [:equal, :not_equal, :less, :less_equal, :greater, :greater_equal] do
      @impl true
      def unquote(op)(out, left, right) do
        native_or(unquote(op), out, [left, right], fn l, r ->
          type = Nx.Type.merge(left.type, right.type)
          Cascade.unquote(op)(cast(l, type), cast(r, type))
        end)
      end
    end

    for op <- [:logical_and, :logical_or, :logical_xor] do
      @impl true
      def unquote(op)(out, left, right),
        do: native_or(unquote(op), out, [left, right], &Cascade.unquote(op)(&1, &2))
    end

    @impl true
    def logical_not(out, tensor),
      do: native_or(:logical_not, out, [tensor], &Cascade.logical_not/1)

    # Integer ops on the bits, and remainder and quotient, in the output type (Nx merges the
    # operands' types). Where Cascade defines what Nx refuses, the call goes to
    # Nx.BinaryBackend, which raises as Nx does: a negative shift count (Cascade shifts the
    # other way, as Bitwise.bsl/2) and an integer divisor of zero (Cascade gives 0).
    for {op, refused} <- [
          bitwise_and: nil,
          bitwise_or: nil,
          bitwise_xor: nil,
          left_shift: :negative,
          right_shift: :negative,
          remainder: :zero,
          quotient: :zero
        ] do
      @impl true
      def unquote(op)(out, left, right) do
        if refused?(unquote(refused), out, right) do
          fallback(unquote(op), out, [left, right])
        else
          native_or(unquote(op), out, [left, right], fn l, r ->
            Cascade.unquote(op)(cast(l, out.type), cast(r, out.type))
          end)
        end
      end
    end

    defp refused?(nil, _out, _right), do: false

    defp refused?(:negative, _out, right) do
      match?({:s, _}, right.type) and native?([right]) and
        Cascade.any(Cascade.less(cx(right), 0)) |> Cascade.to_list() == 1
    end

    defp refused?(:zero, out, right) do
      Nx.Type.integer?(out.type) and native?([right]) and
        Cascade.any(Cascade.equal(cx(right), 0)) |> Cascade.to_list() == 1
    end

    # Unary ops Cascade has, computed in the output type.
    for op <-
          [:negate, :sign, :floor, :ceil, :round] ++
            [:exp, :expm1, :log, :log1p, :sqrt, :rsqrt, :sin, :cos, :tanh, :sigmoid, :erf] ++
            [:erfc, :tan, :asin, :acos, :atan, :sinh, :cosh, :asinh, :acosh] ++
            [:atanh, :cbrt, :bitwise_not, :population_count, :count_leading_zeros] do
      @impl true
      def unquote(op)(out, tensor),
        do: native_or(unquote(op), out, [tensor], &Cascade.unquote(op)(cast(&1, out.type)))
    end

    # the magnitude of a complex number is real: the input keeps its complex type
    @impl true
    def abs(%T{} = out, %T{type: {:c, _}} = tensor),
      do: native_or(:abs, out, [tensor], &Cascade.abs/1)

    def abs(out, tensor),
      do: native_or(:abs, out, [tensor], &Cascade.abs(cast(&1, out.type)))

    # Cascade.erf_inv/1 is correctly rounded; Nx.BinaryBackend's (Complex.erf_inv/1) is Giles'
    # approximation evaluated in f64, up to a few ulp away in f32. The same steps here, in f64
    # on the device, give Nx's bits, so that Nx programs (Nx.Random.normal/2 is sqrt(2) *
    # erf_inv(u)) give the same numbers on both backends.
    @impl true
    def erf_inv(out, tensor), do: native_or(:erf_inv, out, [tensor], &nx_erf_inv/1)

    defp nx_erf_inv(x) do
      x = Cascade.as_type(x, :f64)
      w = Cascade.negate(Cascade.log(Cascade.multiply(Cascade.subtract(1, x), Cascade.add(1, x))))

      low =
        horner(
          Cascade.subtract(w, 2.5),
          [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087] ++
            [-0.00125372503, -0.00417768164, 0.246640727, 1.50140941]
        )

      high =
        horner(
          Cascade.subtract(Cascade.sqrt(w), 3),
          [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773] ++
            [-0.0076224613, 0.00943887047, 1.00167406, 2.83297682]
        )

      r = Cascade.multiply(Cascade.select(Cascade.less(w, 5), low, high), x)
      r = Cascade.select(Cascade.equal(x, 0), 0.0, r)
      r = Cascade.select(Cascade.equal(x, 1), :infinity, r)
      Cascade.select(Cascade.equal(x, -1), :neg_infinity, r)
    end

    # acc * t + c for each coefficient after the first, as Complex's muladd/3
    defp horner(t, [first | rest]) do
      acc = Cascade.full(first, Cascade.shape(t), type: :f64, device: Cascade.device(t))
      Enum.reduce(rest, acc, fn c, acc -> Cascade.add(Cascade.multiply(acc, t), c) end)
    end

    # u8 truth of each element, for every type (0 for integers)
    for op <- [:is_nan, :is_infinity] do
      @impl true
      def unquote(op)(out, tensor),
        do: native_or(unquote(op), out, [tensor], &(Cascade.unquote(op) / 1))
    end

    ## Everything else runs on Nx.BinaryBackend

    for op <- [:conjugate, :real, :imag] do
      @impl true
      def unquote(op)(out, tensor),
        do: native_or(unquote(op), out, [tensor], &Cascade.unquote(op)(&1))
    end

    @impl true
    def take_along_axis(out, tensor, indices, axis) do
      native_or(:take_along_axis, out, [tensor, indices, axis], fn t, i, axis ->
        Cascade.take_along_axis(t, i, axis: axis)
      end)
    end

    # 2-D convolutions (and 1-D ones, as 2-D with a height of 1) on Cascade's conv2d, in any
    # layout: the permutations become transposes around it. Input dilation, batch groups and
    # other ranks fall back.
    @impl true
    def conv(out, tensor, kernel, opts) do
      # an empty result has nothing to compute (and its spatial folding below no depth to fold)
      if Nx.size(out) == 0 do
        fallback(:conv, out, [tensor, kernel, opts])
      else
        native_or(:conv, out, [tensor, kernel, opts], &conv_nd/3)
      end
    end

    # Every conv on Cascade's conv2d: input dilation as interior padding, batch groups as one
    # conv per group concatenated along the output features, 1-D as 2-D with a unit axis, and
    # 3-D and above by folding the first spatial axis into the batch, one conv of one rank less
    # per position of the kernel along it, summed.
    defp conv_nd(t, k, opts) do
      t = Cascade.transpose(t, axes: opts[:input_permutation])
      k = Cascade.transpose(k, axes: opts[:kernel_permutation])
      t = dilate_input(t, opts[:input_dilation])
      geometry = {opts[:strides], opts[:padding], opts[:kernel_dilation]}
      groups = opts[:feature_group_size]
      y = batch_groups(t, k, opts[:batch_group_size], &spatial_conv(&1, &2, geometry, groups))

      inverse =
        opts[:output_permutation]
        |> Enum.with_index()
        |> Enum.sort()
        |> Enum.map(&elem(&1, 1))

      Cascade.transpose(y, axes: inverse)
    end

    defp dilate_input(t, dilation) do
      if Enum.all?(dilation, &(&1 == 1)),
        do: t,
        else: Cascade.pad(t, 0, [{0, 0, 0}, {0, 0, 0} | Enum.map(dilation, &{0, 0, &1 - 1})])
    end

    # batch group g (items g * n/b ...) meets output features g * o/b ...
    defp batch_groups(t, k, 1, conv), do: conv.(t, k)

    defp batch_groups(t, k, b, conv) do
      [n | t_rest] = Tuple.to_list(Cascade.shape(t))
      [o | k_rest] = Tuple.to_list(Cascade.shape(k))
      {nb, ob} = {div(n, b), div(o, b)}

      for g <- 0..(b - 1) do
        tg = Cascade.slice(t, [g * nb | Enum.map(t_rest, fn _ -> 0 end)], [nb | t_rest])
        kg = Cascade.slice(k, [g * ob | Enum.map(k_rest, fn _ -> 0 end)], [ob | k_rest])
        conv.(tg, kg)
      end
      |> Cascade.concatenate(axis: 1)
    end

    defp spatial_conv(t, k, {strides, padding, dilation}, groups) do
      case tuple_size(Cascade.shape(t)) do
        4 ->
          Cascade.conv2d(t, k,
            strides: strides,
            padding: padding,
            kernel_dilation: dilation,
            feature_group_size: groups
          )

        3 ->
          {n, c, w} = Cascade.shape(t)
          {o, i, kw} = Cascade.shape(k)
          geometry = {[1 | strides], [{0, 0} | padding], [1 | dilation]}

          y =
            spatial_conv(
              Cascade.reshape(t, {n, c, 1, w}),
              Cascade.reshape(k, {o, i, 1, kw}),
              geometry,
              groups
            )

          {n, o, 1, w} = Cascade.shape(y)
          Cascade.reshape(y, {n, o, w})

        _ ->
          fold_first_axis(t, k, {strides, padding, dilation}, groups)
      end
    end

    # {n, c, d, ...}: pad d, then for each kernel position z along it the strided slice of the
    # d positions it meets, as a batch of n * od convs of one rank less; the sum over z, with
    # od moved back after the output features
    defp fold_first_axis(t, k, {[sd | strides], [{lo, hi} | padding], [dd | dilation]}, groups) do
      rank = tuple_size(Cascade.shape(t))
      config = for a <- 0..(rank - 1), do: if(a == 2, do: {lo, hi, 0}, else: {0, 0, 0})
      t = Cascade.pad(t, 0, config)
      [n, c, d | rest] = Tuple.to_list(Cascade.shape(t))
      [o, i, kd | k_rest] = Tuple.to_list(Cascade.shape(k))
      od = div(d - (kd - 1) * dd - 1, sd) + 1
      zeros = fn list -> Enum.map(list, fn _ -> 0 end) end
      swap = [0, 2, 1 | Enum.to_list(3..(rank - 1))]

      y =
        0..(kd - 1)
        |> Enum.map(fn z ->
          tz =
            t
            |> Cascade.slice([0, 0, z * dd | zeros.(rest)], [n, c, (od - 1) * sd + 1 | rest],
              strides: [1, 1, sd | Enum.map(rest, fn _ -> 1 end)]
            )
            |> Cascade.transpose(axes: swap)
            |> Cascade.reshape(List.to_tuple([n * od, c | rest]))

          kz =
            k
            |> Cascade.slice([0, 0, z | zeros.(k_rest)], [o, i, 1 | k_rest])
            |> Cascade.reshape(List.to_tuple([o, i | k_rest]))

          spatial_conv(tz, kz, {strides, padding, dilation}, groups)
        end)
        |> Enum.reduce(&Cascade.add(&2, &1))

      [_, _ | out_rest] = Tuple.to_list(Cascade.shape(y))

      y
      |> Cascade.reshape(List.to_tuple([n, od, o | out_rest]))
      |> Cascade.transpose(axes: swap)
    end

    @impl true
    def reduce(out, tensor, acc, opts, fun), do: fallback(:reduce, out, [tensor, acc, opts, fun])

    @impl true
    def window_reduce(out, tensor, acc, shape, opts, fun),
      do: fallback(:window_reduce, out, [tensor, acc, shape, opts, fun])

    for op <- [:window_sum, :window_product, :window_max, :window_min] do
      @impl true
      def unquote(op)(out, tensor, shape, opts) do
        native_or(unquote(op), out, [tensor, shape, opts], fn t, shape, opts ->
          Cascade.unquote(op)(cast(t, out.type), shape,
            strides: opts[:strides],
            padding: opts[:padding],
            window_dilations: opts[:window_dilations]
          )
        end)
      end
    end

    @impl true
    def map(out, tensor, opts, fun), do: fallback(:map, out, [tensor, opts, fun])

    # Cascade's sort is always stable, which Nx's stable: false allows too
    @impl true
    def sort(out, tensor, opts) do
      native_or(:sort, out, [tensor, opts], fn t, opts ->
        Cascade.sort(t, axis: opts[:axis], direction: opts[:direction])
      end)
    end

    @impl true
    def argsort(out, tensor, opts) do
      native_or(:argsort, out, [tensor, opts], fn t, opts ->
        Cascade.argsort(t, axis: opts[:axis], direction: opts[:direction], type: out.type)
      end)
    end

    # Nx.top_k/2: the first k positions of a descending argsort of the last axis (a small k
    # selected in one pass over each line, not sorted) and the values there. Nx's default
    # sorts every line whole.
    @impl true
    def top_k({values_out, indices_out}, tensor, opts) do
      if native?([values_out, indices_out, tensor]) and not complex?([tensor]) do
        t = cx(tensor)
        axis = tuple_size(Cascade.shape(t)) - 1
        indices = Cascade.argsort(t, axis: axis, direction: :desc, k: opts[:k])
        values = Cascade.take_along_axis(t, indices, axis: axis)
        {out(values_out, values), out(indices_out, indices)}
      else
        # Nx's own default (Nx.BinaryBackend has no top_k): each op falls back as it must
        {k, axis} = {opts[:k], Nx.rank(tensor) - 1}
        indices = Nx.argsort(tensor, axis: axis, direction: :desc)
        values = Nx.take_along_axis(tensor, indices, axis: axis)

        {Nx.slice_along_axis(values, 0, k, axis: axis),
         Nx.slice_along_axis(indices, 0, k, axis: axis)}
      end
    end

    # Cascade transforms the last axis: another axis is moved there and back
    for op <- [:fft, :ifft] do
      @impl true
      def unquote(op)(out, tensor, opts) do
        native_or(unquote(op), out, [tensor, opts], fn t, opts ->
          rank = tuple_size(Cascade.shape(t))
          axis = opts[:axis] || rank - 1
          perm = Enum.to_list(0..(rank - 1)) |> List.delete(axis) |> Kernel.++([axis])
          t = if axis == rank - 1, do: t, else: Cascade.transpose(t, axes: perm)
          r = Cascade.unquote(op)(t, length: opts[:length], eps: opts[:eps] || 0.0)

          if axis == rank - 1,
            do: r,
            else: Cascade.transpose(r, axes: inverse_perm(perm))
        end)
      end
    end

    defp inverse_perm(perm),
      do: perm |> Enum.with_index() |> Enum.sort() |> Enum.map(&elem(&1, 1))

    # the source in the output type (Nx merges it with the initial value's type), the tensor
    # compared in its own
    for op <- [:window_scatter_max, :window_scatter_min] do
      @impl true
      def unquote(op)(out, tensor, source, init, shape, opts) do
        native_or(unquote(op), out, [tensor, source, init, shape, opts], fn t,
                                                                            s,
                                                                            init,
                                                                            shape,
                                                                            opts ->
          value = init |> Cascade.to_list()

          Cascade.unquote(op)(t, cast(s, out.type), value, shape,
            strides: opts[:strides],
            padding: opts[:padding]
          )
        end)
      end
    end

    for op <- [:indexed_add, :indexed_put] do
      @impl true
      def unquote(op)(out, tensor, indices, updates, opts) do
        native_or(unquote(op), out, [tensor, indices, updates, opts], fn t, i, u, opts ->
          Cascade.unquote(op)(cast(t, out.type), Cascade.as_type(i, :s64), cast(u, out.type),
            axes: opts[:axes]
          )
        end)
      end
    end

    # Partial pivoting as LAPACK's getrf (Cascade.lu/2), where Nx.BinaryBackend pivots the
    # columns of the input once before eliminating: on a singular or nearly singular matrix
    # the two can choose other, equally valid, factors.
    @impl true
    def lu({p_out, l_out, u_out} = out, tensor, opts) do
      if native?([p_out, l_out, u_out, tensor]) and not complex?([tensor]) do
        {p, l, u} = Cascade.lu(cx(tensor), p_type: p_out.type)
        {out(p_out, p), out(l_out, l), out(u_out, u)}
      else
        fallback(:lu, out, [tensor, opts])
      end
    end

    @impl true
    def triangular_solve(out, a, b, opts) do
      native_or(:triangular_solve, out, [a, b, opts], fn a, b, opts ->
        Cascade.triangular_solve(a, b,
          lower: opts[:lower],
          left_side: opts[:left_side],
          transform_a: opts[:transform_a]
        )
      end)
    rescue
      # Nx's own words for it (Cascade's message says which matrix and row)
      e in ArgumentError ->
        if e.message =~ "can't solve for singular matrix",
          do:
            reraise(ArgumentError, [message: "can't solve for singular matrix"], __STACKTRACE__),
          else: reraise(e, __STACKTRACE__)
    end

    # Optional callbacks that Nx.BinaryBackend implements itself; the others take Nx's
    # default implementations, written with Nx ops, which run here. eigh is Cascade.eigh/1:
    # the Jacobi method to full precision, eigenvalues in ascending order (LAPACK's and
    # NumPy's), where Nx.BinaryBackend's QR iterations stop at `eps` and leave them in the
    # order they converge in.
    @impl true
    def eigh({vals_out, vecs_out} = out, tensor, opts) do
      if native?([vals_out, vecs_out, tensor]) and not complex?([tensor]) do
        {values, vectors} = Cascade.eigh(cx(tensor))
        {out(vals_out, values), out(vecs_out, vectors)}
      else
        fallback(:eigh, out, [tensor, opts])
      end
    end

    # svd is Cascade.svd/2, in double (one-sided Jacobi on :cpu, LAPACK's dgesdd on :blas).
    # Nx's default, QDWH iterations and eigh in the tensor's type, leaves the zero singular
    # values of a rank-deficient f32 matrix at its rounding (1e-7 of the largest), which Nx's
    # pinv (it zeroes only those below 1e-10) then inverted into entries of 1e6-1e8.
    @impl true
    def svd({u_out, s_out, vt_out}, tensor, opts) do
      if native?([u_out, s_out, vt_out, tensor]) do
        full = Keyword.get(opts, :full_matrices?, true)
        {u, s, vt} = Cascade.svd(cx(tensor), full_matrices?: full)
        {out(u_out, u), out(s_out, s), out(vt_out, vt)}
      else
        # what Nx runs for a backend without svd, on this backend
        Nx.LinAlg.SVD.svd(tensor, opts)
      end
    end

    ## Helpers

    # A tensor argument as a Cascade tensor (tensors of other backends are copied in).
    # A tensor of another backend (a constant of a defn, say) goes to `device`: that of the
    # call's Cascade tensors, so that an op never meets two devices; without one, the device of
    # Nx's default backend (call_device/1), else Cascade's default.
    # A Cascade tensor on another device than the call's moves to it (Nx.Defn.Evaluator makes
    # its constants on the default backend's device, whatever the inputs' device): a transfer,
    # counted in Cascade.stats/0 as any.
    defp cx(tensor, device \\ nil)

    defp cx(%T{data: %B{tensor: %Cascade.Tensor{} = t}}, nil), do: t

    # already there (the device named as the call's): no transfer to ask for
    defp cx(%T{data: %B{tensor: %Cascade.Tensor{device: device} = t}}, device), do: t

    defp cx(%T{data: %B{tensor: %Cascade.Tensor{} = t}}, device),
      do: Cascade.transfer(t, device)

    defp cx(%T{type: type, shape: shape} = t, device) do
      device = device || call_device([])
      opts = if device, do: [device: device], else: []
      Cascade.from_binary(Nx.to_binary(t), type, shape, opts)
    end

    defp cast(%Cascade.Tensor{type: type} = t, type), do: t
    defp cast(t, type), do: Cascade.as_type(t, type)

    defp dev(%T{data: %B{device: device}}), do: [device: device]
    defp dev(_), do: []

    # Wraps a Cascade result as `out`, with out's type and shape.
    defp out(%T{type: type, shape: shape} = out, %Cascade.Tensor{} = t) do
      t = cast(t, type)
      t = if t.shape == shape, do: t, else: Cascade.reshape(t, shape)
      %{out | data: %B{tensor: t, device: t.device}}
    end

    defp scalar(%Cascade.Tensor{} = t) do
      case Cascade.to_list(t) do
        {re, _im} -> number(re)
        n -> number(n)
      end
    end

    defp scalar(n), do: n

    defp number(n) when is_number(n) or n in [:nan, :infinity, :neg_infinity], do: n

    defp index(%T{} = t), do: Nx.to_number(t)
    defp index(i) when is_integer(i), do: i

    # Runs `fun` on Cascade tensors when the output and every tensor argument have a type
    # Cascade stores; else the callback falls back to Nx.BinaryBackend. Tensor arguments
    # reach `fun` as Cascade tensors, the others as given.
    defp native_or(op, out, args, fun) do
      kind = kind([out | args], :real)

      if kind == :real or (kind == :complex and op in @complex_callbacks) do
        device = call_device(args)
        args = Enum.map(args, fn a -> if match?(%T{}, a), do: cx(a, device), else: a end)
        out(out, apply(fun, args))
      else
        fallback(op, out, args)
      end
    end

    # native? and complex? in one pass (every callback asks both): :foreign when a tensor of
    # the terms (or of a list among them) has a type Cascade does not store, else :complex when
    # one is complex, else :real
    defp kind([], acc), do: acc

    # more dimensions than Cascade holds (Cascade.Op.max_rank/0): Nx.BinaryBackend's
    defp kind([%T{shape: shape} | _], _acc) when tuple_size(shape) > @max_rank, do: :foreign

    defp kind([%T{type: {:c, _} = type} | rest], _acc) when type in @native_types,
      do: kind(rest, :complex)

    defp kind([%T{type: type} | rest], acc) when type in @native_types, do: kind(rest, acc)
    defp kind([%T{} | _], _acc), do: :foreign

    defp kind([list | rest], acc) when is_list(list) do
      case kind(list, acc) do
        :foreign -> :foreign
        acc -> kind(rest, acc)
      end
    end

    defp kind([_ | rest], acc), do: kind(rest, acc)

    defp complex?(terms) do
      Enum.any?(terms, fn
        %T{type: {:c, _}} -> true
        list when is_list(list) -> complex?(list)
        _ -> false
      end)
    end

    defp native?(terms) do
      Enum.all?(terms, fn
        %T{type: type, shape: shape} -> storable(type, shape)
        list when is_list(list) -> Enum.all?(list, &(not match?(%T{}, &1) or native?([&1])))
        _ -> true
      end)
    end

    ## The fallback to Nx.BinaryBackend

    defp fallback_create(op, out, args, device) do
      Cascade.Fallback.check!(device, op, types(out), "no Cascade op", out_bytes(out))
      apply(Nx.BinaryBackend, op, [out | args]) |> from_host(device)
    end

    defp fallback(op, out, args, reason \\ nil) do
      device = call_device(args) || Cascade.Device.default()
      in_bytes = args |> List.flatten() |> Enum.map(&tensor_bytes/1) |> Enum.sum()
      reason = reason || reason(op, out, args)
      Cascade.Fallback.check!(device, op, types(out), reason, in_bytes + out_bytes(out))

      host_args = Enum.map(args, &to_host/1)

      # Nx.BinaryBackend builds tensors of the default backend inside some callbacks (and
      # in the functions given to map/reduce): they must be its own while it runs
      Nx.with_default_backend(Nx.BinaryBackend, fn ->
        apply(Nx.BinaryBackend, op, [out | host_args])
      end)
      |> from_host(device)
    end

    defp reason(op, out, args) do
      others = args |> List.flatten() |> Enum.filter(&match?(%T{}, &1)) |> Enum.map(& &1.type)

      all = Enum.uniq(List.wrap(types(out)) ++ others)

      case Enum.reject(all, &(&1 in @native_types)) do
        [] ->
          if Enum.any?(all, &match?({:c, _}, &1)),
            do: "Cascade has no #{op} for complex numbers",
            else: "Cascade has no #{op}"

        lacking ->
          "Cascade has no type #{Enum.map_join(lacking, ", ", &Nx.Type.to_string/1)}"
      end
    end

    defp types(%T{type: type}), do: type
    defp types(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> Enum.map(& &1.type)

    # The device of a call: that of its largest Cascade tensor, the first of the largest (in
    # lists too: slice's start indices), so that a scalar made on another device moves rather
    # than the data; else the one Nx's default backend names, else nil (Cascade's default)
    defp call_device(args) do
      case one_device(args, nil) do
        :mixed -> largest_device(args)
        nil -> default_backend_device()
        device -> device
      end
    end

    # the device of every Cascade tensor of args (nested lists too) when they share one (the
    # common call, answered without sizes), nil when none has one, :mixed otherwise
    defp one_device([], acc), do: acc

    defp one_device([%T{data: %B{device: d}} | rest], acc) when d != nil do
      if acc == nil or acc == d, do: one_device(rest, d), else: :mixed
    end

    defp one_device([list | rest], acc) when is_list(list) do
      case one_device(list, acc) do
        :mixed -> :mixed
        acc -> one_device(rest, acc)
      end
    end

    defp one_device([_ | rest], acc), do: one_device(rest, acc)

    # tensors on two devices or more: the first of the largest
    defp largest_device(args) do
      for(%T{data: %B{device: d}} = t <- List.flatten(args), d != nil, do: {Nx.size(t), d})
      |> Enum.max_by(&elem(&1, 0))
      |> elem(1)
    end

    defp default_backend_device do
      case Nx.default_backend() do
        {B, opts} -> opts[:device]
        _ -> nil
      end
    end

    defp tensor_bytes(%T{data: %B{}, type: {_, bits}} = t), do: Nx.size(t) * div(bits, 8)
    defp tensor_bytes(_), do: 0

    defp out_bytes(%T{type: {_, bits}} = t), do: Nx.size(t) * div(bits, 8)

    defp out_bytes(tuple) when is_tuple(tuple),
      do: tuple |> Tuple.to_list() |> Enum.map(&out_bytes/1) |> Enum.sum()

    defp to_host(%T{data: %B{}} = t),
      do: %{t | data: %Nx.BinaryBackend{state: to_binary(t, Nx.size(t))}}

    defp to_host(list) when is_list(list), do: Enum.map(list, &to_host/1)
    defp to_host(other), do: other

    defp from_host(%T{data: %Nx.BinaryBackend{state: bin}} = t, device),
      do: from_binary(t, bin, device: device)

    defp from_host(%T{} = t, _device), do: t

    defp from_host(tuple, device) when is_tuple(tuple),
      do: tuple |> Tuple.to_list() |> Enum.map(&from_host(&1, device)) |> List.to_tuple()

    defp from_host(list, device) when is_list(list), do: Enum.map(list, &from_host(&1, device))
    defp from_host(%Stream{} = s, device), do: Stream.map(s, &from_host(&1, device))
  end
end
