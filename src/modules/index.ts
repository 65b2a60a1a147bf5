import type { HarkModule } from '../platform/context.ts';
import { identityModule } from './identity/index.ts';
import { accountsModule } from './accounts/index.ts';
import { apiKeysModule } from './api-keys/index.ts';
import { assistantsModule } from './assistants/index.ts';
import { creditsModule } from './credits/index.ts';
import { filesModule } from './files/index.ts';
import { aiModule } from './ai/index.ts';
import { knowledgeBaseModule } from './knowledge-base/index.ts';

/** Every domain module, in the order their routes are registered. */
export const MODULES: HarkModule[] = [identityModule, accountsModule, apiKeysModule, assistantsModule, creditsModule, filesModule, aiModule, knowledgeBaseModule];
