if Code.ensure_loaded?(Nx) do
  defmodule Cascade.CompilerTest.Fns do
    import Nx.Defn

    defn elementwise(a, b) do
      Nx.exp(a) * b + 1 - Nx.tanh(a) / 2
    end

    defn reductions(a) do
      {Nx.sum(a, axes: [1]), Nx.reduce_max(a), Nx.argmax(a, axis: 0)}
    end

    defn predict({w1, b1, w2, b2}, x) do
      x |> Nx.dot(w1) |> Nx.add(b1) |> Nx.max(0) |> Nx.dot(w2) |> Nx.add(b2)
    end

    defn loss(params, x, y) do
      logits = predict(params, x)
      shifted = logits - Nx.reduce_max(logits, axes: [1], keep_axes: true)
      log_probs = shifted - Nx.log(Nx.sum(Nx.exp(shifted), axes: [1], keep_axes: true))
      -Nx.mean(Nx.sum(y * log_probs, axes: [1]))
    end

    defn step(params, x, y) do
      {loss, {g1, gb1, g2, gb2}} = value_and_grad(params, &loss(&1, x, y))
      {w1, b1, w2, b2} = params
      {loss, {w1 - 0.1 * g1, b1 - 0.1 * gb1, w2 - 0.1 * g2, b2 - 0.1 * gb2}}
    end

    defn containers(a, b) do
      %{sum: a + b, pair: {a, b * 2}, const: 7}
    end

    defn count_up(a) do
      {a, _} =
        while {a, i = 0}, i < 3 do
          {a + 1, i + 1}
        end

      a
    end

    defn choose(a) do
      if Nx.sum(a) > 0, do: a * 2, else: a - 2
    end

    defn loops(x, y) do
      {r, _} =
        while {a = x, i = 0}, i < 3 do
          {a * 2 + 1, i + 1}
        end

      {r2, _, _} =
        while {b = r + y, j = 0, r}, j < 2 do
          {b + r, j + 1, r}
        end

      pair = if Nx.sum(r2) > 10, do: {r2 * 2, r}, else: {r2, r * 3}
      {pair, x * 2}
    end

    defn nested(x, n) do
      {r, _, _} =
        while {a = x, i = 0, n}, i < n do
          {b, _} =
            while {b = a, j = 0}, j < 2 do
              {Nx.exp(b) / 4, j + 1}
            end

          {b * 2, i + 1, n}
        end

      r
    end

    defn chooser(a, k) do
      cond do
        k == 0 -> Nx.sum(a)
        k == 1 -> Nx.reduce_max(a) * 10
        true -> Nx.reduce_min(a) - 100
      end
    end

    defn spin(x, n) do
      {x, _, _} =
        while {x, i = 0, n}, i < n do
          {x * 0.5 + 1, i + 1, n}
        end

      x
    end

    defn power_iterate(m, v, n) do
      {v, _, _, _} =
        while {v, m, i = 0, n}, i < n do
          w = Nx.dot(m, v)
          {w / Nx.sqrt(Nx.sum(w * w)), m, i + 1, n}
        end

      v
    end

    # a while on part of a container argument: the loop's results come after every tensor of
    # the arguments
    defn tuple_arg({a, b}) do
      {x, _} =
        while {x = a, i = 0}, i < 2 do
          {x + 1, i + 1}
        end

      x * 100 + b
    end

    defn flag_loop(x, flag) do
      {x, _} =
        while {x, flag}, flag do
          {x * 2, 0 * flag}
        end

      x
    end

    defn loop_in_branch(a) do
      if Nx.sum(a) > 0 do
        {a, _} =
          while {a, i = 0}, i < 2 do
            {a + 1, i + 1}
          end

        a
      else
        a
      end
    end

    defn divide_ints(a, b) do
      Nx.quotient(a, b)
    end

    defn hooked(a) do
      hook(a * 2, :doubled) + 1
    end

    defn half(a, b) do
      Nx.sum(a * b + Nx.sin(a), axes: [0])
    end

    defn pool_grad(x) do
      grad(x, fn x -> Nx.sum(Nx.window_max(x, {1, 2, 2}, strides: [1, 2, 2]) * 3) end)
    end

    defn weighted_sum(a, b) do
      Nx.sum(Nx.exp(a) * b, axes: [1])
    end

    defn dense_relu(x, w, b) do
      x |> Nx.dot(w) |> Nx.add(b) |> Nx.max(0) |> Nx.multiply(2)
    end

    defn gelu(x) do
      0.5 * x * (1 + Nx.erf(x * 0.7071067811865476))
    end

    defn with_fallback(a) do
      Nx.reduce(a, 0.0, fn x, acc -> x + acc end)
    end

    defn with_complex(a) do
      Nx.real(Nx.multiply(Nx.complex(a, a), Nx.complex(a, a)))
    end
  end

  defmodule Cascade.CompilerTest do
    # Cascade.Compiler against Nx.Defn.Evaluator, both on Cascade.Backend: the same results
    # within the per-type tolerances, one program per signature, the evaluator where a program
    # cannot capture the function (and explain/3 says why). Stats and the default backend are
    # global: not async.
    use ExUnit.Case, async: false

    alias Cascade.CompilerTest.Fns
    alias Nx.Defn.Composite

    @moduletag :nx

    doctest Cascade.Compiler

    setup do
      Nx.default_backend(Cascade.Backend)
      :ok
    end

    defp both(fun, args, opts \\ []) do
      compiled = Nx.Defn.jit_apply(fun, args, Keyword.put(opts, :compiler, Cascade.Compiler))
      evaluated = Nx.Defn.jit_apply(fun, args, compiler: Nx.Defn.Evaluator)
      {compiled, evaluated}
    end

    defp assert_close(%Nx.Tensor{} = a, %Nx.Tensor{} = b, tol) do
      assert a.type == b.type
      assert a.shape == b.shape
      assert a.names == b.names

      [a, b] = Enum.map([a, b], &(&1 |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.as_type(:f64)))

      assert Nx.all_close(a, b, atol: tol, rtol: tol)
             |> Nx.to_number() == 1,
             "#{inspect(a)}\nis not within #{tol} of\n#{inspect(b)}"
    end

    defp assert_close(a, b, tol) when is_tuple(a),
      do:
        Enum.zip(Tuple.to_list(a), Tuple.to_list(b))
        |> Enum.each(fn {x, y} -> assert_close(x, y, tol) end)

    defp assert_close(%{} = a, %{} = b, tol) do
      assert Map.keys(a) == Map.keys(b)
      for k <- Map.keys(a), do: assert_close(a[k], b[k], tol)
    end

    defp random(shape, type \\ :f32, seed \\ 1) do
      {t, _} = Nx.Random.normal(Nx.Random.key(seed), shape: shape, type: type)
      t
    end

    defp cx(%Nx.Tensor{data: %Cascade.Backend{tensor: t}}), do: t

    test "elementwise, reductions and containers agree with the evaluator" do
      a = random({3, 4})
      b = random({3, 4}, :f32, 2)
      {c, e} = both(&Fns.elementwise/2, [a, b])
      assert_close(c, e, 1.0e-6)
      {c, e} = both(&Fns.reductions/1, [a])
      assert_close(c, e, 1.0e-6)
      {c, e} = both(&Fns.containers/2, [a, b])
      assert_close(c, e, 0)
      assert c.const |> Nx.to_number() == 7
    end

    test "a training step with value_and_grad agrees with the evaluator" do
      x = random({8, 12})

      y =
        Nx.equal(Nx.new_axis(Nx.remainder(Nx.iota({8}), 3), 1), Nx.iota({1, 3}))
        |> Nx.as_type(:f32)

      params =
        {Nx.multiply(random({12, 5}, :f32, 3), 0.3), Nx.broadcast(0.0, {5}),
         Nx.multiply(random({5, 3}, :f32, 4), 0.3), Nx.broadcast(0.0, {3})}

      info = Cascade.Compiler.explain(&Fns.step/3, [params, x, y])
      assert info.mode == :program
      assert Enum.all?(info.steps, &(&1.route == :native))

      step = Nx.Defn.jit(&Fns.step/3, compiler: Cascade.Compiler)
      eval = Nx.Defn.jit(&Fns.step/3, compiler: Nx.Defn.Evaluator)

      Enum.reduce(1..5, {params, params}, fn _, {pc, pe} ->
        {lc, pc} = step.(pc, x, y)
        {le, pe} = eval.(pe, x, y)
        assert_close(lc, le, 1.0e-5)
        assert_close(pc, pe, 1.0e-5)
        {pc, pe}
      end)
    end

    test "a chain of elementwise ops runs as one fused step where the device has the kernel" do
      x = random({3, 1000})
      {c, e} = both(&Fns.gelu/1, [x], device: :blas)
      assert_close(c, e, 1.0e-6)

      assert [%{op: :fused, route: :native, fused: ops}] =
               Cascade.Compiler.explain(&Fns.gelu/1, [x], device: :blas).steps

      assert ops == [:multiply, :erf, :add, :multiply, :multiply]

      # opencl builds a kernel for the chain from its ops' expressions
      if Enum.any?(Cascade.devices(), &match?(%{device: :opencl, available: true}, &1)) do
        assert [%{op: :fused, route: :native, library: "opencl"}] =
                 Cascade.Compiler.explain(&Fns.gelu/1, [x], device: :opencl).steps

        {c, e} = both(&Fns.gelu/1, [x], device: :opencl)
        assert_close(c, e, 1.0e-5)
      end

      # the cpu driver has no fused kernel: the ops stay steps of their own
      cpu = Cascade.Compiler.explain(&Fns.gelu/1, [x], device: :cpu).steps
      assert Enum.map(cpu, & &1.op) == [:multiply, :erf, :add, :multiply, :multiply]
      {c, e} = both(&Fns.gelu/1, [x], device: :cpu)
      assert_close(c, e, 1.0e-6)
    end

    test "a callback that reads a constant's value still compiles" do
      # the gradient of window_max is window_scatter_max, whose initial value Cascade.Backend
      # reads into Elixir: a constant, the same on every call
      x = random({2, 6, 6})
      assert Cascade.Compiler.explain(&Fns.pool_grad/1, [x]).mode == :program
      {c, e} = both(&Fns.pool_grad/1, [x])
      assert_close(c, e, 0)
    end

    test "a bias row joins the chain after a product (dense, relu) on blas, not on opencl" do
      x = random({64, 100})
      w = random({100, 256}, :f32, 3)
      b = random({256}, :f32, 5)

      assert [
               %{op: :dot},
               %{op: :fused, fused: [:add, :max, :multiply], reads: [dot, 2 | _], library: lib}
             ] = Cascade.Compiler.explain(&Fns.dense_relu/3, [x, w, b], device: :blas).steps

      # the product's result and the bias (input 2), then the numbers
      assert dot > 2 and lib in ["avx512", "avx2"]

      # the evaluator runs the product on the inputs' device (cpu's portable GEMM), the compiler
      # on blas (OpenBLAS): their sums round apart
      {c, e} = both(&Fns.dense_relu/3, [x, w, b], device: :blas)
      assert_close(c, e, 1.0e-4)

      # opencl's generated kernel indexes every input alike: the add of the row stays a step
      if Enum.any?(Cascade.devices(), &match?(%{device: :opencl, available: true}, &1)) do
        steps = Cascade.Compiler.explain(&Fns.dense_relu/3, [x, w, b], device: :opencl).steps
        assert Enum.map(steps, & &1.op) == [:dot, :add, :fused]
      end
    end

    test "f16 and bf16 chains run as one fused step on blas, with the evaluator's bits" do
      # the evaluator on blas too (its constants are made on the default backend)
      Nx.with_default_backend({Cascade.Backend, device: :blas}, fn ->
        for type <- [:f16, :bf16] do
          x = random({4, 100}, type)

          assert [%{op: :fused, fused: [:multiply, :erf, :add, :multiply, :multiply], type: t}] =
                   Cascade.Compiler.explain(&Fns.gelu/1, [x], device: :blas).steps

          assert t == Nx.Type.normalize!(type)
          {c, e} = both(&Fns.gelu/1, [x], device: :blas)
          assert Nx.to_binary(c) == Nx.to_binary(e)
        end
      end)
    end

    test "a chain with a sum at the end runs as one fused step on blas and opencl" do
      a = random({16, 3000})
      b = random({16, 3000}, :f32, 7)

      assert [%{op: :fused, fused: [:exp, :multiply], shape: {16}}] =
               Cascade.Compiler.explain(&Fns.weighted_sum/2, [a, b], device: :blas).steps

      {c, e} = both(&Fns.weighted_sum/2, [a, b], device: :blas)
      assert_close(c, e, 1.0e-5)

      # opencl: a group of work-items per row sums the chain's values in double
      if Enum.any?(Cascade.devices(), &match?(%{device: :opencl, available: true}, &1)) do
        assert [%{op: :fused, fused: [:exp, :multiply], library: "opencl"}] =
                 Cascade.Compiler.explain(&Fns.weighted_sum/2, [a, b], device: :opencl).steps

        {c, e} = both(&Fns.weighted_sum/2, [a, b], device: :opencl)
        assert_close(c, e, 1.0e-5)
      end
    end

    test "the gradient's transposed products are folded into the products" do
      x = random({8, 12})
      y = Nx.broadcast(0.1, {8, 3})
      params = {random({12, 5}), Nx.broadcast(0.0, {5}), random({5, 3}), Nx.broadcast(0.0, {3})}

      for device <- [:cpu, :blas] do
        ops =
          Enum.map(
            Cascade.Compiler.explain(&Fns.step/3, [params, x, y], device: device).steps,
            & &1.op
          )

        refute :transpose in ops
      end
    end

    test "halves agree with the evaluator within their tolerance" do
      for type <- [:f16, :bf16] do
        a = random({16, 8}, type)
        b = random({16, 8}, type, 5)
        {c, e} = both(&Fns.half/2, [a, b])
        assert c.type == Nx.Type.normalize!(type)
        assert_close(c, e, if(type == :f16, do: 1.0e-3, else: 1.0e-2))
      end
    end

    test "every result is a tensor of its own, even one that is a constant" do
      # 16 f32 are more than a value holds (Cascade.Tensor): the sums are resources
      a = random({16})
      fun = Nx.Defn.jit(&Fns.containers/2, compiler: Cascade.Compiler)
      first = fun.(a, a)
      Nx.backend_deallocate(first.const)
      second = fun.(a, a)
      assert Nx.to_number(second.const) == 7
      refute cx(first.sum).ref == cx(second.sum).ref
    end

    test "a small result on a host device is a value, like an op's" do
      fun = Nx.Defn.jit(&Fns.containers/2, compiler: Cascade.Compiler)
      a = Nx.tensor([1.0, 2.0, 3.0], backend: Cascade.Backend)
      first = fun.(a, a)
      assert is_binary(cx(first.sum).ref)
      assert first.sum == Nx.add(a, a)
      assert fun.(a, a) == first
    end

    test "a result that is an input is that input" do
      a = random({4})
      {pair_a, _} = Nx.Defn.jit_apply(&Fns.containers/2, [a, a], compiler: Cascade.Compiler).pair
      assert cx(pair_a).ref == cx(a).ref
    end

    test "one program per signature; a call runs its steps once each" do
      fun = Nx.Defn.jit(&Fns.elementwise/2, compiler: Cascade.Compiler)
      a = random({5})
      fun.(a, a)
      steps = length(Cascade.Compiler.explain(&Fns.elementwise/2, [a, a]).steps)
      Cascade.reset_stats()
      fun.(a, a)

      calls =
        Cascade.stats()
        |> Enum.map(fn {_, %{calls: n}} -> n end)
        |> Enum.sum()

      assert calls == steps

      # another shape compiles another program, with the shapes it was built for
      b = random({2, 3})
      assert fun.(b, b).shape == {2, 3}
      assert fun.(a, a).shape == {5}
    end

    test "the cache tells apart calls whose flat tensors agree but whose arguments differ" do
      double =
        Nx.Defn.jit(fn c -> Map.new(c, fn {k, v} -> {k, Nx.multiply(v, 2)} end) end,
          compiler: Cascade.Compiler
        )

      x = Nx.tensor([1.0, 2.0])
      assert %{a: a} = double.(%{a: x})
      assert %{b: b} = double.(%{b: x})
      assert Nx.to_flat_list(a) == [2.0, 4.0] and Nx.to_flat_list(b) == [2.0, 4.0]

      # a tuple, then a map, of the same tensors
      swap =
        Nx.Defn.jit(
          fn
            {p, q} -> {q, p}
            %{p: p, q: q} -> %{p: q, q: p}
          end,
          compiler: Cascade.Compiler
        )

      y = Nx.tensor([3.0])
      assert {_, _} = swap.({x, y})
      assert %{p: p} = swap.(%{p: x, q: y})
      assert Nx.to_flat_list(p) == [3.0]

      # names are part of the result
      named = Nx.Defn.jit(&Nx.exp/1, compiler: Cascade.Compiler)
      assert named.(Nx.tensor([0.0], names: [:i])).names == [:i]
      assert named.(Nx.tensor([0.0], names: [:j])).names == [:j]

      # a struct's other fields are constants of the trace
      scale =
        Nx.Defn.jit(fn %{x: x, scale: s} -> Nx.multiply(x, s) end,
          compiler: Cascade.Compiler
        )

      alias Cascade.CompilerTest.Scaled
      assert Nx.to_flat_list(scale.(%Scaled{x: x, scale: 2})) == [2.0, 4.0]
      assert Nx.to_flat_list(scale.(%Scaled{x: x, scale: 3})) == [3.0, 6.0]
    end

    test "a tensor captured from another backend, returned or read, is a constant on the device" do
      key = Nx.tensor([13, 15, 26, 6], type: :u8, backend: Nx.BinaryBackend)
      both = Nx.Defn.jit(fn x -> {Nx.add(x, 1), key} end, compiler: Cascade.Compiler)

      for _ <- 1..2 do
        {sum, got} = both.(Nx.tensor([1.0]))
        assert Nx.to_flat_list(sum) == [2.0]
        assert Nx.to_flat_list(got) == [13, 15, 26, 6] and got.type == {:u, 8}
        assert %Cascade.Backend{} = got.data
      end

      read = Nx.Defn.jit(fn x -> Nx.add(x, key) end, compiler: Cascade.Compiler)
      assert Nx.to_flat_list(read.(Nx.tensor([1.0]))) == [14.0, 16.0, 27.0, 7.0]
    end

    test "a call evaluates only the arguments the function reads or returns" do
      x = Nx.tensor([1.0, 2.0])
      first = Nx.Defn.jit(fn a, _b -> Nx.multiply(a, 3) end, compiler: Cascade.Compiler)
      assert Nx.to_flat_list(first.(x, Nx.template({2}, :f32))) == [3.0, 6.0]

      info = Cascade.Compiler.explain(fn a, _b -> Nx.multiply(a, 3) end, [x, x])
      assert {info.inputs, info.input_positions} == {1, [0]}

      lazy = %Cascade.CompilerTest.LazyPair{a: x, b: Nx.tensor([5.0])}
      only_a = Nx.Defn.jit(fn pair -> Nx.add(pair.a, 1) end, compiler: Cascade.Compiler)
      assert Nx.to_flat_list(only_a.(lazy)) == [2.0, 3.0]

      # returned as it is, or read: evaluated
      {a, _} = Nx.Defn.jit(fn a, b -> {a, Nx.exp(b)} end, compiler: Cascade.Compiler).(x, x)

      assert Nx.to_flat_list(a) == [1.0, 2.0]

      assert_raise RuntimeError, "don't call b", fn ->
        Nx.Defn.jit(fn pair -> Nx.add(pair.b, 1) end, compiler: Cascade.Compiler).(lazy)
      end
    end

    test "a request too large for any device is a Cascade.Error, never a VM abort" do
      # recording runs out of memory, so the function runs through the evaluator: on the
      # device, not on Nx.BinaryBackend (whose binary_alloc aborts the VM at 4 TiB)
      huge =
        Nx.Defn.jit(fn x -> Nx.sum(Nx.broadcast(x, {1_048_576, 1_048_576})) end,
          compiler: Cascade.Compiler
        )

      for _ <- 1..2 do
        error =
          assert_raise Cascade.Error, fn -> huge.(Nx.tensor(1.0, backend: Nx.BinaryBackend)) end

        assert error.code == :out_of_memory
      end
    end

    test "partitions: one per device of the driver, or of :devices, times :max_concurrency" do
      devices = fn opts ->
        Enum.map(Cascade.Compiler.__partitions_options__(opts), & &1[:device])
      end

      assert devices.(device: :test) == [:test, {:test, 1}]

      assert devices.(device: {:test, 1}, max_concurrency: 2) == [
               :test,
               :test,
               {:test, 1},
               {:test, 1}
             ]

      assert devices.(devices: [:cpu, {:test, 1}]) == [:cpu, {:test, 1}]
      assert devices.(device: :host) == [Cascade.Device.host()]
      assert devices.([]) == [Cascade.Device.default()]

      # Nx.Serving with partitions: true runs batches on both test devices
      {:ok, _} = Application.ensure_all_started(:nx)

      serving =
        Nx.Serving.new(fn opts -> Nx.Defn.jit(&Nx.multiply(&1, 3), opts) end,
          compiler: Cascade.Compiler,
          device: :test
        )

      name = :"partitions_#{System.unique_integer([:positive])}"

      start_supervised!(
        {Nx.Serving,
         serving: serving, name: name, batch_size: 2, batch_timeout: 50, partitions: true}
      )

      calls = fn device ->
        Cascade.stats()
        |> Enum.filter(&match?({{^device, :multiply, _}, _}, &1))
        |> Enum.map(fn {_, %{calls: n}} -> n end)
        |> Enum.sum()
      end

      before = {calls.(:test), calls.({:test, 1})}

      results =
        1..16
        |> Task.async_stream(
          fn k -> {k, Nx.Serving.batched_run(name, Nx.Batch.stack([Nx.tensor([k, 2 * k])]))} end,
          max_concurrency: 16
        )
        |> Enum.map(fn {:ok, r} -> r end)

      for {k, got} <- results, do: assert(Nx.to_flat_list(got) == [3 * k, 6 * k])
      assert calls.(:test) > elem(before, 0)
      assert calls.({:test, 1}) > elem(before, 1)
    end

    test "partitions: true serves on every host and OpenCL device that is available" do
      {:ok, _} = Application.ensure_all_started(:nx)

      for %{device: device, available: true} <- Cascade.Device.list(),
          device in [:cpu, :blas, :opencl] do
        serving =
          Nx.Serving.new(fn opts -> Nx.Defn.jit(&Nx.add(Nx.multiply(&1, 2), 1), opts) end,
            compiler: Cascade.Compiler,
            device: device,
            max_concurrency: 2
          )

        name = :"partitions_#{device}_#{System.unique_integer([:positive])}"

        start_supervised!(
          {Nx.Serving,
           serving: serving, name: name, batch_size: 4, batch_timeout: 5, partitions: true},
          id: name
        )

        results =
          1..12
          |> Task.async_stream(fn k ->
            {k, Nx.Serving.batched_run(name, Nx.Batch.stack([Nx.tensor([k, -k], type: :f32)]))}
          end)
          |> Enum.map(fn {:ok, r} -> r end)

        for {k, got} <- results,
            do: assert(Nx.to_flat_list(got) == [2.0 * k + 1, -2.0 * k + 1], inspect(device))
      end
    end

    test "a bad option raises ArgumentError naming it; other compilers' options pass" do
      x = Nx.tensor([1.0, 2.0])

      for {opts, message} <- [
            {[donate: [5]],
             ~r/:donate names argument position\(s\) \[5\], but the function takes 2/},
            {[donate: [-1]], ~r/option :donate takes a list of argument positions \(integers/},
            {[donate: 0], ~r/option :donate takes a list of argument positions, got: 0/},
            {[max_concurrency: -1],
             ~r/option :max_concurrency takes a positive integer, got: -1/},
            {[cache: :maybe], ~r/option :cache takes true or false, got: :maybe/},
            {[device: "blas"], ~r/option :device takes a device such as :cpu/}
          ] do
        assert_raise ArgumentError, message, fn ->
          Nx.Defn.jit(&Nx.add/2, [compiler: Cascade.Compiler] ++ opts).(x, x)
        end
      end

      assert_raise ArgumentError, ~r/option :max_concurrency takes a positive integer/, fn ->
        Cascade.Compiler.__partitions_options__(max_concurrency: 0)
      end

      assert Cascade.Compiler.__partitions_options__(max_concurrency: 2) |> length() == 2

      assert_raise ArgumentError, ~r/option :devices takes a non-empty list of devices/, fn ->
        Cascade.Compiler.__partitions_options__(devices: [])
      end

      assert_raise ArgumentError, ~r/unknown device :nowhere/, fn ->
        Cascade.Compiler.__partitions_options__(devices: [:nowhere])
      end

      # EXLA's, Nx.Serving's and Axon's options are theirs
      sum =
        Nx.Defn.jit(&Nx.add/2,
          compiler: Cascade.Compiler,
          client: :host,
          batch_keys: [:a],
          debug: true
        )

      assert Nx.to_flat_list(sum.(x, x)) == [2.0, 4.0]
    end

    test "inputs on another backend or device are copied to the program's device" do
      a = Nx.tensor([1.0, 2.0], backend: Nx.BinaryBackend)
      b = Nx.tensor([3.0, 4.0], backend: {Cascade.Backend, device: :cpu})
      {c, e} = both(&Fns.elementwise/2, [a, b], device: :blas)
      assert_close(c, e, 1.0e-6)
      assert c.data.device == :blas
    end

    test "cpu and blas programs agree" do
      a = random({6, 7})
      b = random({6, 7}, :f32, 9)

      on_cpu =
        Nx.Defn.jit_apply(&Fns.elementwise/2, [a, b], compiler: Cascade.Compiler, device: :cpu)

      on_blas =
        Nx.Defn.jit_apply(&Fns.elementwise/2, [a, b], compiler: Cascade.Compiler, device: :blas)

      assert on_cpu.data.device == :cpu
      assert_close(on_cpu, on_blas, 1.0e-6)
    end

    test "a loop's small state comes back as values, also when the device asks for a collection" do
      # every allocation asks for a collection: the loop's answer comes wrapped in the request
      Cascade.Native.set_gc_interval(1)

      try do
        fun = Nx.Defn.jit(&Fns.count_up/1, compiler: Cascade.Compiler)
        # the counter is a value; a result of 64 f32 is a resource, which grows the live set
        for a <- [Nx.tensor([1.0, -5.0]), Nx.iota({64}, type: :f32)], _ <- 1..3 do
          c = fun.(Nx.backend_transfer(a, Cascade.Backend))
          assert is_binary(cx(c).ref) == (Nx.size(a) == 2)
          assert Nx.to_flat_list(c) == Nx.to_flat_list(Nx.add(a, 3))
        end
      after
        Cascade.Native.set_gc_interval(Application.fetch_env!(:cascade, :gc_interval))
      end
    end

    test "a while runs in stages: each stage a program, the loop on the BEAM" do
      a = Nx.tensor([1.0, -5.0])
      {c, e} = both(&Fns.count_up/1, [a])
      assert_close(c, e, 0)
      assert Nx.to_flat_list(c) == [4.0, -2.0]

      info = Cascade.Compiler.explain(&Fns.count_up/1, [a])
      assert info.mode == :staged
      assert Keyword.keys(info.stages) == [:init, :cond, :body, :rest]
      assert Enum.map(info.stages[:cond].steps, & &1.op) == [:less]
      assert Enum.all?(info.steps, &(&1.route == :native))

      # two whiles, the second starting from the first's result, and a cond on both
      x = Nx.tensor([1.0, -5.0])
      {c, e} = both(&Fns.loops/2, [x, Nx.tensor(3.0)])
      assert_close(c, e, 0)
      {c, e} = both(&Fns.loops/2, [Nx.tensor([-1.0, -2.0]), Nx.tensor(-30.0)])
      assert_close(c, e, 0)
      assert Cascade.Compiler.explain(&Fns.loops/2, [x, Nx.tensor(3.0)]).mode == :staged

      # a while in a while's body; a loop that runs no turn
      for n <- [0, 1, 3] do
        {c, e} = both(&Fns.nested/2, [Nx.tensor([0.5, -1.0, 2.0]), n])
        assert_close(c, e, 1.0e-6)
      end

      info = Cascade.Compiler.explain(&Fns.nested/2, [x, 3])
      assert info.mode == :staged
      assert info.stages[:body].mode == :staged
    end

    test "a loop of two programs is one call into C, which yields to the BEAM's scheduler" do
      # 100,000 cheap turns: the loop runs about half a millisecond of estimated work a call
      # and yields; no call holds a normal scheduler for 2 ms or more
      x = Nx.tensor([0.0, 10.0])
      :ok = Cascade.Native.watch_normal(2000)

      {c, records} =
        try do
          task =
            Task.async(fn ->
              Nx.Defn.jit_apply(&Fns.spin/2, [x, 100_000], compiler: Cascade.Compiler)
            end)

          c = Task.await(task, 120_000)
          {records, _dropped} = Cascade.Native.normal_records()
          {c, Enum.filter(records, &(&1.pid == task.pid))}
        after
          Cascade.Native.watch_normal(false)
        end

      # x -> x / 2 + 1 converges to 2
      assert Nx.to_flat_list(c) == [2.0, 2.0]
      held = Enum.filter(records, &(&1.cpu_us >= 2000))
      assert held == [], "calls held a normal scheduler: #{inspect(held)}"

      # the same loop on the evaluator, fewer turns
      {c, e} = both(&Fns.spin/2, [x, 1000])
      assert_close(c, e, 0)

      # a turn above the dirty threshold runs the whole loop on a dirty scheduler
      m = random({64, 64})
      v = random({64}, :f32, 3)
      old = Cascade.Native.set_dirty_thresholds(0.0, 0)

      try do
        {c, e} = both(&Fns.power_iterate/3, [m, v, 20])
        assert_close(c, e, 1.0e-5)
      after
        {cost, bytes} = old
        Cascade.Native.set_dirty_thresholds(cost, bytes)
      end
    end

    test "donated inputs: their last elementwise reader writes into their buffers" do
      params =
        {random({8, 4}), random({4}, :f32, 2), random({4, 3}, :f32, 3), random({3}, :f32, 4)}

      x = random({5, 8}, :f32, 5)
      y = Nx.eye(5) |> Nx.slice([0, 0], [5, 3])
      expected = Nx.Defn.jit_apply(&Fns.step/3, [params, x, y], compiler: Nx.Defn.Evaluator)

      # through the binary backend, so that every parameter is a resource: a small result of an
      # op is a value (Cascade.Tensor), which has no buffer to give
      copy = fn params ->
        Composite.traverse(params, fn t ->
          t |> Nx.backend_copy(Nx.BinaryBackend) |> Nx.backend_copy(Cascade.Backend)
        end)
      end

      donated = copy.(params)
      step = Nx.Defn.jit(&Fns.step/3, compiler: Cascade.Compiler, donate: [0])
      {loss, new_params} = step.(donated, x, y)
      assert_close(loss, elem(expected, 0), 1.0e-6)
      assert_close(new_params, elem(expected, 1), 1.0e-6)

      # the updates w - 0.1 * g wrote into the donated parameters: those are freed, the inputs
      # not donated are not
      for t <- Tuple.to_list(donated), do: assert(Cascade.Native.freed?(cx(t).ref))
      refute Cascade.Native.freed?(cx(x).ref)

      assert_raise ArgumentError, ~r/donated to a compiled function/, fn ->
        Nx.add(elem(donated, 0), 1)
      end

      info = Cascade.Compiler.explain(&Fns.step/3, [params, x, y], donate: [0])

      assert info.steps |> Enum.map(& &1.donated) |> Enum.reject(&is_nil/1) |> Enum.sort() ==
               [0, 1, 2, 3]

      # without the option nothing is donated
      kept = copy.(params)
      {_, again} = Nx.Defn.jit_apply(&Fns.step/3, [kept, x, y], compiler: Cascade.Compiler)
      assert_close(again, elem(expected, 1), 1.0e-6)
      for t <- Tuple.to_list(kept), do: refute(Cascade.Native.freed?(cx(t).ref))

      assert Enum.all?(
               Cascade.Compiler.explain(&Fns.step/3, [params, x, y]).steps,
               &is_nil(&1.donated)
             )
    end

    test "a donated tensor that is also another input, or returned, keeps its buffer" do
      a = Nx.backend_copy(random({6}), Cascade.Backend)
      fun = Nx.Defn.jit(&Fns.elementwise/2, compiler: Cascade.Compiler, donate: [0])
      expected = Nx.Defn.jit_apply(&Fns.elementwise/2, [a, a], compiler: Nx.Defn.Evaluator)
      assert_close(fun.(a, a), expected, 1.0e-6)
      refute Cascade.Native.freed?(cx(a).ref)

      b = Nx.backend_copy(random({6}), Cascade.Backend)

      both =
        Nx.Defn.jit(fn a, b -> {a, Nx.add(Nx.exp(a), b)} end,
          compiler: Cascade.Compiler,
          donate: [0]
        )

      {same, _} = both.(b, b)
      assert Nx.to_flat_list(same) == Nx.to_flat_list(b)
      refute Cascade.Native.freed?(cx(b).ref)

      assert_raise ArgumentError, ~r/donate/, fn ->
        Nx.Defn.jit_apply(&Fns.elementwise/2, [a, a], compiler: Cascade.Compiler, donate: :all)
      end
    end

    test "a while in a function of a container argument, and a predicate passed through" do
      pair = {Nx.tensor([1.0, 2.0]), Nx.tensor([3.0, 5.0])}
      {c, e} = both(&Fns.tuple_arg/1, [pair])
      assert_close(c, e, 0)
      assert Nx.to_flat_list(c) == [303.0, 405.0]

      x = Nx.tensor([1.0, 2.0])
      {c, e} = both(&Fns.flag_loop/2, [x, Nx.tensor(1, type: :u8)])
      assert_close(c, e, 0)
      assert Nx.to_flat_list(c) == [2.0, 4.0]

      # a freed predicate raises, it does not crash the VM
      # (a resource: a scalar made by an op is a value, which deallocating leaves as it is)
      one = Cascade.from_binary(<<1>>, :u8, {})
      flag = %{Nx.tensor(1, type: :u8) | data: %Cascade.Backend{tensor: one, device: one.device}}
      Nx.backend_deallocate(flag)

      assert_raise ArgumentError, ~r/freed/, fn ->
        Nx.Defn.jit_apply(&Fns.flag_loop/2, [x, flag], compiler: Cascade.Compiler)
      end
    end

    test "a cond becomes selects over its branches, all computed" do
      a = Nx.tensor([1.0, -5.0])

      for input <- [a, Nx.negate(a)] do
        {c, e} = both(&Fns.choose/1, [input])
        assert_close(c, e, 0)
      end

      info = Cascade.Compiler.explain(&Fns.choose/1, [a])
      assert info.mode == :program
      assert :select in Enum.map(info.steps, & &1.op)

      for k <- [0, 1, 2, 7] do
        {c, e} = both(&Fns.chooser/2, [Nx.tensor([3.0, -1.0, 2.0]), k])
        assert_close(c, e, 0)
      end
    end

    test "a cond with a while in a branch runs through the evaluator, as explain/3 says" do
      for a <- [Nx.tensor([1.0, 2.0]), Nx.tensor([-1.0, -2.0])] do
        {c, e} = both(&Fns.loop_in_branch/1, [a])
        assert_close(c, e, 0)
      end

      assert {:evaluator, reason} =
               Cascade.Compiler.explain(&Fns.loop_in_branch/1, [Nx.tensor([1.0])]).mode

      assert reason =~ "while in a branch"
    end

    test "compiling never runs a fallback on its placeholder zeros" do
      # Nx.BinaryBackend's integer quotient raises on a zero divisor: the recording stops
      # before the fallback runs, and the evaluator runs the function on the real inputs
      {c, e} =
        ExUnit.CaptureLog.with_log(fn ->
          both(&Fns.divide_ints/2, [Nx.tensor([7, -9]), Nx.tensor([2, 4])])
        end)
        |> elem(0)

      assert Nx.to_flat_list(c) == [3, -2]
      assert_close(c, e, 0)
      assert {:evaluator, _} = Cascade.Compiler.explain(&Fns.divide_ints/2, [1, 1]).mode
    end

    test "hooks run, through the evaluator" do
      a = Nx.tensor([1.0, 2.0])
      me = self()

      fun =
        Nx.Defn.jit(&Fns.hooked/1,
          compiler: Cascade.Compiler,
          hooks: %{doubled: &send(me, {:hook, &1})}
        )

      assert Nx.to_flat_list(fun.(a)) == [3.0, 5.0]
      assert_received {:hook, t}
      assert Nx.to_flat_list(t) == [2.0, 4.0]

      # the evaluator's inputs and results on the device asked for, its ops counted there
      on_blas =
        Nx.Defn.jit(&Fns.hooked/1,
          compiler: Cascade.Compiler,
          device: :blas,
          hooks: %{doubled: &send(me, {:hook, &1})}
        )

      Cascade.reset_stats()
      result = on_blas.(a)
      assert %Cascade.Backend{device: :blas} = result.data
      assert_received {:hook, %Nx.Tensor{data: %Cascade.Backend{device: :blas}}}
      assert Enum.any?(Cascade.stats(), fn {{dev, _op, _route}, _} -> dev == :blas end)

      assert {:evaluator, reason} =
               Cascade.Compiler.explain(&Fns.hooked/1, [a], hooks: %{doubled: &IO.inspect/1}).mode

      assert reason =~ "hooks"
      # without a hook to run, the function compiles to a program
      assert Cascade.Compiler.explain(&Fns.hooked/1, [a]).mode == :program
    end

    test "a function that falls back to Nx.BinaryBackend runs through the evaluator" do
      a = Nx.tensor([1.0, 2.0])
      {c, e} = ExUnit.CaptureLog.with_log(fn -> both(&Fns.with_fallback/1, [a]) end) |> elem(0)
      assert_close(c, e, 1.0e-6)
      assert {:evaluator, reason} = Cascade.Compiler.explain(&Fns.with_fallback/1, [a]).mode
      assert reason =~ "BinaryBackend"
    end

    test "complex numbers compile to a program" do
      a = Nx.tensor([1.0, 2.0])
      {c, e} = both(&Fns.with_complex/1, [a])
      assert_close(c, e, 1.0e-6)
      assert Cascade.Compiler.explain(&Fns.with_complex/1, [a]).mode == :program
    end

    test "an unknown device is refused" do
      assert_raise ArgumentError, ~r/device/, fn ->
        Nx.Defn.jit_apply(&Fns.elementwise/2, [1.0, 2.0],
          compiler: Cascade.Compiler,
          device: :nope
        )
      end
    end

    test "__to_backend__ names the program's device" do
      assert Cascade.Compiler.__to_backend__(device: :cpu) == {Cascade.Backend, device: :cpu}
    end
  end
end
