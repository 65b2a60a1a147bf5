import { perContext, type AppContext } from '../../platform/context.ts';
import type { Actor } from '../../platform/http/auth.ts';
import { AppError, type FieldError } from '../../platform/http/errors.ts';
import { seal } from '../../platform/crypto/tokens.ts';
import { accountsService, type Account } from '../accounts/service.ts';
import {
  DEFAULT_MODEL,
  DEFAULT_TRANSCRIBER,
  DEFAULT_VOICE,
  modelProblems,
  transcriberProblems,
  voiceProblems,
  type ModelSettings,
  type TranscriberSettings,
  type VoiceSettings,
} from './catalogue.ts';
import * as store from './store.ts';
import type { AssistantType, TelephonySettings } from './tables.ts';
import { assistantWebhooks, DEFAULT_SUBSCRIBED_EVENTS, generateWebhookSecret, webhookUrlProblems, type WebhookEvent } from './webhooks.ts';
import { isUuid } from '../../platform/ids.ts';
import { isCursorOf } from '../../platform/db/keyset.ts';

export const ASSISTANT_TYPES = ['inbound', 'outbound', 'web'] as const satisfies readonly AssistantType[];
export const DEFAULT_TYPE: AssistantType = 'inbound';
export const DEFAULT_TELEPHONY: TelephonySettings = { outbound_enabled: false, max_call_seconds: 1800, record_calls: false, phone_number_id: null };
export const MAX_PROMPT = 20_000;
export const MAX_FIRST_MESSAGE = 2_000;
export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;

/** The assistant as every endpoint returns it; the webhook secret only ever as `has_secret`. */
export interface AssistantView {
  id: string;
  account_id: string;
  account_slug: string;
  name: string;
  type: AssistantType;
  prompt: string;
  first_message: string;
  voice: VoiceSettings;
  model: ModelSettings;
  transcriptor_options: TranscriberSettings;
  telephony: TelephonySettings;
  webhook: { url: string | null; events: string[]; has_secret: boolean };
  created_at: string;
  updated_at: string;
}

/**
 * The settings a request may give. Nested objects are partial: on create they
 * are laid over the defaults, on PATCH over the stored values, and the result
 * is validated as a whole (so `model.model` alone is checked against the
 * stored `model.provider`).
 */
export interface AssistantFields {
  name?: string;
  type?: AssistantType;
  prompt?: string;
  first_message?: string;
  voice?: Partial<VoiceSettings>;
  model?: Partial<ModelSettings>;
  transcriptor_options?: Partial<TranscriberSettings>;
  telephony?: Partial<TelephonySettings>;
  webhook?: { url?: string | null; events?: WebhookEvent[] };
}

export interface TestDelivery {
  id: string;
  status_code: number | null;
  latency_ms: number;
  error: string | null;
  ok: boolean;
}

export interface DeliveryView {
  id: string;
  event: string;
  status: 'pending' | 'succeeded' | 'failed';
  test: boolean;
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  payload: Record<string, unknown>;
  created_at: string;
  completed_at: string | null;
  attempt_log: Array<{ attempt: number; url: string; status_code: number | null; latency_ms: number; error: string | null; created_at: string }>;
}

export type CreateInput = AssistantFields & { accountSlug?: string; name: string };
export type UpdateInput = AssistantFields & { accountSlug?: string };

const UPDATABLE: ReadonlyArray<keyof AssistantFields> = ['name', 'type', 'prompt', 'first_message', 'voice', 'model', 'transcriptor_options', 'telephony', 'webhook'];
const NESTED: ReadonlyArray<keyof AssistantFields> = ['voice', 'model', 'transcriptor_options', 'telephony', 'webhook'];

export function toView(row: store.AssistantRow, accountSlug: string): AssistantView {
  return {
    id: row.id,
    account_id: row.account_id,
    account_slug: accountSlug,
    name: row.name,
    type: row.type,
    prompt: row.prompt,
    first_message: row.first_message,
    voice: row.voice,
    model: row.model,
    transcriptor_options: row.transcriptor_options,
    // Stored before a telephony setting existed: show its default.
    telephony: { ...DEFAULT_TELEPHONY, ...row.telephony },
    webhook: { url: row.webhook_url, events: row.webhook_events, has_secret: true },
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Drops keys given as undefined, so spreading a partial never erases a stored value. */
function defined<T extends object>(value: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(value ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}

interface Settings {
  voice: VoiceSettings;
  model: ModelSettings;
  transcriptor_options: TranscriberSettings;
  telephony: TelephonySettings;
  webhook_url: string | null;
  webhook_events: string[];
}

/** `input` over `base`, checked against the catalogue and the webhook rules; 400 with every problem at once. */
function mergedSettings(base: Settings, input: AssistantFields): Settings {
  const merged: Settings = {
    voice: { ...base.voice, ...defined(input.voice) },
    model: { ...base.model, ...defined(input.model) },
    transcriptor_options: { ...base.transcriptor_options, ...defined(input.transcriptor_options) },
    telephony: { ...base.telephony, ...defined(input.telephony) },
    webhook_url: input.webhook?.url === undefined ? base.webhook_url : input.webhook.url,
    webhook_events: input.webhook?.events === undefined ? base.webhook_events : [...new Set(input.webhook.events)],
  };
  const problems: FieldError[] = [];
  for (const field of NESTED) {
    const value = input[field];
    if (value !== undefined && Object.keys(defined(value as object)).length === 0) problems.push({ field, message: 'must set at least one property' });
  }
  if (input.model !== undefined) problems.push(...modelProblems(merged.model));
  if (input.voice !== undefined) problems.push(...voiceProblems(merged.voice));
  if (input.transcriptor_options !== undefined) problems.push(...transcriberProblems(merged.transcriptor_options));
  if (input.webhook?.url) problems.push(...webhookUrlProblems(input.webhook.url));
  if (input.name !== undefined && input.name.trim() === '') problems.push({ field: 'name', message: 'must not be blank' });
  throwIfAny(problems);
  return merged;
}

function throwIfAny(problems: FieldError[]): void {
  if (problems.length) throw new AppError('validation_failed', `Invalid assistant: ${problems.map((p) => `${p.field} ${p.message}`).join('; ')}`, problems);
}

const DEFAULT_SETTINGS: Settings = {
  voice: { ...DEFAULT_VOICE },
  model: { ...DEFAULT_MODEL },
  transcriptor_options: { ...DEFAULT_TRANSCRIBER },
  telephony: DEFAULT_TELEPHONY,
  webhook_url: null,
  webhook_events: [...DEFAULT_SUBSCRIBED_EVENTS],
};

export class AssistantsService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /**
   * The workspace of a live assistant, when the actor may use it: any member
   * of its workspace, or an API key of that workspace. `accountSlug`, when
   * given, must name that workspace. Whatever does not fit is "not found",
   * exactly like an unknown id, so nobody learns another tenant's ids.
   */
  async locate(actor: Actor, assistantId: string, accountSlug?: string): Promise<Account> {
    const accountId = isUuid(assistantId) ? await store.accountOfAssistant(this.db.kysely, assistantId) : undefined;
    if (!accountId) throw assistantNotFound();
    try {
      const { account } = await accountsService(this.ctx).access(actor, accountSlug === undefined ? { accountId } : { accountSlug });
      if (account.id !== accountId) throw assistantNotFound();
      return account;
    } catch (error) {
      if (error instanceof AppError && error.code === 'not_found') throw assistantNotFound();
      throw error;
    }
  }

  /**
   * Any member (or an API key of the workspace) creates. Unset settings get
   * the catalogue's defaults. The answer carries the webhook signing secret:
   * the only time besides rotation that it is shown.
   */
  async create(actor: Actor, input: CreateInput): Promise<AssistantView & { webhook: { secret: string } }> {
    const { account } = await accountsService(this.ctx).access(actor, { accountSlug: input.accountSlug });
    return this.createInWorkspace(this.db.kysely, account, input, actor.kind === 'user' ? actor.userId : null);
  }

  /**
   * Creation without an actor, for other modules that already checked access
   * and create an assistant inside their own transaction (onboarding).
   */
  async createInWorkspace(db: store.Db, account: Account, input: AssistantFields & { name: string }, createdBy: string | null) {
    const settings = mergedSettings(DEFAULT_SETTINGS, input);
    const secret = generateWebhookSecret();
    const row = await store.insertAssistant(db, {
      accountId: account.id,
      name: input.name,
      type: input.type ?? DEFAULT_TYPE,
      prompt: input.prompt ?? '',
      firstMessage: input.first_message ?? '',
      voice: settings.voice,
      model: settings.model,
      transcriptorOptions: settings.transcriptor_options,
      telephony: settings.telephony,
      webhookUrl: settings.webhook_url,
      webhookEvents: settings.webhook_events,
      webhookSecretSealed: seal(this.ctx.secrets.secretsKey, secret),
      createdBy,
    });
    const view = toView(row, account.slug);
    return { ...view, webhook: { ...view.webhook, secret } };
  }

  /** A workspace's live assistants, newest first; `cursor` is the previous page's `next_cursor`. */
  async list(actor: Actor, input: { accountSlug?: string; limit?: number; cursor?: string }): Promise<{ assistants: AssistantView[]; next_cursor: string | null }> {
    const { account } = await accountsService(this.ctx).access(actor, { accountSlug: input.accountSlug });
    const limit = input.limit ?? DEFAULT_PAGE_SIZE;
    if (input.cursor !== undefined && !(await isCursorOf(this.db.kysely, { table: 'assistants', scopeColumn: 'account_id', scopeId: account.id, id: input.cursor }))) {
      throw new AppError('validation_failed', 'cursor must be a next_cursor value from this list', [{ field: 'cursor', message: 'is not a cursor of this workspace' }]);
    }
    // One row more than asked tells whether another page exists without a count.
    const rows = await store.listAssistants(this.db.kysely, account.id, { limit: limit + 1, after: input.cursor });
    const page = rows.slice(0, limit);
    return { assistants: page.map((row) => toView(row, account.slug)), next_cursor: rows.length > limit ? page[page.length - 1]!.id : null };
  }

  async get(actor: Actor, assistantId: string, accountSlug?: string): Promise<AssistantView> {
    const account = await this.locate(actor, assistantId, accountSlug);
    const row = await store.findAssistant(this.db.kysely, account.id, assistantId);
    if (!row) throw assistantNotFound();
    return toView(row, account.slug);
  }

  /**
   * Partial update (§4.3). At least one field must be given. The row is
   * locked while the request is merged with it, so two concurrent PATCHes of
   * one nested object apply one after the other instead of one losing.
   */
  async update(actor: Actor, assistantId: string, input: UpdateInput): Promise<AssistantView> {
    if (!UPDATABLE.some((field) => input[field] !== undefined)) {
      throw new AppError('validation_failed', `Nothing to change: give at least one of ${UPDATABLE.join(', ')}`, [
        { field: 'body', message: `must change at least one of ${UPDATABLE.join(', ')}` },
      ]);
    }
    const account = await this.locate(actor, assistantId, input.accountSlug);
    const row = await this.db.transaction(async (trx) => {
      const current = await store.findAssistant(trx, account.id, assistantId, { lock: true });
      if (!current) throw assistantNotFound();
      const settings = mergedSettings(
        {
          voice: current.voice,
          model: current.model,
          transcriptor_options: current.transcriptor_options,
          telephony: { ...DEFAULT_TELEPHONY, ...current.telephony },
          webhook_url: current.webhook_url,
          webhook_events: current.webhook_events,
        },
        input,
      );
      const changes: store.AssistantChanges = {
        name: input.name,
        type: input.type,
        prompt: input.prompt,
        first_message: input.first_message,
      };
      if (input.voice !== undefined) changes.voice = settings.voice;
      if (input.model !== undefined) changes.model = settings.model;
      if (input.transcriptor_options !== undefined) changes.transcriptor_options = settings.transcriptor_options;
      if (input.telephony !== undefined) changes.telephony = settings.telephony;
      if (input.webhook?.url !== undefined) changes.webhook_url = settings.webhook_url;
      if (input.webhook?.events !== undefined) changes.webhook_events = settings.webhook_events;
      return store.updateAssistant(trx, account.id, assistantId, changes);
    });
    return toView(row, account.slug);
  }

  /**
   * Soft delete: the row stays (its deliveries and their history too) but
   * every endpoint answers 404 for it from now on, and pending deliveries stop.
   * Any member may delete, like any other write: an API key (which acts as a
   * member) with assistants:write manages the whole lifecycle, and a user
   * should not be able to do less than a key they could be handed.
   */
  async remove(actor: Actor, assistantId: string, accountSlug?: string): Promise<void> {
    const account = await this.locate(actor, assistantId, accountSlug);
    if (!(await store.softDeleteAssistant(this.db.kysely, account.id, assistantId))) throw assistantNotFound();
  }


  /** A new signing secret, effective at once (retries of pending deliveries use it too); shown only in this answer. */
  async rotateSecret(actor: Actor, assistantId: string, accountSlug?: string): Promise<string> {
    const account = await this.locate(actor, assistantId, accountSlug);
    const secret = generateWebhookSecret();
    if (!(await store.replaceWebhookSecret(this.db.kysely, account.id, assistantId, seal(this.ctx.secrets.secretsKey, secret)))) throw assistantNotFound();
    return secret;
  }

  /**
   * POST .../webhooks/test: one signed delivery of `event` (default
   * `webhook.test`) to the configured URL, now, whatever the subscribed
   * events. The receiver's failure is the answer, not an error of this
   * request: it comes back as `ok: false` with the status code or the error.
   */
  async sendTest(actor: Actor, assistantId: string, input: { accountSlug?: string; event?: WebhookEvent }, timeoutMs: number): Promise<TestDelivery> {
    const account = await this.locate(actor, assistantId, input.accountSlug);
    const settings = await store.webhookSettings(this.db.kysely, account.id, assistantId);
    if (!settings) throw assistantNotFound();
    if (!settings.webhook_url) {
      throw new AppError('bad_request', 'This assistant has no webhook URL; set webhook.url first (PATCH /api/assistants/{assistantId})', [
        { field: 'webhook.url', message: 'is not set' },
      ]);
    }
    const { id, outcome } = await assistantWebhooks(this.ctx).sendNow({
      accountId: account.id,
      assistantId,
      event: input.event ?? 'webhook.test',
      data: { test: true, message: 'Test delivery from Hark: your endpoint is reachable. Check that it verifies X-Hark-Signature.' },
      url: settings.webhook_url,
      secretSealed: settings.webhook_secret_sealed,
      timeoutMs,
    });
    return { id, status_code: outcome.statusCode, latency_ms: outcome.latencyMs, error: outcome.error, ok: outcome.ok };
  }

  /** The assistant's deliveries, newest first, each with its attempts in order. */
  async deliveries(actor: Actor, assistantId: string, input: { accountSlug?: string; limit?: number; cursor?: string }): Promise<{ deliveries: DeliveryView[]; next_cursor: string | null }> {
    await this.locate(actor, assistantId, input.accountSlug);
    const limit = input.limit ?? DEFAULT_PAGE_SIZE;
    if (input.cursor !== undefined && !(await isCursorOf(this.db.kysely, { table: 'webhook_deliveries', scopeColumn: 'assistant_id', scopeId: assistantId, id: input.cursor }))) {
      throw new AppError('validation_failed', 'cursor must be a next_cursor value from this list', [{ field: 'cursor', message: 'is not a delivery of this assistant' }]);
    }
    const rows = await store.listDeliveries(this.db.kysely, assistantId, { limit: limit + 1, after: input.cursor });
    const page = rows.slice(0, limit);
    const attempts = await store.attemptsOf(this.db.kysely, page.map((d) => d.id));
    return {
      deliveries: page.map((d) => ({
        id: d.id,
        event: d.event,
        status: d.status,
        test: d.is_test,
        attempts: d.attempts,
        last_status_code: d.last_status_code,
        last_error: d.last_error,
        payload: d.payload,
        created_at: d.created_at.toISOString(),
        completed_at: d.completed_at ? d.completed_at.toISOString() : null,
        attempt_log: attempts
          .filter((a) => a.delivery_id === d.id)
          .map((a) => ({ attempt: a.attempt, url: a.url, status_code: a.status_code, latency_ms: a.latency_ms, error: a.error, created_at: a.created_at.toISOString() })),
      })),
      next_cursor: rows.length > limit ? page[page.length - 1]!.id : null,
    };
  }
}

export function assistantNotFound(): AppError {
  return new AppError('not_found', 'Assistant not found');
}

export const assistantsService = perContext((ctx) => new AssistantsService(ctx));
