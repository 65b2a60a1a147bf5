import type { HarkModule } from '../../platform/context.ts';
import { accountRoutes } from './routes.ts';

export const accountsModule: HarkModule = { name: 'accounts', routes: accountRoutes };
