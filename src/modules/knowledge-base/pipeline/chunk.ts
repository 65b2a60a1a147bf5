/**
 * Cuts extracted pages into chunks of a few hundred tokens for embedding and
 * retrieval.
 *
 * Tokens are estimated as characters / 4 (OpenAI's rule of thumb for English;
 * it needs no tokenizer and does not depend on how words are spaced).
 *
 * Every position where a chunk may start or end is given a strength:
 * Markdown heading > paragraph (after a blank line) > sentence end > line
 * break > whitespace. A chunk ends at the strongest such position that leaves it
 * full enough (a quarter of the target before a heading, half otherwise),
 * the latest of equals; with none in reach it is cut hard at the target.
 * When a chunk ends inside a paragraph, the next starts up to `overlapTokens`
 * earlier, again at the strongest position (a sentence start rather than a
 * word) but never before the section's heading line (the heading is prefixed
 * anyway). A chunk that ends at a paragraph or a heading needs no overlap:
 * the next one starts clean at the new paragraph or section. Chunks never cross pages, so a PDF
 * chunk's page number is exact.
 *
 * A chunk that starts inside a section is prefixed with the section's
 * heading line: "## Refund policy" next to "within 30 days" lets both the
 * vector and the full-text search match a question about refunds.
 */
import type { ExtractedPage } from './parse.ts';

export interface TextChunk {
  chunkIndex: number;
  pageNumber: number | null;
  content: string;
}

export interface ChunkOptions {
  /** Size a chunk aims for (without its heading prefix); default 300. */
  targetTokens?: number;
  /** How much of the previous chunk the next one repeats; default 15% of the target. */
  overlapTokens?: number;
}

const DEFAULT_TARGET_TOKENS = 300;
const DEFAULT_OVERLAP_SHARE = 0.15;
const CHARS_PER_TOKEN = 4;
/** A heading line longer than this is not repeated in front of chunks (it is probably not a heading). */
const MAX_PREFIX_HEADING_CHARS = 200;

/**
 * How good a place to start or end a chunk a position is; higher is better.
 * A single line break ranks below a sentence end: in PDF text it is where
 * the layout wrapped a line, and Markdown joins such lines too.
 */
const Boundary = { None: -1, Word: 0, Line: 1, Sentence: 2, Paragraph: 3, Heading: 4 } as const;
type Boundary = (typeof Boundary)[keyof typeof Boundary];

/** A sentence end (with closing quotes or brackets) followed by whitespace, or a CJK full stop. */
const SENTENCE_END = /[.!?…]["'”’)\]]*\s+|[。！？]["'”’)\]]*\s*/g;
const WHITESPACE = /\s+/g;
const ATX_HEADING = /^#{1,6}[ \t]+\S/;
const CODE_FENCE = /^ {0,3}(?:```|~~~)/;

/** A few hundred tokens per chunk with overlap; splits on headings, then paragraphs, then sentences, then characters. Deterministic. */
export function chunkPages(pages: ExtractedPage[], options: ChunkOptions = {}): TextChunk[] {
  const targetTokens = options.targetTokens ?? DEFAULT_TARGET_TOKENS;
  const overlapTokens = options.overlapTokens ?? Math.round(targetTokens * DEFAULT_OVERLAP_SHARE);
  if (!Number.isInteger(targetTokens) || targetTokens < 1) throw new RangeError('targetTokens must be a positive integer');
  if (!Number.isInteger(overlapTokens) || overlapTokens < 0 || overlapTokens >= targetTokens) {
    throw new RangeError('overlapTokens must be an integer from 0 to less than targetTokens');
  }
  const sizes = { target: targetTokens * CHARS_PER_TOKEN, overlap: overlapTokens * CHARS_PER_TOKEN };

  const chunks: TextChunk[] = [];
  for (const page of pages) {
    for (const content of chunkText(page.text, sizes)) chunks.push({ chunkIndex: chunks.length, pageNumber: page.pageNumber, content });
  }
  return chunks;
}

function chunkText(text: string, sizes: { target: number; overlap: number }): string[] {
  const { strengths, headings } = boundariesOf(text);
  const contents: string[] = [];
  let start = text.search(/\S/);
  if (start === -1) return contents;
  while (start < text.length) {
    const end = chunkEnd(text, strengths, start, sizes.target);
    const body = text.slice(start, end).trim();
    if (body) contents.push(withHeading(body, headingBefore(headings, start)));
    if (end >= text.length) break;
    const section = headingBefore(headings, end);
    const earliest = Math.max(start + 1, end - sizes.overlap, section ? section.at + section.line.length : 0);
    start = strengths[end]! >= Boundary.Paragraph ? end : overlapStart(strengths, earliest, end);
  }
  return contents;
}

/**
 * The strength of every position of `text` as a chunk start (Boundary.None
 * where a chunk may not start), and where each heading line starts.
 */
function boundariesOf(text: string): { strengths: Int8Array; headings: Array<{ at: number; line: string }> } {
  const strengths = new Int8Array(text.length + 1).fill(Boundary.None);
  const mark = (at: number, strength: Boundary) => {
    if (at > 0 && at < text.length && strengths[at]! < strength) strengths[at] = strength;
  };
  for (const match of text.matchAll(WHITESPACE)) mark(match.index + match[0].length, Boundary.Word);
  for (const match of text.matchAll(SENTENCE_END)) mark(match.index + match[0].length, Boundary.Sentence);

  const headings: Array<{ at: number; line: string }> = [];
  let inCodeBlock = false;
  let previousBlank = false;
  for (let at = 0; at < text.length; ) {
    const newline = text.indexOf('\n', at);
    const lineEnd = newline === -1 ? text.length : newline;
    const line = text.slice(at, lineEnd);
    const blank = line.trim() === '';
    if (CODE_FENCE.test(line)) inCodeBlock = !inCodeBlock;
    // `#` lines inside a fenced code block are comments, not headings.
    const heading = !inCodeBlock && ATX_HEADING.test(line);
    if (heading) headings.push({ at, line: line.trim() });
    if (!blank) mark(at, heading ? Boundary.Heading : previousBlank ? Boundary.Paragraph : Boundary.Line);
    previousBlank = blank;
    at = lineEnd + 1;
  }
  return { strengths, headings };
}

/** Where the chunk starting at `start` ends (exclusive). */
function chunkEnd(text: string, strengths: Int8Array, start: number, target: number): number {
  const limit = start + target;
  if (limit >= text.length) return text.length;
  let best = -1;
  let bestStrength: number = Boundary.None;
  for (let at = start + 1; at <= limit; at++) {
    const strength = strengths[at]!;
    if (strength === Boundary.None || strength < bestStrength) continue;
    const minimum = strength === Boundary.Heading ? target / 4 : target / 2;
    if (at - start < minimum) continue;
    best = at;
    bestStrength = strength;
  }
  if (best !== -1) return best;
  // No break in reach (one long token): cut, but never between the two halves of a surrogate pair.
  const code = text.charCodeAt(limit - 1);
  return code >= 0xd800 && code <= 0xdbff ? limit - 1 : limit;
}

/** Where the chunk after one ending at `end` starts: the strongest position in [earliest, end), the earliest of equals; `end` when there is none. */
function overlapStart(strengths: Int8Array, earliest: number, end: number): number {
  let best = end;
  let bestStrength: number = Boundary.None;
  for (let at = earliest; at < end; at++) {
    if (strengths[at]! > bestStrength) {
      best = at;
      bestStrength = strengths[at]!;
    }
  }
  return best;
}

/** The heading line of the section `at` lies in (binary search: `headings` is in text order). */
function headingBefore(headings: Array<{ at: number; line: string }>, at: number): { at: number; line: string } | undefined {
  let low = 0;
  let high = headings.length - 1;
  let found: { at: number; line: string } | undefined;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if (headings[middle]!.at <= at) {
      found = headings[middle];
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}

function withHeading(body: string, heading: { line: string } | undefined): string {
  if (!heading || heading.line.length > MAX_PREFIX_HEADING_CHARS || body.startsWith(heading.line)) return body;
  return `${heading.line}\n\n${body}`;
}
