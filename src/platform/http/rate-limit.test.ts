import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { RateLimits, type RateLimitDecision } from './rate-limit.ts';

// Redis is a real component of the platform (CI starts it); these counters are checked against it, never a stand-in.
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const HOUR = 3600;

/** One API process: its own connection and its own RateLimits, with a tally of the reservations it sent to Redis. */
function apiProcess(): { limits: RateLimits; redis: Redis; reservations: () => number } {
  const redis = new Redis(REDIS_URL, { lazyConnect: true });
  const limits = new RateLimits(redis);
  const counted = redis as Redis & { harkReserveUnits: (...args: unknown[]) => Promise<unknown> };
  const reserve = counted.harkReserveUnits.bind(redis);
  let calls = 0;
  counted.harkReserveUnits = (...args) => {
    calls += 1;
    return reserve(...args);
  };
  return { limits, redis, reservations: () => calls };
}

describe('rate limits shared through Redis', () => {
  const a = apiProcess();
  const b = apiProcess();
  const used: string[] = [];
  const key = (label: string) => {
    const id = `${label}-${crypto.randomUUID()}`;
    used.push(id);
    return id;
  };

  before(async () => {
    await Promise.all([a.redis.connect(), b.redis.connect()]);
  });
  after(async () => {
    // Leave nothing behind in a Redis other suites share (never a flush).
    const names = await a.redis.keys('hark:rl:test:*');
    const ours = names.filter((name) => used.some((id) => name.endsWith(id)));
    if (ours.length > 0) await a.redis.del(...ours);
    await Promise.all([a.redis.quit(), b.redis.quit()]);
  });

  test('limits under 200 are counted one by one: exact remaining across two processes, then 429', async () => {
    const id = key('exact');
    const decisions: RateLimitDecision[] = [];
    for (let i = 0; i < 55; i++) decisions.push(await (i % 2 ? b : a).limits.consume('test', id, 50, HOUR));
    assert.deepEqual(
      decisions.slice(0, 50).map((d) => d.remaining),
      Array.from({ length: 50 }, (_, i) => 49 - i),
    );
    assert.ok(decisions.slice(0, 50).every((d) => d.allowed));
    for (const refused of decisions.slice(50)) {
      assert.equal(refused.allowed, false);
      assert.equal(refused.remaining, 0);
      assert.ok(refused.retryAfter > 0 && refused.retryAfter <= HOUR);
    }
  });

  test('a busy key takes units in batches: never more than the limit, far fewer Redis calls than requests', async () => {
    const id = key('busy');
    const limit = 5_000;
    const before = a.reservations() + b.reservations();
    const burst = (process: typeof a) =>
      Promise.all(Array.from({ length: 3_000 }, () => process.limits.consume('test', id, limit, HOUR)));
    const [fromA, fromB] = await Promise.all([burst(a), burst(b)]);
    const allowed = [...fromA, ...fromB].filter((d) => d.allowed).length;
    assert.ok(allowed <= limit, `allowed ${allowed} of a ${limit} limit`);
    // Each process may hold at most 1% of the limit unused when the other runs dry.
    assert.ok(allowed >= limit - 2 * (limit / 100), `allowed ${allowed}, expected nearly ${limit}`);
    const calls = a.reservations() + b.reservations() - before;
    assert.ok(calls < 6_000 / 10, `${calls} Redis reservations for 6000 requests`);
    assert.ok(Number(await a.redis.get(`hark:rl:test:${limit}:${HOUR}:${id}`)) >= limit, 'the shared counter holds every unit handed out');
  });

  test('a spent window is refused without asking Redis again', async () => {
    const id = key('spent');
    for (let i = 0; i < 3; i++) await a.limits.consume('test', id, 3, HOUR);
    const refusedOnce = await a.limits.consume('test', id, 3, HOUR);
    assert.equal(refusedOnce.allowed, false);
    const calls = a.reservations();
    for (let i = 0; i < 20; i++) assert.equal((await a.limits.consume('test', id, 3, HOUR)).allowed, false);
    assert.equal(a.reservations(), calls);
  });

  test('isBlocked sees counts from other processes; reset starts the window over', async () => {
    const id = key('reset');
    assert.equal(await b.limits.isBlocked('test', id, 2, HOUR), null);
    await a.limits.consume('test', id, 2, HOUR);
    await a.limits.consume('test', id, 2, HOUR);
    const blocked = await b.limits.isBlocked('test', id, 2, HOUR);
    assert.equal(blocked?.allowed, false);
    await a.limits.reset('test', id, 2, HOUR);
    assert.equal(await b.limits.isBlocked('test', id, 2, HOUR), null);
    assert.equal((await a.limits.consume('test', id, 2, HOUR)).remaining, 1);
  });

  test('a new window begins when the old one ends', async () => {
    const id = key('window');
    assert.equal((await a.limits.consume('test', id, 1, 1)).allowed, true);
    assert.equal((await a.limits.consume('test', id, 1, 1)).allowed, false);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    assert.equal((await a.limits.consume('test', id, 1, 1)).allowed, true);
  });
});
