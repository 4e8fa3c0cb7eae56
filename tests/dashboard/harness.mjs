// What the dashboard's browser test and sign-in benchmark share: a real SMTP sink on loopback,
// a Stripe Checkout stand-in, `toolgate serve` wired to both, Debian's chromium through
// playwright-core, a reader for the .eml files the sink keeps, MCP clients (the official
// TypeScript SDK installed for tests/clients/ts) and screenshots at desktop and phone width.
// Everything binds 127.0.0.1.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { createHmac, randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const HERE = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(HERE, '../..');
export const BIN = process.env.TOOLGATE_BIN || join(ROOT, 'target/release/toolgate');
export const CHROMIUM = process.env.TOOLGATE_CHROMIUM || '/usr/bin/chromium';
export const OUT = process.env.TOOLGATE_TEST_OUTPUT
  ? join(process.env.TOOLGATE_TEST_OUTPUT, 'dashboard')
  : join(ROOT, 'target/test-output/dashboard');
export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };
export const MAIL_FROM = 'toolgate@example.test';
export const STRIPE_KEY = `sk_test_${randomBytes(12).toString('hex')}`;
export const WEBHOOK_SECRET = `whsec_${randomBytes(16).toString('hex')}`;

const SDK = new URL('../clients/ts/node_modules/@modelcontextprotocol/sdk/dist/esm/', import.meta.url);
const { Client } = await import(new URL('client/index.js', SDK));
const { StreamableHTTPClientTransport } = await import(new URL('client/streamableHttp.js', SDK));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// the first line a child prints on stdout, then stdout keeps flowing so it never blocks
function firstLine(proc, ms, what) {
  return new Promise((resolveLine, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`${what}: nothing announced in ${ms} ms`)), ms);
    const onData = (chunk) => {
      seen += chunk;
      const end = seen.indexOf('\n');
      if (end < 0) return;
      clearTimeout(timer);
      proc.stdout.off('data', onData);
      proc.stdout.resume();
      resolveLine(seen.slice(0, end));
    };
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', onData);
    proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${what} exited with ${code}`)); });
  });
}

async function stopChild(proc) {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

// ---------------------------------------------------------------------------------------------
// Mail: the .eml files the sink writes, read as a mail client would.

function decodeQuotedPrintable(text) {
  const bytes = [];
  const soft = text.replace(/=\r?\n/g, '');
  for (let i = 0; i < soft.length; i++) {
    const m = soft[i] === '=' && /^[0-9A-Fa-f]{2}$/.test(soft.slice(i + 1, i + 3));
    if (m) { bytes.push(parseInt(soft.slice(i + 1, i + 3), 16)); i += 2; } else bytes.push(...Buffer.from(soft[i], 'utf8'));
  }
  return Buffer.from(bytes).toString('utf8');
}

// RFC 2047 encoded words (=?utf-8?Q?…?= / =?utf-8?B?…?=) in a header
function decodeWords(value) {
  return value
    .replace(/\?=\s+=\?/g, '?==?')
    .replace(/=\?([^?]+)\?([QqBb])\?([^?]*)\?=/g, (_, _charset, enc, data) =>
      enc.toUpperCase() === 'B'
        ? Buffer.from(data, 'base64').toString('utf8')
        : decodeQuotedPrintable(data.replace(/_/g, ' ')));
}

function splitHead(raw) {
  const at = raw.search(/\r?\n\r?\n/);
  const head = at < 0 ? raw : raw.slice(0, at);
  const body = at < 0 ? '' : raw.slice(at).replace(/^\r?\n\r?\n/, '');
  const headers = {};
  for (const line of head.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = decodeWords(line.slice(colon + 1).trim());
  }
  return { headers, body };
}

function decodeBody(headers, body) {
  const cte = (headers['content-transfer-encoding'] || '7bit').toLowerCase();
  if (cte === 'quoted-printable') return decodeQuotedPrintable(body);
  if (cte === 'base64') return Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
  return body;
}

// { headers, text, contentType } of an RFC 5322 message; for multipart, its text/plain part
export function parseEml(raw) {
  const { headers, body } = splitHead(raw);
  const contentType = (headers['content-type'] || 'text/plain').toLowerCase();
  if (contentType.startsWith('multipart/')) {
    const boundary = /boundary="?([^";]+)"?/i.exec(headers['content-type'])?.[1];
    if (!boundary) throw new Error(`multipart mail without a boundary: ${headers['content-type']}`);
    const parts = body.split(`--${boundary}`).slice(1).filter((p) => !p.startsWith('--'));
    for (const part of parts) {
      const p = splitHead(part.replace(/^\r?\n/, ''));
      if ((p.headers['content-type'] || 'text/plain').toLowerCase().startsWith('text/plain')) {
        return { headers, text: decodeBody(p.headers, p.body), contentType, parts: parts.length };
      }
    }
    throw new Error('multipart mail without a text/plain part');
  }
  return { headers, text: decodeBody(headers, body), contentType, parts: 1 };
}

// ---------------------------------------------------------------------------------------------
// The SMTP sink, scripts/smtp-sink.py (Debian's python3-aiosmtpd): `DIR`, prints
// `READY <port>`, saves each message as DIR/N.eml.

export async function startSink(dir) {
  mkdirSync(dir, { recursive: true });
  const script = join(ROOT, 'scripts/smtp-sink.py');
  const proc = spawn('/usr/bin/python3', [script, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await firstLine(proc, 20_000, `SMTP sink ${script}`);
  const m = /^READY (\d+)$/.exec(line.trim());
  if (!m) { await stopChild(proc); throw new Error(`SMTP sink said ${JSON.stringify(line)}, not READY <port>`); }
  const taken = new Set();
  return {
    port: Number(m[1]),
    dir,
    script,
    // the next message not read before whose To: names `to`, parsed; polls every few ms
    async waitFor(to, ms = 15_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        for (const name of readdirSync(dir)) {
          if (!/^\d+\.eml$/.test(name) || taken.has(name)) continue;
          const raw = readFileSync(join(dir, name), 'utf8');
          const mail = parseEml(raw);
          if ((mail.headers.to || '').toLowerCase().includes(to.toLowerCase())) {
            taken.add(name);
            return { ...mail, raw, file: join(dir, name) };
          }
        }
        if (Date.now() > deadline) throw new Error(`no mail to ${to} in ${dir} within ${ms} ms`);
        await sleep(5);
      }
    },
    // how many messages the sink holds for `to` (read or not)
    count(to) {
      return readdirSync(dir).filter((n) => /^\d+\.eml$/.test(n))
        .filter((n) => (parseEml(readFileSync(join(dir, n), 'utf8')).headers.to || '').toLowerCase().includes(to.toLowerCase()))
        .length;
    },
    stop: () => stopChild(proc),
  };
}

// ---------------------------------------------------------------------------------------------
// Stripe's Checkout API, as much of it as toolgate uses: POST /v1/checkout/sessions (form body,
// Bearer secret key) answering a checkout.session whose url is this stand-in's own pay page.

export async function startStripe() {
  const requests = [];
  let base;
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const url = new URL(req.url, base);
      if (req.method === 'POST' && url.pathname === '/v1/checkout/sessions') {
        const form = Object.fromEntries(new URLSearchParams(body));
        const id = `cs_test_${randomBytes(12).toString('hex')}`;
        const record = { id, authorization: req.headers.authorization, contentType: req.headers['content-type'], form };
        requests.push(record);
        if (req.headers.authorization !== `Bearer ${STRIPE_KEY}`) {
          res.writeHead(401, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { type: 'invalid_request_error', message: 'Invalid API Key provided' } }));
          return;
        }
        const missing = ['client_reference_id', 'line_items[0][price_data][unit_amount]', 'success_url'].filter((f) => !form[f]);
        if (missing.length) {
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { type: 'invalid_request_error', message: `Missing required param: ${missing.join(', ')}` } }));
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id, object: 'checkout.session', url: `${base}/pay/${id}`, client_reference_id: form.client_reference_id }));
        return;
      }
      const pay = /^\/pay\/(cs_test_[0-9a-f]+)$/.exec(url.pathname);
      if (req.method === 'GET' && pay && requests.some((r) => r.id === pay[1])) {
        const r = requests.find((x) => x.id === pay[1]);
        const cents = Number(r.form['line_items[0][price_data][unit_amount]']);
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end(`<!doctype html><meta name="viewport" content="width=device-width"><title>Pay (test)</title>
<body style="font-family:sans-serif;max-width:30em;margin:3em auto;padding:0 1em">
<h1 id="stand-in">Stripe Checkout (test stand-in)</h1>
<p>Session <code id="session">${pay[1]}</code></p><p>Amount <b id="amount">${(cents / 100).toFixed(2)} USD</b></p></body>`);
        return;
      }
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${server.address().port}`;
  return { base, requests, close: () => new Promise((r) => server.close(r)) };
}

// `Stripe-Signature` for `body` signed with `secret` at `t` (Unix seconds)
export function stripeSignature(body, secret = WEBHOOK_SECRET, t = Math.floor(Date.now() / 1000)) {
  const v1 = createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
  return `t=${t},v1=${v1}`;
}

// ---------------------------------------------------------------------------------------------
// toolgate serve on 127.0.0.1:0, its mail to the sink and its payments to the stand-in

export async function startToolgate({ smtpPort, stripeBase, extraEnv = {} }) {
  const dataDir = mkdtempSync(join(tmpdir(), 'toolgate-dashboard-'));
  const logPath = join(dataDir, 'server.log');
  const env = {
    ...process.env,
    TOOLGATE_DATA_DIR: dataDir,
    TOOLGATE_SMTP_URL: `smtp://127.0.0.1:${smtpPort}`,
    TOOLGATE_MAIL_FROM: MAIL_FROM,
    TOOLGATE_STRIPE_SECRET_KEY: STRIPE_KEY,
    TOOLGATE_STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
    TOOLGATE_STRIPE_API_BASE: stripeBase,
    TOOLGATE_EGRESS_ALLOW_PRIVATE: '127.0.0.1',
    ...extraEnv,
  };
  // sessions (none should start here) must live outside /tmp: scripts/test-dashboard.sh sets
  // TOOLGATE_SANDBOX_ROOT as test-clients.sh does; run alone, this makes one under /var/tmp
  let ownSandbox = null;
  if (!env.TOOLGATE_SANDBOX_ROOT) {
    ownSandbox = mkdtempSync('/var/tmp/toolgate-sessions-');
    chmodSync(ownSandbox, 0o711);
    env.TOOLGATE_SANDBOX_ROOT = ownSandbox;
  }
  const cleanup = () => { rmSync(dataDir, { recursive: true, force: true }); if (ownSandbox) rmSync(ownSandbox, { recursive: true, force: true }); };
  const log = openSync(logPath, 'a');
  const proc = spawn(BIN, ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir], { env, stdio: ['ignore', 'pipe', log] });
  const logTail = () => { try { return readFileSync(logPath, 'utf8').slice(-4000); } catch { return '(no server log)'; } };
  let base;
  try {
    base = JSON.parse(await firstLine(proc, 60_000, 'toolgate serve')).public_url;
    const r = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(30_000) });
    if (r.status !== 200) throw new Error(`/healthz answered ${r.status}`);
  } catch (e) {
    await stopChild(proc);
    const tail = logTail();
    cleanup();
    throw new Error(`toolgate serve did not start (${e.message}):\n${tail}`);
  }
  const readLog = () => readFileSync(logPath, 'utf8');
  return {
    base, dataDir, logTail, log: readLog,
    // The log complete up to now, for "never in the log" checks: a request of its own and its
    // access-log line awaited (the log writer keeps order, so every earlier line is in the file).
    // An unreadable log or a marker that never arrives fails, rather than passing on too little.
    async settledLog() {
      // short: the access log hides any run of 16 or more key-like characters
      const marker = `log-marker=${Math.floor(Math.random() * 1e9).toString(36)}`;
      const r = await fetch(`${base}/healthz?${marker}`, { signal: AbortSignal.timeout(10_000) });
      if (r.status !== 200) throw new Error(`the marker request answered ${r.status}`);
      const deadline = Date.now() + 10_000;
      for (;;) {
        const text = readLog();
        if (text.includes(marker)) return text;
        if (Date.now() > deadline) throw new Error(`${marker} did not reach the server's log:\n${text.slice(-4000)}`);
        await new Promise((done) => setTimeout(done, 20));
      }
    },
    async stop() { await stopChild(proc); cleanup(); },
  };
}

// ---------------------------------------------------------------------------------------------
// The browser

export function launchChromium() {
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] });
}

// A fresh context; `guard` collects page errors, console errors and any request that leaves the
// service and the stand-in (the pages must load no outside asset).
// `watch: false` (the benchmark) leaves every request alone: routing them costs time.
export async function newContext(browser, allowedOrigins, { watch = true, ...options } = {}) {
  const context = await browser.newContext({ viewport: DESKTOP, ...options });
  const guard = { pageErrors: [], consoleErrors: [], foreign: [] };
  if (!watch) return { context, guard };
  context.on('page', (page) => {
    const where = () => { try { return new URL(page.url()).pathname; } catch { return page.url(); } };
    page.on('pageerror', (e) => guard.pageErrors.push(`${where()}: ${e.message}`));
    page.on('console', (m) => { if (m.type() === 'error') guard.consoleErrors.push(`${where()}: ${m.text().slice(0, 140)}`); });
  });
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith('data:') || allowedOrigins.some((o) => u.startsWith(`${o}/`) || u === o)) return route.continue();
    guard.foreign.push(u);
    return route.abort();
  });
  return { context, guard };
}

// Screenshots of the page as it is, full page, at desktop then phone width (back to desktop
// after); at phone width the page must not scroll sideways.
export async function shoot(page, name) {
  mkdirSync(OUT, { recursive: true });
  const paths = {};
  for (const [label, size] of [['desktop', DESKTOP], ['phone', PHONE]]) {
    await page.setViewportSize(size);
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    paths[label] = join(OUT, `${name}-${label}.png`);
    await page.screenshot({ path: paths[label], fullPage: true });
    if (label === 'phone') {
      paths.phoneOverflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    }
  }
  await page.setViewportSize(DESKTOP);
  return paths;
}

// ---------------------------------------------------------------------------------------------
// MCP through the official TypeScript SDK

export async function mcpConnect(url) {
  const client = new Client({ name: 'toolgate-dashboard-tests', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

export async function withMcp(url, fn) {
  const client = await mcpConnect(url);
  try { return await fn(client); } finally { await client.close(); }
}

// One JSON-RPC request as a plain stateless POST (no initialize), answer parsed from JSON or SSE.
export async function rawRpc(url, method, params = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await r.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    const data = text.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).pop();
    try { body = JSON.parse(data); } catch { body = text; }
  }
  return { status: r.status, body };
}

// ---------------------------------------------------------------------------------------------
// The sign-in flow, as the benchmark times it: the form, the mail, the link, the button.
// `page` is on the sign-in form already. Returns the timings of its legs in ms.

export async function signInFromForm(page, sink, email, base) {
  const t0 = performance.now();
  await page.locator('form#sign-in input[name=email]').fill(email);
  const [sent] = await Promise.all([
    page.waitForNavigation({ url: `${base}/magic-link`, waitUntil: 'domcontentloaded' }),
    page.locator('form#sign-in').getByRole('button', { name: 'Send sign-in link' }).click(),
  ]);
  if (sent?.status() !== 202) {
    const origin = sent && (await sent.request().allHeaders()).origin;
    throw new Error(`POST /magic-link answered ${sent?.status()} (the browser sent Origin: ${origin}): ${await page.locator('#error').textContent().catch(() => '')}`);
  }
  await page.locator('#notice').waitFor();
  const t1 = performance.now();
  const mail = await sink.waitFor(email);
  const t2 = performance.now();
  const links = mail.text.match(/https?:\/\/[^\s<>"]+/g) || [];
  if (links.length !== 1) throw new Error(`the sign-in mail holds ${links.length} links:\n${mail.text}`);
  await page.goto(links[0], { waitUntil: 'domcontentloaded' });
  const t3 = performance.now();
  const [signedIn] = await Promise.all([
    page.waitForNavigation({ url: (u) => u.pathname === '/dashboard', waitUntil: 'domcontentloaded' }),
    page.locator('form#confirm').getByRole('button', { name: 'Sign in' }).click(),
  ]);
  if (signedIn?.status() !== 200) throw new Error(`the overview after "Sign in" answered ${signedIn?.status()}`);
  await page.locator('#personal-url').waitFor();
  const t4 = performance.now();
  return { mail, link: links[0], ms: { form: t1 - t0, mail: t2 - t1, confirm: t3 - t2, overview: t4 - t3, total: t4 - t0 } };
}

export function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}
