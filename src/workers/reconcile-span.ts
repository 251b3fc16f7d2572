// What a responder reads for one anti-entropy page (src/core/reconciler.ts `answerPage`): its keys
// after the requester's cursor through the requester's last range, plus a page beyond it when the
// requester holds nothing further. Runs in the fragment's worker, or in the background pool over a
// read-only lmdb view.

import { assert } from '../core/assert.js';
import { RECONCILE_PAGE_ITEMS_MAX } from '../core/limits.js';
import {
  answerPage,
  DIGEST_RANGE_KEYS,
  describePage,
  type PageAnswer,
  type RangeDigest,
  RECONCILE_SPAN_KEYS_MAX,
  rangeKeysIn,
  rangeKeysOf,
  recordsTakenBy,
} from '../core/reconciler.js';
import type { StoredEntry } from '../native-bindings/kv-store.js';

/** Reads a page of a fragment in key order (KvStore.page, bound to its fragment and without an end). */
export type PageReader = (
  start: { key: Uint8Array; inclusive: boolean } | undefined,
  limit: number,
) => Promise<StoredEntry[]>;

/**
 * What bounds a span: the requester's ranges (their number and last key) and whether it is open.
 * With no last key and ranges counted, it is the requester's own next page (`nextPage`): the keys
 * of that many ranges it is to describe.
 */
export interface SpanQuery {
  /** The last key of the requester's last range; undefined when it described none. */
  lastKey: Uint8Array | undefined;
  /** The ranges it described, each of `rangeKeys` of its keys at most. */
  rangeCount: number;
  /** Keys per range (reconciler.ts `rangeKeysOf`). */
  rangeKeys: number;
  openEnd: boolean;
  /**
   * Keys an open page takes past the last range: a page of summaries (RECONCILE_PAGE_ITEMS_MAX),
   * or the records its requester takes in their place (reconciler.ts `recordsTakenBy`).
   */
  tailKeys: number;
}

/** The span a page request asks for. */
export function spanQueryOf(q: {
  ranges: ReadonlyArray<{ lastKey: Uint8Array }>;
  openEnd: boolean;
  recordsMax?: number;
  rangeKeys?: number;
}): SpanQuery {
  const n = q.ranges.length;
  const records = recordsTakenBy(q);
  return {
    lastKey: n > 0 ? q.ranges[n - 1].lastKey : undefined,
    rangeCount: n,
    rangeKeys: rangeKeysIn(q),
    openEnd: q.openEnd,
    tailKeys: records > 0 ? records : RECONCILE_PAGE_ITEMS_MAX,
  };
}

export interface Span {
  /** Keys with their records, or the records' stamps alone (lmdb), in key order. */
  entries: Array<{ key: Buffer; record: Buffer }>;
  /** More keys follow that the span did not take. */
  truncated: boolean;
  /** No key follows the span's last: the store's keys of the fragment ended within it. */
  exhausted?: boolean;
  /** A TTL cleaner's page (expired-span.ts): whether a value with a deadline was among its keys. */
  expiring?: boolean;
}

/** A span with no ranges, open-ended: the next page of keys (RECONCILE_PAGE_ITEMS_MAX of them). */
export const NEXT_PAGE: SpanQuery = {
  lastKey: undefined,
  rangeCount: 0,
  rangeKeys: DIGEST_RANGE_KEYS,
  openEnd: true,
  tailKeys: RECONCILE_PAGE_ITEMS_MAX,
};

/** A requester's next page: its next `keys` keys (whole ranges), truncated when more follow. */
export function nextPage(keys: number): SpanQuery {
  const rangeKeys = rangeKeysOf(keys);
  assert(keys > 0 && keys % rangeKeys === 0, 'a page described is whole ranges');
  return { lastKey: undefined, rangeCount: keys / rangeKeys, rangeKeys, openEnd: true, tailKeys: keys };
}

/** Keys read at a time while a responder reads a span, at most. */
const SPAN_READ_KEYS = 512;

/**
 * The responder's keys for a page: after `afterKey` (undefined: from the first) through the last
 * range's key — or, for an open-ended page, beyond it — at most RECONCILE_SPAN_KEYS_MAX of them.
 *
 * It stops early, truncated, once the ranges hold a page's worth of keys more than the requester
 * described: a range whose digest agrees holds the requester's keys (`rangeKeys` at most),
 * so by then the ranges that differ list a whole page and the answer is cut there anyway. A
 * requester far behind — a copy under writes, holding a prefix and the keys replication brought
 * everywhere after it — describes ranges that span most of the fragment: reading them all for
 * every page read the fragment again per page.
 */
export async function readSpan(
  read: PageReader,
  afterKey: Uint8Array | undefined,
  q: SpanQuery,
): Promise<Span> {
  const last = q.lastKey;
  // Past the requester's last range, an open page takes up to its tail's keys; a closed one needs
  // none. A requester's own next page is all past its (absent) last range.
  const ownPage = last === undefined && q.rangeCount > 0;
  const extra = q.openEnd ? q.tailKeys : 0;
  const described = ownPage ? 0 : q.rangeCount * q.rangeKeys;
  const withinMax = described + RECONCILE_PAGE_ITEMS_MAX;
  const entries: Array<{ key: Buffer; record: Buffer }> = [];
  let start = afterKey === undefined ? undefined : { key: afterKey, inclusive: false };
  let beyond = 0;
  // The first read asks for about the keys the requester described (`rangeKeys` a range, when
  // the replicas agree) and those an open page lists past them, plus one that shows whether more
  // follow: a page of a copy into an empty replica reads its tail's keys and one more.
  let limit = Math.min(SPAN_READ_KEYS, described + extra + 1);
  for (;;) {
    const page = await read(start, limit);
    for (const e of page) {
      // Past the last range: a closed page is complete; an open one stops after a page of keys,
      // with more to come.
      if (last === undefined || Buffer.compare(e.key, last) > 0) {
        if (++beyond > extra) return { entries, truncated: q.openEnd };
      } else if (entries.length === withinMax) {
        return { entries, truncated: true };
      }
      if (entries.length === RECONCILE_SPAN_KEYS_MAX) return { entries, truncated: true };
      entries.push(e);
    }
    if (page.length < limit) return { entries, truncated: false, exhausted: true };
    start = { key: page[page.length - 1].key, inclusive: false };
    // Past the last range, an open page needs only what it still lists, and one more; inside the
    // ranges, the rest of the keys described and one more (replicas that agree hold no other),
    // then, with more keys inside them, what is left to the early stop and past it.
    const goal = entries.length <= described ? described : withinMax;
    limit =
      beyond > 0 || last === undefined
        ? extra - beyond + 1
        : Math.min(SPAN_READ_KEYS, goal - entries.length + extra + 1);
  }
}

/** A requester's page read for `q`, as range digests (reconciler.ts `describePage`). */
export async function describeSpan(
  read: PageReader,
  afterKey: Uint8Array | undefined,
  q: SpanQuery,
  horizonMs: number,
): Promise<{ ranges: RangeDigest[]; openEnd: boolean }> {
  const span = await readSpan(read, afterKey, q);
  return describePage(span.entries, !span.truncated, horizonMs, q.rangeKeys);
}

/** What a responder's page says over the span read for `q` (reconciler.ts `answerPage`). */
export async function answerSpan(
  read: PageReader,
  afterKey: Uint8Array | undefined,
  q: SpanQuery,
  work: { horizonMs: number; recordsMax: number; ranges: readonly RangeDigest[] },
): Promise<PageAnswer> {
  const span = await readSpan(read, afterKey, q);
  const page = {
    afterKey: afterKey ?? NO_KEY,
    ranges: work.ranges,
    openEnd: q.openEnd,
    horizonMs: work.horizonMs,
  };
  return answerPage(page, span.entries, span.truncated, work.recordsMax, span.exhausted === true);
}

const NO_KEY = new Uint8Array(0);
