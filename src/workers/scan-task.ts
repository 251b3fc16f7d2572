// Background-pool tasks (piscina), read from the lmdb environment as a reader beside the fragments'
// writers: one pattern-filtered scan page of one fragment (the main thread fences the fragment
// first, so every write acknowledged before the scan is committed and visible here), the span of
// keys and versions an anti-entropy round compares (src/workers/reconcile-span.ts) — or what the
// round works out from it: a requester's range digests, a responder's answer (src/core/reconciler.ts)
// — or a page of the TTL cleaner's candidates (src/workers/expired-span.ts).

import { parentPort, threadId } from 'node:worker_threads';
import { pino } from 'pino';
import { move } from 'piscina';
import { CLEAN_POOL_PAGE_KEYS, POOL_THREAD_NICE } from '../core/limits.js';
import type { KvStore } from '../native-bindings/kv-store.js';
import { lmdbReaderLocation, openStore } from '../native-bindings/open-store.js';
import { setThreadNice } from '../native-bindings/thread-priority.js';
import type { PoolThreadLoaded, ScanTask, SpanTask } from '../threads/messages.js';
import {
  encodePoolSpanEntries,
  encodePoolSpanRanges,
  encodePoolSpanResult,
  type PoolSpanRequest,
  type PoolSpanResult,
  readPoolSpanRequest,
  type ScanPage,
} from '../threads/op-codec.js';
import { readExpiredSpan } from './expired-span.js';
import { answerSpan, describeSpan, type PageReader } from './reconcile-span.js';
import { collectScanPage } from './scan-page.js';

// Background work yields the cores to the threads serving clients while both want them.
const niceRefused = setThreadNice(POOL_THREAD_NICE);
if (niceRefused !== undefined) {
  pino({ base: { pid: process.pid, component: 'background-pool' } }).info(
    { threadId, nice: POOL_THREAD_NICE, reason: niceRefused },
    'pool thread runs at the default priority',
  );
}

// The imports above loaded lmdb's native addon: from here on the thread may be ended safely.
parentPort?.postMessage({ kind: 'pool-thread-loaded', threadId } satisfies PoolThreadLoaded);

/** One read-only view per pool thread, opened on first use and kept: opening an environment is not free. */
let view: Promise<KvStore> | undefined;
const openedFragments = new Set<number>();

async function storeFor(task: ScanTask | SpanTask, fragment: number): Promise<KvStore> {
  view ??= openStore(lmdbReaderLocation(task.dataDir, task.fragmentCount, task.groupCount));
  const store = await view;
  if (!openedFragments.has(fragment)) {
    await store.openFragment(fragment);
    openedFragments.add(fragment);
  }
  return store;
}

/**
 * A scan page, or a span task's PoolSpanResult record (moved to the main thread, which copies it into
 * the worker's ring as it is).
 */
export default async function poolTask(task: ScanTask | SpanTask): Promise<ScanPage | unknown> {
  // A snapshot per task: the fragment's writer commits between tasks. lmdb-js ends a read snapshot
  // only at the thread's next timer phase, and tasks may come back to back before it: a scan page
  // after a fence must see what the fence waited for (KEYS after FLUSHALL listed deleted keys).
  if (task.kind !== 'span') {
    const store = await storeFor(task, task.request.fragment);
    store.refreshReads();
    return collectScanPage(store, task.request, Date.now());
  }
  const record = task.request;
  const { taskId, request } = readPoolSpanRequest(
    Buffer.from(record.buffer, record.byteOffset, record.byteLength),
    0,
  );
  return move(encodePoolSpanResult(taskId, await spanOf(task, request)));
}

async function spanOf(task: SpanTask, q: PoolSpanRequest): Promise<PoolSpanResult> {
  const store = await storeFor(task, q.fragment);
  store.refreshReads();
  // Both spans look at records' stamps alone (versions, expiry), and only stamps go back.
  const read: PageReader = (start, limit) => store.page(q.fragment, start, undefined, limit, true);
  if (q.expiredAtMs !== undefined) {
    const span = await readExpiredSpan(read, q.afterKey, q.expiredAtMs, CLEAN_POOL_PAGE_KEYS);
    return {
      entries: encodePoolSpanEntries(span.entries),
      truncated: span.truncated,
      expiring: span.expiring,
    };
  }
  const work = q.work;
  if (work === undefined) throw new Error('an anti-entropy span task names its work');
  if (work.kind === 'describe') {
    const { ranges, openEnd } = await describeSpan(read, q.afterKey, q, work.horizonMs);
    return { entries: encodePoolSpanRanges(ranges), truncated: !openEnd };
  }
  const answer = await answerSpan(read, q.afterKey, q, work);
  return {
    entries: encodePoolSpanEntries([...answer.listed, ...answer.tail]),
    truncated: false,
    answer: { listedCount: answer.listed.length, nextAfterKey: answer.nextAfterKey, done: answer.done },
  };
}
