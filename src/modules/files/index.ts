import type { HarkModule } from '../../platform/context.ts';
import { fileRoutes } from './routes.ts';

/** §2.6, §4.6: workspace file storage behind signed download URLs. */
export const filesModule: HarkModule = { name: 'files', routes: fileRoutes };
