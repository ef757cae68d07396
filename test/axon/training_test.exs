if Code.ensure_loaded?(Axon) do
  defmodule Cascade.AxonTrainingTest do
    # Axon 0.6 and Polaris 0.1 as a user runs them (CASCADE_AXON_PATH, CASCADE_POLARIS_PATH;
    # see mix.exs): a training loop through Axon.Loop with Cascade.Compiler gives the
    # evaluator's parameters, on the device asked for. (No dropout: with it, two runs of the
    # same seed differ under the evaluator too.)
    use ExUnit.Case, async: false

    setup do
      previous = Nx.default_backend(Cascade.Backend)
      on_exit(fn -> Nx.default_backend(previous) end)
      :ok
    end

    defp batches do
      key = Nx.Random.key(42)
      {x, key} = Nx.Random.uniform(key, shape: {256, 64}, type: :f32)
      {labels, _} = Nx.Random.randint(key, 0, 10, shape: {256}, type: :s64)
      y = Nx.equal(Nx.new_axis(labels, -1), Nx.iota({1, 10})) |> Nx.as_type(:f32)
      Enum.zip(Nx.to_batched(x, 32), Nx.to_batched(y, 32))
    end

    defp train(compiler) do
      Axon.input("input", shape: {nil, 64})
      |> Axon.dense(32, activation: :relu)
      |> Axon.dense(10, activation: :softmax)
      |> Axon.Loop.trainer(
        :categorical_cross_entropy,
        Polaris.Optimizers.adam(learning_rate: 1.0e-3),
        seed: 7,
        log: 0
      )
      |> Axon.Loop.run(batches(), %{}, epochs: 2, compiler: compiler)
    end

    test "an MLP trained through Axon.Loop with adam: the evaluator's parameters" do
      compiled = train(Cascade.Compiler)
      evaluated = train(Nx.Defn.Evaluator)

      for {layer, params} <- evaluated, {name, want} <- params do
        got = compiled[layer][name]
        assert %Cascade.Backend{} = got.data
        assert got.shape == want.shape

        assert Nx.all_close(got, want, atol: 1.0e-5, rtol: 1.0e-4) |> Nx.to_number() == 1,
               "#{layer}.#{name} differs"
      end
    end
  end
end
