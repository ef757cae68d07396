defmodule Cascade.ONNX.Conformance do
  @moduledoc """
  ONNX's backend node tests (Debian `libonnx-testdata`: one folder per case, with `model.onnx`
  and `test_data_set_*/input_N.pb`, `output_N.pb`) run through `Cascade.ONNX`.

  A case passes when every output has the expected type (bool as u8) and shape, and values
  within ONNX's backend tolerance (|got - expected| <= 1e-7 + 1e-3 |expected|; NaN equal to
  NaN, infinities equal to themselves); it is unsupported when `Cascade.ONNX.load/2` refuses
  the model (an operator or element type Cascade does not run), and fails otherwise (a wrong
  value, or an error while running).
  """

  @default_dir "/usr/share/libonnx-testdata/data/node"

  @doc "Where Debian's package puts the node tests."
  def default_dir, do: @default_dir

  @doc "The case folders under `dir`, sorted."
  def cases(dir \\ @default_dir) do
    case File.ls(dir) do
      {:ok, names} ->
        names |> Enum.filter(&File.exists?(Path.join([dir, &1, "model.onnx"]))) |> Enum.sort()

      {:error, _} ->
        []
    end
  end

  # Cases whose test data contradicts ONNX's own specification, checked by hand (2026-11-25,
  # Debian's libonnx-testdata): they count as unsupported, with the reason.
  @errata %{
    "test_cast_FLOAT_to_BFLOAT16" =>
      "the expected bfloat16 values are the floats truncated (their top 16 bits); ONNX " <>
        "specifies rounding to nearest even, which Cascade does",
    "test_castlike_BFLOAT16_to_FLOAT" =>
      "the input \"like\" has shape {1}, the graph declares {3, 4}",
    "test_castlike_BFLOAT16_to_FLOAT_expanded" =>
      "the input \"like\" has shape {1}, the graph declares {3, 4}",
    "test_castlike_FLOAT_to_BFLOAT16" =>
      "the input \"like\" has shape {1}, the graph declares {3, 4}",
    "test_castlike_FLOAT_to_BFLOAT16_expanded" =>
      "the input \"like\" has shape {1}, the graph declares {3, 4}",
    "test_adam_multiple" =>
      "the expected outputs use epsilon 1e-2, which the node does not set (Adam's default is " <>
        "1e-6): X1_new is 0.75914 for 1e-2, 0.75596 for the default"
  }

  @doc """
  Runs one case: `{:pass | :fail | :unsupported, operator, detail}`, where operator is the op
  the case is named after (its first node's op type when the name says nothing).
  """
  def run_case(dir, name, opts \\ []) do
    path = Path.join(dir, name)
    bin = File.read!(Path.join(path, "model.onnx"))
    op = operator(name, bin)

    case Cascade.ONNX.load(bin, opts) do
      _ when is_map_key(@errata, name) ->
        {:unsupported, op, "ONNX's test data: " <> @errata[name]}

      {:error, message} ->
        {:unsupported, op, message}

      {:ok, model} ->
        sets =
          path
          |> File.ls!()
          |> Enum.filter(&String.starts_with?(&1, "test_data_set_"))
          |> Enum.sort()

        result =
          Enum.find_value(sets, :pass, fn set ->
            case run_set(model, Path.join(path, set), opts) do
              :ok -> nil
              {:error, detail} -> {:fail, "#{set}: #{detail}"}
              {:unsupported, detail} -> {:unsupported, "#{set}: #{detail}"}
            end
          end)

        case result do
          :pass -> {:pass, op, ""}
          {kind, detail} -> {kind, op, detail}
        end
    end
  end

  defp run_set(model, set, opts) do
    device = opts[:device]

    with {:ok, inputs} <- read_all(set, "input_", device),
         {:ok, expected} <- read_all(set, "output_", device) do
      if length(inputs) != length(model.inputs) do
        {:error, "#{length(inputs)} inputs for #{length(model.inputs)}"}
      else
        try do
          inputs =
            Enum.zip_with(model.inputs, inputs, fn name, t ->
              {name, bf16_bits(t, declared_type(model.graph.inputs, name))}
            end)

          # twice: the first run records the graph's program for these inputs' signature, the
          # second runs it (or runs node by node where the graph cannot be one program)
          Enum.find_value(1..2, :ok, fn run ->
            got = Cascade.ONNX.run(model, Map.new(inputs))

            model.outputs
            |> Enum.zip(expected)
            |> Enum.find_value(fn {name, want} ->
              got = Map.fetch!(got, name)
              want = if Cascade.type(got) == {:bf, 16}, do: bf16_bits(want, 16), else: want

              case compare(name, got, want) do
                nil -> nil
                {:error, detail} when run == 2 -> {:error, "the second run: " <> detail}
                error -> error
              end
            end)
          end)
        rescue
          e -> {:error, Exception.message(e) |> String.slice(0, 300)}
        end
      end
    end
  end

  defp declared_type(values, name) do
    case Enum.find(values, &(&1.name == name)) do
      %{type: %{elem_type: et}} -> et
      _ -> nil
    end
  end

  # ONNX's test data writes bfloat16 tensors as uint16 (the same bits): read them as bf16 where
  # the graph declares bfloat16 (element type 16)
  defp bf16_bits(t, 16) do
    if Cascade.type(t) == {:u, 16},
      do:
        Cascade.from_binary(Cascade.to_binary(t), :bf16, Cascade.shape(t),
          device: Cascade.device(t)
        ),
      else: t
  end

  defp bf16_bits(t, _declared), do: t

  defp read_all(set, prefix, device) do
    set
    |> File.ls!()
    |> Enum.filter(&String.starts_with?(&1, prefix))
    |> Enum.sort_by(fn f ->
      f |> String.trim_leading(prefix) |> String.trim_trailing(".pb") |> String.to_integer()
    end)
    |> Enum.reduce_while({:ok, []}, fn f, {:ok, acc} ->
      with {:ok, proto} <- Cascade.ONNX.Proto.decode_tensor(File.read!(Path.join(set, f))),
           {:ok, t} <- Cascade.ONNX.to_tensor(proto, device) do
        {:cont, {:ok, [t | acc]}}
      else
        {:error, message} -> {:halt, {:unsupported, "#{f}: #{message}"}}
      end
    end)
    |> case do
      {:ok, list} -> {:ok, Enum.reverse(list)}
      other -> other
    end
  end

  defp compare(name, got, want) do
    cond do
      Cascade.type(got) != Cascade.type(want) ->
        {:error,
         "#{name}: type #{inspect(Cascade.type(got))}, expected #{inspect(Cascade.type(want))}"}

      Cascade.shape(got) != Cascade.shape(want) ->
        {:error,
         "#{name}: shape #{inspect(Cascade.shape(got))}, expected #{inspect(Cascade.shape(want))}"}

      Cascade.size(got) == 0 ->
        nil

      close?(got, want) ->
        nil

      true ->
        {:error, "#{name}: values differ beyond 1e-7 + 1e-3 |expected|"}
    end
  end

  defp close?(got, want) do
    g = got |> Cascade.transfer(:cpu) |> Cascade.as_type(:f64)
    w = want |> Cascade.transfer(:cpu) |> Cascade.as_type(:f64)
    tol = Cascade.add(Cascade.multiply(Cascade.abs(w), 1.0e-3), 1.0e-7)
    near = Cascade.less_equal(Cascade.abs(Cascade.subtract(g, w)), tol)
    both_nan = Cascade.logical_and(Cascade.not_equal(g, g), Cascade.not_equal(w, w))
    ok = near |> Cascade.logical_or(Cascade.equal(g, w)) |> Cascade.logical_or(both_nan)
    Cascade.to_list(Cascade.all(ok)) == 1
  end

  # The operator a case tests: the op type whose snake_case name starts the case's name, else
  # the first node's.
  defp operator(name, bin) do
    case Cascade.ONNX.Proto.decode_model(bin) do
      {:ok, m} ->
        types = m.graph.nodes |> Enum.map(& &1.op_type) |> Enum.uniq()
        bare = String.trim_leading(name, "test_")

        Enum.find(types, fn t -> String.starts_with?(bare, snake(t)) end) ||
          List.first(types) || "?"

      {:error, _} ->
        "?"
    end
  end

  defp snake(op) do
    op
    |> String.replace(~r/([a-z0-9])([A-Z])/, "\\1_\\2")
    |> String.replace(~r/([A-Z])([A-Z][a-z])/, "\\1_\\2")
    |> String.downcase()
  end
end
