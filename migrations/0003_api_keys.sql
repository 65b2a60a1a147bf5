-- API keys (§2.2, §3, §4.2): only the SHA-256 hash of a key is stored.
create table api_keys (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null references accounts (id) on delete cascade,
  name text not null,
  description text,
  environment text not null check (environment in ('live', 'test')),
  key_prefix text not null,                 -- svc_live_ + 8 visible characters
  key_hash text not null unique,
  scopes jsonb not null default '["*"]'::jsonb,
  rate_limit_per_hour integer not null default 1000,
  last_used_at timestamptz,
  expires_at timestamptz,
  is_active boolean not null default true,
  revoked_at timestamptz,                   -- DELETE revokes; the row and its history stay
  created_at timestamptz not null default now(),
  created_by uuid references users (id) on delete set null,
  updated_at timestamptz not null default now()
);
create index api_keys_account_idx on api_keys (account_id, created_at desc);

create table api_key_events (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null references accounts (id) on delete cascade,
  api_key_id uuid not null references api_keys (id) on delete cascade,
  event text not null,                      -- created | updated | disabled | enabled | revoked
  actor_user_id uuid references users (id) on delete set null,
  changes jsonb not null default '{}'::jsonb,
  created_at timestamptz not null default now()
);
create index api_key_events_account_idx on api_key_events (account_id, created_at desc);
