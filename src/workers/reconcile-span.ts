// What a responder reads for one anti-entropy page (src/core/reconciler.ts `answerPage`): its keys
// after the requester's cursor through the requester's last range, plus a page beyond it when the
// requester holds nothing further. Runs in the fragment's worker, or in the background pool over a
// read-only lmdb view.

import { RECONCILE_PAGE_ITEMS_MAX } from '../core/limits.js';
import { DIGEST_RANGE_KEYS, RECONCILE_SPAN_KEYS_MAX } from '../core/reconciler.js';
import type { StoredEntry } from '../native-bindings/kv-store.js';

/** Reads a page of a fragment in key order (KvStore.page, bound to its fragment and without an end). */
export type PageReader = (
  start: { key: Uint8Array; inclusive: boolean } | undefined,
  limit: number,
) => Promise<StoredEntry[]>;

/** What bounds a span: the requester's ranges (only the last key matters) and whether it is open. */
export interface SpanQuery {
  ranges: ReadonlyArray<{ lastKey: Uint8Array }>;
  openEnd: boolean;
}

export interface Span {
  /** Keys with their records, or the records' stamps alone (lmdb), in key order. */
  entries: Array<{ key: Buffer; record: Buffer }>;
  /** More keys follow that the span did not take. */
  truncated: boolean;
}

/** A span with no ranges, open-ended: the next page of keys (RECONCILE_PAGE_ITEMS_MAX of them). */
export const NEXT_PAGE: SpanQuery = { ranges: [], openEnd: true };

/** Keys read at a time while a responder reads a span, at most. */
const SPAN_READ_KEYS = 512;

/**
 * The responder's keys for a page: after `afterKey` (undefined: from the first) through the last
 * range's key — or, for an open-ended page, beyond it — at most RECONCILE_SPAN_KEYS_MAX of them.
 */
export async function readSpan(
  read: PageReader,
  afterKey: Uint8Array | undefined,
  q: SpanQuery,
): Promise<Span> {
  const last = q.ranges.length > 0 ? q.ranges[q.ranges.length - 1].lastKey : undefined;
  // Past the requester's last range, an open page lists up to a page of keys; a closed one needs none.
  const extra = q.openEnd ? RECONCILE_PAGE_ITEMS_MAX : 0;
  const entries: Array<{ key: Buffer; record: Buffer }> = [];
  let start = afterKey === undefined ? undefined : { key: afterKey, inclusive: false };
  let beyond = 0;
  // The first read asks for about the keys the requester described (DIGEST_RANGE_KEYS a range, when
  // the replicas agree) and those an open page lists past them, plus one that shows whether more
  // follow: a page of a copy into an empty replica reads RECONCILE_PAGE_ITEMS_MAX + 1 keys.
  let limit = Math.min(SPAN_READ_KEYS, q.ranges.length * DIGEST_RANGE_KEYS + extra + 1);
  for (;;) {
    const page = await read(start, limit);
    for (const e of page) {
      // Past the last range: a closed page is complete; an open one stops after a page of keys,
      // with more to come.
      if ((last === undefined || Buffer.compare(e.key, last) > 0) && ++beyond > extra) {
        return { entries, truncated: q.openEnd };
      }
      if (entries.length === RECONCILE_SPAN_KEYS_MAX) return { entries, truncated: true };
      entries.push(e);
    }
    if (page.length < limit) return { entries, truncated: false };
    start = { key: page[page.length - 1].key, inclusive: false };
    // Past the last range, an open page needs only what it still lists, and one more.
    limit = beyond > 0 || last === undefined ? extra - beyond + 1 : SPAN_READ_KEYS;
  }
}
