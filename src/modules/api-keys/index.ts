import type { HarkModule } from '../../platform/context.ts';
import { apiKeyRoutes } from './routes.ts';

/** §4.2 key management; the key check itself lives in the auth hook (authenticate.ts). */
export const apiKeysModule: HarkModule = { name: 'api-keys', routes: apiKeyRoutes };
