import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
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

/** What a counter reports: events counted in the window and time left in it. */
interface Count {
  consumed: number;
  msLeft: number;
}

/** The window counters of one process, when there is no Redis to share them. */
class ProcessWindows {
  private readonly windows = new Map<string, { consumed: number; endsAt: number }>();

  count(id: string, windowSeconds: number, add: number): Count | null {
    const now = Date.now();
    let window = this.windows.get(id);
    if (!window || window.endsAt <= now) {
      if (add === 0) return null;
      window = { consumed: 0, endsAt: now + windowSeconds * 1000 };
      this.windows.set(id, window);
      if (this.windows.size > 100_000) this.dropEnded(now);
    }
    window.consumed += add;
    return { consumed: window.consumed, msLeft: window.endsAt - now };
  }

  delete(id: string): void {
    this.windows.delete(id);
  }

  private dropEnded(now: number): void {
    for (const [id, window] of this.windows) if (window.endsAt <= now) this.windows.delete(id);
  }
}

/**
 * Fixed-window counters: in Redis when REDIS_URL is set (shared by every API
 * process, through rate-limiter-flexible's atomic Redis limiter), otherwise a
 * plain in-process map. The map is synchronous on purpose: it runs on every
 * API-key request, where a promise-based limiter cost several microseconds.
 * Counters are per (purpose, limit, window), since keys carry their own hourly limits.
 */
export class RateLimits {
  private readonly redisLimiters = new Map<string, RateLimiterRedis>();
  private readonly local = new ProcessWindows();

  constructor(private readonly redis?: Redis) {}

  private redisLimiter(id: string, redis: Redis, points: number, windowSeconds: number): RateLimiterRedis {
    let limiter = this.redisLimiters.get(id);
    if (!limiter) {
      limiter = new RateLimiterRedis({ keyPrefix: `hark:rl:${id}`, points, duration: windowSeconds, storeClient: redis });
      this.redisLimiters.set(id, limiter);
    }
    return limiter;
  }

  /** Counts one event against `key` and says whether it is within the limit. */
  async consume(purpose: string, key: string, points: number, windowSeconds: number): Promise<RateLimitDecision> {
    const id = `${purpose}:${points}:${windowSeconds}`;
    if (!this.redis) {
      const count = this.local.count(`${id}:${key}`, windowSeconds, 1)!;
      return decision(count.consumed <= points, points, count);
    }
    try {
      return decision(true, points, fromRes(await this.redisLimiter(id, this.redis, points, windowSeconds).consume(key)));
    } catch (result) {
      if (result instanceof RateLimiterRes) return decision(false, points, fromRes(result));
      throw result;
    }
  }

  /** Whether `key` is already over its limit, without counting. */
  async isBlocked(purpose: string, key: string, points: number, windowSeconds: number): Promise<RateLimitDecision | null> {
    const id = `${purpose}:${points}:${windowSeconds}`;
    const count = this.redis
      ? await this.redisLimiter(id, this.redis, points, windowSeconds)
          .get(key)
          .then((res) => (res ? fromRes(res) : null))
      : this.local.count(`${id}:${key}`, windowSeconds, 0);
    if (!count || count.consumed < points) return null;
    return decision(false, points, count);
  }

  async reset(purpose: string, key: string, points: number, windowSeconds: number): Promise<void> {
    const id = `${purpose}:${points}:${windowSeconds}`;
    if (this.redis) await this.redisLimiter(id, this.redis, points, windowSeconds).delete(key);
    else this.local.delete(`${id}:${key}`);
  }
}

function fromRes(result: RateLimiterRes): Count {
  return { consumed: result.consumedPoints, msLeft: result.msBeforeNext };
}

function decision(allowed: boolean, limit: number, count: Count): RateLimitDecision {
  const msLeft = Math.max(0, count.msLeft);
  return {
    allowed,
    limit,
    remaining: Math.max(0, limit - count.consumed),
    resetAt: Math.ceil((Date.now() + msLeft) / 1000),
    retryAfter: allowed ? 0 : Math.max(1, Math.ceil(msLeft / 1000)),
  };
}
