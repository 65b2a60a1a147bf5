import type { HarkModule } from '../../platform/context.ts';
import { assistantRoutes } from './routes.ts';
import { DEFAULT_WEBHOOK_OPTIONS, webhookDeliveryJob, type WebhookOptions } from './webhooks.ts';

/**
 * §4.3 assistants and their outbound webhooks. A factory so tests can run the
 * delivery job with immediate retries (and a short timeout) instead of the
 * production backoff; everything else uses `assistantsModule`.
 */
export function createAssistantsModule(overrides: Partial<WebhookOptions> = {}): HarkModule {
  const options: WebhookOptions = { ...DEFAULT_WEBHOOK_OPTIONS, ...overrides };
  return {
    name: 'assistants',
    routes: (app, ctx) => assistantRoutes(app, ctx, options),
    jobs: (ctx) => [webhookDeliveryJob(ctx, options)],
  };
}

export const assistantsModule: HarkModule = createAssistantsModule();
