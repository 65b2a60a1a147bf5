/**
 * The knowledge-base retrieval quality set (test/fixtures/kb-quality/, its
 * README states the rules implemented here) and the generated text and PDFs
 * the kb suite ingests. No server needed: bench/lib/kb.test.ts covers it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { PDFDocument, StandardFonts } from 'pdf-lib';

export const QUALITY_SET_DIR = 'test/fixtures/kb-quality';

export type QuestionKind = 'exact' | 'paraphrase';
export const QUESTION_KINDS: readonly QuestionKind[] = ['exact', 'paraphrase'];

export interface QualityQuestion {
  id: string;
  kind: QuestionKind;
  question: string;
  /** File name of the document that answers it, as uploaded. */
  document: string;
  /** A verbatim passage of `document`. */
  answer: string;
}

export interface QualityDocument {
  filename: string;
  mimeType: string;
  bytes: Buffer;
}

export interface QualitySet {
  documents: QualityDocument[];
  questions: QualityQuestion[];
}

const MIME_BY_EXTENSION: Record<string, string> = { '.md': 'text/markdown', '.txt': 'text/plain' };

/** Every document of the set (README.md is about the set, not part of it) and its questions. */
export function loadQualitySet(repoRoot: string): QualitySet {
  const dir = path.join(repoRoot, QUALITY_SET_DIR);
  const documents = fs
    .readdirSync(dir)
    .filter((name) => name !== 'README.md' && MIME_BY_EXTENSION[path.extname(name)] !== undefined)
    .sort()
    .map((filename) => ({ filename, mimeType: MIME_BY_EXTENSION[path.extname(filename)]!, bytes: fs.readFileSync(path.join(dir, filename)) }));
  const questions = JSON.parse(fs.readFileSync(path.join(dir, 'questions.json'), 'utf8')) as QualityQuestion[];
  return { documents, questions };
}

/** NFKC, lower case, each run of whitespace one space: how hits and passages are compared. */
export function normalise(text: string): string {
  return text.normalize('NFKC').toLowerCase().replace(/\s+/gu, ' ').trim();
}

/** Runs of letters and digits of the normalised text. */
export function words(text: string): string[] {
  return normalise(text).match(/[\p{L}\p{N}]+/gu) ?? [];
}

/** The share of a passage that must sit in one chunk, as consecutive words, when a chunk boundary split it. */
export const SPLIT_PASSAGE_SHARE = 0.8;

/**
 * The README's relevance rule: a chunk of the question's document that holds
 * the whole passage, or a run of consecutive passage words that is at least
 * SPLIT_PASSAGE_SHARE of the passage (the rest being in the neighbouring chunk).
 */
export function isRelevant(hit: { filename: string; content: string }, question: Pick<QualityQuestion, 'document' | 'answer'>): boolean {
  if (hit.filename !== question.document) return false;
  if (normalise(hit.content).includes(normalise(question.answer))) return true;
  const passage = words(question.answer);
  const needed = Math.ceil(passage.length * SPLIT_PASSAGE_SHARE);
  // Joined with spaces and padded, so a run only matches whole words.
  const chunk = ` ${words(hit.content).join(' ')} `;
  for (let start = 0; start + needed <= passage.length; start++) {
    if (chunk.includes(` ${passage.slice(start, start + needed).join(' ')} `)) return true;
  }
  return false;
}

/** The fields of a search hit (§2.5) the metrics read. */
export interface RankedHit {
  filename: string;
  content: string;
  adjacent: boolean;
}

/** One-based position of the first relevant hit among the first `k` primary (non-adjacent) hits; undefined when none. */
export function firstRelevantRank(hits: readonly RankedHit[], question: QualityQuestion, k: number): number | undefined {
  const primary = hits.filter((hit) => !hit.adjacent).slice(0, k);
  const index = primary.findIndex((hit) => isRelevant(hit, question));
  return index < 0 ? undefined : index + 1;
}

/** recall@k and MRR (over the same k hits) from each question's first relevant rank. */
export function retrievalScores(ranks: ReadonlyArray<number | undefined>): { recall: number; mrr: number } {
  if (ranks.length === 0) return { recall: Number.NaN, mrr: Number.NaN };
  const found = ranks.filter((rank): rank is number => rank !== undefined);
  return { recall: found.length / ranks.length, mrr: found.reduce((total, rank) => total + 1 / rank, 0) / ranks.length };
}

/** Deterministic pseudo-random numbers in [0, 1) (mulberry32): the same seed always generates the same corpus. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/**
 * The quality set's vocabulary: plain ASCII words only, so every generated
 * text can also be drawn with a PDF standard font.
 */
export function vocabulary(set: QualitySet): string[] {
  const all = set.documents.flatMap((doc) => doc.bytes.toString('utf8').split(/\s+/u));
  return [...new Set(all.map((word) => word.replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '').toLowerCase()).filter((word) => /^[a-z][a-z0-9'-]*$/.test(word)))].sort();
}

/**
 * Made-up prose of about `bytes` bytes (ASCII, so bytes = characters):
 * sentences of the vocabulary's words in paragraphs, with a Markdown-style
 * heading every few paragraphs, so the chunker meets the structure it splits on.
 */
export function generatedProse(vocab: readonly string[], bytes: number, seed: number): string {
  const random = seededRandom(seed);
  const pick = () => vocab[Math.floor(random() * vocab.length)]!;
  const parts: string[] = [];
  let length = 0;
  const add = (part: string) => {
    parts.push(part);
    length += part.length;
  };
  for (let paragraph = 0; length < bytes; paragraph++) {
    if (paragraph % 6 === 0) add(`## Section ${paragraph / 6 + 1}: ${pick()} ${pick()}\n\n`);
    const sentences: string[] = [];
    for (let s = 3 + Math.floor(random() * 4); s > 0; s--) {
      const sentence = Array.from({ length: 8 + Math.floor(random() * 12) }, pick).join(' ');
      sentences.push(`${sentence[0]!.toUpperCase()}${sentence.slice(1)}.`);
    }
    add(`${sentences.join(' ')}\n\n`);
  }
  return parts.join('').slice(0, bytes);
}

/** A PDF of `pages` pages of generated prose (Helvetica 10 pt, about 3,500 characters a page). */
export async function generatedPdf(vocab: readonly string[], pages: number, seed: number): Promise<Buffer> {
  const pdf = await PDFDocument.create();
  const font = await pdf.embedFont(StandardFonts.Helvetica);
  const size = 10;
  const [width, height, margin] = [595, 842, 50];
  const lineHeight = size * 1.35;
  const linesPerPage = Math.floor((height - 2 * margin) / lineHeight);
  const text = generatedProse(vocab, pages * 4000, seed).replace(/^## /gm, '');
  const lines: string[] = [];
  for (const paragraph of text.split('\n')) {
    let line = '';
    for (const word of paragraph.split(' ')) {
      const candidate = line ? `${line} ${word}` : word;
      if (font.widthOfTextAtSize(candidate, size) > width - 2 * margin && line) {
        lines.push(line);
        line = word;
      } else line = candidate;
    }
    lines.push(line);
  }
  for (let p = 0; p < pages; p++) {
    const page = pdf.addPage([width, height]);
    lines.slice(p * linesPerPage, (p + 1) * linesPerPage).forEach((line, i) => {
      page.drawText(line, { x: margin, y: height - margin - (i + 1) * lineHeight, size, font });
    });
  }
  return Buffer.from(await pdf.save());
}
