// Background-pool task (piscina): one pattern-filtered scan page of one fragment, read from the lmdb
// environment as a reader beside the fragment's writer. The main thread fences the fragment first, so
// every write acknowledged before the scan is committed and visible here.

import { globMatch } from '../core/glob.js';
import { SCAN_EXAMINED_KEYS_MAX } from '../core/limits.js';
import { isLive } from '../core/record.js';
import type { KvStore, PageStart } from '../native-bindings/kv-store.js';
import { openStore } from '../native-bindings/open-store.js';
import type { ScanRequest } from '../threads/op-codec.js';

export interface ScanTask {
  dataDir: string;
  fragmentCount: number;
  request: ScanRequest;
}

export interface ScanTaskResult {
  done: boolean;
  resumeKey: Uint8Array | undefined;
  entries: Array<{ key: Uint8Array; record: Uint8Array | undefined }>;
}

const STORE_PAGE_KEYS = 1024;

/** One read-only view per pool thread, opened on first use and kept: opening an environment is not free. */
let view: Promise<KvStore> | undefined;
const openedFragments = new Set<number>();

async function storeFor(task: ScanTask): Promise<KvStore> {
  view ??= openStore({
    kind: 'lmdb',
    dataDir: task.dataDir,
    fragmentCount: task.fragmentCount,
    levelGroups: [],
    levelGroupCount: 0,
  });
  const store = await view;
  if (!openedFragments.has(task.request.fragment)) {
    await store.openFragment(task.request.fragment);
    openedFragments.add(task.request.fragment);
  }
  return store;
}

export default async function scanTask(task: ScanTask): Promise<ScanTaskResult> {
  const { request } = task;
  const store = await storeFor(task);
  const nowMs = Date.now();
  const entries: ScanTaskResult['entries'] = [];
  const pattern = request.pattern;
  let bytes = 0;
  let examined = 0;
  let resumeKey: Uint8Array | undefined;
  let start: PageStart | undefined = request.start
    ? { key: request.start, inclusive: request.startInclusive }
    : undefined;
  for (;;) {
    const page = await store.page(request.fragment, start, request.end, STORE_PAGE_KEYS);
    for (const e of page) {
      if (isLive(e.record, nowMs) && (pattern === undefined || globMatch(pattern, e.key))) {
        const size = e.key.length + (request.keysOnly ? 0 : e.record.length);
        // Stop before an entry that would pass the byte bound, unless the page is still empty.
        if (entries.length > 0 && bytes + size > request.byteLimit)
          return { done: false, resumeKey, entries };
        entries.push({ key: e.key, record: request.keysOnly ? undefined : e.record });
        bytes += size;
      }
      examined++;
      resumeKey = e.key;
      if (entries.length >= request.limit) return { done: false, resumeKey, entries };
    }
    if (page.length < STORE_PAGE_KEYS) return { done: true, resumeKey: undefined, entries };
    if (examined >= SCAN_EXAMINED_KEYS_MAX) return { done: false, resumeKey, entries };
    start = { key: resumeKey!, inclusive: false };
  }
}
