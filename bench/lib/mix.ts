/**
 * The mixed API-key workload of the load suite and the soak: several
 * workspaces, each with its own key, reading and writing assistants and
 * reading credits, plus one key with a low hourly limit whose 429s are
 * intended and counted apart from everything else.
 */
import autocannon, { type AutocannonRequest, type AutocannonRequestParams } from 'autocannon';
import { apiClient, createApiKey, newTenant } from './api-client.ts';
import { percentile } from './load.ts';

export const MIX_WORKSPACES = 4;
/** Enough to keep both cores busy without queueing most of the latency in the client. */
export const MIX_CONNECTIONS = 32;
const SEEDED_ASSISTANTS_PER_WORKSPACE = 5;
/** The highest a key may have: the mix must never be throttled, even on a fast machine over 10 minutes. */
const MIX_RATE_LIMIT_PER_HOUR = 1_000_000;
/** The throttled key: its first requests pass, the rest of the hour is 429. */
export const LIMITED_RATE_LIMIT_PER_HOUR = 60;
/** How fast the throttled key asks, on its own connection: slow enough not to weigh on the mix. */
export const LIMITED_REQUESTS_PER_SECOND = 5;

export interface MixSetup {
  workspaces: Array<{ key: string; assistantIds: string[] }>;
  limitedKey: string;
}

/** Workspaces, keys and a few assistants each, made through the public API. */
export async function prepareMix(baseUrl: string): Promise<MixSetup> {
  const api = apiClient(baseUrl);
  const workspaces: MixSetup['workspaces'] = [];
  let limitedKey = '';
  for (let i = 0; i < MIX_WORKSPACES; i++) {
    const tenant = await newTenant(api, `mix-${i}`);
    const key = await createApiKey(api, tenant, { scopes: ['assistants:read', 'assistants:write'], rate_limit_per_hour: MIX_RATE_LIMIT_PER_HOUR });
    const assistantIds: string[] = [];
    for (let n = 0; n < SEEDED_ASSISTANTS_PER_WORKSPACE; n++) {
      const created = await api.request<{ assistant: { id: string } }>('POST', '/api/assistants', { token: key, json: { name: `seeded ${n}` } });
      assistantIds.push(created.assistant.id);
    }
    workspaces.push({ key, assistantIds });
    if (i === 0) limitedKey = await createApiKey(api, tenant, { scopes: ['assistants:read'], rate_limit_per_hour: LIMITED_RATE_LIMIT_PER_HOUR });
  }
  return { workspaces, limitedKey };
}

/** The sequence every connection repeats, for the tables' notes. */
export const MIX_DESCRIPTION =
  'each connection repeats: GET /api/assistants, GET /api/assistants/{seeded id}, GET /api/credits, POST /api/assistants, ' +
  'PATCH /api/assistants/{new id}, GET /api/assistants/{new id}, GET /api/assistants, GET /api/credits (6 reads, 2 writes), ' +
  `with the key of one of ${MIX_WORKSPACES} workspaces (the next one each time the sequence starts over)`;

/** Answers of one stretch of the run. */
export interface MixStats {
  seconds: number;
  completed: number;
  requestsPerSecond: number;
  /** Latency of 2xx answers, fractional milliseconds. */
  p50Ms: number;
  p99Ms: number;
  /** Answers by status code. */
  byStatus: Record<number, number>;
}

export interface MixResult extends MixStats {
  /** Connection errors and timeouts. */
  errors: number;
  /** Non-2xx answers of the mix, by route and status: all unintended. */
  unexpected: Record<string, Record<number, number>>;
  /** The throttled key's answers by status (2xx until its limit, then intended 429s). */
  limited: Record<number, number>;
}

export interface MixOptions {
  connections: number;
  durationSeconds: number;
  /** Called with the stats of every `windowSeconds` (the last window may be shorter). */
  window?: { seconds: number; onWindow(stats: MixStats, index: number): void };
}

/** Runs the mix (and the throttled key beside it) against a server prepared by prepareMix. */
export async function runMix(baseUrl: string, setup: MixSetup, options: MixOptions): Promise<MixResult> {
  const unexpected: MixResult['unexpected'] = {};
  const note = (route: string) => (status: number) => {
    if (status >= 200 && status < 300) return;
    const byStatus = (unexpected[route] ??= {});
    byStatus[status] = (byStatus[status] ?? 0) + 1;
  };
  let nextWorkspace = 0;
  type Context = { workspace?: MixSetup['workspaces'][number]; createdId?: string };
  const step = (method: string, route: string, path: (ctx: Context) => string, body?: (ctx: Context) => object): AutocannonRequest => ({
    method,
    setupRequest(request: AutocannonRequestParams, raw) {
      const ctx = raw as Context;
      // The first step of each pass picks the workspace the whole pass uses.
      ctx.workspace ??= setup.workspaces[nextWorkspace++ % setup.workspaces.length]!;
      const headers: Record<string, string> = { ...request.headers, authorization: `Bearer ${ctx.workspace.key}` };
      if (body) headers['content-type'] = 'application/json';
      return { ...request, method, path: path(ctx), headers, body: body ? JSON.stringify(body(ctx)) : undefined };
    },
    onResponse: note(`${method} ${route}`),
  });
  const seeded = (ctx: Context) => ctx.workspace!.assistantIds[Math.floor(Math.random() * ctx.workspace!.assistantIds.length)]!;
  // A failed create leaves no id: the next steps then use a seeded one, so the sequence goes on and the failure is counted once.
  const created = (ctx: Context) => ctx.createdId ?? seeded(ctx);
  const create = step('POST', '/api/assistants', () => '/api/assistants', () => ({ name: 'load test' }));
  const remember = create.onResponse!;
  create.onResponse = (status, body, raw, headers) => {
    remember(status, body, raw, headers);
    if (status === 200) (raw as Context).createdId = (JSON.parse(body) as { assistant: { id: string } }).assistant.id;
  };
  const requests = [
    step('GET', '/api/assistants', () => '/api/assistants'),
    step('GET', '/api/assistants/{id}', (ctx) => `/api/assistants/${seeded(ctx)}`),
    step('GET', '/api/credits', () => '/api/credits'),
    create,
    step('PATCH', '/api/assistants/{id}', (ctx) => `/api/assistants/${created(ctx)}`, () => ({ name: `renamed ${Date.now()}` })),
    step('GET', '/api/assistants/{id}', (ctx) => `/api/assistants/${created(ctx)}`),
    step('GET', '/api/assistants', () => '/api/assistants'),
    step('GET', '/api/credits', () => '/api/credits'),
  ];

  const startedAt = performance.now();
  const all = new Collector();
  let window = new Collector();
  let windowIndex = 0;
  const flushWindow = () => {
    options.window?.onWindow(window.stats(), windowIndex++);
    window = new Collector();
  };
  const timer = options.window ? setInterval(flushWindow, options.window.seconds * 1000) : undefined;

  const mix = autocannon({ url: baseUrl, connections: options.connections, duration: options.durationSeconds, requests });
  mix.on('response', (_client, status, _bytes, ms) => {
    all.add(status, ms);
    window.add(status, ms);
  });
  const limitedRun = autocannon({
    url: `${baseUrl}/api/assistants`,
    headers: { authorization: `Bearer ${setup.limitedKey}` },
    connections: 1,
    overallRate: LIMITED_REQUESTS_PER_SECOND,
    duration: options.durationSeconds,
  });
  const [result, limitedResult] = await Promise.all([mix, limitedRun]);
  clearInterval(timer);
  // The run and the window timer end at about the same moment: a sliver left over is not a window of its own (it still counts in the totals).
  if (options.window && window.stats().seconds >= options.window.seconds / 2) flushWindow();

  const limited: Record<number, number> = {};
  for (const [status, { count }] of Object.entries(limitedResult.statusCodeStats)) limited[Number(status)] = count;
  return { ...all.stats((performance.now() - startedAt) / 1000), errors: result.errors + limitedResult.errors, unexpected, limited };
}

/** Status counts and 2xx latencies of a stretch of the run. */
class Collector {
  private readonly startedAt = performance.now();
  private readonly latencies: number[] = [];
  private readonly byStatus: Record<number, number> = {};
  count = 0;

  add(status: number, ms: number): void {
    this.count++;
    this.byStatus[status] = (this.byStatus[status] ?? 0) + 1;
    if (status >= 200 && status < 300) this.latencies.push(ms);
  }

  stats(seconds = (performance.now() - this.startedAt) / 1000): MixStats {
    const sorted = Float64Array.from(this.latencies).sort();
    return {
      seconds,
      completed: this.count,
      requestsPerSecond: this.count / seconds,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      byStatus: { ...this.byStatus },
    };
  }
}

/** `429: 12, 500: 1`, or `none`. */
export function formatStatuses(byStatus: Record<number, number>, keep: (status: number) => boolean = () => true): string {
  const parts = Object.entries(byStatus)
    .filter(([status]) => keep(Number(status)))
    .map(([status, count]) => `${status}: ${count}`);
  return parts.length ? parts.join(', ') : 'none';
}

/** Non-2xx answers of the mix, per route, as one line; empty when there were none. */
export function describeUnexpected(unexpected: MixResult['unexpected']): string {
  return Object.entries(unexpected)
    .map(([route, byStatus]) => `${route} (${formatStatuses(byStatus)})`)
    .join('; ');
}
