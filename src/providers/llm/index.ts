/**
 * The language-model upstream: any OpenAI-compatible HTTP API at
 * LLM_BASE_URL (the same base URL the OpenAI SDK takes, e.g.
 * `https://api.openai.com/v1`). Chat completion, prompt utilities and
 * builders reach it only through this interface.
 */
import { perContext } from '../../platform/context.ts';
import { OpenAiCompatibleLlm } from './openai-compatible.ts';
import type { LlmProvider } from './types.ts';

export * from './types.ts';
export { OpenAiCompatibleLlm, DEFAULT_LLM_TIMEOUTS, errorMessageOf, sanitizeUpstreamMessage, type LlmTimeouts } from './openai-compatible.ts';

/** The process's upstream client (keep-alive connections are shared by every caller). */
export const llmProvider = perContext((ctx): LlmProvider => new OpenAiCompatibleLlm(ctx.config.llm));
