import { ConfigError, loadConfig } from './config.ts';
import { DatabaseSetupError } from './platform/db/database.ts';
import { MigrationError } from './platform/db/migrate.ts';
import { createLogger, startRuntime } from './runtime.ts';

/** Problems a person fixes by changing settings or the database: one clear line, no stack. */
const SETUP_ERRORS = [ConfigError, DatabaseSetupError, MigrationError];

async function main(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config);
  const startedAt = performance.now();
  const runtime = await startRuntime(config, { logger });

  if (runtime.app) {
    const address = await runtime.app.listen({ port: config.port, host: config.host });
    logger.info({ address, roles: [...config.roles], ms: Math.round(performance.now() - startedAt) }, 'Hark API ready');
  } else {
    logger.info({ roles: [...config.roles], ms: Math.round(performance.now() - startedAt) }, 'Hark worker ready');
  }

  /** Exits once buffered log lines are written. */
  const exit = (code: number) => logger.flush(() => process.exit(code));

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down: finishing in-flight requests and jobs');
    const deadline = setTimeout(() => {
      logger.error('shutdown took longer than SHUTDOWN_TIMEOUT_MS; exiting');
      exit(1);
    }, config.shutdownTimeoutMs + 5000);
    deadline.unref();
    runtime.close().then(
      () => {
        logger.info('stopped');
        exit(0);
      },
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((error: unknown) => {
  if (SETUP_ERRORS.some((kind) => error instanceof kind)) {
    process.stderr.write(`hark: ${(error as Error).message}\n`);
  } else {
    process.stderr.write(`hark: start-up failed: ${(error as Error)?.stack ?? String(error)}\n`);
  }
  process.exit(1);
});
