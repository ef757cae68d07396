defmodule Cascade.Demo.CNN do
  @moduledoc """
  A small convolutional network written on Cascade ops, with the backward pass written out by
  hand, the same architecture as the PyTorch model it is compared with:

      {batch, 784} → {batch, 1, 28, 28}
      conv2d 32 × 3×3 → + bias → relu → max_pool2d 2     {batch, 32, 13, 13}
      conv2d 64 × 3×3 → + bias → relu → max_pool2d 2     {batch, 64, 5, 5}
      flatten → dense 1600 → 128 → relu → dense 128 → 10  logits

  Parameters are a list of `{kernel, bias}` pairs like `Cascade.Demo.MLP`'s (the convolution
  kernels {out, in, 3, 3}, their biases {out}), so the optimisers work on either model.

  Gradients, with `dz` the gradient of the loss by a layer's pre-activation `z`:

    * convolution: `d kernel = conv2d_grad_kernel(input, dz, kernel)`, `d bias = sum(dz, axes:
      [0, 2, 3])`, `d input = conv2d_grad_input(dz, kernel, input)`;
    * pooling: `d a = max_pool2d_grad(a, d pooled, 2)`; relu: `select(z > 0, d a, 0)`;
    * dense layers and the softmax cross-entropy as in `Cascade.Demo.MLP`.
  """

  @type params :: [{Cascade.Tensor.t(), Cascade.Tensor.t()}]

  @side 28

  @doc """
  He-initialised parameters: kernels normal with standard deviation √(2 / fan_in), drawn in f32
  with Cascade's counter-based generator from `key:` (default 0) and cast to `type:` (default
  `:f32`); biases zero. `device:` defaults to `Cascade.Device.default()`.
  """
  @spec init(keyword) :: params
  def init(opts \\ []) do
    key = Keyword.get(opts, :key, 0)
    type = Keyword.get(opts, :type, :f32)
    device = Keyword.get(opts, :device, Cascade.Device.default())

    [
      {32, {32, 1, 3, 3}, 9},
      {64, {64, 32, 3, 3}, 288},
      {128, {1600, 128}, 1600},
      {10, {128, 10}, 128}
    ]
    |> Enum.with_index()
    |> Enum.map(fn {{out, shape, fan_in}, layer} ->
      Cascade.Demo.MLP.he_layer(shape, fan_in, out, key * 1000 + layer, type, device)
    end)
  end

  @doc "The logits for a batch `x` {batch, 784}."
  @spec logits(params, Cascade.Tensor.t()) :: Cascade.Tensor.t()
  def logits(params, x), do: params |> forward(x) |> elem(0)

  @doc "The predicted class of each row of `x`, as s64."
  @spec predict(params, Cascade.Tensor.t()) :: Cascade.Tensor.t()
  def predict(params, x), do: params |> logits(x) |> Cascade.argmax(axis: 1)

  # The logits and what the backward pass needs; `drop` is nil or {p, key}: dropout of the
  # hidden dense layer's activations, each kept with probability 1 - p and scaled by 1 / (1 - p).
  defp forward([{k1, b1}, {k2, b2}, {w3, b3}, {w4, b4}], x, drop \\ nil) do
    batch = elem(Cascade.shape(x), 0)
    x4 = Cascade.reshape(x, {batch, 1, @side, @side})
    z1 = conv(x4, k1, b1)
    a1 = Cascade.relu(z1)
    p1 = Cascade.max_pool2d(a1, 2)
    z2 = conv(p1, k2, b2)
    a2 = Cascade.relu(z2)
    p2 = Cascade.max_pool2d(a2, 2)
    f = Cascade.reshape(p2, {batch, Cascade.size(p2) |> div(batch)})
    a3 = Cascade.dense(f, w3, b3, activation: :relu)
    {h3, keep} = dropout(a3, drop)
    logits = Cascade.dense(h3, w4, b4)

    {logits,
     %{x4: x4, z1: z1, a1: a1, p1: p1, z2: z2, a2: a2, p2: p2, f: f, a3: a3, h3: h3, keep: keep}}
  end

  defp dropout(a, nil), do: {a, nil}
  defp dropout(a, {p, _key}) when p == 0, do: {a, nil}

  defp dropout(a, {p, key}) do
    keep =
      Cascade.shape(a)
      |> Cascade.random_uniform(key: key, type: Cascade.type(a), device: Cascade.device(a))
      |> Cascade.greater_equal(p)

    {scaled(a, keep, p), {keep, p}}
  end

  defp scaled(a, keep, p), do: Cascade.select(keep, Cascade.multiply(a, 1 / (1 - p)), 0)

  # the gradient through the dropout: that of the kept activations, scaled alike
  defp dropout_grad(dh, nil), do: dh
  defp dropout_grad(dh, {keep, p}), do: scaled(dh, keep, p)

  defp conv(x, kernel, bias) do
    out = elem(Cascade.shape(bias), 0)
    Cascade.add(Cascade.conv2d(x, kernel), Cascade.reshape(bias, {1, out, 1, 1}))
  end

  @doc "The mean softmax cross-entropy of `logits` against `one_hot` labels, as the MLP's."
  defdelegate loss(logits, one_hot), to: Cascade.Demo.MLP

  @doc """
  The loss on a batch and its gradient by every parameter: `{loss, grads}`, with `grads`
  shaped like `params`.

  `dropout: {p, key}` trains with dropout of the hidden dense layer's activations: each is
  dropped with probability `p` (a mask drawn with Cascade's generator from `key`, one key a
  step) and the kept ones scaled by 1 / (1 − p), so that `logits/2`, which drops nothing, needs
  no rescaling.
  """
  @spec loss_and_grads(params, Cascade.Tensor.t(), Cascade.Tensor.t(), keyword) ::
          {Cascade.Tensor.t(), params}
  def loss_and_grads([{k1, _}, {k2, _}, {w3, _}, {w4, _}] = params, x, one_hot, opts \\ []) do
    {logits, c} = forward(params, x, opts[:dropout])
    dlogits = Cascade.Demo.MLP.dlogits(logits, one_hot)

    g4 = dense_grads(c.h3, dlogits)
    dh3 = dropout_grad(Cascade.dot(dlogits, [1], [], w4, [1], []), c.keep)
    # a3 = relu(z3) > 0 exactly where z3 > 0
    dz3 = relu_grad(c.a3, dh3)
    g3 = dense_grads(c.f, dz3)
    dp2 = Cascade.reshape(Cascade.dot(dz3, [1], [], w3, [1], []), Cascade.shape(c.p2))
    dz2 = relu_grad(c.z2, Cascade.max_pool2d_grad(c.a2, dp2, 2))
    g2 = conv_grads(c.p1, dz2, k2)
    dp1 = Cascade.conv2d_grad_input(dz2, k2, c.p1)
    dz1 = relu_grad(c.z1, Cascade.max_pool2d_grad(c.a1, dp1, 2))
    g1 = conv_grads(c.x4, dz1, k1)
    {loss(logits, one_hot), [g1, g2, g3, g4]}
  end

  defp relu_grad(z, da), do: Cascade.select(Cascade.greater(z, 0), da, 0)

  defp dense_grads(a, dz),
    do: {Cascade.dot(a, [0], [], dz, [0], []), Cascade.sum(dz, axes: [0])}

  defp conv_grads(input, dz, kernel),
    do: {Cascade.conv2d_grad_kernel(input, dz, kernel), Cascade.sum(dz, axes: [0, 2, 3])}
end
