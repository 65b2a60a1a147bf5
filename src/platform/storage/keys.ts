import { InvalidBlobKeyError } from './blob-store.ts';

/** S3's own limit on key length; keeping every store to it keeps keys portable between backends. */
const MAX_KEY_BYTES = 1024;

/**
 * Backslash is a path separator on Windows; control characters (NUL included)
 * truncate paths and break headers and logs; lone surrogates cannot round-trip
 * through UTF-8, so the stored name would differ from the key.
 */
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const FORBIDDEN_CHARACTERS = /[\u0000-\u001f\u007f\\]|\p{Surrogate}/u;

/**
 * Keys are relative, slash-separated paths. Anything a filesystem or an HTTP
 * path could read as a different location (empty, `.` or `..` segments, a
 * leading slash, the characters above) is rejected rather than normalised, so
 * one key always names exactly one object on every backend.
 */
export function assertValidBlobKey(key: string): void {
  if (
    typeof key !== 'string' ||
    key.length === 0 ||
    Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES ||
    FORBIDDEN_CHARACTERS.test(key)
  ) {
    throw new InvalidBlobKeyError(key);
  }
  // A leading or trailing slash or a doubled one shows up as an empty segment.
  for (const segment of key.split('/')) {
    if (segment === '' || segment === '.' || segment === '..') {
      throw new InvalidBlobKeyError(key);
    }
  }
}

/** The key as a URL path: each segment percent-encoded, the separating slashes kept. */
export function encodeBlobKeyPath(key: string): string {
  return key.split('/').map(encodeURIComponent).join('/');
}
