defmodule Cascade.Demo.MLP do
  @moduledoc """
  A multilayer perceptron written on Cascade ops: `dense` layers with `relu` between them
  (fused into the layer: `dense(a, kernel, bias, activation: :relu)`) and a softmax
  cross-entropy loss on the logits, with the backward pass written out by hand.

  Parameters are a list of `{kernel, bias}` pairs, one per layer (`kernel` {in, out}, `bias`
  {out}), all of one type, on one device. Every function works for any number of layers.

  For a layer `z = dense(a, kernel, bias)`, with `dz` the gradient of the loss by `z`:

    * `d kernel = aᵀ · dz` — `dot/6` contracting the batch axis of both, no transpose;
    * `d bias = sum(dz, axes: [0])`;
    * `d a = dz · kernelᵀ` — `dot/6` contracting the output axes;
    * through `relu`: `dz_prev = select(z_prev > 0, d a, 0)`, where `z_prev > 0` exactly where
      the layer's input `a = relu(z_prev) > 0`, so the forward pass keeps the inputs only.

  The loss is the mean over the batch of `categorical_cross_entropy(one_hot, logits,
  from_logits: true)`, whose gradient by the logits is `(softmax(logits) - one_hot) / batch`.
  """

  @type params :: [{Cascade.Tensor.t(), Cascade.Tensor.t()}]

  @doc """
  He-initialised parameters for layer `sizes` (such as `[784, 256, 10]`): kernels normal with
  standard deviation √(2 / in), drawn in f32 with Cascade's counter-based generator from `key`
  (the same key gives the same parameters on every device), then cast to `type:`; biases zero.
  Options: `key:` (integer, default 0), `type:` (default `:f32`), `device:` (default
  `Cascade.Device.default()`).
  """
  @spec init([pos_integer], keyword) :: params
  def init(sizes, opts \\ []) do
    key = Keyword.get(opts, :key, 0)
    type = Keyword.get(opts, :type, :f32)
    device = Keyword.get(opts, :device, Cascade.Device.default())

    sizes
    |> Enum.chunk_every(2, 1, :discard)
    |> Enum.with_index()
    |> Enum.map(fn {[fan_in, fan_out], layer} ->
      he_layer({fan_in, fan_out}, fan_in, fan_out, key * 1000 + layer, type, device)
    end)
  end

  @doc false
  # A layer's kernel of `shape`, normal with standard deviation √(2 / fan_in) drawn in f32 from
  # `key` and cast to `type`, and its zero bias of `out` elements; Cascade.Demo.CNN's too.
  def he_layer(shape, fan_in, out, key, type, device) do
    kernel =
      shape
      |> Cascade.random_normal(
        key: key,
        standard_deviation: :math.sqrt(2.0 / fan_in),
        device: device
      )
      |> Cascade.as_type(type)

    {kernel, Cascade.zeros({out}, type: type, device: device)}
  end

  @doc "The logits for a batch `x` {batch, in}."
  @spec logits(params, Cascade.Tensor.t()) :: Cascade.Tensor.t()
  def logits(params, x), do: params |> forward(x) |> elem(0)

  @doc "The predicted class of each row of `x`, as s64."
  @spec predict(params, Cascade.Tensor.t()) :: Cascade.Tensor.t()
  def predict(params, x), do: params |> logits(x) |> Cascade.argmax(axis: 1)

  # The logits, and the input of each layer (last layer first), which the backward pass needs.
  # Hidden layers are dense with the relu fused in: one call, one pass over the result.
  defp forward(params, x) do
    last = length(params) - 1

    params
    |> Enum.with_index()
    |> Enum.reduce({x, []}, fn {{kernel, bias}, i}, {a, cache} ->
      activation = if i == last, do: :none, else: :relu
      {Cascade.dense(a, kernel, bias, activation: activation), [a | cache]}
    end)
  end

  @doc "The mean softmax cross-entropy of `logits` against `one_hot` labels, a scalar tensor."
  @spec loss(Cascade.Tensor.t(), Cascade.Tensor.t()) :: Cascade.Tensor.t()
  def loss(logits, one_hot),
    do: Cascade.categorical_cross_entropy(one_hot, logits, from_logits: true)

  @doc """
  The loss on a batch and its gradient by every parameter: `{loss, grads}`, with `grads`
  shaped like `params`.
  """
  @spec loss_and_grads(params, Cascade.Tensor.t(), Cascade.Tensor.t()) ::
          {Cascade.Tensor.t(), params}
  def loss_and_grads(params, x, one_hot) do
    {logits, cache} = forward(params, x)
    dlogits = dlogits(logits, one_hot)

    grads = backward(Enum.reverse(params), cache, dlogits, [])
    {loss(logits, one_hot), grads}
  end

  @doc false
  # The gradient of loss/2 by the logits: (softmax(logits) - one_hot) / batch; the CNN's too.
  def dlogits(logits, one_hot) do
    batch = elem(Cascade.shape(logits), 0)
    logits |> Cascade.softmax(axis: 1) |> Cascade.subtract(one_hot) |> Cascade.divide(batch)
  end

  # params and cache both last layer first; grads come out first layer first. A layer's input
  # a = relu(z) of the layer before, so a > 0 exactly where z > 0: relu's gradient mask.
  defp backward([_first], [a], dz, grads), do: [layer_grads(a, dz) | grads]

  defp backward([{kernel, _bias} | params], [a | cache], dz, grads) do
    da = Cascade.dot(dz, [1], [], kernel, [1], [])
    dz_prev = Cascade.select(Cascade.greater(a, 0), da, 0)
    backward(params, cache, dz_prev, [layer_grads(a, dz) | grads])
  end

  defp layer_grads(a, dz),
    do: {Cascade.dot(a, [0], [], dz, [0], []), Cascade.sum(dz, axes: [0])}
end
