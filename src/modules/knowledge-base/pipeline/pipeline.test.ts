import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { Document, Packer, Paragraph, Table, TableCell, TableRow } from 'docx';
import { makeDocx, makePdf, makeZip } from '../../../../test/kb-documents.ts';
import { detectMimeType, extractText, ExtractionError, KB_MIME_TYPES, type ExtractedPage } from './parse.ts';
import { chunkPages, type TextChunk } from './chunk.ts';

const HEAD_BYTES = 8192;
const head = (bytes: Buffer) => bytes.subarray(0, HEAD_BYTES);
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** `count` distinct sentences of about 60 characters, numbered so each can be found again. */
function sentences(count: number, topic = 'refunds'): string[] {
  return Array.from({ length: count }, (_, i) => `Sentence ${i} explains how ${topic} work for customer ${i * 7}.`);
}

/** Paragraphs of `perParagraph` sentences, separated by blank lines. */
function paragraphs(all: string[], perParagraph: number): string {
  const out: string[] = [];
  for (let i = 0; i < all.length; i += perParagraph) out.push(all.slice(i, i + perParagraph).join(' '));
  return out.join('\n\n');
}

/**
 * Where each chunk lies in `text`, in order; fails when a chunk is not a
 * piece of the text or when text between two chunks is skipped.
 */
function assertCoversInOrder(text: string, chunks: readonly string[]): void {
  let searchFrom = 0;
  let coveredTo = 0;
  for (const chunk of chunks) {
    const at = text.indexOf(chunk, searchFrom);
    assert.notEqual(at, -1, `chunk not found in order: ${chunk.slice(0, 60)}`);
    assert.equal(text.slice(coveredTo, at).trim(), '', `text skipped before: ${chunk.slice(0, 60)}`);
    searchFrom = at + 1;
    coveredTo = Math.max(coveredTo, at + chunk.length);
  }
  assert.equal(text.slice(coveredTo).trim(), '', 'text skipped at the end');
}

const contents = (chunks: TextChunk[]) => chunks.map((c) => c.content);

describe('detectMimeType', () => {
  test('a PDF is recognised by its bytes, whatever its name', async () => {
    const pdf = await makePdf(['Hello']);
    assert.equal(detectMimeType(head(pdf), 'report.pdf'), KB_MIME_TYPES.pdf);
    assert.equal(detectMimeType(head(pdf), 'upload.bin'), KB_MIME_TYPES.pdf);
  });

  test('a Word document is recognised by its ZIP entries, whatever its name', async () => {
    const docx = await makeDocx(['Hello']);
    assert.equal(detectMimeType(head(docx), 'letter.docx'), KB_MIME_TYPES.docx);
    assert.equal(detectMimeType(head(docx), 'letter'), KB_MIME_TYPES.docx);
  });

  test('UTF-8 text is Markdown by a .md or .markdown name, plain text otherwise', () => {
    const text = Buffer.from('# Title\n\nCafé prices in € and 日本語.\n');
    assert.equal(detectMimeType(text, 'notes.md'), KB_MIME_TYPES.md);
    assert.equal(detectMimeType(text, 'NOTES.MARKDOWN'), KB_MIME_TYPES.md);
    assert.equal(detectMimeType(text, 'notes.txt'), KB_MIME_TYPES.txt);
    assert.equal(detectMimeType(text, 'notes'), KB_MIME_TYPES.txt);
    assert.equal(detectMimeType(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), text]), 'bom.txt'), KB_MIME_TYPES.txt);
  });

  test('text whose head ends inside a multibyte character is still text', () => {
    const euro = Buffer.from('price: €€€€');
    for (let cut = 1; cut <= 2; cut++) assert.equal(detectMimeType(euro.subarray(0, euro.length - cut), 'a.txt'), KB_MIME_TYPES.txt);
  });

  test('text that mentions %PDF- after its start is text', () => {
    assert.equal(detectMimeType(Buffer.from('Every PDF starts with %PDF-1.7.'), 'pdf-notes.md'), KB_MIME_TYPES.md);
  });

  test('images, random bytes, other ZIPs and binary text files are rejected', () => {
    const png = Buffer.concat([PNG_SIGNATURE, crypto.randomBytes(2000)]);
    assert.equal(detectMimeType(png, 'photo.png'), null);
    assert.equal(detectMimeType(png, 'photo.txt'), null);
    assert.equal(detectMimeType(crypto.randomBytes(HEAD_BYTES), 'data.txt'), null);
    assert.equal(detectMimeType(Buffer.concat([Buffer.from('MZ'), crypto.randomBytes(500)]), 'setup.exe'), null);
    assert.equal(detectMimeType(Buffer.from('# Title\n\0\0\0binary'), 'notes.md'), null);
    assert.equal(detectMimeType(Buffer.from('caf\xe9 au lait', 'latin1'), 'latin1.txt'), null);
    const zip = makeZip({ 'readme.txt': 'hello' });
    assert.equal(detectMimeType(zip, 'archive.zip'), null);
    // The whole archive is in the head and has no word/ folder: the name does not make it a Word file.
    assert.equal(detectMimeType(zip, 'archive.docx'), null);
    assert.equal(detectMimeType(makeZip({ '[Content_Types].xml': '<Types/>', 'xl/workbook.xml': '<workbook/>' }), 'sheet.docx'), null);
  });

  test('a ZIP whose head names no entries beyond [Content_Types].xml is a Word file only by a .docx name', () => {
    const zip = makeZip({ '[Content_Types].xml': `<Types>${'x'.repeat(HEAD_BYTES)}</Types>`, 'word/document.xml': '<w:document/>' });
    assert.equal(detectMimeType(head(zip), 'letter.docx'), KB_MIME_TYPES.docx);
    assert.equal(detectMimeType(head(zip), 'archive.zip'), null);
  });
});

describe('extractText', () => {
  test('a PDF gives one entry per page, numbered from 1', async () => {
    const pdf = await makePdf(['The first page is about onboarding.', 'Refunds are accepted within thirty days of purchase.']);
    const pages = await extractText(KB_MIME_TYPES.pdf, pdf);
    assert.deepEqual(pages, [
      { pageNumber: 1, text: 'The first page is about onboarding.' },
      { pageNumber: 2, text: 'Refunds are accepted within thirty days of purchase.' },
    ]);
    const refund = chunkPages(pages).find((chunk) => chunk.content.includes('thirty days'));
    assert.equal(refund?.pageNumber, 2);
  });

  test('empty PDF pages are left out and the others keep their numbers', async () => {
    const pages = await extractText(KB_MIME_TYPES.pdf, await makePdf(['One.', '', 'Three.']));
    assert.deepEqual(pages.map((p) => p.pageNumber), [1, 3]);
  });

  test('PDF lines are tidied but keep their line breaks', async () => {
    const [page] = await extractText(KB_MIME_TYPES.pdf, await makePdf(['First   line\twith  gaps\nSecond line']));
    assert.equal(page?.text, 'First line with gaps\nSecond line');
  });

  test('a Word document keeps its headings as Markdown lines', async () => {
    const docx = await makeDocx([
      { heading: 'Refund policy' },
      'Refunds are accepted within 30 days & need a receipt <original>.',
      { heading: 'Shipping', level: 2 },
      'Orders ship in two days.',
    ]);
    const pages = await extractText(KB_MIME_TYPES.docx, docx);
    assert.deepEqual(pages, [
      {
        pageNumber: null,
        text: '# Refund policy\n\nRefunds are accepted within 30 days & need a receipt <original>.\n\n## Shipping\n\nOrders ship in two days.',
      },
    ]);
  });

  test('Word lists and tables keep their structure as lines', async () => {
    const cell = (text: string) => new TableCell({ children: [new Paragraph(text)] });
    const doc = new Document({
      sections: [
        {
          children: [
            new Paragraph({ text: 'Item one', bullet: { level: 0 } }),
            new Paragraph({ text: 'Item two', bullet: { level: 0 } }),
            new Table({ rows: [new TableRow({ children: [cell('Plan'), cell('Price')] }), new TableRow({ children: [cell('Pro'), cell('$10')] })] }),
          ],
        },
      ],
    });
    const pages = await extractText(KB_MIME_TYPES.docx, await Packer.toBuffer(doc));
    assert.deepEqual(pages, [{ pageNumber: null, text: '- Item one\n- Item two\n\nPlan | Price\nPro | $10' }]);
  });

  test('text and Markdown are decoded as UTF-8 without a byte-order mark or Windows line ends', async () => {
    const bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('Line one  \r\nLine two €\r\n\r\n\r\n\r\nLast\r\n')]);
    assert.deepEqual(await extractText(KB_MIME_TYPES.txt, bytes), [{ pageNumber: null, text: 'Line one\nLine two €\n\nLast' }]);
    assert.deepEqual(await extractText(KB_MIME_TYPES.md, Buffer.from('# T\n\n    indented code\n')), [{ pageNumber: null, text: '# T\n\n    indented code' }]);
  });

  test('unreadable files fail with a message for the user', async () => {
    const failures: Array<[string, Promise<ExtractedPage[]>, RegExp]> = [
      ['broken PDF', extractText(KB_MIME_TYPES.pdf, Buffer.from('%PDF-1.7\nnot really a pdf')), /not a readable PDF/],
      ['ZIP that is not a Word file', extractText(KB_MIME_TYPES.docx, makeZip({ 'a.txt': 'hi' })), /Word document/],
      ['random bytes as a Word file', extractText(KB_MIME_TYPES.docx, crypto.randomBytes(1000)), /Word document/],
      ['empty text file', extractText(KB_MIME_TYPES.txt, Buffer.from('  \n\n ')), /no text/],
      ['PDF without text', extractText(KB_MIME_TYPES.pdf, await makePdf(['', ''])), /no text/],
      ['binary tail in a text file', extractText(KB_MIME_TYPES.txt, Buffer.from('text\0binary')), /binary/],
    ];
    for (const [what, extraction, message] of failures) {
      await assert.rejects(extraction, (error: unknown) => error instanceof ExtractionError && message.test(error.message), what);
    }
  });
});

describe('chunkPages', () => {
  const TARGET_CHARS = 300 * 4;
  const OVERLAP_CHARS = 45 * 4;

  test('a long paragraph becomes chunks of at most the target, ending at sentence ends, with overlap', () => {
    const text = sentences(400).join(' ');
    const chunks = chunkPages([{ pageNumber: null, text }]);
    assert.ok(chunks.length > 10);
    for (const chunk of chunks) {
      assert.ok(chunk.content.length <= TARGET_CHARS, `chunk ${chunk.chunkIndex} has ${chunk.content.length} characters`);
      // Half the target at least, except the last one.
      if (chunk.chunkIndex < chunks.length - 1) assert.ok(chunk.content.length >= TARGET_CHARS / 2);
      assert.match(chunk.content, /^Sentence \d+ /);
      assert.match(chunk.content, /\.$/);
    }
    for (let i = 1; i < chunks.length; i++) {
      const previous = chunks[i - 1]!.content;
      const firstSentence = chunks[i]!.content.match(/^Sentence \d+ [^.]*\./)![0];
      // Overlap: the chunk starts with a sentence the previous one ends with, within the overlap budget.
      const repeated = previous.lastIndexOf(firstSentence);
      assert.ok(repeated !== -1 && previous.length - repeated <= OVERLAP_CHARS, `chunk ${i} does not overlap the previous one`);
    }
    assertCoversInOrder(text, contents(chunks));
  });

  test('line breaks inside a paragraph (where a PDF wrapped its lines) rank below sentence ends', () => {
    const wrapped = sentences(200)
      .join(' ')
      .replace(/(.{80,100}?) /g, '$1\n');
    const chunks = chunkPages([{ pageNumber: 1, text: wrapped }]);
    for (const chunk of chunks) assert.match(chunk.content, /\.$/);
    assertCoversInOrder(wrapped, contents(chunks));
  });

  test('chunk indexes are zero-based and dense across pages, and no chunk crosses a page', () => {
    const pages: ExtractedPage[] = [1, 2, 3].map((n) => ({ pageNumber: n, text: sentences(50, `page-${n} topics`).join(' ') }));
    const chunks = chunkPages(pages);
    assert.deepEqual(chunks.map((c) => c.chunkIndex), chunks.map((_, i) => i));
    for (const chunk of chunks) {
      const page = pages.find((p) => p.pageNumber === chunk.pageNumber)!;
      assert.ok(page.text.includes(chunk.content), `chunk ${chunk.chunkIndex} is not a piece of page ${chunk.pageNumber}`);
    }
    for (const page of pages) assertCoversInOrder(page.text, contents(chunks.filter((c) => c.pageNumber === page.pageNumber)));
  });

  test('a heading is where a chunk ends, and chunks inside a section repeat its heading', () => {
    const first = sentences(8, 'refunds').join(' ');
    const second = sentences(40, 'shipping').join(' ');
    const text = `# Refunds\n\n${first}\n\n## Shipping\n\n${second}`;
    const chunks = contents(chunkPages([{ pageNumber: null, text }]));
    assert.equal(chunks[0], `# Refunds\n\n${first}`);
    assert.ok(chunks[1]!.startsWith('## Shipping\n\nSentence 0 '));
    for (const chunk of chunks.slice(2)) assert.match(chunk, /^## Shipping\n\nSentence \d+ explains how shipping/);
    // Without their prefix, the chunks still cover the text in order.
    assertCoversInOrder(text, chunks.map((c, i) => (i >= 2 ? c.slice('## Shipping\n\n'.length) : c)));
  });

  test('paragraph ends are preferred to sentence ends, and a new paragraph starts without overlap', () => {
    // Paragraphs of about 700 characters: two do not fit in a chunk, so each chunk is one paragraph.
    const text = paragraphs(sentences(60), 12);
    const paragraphsOfText = text.split('\n\n');
    assert.deepEqual(contents(chunkPages([{ pageNumber: null, text }])), paragraphsOfText);
  });

  test('lines starting with # inside a code block are not headings', () => {
    const code = Array.from({ length: 30 }, (_, i) => `# comment ${i}\nvalue_${i} = compute(${i})`).join('\n');
    const text = `# Setup\n\n\`\`\`sh\n${code}\n\`\`\``;
    for (const chunk of chunkPages([{ pageNumber: null, text }], { targetTokens: 60, overlapTokens: 0 }).slice(1)) {
      assert.match(chunk.content, /^# Setup\n\n/);
    }
  });

  test('text without any break is cut at the target, never inside a character', () => {
    const word = 'x'.repeat(TARGET_CHARS * 2 + 100);
    assert.deepEqual(contents(chunkPages([{ pageNumber: null, text: word }])), [word.slice(0, TARGET_CHARS), word.slice(TARGET_CHARS, 2 * TARGET_CHARS), word.slice(2 * TARGET_CHARS)]);
    const emoji = '😀'.repeat(1000) + 'x';
    const chunks = contents(chunkPages([{ pageNumber: null, text: emoji }], { targetTokens: 25, overlapTokens: 0 }));
    const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
    for (const chunk of chunks) assert.ok(!loneSurrogate.test(chunk));
    assert.equal(chunks.join(''), emoji);
  });

  test('options set the size and the overlap; bad ones are refused', () => {
    const text = sentences(100).join(' ');
    const small = chunkPages([{ pageNumber: 1, text }], { targetTokens: 50, overlapTokens: 0 });
    for (const chunk of small) assert.ok(chunk.content.length <= 200);
    assertCoversInOrder(text, contents(small));
    // No overlap: the chunks put back together are the text.
    assert.equal(contents(small).join(' '), text);
    assert.throws(() => chunkPages([], { targetTokens: 0 }), RangeError);
    assert.throws(() => chunkPages([], { targetTokens: 100, overlapTokens: 100 }), RangeError);
  });

  test('blank pages give no chunks and the output is deterministic', () => {
    assert.deepEqual(chunkPages([{ pageNumber: 1, text: '' }, { pageNumber: 2, text: ' \n\n ' }]), []);
    const pages: ExtractedPage[] = [{ pageNumber: null, text: paragraphs(sentences(200), 7) }];
    assert.deepEqual(chunkPages(pages), chunkPages(pages));
  });

  test('a 1 MB text is chunked completely', () => {
    const text = paragraphs(sentences(17_000, 'long documents'), 9);
    assert.ok(text.length > 1_000_000);
    const chunks = chunkPages([{ pageNumber: null, text }]);
    for (const chunk of chunks) assert.ok(chunk.content.length <= TARGET_CHARS);
    assertCoversInOrder(text, contents(chunks));
  });
});
