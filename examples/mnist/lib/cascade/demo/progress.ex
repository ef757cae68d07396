defmodule Cascade.Demo.Progress do
  @moduledoc """
  The lines the demo prints: a progress bar for the epoch under way, redrawn in place on a
  terminal, and a summary line for each finished epoch.
  """

  @width 24

  @doc """
  The progress bar for `%{epoch, done, total, loss, seconds}` of `epochs`.

      iex> Cascade.Demo.Progress.bar(%{epoch: 2, done: 4000, total: 8000, loss: 0.25, seconds: 0.5}, 10)
      "epoch  2/10 [############------------]  50%  loss 0.2500   8000 img/s"
  """
  def bar(%{epoch: epoch, done: done, total: total, loss: loss, seconds: seconds}, epochs) do
    filled = div(done * @width, max(total, 1))
    digits = epochs |> Integer.to_string() |> String.length()

    "epoch #{pad(epoch, digits)}/#{epochs} " <>
      "[#{String.duplicate("#", filled)}#{String.duplicate("-", @width - filled)}] " <>
      "#{pad(div(done * 100, max(total, 1)), 3)}%  loss #{fixed(loss, 4)}  " <>
      "#{pad(rate(done, seconds), 5)} img/s"
  end

  @doc """
  The line for a finished epoch: `%{epoch, loss, accuracy, seconds, images_per_second}`.

      iex> Cascade.Demo.Progress.epoch_line(%{epoch: 3, loss: 0.1, accuracy: 0.9745, seconds: 0.42, images_per_second: 19047.6}, 20)
      "epoch  3/20  loss 0.1000  test accuracy 97.45%  0.42 s  19048 img/s"
  """
  def epoch_line(result, epochs) do
    digits = epochs |> Integer.to_string() |> String.length()

    "epoch #{pad(result.epoch, digits)}/#{epochs}  loss #{fixed(result.loss, 4)}  " <>
      "test accuracy #{fixed(result.accuracy * 100, 2)}%  #{fixed(result.seconds, 2)} s  " <>
      "#{round(result.images_per_second)} img/s"
  end

  @doc """
  Whether standard output is a terminal, where the bar can be redrawn in place. Elixir decides
  this at start (`IO.ANSI.enabled?/0`); `:io.columns/0` answers `:enotsup` under `mix` on OTP 25.
  """
  def terminal?, do: IO.ANSI.enabled?()

  defp rate(_done, seconds) when seconds <= 0, do: 0
  defp rate(done, seconds), do: round(done / seconds)

  defp pad(n, width), do: n |> to_string() |> String.pad_leading(width)

  defp fixed(x, decimals), do: :erlang.float_to_binary(x / 1, decimals: decimals)
end
