# Common ops on one N x N f32 tensor (N = 1000 unless the environment's N says otherwise) on the
# default device: the median seconds per call of each (Cascade.Bench.Timer), one line per op,
# `name microseconds`. Run by bench/ops_survey.sh beside bench/ops_survey.py (PyTorch, the same
# ops and shapes). N=16 shows what a call costs beyond its arithmetic.
#     MIX_ENV=prod mix run bench/ops_survey.exs        ONLY=add,sort_ax1 SEC=0.5 N=16 to choose
alias Cascade, as: C
n = String.to_integer(System.get_env("N", "1000"))
x = C.random_uniform({n, n}, key: 1, min: -1.0, max: 1.0)
y = C.random_uniform({n, n}, key: 2, min: -1.0, max: 1.0)
p = C.add(C.abs(x), 0.5)
row = C.random_uniform({n}, key: 3, min: -1.0, max: 1.0)
lo = C.tensor(-0.5)
hi = C.tensor(0.5)
mask = C.less(x, y)
idx = C.tensor(Enum.map(0..(div(n, 2) - 1), &(&1 * 2)), type: :s64)
v = C.reshape(x, {n * n})

cases = [
  neg: fn -> C.negate(x) end,
  abs: fn -> C.abs(x) end,
  sign: fn -> C.sign(x) end,
  exp: fn -> C.exp(x) end,
  expm1: fn -> C.expm1(x) end,
  log: fn -> C.log(p) end,
  log1p: fn -> C.log1p(p) end,
  sqrt: fn -> C.sqrt(p) end,
  rsqrt: fn -> C.rsqrt(p) end,
  sin: fn -> C.sin(x) end,
  cos: fn -> C.cos(x) end,
  tanh: fn -> C.tanh(x) end,
  sigmoid: fn -> C.sigmoid(x) end,
  erf: fn -> C.erf(x) end,
  atan: fn -> C.atan(x) end,
  floor: fn -> C.floor(x) end,
  round: fn -> C.round(x) end,
  reciprocal: fn -> C.reciprocal(p) end,
  add: fn -> C.add(x, y) end,
  sub: fn -> C.subtract(x, y) end,
  mul: fn -> C.multiply(x, y) end,
  div: fn -> C.divide(x, p) end,
  pow: fn -> C.pow(p, y) end,
  maximum: fn -> C.max(x, y) end,
  remainder: fn -> C.remainder(x, p) end,
  atan2: fn -> C.atan2(x, y) end,
  less: fn -> C.less(x, y) end,
  equal: fn -> C.equal(x, y) end,
  where: fn -> C.select(mask, x, y) end,
  clip: fn -> C.clip(x, lo, hi) end,
  add_row: fn -> C.add(x, row) end,
  add_scalar: fn -> C.add(x, 1.0) end,
  sum_ax1: fn -> C.sum(x, axes: [1]) end,
  sum_ax0: fn -> C.sum(x, axes: [0]) end,
  max_ax1: fn -> C.reduce_max(x, axes: [1]) end,
  max_all: fn -> C.reduce_max(x) end,
  argmax_ax1: fn -> C.argmax(x, axis: 1) end,
  mean_ax1: fn -> C.mean(x, axes: [1]) end,
  var_ax1: fn -> C.variance(x, axes: [1]) end,
  transpose: fn -> C.transpose(x) end,
  slice: fn -> C.slice(x, [0, div(n, 10)], [n, n - div(n, 5)]) end,
  concat0: fn -> C.concatenate([x, y], axis: 0) end,
  concat1: fn -> C.concatenate([x, y], axis: 1) end,
  reverse: fn -> C.reverse(x, axes: [1]) end,
  pad: fn -> C.pad(x, 0.0, [{1, 1, 0}, {1, 1, 0}]) end,
  take_rows: fn -> C.take(x, idx, axis: 0) end,
  relu: fn -> C.relu(x) end,
  leaky_relu: fn -> C.leaky_relu(x) end,
  elu: fn -> C.elu(x) end,
  silu: fn -> C.silu(x) end,
  softplus: fn -> C.softplus(x) end,
  log_softmax: fn -> C.log_softmax(x, axis: 1) end,
  logsumexp: fn -> C.logsumexp(x, axes: [1]) end,
  sort_ax1: fn -> C.sort(x, axis: 1) end,
  to_s32: fn -> C.as_type(x, :s32) end,
  to_f64: fn -> C.as_type(x, :f64) end,
  sum_1d: fn -> C.sum(v) end
]

only = System.get_env("ONLY")

for {name, f} <- cases, only == nil or to_string(name) in String.split(only, ",") do
  {sec, _} = Float.parse(System.get_env("SEC", "0.3"))
  s = Cascade.Bench.Timer.median(f, sec)
  IO.puts("#{name} #{Float.round(s * 1.0e6, 1)}")
end
