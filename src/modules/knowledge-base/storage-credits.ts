/**
 * §8 knowledge-base storage cost: "first 50 MiB free; each additional 50 MiB
 * costs 1 storage credit", read as follows.
 *
 * - A workspace's stored bytes are the sizes of every file in its library
 *   (any status; duplicates are never stored twice).
 * - Blocks needed for B stored bytes: max(0, ceil((B − 50 MiB) / 50 MiB)),
 *   so a started block counts: 50 MiB is free, 50 MiB + 1 byte needs 1 block,
 *   100 MiB needs 1, 100 MiB + 1 byte needs 2.
 * - The workspace keeps a high-water mark of blocks paid for. An upload
 *   charges blocks needed after it minus blocks paid (when positive) and
 *   raises the mark. Deleting files never lowers it: credits are not refunded
 *   (§3), and uploads into room already paid for cost nothing.
 */
export const FREE_STORAGE_BYTES = 50 * 1024 * 1024;
export const STORAGE_BLOCK_BYTES = 50 * 1024 * 1024;

export function blocksNeeded(storedBytes: number): number {
  return Math.max(0, Math.ceil((storedBytes - FREE_STORAGE_BYTES) / STORAGE_BLOCK_BYTES));
}

/** Credits an upload costs, and the paid mark after it. */
export function storageCharge(storedBytesAfterUpload: number, paidBlocks: number): { credits: number; paidBlocks: number } {
  const needed = blocksNeeded(storedBytesAfterUpload);
  return needed > paidBlocks ? { credits: needed - paidBlocks, paidBlocks: needed } : { credits: 0, paidBlocks };
}

export const STORAGE_RULE_DESCRIPTION =
  'Storage credits (§8): the first 50 MiB of a workspace library are free; each started 50 MiB beyond costs 1 credit. ' +
  'An upload charges max(0, ceil((library bytes after the upload − 50 MiB) / 50 MiB)) minus the blocks the workspace has already paid for, when positive (`credits_charged`). ' +
  'Paid blocks are a high-water mark: deleting files refunds nothing and keeps the room paid for, so later uploads into it cost nothing. ' +
  'Identical content already in the library is not stored again and costs nothing. Not enough credits: 402 `insufficient_credits` and nothing is kept.';
