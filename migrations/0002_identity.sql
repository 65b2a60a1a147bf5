-- Identity (§4.1, §5): users, sign-in sessions, refresh tokens, one-time
-- codes, OAuth identities, and the email outbox.

create table users (
  id uuid primary key default gen_random_uuid(),
  email text not null,
  password_hash text,                       -- null for users who only sign in by link or OAuth
  email_confirmed_at timestamptz,
  user_metadata jsonb not null default '{}'::jsonb,
  mfa_secret_sealed text,                   -- TOTP secret, sealed with SECRETS_KEY
  mfa_enabled_at timestamptz,               -- MFA is on once the first code was verified
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create unique index users_email_key on users (lower(email));

-- A session is one sign-in: the "token set" that sign-out revokes. Its
-- refresh tokens form one rotation family.
create table auth_sessions (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references users (id) on delete cascade,
  method text not null,                     -- password | magic_link | oauth:<provider> | email_confirm
  user_agent text,
  ip text,
  created_at timestamptz not null default now(),
  last_used_at timestamptz not null default now(),
  expires_at timestamptz not null,
  revoked_at timestamptz,
  revoked_reason text                        -- sign_out | refresh_reuse | user | password_change
);
create index auth_sessions_user_idx on auth_sessions (user_id) where revoked_at is null;

create table refresh_tokens (
  id uuid primary key default gen_random_uuid(),
  session_id uuid not null references auth_sessions (id) on delete cascade,
  token_hash text not null unique,          -- SHA-256 of the opaque token
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  rotated_at timestamptz                    -- set when exchanged; a second use is reuse
);
create index refresh_tokens_session_idx on refresh_tokens (session_id);

-- One-time codes sent by email: email confirmation, magic link / OTP sign-in,
-- workspace invitations. Only hashes are stored.
create table one_time_tokens (
  id uuid primary key default gen_random_uuid(),
  purpose text not null,                    -- email_confirm | magic_link | invitation
  email text not null,
  user_id uuid references users (id) on delete cascade,
  token_hash text not null unique,
  code_hash text,                           -- 6-digit OTP for magic_link
  attempts integer not null default 0,
  payload jsonb not null default '{}'::jsonb,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  used_at timestamptz
);
create index one_time_tokens_email_idx on one_time_tokens (purpose, lower(email)) where used_at is null;

create table oauth_identities (
  provider text not null,
  subject text not null,
  user_id uuid not null references users (id) on delete cascade,
  email text,
  created_at timestamptz not null default now(),
  primary key (provider, subject)
);

-- Pending OAuth sign-ins: state and PKCE verifier, looked up by the state's hash.
create table oauth_states (
  state_hash text primary key,
  provider text not null,
  code_verifier text not null,
  redirect_to text,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null
);

create table email_outbox (
  id uuid primary key default gen_random_uuid(),
  to_email text not null,
  subject text not null,
  body_text text not null,
  kind text not null,
  created_at timestamptz not null default now(),
  sent_at timestamptz,
  last_error text
);
create index email_outbox_to_idx on email_outbox (lower(to_email), created_at desc);

-- Workspaces (one thing named account, team and workspace in the spec).
create table accounts (
  id uuid primary key default gen_random_uuid(),
  slug text not null unique,
  name text not null,
  created_by uuid references users (id) on delete set null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create table memberships (
  account_id uuid not null references accounts (id) on delete cascade,
  user_id uuid not null references users (id) on delete cascade,
  role text not null check (role in ('owner', 'admin', 'member')),
  created_at timestamptz not null default now(),
  primary key (account_id, user_id)
);
create index memberships_user_idx on memberships (user_id);

-- POST /api/onboarding/start creates a workspace once per clientToken.
create table onboarding_starts (
  client_token uuid primary key,
  user_id uuid not null references users (id) on delete cascade,
  account_id uuid not null references accounts (id) on delete cascade,
  created_at timestamptz not null default now()
);
