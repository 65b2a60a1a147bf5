import type { AppContext, HarkModule } from '../../platform/context.ts';
import { llmProvider, type LlmProvider } from '../../providers/llm/index.ts';
import { aiRoutes } from './routes.ts';

export interface AiModuleOptions {
  /** The upstream client; tests pass one with short timeouts. Default: the process's shared client. */
  llm?: (ctx: AppContext) => LlmProvider;
}

/** §4.4: prompt utilities, the chat-completion proxy and prompt presets. */
export function createAiModule(options: AiModuleOptions = {}): HarkModule {
  return { name: 'ai', routes: (app, ctx) => aiRoutes(app, ctx, options.llm?.(ctx) ?? llmProvider(ctx)) };
}

export const aiModule = createAiModule();
