defmodule Cascade.OpTable do
  @moduledoc false
  # Reads the op table (c_src/core/ops.def) and the parameter table (c_src/core/params.def)
  # at compile time, so that the Elixir functions, their docs and option checks derive from
  # the same declarations as the C dispatcher. Nothing here runs at run time.

  @ops_def Path.expand("../../c_src/core/ops.def", __DIR__)
  @params_def Path.expand("../../c_src/core/params.def", __DIR__)

  def ops_def_path, do: @ops_def
  def params_def_path, do: @params_def

  @doc "The ops in id order, as maps."
  def ops do
    @ops_def
    |> File.read!()
    |> entries(["CX_OP", "CX_COMPOSITE"])
    |> Enum.with_index()
    |> Enum.map(fn
      {{"CX_OP", [id, name, kind, args, opts, infer, doc, example, result]}, index} ->
        kind = kind |> String.downcase() |> String.to_atom()
        # the ops on the bits of integers: their inference refuses floats
        integer_only = infer in ["cx_infer_unary_int", "cx_infer_binary_int"]
        op(index, id, name, kind, args, opts, doc, example, result, integer_only)

      {{"CX_COMPOSITE", [id, name, args, opts, _infer, _dec, _sample, doc, example, result]},
       index} ->
        op(index, id, name, :composite, args, opts, doc, example, result, false)
    end)
  end

  defp op(index, id, name, kind, args, opts, doc, example, result, integer_only) do
    {args, opts} = {parse_args(args), parse_opts(opts)}
    arity = length(args) + if(opts != [] or kind == :create, do: 1, else: 0)

    %{
      id: index,
      integer_only: integer_only,
      c_id: id,
      name: String.to_atom(name),
      # how errors name the function
      fun: "Cascade.#{name}/#{arity}",
      kind: kind,
      args: args,
      opts: opts,
      doc: doc,
      example: example,
      result: result
    }
  end

  @doc "The parameters in id order: `{name_atom, kind_atom}`."
  def params do
    @params_def
    |> File.read!()
    |> entries(["CX_PARAM"])
    |> Enum.map(fn {_, [_id, name, kind]} ->
      {String.to_atom(name), kind |> String.downcase() |> String.to_atom()}
    end)
  end

  # Finds every `MACRO(...)` of the given macros outside comments, in order, and returns
  # `{macro, arguments}`: identifiers as strings, adjacent string literals joined and unescaped.
  defp entries(text, macros) do
    text
    |> strip_comments()
    |> tokens()
    |> collect(macros, [])
  end

  defp strip_comments(text) do
    text
    |> String.replace(~r{/\*.*?\*/}s, " ")
    |> String.replace(~r{//[^\n]*}, " ")
  end

  @token ~r{"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*|[(),]|\S}
  defp tokens(text) do
    @token
    |> Regex.scan(text)
    |> Enum.map(fn
      ["\"" <> _ = s] -> {:str, s |> String.slice(1..-2//1) |> unescape()}
      [t] -> {:tok, t}
    end)
  end

  defp unescape(s), do: s |> String.replace("\\\"", "\"") |> String.replace("\\\\", "\\")

  defp collect([], _macros, acc), do: Enum.reverse(acc)

  defp collect([{:tok, macro}, {:tok, "("} | rest], macros, acc) do
    if macro in macros do
      {args, rest} = arguments(rest, [], [])
      collect(rest, macros, [{macro, args} | acc])
    else
      collect(rest, macros, acc)
    end
  end

  defp collect([_ | rest], macros, acc), do: collect(rest, macros, acc)

  defp arguments([{:tok, ")"} | rest], cur, args), do: {Enum.reverse([join(cur) | args]), rest}
  defp arguments([{:tok, ","} | rest], cur, args), do: arguments(rest, [], [join(cur) | args])
  defp arguments([t | rest], cur, args), do: arguments(rest, [t | cur], args)

  defp join(parts) do
    parts |> Enum.reverse() |> Enum.map_join(fn {_, s} -> s end)
  end

  defp parse_args(""), do: []

  defp parse_args(spec) do
    for part <- String.split(spec, ",", trim: true) do
      [name, kind] = part |> String.trim() |> String.split(":")
      {String.to_atom(name), String.to_atom(kind)}
    end
  end

  defp parse_opts(""), do: []

  defp parse_opts(spec) do
    for part <- String.split(spec, ",", trim: true) do
      [decl, default] = part |> String.trim() |> String.split("=")
      [name, kind] = String.split(decl, ":")

      kind =
        if String.contains?(kind, "|"),
          do: {:choice, kind |> String.split("|") |> Enum.map(&String.to_atom/1)},
          else: String.to_atom(kind)

      {String.to_atom(name), kind, parse_default(default)}
    end
  end

  # Defaults are nil, booleans, numbers or bare atom names (`low`, `s64`).
  defp parse_default("nil"), do: nil
  defp parse_default("true"), do: true
  defp parse_default("false"), do: false

  defp parse_default(text) do
    case {Integer.parse(text), Float.parse(text)} do
      {{int, ""}, _} -> int
      {_, {float, ""}} -> float
      _ -> String.to_atom(text)
    end
  end
end
