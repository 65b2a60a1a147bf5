/**
 * Text embeddings for the knowledge base. EMBEDDINGS_PROVIDER=local (the
 * default) runs Universal Sentence Encoder lite offline in a worker thread;
 * `openai` asks the OpenAI-compatible upstream at LLM_BASE_URL. Both answer
 * unit-length vectors of EMBEDDING_DIMENSIONS numbers.
 */
import { perContext } from '../../platform/context.ts';
import { LocalEmbedder } from './local.ts';
import { OpenAiEmbedder } from './openai.ts';
import type { Embedder } from './types.ts';

export * from './types.ts';
export { LocalEmbedder, LOCAL_EMBEDDING_MODEL, type LocalEmbedderOptions } from './local.ts';
export { OpenAiEmbedder, OPENAI_EMBEDDING_MODEL, type OpenAiEmbedderOptions } from './openai.ts';

/**
 * The process's embedder, shared by every caller so the local model is
 * loaded once. Its close() belongs to the runtime's shutdown (it stops the
 * model's worker thread).
 */
export const embedderFor = perContext(
  (ctx): Embedder =>
    ctx.config.embeddingsProvider === 'openai' ? new OpenAiEmbedder(ctx.config.llm) : new LocalEmbedder({ logger: ctx.logger }),
);
