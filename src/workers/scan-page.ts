// One scan page of one fragment, read from a store in key order: live entries matching the
// pattern, until the page is full (entries or bytes), the examined-keys bound is reached, or the
// range ends. Shared by the fragment's worker and the background pool.

import { globMatch } from '../core/glob.js';
import type { PendingEntry } from '../core/pending-writes.js';
import { isLive, stampOf } from '../core/record.js';
import type { KvStore, PageStart, StoredEntry } from '../native-bindings/kv-store.js';
import type { ScanPage, ScanRequest } from '../threads/op-codec.js';

/** Store entries read per call while a page fills (fewer when the page may examine fewer). */
export const STORE_PAGE_KEYS_MAX = 256;

/** What a scan page reads of a store. */
type PageReader = Pick<KvStore, 'page'>;

export async function collectScanPage(
  store: PageReader,
  request: ScanRequest,
  nowMs: number,
): Promise<ScanPage> {
  const page: ScanPage = { done: false, resumeKey: undefined, entries: [] };
  const { pattern, keysOnly, stampsOnly } = request;
  let bytes = 0;
  let examined = 0;
  let start: PageStart | undefined =
    request.start === undefined ? undefined : { key: request.start, inclusive: request.startInclusive };
  for (;;) {
    const want = Math.min(STORE_PAGE_KEYS_MAX, Math.max(1, request.examineLimit - examined));
    const stored = await store.page(request.fragment, start, request.end, want);
    for (const e of stored) {
      if (isLive(e.record, nowMs) && (pattern === undefined || globMatch(pattern, e.key))) {
        const record = keysOnly ? undefined : stampsOnly ? stampOf(e.record) : e.record;
        const size = e.key.length + (record?.length ?? 0);
        // Stop before an entry that would pass the byte bound (unless the page is still empty), so
        // a page always fits one ring record; that entry starts the next page.
        if (page.entries.length > 0 && bytes + size > request.byteLimit) return page;
        page.entries.push({ key: e.key, record });
        bytes += size;
      }
      examined++;
      page.resumeKey = e.key;
      if (page.entries.length >= request.limit) return page;
    }
    if (stored.length < want) {
      page.done = true;
      page.resumeKey = undefined;
      return page;
    }
    if (examined >= request.examineLimit) return page;
    start = { key: page.resumeKey!, inclusive: false };
  }
}

/**
 * `store` with `pending` (a fragment's writes not yet committed, one per key) laid over it: pages in
 * key order, a pending record in place of the stored one. For scans while commits fail.
 */
export function withPending(store: PageReader, pending: readonly PendingEntry[]): PageReader {
  const sorted = pending
    .map(([key, record]): StoredEntry => ({ key: Buffer.from(key), record: Buffer.from(record) }))
    .sort((a, b) => Buffer.compare(a.key, b.key));
  return {
    async page(fragment, start, end, limit) {
      const stored = await store.page(fragment, start, end, limit);
      // A full page ends at its last key; a short one at the range's end.
      const last = stored.length === limit && limit > 0 ? stored[stored.length - 1].key : undefined;
      const beforeStart = (key: Buffer): boolean => {
        if (start === undefined) return false;
        const c = Buffer.compare(key, start.key);
        return c < 0 || (c === 0 && !start.inclusive);
      };
      const beforeEnd = (key: Buffer): boolean =>
        last !== undefined
          ? Buffer.compare(key, last) <= 0
          : end === undefined || Buffer.compare(key, end) < 0;
      let p = 0;
      while (p < sorted.length && beforeStart(sorted[p].key)) p++;
      const merged: StoredEntry[] = [];
      for (const e of stored) {
        for (; p < sorted.length && Buffer.compare(sorted[p].key, e.key) < 0; p++) merged.push(sorted[p]);
        if (p < sorted.length && sorted[p].key.equals(e.key)) merged.push(sorted[p++]);
        else merged.push(e);
      }
      for (; p < sorted.length && beforeEnd(sorted[p].key); p++) merged.push(sorted[p]);
      return merged.slice(0, limit);
    },
  };
}
