// toolgate as seen through the official TypeScript MCP SDK (@modelcontextprotocol/sdk 1.32.2).
// Run with Node 22: `node --test test_sdk.mjs`, with TOOLGATE_BIN set (and optionally
// TOOLGATE_TEST_DATABASE_URL). SDK 1.32.2 speaks the initialize-handshake generation (up to
// 2025-11-25) only, so every scenario here runs on that wire.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, openSync, readFileSync, accessSync, constants } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';

const BIN = process.env.TOOLGATE_BIN;
const DATABASE_URL = process.env.TOOLGATE_TEST_DATABASE_URL || '';
const CARRIERS = ['personal_url', 'bearer', 'x_api_key', 'query'];
const MONEY = /^\d+\.\d\d$/;

let baseUrl;
let dataDir;
let serverProc;
let logPath;

// The JSON line `toolgate serve --listen 127.0.0.1:0` prints on stdout once it is bound
// ({"listening": …, "public_url": …}); the rest of stdout keeps flowing so the server never blocks.
function announced(proc, ms) {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`no announcement in ${ms} ms`)), ms);
    const onData = (chunk) => {
      seen += chunk;
      const end = seen.indexOf('\n');
      if (end < 0) return;
      clearTimeout(timer);
      proc.stdout.off('data', onData);
      proc.stdout.resume();
      try { resolve(JSON.parse(seen.slice(0, end))); } catch (e) { reject(e); }
    };
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', onData);
    proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`toolgate serve exited with ${code}`)); });
  });
}

function env() {
  const e = { ...process.env, TOOLGATE_DATA_DIR: dataDir };
  if (baseUrl) e.TOOLGATE_PUBLIC_URL = baseUrl;
  if (DATABASE_URL) e.TOOLGATE_DATABASE_URL = DATABASE_URL;
  return e;
}

function logTail() {
  try {
    return readFileSync(logPath, 'utf8').slice(-4000);
  } catch {
    return '(no server log)';
  }
}

// `toolgate ARGS --data-dir DIR`, parsed as the one JSON object it prints
function cli(...args) {
  const argv = [...args, '--data-dir', dataDir];
  let out;
  try {
    out = execFileSync(BIN, argv, { env: env(), encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    assert.fail(`toolgate ${argv.join(' ')} failed: ${err.message}\n${err.stderr ?? ''}`);
  }
  try {
    return JSON.parse(out);
  } catch {
    assert.fail(`toolgate ${argv.join(' ')} did not print one JSON object: ${out}`);
  }
}

function createAccount() {
  const acct = cli('account', 'create', '--email', `ts-${randomUUID().slice(0, 12)}@example.test`);
  for (const f of ['account_id', 'email', 'api_key', 'personal_url']) assert.ok(f in acct, `no ${f} in ${JSON.stringify(acct)}`);
  return acct;
}

function endpoint(carrier, key, personalUrl = `${baseUrl}/u/${key}`) {
  switch (carrier) {
    case 'personal_url': return { url: personalUrl, headers: {} };
    case 'bearer': return { url: `${baseUrl}/`, headers: { Authorization: `Bearer ${key}` } };
    case 'x_api_key': return { url: `${baseUrl}/`, headers: { 'X-Api-Key': key } };
    case 'query': return { url: `${baseUrl}/?key=${key}`, headers: {} };
    default: throw new Error(carrier);
  }
}

async function connect({ url, headers }) {
  const client = new Client({ name: 'toolgate-ts-tests', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  await client.connect(transport);
  return client;
}

async function withClient(ep, fn) {
  const client = await connect(ep);
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

function checkRecord(r) {
  const ints = ['free_remaining_this_month', 'free_monthly_limit', 'paid_calls_available'];
  const strs = ['tier', 'wallet_balance_usd', 'paid_call_cost_usd', 'min_topup_usd', 'max_topup_usd'];
  for (const f of ints) assert.ok(Number.isInteger(r[f]), `${f} is not an integer: ${JSON.stringify(r)}`);
  for (const f of strs) assert.equal(typeof r[f], 'string', `${f} is not a string: ${JSON.stringify(r)}`);
  assert.equal(r.free_monthly_limit, 1000);
  assert.match(r.wallet_balance_usd, MONEY);
  assert.equal(r.paid_call_cost_usd, '0.008');
  assert.equal(r.min_topup_usd, '5.00');
  assert.equal(r.max_topup_usd, '500.00');
  return r;
}

async function billing(client) {
  const res = await client.callTool({ name: 'svc_read', arguments: { billing: true } });
  assert.ok(!res.isError, `svc_read billing failed: ${JSON.stringify(res.content)}`);
  const record = checkRecord(res.structuredContent?.billing);
  const text = res.content.find((c) => c.type === 'text');
  assert.ok(text, 'no text content item');
  let parsed = JSON.parse(text.text);
  if (parsed && typeof parsed === 'object' && 'billing' in parsed) parsed = parsed.billing;
  assert.deepEqual(parsed, record, 'text item and structuredContent differ');
  return record;
}

function checkTools(tools) {
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), ['svc_ai', 'svc_read', 'svc_write']);
  for (const t of tools) {
    assert.ok(t.title || t.annotations?.title, `${t.name} has no title`);
    assert.ok(t.description, `${t.name} has no description`);
    assert.equal(t.inputSchema?.type, 'object');
  }
  assert.equal(byName.svc_read.annotations?.readOnlyHint, true);
  assert.equal(byName.svc_write.annotations?.destructiveHint, true);
  assert.equal(byName.svc_ai.annotations?.readOnlyHint, true);
  assert.equal(byName.svc_ai.annotations?.openWorldHint, true);
}

// A refused key: the SDK surfaces HTTP 401 as a StreamableHTTPError whose message carries the body.
async function assertRefused(ep) {
  await assert.rejects(
    withClient(ep, (c) => c.listTools()),
    (err) => {
      assert.equal(err.code, 401, `expected HTTP 401, got ${err.code}: ${err.message}`);
      const body = JSON.parse(err.message.slice(err.message.indexOf('{')));
      assert.equal(body.error?.code, -32001, err.message);
      return true;
    },
  );
}

before(async () => {
  assert.ok(BIN, 'TOOLGATE_BIN is not set: point it at the toolgate binary');
  accessSync(BIN, constants.X_OK);
  dataDir = mkdtempSync(join(tmpdir(), 'toolgate-ts-'));
  logPath = join(dataDir, 'server.log');
  // port 0: the server takes a free port and announces it, so no port is bound twice
  const args = ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir];
  if (DATABASE_URL) args.push('--database-url', DATABASE_URL);
  const log = openSync(logPath, 'a');
  serverProc = spawn(BIN, args, { env: env(), stdio: ['ignore', 'pipe', log] });
  try {
    baseUrl = (await announced(serverProc, 60_000)).public_url;
  } catch (e) {
    assert.fail(`toolgate serve announced no address (${e.message}):\n${logTail()}`);
  }
  const r = await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(30_000) });
  assert.equal(r.status, 200, `toolgate serve did not answer /healthz with 200:\n${logTail()}`);
});

after(async () => {
  if (serverProc && serverProc.exitCode === null) {
    const exited = new Promise((r) => serverProc.once('exit', r));
    serverProc.kill('SIGTERM');
    const timer = setTimeout(() => serverProc.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  }
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe('every carrier', () => {
  for (const carrier of CARRIERS) {
    test(`tools and billing over ${carrier}`, async () => {
      const acct = createAccount();
      assert.equal(acct.personal_url, `${baseUrl}/u/${acct.api_key}`);
      await withClient(endpoint(carrier, acct.api_key, acct.personal_url), async (client) => {
        checkTools((await client.listTools()).tools);
        const first = await billing(client);
        assert.equal(first.tier, 'free');
        assert.equal(first.free_remaining_this_month, 999, 'a fresh account\'s first call leaves 999');
        assert.equal(first.wallet_balance_usd, '0.00');
        await client.listTools(); // free
        const second = await billing(client);
        assert.equal(second.free_remaining_this_month, first.free_remaining_this_month - 1);
      });
    });

    test(`an unknown key over ${carrier} is refused`, async () => {
      await assertRefused(endpoint(carrier, `svck_${randomBytes(32).toString('hex')}`));
    });
  }
});

test('a rotated key is refused at once, the new one works', async () => {
  const acct = createAccount();
  await withClient(endpoint('personal_url', acct.api_key), async (c) => checkTools((await c.listTools()).tools));
  const rotated = cli('account', 'rotate-key', '--email', acct.email);
  assert.notEqual(rotated.api_key, acct.api_key);
  assert.equal(rotated.account_id, acct.account_id);
  await assertRefused(endpoint('personal_url', acct.api_key));
  await assertRefused(endpoint('x_api_key', acct.api_key));
  await withClient(endpoint('personal_url', rotated.api_key, rotated.personal_url), async (c) => {
    checkTools((await c.listTools()).tools);
  });
});

test('a malformed key and no key are refused', async () => {
  await assertRefused({ url: `${baseUrl}/u/not-a-key`, headers: {} });
  await assertRefused({ url: `${baseUrl}/`, headers: {} });
});

test('an unknown tool is a -32601 error and free', async () => {
  const acct = createAccount();
  await withClient(endpoint('personal_url', acct.api_key), async (client) => {
    await assert.rejects(client.callTool({ name: 'svc_nope', arguments: {} }), (err) => {
      assert.ok(err instanceof McpError, `expected McpError, got ${err}`);
      assert.equal(err.code, -32601);
      return true;
    });
    assert.equal((await billing(client)).free_remaining_this_month, 999);
  });
});

test('a long call runs as an MCP task (2025-11-25 experimental tasks)', async () => {
  const acct = createAccount();
  await withClient(endpoint('personal_url', acct.api_key), async (client) => {
    assert.ok(client.getServerCapabilities()?.tasks?.requests?.tools?.call, JSON.stringify(client.getServerCapabilities()));
    const { tools } = await client.listTools();
    const support = Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport]));
    assert.deepEqual(support, { svc_read: undefined, svc_write: 'optional', svc_ai: 'optional' });
    const run = async (code) => {
      const seen = [];
      for await (const msg of client.experimental.tasks.callToolStream(
        { name: 'svc_write', arguments: { code, session_id: 'tasks' } },
        undefined,
        { task: { ttl: 120_000 } },
      )) seen.push(msg);
      return seen;
    };
    const seen = await run("import time\ntime.sleep(3)\n'from a task'");
    assert.equal(seen[0].type, 'taskCreated', JSON.stringify(seen));
    assert.ok(seen.some((m) => m.type === 'taskStatus' && m.task.status === 'working'), JSON.stringify(seen));
    const result = seen.at(-1);
    assert.equal(result.type, 'result', JSON.stringify(result));
    assert.equal(result.result.structuredContent.python.result.text, "'from a task'");
    assert.equal(result.result._meta['io.modelcontextprotocol/related-task'].taskId, seen[0].task.taskId);
    // a tool's error fails the task (as 2025-11-25 says); its text is the status message, and
    // tasks/result still has the whole result
    const failed = await run("raise ValueError('boom from a task')");
    assert.equal(failed.at(-1).type, 'error', JSON.stringify(failed));
    const id = failed[0].task.taskId;
    const status = await client.experimental.tasks.getTask(id);
    assert.equal(status.status, 'failed');
    assert.match(status.statusMessage, /boom from a task/);
    const whole = await client.experimental.tasks.getTaskResult(id, CallToolResultSchema);
    assert.equal(whole.isError, true);
    const listed = await client.experimental.tasks.listTasks();
    assert.ok(listed.tasks.some((t) => t.taskId === id), JSON.stringify(listed));
    // cancelling a running task
    const started = await client.request(
      { method: 'tools/call', params: { name: 'svc_write', arguments: { code: 'import time\ntime.sleep(60)', session_id: 'tasks' }, task: { ttl: 60_000 } } },
      CreateTaskResultSchema,
    );
    const cancelled = await client.experimental.tasks.cancelTask(started.task.taskId);
    assert.equal(cancelled.status, 'cancelled');
    await assert.rejects(client.experimental.tasks.getTask('no-such-task'), (err) => err.code === -32602);
  });
});

test('python and bash run in a session, output streams as progress', async () => {
  const acct = createAccount();
  await withClient(endpoint('personal_url', acct.api_key), async (client) => {
    const write = (args, options) => client.callTool({ name: 'svc_write', arguments: args }, undefined, options);
    const textOf = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
    const set = await write({ code: 'x = 20 + 22', session_id: 'ts' });
    assert.ok(!set.isError, textOf(set));
    const get = await write({ code: 'x', session_id: 'ts' });
    assert.equal(textOf(get), '42');
    assert.equal(get.structuredContent.python.result.text, '42');
    const bash = await write({ bash: 'printf "%s" "$((x + 1))"; exit 1', session_id: 'ts' });
    assert.ok(bash.isError, 'a non-zero exit status is a tool error');
    assert.equal(bash.structuredContent.bash.exit_status, 1);
    const seen = [];
    const streamed = await write(
      { code: "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)" },
      { onprogress: (p) => seen.push(p), resetTimeoutOnProgress: true },
    );
    assert.equal(textOf(streamed), 'tick 0\ntick 1\ntick 2\n');
    const messages = seen.map((p) => p.message ?? '').join('');
    assert.ok(messages.includes('tick 0') && messages.includes('tick 2'), JSON.stringify(seen));
  });
});
