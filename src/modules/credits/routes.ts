import { Type, type Static } from 'typebox';
import type { App } from '../../platform/http/app-type.ts';
import type { AppContext } from '../../platform/context.ts';
import { actorOf } from '../../platform/http/auth.ts';
import { errorResponses } from '../../platform/http/schemas.ts';
import { CREDIT_REASON_NAMES, creditsService, type CreditReason } from './service.ts';

/** §5 rule 9: credits accept API keys or sessions (cookie or Bearer token). The spec names no scope for them. */
const AUTH = ['apiKey', 'session', 'jwt'] as const;
const tags = ['credits'];

const AccountId = Type.String({
  format: 'uuid',
  description:
    "The workspace. Optional: an API key means its own workspace; a user may leave it out only when they belong to exactly one workspace (otherwise 400 naming accountId).",
});

const Reason = Type.Unsafe<CreditReason>(
  Type.Union(
    CREDIT_REASON_NAMES.map((reason) => Type.Literal(reason)),
    {
      description:
        'Why credits changed. Credits in: purchase, subscription, auto_reload, grant, refund. Credits out: call, kb_storage, phone_number, reversal (a refunded or disputed payment). adjustment: either sign.',
    },
  ),
);

const CreditsRecord = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    account_id: Type.String({ format: 'uuid' }),
    credits: Type.Number({ description: 'current balance: the sum of every ledger entry' }),
    total_purchased: Type.Number({ description: 'credits paid for: purchase + subscription + auto_reload, less reversals' }),
    total_used: Type.Number({ description: 'credits consumed: call + kb_storage + phone_number debits, less refunds' }),
    auto_reload_enabled: Type.Boolean(),
    auto_reload_threshold: Type.Number({ description: 'a reload is due when credits fall below this' }),
    auto_reload_amount_usd: Type.Number({ description: 'US dollars charged per reload' }),
  },
  { $id: 'Credits', title: 'Credits', description: '§2.10 credits record, derived from the ledger' },
);

const LedgerEntry = Type.Object({
  id: Type.String({ format: 'uuid' }),
  account_id: Type.String({ format: 'uuid' }),
  amount: Type.Number({ description: 'positive: credits in; negative: credits out' }),
  reason: Reason,
  reference: Type.Union([Type.String(), Type.Null()], { description: 'what caused it (e.g. kb_file:<id>, a payment event id); unique per workspace and reason' }),
  metadata: Type.Record(Type.String(), Type.Unknown()),
  balance_after: Type.Number({ description: "the workspace's credits right after this entry" }),
  created_by: Type.Union([Type.String({ format: 'uuid' }), Type.Null()], { description: 'the user who caused it; null for system postings' }),
  created_at: Type.String({ format: 'date-time' }),
});

export function creditRoutes(app: App, ctx: AppContext): void {
  const credits = creditsService(ctx);
  app.addSchema(CreditsRecord);

  app.get(
    '/api/credits',
    {
      config: { auth: AUTH },
      schema: {
        tags,
        summary: "A workspace's credits (§4.3)",
        description:
          'Any member, or an API key of the workspace. A workspace with no credit activity yet answers an all-zero record, never 404. ' +
          'A workspace the caller is not a member of (or, for an API key, any other workspace) is 404 with no data.',
        querystring: Type.Object({ accountId: Type.Optional(AccountId) }),
        response: {
          200: Type.Object({ success: Type.Literal(true), credits: Type.Unsafe<Static<typeof CreditsRecord>>(Type.Ref('Credits')) }),
          ...errorResponses(400, 401, 404),
        },
      },
    },
    async (request) => ({ success: true as const, credits: await credits.read(actorOf(request), request.query) }),
  );

  app.get(
    '/api/credits/ledger',
    {
      config: { auth: AUTH },
      schema: {
        tags,
        summary: "A workspace's credit history",
        description:
          'Every posting, newest first, with the balance after it. Same access as GET /api/credits. Page with `before`: pass the previous answer\'s `next_before` (null when there is nothing older). ' +
          'A repeated posting (same reason and reference, e.g. a retried payment webhook) appears once.',
        querystring: Type.Object({
          accountId: Type.Optional(AccountId),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
          before: Type.Optional(Type.String({ format: 'uuid', description: 'a ledger entry id (next_before of the previous page)' })),
          reason: Type.Optional(Reason),
        }),
        response: {
          200: Type.Object({
            success: Type.Literal(true),
            entries: Type.Array(LedgerEntry),
            next_before: Type.Union([Type.String({ format: 'uuid' }), Type.Null()], { description: 'pass as `before` for the next page; null on the last page' }),
          }),
          ...errorResponses(400, 401, 404),
        },
      },
    },
    async (request) => ({ success: true as const, ...(await credits.history(actorOf(request), request.query)) }),
  );
}
