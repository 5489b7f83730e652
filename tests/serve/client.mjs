// The OpenAI client drives every endpoint once: completions and chat (streamed and not, equal
// texts), temperature 0 equal to `ferrox run --temp 0` (EXPECT_TEXT), n = 2, logprobs,
// embeddings (the client's default base64 and floats), and a 400 naming its field.
import { client, check, equal, streamText } from './common.mjs';

const prompt = process.env.PROMPT;
const maxTokens = Number(process.env.MAX_TOKENS);

const models = await client.models.list();
check(models.data.length === 1, 'one model listed');
const model = models.data[0].id;

const done = await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0 });
equal(done.choices[0].text, process.env.EXPECT_TEXT, 'completion at temperature 0 = ferrox run --temp 0');
equal(done.usage.completion_tokens, maxTokens, 'usage.completion_tokens');
check(done.usage.prompt_tokens > 0, 'usage.prompt_tokens');
equal(done.choices[0].finish_reason, 'length', 'finish_reason');

const streamed = await streamText(
    await client.completions.create({ model, prompt, max_tokens: maxTokens, temperature: 0, stream: true }), false);
equal(streamed, done.choices[0].text, 'streamed completion = non-streamed');

const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about Lily.' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: maxTokens, temperature: 0 });
equal(chat.choices[0].message.role, 'assistant', 'chat role');
check(chat.choices[0].message.content.length > 0, 'chat content');
let usage = null;
let chatStreamed = '';
for await (const chunk of await client.chat.completions.create({
    model, messages, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
    for (const c of chunk.choices) chatStreamed += c.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
}
equal(chatStreamed, chat.choices[0].message.content, 'streamed chat = non-streamed');
check(usage !== null, 'stream_options.include_usage sends usage');
equal(usage.completion_tokens, chat.usage.completion_tokens, 'streamed usage');
equal(usage.prompt_tokens, chat.usage.prompt_tokens, 'streamed prompt tokens');

const two = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 1.5, top_k: 0, min_p: 0, top_p: 1, n: 2, seed: 7 });
equal(two.choices.length, 2, 'n = 2 choices');
check(two.choices.every((c, i) => c.index === i && c.text.length > 0), 'both choices have text');
equal(two.usage.completion_tokens, 24, 'n = 2 usage');
const again = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 1.5, top_k: 0, min_p: 0, top_p: 1, n: 2, seed: 7 });
equal(again.choices[1].text, two.choices[1].text, 'the same seed gives the same choices');
const seen = new Set();
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 6, n: 2, stream: true }))
    for (const c of chunk.choices) seen.add(c.index);
check(seen.has(0) && seen.has(1), 'streamed chat with n = 2 carries both indices');

const lp = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
equal(lp.choices[0].logprobs.content.length, 4, 'one logprob per token');
check(lp.choices[0].logprobs.content.every(t => t.logprob <= 0 && t.top_logprobs.length === 3), 'top_logprobs');

const emb = await client.embeddings.create({ model, input: ['Once upon a time', 'a cat'] });
equal(emb.data.length, 2, 'two embeddings');
for (const d of emb.data) {
    const norm = Math.sqrt(d.embedding.reduce((s, x) => s + x * x, 0));
    check(Math.abs(norm - 1) < 1e-4, `embedding ${d.index} is L2-normalised (norm ${norm})`);
}
const floats = await client.embeddings.create({ model, input: 'Once upon a time', encoding_format: 'float' });
check(floats.data[0].embedding.every((x, i) => Math.abs(x - emb.data[0].embedding[i]) < 1e-6), 'float and base64 agree');
const ids = await client.embeddings.create({ model, input: [[1, 403, 407]], encoding_format: 'float' });
equal(ids.data[0].embedding.length, emb.data[0].embedding.length, 'token-array input');

try {
    await client.completions.create({ model, prompt, temperature: 5 });
    check(false, 'temperature 5 is refused');
} catch (e) {
    equal(e.status, 400, 'status of a bad temperature');
    equal(e.param, 'temperature', 'the error names the field');
}
console.log('ok');
