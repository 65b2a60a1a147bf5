/**
 * Schema fuzzing gate (fixed seed, small budget; `npm run fuzz` runs the
 * long random pass). Every operation of the live OpenAPI document gets
 * generated requests with valid credentials of workspace A; no answer may be
 * a 5xx or a hang, every 4xx must be in the operation's error shape, and the
 * server must still be healthy afterwards.
 *
 * The runtime has every upstream configured (see world.ts), so the documented
 * `500 not_configured` of the AI routes cannot occur and any 5xx is a defect.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readOperations, type Operation } from './operations.ts';
import { describeFailure, fuzzOperation, fuzzOrder, healthProblems, type FuzzStats } from './fuzz.ts';
import { toCurl } from './transport.ts';
import { startGateWorld, type GateWorld } from './world.ts';

const SEED = 20_250_601;
/** Cases per operation: every kind of abuse a few times each, within the suite's time budget. */
const RUNS_PER_OPERATION = 40;
/** Where the printed commands point: `npm start`'s default address. */
const REPLAY_URL = 'http://127.0.0.1:3000';

describe('schema fuzzing', () => {
  let world: GateWorld;
  let operations: Operation[];
  const stats: FuzzStats = { operations: 0, requests: 0, byClass: {} };

  before(async () => {
    world = await startGateWorld();
    operations = fuzzOrder(await readOperations(world.rt.app!));
  });
  after(async () => {
    await world?.close();
  });

  test('no operation answers 5xx, hangs, or leaves the error shape', async (t) => {
    for (const op of operations) {
      await t.test(op.key, async () => {
        const failures = await fuzzOperation(world, op, { seed: SEED, runsPerOperation: RUNS_PER_OPERATION }, stats);
        // The credentials in these commands lived in the test runtime; `npm run fuzz` prints runnable ones.
        assert.deepEqual(failures.map((f) => describeFailure(f, REPLAY_URL, toCurl(REPLAY_URL, f.request).slice(0, 2000))), []);
      });
    }
    const summary = `schema fuzzing: ${stats.operations} operations, ${stats.requests} requests (${Object.entries(stats.byClass)
      .sort()
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}), seed ${SEED}`;
    t.diagnostic(summary);
    console.log(summary);
  });

  test('the server is still healthy afterwards', async () => {
    assert.deepEqual(await healthProblems(world), []);
  });
});
