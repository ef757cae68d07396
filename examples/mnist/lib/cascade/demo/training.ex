defmodule Cascade.Demo.Training do
  @moduledoc """
  Trains `Cascade.Demo.MLP` (`model: :mlp`, mini-batch SGD with momentum) or
  `Cascade.Demo.CNN` (`model: :cnn`, Adam) on a `Cascade.Demo.Data.Set` with a
  cosine-decaying learning rate, each training image shifted at random by up to `shift:`
  pixels (`Cascade.Demo.Augment`), and measures held-out accuracy after each epoch.

  Everything that decides the result is fixed by `seed:`: the initial parameters (Cascade's
  counter-based generator, keyed by the seed) and the order of the samples in each epoch
  and the shifts of its images (an explicit `:rand` state seeded with `{seed, epoch}`, the
  `exsss` algorithm). The cpu driver runs each op the same way every time, so the same seed
  gives the same accuracy, to the last digit, on the same device.
  """

  import Bitwise
  alias Cascade.Demo.{Adam, Augment, CNN, Data, MLP, SGD}

  @defaults [
    model: :mlp,
    device: :cpu,
    type: :f32,
    epochs: 40,
    batch: 64,
    rate: 0.1,
    momentum: 0.9,
    weight_decay: 0.0,
    dropout: 0.0,
    hidden: [256],
    shift: 2,
    rotate: 0,
    scale: 0,
    interpolation: :nearest,
    seed: 42,
    on_batch: nil,
    on_epoch: nil
  ]

  @doc "The options and their defaults."
  def defaults, do: @defaults

  # what `mix cascade.demo` and the benchmark's training epochs use for each model
  @model_defaults %{
    cnn: [epochs: 18, rate: 0.0015, weight_decay: 0.1, rotate: 15.0, scale: 0.15],
    mlp: [epochs: 40, rate: 0.1]
  }

  @doc """
  The options `mix cascade.demo` trains `model` (`:cnn` or `:mlp`) with, where they differ
  from `defaults/0`.

      iex> Cascade.Demo.Training.model_defaults(:mlp)
      [epochs: 40, rate: 0.1]
  """
  def model_defaults(model), do: Map.fetch!(@model_defaults, model)

  @doc """
  Trains on `train`, evaluates on `test` after each epoch (accuracy nil when `test` is
  empty), and returns
  `%{params: params, epochs: [%{epoch, loss, accuracy, seconds, images_per_second}],
  seconds: total}`.

  Options (defaults in `defaults/0`): `model:` (`:mlp` or `:cnn`), `device:`, `type:` (f32,
  f16, bf16, f64), `epochs:`, `batch:`, `rate:` (initial learning rate), `momentum:` (SGD,
  the MLP), `weight_decay:` (Adam's decoupled weight decay, the CNN), `dropout:` (the
  probability of dropping each of the CNN's hidden dense activations in training, its mask
  keyed by the seed and the step),
  `hidden:` (the MLP's hidden layer sizes),
  `shift:` (the largest random shift in pixels, 0 for none), `rotate:` (the largest random
  rotation in degrees), `scale:` (the largest random change of size, a fraction; both 0 for
  none) and `interpolation:` (`:nearest` or `:linear`: how turned and scaled images are
  sampled; see `Cascade.Demo.Augment.new/5`), `seed:`, `on_batch:`
  (`fn %{epoch, done, total, loss, seconds} -> ...` after each batch, with the epoch's mean
  loss so far) and `on_epoch:` (`fn epoch_result -> ...`).
  """
  @spec run(Data.Set.t(), Data.Set.t(), keyword) :: map
  def run(%Data.Set{} = train, %Data.Set{} = test, opts \\ []) do
    opts = Keyword.merge(@defaults, opts)
    start = System.monotonic_time()
    {device, type} = {opts[:device], opts[:type]}
    {x_train, y_train} = tensors(train, type, device)
    {x_test, y_test} = tensors(test, type, device)
    model = model!(opts[:model])

    params =
      case model do
        MLP ->
          sizes = [train.rows * train.cols | opts[:hidden]] ++ [10]
          MLP.init(sizes, key: opts[:seed], type: type, device: device)

        CNN ->
          CNN.init(key: opts[:seed], type: type, device: device)
      end

    run = %{
      model: model,
      opts: opts,
      x: x_train,
      y: y_train,
      count: train.count,
      shifter:
        Augment.new(train.rows, train.cols, opts[:shift], device,
          rotate: opts[:rotate],
          scale: opts[:scale],
          interpolation: opts[:interpolation]
        ),
      steps: div(train.count + opts[:batch] - 1, opts[:batch]) * opts[:epochs]
    }

    {params, _velocity, epochs} =
      Enum.reduce(1..opts[:epochs]//1, {params, optimizer_init(model, params), []}, fn epoch,
                                                                                       {params,
                                                                                        velocity,
                                                                                        done} ->
        t0 = System.monotonic_time()
        {params, velocity, losses} = epoch(run, epoch, params, velocity, t0)
        seconds = seconds_since(t0)

        result = %{
          epoch: epoch,
          loss: Enum.sum(losses) / length(losses),
          accuracy: if(test.count > 0, do: accuracy(model, params, x_test, y_test)),
          seconds: seconds,
          images_per_second: train.count / seconds
        }

        if opts[:on_epoch], do: opts[:on_epoch].(result)
        {params, velocity, [result | done]}
      end)

    %{params: params, epochs: Enum.reverse(epochs), seconds: seconds_since(start)}
  end

  # One pass over the training set: {params, velocity, the batches' losses}.
  defp epoch(run, epoch, params, velocity, t0) do
    %{opts: opts, count: count} = run
    {order, rand} = epoch_order(count, opts[:seed], epoch)
    batches = order |> Enum.chunk_every(opts[:batch]) |> Enum.with_index()
    first_step = (epoch - 1) * div(count + opts[:batch] - 1, opts[:batch])

    {params, velocity, losses, _rand} =
      Enum.reduce(batches, {params, velocity, [], rand}, fn {indices, i},
                                                            {params, velocity, losses, rand} ->
        {choices, rand} = draw_shifts(indices, Augment.shifts(run.shifter), rand)
        {x, one_hot} = batch(run, indices, choices)
        {loss, grads} = loss_and_grads(run, params, x, one_hot, first_step + i)
        # cosine decay from the initial rate to zero over the whole run
        rate = opts[:rate] * 0.5 * (1 + :math.cos(:math.pi() * (first_step + i) / run.steps))
        {params, velocity} = optimizer_step(run, params, grads, velocity, rate)
        losses = [number(loss) | losses]

        if opts[:on_batch] do
          opts[:on_batch].(%{
            epoch: epoch,
            done: min((i + 1) * opts[:batch], count),
            total: count,
            loss: Enum.sum(losses) / (i + 1),
            seconds: seconds_since(t0)
          })
        end

        {params, velocity, losses, rand}
      end)

    {params, velocity, losses}
  end

  defp loss_and_grads(%{model: CNN, opts: opts}, params, x, one_hot, step) do
    key = :erlang.phash2({:dropout, opts[:seed], step}, 1 <<< 32)
    CNN.loss_and_grads(params, x, one_hot, dropout: {opts[:dropout], key})
  end

  defp loss_and_grads(%{model: model}, params, x, one_hot, _step),
    do: model.loss_and_grads(params, x, one_hot)

  # The batch's images, shifted, and its one-hot labels.
  defp batch(%{x: x, y: y, shifter: shifter, opts: opts}, indices, choices) do
    idx = Cascade.tensor(indices, type: :s64, device: opts[:device])
    x = Augment.apply(shifter, Cascade.take(x, idx, axis: 0), choices)
    one_hot = y |> Cascade.take(idx) |> Cascade.one_hot(depth: 10, type: opts[:type])
    {x, one_hot}
  end

  defp model!(:mlp), do: MLP
  defp model!(:cnn), do: CNN

  defp model!(other),
    do: raise(ArgumentError, "expected model: :mlp or :cnn, got: #{inspect(other)}")

  # SGD with momentum for the MLP, Adam for the CNN (as the PyTorch model it is compared with)
  defp optimizer_init(MLP, params), do: SGD.init(params)
  defp optimizer_init(CNN, params), do: Adam.init(params)

  defp optimizer_step(%{model: MLP, opts: opts}, params, grads, state, rate),
    do: SGD.step(params, grads, state, rate, opts[:momentum])

  defp optimizer_step(%{model: CNN, opts: opts}, params, grads, state, rate),
    do: Adam.step(params, grads, state, rate, opts[:weight_decay])

  @doc """
  The fraction of `x`'s rows whose predicted class is the label in `y`, with `model`
  (`Cascade.Demo.MLP` or `Cascade.Demo.CNN`), in slices of 500 rows.
  """
  @spec accuracy(module, list, Cascade.Tensor.t(), Cascade.Tensor.t()) :: float
  def accuracy(model, params, x, y) do
    count = elem(Cascade.shape(y), 0)

    correct =
      0
      |> Stream.iterate(&(&1 + 500))
      |> Enum.take_while(&(&1 < count))
      |> Enum.map(fn start ->
        n = min(500, count - start)
        xs = Cascade.slice(x, [start, 0], [n, elem(Cascade.shape(x), 1)])
        ys = Cascade.slice(y, [start], [n])
        model.predict(params, xs) |> Cascade.equal(ys) |> Cascade.sum() |> number()
      end)
      |> Enum.sum()

    correct / count
  end

  @doc "The images of `set` as a {count, pixels} tensor of `type` in [0, 1], and the labels (s64)."
  @spec tensors(Data.Set.t(), atom, Cascade.Device.t()) ::
          {Cascade.Tensor.t(), Cascade.Tensor.t()}
  def tensors(%Data.Set{} = set, type, device) do
    x =
      set.images
      |> Cascade.from_binary(:u8, {set.count, set.rows * set.cols}, device: device)
      |> Cascade.as_type(type)
      |> Cascade.divide(255)

    y =
      set.labels
      |> Cascade.from_binary(:u8, {set.count}, device: device)
      |> Cascade.as_type(:s64)

    {x, y}
  end

  # The order of the samples in an epoch, and the random state to draw the epoch's shifts
  # from: an explicit :rand state seeded by the seed and the epoch, so that nothing else that
  # runs in the process (a progress bar, a logger) can change the draw.
  defp epoch_order(count, seed, epoch) do
    rand = :rand.seed_s(:exsss, {seed, epoch, 0x5EED})

    {keyed, rand} =
      Enum.map_reduce(0..(count - 1)//1, rand, fn i, rand ->
        {u, rand} = :rand.uniform_s(rand)
        {{u, i}, rand}
      end)

    {keyed |> Enum.sort() |> Enum.map(&elem(&1, 1)), rand}
  end

  defp draw_shifts(indices, shifts, rand) do
    Enum.map_reduce(indices, rand, fn _, rand ->
      {n, rand} = :rand.uniform_s(shifts, rand)
      {n - 1, rand}
    end)
  end

  defp number(t), do: t |> Cascade.as_type(:f64) |> Cascade.to_list()

  defp seconds_since(t0),
    do: System.convert_time_unit(System.monotonic_time() - t0, :native, :microsecond) / 1.0e6
end
