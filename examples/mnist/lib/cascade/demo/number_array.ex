defmodule Cascade.Demo.NumberArray do
  @moduledoc """
  Reads the one kind of JSON the MNIST digit files hold — an object whose `"data"` member is a
  flat array of numbers, `{ "data": [0,0.2,0.624,...] }` — without a JSON library (Cascade
  depends on no hex package, and OTP 25 has no `:json`).

  Numbers are read as JSON writes them (`-`, digits, fraction, exponent) and handed to a
  function that turns each into a byte, so the 7.8 million pixels of the 10,000 digits never
  become a list of floats.
  """

  @doc """
  The bytes `to_byte.(number)` gives for each number of the `"data"` array of `json`, in
  order, or `{:error, reason}` when the text is not such an object.

      iex> Cascade.Demo.NumberArray.bytes(~s({ "data": [0, 1, 0.5, 2e-1] }), &round(&1 * 10))
      {:ok, <<0, 10, 5, 2>>}

      iex> Cascade.Demo.NumberArray.bytes(~s({"data": [1, x]}), &round/1)
      {:error, "expected a number at byte 13, got: \\"x]}\\""}
  """
  @spec bytes(binary, (float -> 0..255)) :: {:ok, binary} | {:error, String.t()}
  def bytes(json, to_byte) when is_binary(json) do
    case :binary.match(json, "\"data\"") do
      :nomatch ->
        {:error, "expected an object with a \"data\" array"}

      {pos, len} ->
        rest_at = pos + len

        with {:ok, at} <- expect(json, skip_ws(json, rest_at), ?:),
             {:ok, at} <- expect(json, skip_ws(json, at + 1), ?[) do
          numbers(json, skip_ws(json, at + 1), to_byte, <<>>)
        end
    end
  end

  defp expect(json, at, char) do
    case json do
      <<_::binary-size(at), ^char, _::binary>> -> {:ok, at}
      _ -> {:error, "expected #{<<char>>} at byte #{at}, got: #{inspect(excerpt(json, at))}"}
    end
  end

  defp numbers(json, at, to_byte, acc) do
    case json do
      <<_::binary-size(at), ?], _::binary>> when acc == <<>> ->
        {:ok, acc}

      _ ->
        case number(json, at) do
          {:ok, value, next} ->
            acc = <<acc::binary, to_byte.(value)>>
            next = skip_ws(json, next)

            case json do
              <<_::binary-size(next), ?,, _::binary>> ->
                numbers(json, skip_ws(json, next + 1), to_byte, acc)

              <<_::binary-size(next), ?], _::binary>> ->
                {:ok, acc}

              _ ->
                {:error, "expected , or ] at byte #{next}, got: #{inspect(excerpt(json, next))}"}
            end

          :error ->
            {:error, "expected a number at byte #{at}, got: #{inspect(excerpt(json, at))}"}
        end
    end
  end

  # The common cases of the digit files first ("0", "1", "0.xyz"), then any JSON number.
  defp number(json, at) do
    case json do
      <<_::binary-size(at), ?0, c, _::binary>> when c in [?,, ?]] -> {:ok, 0.0, at + 1}
      <<_::binary-size(at), ?1, c, _::binary>> when c in [?,, ?]] -> {:ok, 1.0, at + 1}
      _ -> general(json, at)
    end
  end

  defp general(json, at) do
    {sign, at} =
      case json do
        <<_::binary-size(at), ?-, _::binary>> -> {-1, at + 1}
        _ -> {1, at}
      end

    with {int, int_digits, at} when int_digits > 0 <- digits(json, at, 0, 0),
         {frac, frac_digits, at} <- fraction(json, at),
         {exp, at} <- exponent(json, at) do
      value = sign * (int + frac / :math.pow(10, frac_digits)) * :math.pow(10, exp)
      {:ok, value, at}
    else
      _ -> :error
    end
  end

  defp fraction(json, at) do
    case json do
      <<_::binary-size(at), ?., _::binary>> ->
        case digits(json, at + 1, 0, 0) do
          {_, 0, _} -> :error
          found -> found
        end

      _ ->
        {0, 0, at}
    end
  end

  defp exponent(json, at) do
    case json do
      <<_::binary-size(at), e, _::binary>> when e in [?e, ?E] ->
        {sign, at} =
          case json do
            <<_::binary-size(at + 1), ?-, _::binary>> -> {-1, at + 2}
            <<_::binary-size(at + 1), ?+, _::binary>> -> {1, at + 2}
            _ -> {1, at + 1}
          end

        case digits(json, at, 0, 0) do
          {_, 0, _} -> :error
          {exp, _, at} -> {sign * exp, at}
        end

      _ ->
        {0, at}
    end
  end

  defp digits(json, at, value, count) do
    case json do
      <<_::binary-size(at), d, _::binary>> when d in ?0..?9 ->
        digits(json, at + 1, value * 10 + d - ?0, count + 1)

      _ ->
        {value, count, at}
    end
  end

  defp skip_ws(json, at) do
    case json do
      <<_::binary-size(at), c, _::binary>> when c in [?\s, ?\n, ?\r, ?\t] -> skip_ws(json, at + 1)
      _ -> at
    end
  end

  defp excerpt(json, at), do: binary_part(json, at, min(12, max(byte_size(json) - at, 0)))
end
