/**
 * What kind of document a knowledge-base upload is (from its bytes, not only
 * its name) and its text: PDF per page, DOCX with its headings kept as
 * Markdown `#` lines (the chunker splits on them), TXT and Markdown as UTF-8.
 */
import { isUtf8 } from 'node:buffer';
import mammoth from 'mammoth';
import { extractText as extractPdfText, getDocumentProxy } from 'unpdf';

export const KB_MIME_TYPES = {
  pdf: 'application/pdf',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  txt: 'text/plain',
  md: 'text/markdown',
} as const;
export type KbMimeType = (typeof KB_MIME_TYPES)[keyof typeof KB_MIME_TYPES];

/** PDF: one per page (1-based); others: one entry with null. */
export interface ExtractedPage {
  pageNumber: number | null;
  text: string;
}

/** Why a file's text could not be read; the message is shown to the user as the file's status_error. */
export class ExtractionError extends Error {
  override name = 'ExtractionError';
}

const PDF_MAGIC = Buffer.from('%PDF-');
const ZIP_LOCAL_HEADER = Buffer.from([0x50, 0x4b, 0x03, 0x04]);
const ZIP_CENTRAL_HEADER = Buffer.from([0x50, 0x4b, 0x01, 0x02]);
const ZIP_END_OF_DIRECTORY = Buffer.from([0x50, 0x4b, 0x05, 0x06]);
/** [Content_Types].xml of a Word document names this; visible in the head when that entry is stored uncompressed. */
const WORD_MAIN_CONTENT_TYPE = 'wordprocessingml.document.main+xml';
/** Entries that make a ZIP some other format: Excel, PowerPoint, OpenDocument, Java archives. */
const OTHER_ZIP_FORMAT = /^(?:xl\/|ppt\/|mimetype$|META-INF\/)/;

/** From the first bytes of the content (at least 8 KiB when the file is that long) and the original filename; null when not PDF/DOCX/TXT/MD. */
export function detectMimeType(head: Buffer, filename: string): KbMimeType | null {
  const name = filename.toLowerCase();
  // At the very start only: a text file that mentions "%PDF-" is still text.
  if (head.subarray(0, PDF_MAGIC.length).equals(PDF_MAGIC)) return KB_MIME_TYPES.pdf;
  if (head.subarray(0, 4).equals(ZIP_LOCAL_HEADER)) return isWordZip(head, name) ? KB_MIME_TYPES.docx : null;
  if (isUtf8Text(head)) return /\.(?:md|markdown)$/.test(name) ? KB_MIME_TYPES.md : KB_MIME_TYPES.txt;
  return null;
}

/**
 * A DOCX is a ZIP with a word/ folder. Its local file headers near the start
 * usually name [Content_Types].xml, _rels/ and word/ entries. When the head
 * shows the whole archive (its end record) and no word/ entry, or an entry of
 * another format, it is not one; when the head is inconclusive, the .docx name
 * decides and extraction reports a broken file clearly.
 */
function isWordZip(head: Buffer, name: string): boolean {
  const { names, complete } = zipEntryNames(head);
  if (names.some((entry) => entry.startsWith('word/')) || head.includes(WORD_MAIN_CONTENT_TYPE)) return true;
  if (complete || names.some((entry) => OTHER_ZIP_FORMAT.test(entry))) return false;
  return name.endsWith('.docx');
}

/** Entry names found in the local and central headers inside `head`; complete when the archive's end record is there too. */
function zipEntryNames(head: Buffer): { names: string[]; complete: boolean } {
  const names: string[] = [];
  const collect = (signature: Buffer, nameLengthAt: number, nameAt: number) => {
    for (let at = head.indexOf(signature); at !== -1; at = head.indexOf(signature, at + 4)) {
      if (at + nameAt > head.length) break;
      const length = head.readUInt16LE(at + nameLengthAt);
      if (at + nameAt + length <= head.length) names.push(head.toString('utf8', at + nameAt, at + nameAt + length));
    }
  };
  collect(ZIP_LOCAL_HEADER, 26, 30);
  collect(ZIP_CENTRAL_HEADER, 28, 46);
  return { names, complete: head.includes(ZIP_END_OF_DIRECTORY) };
}

/** UTF-8 without NUL bytes; a multibyte character cut by the end of the head still counts. */
function isUtf8Text(head: Buffer): boolean {
  if (head.includes(0)) return false;
  return isUtf8(head.subarray(0, completeUtf8Length(head)));
}

/** The length of `bytes` without a trailing, incomplete multibyte sequence. */
function completeUtf8Length(bytes: Buffer): number {
  for (let back = 1; back <= Math.min(3, bytes.length); back++) {
    const byte = bytes[bytes.length - back]!;
    if ((byte & 0xc0) === 0x80) continue; // a continuation byte: keep looking for its lead byte
    const needed = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return needed > back ? bytes.length - back : bytes.length;
  }
  return bytes.length;
}

/** Reads the text of a document; throws ExtractionError (message usable as status_error). */
export async function extractText(mime: KbMimeType, bytes: Buffer): Promise<ExtractedPage[]> {
  const pages = await extractByType(mime, bytes);
  if (pages.length === 0) {
    throw new ExtractionError(
      mime === KB_MIME_TYPES.pdf ? 'The PDF has no text to read (scanned pages without a text layer are not supported)' : 'The file contains no text',
    );
  }
  return pages;
}

async function extractByType(mime: KbMimeType, bytes: Buffer): Promise<ExtractedPage[]> {
  switch (mime) {
    case KB_MIME_TYPES.pdf:
      return extractPdf(bytes);
    case KB_MIME_TYPES.docx:
      return singlePage(cleanLines(htmlToText(await docxToHtml(bytes))));
    case KB_MIME_TYPES.txt:
    case KB_MIME_TYPES.md:
      return singlePage(decodeText(bytes));
  }
}

function singlePage(text: string): ExtractedPage[] {
  return text ? [{ pageNumber: null, text }] : [];
}

async function extractPdf(bytes: Buffer): Promise<ExtractedPage[]> {
  let texts: string[];
  try {
    // A copy: PDF.js takes over (detaches) the buffer it is given. verbosity 0: its warnings about odd PDFs are not ours to log.
    const pdf = await getDocumentProxy(new Uint8Array(bytes), { verbosity: 0 });
    try {
      ({ text: texts } = await extractPdfText(pdf, { mergePages: false }));
    } finally {
      await pdf.loadingTask.destroy();
    }
  } catch (error) {
    throw pdfError(error);
  }
  return texts
    .map((text, index) => ({ pageNumber: index + 1, text: cleanLines(text.normalize('NFKC')) }))
    .filter((page) => page.text.length > 0);
}

function pdfError(error: unknown): ExtractionError {
  switch ((error as Error)?.name) {
    case 'PasswordException':
      return new ExtractionError('The PDF is password-protected; upload a copy without a password');
    case 'InvalidPDFException':
      return new ExtractionError('The file is not a readable PDF (it may be damaged or incomplete)');
    default:
      return new ExtractionError(`The PDF could not be read (${(error as Error)?.message ?? 'unknown error'})`);
  }
}

/**
 * convertToHtml rather than extractRawText: the HTML keeps headings (h1-h6)
 * and list items, which become Markdown lines the chunker splits on; raw text
 * flattens every paragraph alike. Images are left out unread.
 */
async function docxToHtml(bytes: Buffer): Promise<string> {
  try {
    const result = await mammoth.convertToHtml({ buffer: bytes }, { convertImage: mammoth.images.imgElement(async () => ({ src: '' })) });
    return result.value;
  } catch {
    throw new ExtractionError('The file could not be read as a Word document (.docx); it may be damaged or password-protected');
  }
}

/** Mammoth's HTML (a small, regular set of tags) as Markdown-flavoured text. */
function htmlToText(html: string): string {
  return decodeEntities(
    html
      // A table row becomes one line of cells; the paragraphs inside a cell run together.
      .replace(/<t[dh]\b[^>]*>([\s\S]*?)<\/t[dh]>/g, (_cell, inner: string) => `${inner.replace(/<[^>]+>/g, ' ').trim()} | `)
      .replace(/ \| <\/tr>/g, '\n')
      .replace(/<h([1-6])\b[^>]*>/g, (_tag, level: string) => `\n\n${'#'.repeat(Number(level))} `)
      .replace(/<li\b[^>]*>/g, '\n- ')
      .replace(/<br\s*\/?>/g, '\n')
      .replace(/<\/(?:h[1-6]|p|ul|ol|table)>/g, '\n\n')
      .replace(/<[^>]+>/g, ''),
  );
}

/** Mammoth escapes only these three in text. */
function decodeEntities(text: string): string {
  return text.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&amp;/g, '&');
}

/** PDF and DOCX text: whitespace collapsed on each line, at most one blank line between paragraphs. */
function cleanLines(text: string): string {
  return text
    .replace(/\r\n?/g, '\n')
    .split('\n')
    .map((line) => line.replace(/\s+/g, ' ').trim())
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

/**
 * TXT and Markdown as written (indentation matters in Markdown), with
 * Windows line ends, trailing spaces, stray control characters and runs of
 * blank lines tidied. The decoder drops a byte-order mark.
 */
function decodeText(bytes: Buffer): string {
  const text = new TextDecoder('utf-8').decode(bytes);
  if (text.includes('\u0000')) throw new ExtractionError('The file contains binary data, not text');
  return (
    text
      .replace(/\r\n?/g, '\n')
      // eslint-disable-next-line no-control-regex -- removing control characters is the point
      .replace(/[\u0001-\u0008\u000b\u000c\u000e-\u001f\u007f]/g, ' ')
      .replace(/[^\S\n]+$/gm, '')
      .replace(/\n{3,}/g, '\n\n')
      .replace(/^\n+|\n+$/g, '')
  );
}
