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
    /** Requests per second across all connections. */
    overallRate?: number;
    /** Seconds a request may take before it counts as a timeout (default 10). */
    timeout?: number;
    /** A sequence each connection sends in turn, starting over at the end (with a fresh context). */
    requests?: AutocannonRequest[];
  }

  /** What setupRequest receives and returns; the connection's defaults filled in. */
  export interface AutocannonRequestParams {
    method: string;
    path: string;
    headers: Record<string, string>;
    body?: string;
  }

  /** One step of a `requests` sequence; `context` is per connection and reset when the sequence starts over. */
  export interface AutocannonRequest {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string;
    /** Called before each send; return the request to send (a falsy value skips to the sequence's start). */
    setupRequest?: (request: AutocannonRequestParams, context: Record<string, unknown>) => AutocannonRequestParams;
    /** Called with each answer to this step, before the next step is set up. */
    onResponse?: (status: number, body: string, context: Record<string, unknown>, headers: Record<string, string>) => void;
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
    /** Responses by status code. */
    statusCodeStats: Record<string, { count: number }>;
    latency: Histogram;
    requests: Histogram & { sent: number };
    throughput: Histogram;
  }

  /** The run in progress: an event emitter that is also awaitable. */
  interface AutocannonInstance extends PromiseLike<AutocannonResult> {
    /** Every response, with its latency in fractional milliseconds. */
    on(event: 'response', listener: (client: unknown, statusCode: number, bytes: number, responseTimeMs: number) => void): this;
    /** Stops the run early; the result then covers what ran. */
    stop(): void;
  }

  function autocannon(options: AutocannonOptions): AutocannonInstance;
  export default autocannon;
}
