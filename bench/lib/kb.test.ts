// The knowledge-base quality set and the kb suite's helpers that need no
// server. Not part of `npm test` (which looks in src/ and test/): run with
// `node --import tsx --test bench/lib/kb.test.ts`.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PDFDocument } from 'pdf-lib';
import { firstRelevantRank, generatedPdf, generatedProse, isRelevant, loadQualitySet, normalise, retrievalScores, vocabulary, type QualityQuestion } from './kb.ts';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const set = loadQualitySet(REPO_ROOT);

test('the quality set: at least 40 questions, each with a short passage found verbatim in its document', () => {
  assert.ok(set.documents.length >= 4 && set.documents.length <= 6, `${set.documents.length} documents`);
  const kib = set.documents.reduce((total, doc) => total + doc.bytes.length, 0) / 1024;
  assert.ok(kib >= 15 && kib <= 40, `${kib.toFixed(1)} KiB of documents`);
  assert.ok(set.questions.length >= 40);
  assert.equal(new Set(set.questions.map((q) => q.id)).size, set.questions.length, 'ids are unique');
  const texts = new Map(set.documents.map((doc) => [doc.filename, normalise(doc.bytes.toString('utf8'))]));
  for (const q of set.questions) {
    assert.ok(texts.has(q.document), `${q.id}: no document ${q.document}`);
    assert.ok(q.answer.length <= 200, `${q.id}: answer of ${q.answer.length} characters`);
    assert.ok(texts.get(q.document)!.includes(normalise(q.answer)), `${q.id}: answer not in ${q.document}`);
    for (const [filename, text] of texts) {
      if (filename !== q.document) assert.ok(!text.includes(normalise(q.answer)), `${q.id}: answer also in ${filename}`);
    }
  }
});

test('the quality set mixes exact lookups (about a third) with paraphrases', () => {
  const exact = set.questions.filter((q) => q.kind === 'exact').length;
  const paraphrase = set.questions.filter((q) => q.kind === 'paraphrase').length;
  assert.equal(exact + paraphrase, set.questions.length, 'every question has a known kind');
  assert.ok(exact / set.questions.length >= 0.25 && exact / set.questions.length <= 0.4, `${exact} exact of ${set.questions.length}`);
});

const question: QualityQuestion = {
  id: 't1',
  kind: 'paraphrase',
  question: 'When does the unit update itself?',
  document: 'manual.md',
  answer: 'It installs updates at 3 a.m. local time when no call is in progress',
};

test('a hit is relevant when its chunk of the right document holds the passage, whitespace and case aside', () => {
  assert.ok(isRelevant({ filename: 'manual.md', content: 'Updates fail.\nIt  installs UPDATES at 3 a.m.\nlocal time when no call is in progress, so...' }, question));
  assert.ok(!isRelevant({ filename: 'faq.txt', content: question.answer }, question), 'another document');
  assert.ok(!isRelevant({ filename: 'manual.md', content: 'It installs updates at night.' }, question));
});

test('a passage split by a chunk boundary counts when 80% of its words are in one chunk, in a row', () => {
  // 14 words; 12 consecutive ones (86%) at the end of a chunk.
  assert.ok(isRelevant({ filename: 'manual.md', content: 'The Perch installs updates at 3 a.m. local time when no call is' }, question));
  // 10 consecutive words (71%): not enough.
  assert.ok(!isRelevant({ filename: 'manual.md', content: 'installs updates at 3 a.m. local time when no' }, question));
  // Every word present but not in a row: not the passage.
  assert.ok(!isRelevant({ filename: 'manual.md', content: 'progress in is call no when time local m a 3 at updates installs it' }, question));
  // Whole words only: "installs" is not "reinstalls".
  assert.ok(!isRelevant({ filename: 'manual.md', content: 'It reinstalls updates at 3 a.m. local time when no call' }, question));
});

test('ranks count primary hits only, up to k', () => {
  const miss = { filename: 'manual.md', content: 'nothing', adjacent: false };
  const hit = { filename: 'manual.md', content: question.answer, adjacent: false };
  assert.equal(firstRelevantRank([miss, { ...hit, adjacent: true }, miss, hit], question, 6), 3, 'the adjacent context is not numbered');
  assert.equal(firstRelevantRank([miss, miss, hit], question, 2), undefined);
  assert.deepEqual(retrievalScores([1, 2, undefined, 4]), { recall: 0.75, mrr: (1 + 0.5 + 0.25) / 4 });
});

test('generated prose is deterministic, ASCII and of the size asked for', () => {
  const vocab = vocabulary(set);
  assert.ok(vocab.length > 500, `${vocab.length} words`);
  const text = generatedProse(vocab, 50_000, 7);
  assert.equal(text, generatedProse(vocab, 50_000, 7));
  assert.notEqual(text, generatedProse(vocab, 50_000, 8));
  assert.equal(Buffer.byteLength(text), 50_000);
  assert.match(text, /^## Section 1: /);
  assert.ok(/^[\x20-\x7e\n]*$/.test(text), 'printable ASCII');
});

test('a generated PDF has the pages asked for', async () => {
  const pdf = await PDFDocument.load(await generatedPdf(vocabulary(set), 3, 1));
  assert.equal(pdf.getPageCount(), 3);
});
