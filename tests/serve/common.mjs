// Shared by the scripts that tests/test_serve.c runs against a live `ferrox serve`: the client,
// assertions that exit non-zero with a message, and /metrics parsing.
import OpenAI from 'openai';

export const baseURL = process.env.FERROX_URL; // http://127.0.0.1:PORT/v1
if (!baseURL) {
    console.error('FERROX_URL is not set');
    process.exit(2);
}
export const root = baseURL.replace(/\/v1$/, '');
export const client = new OpenAI({ baseURL, apiKey: process.env.FERROX_API_KEY || 'none', maxRetries: 0 });

export function check(cond, what) {
    if (!cond) {
        console.error('FAILED: ' + what);
        process.exit(1);
    }
}

export function equal(got, want, what) {
    check(got === want, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

// The value of a metric line `ferrox:NAME{...labels} VALUE`, the first whose labels contain
// `labels` (a substring); undefined when absent.
export async function metric(name, labels = '') {
    const text = await (await fetch(root + '/metrics')).text();
    for (const line of text.split('\n')) {
        if (!line.startsWith('ferrox:' + name + '{') || !line.includes(labels)) continue;
        return Number(line.slice(line.lastIndexOf(' ') + 1));
    }
    return undefined;
}

export async function streamText(stream, chat) {
    let text = '';
    for await (const chunk of stream) {
        for (const c of chunk.choices) text += chat ? (c.delta.content ?? '') : c.text;
    }
    return text;
}
