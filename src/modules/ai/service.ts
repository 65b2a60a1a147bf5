import { perContext, type AppContext } from '../../platform/context.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { AppError } from '../../platform/http/errors.ts';
import { llmProvider, LlmError, type LlmProvider } from '../../providers/llm/index.ts';
import { accountsService, type AccountRef } from '../accounts/service.ts';
import { IMPROVE_PROMPT, OPPORTUNITY_PROMPT, renderPrompt, SUCCESS_PROMPT, TRANSLATE_PROMPT, UTILITY_MODEL, type PromptTemplate } from './prompts.ts';

/** §8: prompts are at most 20000 characters. */
export const PROMPT_MAX = 20_000;
export const LANGUAGE_MAX = 100;

/** What every LLM endpoint answers until LLM_BASE_URL is set (ARCHITECTURE, configuration table). */
export function notConfigured(): AppError {
  return new AppError('not_configured', 'missing server configuration: the language-model upstream (LLM_BASE_URL) is not set');
}

/**
 * §4.4 prompt utilities: one completion each, from the templates in
 * prompts.ts. Any upstream failure is a 500 (§4.4 "500 on failure") whose
 * message says what went wrong without repeating what the upstream sent.
 */
export class PromptUtilitiesService {
  constructor(
    private readonly ctx: AppContext,
    private readonly llm: LlmProvider,
  ) {}

  improve(actor: Actor, ref: AccountRef, input: { prompt: string }, signal?: AbortSignal): Promise<{ text: string }> {
    required({ prompt: input.prompt });
    return this.generate(actor, ref, IMPROVE_PROMPT, { prompt: input.prompt }, signal);
  }

  translate(actor: Actor, ref: AccountRef, input: { prompt: string; targetLanguage: string }, signal?: AbortSignal): Promise<{ text: string }> {
    required({ prompt: input.prompt, targetLanguage: input.targetLanguage });
    return this.generate(actor, ref, TRANSLATE_PROMPT, { prompt: input.prompt, targetLanguage: input.targetLanguage.trim() }, signal);
  }

  opportunityPrompt(actor: Actor, ref: AccountRef, input: { systemPrompt: string }, signal?: AbortSignal): Promise<{ text: string }> {
    required({ systemPrompt: input.systemPrompt });
    return this.generate(actor, ref, OPPORTUNITY_PROMPT, { systemPrompt: input.systemPrompt }, signal);
  }

  successPrompt(actor: Actor, ref: AccountRef, input: { systemPrompt: string }, signal?: AbortSignal): Promise<{ text: string }> {
    required({ systemPrompt: input.systemPrompt });
    return this.generate(actor, ref, SUCCESS_PROMPT, { systemPrompt: input.systemPrompt }, signal);
  }

  /** `signal`: aborted when the client goes away, which stops the (billed) generation upstream too. */
  private async generate<Vars extends string>(
    actor: Actor,
    ref: AccountRef,
    template: PromptTemplate<Vars>,
    values: Record<Vars, string>,
    signal?: AbortSignal,
  ): Promise<{ text: string }> {
    await this.checkWorkspace(actor, ref);
    if (!this.llm.configured) throw notConfigured();
    let text: string | null | undefined;
    try {
      const completion = await this.llm.chatCompletion({ model: UTILITY_MODEL, messages: renderPrompt(template, values), temperature: template.temperature }, { signal });
      text = completion.choices[0]?.message.content;
    } catch (error) {
      throw generationFailed(error);
    }
    const trimmed = typeof text === 'string' ? text.trim() : '';
    if (!trimmed) throw new AppError('internal_error', 'Text generation failed: the model returned no text; try again');
    return { text: trimmed };
  }

  /**
   * The workspace the call is made for, when there is one: an API key's own
   * (another one named in the request is 404), or the one a signed-in user
   * names with accountSlug or teamId, which they must be a member of. The
   * text generated does not depend on it; the check keeps a caller from
   * acting in a workspace they do not belong to.
   */
  private async checkWorkspace(actor: Actor, ref: AccountRef): Promise<void> {
    const named = ref.accountSlug !== undefined || ref.teamId !== undefined || ref.accountId !== undefined;
    if (actor.kind === 'apiKey' || named) await accountsService(this.ctx).access(actor, ref);
  }
}

/** §4.4 "required (truthy)"; a value of only spaces is as empty as "" for a prompt. */
function required(fields: Record<string, string>): void {
  const empty = Object.entries(fields).filter(([, value]) => value.trim() === '');
  if (empty.length) {
    throw new AppError(
      'validation_failed',
      `${empty.map(([field]) => field).join(' and ')} ${empty.length > 1 ? 'are' : 'is'} required`,
      empty.map(([field]) => ({ field, message: 'must not be empty' })),
    );
  }
}

function generationFailed(error: unknown): AppError {
  if (!(error instanceof LlmError)) return new AppError('internal_error', 'Text generation failed; try again', undefined, { cause: error });
  if (error.kind === 'not_configured') return notConfigured();
  const reason: Record<LlmError['kind'], string> = {
    not_configured: '',
    unreachable: 'the model provider could not be reached',
    timeout: 'the model provider did not answer in time',
    http: `the model provider answered with an error (HTTP ${error.details.status ?? '?'})`,
    invalid_response: 'the model provider sent an answer that could not be read',
    aborted: 'the request was cancelled',
  };
  return new AppError('internal_error', `Text generation failed: ${reason[error.kind]}; try again`, undefined, { cause: error });
}

export const promptUtilitiesService = perContext((ctx) => new PromptUtilitiesService(ctx, llmProvider(ctx)));
