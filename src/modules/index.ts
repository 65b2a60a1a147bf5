import type { HarkModule } from '../platform/context.ts';

/** Every domain module, in the order their routes are registered. */
export const MODULES: HarkModule[] = [];
