/**
 * The part of autocannon 9's API the benchmarks use (the package ships no
 * types). Latencies are in milliseconds, but its histogram keeps whole
 * milliseconds only; `requests` are per-second samples.
 */
declare module 'autocannon' {
  interface AutocannonOptions {
    url: string;
    connections?: number;
    /** Seconds. */
    duration?: number;
    pipelining?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
  }

  interface Histogram {
    average: number;
    mean: number;
    stddev: number;
    min: number;
    max: number;
    total: number;
    p50: number;
    p90: number;
    p99: number;
  }

  interface AutocannonResult {
    /** Seconds the run actually took. */
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
    latency: Histogram;
    requests: Histogram & { sent: number };
    throughput: Histogram;
  }

  /** The run in progress: an event emitter that is also awaitable. */
  interface AutocannonInstance extends PromiseLike<AutocannonResult> {
    /** Every response, with its latency in fractional milliseconds. */
    on(event: 'response', listener: (client: unknown, statusCode: number, bytes: number, responseTimeMs: number) => void): this;
  }

  function autocannon(options: AutocannonOptions): AutocannonInstance;
  export default autocannon;
}
