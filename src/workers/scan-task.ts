// Background-pool task (piscina): one pattern-filtered scan page of one fragment, read from the lmdb
// environment as a reader beside the fragment's writer. The main thread fences the fragment first, so
// every write acknowledged before the scan is committed and visible here.

import type { KvStore } from '../native-bindings/kv-store.js';
import { openStore } from '../native-bindings/open-store.js';
import type { ScanPage, ScanRequest } from '../threads/op-codec.js';
import { collectScanPage } from './scan-page.js';

export interface ScanTask {
  dataDir: string;
  fragmentCount: number;
  request: ScanRequest;
}

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

export default async function scanTask(task: ScanTask): Promise<ScanPage> {
  return collectScanPage(await storeFor(task), task.request, Date.now());
}
