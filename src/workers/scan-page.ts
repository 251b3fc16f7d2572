// One scan page of one fragment, read from a store in key order: live entries matching the
// pattern, until the page is full (entries or bytes), the examined-keys bound is reached, or the
// range ends. Shared by the fragment's worker and the background pool.

import { globMatch } from '../core/glob.js';
import { stampOf } from '../core/reconciler.js';
import { isLive } from '../core/record.js';
import type { KvStore, PageStart } from '../native-bindings/kv-store.js';
import type { ScanPage, ScanRequest } from '../threads/op-codec.js';

/** Store entries read per call while a page fills (fewer when the page may examine fewer). */
const STORE_PAGE_KEYS_MAX = 256;

export async function collectScanPage(
  store: KvStore,
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
