-- Full-text search reads the GIN index on kb_chunks.search_vector. With its
-- default fastupdate = on, new chunks go to a pending list (up to
-- gin_pending_list_limit, 4 MB) that every search scans from end to end
-- until a vacuum merges it: at 100k chunks the kb bench found 455 pending
-- pages, and scanning them was half the cost of a keyword search (matching
-- 1,646 chunks: 3.8 ms with the list, 1.9 ms without). Chunks are written by
-- background jobs, where the slower direct insert costs little next to
-- embedding them; searches are what callers wait for. So the index takes
-- inserts straight into its posting lists, and the list left now is merged.
alter index kb_chunks_search_idx set (fastupdate = off);
select gin_clean_pending_list('kb_chunks_search_idx'::regclass);
