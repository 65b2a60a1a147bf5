import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Type } from 'typebox';
import { startTestRuntime, type TestRuntime } from '../../../test/helpers.ts';
import type { HarkModule } from '../context.ts';
import { errorResponses } from './schemas.ts';

const declared: HarkModule = {
  name: 'openapi-probe',
  routes(app) {
    app.post(
      '/test/declared',
      {
        config: { auth: ['apiKey', 'session'], scope: 'kb:write' },
        schema: {
          summary: 'probe',
          body: Type.Object({ name: Type.String() }),
          response: { 200: Type.Object({ ok: Type.Boolean() }), ...errorResponses(400, 401) },
        },
      },
      async () => ({ ok: true }),
    );
  },
};

describe('OpenAPI document and reference page', () => {
  let rt: TestRuntime;
  let doc: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- arbitrary JSON under test
  before(async () => {
    rt = await startTestRuntime({}, { modules: [declared] });
    const res = await rt.app!.inject({ method: 'GET', url: '/api/openapi.json' });
    assert.equal(res.statusCode, 200);
    doc = res.json();
  });
  after(async () => {
    await rt?.destroy();
  });

  test('is a valid OpenAPI 3.1 document', async () => {
    assert.equal(doc.openapi, '3.1.0');
    const result = await new Validator().validate(doc);
    assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
  });

  test('declares a security scheme for each credential of spec §5', () => {
    const schemes = doc.components.securitySchemes;
    assert.deepEqual(Object.keys(schemes).sort(), ['apiKey', 'jwt', 'serviceSecret', 'session']);
    assert.equal(schemes.session.in, 'cookie');
    assert.equal(schemes.session.name, 'sb-access-token');
    assert.equal(schemes.serviceSecret.name, 'X-Service-Secret');
    assert.equal(schemes.jwt.scheme, 'bearer');
  });

  test("turns each route's declared credentials into its security requirement", () => {
    assert.deepEqual(doc.paths['/test/declared'].post.security, [{ apiKey: [] }, { session: [] }]);
    assert.deepEqual(doc.paths['/api/health'].get.security, []);
  });

  test('states the API-key scope and the error-only shape as vendor extensions', () => {
    assert.equal(doc.paths['/test/declared'].post['x-hark-scope'], 'kb:write');
    assert.equal(doc.paths['/test/declared'].post['x-hark-error-shape'], undefined);
    assert.equal(doc.paths['/api/files'].get['x-hark-error-shape'], 'error-only');
    assert.equal(doc.paths['/api/files'].get['x-hark-scope'], undefined);
  });

  test('references the shared error envelope', () => {
    assert.ok(doc.components.schemas.ErrorEnvelope, 'ErrorEnvelope component');
    const bad = doc.paths['/test/declared'].post.responses['400'].content['application/json'].schema;
    assert.equal(bad.$ref, '#/components/schemas/ErrorEnvelope');
  });

  test('the reference page and its assets are served locally', async () => {
    const page = await rt.app!.inject({ method: 'GET', url: '/api/docs/' });
    assert.equal(page.statusCode, 200);
    assert.match(String(page.headers['content-type']), /text\/html/);
    const scripts = [...page.body.matchAll(/src="\.?\/?([^"]+\.js)"/g)].map((m) => m[1]!);
    assert.ok(scripts.length > 0, 'page loads scripts');
    assert.doesNotMatch(page.body, /https?:\/\/(?!127\.0\.0\.1|localhost)[a-z]/i, 'no asset from another host');
    for (const script of scripts) {
      const asset = await rt.app!.inject({ method: 'GET', url: `/api/docs/${script.replace(/^\/?api\/docs\//, '')}` });
      assert.equal(asset.statusCode, 200, script);
      assert.ok(asset.body.length > 100, script);
    }
    const init = await rt.app!.inject({ method: 'GET', url: '/api/docs/static/swagger-initializer.js' });
    assert.equal(init.statusCode, 200);
    // The page loads the document from this server, not from a CDN.
    const specUrl = /url: *resolveUrl\(["']([^"']+)["']\)/.exec(init.body)?.[1];
    assert.ok(specUrl, 'initializer names the document URL');
    const spec = await rt.app!.inject({ method: 'GET', url: new URL(specUrl, 'http://local/api/docs/').pathname });
    assert.equal(spec.statusCode, 200);
    assert.equal(spec.json().openapi, '3.1.0');
  });
});
