-- The semantic search walks the HNSW index on kb_chunks.embedding. With full
-- precision every vector in it takes 2 kB (512 × 4 bytes): at 100k chunks the
-- index is 260 MB, twice PostgreSQL's default shared_buffers, so a search's
-- walk (about 1,500 index pages) read most of its pages from the operating
-- system's cache. Half precision (pgvector's halfvec, from 0.7 on) halves
-- the index (130 MB at 100k) and the pages a walk touches; a search orders by
-- the same expression, so it uses the index, and ranks its candidates by
-- their full-precision distance (search-queries.ts nearestChunks). The
-- stored embeddings stay full precision. Half precision keeps about three
-- significant digits per component, far finer than the gaps between the
-- cosine distances a search compares.
--
-- With pgvector older than 0.7 (Hark needs 0.5) the full-precision index
-- stays; search reads the index definition to know which one it has.
do $$
begin
  if (select string_to_array(extversion, '.')::int[] >= '{0,7}' from pg_extension where extname = 'vector') then
    drop index kb_chunks_embedding_idx;
    create index kb_chunks_embedding_idx on kb_chunks using hnsw ((embedding::halfvec(512)) halfvec_cosine_ops);
  end if;
end
$$;
