/**
 * Cuts a text into the sentences the local embedder embeds one by one.
 *
 * Universal Sentence Encoder lite is trained on sentences: one vector for a
 * whole 1,000-character chunk blurs its several topics together, so a
 * question about one of them scores low. Measured on the quality set
 * (test/fixtures/kb-quality/, bench suite kb), semantic search with the mean
 * of a chunk's sentence vectors finds the answer in the top 6 for 0.82 of the
 * questions against 0.75 with the whole chunk's vector (hybrid: 0.91 to 0.93
 * against 0.84); smaller chunks, tried instead, did worse.
 *
 * A sentence ends at . ! ? … or : followed by whitespace (closing quotes and
 * brackets stay with it), at a CJK full stop, and at every line break: a
 * heading, a list item or a FAQ question is a unit of its own. This differs
 * from the chunker's rule (pipeline/chunk.ts), which must not treat a PDF's
 * wrapped line as a boundary; for a mean of vectors a line cut in two
 * costs little.
 */

/** Longer "sentences" (a table, text without punctuation) are cut at a space before this: whole, they would blur topics like a chunk. */
export const MAX_SENTENCE_CHARS = 600;

const SENTENCE_BREAK = /(?<=[.!?…:]["'”’)\]]*)\s+|(?<=[。！？]["'”’)\]]*)|\s*\n\s*/u;
/** Markup and rules ("##", "---", "*") mean nothing on their own. */
const HAS_WORD = /[\p{L}\p{N}]/u;

/**
 * The sentences of `text`, trimmed, each at most `maxChars` long, without
 * those that hold no letter or digit. A text with none of those is cut as
 * one sentence, and an empty text gives [''], so every text gets a vector.
 */
export function sentencesOf(text: string, maxChars = MAX_SENTENCE_CHARS): string[] {
  const worded = text
    .split(SENTENCE_BREAK)
    .map((sentence) => sentence.trim())
    .filter((sentence) => HAS_WORD.test(sentence));
  const sentences = (worded.length > 0 ? worded : [text.trim()]).flatMap((sentence) => cutLong(sentence, maxChars));
  return sentences.length > 0 ? sentences : [''];
}

/** Pieces of at most `maxChars`, cut at the last whitespace in reach, else hard (never inside a surrogate pair). */
function cutLong(sentence: string, maxChars: number): string[] {
  const pieces: string[] = [];
  let rest = sentence;
  while (rest.length > maxChars) {
    // The last whitespace at or before maxChars, so the piece before it fits.
    let cut = rest.slice(0, maxChars + 1).search(/\s\S*$/);
    if (cut <= 0) {
      const code = rest.charCodeAt(maxChars - 1);
      cut = code >= 0xd800 && code <= 0xdbff ? maxChars - 1 : maxChars;
    }
    pieces.push(rest.slice(0, cut).trimEnd());
    rest = rest.slice(cut).trimStart();
  }
  if (rest) pieces.push(rest);
  return pieces;
}

/**
 * Function words: they carry no topic, so a sentence made of them (and a
 * greeting or two) says little about what a query asks. A small English
 * list, like the stop lists full-text engines use.
 */
const STOP_WORDS = new Set(
  (
    'a about above after again against all am an and any are as at be because been before being below between both but by ' +
    'can could did do does doing down during each few for from further had has have having he her here hers herself him ' +
    'himself his how i if in into is it its itself just me might more most must my myself no nor not now of off on once ' +
    'only or other ought our ours ourselves out over own same shall she should so some such than that the their theirs ' +
    'them themselves then there these they this those through to too under until up very was we were what when where ' +
    'which while who whom why will with would you your yours yourself yourselves'
  ).split(' '),
);
const WORD = /[\p{L}\p{N}][\p{L}\p{N}'’-]*/gu;

/** How many words of `sentence` are not function words: what it weighs in a query's vector (local.ts embedQuery). */
export function contentWords(sentence: string): number {
  return (sentence.toLowerCase().match(WORD) ?? []).filter((word) => !STOP_WORDS.has(word)).length;
}
