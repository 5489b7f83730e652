// Load generator for OpenAI-compatible servers (ferrox serve, llama-server, vLLM): N concurrent
// clients each send streaming chat requests back to back; reports aggregate generated tokens/s,
// time to first token (TTFT) p50/p95, inter-token latency (ITL, between content chunks: a chunk
// holds every token a server step released, several with speculative decoding) p50/p95/p99 and
// the longest, and time per output token (TPOT: a request's time after its first chunk over its
// other tokens).
//
//   node tools/loadgen/loadgen.mjs --url http://127.0.0.1:8080/v1 --concurrency 16 \
//        --requests 32 --max-tokens 64 --prompt-words 80 [--seed S] [--model NAME] [--json]
//
// Each request gets its own prompt of random words (with the chat template, about 217 tokens for
// --prompt-words 80 with `ferrox synth`'s smollm2 vocabulary, 364 for 150), so that no two share
// a prefix, and asks for exactly --max-tokens tokens (ignore_eos, as llama.cpp's field;
// temperature 0). The words come from --seed: runs against one server with the same seed send
// the same prompts, which its prefix cache then holds, so give each run its own seed. Install the
// client first: cd tools/loadgen && npm install. loadgen.c (build/release/ferrox-loadgen) sends
// the same requests from C for a tenth of this client's CPU: on a 2-CPU machine, use it for the
// server's figures.
import OpenAI from 'openai';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : 'true']);
    return acc;
}, []));
const url = args.url ?? 'http://127.0.0.1:8080/v1';
const concurrency = Number(args.concurrency ?? 4);
const total = Number(args.requests ?? concurrency * 2);
const maxTokens = Number(args['max-tokens'] ?? 64);
const promptWords = Number(args['prompt-words'] ?? 150);
const client = new OpenAI({ baseURL: url, apiKey: args['api-key'] ?? 'none', maxRetries: 0, timeout: 3600e3 });
const model = args.model ?? (await client.models.list()).data[0].id;

const words = ('time year people way day man thing woman life child world school state family student group ' +
    'country problem hand part place case week company system program question work government number night ' +
    'point home water room mother area money story fact month lot right study book eye job word business issue ' +
    'side kind head house service friend father power hour game line end member law car city community name').split(' ');
let seed = Number(args.seed ?? 12345);
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const prompt = () => 'Write a story using these words: ' +
    Array.from({ length: promptWords }, () => words[Math.floor(rand() * words.length)]).join(' ');

const ttft = [], itl = [], tpot = [];
let generated = 0, next = 0, failures = 0;
async function worker() {
    while (next < total) {
        next++;
        const t0 = performance.now();
        let first = 0, last = 0, n = 0;
        try {
            const stream = await client.chat.completions.create({
                model, messages: [{ role: 'user', content: prompt() }], max_tokens: maxTokens, temperature: 0,
                stream: true, ignore_eos: true, stream_options: { include_usage: true } });
            let usage = null;
            for await (const chunk of stream) {
                if (chunk.usage) usage = chunk.usage;
                if (!chunk.choices?.[0]?.delta?.content) continue;
                const t = performance.now();
                if (n === 0) ttft.push(((first = t) - t0) / 1e3);
                else itl.push((t - last) / 1e3);
                last = t;
                n++;
            }
            const tokens = usage?.completion_tokens ?? n;
            generated += tokens;
            if (n > 0 && tokens > 1) tpot.push((last - first) / 1e3 / (tokens - 1));
        } catch (e) {
            failures++;
            console.error(String(e));
        }
    }
}
const start = performance.now();
await Promise.all(Array.from({ length: concurrency }, worker));
const wall = (performance.now() - start) / 1e3;
const pct = (xs, p) => {
    if (xs.length === 0) return NaN;
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const result = {
    url, model, concurrency, requests: total, max_tokens: maxTokens, failures, wall_s: wall,
    generated_tokens: generated, tokens_per_s: generated / wall,
    ttft_p50_s: pct(ttft, 0.5), ttft_p95_s: pct(ttft, 0.95), itl_p50_s: pct(itl, 0.5), itl_p95_s: pct(itl, 0.95),
    itl_p99_s: pct(itl, 0.99), itl_max_s: itl.length ? Math.max(...itl) : NaN,
    tpot_p50_s: pct(tpot, 0.5), tpot_p95_s: pct(tpot, 0.95),
};
if (args.json) console.log(JSON.stringify(result));
else console.log(`concurrency ${concurrency}: ${result.tokens_per_s.toFixed(1)} tok/s, TTFT p50 ` +
    `${result.ttft_p50_s.toFixed(3)} s p95 ${result.ttft_p95_s.toFixed(3)} s, ITL p50 ` +
    `${result.itl_p50_s.toFixed(4)} s p95 ${result.itl_p95_s.toFixed(4)} s p99 ${result.itl_p99_s.toFixed(4)} s ` +
    `max ${result.itl_max_s.toFixed(4)} s, TPOT p50 ${result.tpot_p50_s.toFixed(4)} s ` +
    `p95 ${result.tpot_p95_s.toFixed(4)} s (${total} requests, ${failures} failed)`);
