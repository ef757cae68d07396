# The demo's CNN exported from PyTorch (bench/onnx/export_cnn.py) and run by Cascade.ONNX on the
# default device: its logits against PyTorch's, and the time per batch of 64 beside PyTorch's.
#
#     mix run bench/onnx/cnn.exs [MIN_SECONDS]
#
# Needs Debian's python3-torch (torch.onnx.export).
alias Cascade.Bench.Timer

min_seconds = String.to_float(List.first(System.argv()) || "1.0")
dir = Path.join(System.tmp_dir!(), "cascade_onnx_cnn")
script = Path.join(__DIR__, "export_cnn.py")

{out, 0} =
  System.cmd("/usr/bin/python3", [script, dir, to_string(min_seconds)], stderr_to_stdout: true)

[_, version, torch_s] = Regex.run(~r/^torch (\S+) (\S+)$/m, out)
torch_s = String.to_float(torch_s)

{:ok, model} = Cascade.ONNX.load(Path.join(dir, "cnn.onnx"))
x = Cascade.from_binary(File.read!(Path.join(dir, "x.bin")), :f32, {64, 1, 28, 28})
want = Cascade.from_binary(File.read!(Path.join(dir, "y_torch.bin")), :f32, {64, 10})

%{"logits" => got} = Cascade.ONNX.run(model, %{"x" => x})
diff = Cascade.subtract(got, want) |> Cascade.abs() |> Cascade.reduce_max() |> Cascade.to_list()
scale = want |> Cascade.abs() |> Cascade.reduce_max() |> Cascade.to_list()
ours = Timer.median(fn -> Cascade.ONNX.run(model, %{"x" => x})["logits"] end, min_seconds)
summary = Cascade.ONNX.explain_summary(Cascade.ONNX.explain(model, %{"x" => x}))

IO.puts("""
the demo's CNN exported by PyTorch #{version} (#{length(model.graph.nodes)} nodes: \
#{model.graph.nodes |> Enum.map(& &1.op_type) |> Enum.join(", ")})
device #{inspect(Cascade.Device.default())}; nodes by route: #{inspect(summary)}
logits: largest difference from PyTorch's #{diff} (largest |logit| #{scale})
per batch of 64: Cascade.ONNX #{Timer.format(ours)}, PyTorch #{Timer.format(torch_s)} \
(#{Float.round(ours / torch_s, 2)}x)\
""")
