// Drives the chat page of a running `ferrox serve` in Debian's headless Chromium.
//
//   node tests/page/chat_page.mjs http://127.0.0.1:PORT SCREENSHOT.png
//
// Opens the page, sends a message and checks that the answer is rendered while it streams and
// then gets its tokens/s line, sends a second message asking for many tokens and clicks Stop in
// the middle of it, checks the Markdown renderer on hostile text, and saves a screenshot.
// Exits 0 when every check passes, 1 with the reason on stderr otherwise. tests/test_serve_page.c
// runs it against a random-weight model; FX_CHROMIUM overrides the browser (default /usr/bin/chromium).
//
// The model must produce tokens slowly enough to be seen streaming and to be stopped half-way:
// tests/test_serve_page.c serves a random-weight smollm2-135m (`ferrox synth`) for that;
// stories260K is so fast that the server sends its whole answer in one or two events.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, shot] = process.argv.slice(2);
if (!base || !shot) {
  console.error("usage: node chat_page.mjs SERVER_URL SCREENSHOT_PATH");
  process.exit(2);
}
const upstream = new URL(base);
const url = upstream.href.replace(/\/+$/, "") + "/";
const TIMEOUT_MS = 60000;
const POLL = { polling: 50 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}

const profile = mkdtempSync(join(tmpdir(), "ferrox-chromium-"));
let context = null;
let status = 0;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.FX_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    viewport: { width: 1000, height: 800 },
    timeout: TIMEOUT_MS,
  });
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(TIMEOUT_MS);
  const problems = [];
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => {
    if (m.type() === "error") problems.push("console error: " + m.text());
  });
  page.on("requestfailed", (r) => {
    // The stopped answer's request is aborted on purpose; nothing else may fail.
    if (!r.url().endsWith("/v1/chat/completions")) problems.push("request failed: " + r.url());
  });
  const outside = [];
  page.on("request", (r) => {
    if (!r.url().startsWith(url) && !r.url().startsWith("data:")) outside.push(r.url());
  });

  const res = await page.goto(url);
  check(res && res.ok(), "GET / answers 200 (got " + (res && res.status()) + ")");
  check(/text\/html/.test(res.headers()["content-type"] || ""), "GET / is text/html");
  await page.waitForFunction(() => {
    const m = document.getElementById("model");
    return m && !m.classList.contains("bad") && !/connecting/.test(m.textContent);
  }, null, POLL);
  // Every change to the log, recorded as it happens: [state, text length] of the last answer.
  await page.evaluate(() => {
    window.fxSeen = [];
    new MutationObserver(() => {
      const all = document.querySelectorAll(".msg.assistant");
      const box = all[all.length - 1];
      if (box) window.fxSeen.push([all.length, box.dataset.state, box.querySelector(".body").textContent.length]);
    }).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true, attributes: true });
  });
  const model = await page.textContent("#model");
  console.log("model:", model);

  // The answers' state lives on the message box: streaming, then done, stopped or error.
  const last = () => {
    const all = document.querySelectorAll(".msg.assistant");
    const box = all[all.length - 1];
    if (!box) return null;
    const stats = box.querySelector(".stats");
    return {
      n: all.length,
      state: box.dataset.state,
      text: box.querySelector(".body").textContent,
      stats: stats ? stats.textContent : "",
    };
  };

  // 1. A streamed answer: seen growing while it streams, then finished with its tokens/s line.
  await page.fill("#system", "You are a storyteller.");
  await page.fill("#temperature", "0");
  await page.fill("#max-tokens", "24");
  await page.fill("#input", "Once upon a time");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => {
    const box = document.querySelector(".msg.assistant");
    return box && box.dataset.state && box.dataset.state !== "streaming";
  }, null, POLL);
  const first = await page.evaluate(last);
  console.log("answer 1:", JSON.stringify(first));
  check(first.state === "done", "answer 1 ends done (got " + first.state + ": " + first.text + ")");
  const seen1 = (await page.evaluate(() => window.fxSeen)).filter((e) => e[0] === 1 && e[1] === "streaming");
  const partial = new Set(seen1.map((e) => e[2]).filter((n) => n > 0 && n < first.text.length));
  check(partial.size >= 2, "answer 1 was shown growing while it streamed (lengths seen: " +
    JSON.stringify(seen1.map((e) => e[2])) + ")");
  check(/\d+ tokens? \u00b7 [\d.]+ tok\/s/.test(first.stats), "answer 1 shows tokens/s: " + first.stats);
  check((await page.textContent(".msg.user .body")) === "Once upon a time", "the user's message is shown");

  // 2. A long answer, stopped half-way: the stream ends, the text stops growing, Send is back,
  // and the server's sequence is gone.
  await page.fill("#max-tokens", "400");
  await page.fill("#input", "Tell me a long story about a dragon.");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => {
    const box = document.querySelectorAll(".msg.assistant")[1];
    return box && box.dataset.state === "streaming" && box.querySelector(".body").textContent.length > 0;
  }, null, POLL);
  await page.click("#stop");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant")[1].dataset.state !== "streaming",
    null, POLL);
  const stopped = await page.evaluate(last);
  console.log("answer 2:", JSON.stringify(stopped));
  check(stopped.n === 2 && stopped.state === "stopped", "answer 2 is stopped (got " + stopped.state + ")");
  check(/stopped/.test(stopped.stats), "answer 2's line says stopped: " + stopped.stats);
  await page.waitForTimeout(700);
  const after = await page.evaluate(last);
  check(after.text === stopped.text, "answer 2 does not grow after Stop");
  check(await page.isVisible("#send"), "Send is back after Stop");
  check(await page.isHidden("#stop"), "Stop is hidden after Stop");
  let running = null;
  for (const t0 = Date.now(); Date.now() - t0 < 10000; await sleep(100)) {
    const text = await (await fetch(new URL("/metrics", upstream))).text();
    const m = /^ferrox:num_requests_running(?:\{[^}]*\})? (\S+)$/m.exec(text);
    running = m ? Number(m[1]) : null;
    if (running === 0) break;
  }
  check(running === 0, "no request left running on the server after Stop (ferrox:num_requests_running " + running + ")");

  // 3. The Markdown renderer: fences become <pre><code>, markup in model text stays text.
  const md = await page.evaluate(() => {
    const div = document.createElement("div");
    renderMarkdown(div, 'say <img src=x onerror="window.pwned=1"> and `a<b>`\n```js\nif (a < b) alert("x");\n```\n<script>window.pwned=2</script>');
    return {
      imgs: div.querySelectorAll("img, script, b").length,
      pre: div.querySelector("pre > code") ? div.querySelector("pre > code").textContent : null,
      lang: div.querySelector("pre") ? div.querySelector("pre").dataset.lang : null,
      inline: div.querySelector(":scope > code") ? div.querySelector(":scope > code").textContent : null,
      text: div.textContent,
      pwned: window.pwned === undefined,
    };
  });
  check(md.imgs === 0 && md.pwned, "model text is never parsed as HTML");
  check(md.pre === 'if (a < b) alert("x");' && md.lang === "js", "a ``` fence becomes <pre><code>");
  check(md.inline === "a<b>", "`inline` code becomes <code>");
  check(md.text.includes("<script>window.pwned=2</script>"), "tags stay visible as text");

  // The conversation goes on after a stop: the history holds the stopped answer's text.
  const history = await page.evaluate(() => state.history.map((m) => m.role).join(","));
  check(history === "user,assistant,user,assistant", "history after a stop: " + history);

  check(outside.length === 0, "the page loads nothing from elsewhere: " + outside.join(" "));
  check(problems.length === 0, problems.join("; "));
  await page.screenshot({ path: shot, fullPage: false });
  console.log("ok: screenshot in", shot);
} catch (e) {
  console.error(e && e.stack ? e.stack : String(e));
  status = 1;
  // What the page showed when it failed, and a screenshot of it beside the requested one.
  const page = context && context.pages()[0];
  if (page) {
    const msgs = await page.evaluate(() => Array.from(document.querySelectorAll(".msg")).map((m) =>
      ({ role: m.classList[1], state: m.dataset.state, text: m.textContent }))).catch(() => null);
    console.error("page messages:", JSON.stringify(msgs));
    await page.screenshot({ path: shot.replace(/(\.png)?$/, ".failed.png") }).catch(() => {});
  }
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
process.exit(status);
