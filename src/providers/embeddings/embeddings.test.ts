import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { FakeLlmUpstream, fakeEmbedding } from '../../../test/fake-llm-upstream.ts';
import { testConfig } from '../../../test/helpers.ts';
import type { AppContext } from '../../platform/context.ts';
import { EMBEDDING_DIMENSIONS, EmbeddingsError, embedderFor, LocalEmbedder, LOCAL_EMBEDDING_MODEL, OpenAiEmbedder, type EmbeddingsErrorKind } from './index.ts';
import { contentWords, MAX_SENTENCE_CHARS, sentencesOf } from './sentences.ts';

const dot = (a: number[], b: number[]) => a.reduce((sum, x, i) => sum + x * b[i]!, 0);
const norm = (v: number[]) => Math.sqrt(dot(v, v));
/** Every component of `a` within `tolerance` of `b`'s. */
const closeTo = (a: readonly number[], b: readonly number[], tolerance: number) => a.length === b.length && a.every((value, i) => Math.abs(value - b[i]!) < tolerance);

function assertUnitVectors(vectors: number[][], count: number): void {
  assert.equal(vectors.length, count);
  for (const vector of vectors) {
    assert.equal(vector.length, EMBEDDING_DIMENSIONS);
    assert.ok(Math.abs(norm(vector) - 1) < 1e-6, `norm ${norm(vector)}`);
  }
}

function isEmbeddingsError(kind: EmbeddingsErrorKind, status?: number) {
  return (error: unknown) => error instanceof EmbeddingsError && error.kind === kind && error.details.status === status;
}

/** Just what embedderFor reads from a context. */
function contextWith(env: Record<string, string>): AppContext {
  const ctx: Pick<AppContext, 'config' | 'logger'> = { config: testConfig(env), logger: pino({ level: 'silent' }) };
  return ctx as AppContext;
}

describe('local embedder (Universal Sentence Encoder lite in a worker)', () => {
  const embedder = new LocalEmbedder();
  after(() => embedder.close());

  test('gives 512-number unit vectors in which a paraphrase is closer than an unrelated sentence', async () => {
    const [cat, paraphrase, unrelated] = await embedder.embed([
      'The cat is sleeping on the sofa.',
      'A cat naps on the couch.',
      'Quarterly revenue grew by ten percent.',
    ]);
    assertUnitVectors([cat!, paraphrase!, unrelated!], 3);
    assert.ok(dot(cat!, paraphrase!) > dot(cat!, unrelated!) + 0.2, `paraphrase ${dot(cat!, paraphrase!)} vs unrelated ${dot(cat!, unrelated!)}`);
    assert.equal(embedder.model, 'use-lite-512-sentence-mean');
    assert.equal(LOCAL_EMBEDDING_MODEL, embedder.model);
    assert.equal(embedder.runtime, 'onnxruntime', 'the worker checked ONNX Runtime against the TensorFlow.js model and uses it');
  });

  test("a text's vector is the unit-length mean of its sentences' vectors; a one-sentence text keeps its own", async () => {
    const sentences = ['Refunds are paid within 30 days.', 'The device weighs 240 grams.', 'Support answers on weekdays.'];
    const [first, second, third, paragraph] = await embedder.embed([...sentences, `${sentences.join(' ')}\n`]);
    const sum = first!.map((value, i) => value + second![i]! + third![i]!);
    assertUnitVectors([paragraph!], 1);
    assert.ok(dot(paragraph!, sum) / norm(sum) > 0.9999, 'the paragraph points where the sum of its sentences does');
    const [alone] = await embedder.embed([sentences[0]!]);
    assert.ok(dot(alone!, first!) > 0.9999);
  });

  test('empty, markup-only and very long texts still get one unit vector each', async () => {
    const unbroken = 'x'.repeat(3 * MAX_SENTENCE_CHARS);
    assertUnitVectors(await embedder.embed(['', '   ', '---', unbroken, 'word '.repeat(1000)]), 5);
  });

  test('ONNX Runtime gives the TensorFlow.js model\'s vectors: batches over one run, long, short and empty texts, queries', async () => {
    const tfjs = new LocalEmbedder({ runtime: 'tfjs' });
    try {
      const texts = [
        ...Array.from({ length: 40 }, (_, i) => `Clause ${i}: the reseller refunds annual plan KV-${i} within ${i + 3} days. Ask support first.`),
        'word '.repeat(300),
        '## Shipping\nParcels leave the warehouse on weekdays.',
        '',
      ];
      const [native, reference] = await Promise.all([embedder.embed(texts), tfjs.embed(texts)]);
      assert.equal(tfjs.runtime, 'tfjs');
      native.forEach((vector, i) => assert.ok(closeTo(vector, reference[i]!, 1e-5), `text ${i}`));
      const query = 'Quick question: how many days does the reseller have to refund KV-7?';
      const [nativeQuery, referenceQuery] = await Promise.all([embedder.embedQuery(query), tfjs.embedQuery(query)]);
      assert.ok(closeTo(nativeQuery, referenceQuery, 1e-5));
      // Alone, an empty text is a run without tokens, which ONNX Runtime cannot take (TensorFlow.js fails on it too).
      const [emptyAlone] = await embedder.embed(['']);
      assert.ok(closeTo(emptyAlone!, native.at(-1)!, 1e-6), 'an empty text alone gets its vector from a batch');
    } finally {
      await tfjs.close();
    }
  });

  test('concurrent requests larger than a batch each get their own vectors, in order', async () => {
    const texts = Array.from({ length: 70 }, (_, i) => `Document chunk number ${i} describes refund rule ${i % 5}.`);
    const query = 'How do refunds work?';
    const [many, single, again] = await Promise.all([embedder.embed(texts), embedder.embed([query]), embedder.embed([texts[42]!])]);
    assertUnitVectors(many, texts.length);
    const [alone] = await embedder.embed([query]);
    assert.ok(dot(single[0]!, alone!) > 0.9999, 'a query batched with chunks gets the vector it gets alone');
    assert.ok(dot(again[0]!, many[42]!) > 0.9999, 'vectors come back in input order');
    assert.deepEqual(await embedder.embed([]), []);
  });

  test("a query's vector weighs its sentences by their content words, so an opening barely moves it", async () => {
    const question = 'How much does the KP2-PRO reception bundle cost?';
    const [alone] = await embedder.embed([question]);
    assert.ok(dot(await embedder.embedQuery(question), alone!) > 0.9999, 'a one-sentence query keeps its own vector');
    const spoken = `Hi there. ${question}`;
    const [evenMean] = await embedder.embed([spoken]);
    const weighted = await embedder.embedQuery(spoken);
    assertUnitVectors([weighted], 1);
    assert.ok(dot(weighted, alone!) > dot(evenMean!, alone!) + 0.05, `weighted ${dot(weighted, alone!)} vs even ${dot(evenMean!, alone!)}`);
    const [greeting, farewell] = await embedder.embed(['Hello.', 'Bye.']);
    const smallTalk = await embedder.embedQuery('Hello. Bye.');
    assert.ok(Math.abs(dot(smallTalk, greeting!) - dot(smallTalk, farewell!)) < 1e-6, 'no content words: the sentences weigh alike');
  });

  test('close() fails waiting requests and a later request starts the model again', async () => {
    const waiting = assert.rejects(embedder.embed(Array.from({ length: 100 }, (_, i) => `Sentence ${i}.`)), isEmbeddingsError('closed'));
    await embedder.close();
    await waiting;
    assertUnitVectors(await embedder.embed(['Back again.']), 1);
  });

  test('under node --import tsx, a script that never closes the embedder still exits', () => {
    const script = `
      import { LocalEmbedder } from ${JSON.stringify(fileURLToPath(new URL('./local.ts', import.meta.url)))};
      const [vector] = await new LocalEmbedder().embed(['hello world']);
      console.log(vector.length);
    `;
    const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '--eval', script], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(child.status, 0, child.stderr);
    assert.equal(child.stdout.trim(), String(EMBEDDING_DIMENSIONS));
  });
});

describe('contentWords (what a query sentence weighs)', () => {
  test('counts the words that are not function words, codes and numbers included', () => {
    assert.equal(contentWords('Hi there.'), 1);
    assert.equal(contentWords('Could you tell me:'), 1);
    assert.equal(contentWords('What is it?'), 0);
    assert.equal(contentWords('How much does the KP2-PRO cost in 2026?'), 4);
    assert.equal(contentWords('Préstamo für Ärzte'), 3);
  });
});

describe('sentencesOf (what the local embedder embeds one by one)', () => {
  test('ends sentences at . ! ? : … and CJK full stops followed by whitespace, and at line breaks', () => {
    const text = 'Do I need a Perch? No. Forwarding takes minutes: moving "takes days." (Or weeks!)\n\n## Refunds\n- within 30 days\n- v1.5 only… 次の文。終わり';
    assert.deepEqual(sentencesOf(text), ['Do I need a Perch?', 'No.', 'Forwarding takes minutes:', 'moving "takes days."', '(Or weeks!)', '## Refunds', '- within 30 days', '- v1.5 only…', '次の文。', '終わり']);
  });

  test('drops pieces without a letter or digit unless nothing else is left', () => {
    assert.deepEqual(sentencesOf('Intro.\n---\n* \nEnd.'), ['Intro.', 'End.']);
    assert.deepEqual(sentencesOf(' --- '), ['---']);
    assert.deepEqual(sentencesOf(''), ['']);
  });

  test('cuts a sentence longer than the limit at its last space in reach, or hard when there is none', () => {
    const words = sentencesOf('abcd '.repeat(10).trim(), 12);
    assert.deepEqual(words, ['abcd abcd', 'abcd abcd', 'abcd abcd', 'abcd abcd', 'abcd abcd']);
    assert.deepEqual(sentencesOf('x'.repeat(25), 10), ['x'.repeat(10), 'x'.repeat(10), 'x'.repeat(5)]);
    const emoji = sentencesOf('😀'.repeat(8), 5);
    assert.ok(emoji.every((piece) => piece.length <= 5 && !/[\ud800-\udbff]$/.test(piece)), JSON.stringify(emoji));
    assert.equal(emoji.join(''), '😀'.repeat(8));
  });
});

describe('OpenAI-compatible embedder', () => {
  let fake: FakeLlmUpstream;
  before(async () => {
    fake = await FakeLlmUpstream.start();
  });
  after(() => fake.close());
  beforeEach(() => fake.reset());

  test('asks {LLM_BASE_URL}/embeddings for 512 dimensions with the Bearer key and returns the vectors in order', async () => {
    const embedder = new OpenAiEmbedder({ baseUrl: fake.url, apiKey: 'up-key' });
    const texts = ['first text', 'second text'];
    const vectors = await embedder.embed(texts);
    assertUnitVectors(vectors, 2);
    texts.forEach((text, i) => assert.ok(dot(vectors[i]!, fakeEmbedding(text, EMBEDDING_DIMENSIONS)) > 0.999999));
    const request = fake.last()!;
    assert.equal(request.method, 'POST');
    assert.equal(request.path, '/v1/embeddings');
    assert.equal(request.headers.authorization, 'Bearer up-key');
    assert.deepEqual(request.body, { model: 'text-embedding-3-small', input: texts, dimensions: 512, encoding_format: 'float' });
    assert.equal(embedder.model, 'openai:text-embedding-3-small@512');
    assert.ok(dot(await embedder.embedQuery('first text'), vectors[0]!) > 0.999999, 'a query is embedded as any text');
  });

  test('splits long lists into several requests', async () => {
    const texts = ['a', 'b', 'c', 'd', 'e'];
    const vectors = await new OpenAiEmbedder({ baseUrl: fake.url }, { maxInputsPerRequest: 2 }).embed(texts);
    assert.deepEqual(fake.requests.map((r) => (r.body as { input: string[] }).input), [['a', 'b'], ['c', 'd'], ['e']]);
    texts.forEach((text, i) => assert.ok(dot(vectors[i]!, fakeEmbedding(text, EMBEDDING_DIMENSIONS)) > 0.999999));
    assert.equal(fake.last()!.headers.authorization, undefined, 'no key configured, none sent');
  });

  test('upstream errors become typed errors without the key', async () => {
    const embedder = new OpenAiEmbedder({ baseUrl: fake.url, apiKey: 'sk-secret-key-123' });
    fake.set({ mode: 'fail' });
    await assert.rejects(embedder.embed(['x']), (error: unknown) => isEmbeddingsError('http', 500)(error) && /fake internal detail/.test((error as EmbeddingsError).details.upstreamMessage ?? ''));
    fake.set({ mode: 'status', status: 401, body: JSON.stringify({ error: { message: 'Incorrect API key provided: sk-secret-key-123' } }) });
    await assert.rejects(embedder.embed(['x']), (error: unknown) => {
      assert.ok(isEmbeddingsError('http', 401)(error));
      assert.ok(!JSON.stringify({ message: (error as Error).message, ...(error as EmbeddingsError).details }).includes('sk-secret-key-123'));
      return true;
    });
  });

  test('answers that are not the embeddings asked for are refused', async () => {
    const embedder = new OpenAiEmbedder({ baseUrl: fake.url });
    const answers = [
      '<html>not an API</html>',
      JSON.stringify({ data: [] }),
      JSON.stringify({ data: [{ index: 0, embedding: [0.6, 0.8] }] }),
      JSON.stringify({ data: [{ index: 0, embedding: new Array(EMBEDDING_DIMENSIONS).fill(0) }] }),
    ];
    for (const body of answers) {
      fake.set({ mode: 'status', status: 200, body });
      await assert.rejects(embedder.embed(['x']), isEmbeddingsError('invalid_response'), body.slice(0, 40));
    }
  });

  test('a silent upstream times out, an absent one is unreachable, a missing base URL is not configured', async () => {
    fake.set({ mode: 'hang' });
    await assert.rejects(new OpenAiEmbedder({ baseUrl: fake.url }, { timeoutMs: 200 }).embed(['x']), isEmbeddingsError('timeout'));

    const closedPort = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    await assert.rejects(new OpenAiEmbedder({ baseUrl: `http://127.0.0.1:${closedPort}/v1` }).embed(['x']), isEmbeddingsError('unreachable'));
    await assert.rejects(new OpenAiEmbedder({}).embed(['x']), isEmbeddingsError('not_configured'));
  });
});

describe('embedderFor', () => {
  test('chooses by EMBEDDINGS_PROVIDER and gives each context one embedder', async () => {
    const local = contextWith({});
    assert.ok(embedderFor(local) instanceof LocalEmbedder);
    assert.equal(embedderFor(local), embedderFor(local));
    const openai = embedderFor(contextWith({ EMBEDDINGS_PROVIDER: 'openai', LLM_BASE_URL: 'http://127.0.0.1:9/v1' }));
    assert.ok(openai instanceof OpenAiEmbedder);
    await embedderFor(local).close?.();
  });
});
