-- Personal prompt presets (§2.3, §4.4). A user edits and deletes only their
-- own presets that are neither defaults nor templates; the API shows the two
-- flags as 1/0.
create table prompt_presets (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null references users (id) on delete cascade,
  title text not null check (title <> ''),
  prompt text not null check (prompt <> ''),
  is_default boolean not null default false,
  is_template boolean not null default false,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index prompt_presets_user_idx on prompt_presets (user_id);
