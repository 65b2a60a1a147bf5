import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { ConfigError, SETTINGS, loadConfig } from './config.ts';

describe('configuration', () => {
  test('defaults give a working embedded setup', () => {
    const config = loadConfig({});
    assert.equal(config.port, 3000);
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.dataDir, './.data');
    assert.equal(config.databaseUrl, undefined);
    assert.equal(config.baseUrl, 'http://127.0.0.1:3000');
    assert.equal(config.appUrl, 'http://127.0.0.1:3000');
    assert.deepEqual([...config.roles].sort(), ['serve', 'work']);
    assert.equal(config.storage, 'local');
    assert.equal(config.embeddingsProvider, 'local');
    assert.equal(config.carrier, 'sandbox');
    assert.equal(config.authEmailConfirm, false);
    assert.equal(config.logLevel, 'info');
  });

  test('reads every kind of value', () => {
    const config = loadConfig({
      PORT: '8080',
      HOST: '0.0.0.0',
      DATABASE_URL: 'postgres://u:p@db:5432/hark',
      REDIS_URL: 'redis://cache:6379',
      BASE_URL: 'https://api.example.test/',
      ROLES: 'work',
      AUTH_EMAIL_CONFIRM: 'true',
      SECRETS_KEY: 'ab'.repeat(32),
      AUTH_JWT_SECRET: 'x'.repeat(40),
      STORAGE: 's3',
      S3_BUCKET: 'files',
      S3_ENDPOINT: 'http://127.0.0.1:9000',
      CARRIER: 'carrier-b',
    });
    assert.equal(config.port, 8080);
    assert.equal(config.baseUrl, 'https://api.example.test', 'trailing slash removed');
    assert.equal(config.appUrl, 'http://0.0.0.0:8080');
    assert.deepEqual([...config.roles], ['work']);
    assert.equal(config.authEmailConfirm, true);
    assert.equal(config.secretsKey?.length, 32);
    assert.deepEqual(config.s3, { endpoint: 'http://127.0.0.1:9000', bucket: 'files', region: 'us-east-1', accessKeyId: undefined, secretAccessKey: undefined });
    assert.equal(config.carrier, 'carrier-b');
  });

  const bad: Array<[Record<string, string>, string, RegExp]> = [
    [{ PORT: 'abc' }, 'PORT', /integer from 0 to 65535/],
    [{ PORT: '70000' }, 'PORT', /integer/],
    [{ ROLES: 'serve,cook' }, 'ROLES', /serve, work/],
    [{ ROLES: ' , ' }, 'ROLES', /comma-separated/],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL', /postgres/],
    [{ DATABASE_URL: 'not a url' }, 'DATABASE_URL', /URL/],
    [{ BASE_URL: 'ftp://x' }, 'BASE_URL', /http/],
    [{ AUTH_EMAIL_CONFIRM: 'maybe' }, 'AUTH_EMAIL_CONFIRM', /true or false/],
    [{ SECRETS_KEY: 'short' }, 'SECRETS_KEY', /64 hexadecimal/],
    [{ AUTH_JWT_SECRET: 'short' }, 'AUTH_JWT_SECRET', /at least 32/],
    [{ STORAGE: 'ftp' }, 'STORAGE', /local, s3/],
    [{ STORAGE: 's3' }, 'S3_BUCKET', /required/],
    [{ STORAGE: 's3', S3_BUCKET: 'b', S3_ACCESS_KEY_ID: 'id' }, 'S3_SECRET_ACCESS_KEY', /together/],
    [{ EMBEDDINGS_PROVIDER: 'magic' }, 'EMBEDDINGS_PROVIDER', /local, openai/],
    [{ CARRIER: 'carrier-z' }, 'CARRIER', /sandbox/],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL', /info/],
    [{ REDIS_URL: 'http://x' }, 'REDIS_URL', /redis/],
    [{ BODY_LIMIT_BYTES: '10' }, 'BODY_LIMIT_BYTES', /integer/],
  ];
  for (const [env, variable, allowed] of bad) {
    test(`rejects ${JSON.stringify(env)} naming ${variable}`, () => {
      assert.throws(
        () => loadConfig(env),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError);
          assert.equal(error.variable, variable);
          assert.match(error.message, new RegExp(`^Invalid configuration: ${variable} `));
          assert.match(error.message, allowed);
          assert.doesNotMatch(error.message, /\n/);
          return true;
        },
      );
    });
  }

  test('a bad value stops start-up with one line naming the variable', () => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      env: { ...process.env, PORT: 'eighty', DATABASE_URL: '' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(result.status, 1);
    const lines = result.stderr.trim().split('\n').filter((l) => !/warn|NodeVersionSupport/i.test(l));
    assert.deepEqual(lines, ['hark: Invalid configuration: PORT must be an integer from 0 to 65535 (got "eighty")']);
  });

  test('.env.example and the README list every variable', () => {
    const example = fs.readFileSync('.env.example', 'utf8');
    const readme = fs.readFileSync('README.md', 'utf8');
    for (const name of Object.keys(SETTINGS)) {
      assert.match(example, new RegExp(`^#? ?${name}=`, 'm'), `.env.example lacks ${name}`);
      assert.match(readme, new RegExp(`\\| \`${name}\``), `README lacks ${name}`);
    }
  });
});
