-- Keep each chunk's tsvector in its heap row instead of the TOAST table.
-- A chunk row (2 KiB vector + ~1 KiB text + ~1.8 KiB tsvector) is over the
-- 2 KiB TOAST threshold, so with the default EXTENDED storage the tsvector
-- went out of line too, and full-text ranking had to fetch it from TOAST for
-- every matching chunk: at 100k chunks that fetch cost ~13 µs a row, more
-- than the ranking itself. MAIN keeps it inline (compressed when it must be);
-- the embedding (EXTERNAL) still goes out of line, so rows fit their pages.
-- Applies to rows written from now on; reprocessing a file rewrites its rows.
alter table kb_chunks alter column search_vector set storage main;
