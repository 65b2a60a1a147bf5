import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Redis } from 'ioredis';

export interface RateLimitDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Unix seconds when the current window ends. */
  resetAt: number;
  /** Seconds until a request would be allowed again (0 when allowed). */
  retryAfter: number;
}

/**
 * Fixed-window counters: in Redis when REDIS_URL is set (shared by every API
 * process), otherwise in this process. One limiter per (purpose, points,
 * window), created on first use, since keys carry their own hourly limits.
 */
export class RateLimits {
  private readonly limiters = new Map<string, RateLimiterAbstract>();

  constructor(private readonly redis?: Redis) {}

  private limiter(purpose: string, points: number, windowSeconds: number): RateLimiterAbstract {
    const id = `${purpose}:${points}:${windowSeconds}`;
    let limiter = this.limiters.get(id);
    if (!limiter) {
      const options = { keyPrefix: `hark:rl:${id}`, points, duration: windowSeconds };
      limiter = this.redis ? new RateLimiterRedis({ ...options, storeClient: this.redis }) : new RateLimiterMemory(options);
      this.limiters.set(id, limiter);
    }
    return limiter;
  }

  /** Counts one event against `key` and says whether it is within the limit. */
  async consume(purpose: string, key: string, points: number, windowSeconds: number): Promise<RateLimitDecision> {
    try {
      return decision(true, points, await this.limiter(purpose, points, windowSeconds).consume(key));
    } catch (result) {
      if (result instanceof RateLimiterRes) return decision(false, points, result);
      throw result;
    }
  }

  /** Whether `key` is already over its limit, without counting. */
  async isBlocked(purpose: string, key: string, points: number, windowSeconds: number): Promise<RateLimitDecision | null> {
    const result = await this.limiter(purpose, points, windowSeconds).get(key);
    if (!result || result.consumedPoints < points) return null;
    return decision(false, points, result);
  }

  async reset(purpose: string, key: string, points: number, windowSeconds: number): Promise<void> {
    await this.limiter(purpose, points, windowSeconds).delete(key);
  }
}

function decision(allowed: boolean, limit: number, result: RateLimiterRes): RateLimitDecision {
  const msLeft = Math.max(0, result.msBeforeNext);
  return {
    allowed,
    limit,
    remaining: Math.max(0, limit - result.consumedPoints),
    resetAt: Math.ceil((Date.now() + msLeft) / 1000),
    retryAfter: allowed ? 0 : Math.max(1, Math.ceil(msLeft / 1000)),
  };
}
