// ONNX Runtime's side of bench/onnx/models.sh: each case of CACHE/cases.json (bench/onnx/prepare.py)
// run by onnxruntime-node on the CPU, 2 intra-op threads, every graph optimisation.
//
//     NODE_PATH=CACHE/node_modules node bench/onnx/ort.js CACHE MIN_SECONDS [CASE...]
//
// Per case, lines for bench/onnx/models.exs: "case NAME MS RUNS", the median milliseconds per run
// (runs until MIN_SECONDS and at least 5), then per output "output NAME TYPE DIMS FILE SPREAD":
// the output written to CACHE/ort/ (raw little-endian) and ORT's own spread, the largest
// difference between its optimised and its unoptimised outputs, the bar Cascade's outputs are
// held to.
const fs = require("fs");
const path = require("path");
const ort = require("onnxruntime-node");

const [cache, minSeconds, ...only] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(path.join(cache, "cases.json"))).filter(
  (c) => only.length === 0 || only.includes(c.name)
);
const outDir = path.join(cache, "ort");
fs.mkdirSync(outDir, { recursive: true });

function feeds(c) {
  const f = {};
  for (const i of c.inputs) {
    const buf = fs.readFileSync(i.file);
    const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    const data = i.type === "s64" ? new BigInt64Array(ab) : new Float32Array(ab);
    f[i.name] = new ort.Tensor(i.type === "s64" ? "int64" : "float32", data, i.shape);
  }
  return f;
}

const options = (level) => ({
  intraOpNumThreads: 2,
  interOpNumThreads: 1,
  executionMode: "sequential",
  graphOptimizationLevel: level,
});

function largestDiff(a, b) {
  let d = 0;
  for (let k = 0; k < a.length; k++) d = Math.max(d, Math.abs(Number(a[k]) - Number(b[k])));
  return d;
}

(async () => {
  for (const c of cases) {
    const input = feeds(c);
    const session = await ort.InferenceSession.create(c.model, options("all"));
    const plain = await ort.InferenceSession.create(c.model, options("disabled"));
    const out = await session.run(input);
    const ref = await plain.run(input);
    const times = [];
    const limit = Number(minSeconds) * 1e9;
    const start = process.hrtime.bigint();
    while (times.length < 5 || Number(process.hrtime.bigint() - start) < limit) {
      const t0 = process.hrtime.bigint();
      await session.run(input);
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    times.sort((a, b) => a - b);
    console.log(`case ${c.name} ${times[times.length >> 1]} ${times.length}`);
    for (const name of session.outputNames) {
      const t = out[name];
      const file = path.join(outDir, `${c.name}_${name.replace(/[^A-Za-z0-9_.]/g, "_")}.bin`);
      fs.writeFileSync(file, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      const dims = t.dims.map(Number).join(",") || "-";
      console.log(`output ${name} ${t.type} ${dims} ${file} ${largestDiff(t.data, ref[name].data)}`);
    }
  }
})();
