if Code.ensure_loaded?(Nx.Serving) do
  defmodule Cascade.ONNX.Serving do
    @moduledoc false
    # The Nx.Serving module behind Cascade.ONNX.serving/2: each batch Nx.Serving forms is the
    # model's inputs by name, stacked along their first axis; it runs as one Cascade.ONNX.run/2
    # (one recorded program per batch shape) and its outputs come back as Nx tensors on
    # Cascade.Backend, which Nx.Serving slices back into each request's rows.
    @behaviour Nx.Serving

    @impl true
    def init(_type, model, _partitions), do: {:ok, model}

    @impl true
    def handle_batch(batch, _partition, model),
      do: {:execute, fn -> {run(model, batch), :server_info} end, model}

    @doc false
    def run(model, %Nx.Batch{} = batch) do
      # a map of inputs by name: Cascade.ONNX.serving/2's client preprocessing batches no other
      {inputs, nil} = Nx.LazyContainer.traverse(batch, nil, fn _, fun, nil -> {fun.(), nil} end)
      feed = Map.new(inputs, fn {name, t} -> {name, to_cascade(t)} end)
      model |> Cascade.ONNX.run(feed) |> Map.new(fn {name, t} -> {name, to_nx(t)} end)
    end

    defp to_cascade(%Nx.Tensor{data: %Cascade.Backend{tensor: %Cascade.Tensor{} = t}}), do: t

    defp to_cascade(%Nx.Tensor{} = t),
      do: {Cascade.Type.normalize!(Nx.type(t)), Nx.shape(t), Nx.to_binary(t)}

    defp to_nx(%Cascade.Tensor{} = t) do
      shape = Cascade.shape(t)

      %Nx.Tensor{
        data: %Cascade.Backend{tensor: t, device: t.device},
        type: Cascade.type(t),
        shape: shape,
        names: List.duplicate(nil, tuple_size(shape))
      }
    end
  end
end
