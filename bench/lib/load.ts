import autocannon from 'autocannon';

export interface LoadOptions {
  connections: number;
  durationSeconds: number;
  headers?: Record<string, string>;
}

export interface LoadResult {
  requestsPerSecond: number;
  /** Latency percentiles of 2xx responses, in fractional milliseconds. */
  p50Ms: number;
  p99Ms: number;
  /** Connection errors and timeouts (autocannon counts timeouts as errors too). */
  errors: number;
  /** Responses outside 200–299. */
  non2xx: number;
  /** Completed requests. */
  total: number;
  /** How long the run actually took. */
  durationSeconds: number;
}

/** Loads `url` with GET requests from this process for `durationSeconds`. */
export async function runLoad(url: string, options: LoadOptions): Promise<LoadResult> {
  // autocannon's own histogram truncates to whole milliseconds, which puts a
  // fast server's p50 at 0 or 1; its response events carry the exact time.
  const latenciesMs: number[] = [];
  const run = autocannon({ url, headers: options.headers, connections: options.connections, duration: options.durationSeconds });
  run.on('response', (_client, statusCode, _bytes, responseTimeMs) => {
    if (statusCode >= 200 && statusCode < 300) latenciesMs.push(responseTimeMs);
  });
  const result = await run;
  const sorted = Float64Array.from(latenciesMs).sort();
  return {
    // Mean of autocannon's per-second samples: the "Req/Sec Avg" it prints.
    requestsPerSecond: result.requests.average,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    errors: result.errors,
    non2xx: result.non2xx,
    total: result.requests.total,
    durationSeconds: result.duration,
  };
}

/** Nearest-rank percentile of ascending `sorted`; NaN when empty. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}
