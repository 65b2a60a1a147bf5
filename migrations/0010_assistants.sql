-- Assistants (§2.10, §4.3) and their outbound webhook deliveries (§6).
create table assistants (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null references accounts (id) on delete cascade,
  name text not null,
  type text not null check (type in ('inbound', 'outbound', 'web')),
  prompt text not null default '',
  first_message text not null default '',
  voice jsonb not null,                     -- {provider, voice_id}, checked against catalogue.ts
  model jsonb not null,                     -- {provider, model}
  transcriptor_options jsonb not null,      -- {provider, model, language}
  telephony jsonb not null,                 -- {outbound_enabled, max_call_seconds, record_calls, phone_number_id}
  webhook_url text,                         -- null: no deliveries
  webhook_events jsonb not null default '[]'::jsonb,
  webhook_secret_sealed text not null,      -- AES-256-GCM (crypto/tokens.ts seal); the plaintext is shown on create and rotate only
  created_by uuid references users (id) on delete set null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  deleted_at timestamptz                    -- DELETE is soft: deliveries and history stay, the API answers 404
);
create index assistants_account_idx on assistants (account_id, created_at desc, id desc) where deleted_at is null;

create table webhook_deliveries (
  id uuid primary key,                      -- chosen by the service: it is inside the signed body
  assistant_id uuid not null references assistants (id) on delete cascade,
  account_id uuid not null references accounts (id) on delete cascade,
  event text not null,
  payload jsonb not null,                   -- the body sent: {id, type, created_at, assistant_id, account_id, data}
  is_test boolean not null default false,   -- POST .../webhooks/test: one synchronous attempt, never retried
  status text not null default 'pending' check (status in ('pending', 'succeeded', 'failed')),
  attempts integer not null default 0,
  last_status_code integer,
  last_error text,
  created_at timestamptz not null default now(),
  completed_at timestamptz
);
create index webhook_deliveries_assistant_idx on webhook_deliveries (assistant_id, created_at desc, id desc);

create table webhook_delivery_attempts (
  id uuid primary key default gen_random_uuid(),
  delivery_id uuid not null references webhook_deliveries (id) on delete cascade,
  attempt integer not null,                 -- 1 for the first try
  url text not null,                        -- where this attempt went (the assistant's webhook URL at that time)
  status_code integer,                      -- null: no HTTP answer (timeout, connection error)
  latency_ms integer not null,
  error text,                               -- null on success
  created_at timestamptz not null default now(),
  unique (delivery_id, attempt)
);
