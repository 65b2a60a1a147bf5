/**
 * The gates' reading of the route table: a bare Fastify app (no database)
 * with the shapes real routes have, to show a route left out of the OpenAPI
 * document is caught and the vendor extensions are read.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Fastify from 'fastify';
import { operationsOf, routeTable, undocumentedRoutes } from './operations.ts';

test('the route table lists every method and path, parameters and wildcards as in OpenAPI, HEAD left out', async () => {
  const app = Fastify();
  const noop = async () => ({});
  app.get('/api/things', noop);
  app.post('/api/things', noop);
  app.patch('/api/things/:thingId', noop);
  app.get('/api/things/:thingId/parts/:partId', noop);
  app.get('/api/blobs/*', noop);
  app.delete('/api/other', noop);
  await app.ready();
  assert.deepEqual(routeTable(app).sort(), [
    'DELETE /api/other',
    'GET /api/blobs/{*}',
    'GET /api/things',
    'GET /api/things/{thingId}/parts/{partId}',
    'PATCH /api/things/{thingId}',
    'POST /api/things',
  ]);

  const documented = operationsOf({
    paths: {
      '/api/things': { get: { responses: {} }, post: { responses: {} } },
      '/api/things/{thingId}': { patch: { security: [{ apiKey: [] }], 'x-hark-scope': 'things:write', responses: {} } },
      '/api/blobs/{*}': { get: { 'x-hark-error-shape': 'error-only', responses: {} } },
    },
  });
  assert.deepEqual(undocumentedRoutes(app, documented).sort(), ['DELETE /api/other', 'GET /api/things/{thingId}/parts/{partId}']);
  const patch = documented.find((op) => op.key === 'PATCH /api/things/{thingId}')!;
  assert.deepEqual([patch.auth, patch.scope, patch.errorShape], [['apiKey'], 'things:write', 'envelope']);
  assert.equal(documented.find((op) => op.path === '/api/blobs/{*}')!.errorShape, 'error-only');
  await app.close();
});
