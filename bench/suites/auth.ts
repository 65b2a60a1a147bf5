/**
 * What API-key authentication costs: the same read route served with no auth
 * and with an API key (hash, key lookup, active/expiry check, hourly counter,
 * X-RateLimit-* headers, scope check), on one server, in one run. The target
 * (issue "API keys"): key auth costs at most 15% of throughput.
 *
 * Two pairs of routes: an empty one (the framework floor, where any per-request
 * cost shows most) and one doing a single indexed SELECT, as a real read
 * endpoint does at least.
 */
import crypto from 'node:crypto';
import { Redis } from 'ioredis';
import { ENGINE_LABEL, freshStorage, type Engine, type HarkStorage, benchEngines } from '../lib/hark.ts';
import { runLoad } from '../lib/load.ts';
import { fmt, fmtRatio, type Table } from '../lib/markdown.ts';
import { startServer, type ServerProcess } from '../lib/server.ts';
import { median, sum } from '../lib/stats.ts';
import type { Suite, SuiteContext } from '../lib/suite.ts';

const CONNECTIONS = 50;
const WARMUP_SECONDS = 3;
const LOAD_SECONDS = 8;
const ROUNDS = 4;
/** Keeps per-request log lines out of the measurement: they would cost both routes alike and hide the difference. */
const LOG_LEVEL = 'warn';
/** The highest a key may have; a new key each round keeps every run under it. */
const RATE_LIMIT_PER_HOUR = 1_000_000;
const TARGET_COST = 0.15;
/** Where the production-like row finds Redis; the row is skipped when nothing answers there. */
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A database, and optionally Redis for the hourly counters (what several API processes share in production). */
interface Setup {
  engine: Engine;
  redisUrl?: string;
}

/** One autocannon run; latencies of 2xx answers, in fractional milliseconds. */
interface Run {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  non2xx: number;
}

/** A pair of identical routes, one without auth and one with an API key. */
interface Variant {
  title: string;
  open: string;
  keyed: string;
}

interface Pairing {
  engine: string;
  variant: Variant;
  /** Round i of each route ran back to back (open first in odd rounds, keyed first in even ones). */
  openRuns: Run[];
  keyedRuns: Run[];
}

export const auth: Suite = {
  name: 'auth',
  description: 'throughput of an API-key-authenticated read route against the same route without auth (PGlite, PostgreSQL, PostgreSQL + Redis)',
  async run(ctx) {
    const { engines, postgres, skipped } = await benchEngines();

    const setups: Setup[] = engines.map((engine) => ({ engine }));
    const redisProblem = await redisUnreachable(REDIS_URL);
    if (postgres && !redisProblem) setups.push({ engine: postgres, redisUrl: REDIS_URL });
    else if (postgres) skipped.push(`PostgreSQL + Redis rows skipped: ${redisProblem} (set BENCH_REDIS_URL).`);

    const pairings: Pairing[] = [];
    for (const setup of setups) pairings.push(...(await measure(ctx, setup)));
    return VARIANTS.map((variant) => table(variant, pairings.filter((p) => p.variant === variant), skipped));
  },
};

const VARIANTS: readonly Variant[] = [
  { title: 'Empty read route: key auth against no auth', open: '/bench/open', keyed: '/bench/keyed' },
  { title: 'Read route with one indexed SELECT: key auth against no auth', open: '/bench/open-read', keyed: '/bench/keyed-read' },
];

async function measure(ctx: SuiteContext, setup: Setup): Promise<Pairing[]> {
  const label = `${ENGINE_LABEL[setup.engine.kind]}${setup.redisUrl ? ' + Redis' : ''}`;
  const storage = await freshStorage(ctx, setup.engine);
  const server = await startProbeServer(ctx, storage, setup.redisUrl);
  const { slug, newKey } = await keyMaker(server.baseUrl);
  const url = (path: string) => `${server.baseUrl}${path}?slug=${slug}`;
  // Both routes get the same header, so the only difference is what the auth hook does with it.
  const withKey = (key: string) => ({ authorization: `Bearer ${key}` });

  ctx.progress(`warm-up: ${label}`);
  const warmUpKey = await newKey();
  for (const variant of VARIANTS) for (const path of [variant.open, variant.keyed]) await load(url(path), withKey(warmUpKey), WARMUP_SECONDS);

  const pairings = VARIANTS.map((variant): Pairing => ({ engine: label, variant, openRuns: [], keyedRuns: [] }));
  // Interleaved, and the order swapped every round, so drift in the machine's load touches both routes alike.
  for (let round = 1; round <= ROUNDS; round++) {
    for (const pairing of pairings) {
      // A fresh key (and so a fresh hourly counter) per run pair: a fast machine can exceed even the highest limit.
      const headers = withKey(await newKey());
      const both = [[pairing.variant.open, pairing.openRuns], [pairing.variant.keyed, pairing.keyedRuns]] as const;
      for (const [path, runs] of round % 2 === 1 ? both : [...both].reverse()) {
        const result = await load(url(path), headers, LOAD_SECONDS);
        if (result.non2xx > 0) throw new Error(`${label} ${path}: ${result.non2xx} non-2xx answers; the comparison would be meaningless`);
        runs.push(result);
        ctx.progress(`${label} round ${round}: ${path} ${Math.round(result.requestsPerSecond)} req/s`);
      }
    }
  }
  await server.stop();
  await storage.release();
  return pairings;
}

async function startProbeServer(ctx: SuiteContext, storage: HarkStorage, redisUrl: string | undefined): Promise<ServerProcess> {
  const label = `auth-probe-${storage.engine}${redisUrl ? '-redis' : ''}`;
  const server = await startServer({
    label,
    args: ['--import', 'tsx', 'bench/lib/auth-probe-server.ts'],
    cwd: ctx.repoRoot,
    // Without a Redis setup REDIS_URL is removed, so an inherited one does not leak in.
    env: { DATA_DIR: storage.dataDir, DATABASE_URL: storage.databaseUrl, LOG_LEVEL, REDIS_URL: redisUrl },
    readyPath: '/api/ready',
    logFile: ctx.logFile(label),
  });
  ctx.defer(() => server.stop());
  return server;
}

/** A workspace and its owner, made through the public API as a client would, and a function that mints kb:read keys for it. */
async function keyMaker(baseUrl: string): Promise<{ slug: string; newKey: () => Promise<string> }> {
  const post = async (path: string, body: object, headers: Record<string, string> = {}) => {
    const res = await fetch(`${baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`);
    return res.json() as Promise<Record<string, unknown>>;
  };
  const signUp = (await post('/api/auth/sign-up', { email: `bench-${Date.now()}@example.test`, password: 'bench-password-123' })) as { data: { access_token: string } };
  const token = signUp.data.access_token;
  const workspace = (await post('/api/onboarding/start', { companyName: 'Bench', clientToken: crypto.randomUUID() }, { cookie: `sb-access-token=${token}` })) as { slug: string };
  const newKey = async () => {
    const created = (await post(
      '/api/api-keys',
      { accountSlug: workspace.slug, name: 'bench', permissions: { scopes: ['kb:read'], rate_limit_per_hour: RATE_LIMIT_PER_HOUR } },
      { authorization: `Bearer ${token}` },
    )) as { apiKey: { fullKey: string } };
    return created.apiKey.fullKey;
  };
  return { slug: workspace.slug, newKey };
}

/** Why Redis cannot be used, or undefined when it answers. */
async function redisUnreachable(url: string): Promise<string | undefined> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 2000, retryStrategy: () => null });
  try {
    await client.connect();
    await client.ping();
    return undefined;
  } catch (error) {
    return `${url}: ${(error as Error).message}`;
  } finally {
    client.disconnect();
  }
}

function load(url: string, headers: Record<string, string>, durationSeconds: number): Promise<Run> {
  return runLoad(url, { connections: CONNECTIONS, durationSeconds, headers });
}

function table(variant: Variant, pairings: Pairing[], skipped: string[]): Table {
  const rows: string[][] = [];
  for (const p of pairings) {
    const ratios = p.keyedRuns.map((run, i) => run.requestsPerSecond / p.openRuns[i]!.requestsPerSecond);
    const ratio = median(ratios);
    rows.push([p.engine, 'no auth', ...cells(p.openRuns), '—', '—']);
    rows.push([
      p.engine,
      'API key (kb:read)',
      ...cells(p.keyedRuns),
      `${fmtRatio(ratio)} (${ratios.map(fmtRatio).join(', ')})`,
      `${fmt((1 - ratio) * 100, 1)}% ${1 - ratio <= TARGET_COST ? '(within' : '(over'} the ${TARGET_COST * 100}% target)`,
    ]);
  }
  return {
    title: variant.title,
    columns: ['database', 'route', 'req/s (each round)', 'p50 ms', 'p99 ms', 'errors', 'non-2xx', 'keyed/open req/s (each round)', 'auth cost'],
    rows,
    notes: [
      `One server (bench/lib/auth-probe-server.ts: Hark plus \`GET ${variant.open}\` with \`auth: 'none'\` and the identical \`GET ${variant.keyed}\` with \`auth: ['apiKey'], scope: 'kb:read'\`), LOG_LEVEL=${LOG_LEVEL}. Hourly counters in process, except on the "+ Redis" row (REDIS_URL, as when several API processes share the limits: one Redis round trip per keyed request).`,
      `autocannon in the benchmark process, ${CONNECTIONS} connections, ${LOAD_SECONDS} s per run after a ${WARMUP_SECONDS} s warm-up of each route; ${ROUNDS} rounds, each running the two routes of every table back to back, alternating which goes first. Both routes get the same Authorization header.`,
      `Each pair of runs uses a new key with rate_limit_per_hour ${RATE_LIMIT_PER_HOUR}; any non-2xx answer fails the suite. Each keyed request hashes the key (SHA-256), finds its row in the in-process key cache (src/modules/api-keys/key-cache.ts; the database only on a miss), checks active/expiry/scope and counts against the key's hourly limit.`,
      'req/s: median of the rounds; p50/p99: median of the rounds; errors and non-2xx: summed. Auth cost = 1 − median keyed/open ratio.',
      ...skipped,
    ],
  };
}

function cells(runs: Run[]): string[] {
  const rates = runs.map((run) => run.requestsPerSecond);
  return [
    `${fmt(median(rates))} (${rates.map((rate) => fmt(rate)).join(', ')})`,
    fmt(median(runs.map((run) => run.p50Ms)), 2),
    fmt(median(runs.map((run) => run.p99Ms)), 2),
    fmt(sum(runs.map((run) => run.errors))),
    fmt(sum(runs.map((run) => run.non2xx))),
  ];
}
