defmodule Cascade.ONNX.Ops.Loss do
  @moduledoc false
  # The losses (Cascade.ONNX.Ops hands them here): NegativeLogLikelihoodLoss and
  # SoftmaxCrossEntropyLoss.

  import Cascade.ONNX.Ops, only: [attr: 3, fail: 1, rank: 1]

  @doc false
  def run("NegativeLogLikelihoodLoss", [x, target | w], attrs, _ctx),
    do: [nll(x, target, List.first(w), attrs)]

  def run("SoftmaxCrossEntropyLoss", [scores, labels | w], attrs, _ctx) do
    log_p = Cascade.log_softmax(scores, axis: 1)
    [nll(log_p, labels, List.first(w), attrs), log_p]
  end

  def run(op, args, _attrs, _ctx),
    do: fail("#{op} with #{length(args)} inputs is not supported")

  # -x[n, t, d...] * w[t] for each sample (t = target[n, d...]), ignore_index left out, reduced
  # as `reduction` says (mean: divided by the weights' sum)
  defp nll(x, target, weight, attrs) do
    r = rank(x)
    c = elem(Cascade.shape(x), 1)
    ignore = attr(attrs, "ignore_index", nil)
    target = Cascade.as_type(target, :s64)
    keep = if ignore != nil, do: Cascade.not_equal(target, ignore), else: nil
    safe = if keep, do: Cascade.select(keep, target, 0), else: target
    # the class axis last, then one-hot pick
    perm = [0 | Enum.to_list(2..(r - 1)//1)] ++ [1]
    xl = if r == 2, do: x, else: Cascade.transpose(x, axes: perm)
    oh = Cascade.one_hot(safe, depth: c, type: Cascade.type(x))
    picked = Cascade.sum(Cascade.multiply(xl, oh), axes: [r - 1])

    w =
      case weight do
        nil -> Cascade.as_type(Cascade.add(Cascade.multiply(safe, 0), 1), Cascade.type(x))
        w -> Cascade.take(w, safe)
      end

    w = if keep, do: Cascade.multiply(w, Cascade.as_type(keep, Cascade.type(x))), else: w
    loss = Cascade.negate(Cascade.multiply(picked, w))

    case attr(attrs, "reduction", "mean") do
      "none" ->
        loss

      "sum" ->
        Cascade.sum(loss)

      "mean" ->
        Cascade.divide(Cascade.sum(loss), Cascade.sum(w)) |> Cascade.as_type(Cascade.type(x))
    end
  end
end
