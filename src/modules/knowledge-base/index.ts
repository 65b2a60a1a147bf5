import type { HarkModule } from '../../platform/context.ts';
import { embedderFor } from '../../providers/embeddings/index.ts';
import { processFileJob, type PipelineOptions } from './pipeline/process.ts';
import { knowledgeBaseRoutes } from './routes.ts';

export const DEFAULT_PIPELINE_OPTIONS: PipelineOptions = {
  retryLimit: 3,
  retryDelaySeconds: 5,
  embedBatchSize: 32,
  expireInSeconds: 30 * 60,
  embedder: embedderFor,
};

/**
 * §4.5 knowledge base: the library, processing jobs, attachments and search.
 * A factory so tests can run the pipeline with immediate retries, small
 * batches or an embedder wrapped to fail or pause; everything else uses
 * `knowledgeBaseModule`.
 */
export function createKnowledgeBaseModule(overrides: Partial<PipelineOptions> = {}): HarkModule {
  const options: PipelineOptions = { ...DEFAULT_PIPELINE_OPTIONS, ...overrides };
  return {
    name: 'knowledge-base',
    routes: (app, ctx) => knowledgeBaseRoutes(app, ctx, options),
    jobs: (ctx) => [processFileJob(ctx, options)],
  };
}

export const knowledgeBaseModule: HarkModule = createKnowledgeBaseModule();
