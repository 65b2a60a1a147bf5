-- Workspace files (§2.6, §4.6): one row per stored object. The bytes live in
-- the blob store under blob_key; the row and the object are created and
-- removed together by src/modules/files/service.ts.
create table workspace_files (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null references accounts (id) on delete cascade,
  name text not null,                       -- display name (displayName, defaults to the original name)
  original_name text not null,              -- the uploaded file's name, offered on download
  size_bytes bigint not null check (size_bytes >= 0),
  mime_type text not null,                  -- file_type in responses
  sha256 text not null,                     -- lowercase hex, computed while streaming
  blob_key text not null unique,
  created_by uuid references users (id) on delete set null,
  created_at timestamptz not null default now()
);
create index workspace_files_account_idx on workspace_files (account_id, created_at desc);
