defmodule Cascade.ONNX do
  @moduledoc """
  ONNX models on Cascade's devices: load an `.onnx` file, pass named inputs, get named outputs.

  Each node of the graph runs as Cascade ops, through the same negotiation as any call: natively
  where the device has the op, decomposed into primitives on the device where it has not, moved
  to the cpu only as a last resort. The model's initializers (its weights) are uploaded to the
  device once, at load.

  At load the graph is also planned: what depends only on constants (Constant nodes, shapes
  computed from weights) is computed then, and products by constant weights become Cascade's
  `dense` op (Gemm, or MatMul with a bias Add, with a following Relu, Sigmoid or Tanh: one
  GEMM). At the first run of each input signature (types, shapes, device) the run is recorded
  into one program in C (`Cascade.Compiler`'s programs: one call into C per run, elementwise
  chains fused); the later runs of that signature are that call. A graph that reads an input's
  values back into Elixir (a branch on an input, a shape computed from one) runs node by node
  instead, and `explain/2` always does.

      {:ok, model} = Cascade.ONNX.load("model.onnx", device: :host)
      %{"y" => y} = Cascade.ONNX.run(model, %{"x" => {:f32, {1, 3}, <<...>>}})

  The file is parsed by a protobuf decoder written in Elixir (`Cascade.ONNX.Proto`): a
  malformed, truncated or hostile file gives `{:error, message}`, never a crash. An operator
  Cascade cannot run is an error naming the operator and the node, at load, before anything
  runs. `supported_operators/0` lists the operators it runs (from the default domain, opsets 7
  to 17, and Adagrad, Adam and Momentum from `ai.onnx.preview.training`); `mix cascade.onnx`
  runs ONNX's own backend node tests against them. If, Loop and Scan run their body graphs node
  by node the same way; a body sees the values of the graphs around it.

  Element types: float, float16, bfloat16, double, int8, int16, int32, int64, uint8, uint16,
  uint32, uint64 and bool (as u8, 0 or 1) — Cascade's types. A tensor of another type (string,
  complex) is an error naming it.
  """

  alias Cascade.Program
  alias Cascade.ONNX.{Check, Control, Ops, Plan, Proto}

  defstruct [
    :graph,
    :opset,
    :device,
    :initializers,
    :ir_version,
    :producer,
    :inputs,
    :outputs,
    :id
  ]

  @type t :: %__MODULE__{}

  # programs are cached in the compiler's table: it starts with the application
  @programs :cascade_compiled
  @cache_limit 512

  defmodule Error do
    @moduledoc "Raised by `Cascade.ONNX.run/2` when a model cannot run on the inputs given."
    defexception [:message]
  end

  @doc """
  Loads a model from a path (a string or a charlist) or from the bytes of an `.onnx` file:
  `{:ok, model}` or `{:error, message}`. A string is a path when it ends in `.onnx` or names a
  file.

  The graph is checked before anything runs: its operators, the kinds of their attributes, and
  its wiring (each node input is computed before it, each value assigned once). Decoding takes
  at most 1.5 times the file's size plus 24 MB: a file of many tiny fields is an error.

  Options: `device:` (default: the default device) where the initializers are uploaded and
  every node runs.

      iex> Cascade.ONNX.load(<<0x0A, 0x7F>>)
      {:error, "the file is not an ONNX model: a field of 127 bytes runs past the end (0 left)"}
  """
  @spec load(Path.t() | binary, keyword) :: {:ok, t} | {:error, String.t()}
  def load(path_or_binary, opts \\ [])

  def load(path_or_binary, opts) when is_binary(path_or_binary) and is_list(opts),
    do: load_source(path_or_binary, opts)

  # a path as a charlist
  def load([_ | _] = path, opts) when is_list(opts) do
    if :io_lib.printable_unicode_list(path),
      do: load_source({:path, List.to_string(path)}, opts),
      else: bad_load!(path, opts)
  end

  def load(path_or_binary, opts), do: bad_load!(path_or_binary, opts)

  defp bad_load!(path_or_binary, opts) do
    raise ArgumentError,
          "Cascade.ONNX.load/2: expected a path or the bytes of an .onnx file and a keyword " <>
            "list, got: #{inspect(path_or_binary, limit: 5)} and #{inspect(opts, limit: 5)}"
  end

  defp load_source(source, opts) do
    unless Keyword.keyword?(opts) do
      raise ArgumentError,
            "Cascade.ONNX.load/2: expected options as a keyword list, got: #{inspect(opts, limit: 5)}"
    end

    for {key, _} <- opts, key != :device do
      raise ArgumentError,
            "Cascade.ONNX.load/2: unknown option #{inspect(key)}, expected :device"
    end

    # a device that does not exist is refused by name before the file is read
    if device = opts[:device], do: Cascade.Device.id!(device)

    # an attribute's string is the file's bytes as they are: a message naming it stays UTF-8
    with {:error, message} <- load_checked(source, opts),
         do: {:error, Proto.utf8(message)}
  end

  defp load_checked(source, opts) do
    with {:ok, bin} <- read(source),
         {:ok, m} <- decode(bin),
         :ok <- Check.check(m),
         {:ok, inits} <- upload(m.graph.initializers, opts[:device]) do
      init_names = MapSet.new(Map.keys(inits))
      opset = Map.get(m.opset, "", Map.get(m.opset, "ai.onnx", 1))
      # programs are cached under the model's contents and device: loading the same file again
      # finds them (a new reference per load would leave the old ones, and the weights they
      # hold, in the cache until it fills)
      id = {__MODULE__, :erlang.md5(bin), opts[:device]}
      graph = Plan.plan(m.graph, inits, %{opset: opset, device: opts[:device], id: id})

      {:ok,
       %__MODULE__{
         id: id,
         graph: graph,
         opset: opset,
         device: opts[:device],
         initializers: graph.values,
         ir_version: m.ir_version,
         producer: m.producer,
         inputs: for(i <- m.graph.inputs, not MapSet.member?(init_names, i.name), do: i.name),
         outputs: for(o <- m.graph.outputs, do: o.name)
       }}
    end
  end

  # A path: a charlist, or a printable binary that ends in .onnx or names a file; else the bytes
  defp read({:path, path}) do
    case File.read(path) do
      {:ok, data} -> {:ok, data}
      {:error, reason} -> {:error, "cannot read #{path}: #{:file.format_error(reason)}"}
    end
  end

  defp read(bin) do
    if String.printable?(bin) and
         (String.ends_with?(bin, ".onnx") or (byte_size(bin) < 4096 and File.regular?(bin))),
       do: read({:path, bin}),
       else: {:ok, bin}
  end

  defp decode(bin) do
    case Proto.decode_model(bin) do
      {:ok, m} -> {:ok, m}
      {:error, message} -> {:error, "the file is not an ONNX model: " <> message}
    end
  end

  defp node_label(node, i), do: Check.describe(node, i)

  @doc false
  # A graph's initializers as tensors on `device`, by name.
  def upload(list, device) do
    Enum.reduce_while(list, {:ok, %{}}, fn t, {:ok, acc} ->
      case to_tensor(t, device) do
        {:ok, tensor} -> {:cont, {:ok, Map.put(acc, t.name, tensor)}}
        {:error, message} -> {:halt, {:error, "initializer #{inspect(t.name)}: " <> message}}
      end
    end)
  end

  # ONNX element types as Cascade's
  @types %{
    1 => :f32,
    2 => :u8,
    3 => :s8,
    4 => :u16,
    5 => :s16,
    6 => :s32,
    7 => :s64,
    9 => :u8,
    10 => :f16,
    11 => :f64,
    12 => :u32,
    13 => :u64,
    16 => :bf16
  }
  @type_names %{
    8 => "string",
    14 => "complex64",
    15 => "complex128"
  }

  @doc false
  def cascade_type(onnx_type), do: Map.fetch(@types, onnx_type)

  @doc false
  # A decoded TensorProto as a Cascade tensor.
  def to_tensor(%{data: :external}, _device),
    do: {:error, "the data is in an external file, which Cascade does not read"}

  def to_tensor(%{data_type: dt, dims: dims, data: data, count: count}, device) do
    case Map.fetch(@types, dt) do
      {:ok, type} ->
        size = Cascade.Type.byte_size(type)

        if is_binary(data) and byte_size(data) == count * size do
          try do
            {:ok, Cascade.from_binary(data, type, List.to_tuple(dims), device_opt(device))}
          rescue
            e in [ArgumentError, Cascade.Error] -> {:error, Exception.message(e)}
          end
        else
          {:error, "expected #{count} elements of #{type}, got #{data_size(data)}"}
        end

      :error ->
        {:error, "element type #{Map.get(@type_names, dt, "code #{dt}")} is not supported"}
    end
  end

  defp data_size(data) when is_binary(data), do: "#{byte_size(data)} bytes"
  defp data_size({:values, n}), do: "#{n} values"
  defp data_size(_), do: "no data"

  defp device_opt(nil), do: []
  defp device_opt(device), do: [device: device]

  @doc """
  The operators `load/2` accepts, sorted.

      iex> "Conv" in Cascade.ONNX.supported_operators()
      true
  """
  @spec supported_operators() :: [String.t()]
  def supported_operators, do: Enum.sort(Ops.names() ++ Control.names())

  @doc """
  Runs the model on `inputs`, a map from the graph's input names to Cascade tensors or plain
  `{type, shape, binary}` terms; returns a map from its output names to tensors. Raises
  `Cascade.ONNX.Error` for a missing input, and when a node rejects its operands (the message
  names the node).
  """
  @spec run(t, %{String.t() => Cascade.Tensor.t() | {atom, tuple, binary}}) :: %{
          String.t() => Cascade.Tensor.t()
        }
  def run(%__MODULE__{} = model, inputs) when is_map(inputs), do: run_planned(model, inputs)

  def run(model, inputs), do: not_model_and_inputs!("run/2", model, inputs)

  defp not_model_and_inputs!(fun, model, inputs) do
    raise ArgumentError,
          "Cascade.ONNX.#{fun}: expected a model from Cascade.ONNX.load/2 and a map of its " <>
            "inputs by name, got: #{inspect(model, limit: 3)} and #{inspect(inputs, limit: 3)}"
  end

  @doc """
  An `Nx.Serving` that runs the model on batches of requests (Nx is an optional dependency:
  this needs it). Each request is a map of the model's inputs by name, Nx tensors (any backend)
  whose first axis is the batch: `Nx.Serving.run/2` and `Nx.Serving.batched_run/2` stack the
  requests they batch along it, run the model once per batch (one recorded program per batch
  shape) and give each request its own rows of every output, as a map by name of Nx tensors on
  `Cascade.Backend`. The model's batch axis must be dynamic (or every request of the fixed size).

  Options: `batch_size:` (the most rows a batch holds; `run/2` splits larger inputs),
  `preprocess:` (a function of the request giving that map, as `Nx.Serving.client_preprocessing`
  takes one, but returning the map alone), `postprocess:` (a function of the outputs map of
  one request, run where the serving runs) and `max_concurrency:` (default 1: how many batches
  run at once, each in its own partition on the model's device, when the serving is started
  with `partitions: true`).

  Across nodes (`Nx.Serving.batched_run({:distributed, name}, request)`), the outputs leave
  the serving's node as `Nx.BinaryBackend` tensors: a Cascade tensor lives in the memory of the
  node that made it. Send requests as `Nx.BinaryBackend` tensors too (`Nx.backend_copy/1` as
  `batched_run/3`'s `distributed_preprocessing` copies Cascade ones).

      serving = Cascade.ONNX.serving(model, batch_size: 32)
      Nx.Serving.run(serving, %{"x" => Nx.iota({2, 784}, type: :f32)})
      # under a supervisor:
      # {Nx.Serving, serving: serving, name: Digits, batch_timeout: 2}
      # Nx.Serving.batched_run(Digits, %{"x" => row})
  """
  def serving(model, opts \\ [])

  def serving(%__MODULE__{} = model, opts) when is_list(opts) do
    unless Code.ensure_loaded?(Cascade.ONNX.Serving) do
      raise ArgumentError,
            "Cascade.ONNX.serving/2 needs Nx (an optional dependency of Cascade): add :nx to " <>
              "your application's dependencies"
    end

    for {key, _} <- opts, key not in [:batch_size, :preprocess, :postprocess, :max_concurrency] do
      raise ArgumentError,
            "Cascade.ONNX.serving/2: unknown option #{inspect(key)}, expected :batch_size, " <>
              ":preprocess, :postprocess or :max_concurrency"
    end

    concurrency = Keyword.get(opts, :max_concurrency, 1)

    unless is_integer(concurrency) and concurrency >= 1 do
      raise ArgumentError,
            "Cascade.ONNX.serving/2: option :max_concurrency takes a positive integer, got: " <>
              inspect(concurrency, limit: 3)
    end

    pre = Keyword.get(opts, :preprocess, &Function.identity/1)
    post = Keyword.get(opts, :postprocess, &Function.identity/1)

    # partitions: true asks Cascade.Compiler for them: max_concurrency on the model's device
    device = model.device || Cascade.Device.default()
    defn_options = [compiler: Cascade.Compiler, devices: [device], max_concurrency: concurrency]

    serving =
      apply(Nx.Serving, :new, [Cascade.ONNX.Serving, model, defn_options])
      |> then(
        &apply(Nx.Serving, :client_preprocessing, [
          &1,
          fn input -> {batch(pre.(input)), :client} end
        ])
      )
      |> then(
        &apply(Nx.Serving, :client_postprocessing, [&1, fn {out, _meta}, _info -> post.(out) end])
      )
      |> then(
        &apply(Nx.Serving, :distributed_postprocessing, [
          &1,
          fn out -> apply(Nx, :backend_copy, [out, Nx.BinaryBackend]) end
        ])
      )

    case opts[:batch_size] do
      nil -> serving
      n -> apply(Nx.Serving, :batch_size, [serving, n])
    end
  end

  def serving(model, opts) do
    raise ArgumentError,
          "Cascade.ONNX.serving/2: expected a model from Cascade.ONNX.load/2 and a keyword " <>
            "list of options, got: #{inspect(model, limit: 3)} and #{inspect(opts, limit: 3)}"
  end

  defp batch(inputs) when is_map(inputs) and not is_struct(inputs),
    do: apply(Nx.Batch, :concatenate, [[inputs]])

  defp batch(other) do
    raise ArgumentError,
          "Cascade.ONNX.serving/2: expected a request to be a map of the model's inputs by " <>
            "name (or preprocess: to make one), got: #{inspect(other, limit: 3)}"
  end

  @doc """
  Runs the model on `inputs` as `run/2` does and says how each node ran: a list with, per node
  of the plan, its index, name, operator, the file's nodes it stands for (`:fused`, for a node
  the load rewrote: `"Dense"` for `["MatMul", "Add", "Relu"]`), the Cascade calls it made by
  route (`:native`, `:decomposed`, `:cpu_fallback`) and devices, its route — the worst of its
  calls' (a node with one call moved to the cpu is `:cpu_fallback`; `:nothing_ran` for a node
  that ran no Cascade op, such as Shape, read from the tensor's description) — and `:time_us`,
  the microseconds it took (on a device with a queue, to enqueue its work).
  `Cascade.ONNX.explain_summary/1` counts the nodes per route, like the per-provider node
  counts of other runtimes. Nodes folded at load (constants, and what only depends on them) ran
  then and are not listed.

  The calls are read from `Cascade.stats/0` around each node, so calls made meanwhile by other
  processes are counted too: explain a model where nothing else runs.
  """
  @spec explain(t, map) :: [map]
  def explain(%__MODULE__{} = model, inputs) when is_map(inputs) do
    {_, steps} =
      evaluate(model, inputs, fn node, i, fun ->
        before = Cascade.stats()
        t0 = System.monotonic_time()
        results = fun.()
        time = System.monotonic_time() - t0
        calls = stats_delta(before, Cascade.stats())

        {results,
         %{
           node: i,
           name: node.name,
           op_type: node.op_type,
           fused: for(f <- Map.get(node, :fused, []), do: f.op_type),
           calls: calls,
           route: route(calls),
           time_us: System.convert_time_unit(time, :native, :microsecond)
         }}
      end)

    steps
  end

  def explain(model, inputs), do: not_model_and_inputs!("explain/2", model, inputs)

  @doc """
  `explain/2` on inputs of zeros with the types and shapes the graph declares for its inputs;
  raises `Cascade.ONNX.Error` when an input's shape is not fixed there (a named dimension):
  give inputs to `explain/2` then.
  """
  @spec explain(t) :: [map]
  def explain(%__MODULE__{} = model) do
    inputs =
      for name <- model.inputs, into: %{} do
        declared = Enum.find(model.graph.inputs, &(&1.name == name))

        with %{type: %{elem_type: et, shape: shape}} when is_list(shape) <- declared,
             {:ok, type} <- Map.fetch(@types, et),
             true <- Enum.all?(shape, &(is_integer(&1) and &1 >= 0)) do
          opts = [type: type] ++ if(model.device, do: [device: model.device], else: [])
          {name, Cascade.full(0, List.to_tuple(shape), opts)}
        else
          _ ->
            raise Error,
              message:
                "the input #{inspect(name)} has no fixed shape and type in the graph: " <>
                  "give inputs to Cascade.ONNX.explain/2"
        end
      end

    explain(model, inputs)
  end

  def explain(other) do
    raise ArgumentError,
          "Cascade.ONNX.explain/1: expected a model from Cascade.ONNX.load/2, got: " <>
            inspect(other, limit: 3)
  end

  @doc """
  How `load/2` planned the model and how its runs have gone so far: the plan's nodes, the file's
  nodes folded at load (`:folded`), the rewrites by kind (`:rewrites`, such as
  `"Gemm+Relu -> Dense"`), and per graph (`"main"`, or the control-flow node and attribute of a
  body) and input signature met, whether its runs are one program (`{:program, steps}`, the
  steps that run once chains are fused and folded into the convolutions before them) or go
  node by node, with the reason (`{:nodes, why}`).

      {:ok, model} = Cascade.ONNX.load("model.onnx")
      Cascade.ONNX.run(model, %{"x" => x})
      Cascade.ONNX.describe(model)
      #=> %{nodes: 3, folded: 2, rewrites: %{"Gemm+Relu -> Dense" => 1},
      #     runs: [%{graph: "main", device: :host, signature: [{:f32, {1, 784}}],
      #              mode: {:program, 3}}]}
  """
  @spec describe(t) :: map
  def describe(%__MODULE__{} = model) do
    labels = Map.new([{model.id, "main"} | bodies(model.graph.nodes)])

    runs =
      for {{__MODULE__, {id, device}, signature}, value} <- :ets.tab2list(@programs),
          Map.has_key?(labels, id) do
        mode =
          case value do
            %Program{program: program} ->
              {:program, length(Cascade.Native.program_steps(program))}

            {:nodes, why} ->
              {:nodes, why}
          end

        %{graph: labels[id], device: device, signature: signature, mode: mode}
      end

    rewrites =
      for %{fused: fused} = node <- model.graph.nodes do
        Enum.map_join(fused, "+", & &1.op_type) <> " -> " <> node.op_type
      end

    %{
      nodes: length(model.graph.nodes),
      folded: model.graph.folded,
      rewrites: Enum.frequencies(rewrites),
      runs: Enum.sort_by(runs, &(&1.graph != "main"))
    }
  end

  def describe(other) do
    raise ArgumentError,
          "Cascade.ONNX.describe/1: expected a model from Cascade.ONNX.load/2, got: " <>
            inspect(other, limit: 3)
  end

  # the planned body graphs' ids, labelled by their node and attribute
  defp bodies(nodes) do
    nodes
    |> Enum.with_index()
    |> Enum.flat_map(fn {node, i} ->
      for {attr, {:graph, %{id: id} = g}} <- Map.get(node, :attributes, %{}) do
        [{id, "#{node_label(node, i)} (#{node.op_type}) #{attr}"} | bodies(g.nodes)]
      end
      |> List.flatten()
    end)
  end

  @doc """
  The nodes of an `explain/2` answer counted per route.

      iex> Cascade.ONNX.explain_summary([%{route: :native}, %{route: :native}, %{route: :decomposed}])
      %{native: 2, decomposed: 1}
  """
  def explain_summary(steps) when is_list(steps) do
    Enum.frequencies_by(steps, fn
      %{route: route} ->
        route

      other ->
        raise ArgumentError,
              "Cascade.ONNX.explain_summary/1: expected the steps of explain/2, each a map " <>
                "with a :route, got: #{inspect(other, limit: 3)}"
    end)
  end

  def explain_summary(other) do
    raise ArgumentError,
          "Cascade.ONNX.explain_summary/1: expected the list explain/2 returns, got: " <>
            inspect(other, limit: 3)
  end

  defp stats_delta(before, later) do
    for {{device, op, route} = key, %{calls: n}} <- later,
        d = n - calls_in(before, key),
        d > 0,
        do: %{device: device, op: op, route: route, calls: d}
  end

  defp calls_in(stats, key) do
    case stats do
      %{^key => %{calls: n}} -> n
      _ -> 0
    end
  end

  defp route(calls) do
    routes = MapSet.new(calls, & &1.route)

    cond do
      MapSet.member?(routes, :cpu_fallback) -> :cpu_fallback
      MapSet.member?(routes, :decomposed) -> :decomposed
      calls == [] -> :nothing_ran
      true -> :native
    end
  end

  # Runs every node in order; `around.(node, index, fun)` runs the node (fun.() gives its
  # results) and returns {results, step}. Returns {outputs, steps}.
  defp evaluate(model, inputs, around), do: evaluate_fed(model, feed(model, inputs), around)

  # The inputs as tensors on the model's device, in the order of model.inputs, checked against
  # the types and shapes the graph declares
  defp feed(model, inputs) do
    for name <- model.inputs do
      case Map.fetch(inputs, name) do
        {:ok, v} ->
          t = input(v, model.device, name)
          check_input(t, name, Enum.find(model.graph.inputs, &(&1.name == name)))
          t

        :error ->
          raise Error, message: "the input #{inspect(name)} is missing"
      end
    end
  end

  # Runs every node in order on the fed inputs; returns {outputs by name, steps}
  defp evaluate_fed(model, tensors, around) do
    values = model.inputs |> Enum.zip(tensors) |> Enum.into(model.initializers)
    ctx = %{opset: model.opset, device: model.device}
    {values, steps} = run_nodes(model.graph.nodes, values, ctx, around)

    outputs =
      for name <- model.outputs, into: %{} do
        {name,
         Map.get(values, name) || raise(Error, message: "the graph computes no #{inspect(name)}")}
      end

    {outputs, steps}
  end

  # A run as one program per input signature (types, shapes, device), recorded at the
  # signature's first run, when the graph can be one: node by node where it cannot (a branch
  # or a shape that depends on the inputs' values), that decision cached too.
  defp run_planned(model, inputs) do
    tensors = feed(model, inputs)
    device = model.device || Cascade.Device.default()

    results =
      programmed({model.id, device}, tensors, device, fn ins ->
        {outputs, _} = by_nodes_with_steps(model, ins)
        Enum.map(model.outputs, &Map.fetch!(outputs, &1))
      end)

    model.outputs |> Enum.zip(results) |> Map.new()
  end

  # fun.(tensors) as the program cached under `key` and the tensors' signature
  defp programmed(key, tensors, device, fun) do
    signature = Enum.map(tensors, &{Cascade.Type.normalize!(&1.type), &1.shape})
    key = {__MODULE__, key, signature}

    case :ets.lookup(@programs, key) do
      [{_, %Program{} = program}] ->
        Program.run(program, tensors)

      [{_, {:nodes, _why}}] ->
        fun.(tensors)

      [] ->
        case Program.record(fun, tensors, device) do
          {:ok, results, %Program{} = program} ->
            cache(key, program)
            results

          {:ok, results, {:error, why}} ->
            cache(key, {:nodes, why})
            results

          {:tainted, why} ->
            cache(key, {:nodes, why})
            fun.(tensors)
        end
    end
  end

  defp by_nodes_with_steps(model, tensors),
    do: evaluate_fed(model, tensors, fn _node, _i, fun -> {fun.(), nil} end)

  defp cache(key, value) do
    if :ets.info(@programs, :size) >= @cache_limit, do: :ets.delete_all_objects(@programs)
    :ets.insert(@programs, {key, value})
  end

  defp run_nodes(nodes, values, ctx, around) do
    {values, steps} =
      nodes
      |> Enum.with_index()
      |> Enum.reduce({values, []}, fn {node, i}, {values, steps} ->
        args =
          Enum.map(node.inputs, fn
            "" ->
              nil

            name ->
              Map.get(values, name) ||
                raise(Error, message: "#{node_label(node, i)}: no value #{inspect(name)}")
          end)

        node_ctx =
          if node.op_type in Control.names(),
            do: Map.put(ctx, :run_body, &run_body(&1, &2, values, ctx)),
            else: Map.put(ctx, :outputs, length(node.outputs))

        {results, step} = around.(node, i, fn -> run_node(node, i, args, node_ctx) end)

        {bind(values, node.outputs, results), [step | steps]}
      end)

    {values, Enum.reverse(steps)}
  end

  @doc false
  # A node's results put into `values` under its output names (an empty name is an output the
  # node does not give)
  def bind(values, names, results) do
    names
    |> Enum.zip(results)
    |> Enum.reduce(values, fn
      {"", _}, acc -> acc
      {name, t}, acc -> Map.put(acc, name, t)
    end)
  end

  # A control-flow body: a graph that sees the enclosing graph's values (`scope`), its own
  # initializers and its inputs bound to `bound`; returns its outputs in order
  defp run_body(graph, bound, scope, ctx) do
    if length(bound) != length(graph.inputs),
      do:
        raise(Error,
          message:
            "a body graph takes #{length(graph.inputs)} inputs, #{length(bound)} were given"
        )

    # planned at load: the initializers uploaded then, constants folded
    inits =
      case graph do
        %{values: values} ->
          values

        _ ->
          case upload(graph.initializers, ctx.device) do
            {:ok, inits} -> inits
            {:error, message} -> raise Error, message: message
          end
      end

    # a planned body runs as a program of its inputs and the enclosing values it reads, unless
    # an enclosing recording is under way (which records the body's ops as its own)
    free = Enum.map(Map.get(graph, :free, []), &Map.get(scope, &1))
    tensors = bound ++ free

    if Map.has_key?(graph, :id) and Process.get(:cascade_record) == nil and
         Enum.all?(tensors, &match?(%Cascade.Tensor{}, &1)) do
      device = ctx.device || Cascade.Device.default()

      programmed({graph.id, device}, tensors, device, fn ins ->
        {bound, free} = Enum.split(ins, length(bound))
        values = graph.free |> Enum.zip(free) |> Enum.into(inits)
        body_nodes(graph, bound, values, ctx)
      end)
    else
      body_nodes(graph, bound, Map.merge(scope, inits), ctx)
    end
  end

  defp body_nodes(graph, bound, values, ctx) do
    values =
      graph.inputs
      |> Enum.zip(bound)
      |> Enum.reduce(values, fn {%{name: name}, t}, acc -> Map.put(acc, name, t) end)

    {values, _} = run_nodes(graph.nodes, values, ctx, fn _node, _i, fun -> {fun.(), nil} end)

    for %{name: name} <- graph.outputs do
      Map.get(values, name) || raise(Error, message: "a body graph computes no #{inspect(name)}")
    end
  end

  defp run_node(node, i, args, ctx) do
    cond do
      Map.has_key?(node, :fused) -> Plan.run(node, args, ctx)
      node.op_type in Control.names() -> Control.run(node.op_type, args, node.attributes, ctx)
      true -> Ops.run(node.op_type, args, node.attributes, ctx)
    end
  rescue
    e in [ArgumentError, Cascade.Error, Error] ->
      # an attribute's string is the file's bytes as they are: the message stays UTF-8
      message = Proto.utf8("#{node_label(node, i)} (#{node.op_type}): #{Exception.message(e)}")
      reraise Error, [message: message], __STACKTRACE__
  end

  # The type and the fixed dimensions the graph declares for an input, if any.
  defp check_input(t, name, %{type: %{elem_type: et, shape: shape}}) do
    with {:ok, want} <- Map.fetch(@types, et),
         true <- Cascade.Type.normalize!(Cascade.type(t)) != want do
      raise Error,
        message:
          "input #{inspect(name)}: expected #{want}, got #{Cascade.Type.normalize!(Cascade.type(t))}"
    end

    got = Tuple.to_list(Cascade.shape(t))

    if is_list(shape) and
         (length(shape) != length(got) or
            Enum.any?(Enum.zip(shape, got), fn {w, g} -> is_integer(w) and w > 0 and w != g end)) do
      declared = Enum.map_join(shape, ", ", &if(is_integer(&1) and &1 > 0, do: &1, else: "?"))

      raise Error,
        message:
          "input #{inspect(name)}: expected shape {#{declared}}, got #{inspect(Cascade.shape(t))}"
    end
  end

  defp check_input(_t, _name, _declared), do: :ok

  defp input(%Cascade.Tensor{} = t, device, _name),
    do: if(device, do: Cascade.transfer(t, device), else: t)

  defp input({type, shape, bin}, device, _name) when is_atom(type) and is_tuple(shape),
    do: Cascade.from_binary(bin, type, shape, device_opt(device))

  defp input(other, _device, name),
    do:
      raise(Error,
        message:
          "input #{inspect(name)}: expected a Cascade tensor or {type, shape, binary}, got: #{inspect(other, limit: 5)}"
      )
end
