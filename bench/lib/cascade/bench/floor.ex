defmodule Cascade.Bench.Floor do
  @moduledoc """
  The machine's floor for the suite's cases, measured in the same run as Cascade, NumPy and
  PyTorch by `bench/floor/floor.c` (plain C, no Cascade code; compiled here with the system's
  `cc`): the time of a case's memory traffic without its arithmetic, split across every core,
  for the passes over 1M elements; the time of its multiply-adds at the peak rate of the vector
  units (12 independent fused multiply-add chains a core) for the products. No library can go
  below it, so it tells a case where Cascade and the anchors meet at the machine's limit from
  one where Cascade's kernel is slow.

  The figures are `%{"pass_2r1w_32" => seconds, ..., "fma_flops" => flop/s}`; `seconds/3` maps
  a case to its floor.
  """

  # the elements of floor.c's passes (the suite's "1M")
  @pass_elements 1_048_576

  @doc """
  Compiles `source` into `dir`; `{:ok, path}` or `{:error, message}`.
  """
  def build(source, dir) do
    bin = Path.join(dir, "floor")

    with cc when is_binary(cc) <- System.find_executable("cc") || {:error, "no cc in PATH"},
         {_, 0} <-
           System.cmd(cc, ["-O3", "-pthread", source, "-o", bin], stderr_to_stdout: true) do
      {:ok, bin}
    else
      {:error, _} = error -> error
      {out, status} -> {:error, "cc #{Path.basename(source)} failed (#{status}): #{out}"}
    end
  end

  @doc "Runs the compiled program for about `seconds`: `{:ok, figures}` or `{:error, message}`."
  def run(bin, seconds) do
    case System.cmd(bin, ["#{seconds}"], stderr_to_stdout: true) do
      {out, 0} -> {:ok, parse(out)}
      {out, status} -> {:error, "#{bin} failed (exit status #{status}): #{out}"}
    end
  end

  @doc """
  The program's lines as a map of numbers.

      iex> Cascade.Bench.Floor.parse("threads 2\\npass_1r0w_32 8.4e-05\\nfma_flops 3.0e11\\n")
      %{"threads" => 2.0, "pass_1r0w_32" => 8.4e-05, "fma_flops" => 3.0e11}
  """
  def parse(out) do
    for line <- String.split(out, "\n", trim: true),
        [name, value] <- [String.split(line)],
        {x, ""} <- [Float.parse(value)],
        into: %{},
        do: {name, x}
  end

  @doc """
  Two runs' figures as one, each the better of the two (the shorter pass, the higher rate).

      iex> Cascade.Bench.Floor.best_of(%{"pass_1r0w_32" => 9.0e-5, "fma_flops" => 3.0e11},
      ...>   %{"pass_1r0w_32" => 8.0e-5, "fma_flops" => 2.9e11})
      %{"pass_1r0w_32" => 8.0e-5, "fma_flops" => 3.0e11}
      iex> Cascade.Bench.Floor.best_of(nil, %{"threads" => 2.0})
      %{"threads" => 2.0}
  """
  def best_of(nil, b), do: b
  def best_of(a, nil), do: a

  def best_of(a, b) do
    Map.merge(a, b, fn
      "fma_flops", x, y -> max(x, y)
      _, x, y -> min(x, y)
    end)
  end

  @doc """
  The floor of a case of `Cascade.Bench.Suite` in `type`, in seconds, or nil where the suite's
  case has no simple one (pooling, the cross-entropy's two reads and a row of results, a
  conversion's 16-bit and 32-bit arrays, a one-element call, an epoch). Passes: an add reads two
  arrays and writes one, a sum reads one, a function of one value (softmax and layer_norm of
  1000 × 1000 alike, a million elements each) reads one and writes one (scaled from floor.c's
  2^20 elements to the case's); f16 and bf16 move 16 bits an element. Products: their
  multiply-adds at the peak rate (f16 and bf16 too: the vector units multiply f32).

      iex> floors = %{"pass_2r1w_32" => 2.6e-4, "pass_2r1w_16" => 1.3e-4, "fma_flops" => 3.0e11}
      iex> Cascade.Bench.Floor.seconds(floors, "add 1M", :bf16)
      1.3e-4
      iex> Float.round(Cascade.Bench.Floor.seconds(floors, "dot 1024x1024", :f16) * 1.0e3, 2)
      7.16
      iex> Cascade.Bench.Floor.seconds(floors, "add 1 element", :f32)
      nil
  """
  def seconds(nil, _case, _type), do: nil

  def seconds(floors, name, type) do
    bits = %{f16: 16, bf16: 16, f32: 32, f64: 64}[type]

    case kind(name) do
      {:pass, shape, elements} when bits != nil ->
        pass = floors["pass_#{shape}_#{bits}"]
        pass && pass * elements / @pass_elements

      {:flops, flops} ->
        floors["fma_flops"] && flops / floors["fma_flops"]

      _ ->
        nil
    end
  end

  defp kind("add 1M"), do: {:pass, "2r1w", @pass_elements}
  defp kind("sum 1M"), do: {:pass, "1r0w", @pass_elements}

  defp kind(name) when name in ["exp 1M", "tanh 1M", "gelu 1M"],
    do: {:pass, "1r1w", @pass_elements}

  defp kind(name) when name in ["softmax 1000x1000", "layer_norm 1000x1000"],
    do: {:pass, "1r1w", 1_000_000}

  # 64 images, 64 filters of 32 x 3 x 3 over 26 x 26 outputs
  defp kind("conv2d 64x32x28x28, 64 3x3"), do: {:flops, 2.0 * 64 * 64 * 26 * 26 * 32 * 9}
  defp kind("dense+relu 256x1024x1024"), do: {:flops, 2.0 * 256 * 1024 * 1024}

  defp kind("dot " <> size) do
    case Integer.parse(size) do
      {n, "x" <> _} -> {:flops, 2.0 * n * n * n}
      _ -> nil
    end
  end

  defp kind(_), do: nil
end
