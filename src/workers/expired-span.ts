// What the TTL cleaner reads in the background pool (lmdb): a page of a fragment's keys after a
// cursor, of which only the records expired at the cleaner's time come back — plus the page's last
// key, for the next page to start after. The fragment's worker then checks each candidate against
// its current record (it may have changed since the pool read it), so nothing else crosses threads.

import { isExpiredValue, isExpiringValue } from '../core/record.js';
import type { PageReader, Span } from './reconcile-span.js';

/**
 * Examines `examine` keys after `afterKey` (undefined: from the first); `truncated` when the page
 * was full, so more keys may follow its last entry; `expiring` when any held a deadline, expired or
 * not (a fragment whose pass finds none is not swept again until one is written).
 */
export async function readExpiredSpan(
  read: PageReader,
  afterKey: Uint8Array | undefined,
  nowMs: number,
  examine: number,
): Promise<Span> {
  const page = await read(afterKey === undefined ? undefined : { key: afterKey, inclusive: false }, examine);
  const last = page.length - 1;
  const entries = page.filter((e, i) => i === last || isExpiredValue(e.record, nowMs));
  return {
    entries,
    truncated: page.length === examine,
    expiring: page.some((e) => isExpiringValue(e.record)),
  };
}
