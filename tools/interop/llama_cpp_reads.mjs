// llama.cpp reads ferrox's files: for each case, ferrox writes a GGUF (`ferrox synth`, or
// `ferrox synth` then `ferrox quantize`), llama.cpp loads it (the prebuilt CPU libraries that
// node-llama-cpp 3.22.1 ships, built from llama.cpp's source of 2026-09-28) and evaluates a fixed list of token ids, and its
// logits at every position are compared with `ferrox eval`'s.
//
// A file llama.cpp refuses (a missing key, a tensor name or shape it does not expect) fails the
// case; so does one it reads differently from ferrox (a metadata value it interprets otherwise,
// a quant block it decodes otherwise), which moves the logits far beyond the tolerance below.
//
// usage: node llama_cpp_reads.mjs FERROX_BINARY WORK_DIR [SHAPE:TYPE[:QUANTIZE_TO] ...]
import {execFileSync} from "node:child_process";
import {mkdirSync, readFileSync, rmSync} from "node:fs";
import {join} from "node:path";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

// Every file type on the small layout (rows of 256 take every type without fallbacks), the MoE
// layout in F32 and its quantized types, the benchmark shapes in F16 (for their metadata) and in
// the types the speed targets name, and `ferrox quantize` output from F32 and F16 sources.
// Qwen3.5 (hybrid DeltaNet, MTP block): the tiny layouts in F32 (the sharp check) and in a K mix,
// the real shapes once each in Q8_0 (their dimensions; F16 would only add time: 0.8b alone is
// half a minute of CPU), the mix of `ferrox quantize` on the tiny MoE.
const DEFAULT_CASES = [
    ...["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M",
        "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS",
    ].map(t => `tiny:${t}`),
    "tiny-moe:F32", "tiny-moe:MXFP4_MOE", "tiny-moe:Q8_0", "tiny-moe:Q4_K_M",
    "smollm2-135m:F16", "qwen3-0.6b:F16", "llama-3.2-1b:F16",
    "smollm2-135m:Q8_0", "smollm2-135m:Q4_0", "smollm2-135m:Q4_K_M",
    "qwen3-0.6b:Q8_0", "llama-3.2-1b:Q4_K_M", "llama-3.2-1b:IQ4_XS",
    "tiny:F32:Q4_K_M", "tiny:F16:Q5_1", "tiny-moe:F32:MXFP4_MOE", "tiny:F32:IQ4_NL",
    "tiny-qwen35:F32", "tiny-qwen35moe:F32", "tiny-qwen35:Q4_K_M", "tiny-qwen35moe:Q8_0",
    "tiny-qwen35moe:F32:Q4_K_M", "qwen35-0.8b:Q8_0", "qwen35moe-12l-32e:Q8_0",
];

// Token ids below every shape's vocabulary (2048 for the tiny shapes), as one batch.
const IDS = [1, 517, 1901, 33, 1024, 7, 650, 1500, 2000, 88, 1234, 321, 1777, 4, 999, 1600];

// Tolerances on |ferrox - llama.cpp| over all logits; both sides keep K/V in F32 and llama.cpp
// runs without flash attention (its CPU flash-attention path moved gpt-oss-shaped logits by up to
// 1.2 against its own plain path). F32 weights leave only the order of float sums (measured: max
// 1e-5); F16 and BF16 weights, the rounding of activations to them (max 5e-3 and 2.5e-2). These
// are the sharp checks of the metadata: a RoPE base read 4x too large moves the logits by 0.5.
// Quantized weights take the fixtures README's tolerances: they are dotted with quantized
// activations, where any tiny difference upstream flips some int8 roundings (measured: max 0.15,
// RMS 0.025 on llama-3.2-1b); a misread block layout moves the logits by whole units. In an MoE
// model such a flip can also swap a token's experts where two router logits nearly tie, so one
// position of an MoE model may exceed maxAbs.
const MOE_SHAPES = new Set(["tiny-moe", "gpt-oss-20b", "tiny-qwen35moe", "qwen35moe-12l-32e"]);
const TOLERANCES = {F32: {maxAbs: 1e-3, rms: 2e-4}, F16: {maxAbs: 0.02, rms: 0.005},
                    BF16: {maxAbs: 0.1, rms: 0.02}, quantized: {maxAbs: 1.0, rms: 0.15},
                    quantizedMoe: {maxAbs: 1.0, rms: 0.2, positionsOver: 1}};

const [ferrox, workDir, ...caseArgs] = process.argv.slice(2);
if (!ferrox || !workDir) {
    console.error("usage: node llama_cpp_reads.mjs FERROX_BINARY WORK_DIR [SHAPE:TYPE[:QUANTIZE_TO] ...]");
    process.exit(2);
}
const cases = caseArgs.length ? caseArgs : DEFAULT_CASES;
mkdirSync(workDir, {recursive: true});

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});

// Runs ferrox; its messages are shown only when it fails.
function run(args) {
    try {
        execFileSync(ferrox, args, {stdio: ["ignore", "ignore", "pipe"]});
    } catch (err) {
        throw new Error(`ferrox ${args[0]} failed: ${String(err.stderr).trim()}`);
    }
}

// Writes the case's file with ferrox; returns its path.
function writeModel(shape, type, quantizeTo) {
    const synth = join(workDir, `${shape}.${type}.gguf`);
    run(["synth", "--shape", shape, "--type", type, "-o", synth, "--seed", "3", "-t", "2"]);
    if (!quantizeTo)
        return synth;
    const quantized = join(workDir, `${shape}.${type}.${quantizeTo}.gguf`);
    run(["quantize", synth, quantized, quantizeTo, "-t", "2"]);
    rmSync(synth);
    return quantized;
}

// ferrox's all-position logits: float32 [IDS.length x n_vocab].
function ferroxLogits(model) {
    const out = join(workDir, "ferrox-logits.bin");
    // An f32 KV cache, as llama.cpp is run with (ferrox's default is f16).
    run(["eval", "-m", model, "--ids", IDS.join(","), "--logits-out", out, "-t", "2", "-ctk", "f32",
         "-ctv", "f32"]);
    const bytes = readFileSync(out);
    rmSync(out);
    return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

// llama.cpp's logits of every position, each a Map token -> logit over the whole vocabulary.
async function llamaCppLogits(path) {
    const model = await llama.loadModel({modelPath: path});
    const context = await model.createContext({
        contextSize: 256, batchSize: 256, threads: 2, flashAttention: false,
        experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
    const out = await context.getSequence().controlledEvaluate(
        IDS.map(id => [id, {generateNext: {logits: true}}]));
    await context.dispose();
    await model.dispose();
    return out.map(item => item.next.logits);
}

// Max |diff| of each position and the RMS difference over all logits.
function compare(ours, theirs) {
    const nVocab = ours.length / IDS.length;
    let sumSquares = 0;
    const maxAbs = theirs.map((logits, pos) => {
        if (logits.size !== nVocab)
            throw new Error(`llama.cpp has ${logits.size} logits, ferrox ${nVocab}`);
        let worst = 0;
        for (const [token, value] of logits) {
            const diff = ours[pos * nVocab + token] - value;
            worst = Math.max(worst, Math.abs(diff));
            sumSquares += diff * diff;
        }
        return worst;
    });
    return {maxAbs, rms: Math.sqrt(sumSquares / ours.length)};
}

function toleranceFor(shape, type) {
    if (TOLERANCES[type])
        return TOLERANCES[type];
    return MOE_SHAPES.has(shape) ? TOLERANCES.quantizedMoe : TOLERANCES.quantized;
}

let failures = 0;
for (const name of cases) {
    const [shape, type, quantizeTo] = name.split(":");
    let path;
    try {
        path = writeModel(shape, type, quantizeTo);
        const diff = compare(ferroxLogits(path), await llamaCppLogits(path));
        const tol = toleranceFor(shape, quantizeTo || type);
        const over = diff.maxAbs.filter(d => d > tol.maxAbs).length;
        const ok = over <= (tol.positionsOver || 0) && diff.rms <= tol.rms;
        if (!ok)
            failures++;
        console.log(`${ok ? "ok  " : "FAIL"} ${name}: max |diff| ${Math.max(...diff.maxAbs).toExponential(2)}` +
                    ` (${over} of ${IDS.length} positions over ${tol.maxAbs}), RMS ${diff.rms.toExponential(2)}` +
                    ` (tolerance ${tol.rms})`);
    } catch (err) {
        failures++;
        console.log(`FAIL ${name}: ${err.message}`);
    } finally {
        if (path)
            rmSync(path, {force: true});
    }
}
console.log(`llama.cpp read ${cases.length - failures} of ${cases.length} ferrox files as ferrox does`);
await llama.dispose();
process.exit(failures ? 1 : 0);
