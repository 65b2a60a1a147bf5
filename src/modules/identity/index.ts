import type { HarkModule } from '../../platform/context.ts';
import { identityRoutes } from './routes.ts';
import { signInRoutes } from './sign-in-routes.ts';

export const identityModule: HarkModule = {
  name: 'identity',
  routes: (app, ctx) => {
    identityRoutes(app, ctx);
    signInRoutes(app, ctx);
  },
  expiringRecords: [
    { table: 'refresh_tokens', column: 'expires_at' },
    { table: 'one_time_tokens', column: 'expires_at' },
    { table: 'oauth_states', column: 'expires_at' },
  ],
};
