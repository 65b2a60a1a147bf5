/**
 * The throughput baseline: Fastify 5 with nothing added, answering the same
 * route and body as Hark's liveness check. Logging is off because the point
 * is the cost of the framework alone. Started as its own process, like Hark,
 * so both pay the same process and network overhead.
 */
import Fastify from 'fastify';

const app = Fastify({ logger: false });
app.get('/api/health', async () => ({ status: 'ok' }));

await app.listen({ port: Number(process.env.PORT ?? 0), host: process.env.HOST ?? '127.0.0.1' });

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    app.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  });
}
