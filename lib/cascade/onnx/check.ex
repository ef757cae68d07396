defmodule Cascade.ONNX.Check do
  @moduledoc false
  # What `Cascade.ONNX.load/2` checks before anything runs, as ONNX's checker and ONNX Runtime
  # do at load: the opset, every node's operator and domain, the kinds of the attributes Cascade
  # reads, and the graph's wiring — each input of a node is a graph input, an initializer, an
  # output of an earlier node or (in a body graph) a value of an enclosing graph; each value is
  # assigned once; each graph output is computed. Body graphs (If, Loop, Scan) are checked with
  # the names and ranks their enclosing graphs know at their node.

  alias Cascade.ONNX.{Control, Ops}

  def check(model) do
    with :ok <- opset(model.opset) do
      graph(model.graph, %{})
    end
  rescue
    # an attribute of an unexpected kind in a malformed file that a check reads
    e in [ArgumentError, FunctionClauseError, ArithmeticError, Protocol.UndefinedError] ->
      {:error, "the model is malformed: " <> Exception.message(e)}
  end

  defp opset(opset) do
    case Map.get(opset, "", Map.get(opset, "ai.onnx")) do
      v when is_integer(v) and v > 17 ->
        {:error, "the model needs opset #{v} of the default domain; Cascade runs opsets up to 17"}

      _ ->
        :ok
    end
  end

  # `outer`: the names the enclosing graphs know at this graph's node, with their ranks where
  # known (nil where not)
  defp graph(graph, outer) do
    known =
      outer
      |> put_all(for(i <- graph.inputs, do: {i.name, declared_rank(i)}))
      |> put_all(for(t <- graph.initializers, do: {t.name, length(t.dims)}))

    result =
      graph.nodes
      |> Enum.with_index()
      |> Enum.reduce_while(known, fn {node, i}, known ->
        case node(node, i, known) do
          :ok -> {:cont, outputs(node, i, known, outer)}
          error -> {:halt, error}
        end
      end)

    with known when is_map(known) <- result do
      case Enum.find(graph.outputs, &(not Map.has_key?(known, &1.name))) do
        nil -> :ok
        o -> {:error, "the graph output #{inspect(o.name)} is computed by no node"}
      end
    end
  catch
    {:wiring, message} -> {:error, message}
  end

  defp put_all(known, pairs), do: Enum.reduce(pairs, known, fn {k, v}, m -> Map.put(m, k, v) end)

  defp declared_rank(%{type: %{shape: s}}) when is_list(s), do: length(s)
  defp declared_rank(_), do: nil

  # A node's outputs join the known names; a name may be assigned once in a graph (an enclosing
  # graph's name may be shadowed by a body's)
  defp outputs(node, i, known, outer) do
    Enum.reduce(node.outputs, known, fn
      "", known ->
        known

      name, known ->
        if Map.has_key?(known, name) and not Map.has_key?(outer, name),
          do:
            throw(
              {:wiring,
               "#{describe(node, i)} (#{node.op_type}): its output #{inspect(name)} is " <>
                 "already a graph input, an initializer or another node's output"}
            )

        Map.put(known, name, nil)
    end)
  end

  defp node(node, i, known) do
    where = "#{describe(node, i)} (#{node.op_type})"

    cond do
      name = Enum.find(node.inputs, &(&1 != "" and not Map.has_key?(known, &1))) ->
        {:error,
         "#{where}: its input #{inspect(name)} is no graph input, initializer or output of " <>
           "an earlier node"}

      node.domain not in ["", "ai.onnx"] and
          not (node.domain == "ai.onnx.preview.training" and
                   node.op_type in ["Adagrad", "Adam", "Momentum"]) ->
        {:error,
         "#{describe(node, i)}: operator #{node.op_type} of domain #{node.domain} " <>
           "is not supported"}

      why = attributes(node) ->
        {:error, "#{where}: #{why}"}

      node.op_type in Control.names() ->
        Enum.find_value(Control.bodies(node), :ok, fn {name, body} ->
          case graph(body, known) do
            :ok -> nil
            {:error, why} -> {:error, "#{where} #{name}, #{why}"}
          end
        end)

      not Ops.supported?(node.op_type) ->
        {:error, "#{describe(node, i)}: operator #{node.op_type} is not supported"}

      why = Ops.unsupported(node, known) ->
        {:error, "#{describe(node, i)}: #{node.op_type} with #{why} is not supported"}

      true ->
        :ok
    end
  end

  @doc false
  def describe(node, i),
    do: "node #{i}" <> if(node.name != "", do: " (#{inspect(node.name)})", else: "")

  # The kinds of the attributes Cascade reads (ONNX's operator schemas), by name; where one
  # name has another kind for some operator, that operator's own entry.
  @kinds %{
    int: ~w(axis group keepdims transA transB to dtype k size ceil_mode count_include_pad
         storage_order p fmod largest sorted reverse exclusive select_last_index
         noop_with_empty_axes ignore_index exclude_outside detect_positive detect_negative upper
         onesided inverse periodic output_datatype time_axis batch_axis blocksize hidden_size
         input_forget layout linear_before_reset num_scan_inputs start end center_point_box
         stash_type align_corners sample_size value_int broadcast training_mode),
    ints: ~w(axes pads strides dilations kernel_shape perm output_shape output_padding split
         starts ends scan_input_axes scan_output_axes scan_input_directions
         scan_output_directions directions value_ints),
    float: ~w(alpha beta gamma bias epsilon momentum lambd clip cubic_coeff_a extrapolation_value
         norm_coefficient norm_coefficient_post decay_factor seed high low mean scale
         value_float),
    floats: ~w(scales activation_alpha activation_beta value_floats),
    string: ~w(mode auto_pad direction reduction coordinate_transformation_mode nearest_mode
         padding_mode equation value_string),
    strings: ~w(activations value_strings),
    graph: ~w(then_branch else_branch body)
  }
  @by_name for {kind, names} <- @kinds, name <- names, into: %{}, do: {name, kind}
  @by_op %{
    {"Constant", "value"} => :tensor,
    {"ConstantOfShape", "value"} => :tensor,
    {"Pad", "value"} => :float,
    {"Dropout", "seed"} => :int,
    {"Clip", "min"} => :float,
    {"Clip", "max"} => :float
  }

  defp attributes(%{op_type: op, attributes: attrs}) do
    Enum.find_value(attrs, fn {name, {kind, _}} ->
      want = Map.get(@by_op, {op, name}) || Map.get(@by_name, name)

      cond do
        kind == :unsupported ->
          "its attribute #{inspect(name)} is of a kind Cascade does not read (sparse " <>
            "tensors, types)"

        want != nil and kind != want ->
          "its attribute #{inspect(name)} must be #{article(want)}, the file gives " <>
            article(kind)

        true ->
          nil
      end
    end)
  end

  @articles %{
    int: "an int",
    float: "a float",
    string: "a string",
    tensor: "a tensor",
    graph: "a graph",
    ints: "a list of ints",
    floats: "a list of floats",
    strings: "a list of strings",
    tensors: "a list of tensors",
    graphs: "a list of graphs"
  }

  defp article(kind), do: Map.get(@articles, kind, to_string(kind))
end
