import type { HarkModule } from '../../platform/context.ts';
import { identityRoutes } from './routes.ts';

export const identityModule: HarkModule = {
  name: 'identity',
  routes: identityRoutes,
  expiringRecords: [
    { table: 'refresh_tokens', column: 'expires_at' },
    { table: 'one_time_tokens', column: 'expires_at' },
    { table: 'oauth_states', column: 'expires_at' },
  ],
};
