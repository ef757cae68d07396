defmodule Cascade.TestCalls.Conv do
  @moduledoc false
  # Valid calls of the conv composites for test/errors_test.exs.

  # an input {1, 2, 4, 4}, a kernel {3, 2, 3, 3}, conv2d's output {1, 3, 2, 2} and a 2 x 2
  # pool's output {1, 2, 2, 2}
  defp x, do: Cascade.iota({1, 2, 4, 4}, type: :f32)
  defp k, do: Cascade.ones({3, 2, 3, 3})
  defp gy, do: Cascade.ones({1, 3, 2, 2})
  defp gp, do: Cascade.ones({1, 2, 2, 2})

  @doc "A valid call: {input tensors, fun(inputs)}, or nil for ops of another family."
  def valid_call(:conv2d), do: {[x(), k()], fn [x, k] -> Cascade.conv2d(x, k) end}

  def valid_call(:conv2d_grad_input),
    do: {[gy(), k()], fn [g, k] -> Cascade.conv2d_grad_input(g, k, {1, 2, 4, 4}) end}

  def valid_call(:conv2d_grad_kernel),
    do: {[x(), gy()], fn [x, g] -> Cascade.conv2d_grad_kernel(x, g, {3, 2, 3, 3}) end}

  def valid_call(:max_pool2d), do: {[x()], fn [x] -> Cascade.max_pool2d(x, 2) end}
  def valid_call(:avg_pool2d), do: {[x()], fn [x] -> Cascade.avg_pool2d(x, {2, 2}) end}

  def valid_call(:max_pool2d_grad),
    do: {[x(), gp()], fn [x, g] -> Cascade.max_pool2d_grad(x, g, 2) end}

  def valid_call(:avg_pool2d_grad),
    do: {[gp()], fn [g] -> Cascade.avg_pool2d_grad(g, {1, 2, 4, 4}, 2) end}

  def valid_call(_), do: nil

  @doc "A valid call as a function of the options, or nil."
  def with_opts(:conv2d), do: &Cascade.conv2d(x(), k(), &1)
  def with_opts(:conv2d_grad_input), do: &Cascade.conv2d_grad_input(gy(), k(), {1, 2, 4, 4}, &1)
  def with_opts(:conv2d_grad_kernel), do: &Cascade.conv2d_grad_kernel(x(), gy(), {3, 2, 3, 3}, &1)
  def with_opts(:max_pool2d), do: &Cascade.max_pool2d(x(), 2, &1)
  def with_opts(:avg_pool2d), do: &Cascade.avg_pool2d(x(), 2, &1)
  def with_opts(:max_pool2d_grad), do: &Cascade.max_pool2d_grad(x(), gp(), 2, &1)
  def with_opts(:avg_pool2d_grad), do: &Cascade.avg_pool2d_grad(gp(), {1, 2, 4, 4}, 2, &1)
  def with_opts(_), do: nil
end
