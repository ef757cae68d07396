defmodule Cascade.DemoTest do
  # async: false because one test sets CASCADE_DATA_DIR for the mix task
  use ExUnit.Case, async: false

  alias Cascade.Demo.{CNN, Data, MLP, Training}

  doctest Cascade.Demo.NumberArray
  doctest Cascade.Demo.Progress
  doctest Cascade.Demo.Routes
  doctest Cascade.Demo.DeviceArg
  doctest Cascade.Bench.Timer
  doctest Cascade.Bench.Report
  doctest Cascade.Bench.NumPy
  doctest Cascade.Bench.Floor
  doctest Cascade.Demo.Training

  setup do
    dir = Path.join(System.tmp_dir!(), "cascade_demo_test_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{tmp_dir: dir}
  end

  # a tiny data set: `count` random 28x28 digits whose label is the brightest quarter's index
  defp synthetic(count, seed) do
    :rand.seed(:exsss, {seed, 1, 2})
    images = for _ <- 1..(count * 784), into: <<>>, do: <<:rand.uniform(256) - 1>>
    labels = for i <- 0..(count - 1), into: <<>>, do: <<rem(i, 10)>>
    %Data.Set{count: count, rows: 28, cols: 28, images: images, labels: labels}
  end

  # the npm package's layout: src/digits/<d>.json holding {"data": [...]} and a LICENSE
  defp write_package(dir, per_digit) do
    digits = Path.join([dir, "package", "src", "digits"])
    File.mkdir_p!(digits)
    File.write!(Path.join([dir, "package", "LICENSE"]), "The MIT License (MIT)\n")

    for d <- 0..9 do
      values =
        for i <- 1..(784 * per_digit), do: Enum.at(["0", "1", "0.5", "0.004"], rem(i + d, 4))

      File.write!(Path.join(digits, "#{d}.json"), ~s({ "data": [#{Enum.join(values, ",")}]}))
    end
  end

  describe "the data file" do
    test "round trip", %{tmp_dir: dir} do
      set = synthetic(12, 1)
      path = Path.join(dir, "x.cxd")
      assert :ok = Data.write(path, set)
      assert File.stat!(path).size == 16 + 12 * 784 + 12 + 4
      assert {:ok, ^set} = Data.read(path)
    end

    test "a corrupt file gives a clear message with what to do", %{tmp_dir: dir} do
      path = Path.join(dir, "x.cxd")
      :ok = Data.write(path, synthetic(3, 2))
      bin = File.read!(path)

      <<head::binary-size(100), byte, tail::binary>> = bin
      File.write!(path, <<head::binary, Bitwise.bxor(byte, 1), tail::binary>>)
      assert {:error, message} = Data.read(path)
      assert message =~ "is not a valid MNIST file: its checksum does not match"
      assert message =~ "Delete it and run again"

      File.write!(path, binary_part(bin, 0, 500))
      assert {:error, message} = Data.read(path)
      assert message =~ "500 bytes where its header says #{byte_size(bin)}"

      File.write!(path, "hello")
      assert {:error, message} = Data.read(path)
      assert message =~ "no CXMNIST header"
    end

    test "missing data gives a message, not an exception", %{tmp_dir: dir} do
      assert {:error, message} = Data.prepare(dir, fetch: false)
      assert message =~ "no MNIST data in #{dir}"
    end

    test "converts the package's JSON once, then reads the file", %{tmp_dir: dir} do
      write_package(dir, 2)
      assert {:ok, set} = Data.prepare(dir, fetch: false)
      assert set.count == 20
      assert set.labels == <<0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9>>
      # "0", "1", "0.5", "0.004" are 0, 255, 128 (127.5 rounds away from zero), 1
      assert binary_part(set.images, 0, 4) == <<255, 128, 1, 0>>
      assert File.exists?(Data.file(dir))

      File.rm_rf!(Path.join(dir, "package"))
      assert {:ok, ^set} = Data.prepare(dir, fetch: false)
    end

    test "bad JSON or values outside [0, 1] name the file", %{tmp_dir: dir} do
      write_package(dir, 1)
      File.write!(Path.join([dir, "package", "src", "digits", "3.json"]), ~s({"data": [0, 2]}))
      assert {:error, message} = Data.prepare(dir, fetch: false)
      assert message =~ "3.json: a pixel value 2.0 outside [0, 1]"

      File.write!(Path.join([dir, "package", "src", "digits", "3.json"]), ~s({"data": [0, }))
      assert {:error, message} = Data.prepare(dir, fetch: false)
      assert message =~ "3.json: expected a number at byte 13"
    end

    test "the split is fixed and disjoint" do
      set = synthetic(50, 3)
      {train, test} = Data.split(set, 10)
      assert {train.count, test.count} == {40, 10}
      assert Data.split(set, 10) == {train, test}
      assert byte_size(train.images) == 40 * 784
    end

    test "mix cascade.demo stops with the message on a corrupt file", %{tmp_dir: dir} do
      File.write!(Data.file(dir), "CXMNIST" <> <<1, 0, 0>>)
      System.put_env("CASCADE_DATA_DIR", dir)

      try do
        assert_raise Mix.Error, ~r/mnist.cxd is not a valid MNIST file/, fn ->
          Mix.Tasks.Cascade.Demo.run(["--epochs", "1"])
        end
      after
        System.delete_env("CASCADE_DATA_DIR")
      end
    end

    test "mix cascade.demo refuses turns and scales out of range" do
      assert_raise Mix.Error, ~r/--rotate must be between 0 and 45 degrees, got: 50.0/, fn ->
        Mix.Tasks.Cascade.Demo.run(["--rotate", "50"])
      end

      assert_raise Mix.Error, ~r/--scale must be in \[0, 0.5\), got: 0.5/, fn ->
        Mix.Tasks.Cascade.Demo.run(["--scale", "0.5"])
      end
    end

    test "mix cascade.demo names the available devices for one that is not" do
      assert_raise Mix.Error, ~r/no device nosuch\navailable devices: .*cpu/, fn ->
        Mix.Tasks.Cascade.Demo.run(["--device", "nosuch"])
      end
    end
  end

  describe "the MLP" do
    test "its backward pass matches finite differences in f64" do
      params = MLP.init([6, 5, 4, 3], key: 7, type: :f64)
      x = Cascade.random_normal({4, 6}, key: 9, type: :f64)
      one_hot = Cascade.tensor([0, 2, 1, 2]) |> Cascade.one_hot(depth: 3, type: :f64)
      {_loss, grads} = MLP.loss_and_grads(params, x, one_hot)
      loss = fn params -> params |> MLP.logits(x) |> MLP.loss(one_hot) |> Cascade.to_list() end
      assert_finite_differences(params, grads, loss, 1.0e-6, fn n -> 0..(n - 1) end)
    end

    # Every sampled element of every parameter: the analytic gradient against the central
    # difference of the loss (f64), within `tol` relative.
    def assert_finite_differences(params, grads, loss, tol, sample) do
      eps = 1.0e-6

      for {{{kernel, bias}, {dkernel, dbias}}, layer} <- Enum.with_index(Enum.zip(params, grads)),
          {tensor, grad, which} <- [{kernel, dkernel, 0}, {bias, dbias, 1}] do
        assert Cascade.shape(grad) == Cascade.shape(tensor)
        flat_grad = grad |> Cascade.reshape({Cascade.size(grad)}) |> Cascade.to_list()

        for i <- sample.(Cascade.size(tensor)) do
          nudged = fn delta ->
            t = nudge(tensor, i, delta)
            List.replace_at(params, layer, put_elem(Enum.at(params, layer), which, t))
          end

          numeric = (loss.(nudged.(eps)) - loss.(nudged.(-eps))) / (2 * eps)
          analytic = Enum.at(flat_grad, i)

          assert abs(numeric - analytic) <= tol * max(1.0, abs(numeric)),
                 "layer #{layer} #{if which == 0, do: "kernel", else: "bias"} element #{i}: " <>
                   "analytic #{analytic}, numeric #{numeric}"
        end
      end
    end

    defp nudge(t, i, delta) do
      shape = Cascade.shape(t)
      flat = Cascade.reshape(t, {Cascade.size(t)})
      old = flat |> Cascade.slice([i], [1])
      flat |> Cascade.put_slice([i], Cascade.add(old, delta)) |> Cascade.reshape(shape)
    end
  end

  describe "the CNN" do
    test "its backward pass matches finite differences in f64, on sampled parameters" do
      params = CNN.init(key: 3, type: :f64, device: :cpu)
      x = Cascade.random_uniform({2, 784}, key: 4, type: :f64, device: :cpu)
      one_hot = Cascade.tensor([3, 7], device: :cpu) |> Cascade.one_hot(depth: 10, type: :f64)
      {_loss, grads} = CNN.loss_and_grads(params, x, one_hot)
      loss = fn params -> params |> CNN.logits(x) |> CNN.loss(one_hot) |> Cascade.to_list() end
      sample = fn n -> Enum.uniq([0, div(n, 3), n - 1]) end
      Cascade.DemoTest.assert_finite_differences(params, grads, loss, 1.0e-5, sample)
    end

    test "with dropout its backward pass matches finite differences under the same mask" do
      params = CNN.init(key: 3, type: :f64, device: :cpu)
      x = Cascade.random_uniform({2, 784}, key: 4, type: :f64, device: :cpu)
      one_hot = Cascade.tensor([3, 7], device: :cpu) |> Cascade.one_hot(depth: 10, type: :f64)
      drop = [dropout: {0.5, 11}]
      {loss, grads} = CNN.loss_and_grads(params, x, one_hot, drop)

      loss_of = fn params, opts ->
        params |> CNN.loss_and_grads(x, one_hot, opts) |> elem(0) |> Cascade.to_list()
      end

      # the mask drops something, and p = 0 is no dropout at all
      refute Cascade.to_list(loss) == loss_of.(params, [])
      assert loss_of.(params, dropout: {0.0, 11}) == loss_of.(params, [])

      sample = fn n -> Enum.uniq([0, div(n, 3), n - 1]) end
      loss = fn params -> loss_of.(params, drop) end
      Cascade.DemoTest.assert_finite_differences(params, grads, loss, 1.0e-5, sample)
    end

    # on :blas a convolution's path (oneDNN or im2col) is chosen by timing the first calls of
    # its shape, and the two sum in different orders: the same seed gives the same losses up
    # to rounding there, and bit for bit when reproducible (as mix cascade.demo runs)
    test "trains with Adam on the default device, the same seed giving the same losses" do
      {train, test} = Data.split(synthetic(96, 5), 32)
      opts = [model: :cnn, device: Cascade.Device.host(), epochs: 2, batch: 32, rate: 0.001]
      run = fn -> Training.run(train, test, opts).epochs |> Enum.map(&{&1.loss, &1.accuracy}) end
      [{loss, accuracy}, _] = run.()
      assert is_float(loss) and loss > 0 and accuracy >= 0.0 and accuracy <= 1.0
      [{again, _}, _] = run.()
      assert abs(again - loss) <= 1.0e-4 * loss

      try do
        Cascade.put_reproducible(true)
        first = run.()
        assert run.() == first
      after
        Cascade.put_reproducible(false)
      end
    end
  end

  describe "training" do
    test "the same seed gives the same losses and accuracy; another seed does not" do
      {train, test} = Data.split(synthetic(80, 4), 20)
      opts = [epochs: 2, batch: 16, hidden: [8], seed: 5]

      run = fn opts ->
        Training.run(train, test, opts).epochs |> Enum.map(&{&1.loss, &1.accuracy})
      end

      first = run.(opts)
      assert run.(opts) == first
      assert run.(Keyword.put(opts, :seed, 6)) != first
      assert [{loss, accuracy}, _] = first
      assert is_float(loss) and accuracy >= 0.0 and accuracy <= 1.0
    end

    test "the random shifts move each image by its own offset" do
      shifter = Cascade.Demo.Augment.new(3, 3, 1, :cpu)
      x = Cascade.iota({2, 9}, type: :f32) |> Cascade.add(1)

      assert Cascade.Demo.Augment.apply(shifter, x, [4, 8]) |> Cascade.to_list() == [
               [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
               [0.0, 0.0, 0.0, 0.0, 10.0, 11.0, 0.0, 13.0, 14.0]
             ]
    end

    test "rotations and scales: each move is a row of the table, the identity in the middle" do
      alias Cascade.Demo.Augment
      x = Cascade.iota({3, 9}, type: :f32) |> Cascade.remainder(9) |> Cascade.add(1)

      # -90, -45, 0, 45 and 90 degrees: the quarter turns move every pixel exactly
      turner = Augment.new(3, 3, 0, :cpu, rotate: 90)
      assert Augment.shifts(turner) == 5

      assert Augment.apply(turner, x, [0, 2, 4]) |> Cascade.to_list() == [
               [3.0, 6.0, 9.0, 2.0, 5.0, 8.0, 1.0, 4.0, 7.0],
               [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
               [7.0, 4.0, 1.0, 8.0, 5.0, 2.0, 9.0, 6.0, 3.0]
             ]

      # scales 0.5, 1 and 1.5: at half size only the centre pixel stays, the rest comes from
      # outside the image (zero)
      scaler = Augment.new(3, 3, 0, :cpu, scale: 0.5)
      assert Augment.shifts(scaler) == 3

      assert Augment.apply(scaler, Cascade.slice(x, [0, 0], [2, 9]), [0, 1]) |> Cascade.to_list() ==
               [
                 [0.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0],
                 [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
               ]

      # shifts, angles and scales together: 9 x 5 x 3 moves, the middle one the identity
      both = Augment.new(3, 3, 1, :cpu, rotate: 10, scale: 0.1)
      assert Augment.shifts(both) == 135

      assert Augment.apply(both, Cascade.slice(x, [0, 0], [1, 9]), [67]) |> Cascade.to_list() ==
               [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]]
    end

    test "bilinear moves mix the four pixels around each source, by nearness" do
      alias Cascade.Demo.Augment
      x = Cascade.iota({1, 9}, type: :f32) |> Cascade.add(1)
      # scale 1.5: output pixel (0, 0) reads (1/3, 1/3) of the input, between 1, 2, 4 and 5
      grower = Augment.new(3, 3, 0, Cascade.Device.default(), scale: 0.5, interpolation: :linear)
      [[a, b, c, d, e, f, g, h, i]] = Augment.apply(grower, x, [2]) |> Cascade.to_list()

      for {got, want} <-
            Enum.zip([a, b, c, d, e, f, g, h, i], [7, 9, 11, 13, 15, 17, 19, 21, 23]),
          do: assert_in_delta(got, want / 3, 1.0e-5)

      # quarter turns and the identity move whole pixels, as the nearest sampling does
      turner = Augment.new(3, 3, 0, Cascade.Device.default(), rotate: 90, interpolation: :linear)
      nearest = Augment.new(3, 3, 0, Cascade.Device.default(), rotate: 90)
      x3 = Cascade.concatenate([x, x, x])

      assert Augment.apply(turner, x3, [0, 2, 4]) |> Cascade.to_list() ==
               Augment.apply(nearest, x3, [0, 2, 4]) |> Cascade.to_list()

      # shifts alone need no interpolation: one table, no weights
      assert %Augment{weights: nil} =
               Augment.new(3, 3, 1, Cascade.Device.default(), interpolation: :linear)

      assert_raise ArgumentError, ~r/expected :nearest or :linear/, fn ->
        Augment.new(3, 3, 1, Cascade.Device.default(), interpolation: :cubic)
      end
    end
  end

  describe "the bench's floor" do
    test "bench/floor/floor.c builds, runs, and gives every figure the suite's cases use", %{
      tmp_dir: dir
    } do
      {:ok, bin} = Cascade.Bench.Floor.build(Path.expand("bench/floor/floor.c"), dir)
      {:ok, floors} = Cascade.Bench.Floor.run(bin, 0.05)
      assert floors["threads"] >= 1
      assert floors["fma_flops"] > 1.0e8

      for shape <- ["2r1w", "1r0w", "1r1w"], bits <- [16, 32, 64] do
        s = floors["pass_#{shape}_#{bits}"]
        assert is_float(s) and s > 0 and s < 1.0, "pass_#{shape}_#{bits}: #{inspect(s)}"
      end

      # every case with a floor gets one in each type the bench runs (a renamed case would
      # silently lose its column); the others are the ones the module names
      without =
        ["max_pool2d 2x2 of 64x32x28x28", "cross-entropy 1000x1000", "add 1 element"] ++
          ["as_type 1M into f32", "as_type 1M from f32"]

      for name <- Cascade.Bench.Suite.names(), type <- [:f32, :f16, :bf16, :f64] do
        s = Cascade.Bench.Floor.seconds(floors, name, type)

        if name in without or name =~ "epoch",
          do: assert(s == nil, name),
          else: assert(is_float(s) and s > 0, "#{name} #{type}")
      end
    end
  end

  describe "the bench report" do
    test "the SVG chart is well-formed XML with one bar per row" do
      rows =
        for {c, r} <- [{"dot <256>", 2.5}, {"add & co", 0.05}],
            do:
              Cascade.Bench.Report.row("cpu", :f32, %{case: c, seconds: r, check: {1.0, 1.0}}, %{
                numpy: %{seconds: 1.0, check: {1.0, 1.0}, numpy_type: "f32"}
              })

      svg = Cascade.Bench.SVG.chart(rows, "title", "sub")
      assert svg =~ ~s(<svg xmlns="http://www.w3.org/2000/svg")
      assert svg =~ "dot &lt;256&gt;" and svg =~ "add &amp; co"
      assert length(Regex.scan(~r/<rect [^>]*><title>/, svg)) == 2
      assert {:ok, _, _} = :xmerl_sax_parser.stream(svg, [])
    end
  end
end
