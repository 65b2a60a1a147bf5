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
 * Adds ARGV[1] to the window counter KEYS[1] (starting the window of ARGV[2] ms
 * when the key is new) and answers the new total and the ms left in the window.
 * One atomic step, so processes sharing the Redis never lose a count.
 */
const RESERVE_SCRIPT = `
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = tonumber(ARGV[2])
end
return {total, ttl}`;

/**
 * Units of one key's window that this process reserved in Redis and has not
 * handed out yet. `reservedTotal` is the window's counter (all processes) as of
 * the last reservation, which is what `remaining` is computed from.
 */
interface Lease {
  units: number;
  reservedTotal: number;
  endsAt: number;
  batch: number;
  lastReserveAt: number;
  reserving?: Promise<void>;
}

/** Reservations double while a key keeps asking within this interval, and fall back to one after a pause. */
const BUSY_INTERVAL_MS = 1_000;
/**
 * A process may hold at most 1% of a limit (and never more than 100 units)
 * unused: that bounds how early another process can see 429 and how far
 * X-RateLimit-Remaining can lag. Limits under 200 get exact, one-unit counting.
 */
const leaseCeiling = (points: number) => Math.max(1, Math.min(100, Math.floor(points / 100)));

/**
 * Window counters shared through Redis without a round trip per event: a busy
 * key reserves a batch of units in one atomic INCRBY and hands them out
 * locally. The total handed out across processes never exceeds the limit.
 */
class RedisWindows {
  private readonly leases = new Map<string, Lease>();

  private readonly redis: Redis & { harkReserveUnits(key: string, units: number, windowMs: number): Promise<[number, number]> };

  constructor(redis: Redis) {
    // EVALSHA under the hood: the script's text is sent once per connection, not with every call.
    if (!('harkReserveUnits' in redis)) redis.defineCommand('harkReserveUnits', { numberOfKeys: 1, lua: RESERVE_SCRIPT });
    this.redis = redis as RedisWindows['redis'];
  }

  async consume(id: string, points: number, windowSeconds: number): Promise<RateLimitDecision> {
    for (;;) {
      const now = Date.now();
      let lease = this.leases.get(id);
      if (lease && lease.endsAt <= now && !lease.reserving) {
        this.leases.delete(id);
        lease = undefined;
      }
      if (lease) {
        const msLeft = lease.endsAt - now;
        if (lease.units > 0) {
          lease.units -= 1;
          return decision(true, points, { consumed: lease.reservedTotal - lease.units, msLeft });
        }
        // The counter never goes down within a window, so a spent window is refused here, without Redis, until it ends.
        if (lease.reservedTotal >= points) return decision(false, points, { consumed: lease.reservedTotal, msLeft });
        if (lease.reserving) {
          await lease.reserving;
          continue;
        }
      }
      await this.reserve(id, lease, points, windowSeconds);
    }
  }

  /** Takes the next batch of units from Redis (fewer, or none, when the window is nearly or wholly spent). */
  private async reserve(id: string, previous: Lease | undefined, points: number, windowSeconds: number): Promise<void> {
    const now = Date.now();
    const busy = previous !== undefined && now - previous.lastReserveAt < BUSY_INTERVAL_MS;
    const batch = busy ? Math.min(leaseCeiling(points), previous.batch * 2) : 1;
    const lease: Lease = previous ?? { units: 0, reservedTotal: 0, endsAt: now + windowSeconds * 1000, batch, lastReserveAt: now };
    lease.reserving = (async () => {
      try {
        const [total, msLeft] = await this.redis.harkReserveUnits(`hark:rl:${id}`, batch, windowSeconds * 1000);
        const granted = Math.max(0, Math.min(batch, points - (total - batch)));
        Object.assign(lease, { units: lease.units + granted, reservedTotal: total, endsAt: Date.now() + msLeft, batch, lastReserveAt: Date.now() });
      } finally {
        lease.reserving = undefined;
      }
    })();
    this.leases.set(id, lease);
    if (this.leases.size > 100_000) this.dropEnded(now);
    await lease.reserving;
  }

  async peek(id: string): Promise<Count | null> {
    const [consumed, msLeft] = await Promise.all([this.redis.get(`hark:rl:${id}`), this.redis.pttl(`hark:rl:${id}`)]);
    return consumed === null || msLeft <= 0 ? null : { consumed: Number(consumed), msLeft };
  }

  async delete(id: string): Promise<void> {
    this.leases.delete(id);
    await this.redis.del(`hark:rl:${id}`);
  }

  private dropEnded(now: number): void {
    for (const [id, lease] of this.leases) if (lease.endsAt <= now && !lease.reserving) this.leases.delete(id);
  }
}

/**
 * Fixed-window counters: in Redis when REDIS_URL is set (shared by every API
 * process), otherwise a plain in-process map. The map is synchronous on
 * purpose: it runs on every API-key request, where a promise-based limiter
 * cost several microseconds. Counters are per (purpose, limit, window), since
 * keys carry their own hourly limits.
 */
export class RateLimits {
  private readonly local = new ProcessWindows();
  private readonly shared?: RedisWindows;

  constructor(redis?: Redis) {
    if (redis) this.shared = new RedisWindows(redis);
  }

  /** Counts one event against `key` and says whether it is within the limit. */
  async consume(purpose: string, key: string, points: number, windowSeconds: number): Promise<RateLimitDecision> {
    const id = `${purpose}:${points}:${windowSeconds}:${key}`;
    if (this.shared) return this.shared.consume(id, points, windowSeconds);
    const count = this.local.count(id, windowSeconds, 1)!;
    return decision(count.consumed <= points, points, count);
  }

  /** Whether `key` is already over its limit, without counting. */
  async isBlocked(purpose: string, key: string, points: number, windowSeconds: number): Promise<RateLimitDecision | null> {
    const id = `${purpose}:${points}:${windowSeconds}:${key}`;
    const count = this.shared ? await this.shared.peek(id) : this.local.count(id, windowSeconds, 0);
    if (!count || count.consumed < points) return null;
    return decision(false, points, count);
  }

  async reset(purpose: string, key: string, points: number, windowSeconds: number): Promise<void> {
    const id = `${purpose}:${points}:${windowSeconds}:${key}`;
    if (this.shared) await this.shared.delete(id);
    else this.local.delete(id);
  }
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
