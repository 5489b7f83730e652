// 50 streams cancelled mid-way (each after its first tokens): afterwards nothing runs or waits
// and the KV cache holds no block (read from /metrics).
import { client, check, metric } from './common.mjs';

const before = (await metric('request_success_total', 'abort')) ?? 0;
await Promise.all(Array.from({ length: 50 }, async (_, i) => {
    const controller = new AbortController();
    const stream = await client.completions.create(
        { model: 'x', prompt: `Once upon a time, number ${i}`, max_tokens: 1000, ignore_eos: true, stream: true },
        { signal: controller.signal });
    let chunks = 0;
    try {
        for await (const _chunk of stream) {
            if (++chunks === 3) {
                controller.abort();
                break;
            }
        }
    } catch (e) {
        check(e.name === 'APIUserAbortError' || e.name === 'AbortError', `stream ${i}: ${e}`);
    }
    check(chunks === 3, `stream ${i} was cancelled mid-way (${chunks} chunks)`);
}));
let usage, running, waiting, aborted;
for (let t = 0; t < 100; t++) {
    usage = await metric('kv_cache_usage_perc');
    running = await metric('num_requests_running');
    waiting = await metric('num_requests_waiting');
    aborted = await metric('request_success_total', 'abort');
    if (usage === 0 && running === 0 && waiting === 0 && aborted - before >= 50) break;
    await new Promise(r => setTimeout(r, 100));
}
check(usage === 0, `KV usage after 50 cancelled streams: ${usage}`);
check(running === 0 && waiting === 0, `running ${running}, waiting ${waiting}`);
check(aborted - before >= 50, `${aborted - before} requests counted as aborted`);
console.log('ok');
