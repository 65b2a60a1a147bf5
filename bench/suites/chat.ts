/**
 * What the chat proxy (POST /api/llm/chat) adds on top of its upstream: the
 * same completions asked of the fake OpenAI-compatible upstream
 * (test/fake-llm-upstream.ts, its own process) directly and through Hark, in
 * one run, interleaved. Targets (issue "AI utilities"): at most 2 ms added
 * to the median time to first byte, and at least 0.9× the direct
 * throughput, for streaming and non-streaming completions.
 *
 * A third target, a bare Node proxy (the 20 lines in BARE_PROXY_SOURCE:
 * http.request and pipe, no auth, no framework), shows what any extra hop
 * costs on this machine, so Hark's own share can be told apart from it.
 *
 * Through Hark each request also pays what every authenticated route pays:
 * the JWT check and its session lookup in the database.
 */
import http from 'node:http';
import autocannon from 'autocannon';
import { ENGINE_LABEL, freshStorage, startFakeLlmUpstream, type Engine, benchEngines } from '../lib/hark.ts';
import { percentile } from '../lib/load.ts';
import { fmt, fmtRatio, type Table } from '../lib/markdown.ts';
import { startServer, type ServerProcess } from '../lib/server.ts';
import { median } from '../lib/stats.ts';
import type { Suite, SuiteContext } from '../lib/suite.ts';

/** info: what people run by default (one log line per request). */
const LOG_LEVEL = 'info';
const TTFB_SAMPLES = 400;
const TTFB_WARMUP = 100;
const ROUNDS = 3;
const WARMUP_SECONDS = 2;
const RAW_SECONDS = 3;
const PACED_SECONDS = 6;
const RATE_SECONDS = 3;
/** Concurrent completions in the paced runs: a busy desktop fleet. */
const PACED_CONCURRENCY = 32;
/** Connections for the small-completion rate runs. */
const RATE_CONNECTIONS = 16;
const TARGET_ADDED_TTFB_MS = 2;
const TARGET_THROUGHPUT_RATIO = 0.9;

/** The fake upstream's behaviours (test/fake-llm-upstream.ts FakeBehaviour). */
const SMALL = { chunks: 5, chunkSize: 16 };
/** 1 MiB of content, sent as fast as the sockets take it. */
const LARGE = { chunks: 256, chunkSize: 4096 };
/** Like a model generating about 100 tokens a second: 100 chunks 10 ms apart, ~1 s per streamed completion. */
const PACED_STREAM = { chunks: 100, chunkSize: 24, chunkDelayMs: 10 };
/** A non-streamed completion arrives whole after it was generated: 1 s, then 2.4 KB of content. */
const PACED_JSON = { chunks: 100, chunkSize: 24, delayMs: 1000 };

type Mode = 'non-streaming' | 'streaming';
const MODES: readonly Mode[] = ['non-streaming', 'streaming'];
type TargetName = 'direct' | 'bare proxy' | 'via Hark';

/** One way to ask for a completion. */
interface Target {
  name: TargetName;
  url: URL;
  headers: Record<string, string>;
  body(mode: Mode): string;
}

/** Values measured for each target, round i of every target taken back to back. */
type ByTarget = Partial<Record<TargetName, number[]>>;

interface Row {
  engine: string;
  mode: Mode;
  values: ByTarget;
}

interface Results {
  ttfb: Row[];
  ttfbTotal: Row[];
  raw: Row[];
  paced: Row[];
  rates: Row[];
}

/** A minimal proxy to the upstream: the floor any proxy pays for the extra hop. CommonJS, for `node -e`. */
const BARE_PROXY_SOURCE = `
const http = require('node:http');
const upstream = new URL(process.env.UPSTREAM_URL);
const agent = new http.Agent({ keepAlive: true });
http.createServer((req, res) => {
  if (req.method === 'GET') return res.end('ok');
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const out = http.request({ host: upstream.hostname, port: upstream.port, path: upstream.pathname, method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': body.length } }, (answer) => {
      res.writeHead(answer.statusCode, { 'content-type': answer.headers['content-type'] });
      answer.pipe(res);
    });
    out.end(body);
  });
}).listen(Number(process.env.PORT), process.env.HOST);
`;

export const chat: Suite = {
  name: 'chat',
  description: 'chat proxy overhead: time to first byte and throughput of POST /api/llm/chat against the fake upstream called directly (streaming and non-streaming)',
  async run(ctx) {
    const { engines, skipped } = await benchEngines();

    const fake = await startFakeLlmUpstream(ctx);
    const bare = await startServer({
      label: 'bare-proxy',
      args: ['-e', BARE_PROXY_SOURCE],
      cwd: ctx.repoRoot,
      env: { UPSTREAM_URL: `${fake.baseUrl}/v1/chat/completions` },
      readyPath: '/health',
      logFile: ctx.logFile('bare-proxy'),
    });
    ctx.defer(() => bare.stop());

    const results: Results = { ttfb: [], ttfbTotal: [], raw: [], paced: [], rates: [] };
    for (const engine of engines) await measureEngine(ctx, engine, fake, bare, results);
    return [ttfbTable(results, skipped), pacedTable(results, skipped), rawTable(results, skipped), rateTable(results, skipped)];
  },
};

async function measureEngine(ctx: SuiteContext, engine: Engine, fake: ServerProcess, bare: ServerProcess, results: Results): Promise<void> {
  const engineLabel = ENGINE_LABEL[engine.kind];
  const storage = await freshStorage(ctx, engine);
  const label = `hark-${engine.kind}`;
  const hark = await startServer({
    label,
    args: ['--import', 'tsx', 'src/main.ts'],
    cwd: ctx.repoRoot,
    env: {
      DATA_DIR: storage.dataDir,
      DATABASE_URL: storage.databaseUrl,
      LOG_LEVEL,
      LLM_BASE_URL: `${fake.baseUrl}/v1`,
      LLM_API_KEY: 'bench-upstream-key',
    },
    readyPath: '/api/ready',
    logFile: ctx.logFile(label),
  });
  ctx.defer(() => hark.stop());
  const token = await signUp(hark.baseUrl);

  const messages = [{ role: 'user', content: 'Tell me a story.' }];
  const upstreamBody = (mode: Mode) => JSON.stringify({ model: 'llm-4o', messages, stream: mode === 'streaming' });
  const json = { 'content-type': 'application/json' };
  const targets: Target[] = [
    { name: 'direct', url: new URL(`${fake.baseUrl}/v1/chat/completions`), headers: { ...json, authorization: 'Bearer bench-upstream-key' }, body: upstreamBody },
    { name: 'bare proxy', url: new URL(`${bare.baseUrl}/`), headers: json, body: upstreamBody },
    {
      name: 'via Hark',
      url: new URL(`${hark.baseUrl}/api/llm/chat`),
      headers: { ...json, authorization: `Bearer ${token}` },
      body: (mode) => JSON.stringify({ model: 'llm-4o-proxied', messages, stream: mode === 'streaming' }),
    },
  ];
  const [direct, , viaHark] = targets as [Target, Target, Target];
  const agents: http.Agent[] = [];
  const agent = (maxSockets: number) => {
    const created = new http.Agent({ keepAlive: true, maxSockets });
    agents.push(created);
    return created;
  };
  const single = agent(1);
  const progress = (what: string, mode: Mode, round: number, target: Target, value: number, unit: string) =>
    ctx.progress(`${engineLabel} ${what} ${mode} round ${round}: ${target.name} ${fmt(value, value < 10 ? 2 : 0)} ${unit}`);

  try {
    await setFake(fake, SMALL);
    for (const mode of MODES) await checkSame(targets, mode, single);
    for (const mode of MODES) {
      ctx.progress(`${engineLabel} ${mode}: time to first byte, ${TTFB_SAMPLES} requests to each target`);
      const ttfb: ByTarget = {};
      const total: ByTarget = {};
      for (let i = 0; i < TTFB_WARMUP + TTFB_SAMPLES; i++) {
        for (const target of rotate(targets, i)) {
          const timing = await timedRequest(target, mode, single);
          if (i < TTFB_WARMUP) continue;
          (ttfb[target.name] ??= []).push(timing.ttfbMs);
          (total[target.name] ??= []).push(timing.totalMs);
        }
      }
      results.ttfb.push({ engine: engineLabel, mode, values: ttfb });
      results.ttfbTotal.push({ engine: engineLabel, mode, values: total });
    }

    for (const mode of MODES) {
      for (const target of targets) await rateRun(target, mode, WARMUP_SECONDS);
      results.rates.push({
        engine: engineLabel,
        mode,
        values: await rounds(targets, async (target, round) => {
          const rate = await rateRun(target, mode, RATE_SECONDS);
          progress('small completions', mode, round, target, rate, 'req/s');
          return rate;
        }),
      });
    }

    await setFake(fake, LARGE);
    for (const mode of MODES) await checkSame(targets, mode, single);
    for (const mode of MODES) {
      for (const target of targets) await byteRun(target, mode, 1, WARMUP_SECONDS, single);
      results.raw.push({
        engine: engineLabel,
        mode,
        values: await rounds(targets, async (target, round) => {
          const mib = (await byteRun(target, mode, 1, RAW_SECONDS, single)).bytesPerSecond / 2 ** 20;
          progress('1 MiB completions', mode, round, target, mib, 'MiB/s');
          return mib;
        }),
      });
    }

    const fleet = agent(PACED_CONCURRENCY);
    for (const mode of MODES) {
      await setFake(fake, mode === 'streaming' ? PACED_STREAM : PACED_JSON);
      for (const target of [direct, viaHark]) await byteRun(target, mode, PACED_CONCURRENCY, WARMUP_SECONDS, fleet);
      results.paced.push({
        engine: engineLabel,
        mode,
        values: await rounds([direct, viaHark], async (target, round) => {
          const rate = (await byteRun(target, mode, PACED_CONCURRENCY, PACED_SECONDS, fleet)).completionsPerSecond;
          progress(`paced completions, ${PACED_CONCURRENCY} at a time,`, mode, round, target, rate, 'completions/s');
          return rate;
        }),
      });
    }
  } finally {
    for (const created of agents) created.destroy();
    await hark.stop();
    await storage.release();
  }
}

/** `targets` starting at a different one each time, so no target always goes first. */
function rotate<T>(targets: readonly T[], i: number): T[] {
  const shift = i % targets.length;
  return [...targets.slice(shift), ...targets.slice(0, shift)];
}

/** ROUNDS rounds of `measure` on each target, back to back within a round (order rotating). */
async function rounds(targets: readonly Target[], measure: (target: Target, round: number) => Promise<number>): Promise<ByTarget> {
  const values: ByTarget = {};
  for (let round = 1; round <= ROUNDS; round++) {
    for (const target of rotate(targets, round - 1)) (values[target.name] ??= []).push(await measure(target, round));
  }
  return values;
}

async function signUp(baseUrl: string): Promise<string> {
  const res = await fetch(`${baseUrl}/api/auth/sign-up`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: `bench-chat-${Date.now()}@example.test`, password: 'bench-password-123' }),
  });
  if (!res.ok) throw new Error(`sign-up: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: { access_token: string } }).data.access_token;
}

async function setFake(fake: ServerProcess, behaviour: object): Promise<void> {
  const res = await fetch(`${fake.baseUrl}/__fake/behaviour`, { method: 'POST', body: JSON.stringify(behaviour) });
  if (!res.ok) throw new Error(`fake upstream behaviour: ${res.status}`);
}

interface Timing {
  ttfbMs: number;
  totalMs: number;
  bytes: number;
  body?: Buffer;
}

/** One request on `agent`: time to the first body byte and to the last, and the byte count (the body itself only when `keep`). */
function timedRequest(target: Target, mode: Mode, agent: http.Agent, keep = false): Promise<Timing> {
  const body = target.body(mode);
  return new Promise((resolve, reject) => {
    const startedAt = performance.now();
    let ttfbMs = -1;
    let bytes = 0;
    const chunks: Buffer[] = [];
    const req = http.request(
      {
        host: target.url.hostname,
        port: target.url.port,
        path: target.url.pathname,
        method: 'POST',
        agent,
        headers: { ...target.headers, 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.on('data', (chunk: Buffer) => {
          if (ttfbMs < 0) ttfbMs = performance.now() - startedAt;
          bytes += chunk.length;
          if (keep || res.statusCode !== 200) chunks.push(chunk);
        });
        res.on('end', () => {
          if (res.statusCode !== 200) reject(new Error(`${target.name} ${mode}: HTTP ${res.statusCode} ${Buffer.concat(chunks).toString().slice(0, 200)}`));
          else resolve({ ttfbMs, totalMs: performance.now() - startedAt, bytes, body: keep ? Buffer.concat(chunks) : undefined });
        });
        res.on('error', reject);
      },
    );
    req.on('socket', (socket) => socket.setNoDelay(true));
    req.on('error', reject);
    req.end(body);
  });
}

/** Every target must answer the upstream's exact bytes, or the comparison means nothing. */
async function checkSame(targets: readonly Target[], mode: Mode, agent: http.Agent): Promise<void> {
  const [reference, ...others] = await Promise.all(targets.map((target) => timedRequest(target, mode, agent, true)));
  others.forEach((answer, i) => {
    if (!answer.body!.equals(reference!.body!)) {
      throw new Error(`${mode}: ${targets[i + 1]!.name} answered ${answer.bytes} bytes that differ from the upstream's ${reference!.bytes}`);
    }
  });
}

/** Small completions per second with RATE_CONNECTIONS connections (autocannon); any non-2xx fails the suite. */
async function rateRun(target: Target, mode: Mode, seconds: number): Promise<number> {
  const result = await autocannon({ url: target.url.toString(), method: 'POST', headers: target.headers, body: target.body(mode), connections: RATE_CONNECTIONS, duration: seconds });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${target.name} ${mode}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
  return result.requests.average;
}

/** `concurrency` requests at a time for `seconds` (each loop finishes its last request). */
async function byteRun(target: Target, mode: Mode, concurrency: number, seconds: number, agent: http.Agent) {
  const startedAt = performance.now();
  const deadline = startedAt + seconds * 1000;
  let bytes = 0;
  let completions = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        bytes += (await timedRequest(target, mode, agent)).bytes;
        completions++;
      }
    }),
  );
  const elapsed = (performance.now() - startedAt) / 1000;
  return { bytesPerSecond: bytes / elapsed, completionsPerSecond: completions / elapsed };
}

function p90(values: number[]): number {
  return percentile(Float64Array.from(values).sort(), 90);
}

/** `median (each round)` of one target's values. */
function eachRound(values: number[] | undefined, decimals: number): string {
  if (!values?.length) return '—';
  return `${fmt(median(values), decimals)} (${values.map((v) => fmt(v, decimals)).join(', ')})`;
}

/** Median over rounds of a/b, each round's ratio in parentheses. */
function ratioCell(a: number[] | undefined, b: number[] | undefined): { text: string; median: number } {
  if (!a?.length || !b?.length) return { text: '—', median: Number.NaN };
  const ratios = a.map((value, i) => value / b[i]!);
  const middle = median(ratios);
  return { text: `${fmtRatio(middle)} (${ratios.map(fmtRatio).join(', ')})`, median: middle };
}

/** A row measured direct, through the bare proxy and through Hark: each target's rounds, then Hark against the other two. */
function throughThreeTargets(row: Row): string[] {
  return [
    row.engine,
    row.mode,
    eachRound(row.values.direct, 0),
    eachRound(row.values['bare proxy'], 0),
    eachRound(row.values['via Hark'], 0),
    ratioCell(row.values['via Hark'], row.values.direct).text,
    ratioCell(row.values['via Hark'], row.values['bare proxy']).text,
  ];
}

function ttfbTable(results: Results, skipped: string[]): Table {
  return {
    title: 'Time to first byte, one request at a time (ms)',
    columns: ['database', 'mode', 'direct p50', 'bare proxy p50', 'via Hark p50', 'Hark adds, p50', 'Hark adds, p90', 'whole answer p50 (direct / bare / Hark)'],
    rows: results.ttfb.map((row, i) => {
      const { direct = [], 'bare proxy': bare = [], 'via Hark': hark = [] } = row.values;
      const total = results.ttfbTotal[i]!.values;
      const added = median(hark) - median(direct);
      return [
        row.engine,
        row.mode,
        fmt(median(direct), 2),
        fmt(median(bare), 2),
        fmt(median(hark), 2),
        `${fmt(added, 2)} ${added <= TARGET_ADDED_TTFB_MS ? '(within' : '(over'} the ${TARGET_ADDED_TTFB_MS} ms target)`,
        fmt(p90(hark) - p90(direct), 2),
        [total.direct, total['bare proxy'], total['via Hark']].map((v) => fmt(median(v ?? []), 2)).join(' / '),
      ];
    }),
    notes: [
      `A small completion (${SMALL.chunks} chunks of ${SMALL.chunkSize} characters) from the fake upstream (its own process). ${TTFB_SAMPLES} requests to each target after ${TTFB_WARMUP} of warm-up, one at a time on a kept-alive connection, the three targets taking turns (who goes first rotates).`,
      'Time to first byte: from sending the request to the first byte of the answer body (streaming: the first SSE event). "Hark adds" is the difference to direct of the medians (and of the 90th percentiles).',
      `Via Hark: POST /api/llm/chat with a desktop JWT (signature check plus one session lookup in the database), model \`llm-4o-proxied\`, Hark → upstream on a kept-alive connection; LOG_LEVEL=${LOG_LEVEL}. Bare proxy: node:http and pipe, no authentication (the floor for one more hop).`,
      ...skipped,
    ],
  };
}

function pacedTable(results: Results, skipped: string[]): Table {
  return {
    title: `Throughput at a model's pace, ${PACED_CONCURRENCY} completions at a time (completions/s)`,
    columns: ['database', 'mode', 'direct (each round)', 'via Hark (each round)', 'via Hark / direct (each round)', 'target'],
    rows: results.paced.map((row) => {
      const ratio = ratioCell(row.values['via Hark'], row.values.direct);
      return [
        row.engine,
        row.mode,
        eachRound(row.values.direct, 1),
        eachRound(row.values['via Hark'], 1),
        ratio.text,
        `${ratio.median >= TARGET_THROUGHPUT_RATIO ? 'met' : 'missed'} (≥ ${TARGET_THROUGHPUT_RATIO}×)`,
      ];
    }),
    notes: [
      `The upstream paces its answers like a model: streaming, ${PACED_STREAM.chunks} chunks ${PACED_STREAM.chunkDelayMs} ms apart (≈1 s per completion, about 100 tokens/s); non-streaming, the whole answer after ${PACED_JSON.delayMs / 1000} s. ${PACED_CONCURRENCY} clients each ask for one completion after another for ${PACED_SECONDS} s, ${ROUNDS} rounds alternating which target goes first.`,
      'This is the throughput the target is about: how many completions the proxy carries while the upstream generates them. 1.00× means the proxy added nothing a client could notice over a completion.',
      ...skipped,
    ],
  };
}

function rawTable(results: Results, skipped: string[]): Table {
  return {
    title: 'Raw relay speed: a 1 MiB completion sent as fast as the sockets take it (MiB/s received, one at a time)',
    columns: ['database', 'mode', 'direct (each round)', 'bare proxy (each round)', 'via Hark (each round)', 'via Hark / direct', 'via Hark / bare proxy'],
    rows: results.raw.map(throughThreeTargets),
    notes: [
      `${LARGE.chunks} chunks of ${LARGE.chunkSize} characters (1 MiB of content; streaming: ${LARGE.chunks + 3} SSE events, non-streaming: one JSON body), checked once to arrive byte for byte the same through each target. ${RAW_SECONDS} s per run after a ${WARMUP_SECONDS} s warm-up, ${ROUNDS} rounds.`,
      'No model sends this fast: the upstream here answers 1 MiB in a couple of milliseconds, so any proxy, which copies every byte through one more process (on cores the client and the upstream share), shows up as a large fraction. The bare proxy column is that floor; Hark against it shows the cost of Hark itself (mostly per request: authentication and the session lookup).',
      ...skipped,
    ],
  };
}

function rateTable(results: Results, skipped: string[]): Table {
  return {
    title: `Small completions per second, ${RATE_CONNECTIONS} connections (for reference)`,
    columns: ['database', 'mode', 'direct req/s (each round)', 'bare proxy req/s (each round)', 'via Hark req/s (each round)', 'via Hark / direct', 'via Hark / bare proxy'],
    rows: results.rates.map(throughThreeTargets),
    notes: [
      `autocannon in the benchmark process, ${RATE_CONNECTIONS} connections, ${RATE_SECONDS} s per run, ${ROUNDS} rounds. With an instant, tiny answer the per-request costs dominate (authentication with its session lookup, routing, validation, one log line, the second hop); no target applies here.`,
      ...skipped,
    ],
  };
}
