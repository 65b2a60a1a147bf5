/**
 * `npm run fuzz`: the long, random-seeded schema fuzzing pass. It starts the
 * gate world (embedded PGlite, or a scratch PostgreSQL database when
 * DATABASE_URL is set) listening on a free port of 127.0.0.1, fuzzes every
 * operation over real connections, and prints each distinct failure as a
 * curl command with the credentials it used. When something failed, the
 * server stays up (until Ctrl-C) so those commands can be run as printed.
 *
 *   npm run fuzz -- [--runs 300] [--seed N] [--only "/api/assistants"] [--no-keep]
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { readOperations } from './operations.ts';
import { describeFailure, fuzzOperation, fuzzOrder, healthProblems, type FuzzFailure, type FuzzStats } from './fuzz.ts';
import { toCurl } from './transport.ts';
import { refreshSession, startGateWorld } from './world.ts';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '300' },
    seed: { type: 'string' },
    only: { type: 'string' },
    'no-keep': { type: 'boolean', default: false },
  },
});
const runsPerOperation = Number(args.runs);
const seed = args.seed === undefined ? crypto.randomInt(2 ** 31) : Number(args.seed);
if (!Number.isInteger(runsPerOperation) || runsPerOperation < 1 || !Number.isInteger(seed)) {
  console.error('usage: npm run fuzz -- [--runs N] [--seed N] [--only TEXT] [--no-keep]');
  process.exit(2);
}

/** Access tokens live 15 minutes; refreshing at 10 keeps every case authenticated. */
const REFRESH_AFTER_MS = 10 * 60_000;

const world = await startGateWorld({ listen: true });
const baseUrl = world.baseUrl!;
const bodies = fs.mkdtempSync(path.join(os.tmpdir(), `hark-fuzz-${seed}-`));
let bodyCount = 0;
const bodyFile = (body: Buffer) => {
  const file = path.join(bodies, `case-${++bodyCount}.body`);
  fs.writeFileSync(file, body);
  return file;
};

const operations = fuzzOrder(await readOperations(world.rt.app!)).filter((op) => !args.only || op.key.includes(args.only));
console.log(`fuzzing ${operations.length} operations at ${baseUrl}, ${runsPerOperation} random cases each, seed ${seed} (repeat with --seed ${seed})`);
console.log(`workspace A: ${world.a.workspace.slug} (${world.a.workspace.id}), owner ${world.a.user.email}, API key ${world.a.key.fullKey}`);

const stats: FuzzStats = { operations: 0, requests: 0, byClass: {} };
const failures: FuzzFailure[] = [];
let refreshedAt = Date.now();
const started = Date.now();
for (const [index, op] of operations.entries()) {
  if (Date.now() - refreshedAt > REFRESH_AFTER_MS) {
    await refreshSession(world, world.a);
    refreshedAt = Date.now();
  }
  const found = await fuzzOperation(world, op, {
    seed,
    runsPerOperation,
    onFailure: (failure) => console.log(`\nFAIL ${describeFailure(failure, baseUrl, toCurl(baseUrl, failure.request, bodyFile))}\n`),
  }, stats);
  failures.push(...found);
  console.log(`[${index + 1}/${operations.length}] ${op.key}: ${found.length ? `${found.length} distinct failures` : 'ok'}`);
}

const health = await healthProblems(world);
const seconds = Math.round((Date.now() - started) / 1000);
const classes = Object.entries(stats.byClass).sort().map(([k, v]) => `${k} ${v}`).join(', ');
console.log(`\n${stats.operations} operations, ${stats.requests} requests (${classes}) in ${seconds} s, seed ${seed}`);
for (const problem of health) console.log(`UNHEALTHY after the run: ${problem}`);
console.log(failures.length || health.length ? `${failures.length} distinct failures` : 'no failures');

if ((failures.length || health.length) && !args['no-keep']) {
  console.log(`\nThe server stays up at ${baseUrl} for the curl commands above (bodies in ${bodies}); Ctrl-C to stop.`);
  await new Promise<void>((resolve) => process.once('SIGINT', () => resolve()));
}
await world.close();
fs.rmSync(bodies, { recursive: true, force: true });
process.exit(failures.length || health.length ? 1 : 0);
