import type { HarkModule } from '../platform/context.ts';
import { identityModule } from './identity/index.ts';
import { accountsModule } from './accounts/index.ts';

/** Every domain module, in the order their routes are registered. */
export const MODULES: HarkModule[] = [identityModule, accountsModule];
