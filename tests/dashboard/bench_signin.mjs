// Benchmark: the dashboard's sign-in flow end to end in a real browser (Debian's chromium via
// playwright-core), from submitting the e-mail on the sign-in form to the overview rendered:
// the form's POST and its "Check your inbox" page, the mail arriving in a real SMTP server on
// loopback (read from its .eml file), the confirm page the link opens, and the "Sign in" button's
// POST with its redirect to the overview. Each run is a fresh browser context (no cookies) and a
// new address (the server limits links per address). Prints p50/p90/max of the whole flow and
// of each leg, and one JSON line with the figures.
//
//   node bench_signin.mjs [--runs N] [--warmup N]     (N=20 runs after 2 warm-up runs)
//
// Needs TOOLGATE_BIN (default target/release/toolgate). Run as scripts/test-dashboard.sh --bench.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { startSink, startStripe, startToolgate, launchChromium, newContext, signInFromForm, percentile } from './harness.mjs';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '20' }, warmup: { type: 'string', default: '2' } } });
const RUNS = Number(values.runs);
const WARMUP = Number(values.warmup);

const sinkDir = mkdtempSync(join(tmpdir(), 'toolgate-bench-mail-'));
const sink = await startSink(sinkDir);
const stripe = await startStripe();
let tg;
let browser;
let failed = false;
try {
  tg = await startToolgate({ smtpPort: sink.port, stripeBase: stripe.base });
  const { base } = tg;
  browser = await launchChromium();
  const tag = randomBytes(4).toString('hex');
  const legs = { total: [], form: [], mail: [], confirm: [], overview: [] };
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const { context } = await newContext(browser, [base], { watch: false });
    try {
      const page = await context.newPage();
      await page.goto(`${base}/dashboard/sign-in`);
      const { ms } = await signInFromForm(page, sink, `bench-${tag}-${i}@example.test`, base);
      if (new URL(page.url()).pathname !== '/dashboard') throw new Error(`run ${i} ended on ${page.url()}`);
      if (i >= WARMUP) for (const k of Object.keys(legs)) legs[k].push(ms[k]);
    } finally {
      await context.close();
    }
  }
  const summary = {};
  console.log(`sign-in in chromium, e-mail submitted to overview rendered: ${RUNS} runs (after ${WARMUP} warm-up), chromium ${browser.version()}`);
  console.log('leg        p50 ms   p90 ms   max ms');
  for (const [k, xs] of Object.entries(legs)) {
    const s = [...xs].sort((a, b) => a - b);
    summary[k] = { p50: +percentile(s, 50).toFixed(1), p90: +percentile(s, 90).toFixed(1), max: +s[s.length - 1].toFixed(1) };
    console.log(`${k.padEnd(9)} ${summary[k].p50.toFixed(1).padStart(7)}  ${summary[k].p90.toFixed(1).padStart(7)}  ${summary[k].max.toFixed(1).padStart(7)}`);
  }
  // the server's own share, from its access log (micros= per request), the warm-up left out
  const served = {};
  for (const m of tg.log().matchAll(/method="(GET|POST)" path=(\/magic-link|\/dashboard\/sign-in\/confirm|\/dashboard)(?:\?\S*)? status=\d+ micros=(\d+)/g)) {
    (served[`${m[1]} ${m[2]}`] ??= []).push(Number(m[3]) / 1000);
  }
  summary.server = {};
  for (const [k, xs] of Object.entries(served)) {
    const s = xs.slice(-RUNS).sort((a, b) => a - b);
    summary.server[k] = { p50: +percentile(s, 50).toFixed(2), p90: +percentile(s, 90).toFixed(2), max: +s[s.length - 1].toFixed(2) };
    console.log(`  server ${k.padEnd(31)} ${summary.server[k].p50.toFixed(2).padStart(7)}  ${summary.server[k].p90.toFixed(2).padStart(7)}  ${summary.server[k].max.toFixed(2).padStart(7)}`);
  }
  console.log('(form: POST /magic-link to "Check your inbox" shown; mail: until the .eml is in the sink;'
    + ' confirm: the link\'s page loaded; overview: "Sign in" pressed to the overview shown;'
    + ' server: the time toolgate logged for each request, mail handed to SMTP included)');
  console.log(JSON.stringify({ bench: 'dashboard-sign-in', runs: RUNS, ms: summary }));
} catch (e) {
  failed = true;
  console.error(`bench failed: ${e.stack ?? e}`);
  if (tg) console.error(tg.logTail());
} finally {
  if (browser) await browser.close();
  if (tg) await tg.stop();
  await stripe.close();
  await sink.stop();
  rmSync(sinkDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
