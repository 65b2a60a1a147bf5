/**
 * Documents for knowledge-base tests, generated in memory: PDFs (pdf-lib),
 * Word files (docx) and plain ZIP archives (which must not pass as Word files).
 */
import { Document, HeadingLevel, Packer, Paragraph } from 'docx';
import { PDFDocument, StandardFonts, type PDFFont } from 'pdf-lib';

const PAGE = { width: 612, height: 792, margin: 54 };
const LARGEST_FONT = 11;
const SMALLEST_FONT = 4;
const LINE_SPACING = 1.25;

/**
 * A PDF with one page per entry, each holding that text (newlines start new
 * lines, long lines are wrapped at word boundaries). The font shrinks until
 * a page's text fits; text that does not fit even then is an error rather
 * than silently cut. Helvetica covers Latin-1 (WinAnsi) characters only.
 */
export async function makePdf(pages: string[]): Promise<Buffer> {
  const pdf = await PDFDocument.create();
  const font = await pdf.embedFont(StandardFonts.Helvetica);
  const usableWidth = PAGE.width - 2 * PAGE.margin;
  const usableHeight = PAGE.height - 2 * PAGE.margin;
  pages.forEach((text, index) => {
    const page = pdf.addPage([PAGE.width, PAGE.height]);
    for (let size = LARGEST_FONT; size >= SMALLEST_FONT; size--) {
      const lines = wrap(text, font, size, usableWidth);
      const leading = size * LINE_SPACING;
      if (lines.length * leading > usableHeight) continue;
      lines.forEach((line, row) => {
        if (line) page.drawText(line, { x: PAGE.margin, y: PAGE.height - PAGE.margin - size - row * leading, size, font });
      });
      return;
    }
    throw new Error(`makePdf: the text of page ${index + 1} does not fit on one page`);
  });
  return Buffer.from(await pdf.save());
}

function wrap(text: string, font: PDFFont, size: number, width: number): string[] {
  const lines: string[] = [];
  for (const paragraph of text.split('\n')) {
    let line = '';
    for (const word of paragraph.split(/\s+/).filter(Boolean)) {
      const candidate = line ? `${line} ${word}` : word;
      if (line && font.widthOfTextAtSize(candidate, size) > width) {
        lines.push(line);
        line = word;
      } else {
        line = candidate;
      }
    }
    lines.push(line);
  }
  return lines;
}

const HEADING_LEVELS = [HeadingLevel.HEADING_1, HeadingLevel.HEADING_2, HeadingLevel.HEADING_3, HeadingLevel.HEADING_4, HeadingLevel.HEADING_5, HeadingLevel.HEADING_6];

/** A Word document: a string is a body paragraph, `{ heading }` a heading (level 1 unless given). */
export async function makeDocx(paragraphs: Array<string | { heading: string; level?: 1 | 2 | 3 | 4 | 5 | 6 }>): Promise<Buffer> {
  const doc = new Document({
    sections: [
      {
        children: paragraphs.map((p) =>
          typeof p === 'string' ? new Paragraph({ text: p }) : new Paragraph({ text: p.heading, heading: HEADING_LEVELS[(p.level ?? 1) - 1] }),
        ),
      },
    ],
  });
  return Packer.toBuffer(doc);
}

/**
 * A ZIP archive of stored (uncompressed) entries, for "a ZIP that is not a
 * Word document" cases. Checksums are left zero: only type detection and
 * extraction failures are tested with it.
 */
export function makeZip(entries: Record<string, string>): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const [name, content] of Object.entries(entries)) {
    const nameBytes = Buffer.from(name, 'utf8');
    const data = Buffer.from(content, 'utf8');
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4); // version needed
    local.writeUInt32LE(data.length, 18); // compressed size
    local.writeUInt32LE(data.length, 22); // uncompressed size
    local.writeUInt16LE(nameBytes.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4); // version made by
    central.writeUInt16LE(20, 6); // version needed
    central.writeUInt32LE(data.length, 20);
    central.writeUInt32LE(data.length, 24);
    central.writeUInt16LE(nameBytes.length, 28);
    central.writeUInt32LE(offset, 42); // where the local header is
    locals.push(local, nameBytes, data);
    centrals.push(central, nameBytes);
    offset += local.length + nameBytes.length + data.length;
  }
  const directory = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(Object.keys(entries).length, 8);
  end.writeUInt16LE(Object.keys(entries).length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, directory, end]);
}
