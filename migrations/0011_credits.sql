-- Credits (§2.10, §4.3): an append-only ledger and a balance derived from it.
--
-- Every change of a workspace's credits is one credit_ledger row; rows are
-- never updated or deleted. credit_balances holds the running totals of the
-- ledger (kept in the same transaction as each insert, under a row lock on the
-- balance) plus the workspace's auto-reload settings. The rules for each total
-- are in src/modules/credits/service.ts (REASONS) and repeated here as checks.
--
-- numeric(20, 6): credits may be fractional (per-second call pricing); a fixed
-- scale means the ledger row and the balance it was added to round alike.

create table credit_ledger (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null references accounts (id) on delete cascade,
  amount numeric(20, 6) not null,           -- positive: credit; negative: debit
  reason text not null,
  reference text,                           -- what caused it: kb_file:<id>, a processor event id, ...
  metadata jsonb not null default '{}'::jsonb,
  balance_after numeric(20, 6) not null,    -- the workspace's credits right after this row
  created_by uuid references users (id) on delete set null,
  -- clock_timestamp, not now(): several rows posted in one transaction keep
  -- their order, and history pages sort by it.
  created_at timestamptz not null default clock_timestamp(),
  constraint credit_ledger_amount_nonzero check (amount <> 0),
  constraint credit_ledger_reference_length check (reference is null or length(reference) between 1 and 500),
  -- The closed list of reasons and the sign each one may carry.
  constraint credit_ledger_reason_sign check (
    (reason in ('purchase', 'subscription', 'auto_reload', 'grant', 'refund') and amount > 0)
    or (reason in ('call', 'kb_storage', 'phone_number', 'reversal') and amount < 0)
    or reason = 'adjustment'
  )
);

-- Posting the same event twice (a retried webhook, a re-run job) is a no-op:
-- the second insert finds this key taken and the service returns the first row.
create unique index credit_ledger_reference_key on credit_ledger (account_id, reason, reference) where reference is not null;
-- History pages, newest first (GET /api/credits/ledger).
create index credit_ledger_account_idx on credit_ledger (account_id, created_at desc, id desc);

create table credit_balances (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null unique references accounts (id) on delete cascade,
  credits numeric(20, 6) not null default 0,          -- sum of every ledger amount
  total_purchased numeric(20, 6) not null default 0,  -- purchase + subscription + auto_reload + reversal
  total_used numeric(20, 6) not null default 0,       -- -(call + kb_storage + phone_number + refund)
  auto_reload_enabled boolean not null default false,
  auto_reload_threshold numeric(20, 6) not null default 0,   -- in credits
  auto_reload_amount_minor bigint not null default 0,        -- USD cents (money in minor units)
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint credit_balances_auto_reload_threshold check (auto_reload_threshold >= 0),
  constraint credit_balances_auto_reload_amount check (auto_reload_amount_minor >= 0)
);
