import type { HarkModule } from '../../platform/context.ts';
import { creditRoutes } from './routes.ts';

/**
 * §2.10, §4.3: the credits ledger and the balance derived from it. Other
 * modules change credits only through `creditsService(ctx).post(trx, ...)`.
 */
export const creditsModule: HarkModule = { name: 'credits', routes: creditRoutes };
