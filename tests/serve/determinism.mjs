// 16 different prompts at temperature 0: each alone, then all at once (half streamed); every
// text must be the same, whatever ran beside it, however it was batched, queued or swapped out.
import { client, check, equal, metric, streamText } from './common.mjs';

const subjects = ['a cat', 'a dog', 'the sun', 'a big tree', 'Lily', 'Tom and Sue', 'a red ball', 'the park',
    'a little bird', 'the sea', 'a happy girl', 'a toy car', 'the moon', 'a fish', 'a funny frog', 'the rain'];
const prompts = subjects.map((s, i) => `Once upon a time there was ${s}.${' It was a sunny day.'.repeat(i % 4)}`);
const ask = (prompt, stream) => client.completions.create({ prompt, max_tokens: 40, temperature: 0, stream, model: 'x' });

const alone = [];
for (const p of prompts) alone.push((await ask(p, false)).choices[0].text);
const together = await Promise.all(prompts.map(async (p, i) =>
    i % 2 ? streamText(await ask(p, true), false) : (await ask(p, false)).choices[0].text));
for (let i = 0; i < prompts.length; i++) equal(together[i], alone[i], `prompt ${i} alone vs with 15 others`);
check(new Set(alone).size > 8, 'the prompts give different texts');
console.log(`ok (preemptions ${await metric('num_preemptions_total')})`);
