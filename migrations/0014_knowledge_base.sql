-- Knowledge base (§2.5, §3, §4.5): a workspace library of uploaded documents,
-- their chunks with embeddings and full-text vectors, and which assistants
-- use which files. The rules live in src/modules/knowledge-base/service.ts
-- (upload, credits, attachments), pipeline/process.ts (processing) and
-- search.ts (retrieval).

create table kb_files (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null references accounts (id) on delete cascade,
  filename text not null,                   -- the uploaded file's own name
  mime_type text not null,                  -- detected from the content, never taken from the client
  size_bytes bigint not null check (size_bytes >= 0),
  sha256 text not null,                     -- lowercase hex, computed while streaming; deduplicates uploads
  blob_key text not null unique,
  status text not null default 'pending'
    check (status in ('pending', 'parsing', 'embedding', 'indexing', 'ready', 'failed')),
  status_error text,                        -- why processing failed; null unless status = 'failed'
  char_count integer,                       -- null until extraction completes
  chunk_count integer,                      -- null until chunking completes
  -- Bumped by reprocess: a job carries the generation it was sent for and
  -- writes nothing once the file has moved on, so a stale job never mixes its
  -- chunks with the new run's.
  generation integer not null default 0,
  embedding_model text,                     -- the model of the run that made the file ready
  created_by uuid references users (id) on delete set null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  -- One copy of a content per library: concurrent identical uploads insert
  -- with ON CONFLICT DO NOTHING and all but one get the existing file.
  constraint kb_files_account_sha256_key unique (account_id, sha256)
);
-- The library listing, newest first, and its cursor.
create index kb_files_account_idx on kb_files (account_id, created_at desc, id desc);

create table kb_chunks (
  id bigint generated always as identity primary key,
  file_id uuid not null references kb_files (id) on delete cascade,
  account_id uuid not null references accounts (id) on delete cascade,
  chunk_index integer not null check (chunk_index >= 0),
  page_number integer check (page_number is null or page_number >= 1),
  content text not null,
  embedding vector(512) not null,           -- unit length: cosine distance (<=>) ranks
  embedding_model text not null,            -- chunks of another model are re-embedded, never compared
  search_vector tsvector generated always as (to_tsvector('english', content)) stored,
  -- A re-delivered job inserts with ON CONFLICT DO NOTHING: never two chunks at one position.
  constraint kb_chunks_file_chunk_key unique (file_id, chunk_index)
);
create index kb_chunks_embedding_idx on kb_chunks using hnsw (embedding vector_cosine_ops);
create index kb_chunks_search_idx on kb_chunks using gin (search_vector);

create table kb_attachments (
  assistant_id uuid not null references assistants (id) on delete cascade,
  file_id uuid not null references kb_files (id) on delete cascade,
  account_id uuid not null references accounts (id) on delete cascade,
  created_at timestamptz not null default now(),
  primary key (assistant_id, file_id)
);
-- attachment_count and "which assistants use this file".
create index kb_attachments_file_idx on kb_attachments (file_id);

-- Storage credits (§8: first 50 MiB free, each additional started 50 MiB one
-- credit). paid_blocks is a high-water mark of the 50 MiB blocks beyond the
-- free allowance that the workspace has paid for: an upload charges only the
-- blocks its new total needs beyond it, and deleting files never lowers it
-- (no refunds), so re-filling room already paid for costs nothing. The row is
-- locked by every upload of the workspace, which serialises the charge.
create table kb_storage_usage (
  account_id uuid primary key references accounts (id) on delete cascade,
  paid_blocks integer not null default 0 check (paid_blocks >= 0),
  updated_at timestamptz not null default now()
);
