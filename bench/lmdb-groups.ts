// Workers committing in parallel: W worker threads each commit batches of puts to their own
// fragments of one LMDB store, for the same time, with the fragments in one environment for all
// (one write lock, one flush chain: the layout before groups) and in one environment per worker
// (the store's layout now, lmdb-store.ts). At `store` each commit is awaited; at `stable` each is
// followed by a sync. Rounds alternate the two layouts; the table gives each layout's median
// round, the ratio per-worker / shared, and the CPU per put of the whole process (every thread).
//
//   npm run build:test && node .build/bench/lmdb-groups.js [workers] [roundMs] [rounds]

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { encodeRecord } from '../src/core/record.js';
import type { StoreLocation } from '../src/native-bindings/kv-store.js';
import { openStore, recoverStore } from '../src/native-bindings/open-store.js';
import { xorshift32 } from '../test/unit/fixtures/xorshift32.js';
import { isMain } from './common.js';

/** Puts per commit: about what a loaded worker's turn commits. */
const BATCH = 64;
const KEYS_PER_WORKER = 50_000;
const FRAGMENTS_PER_WORKER = 4;

type Layout = 'shared' | 'per-worker';
type Level = 'store' | 'stable';

interface WorkerJob {
  location: StoreLocation;
  fragments: number[];
  level: Level;
  runMs: number;
}

interface WorkerDone {
  puts: number;
}

async function workerMain(job: WorkerJob): Promise<void> {
  const store = await openStore(job.location);
  for (const f of job.fragments) await store.openFragment(f);
  const record = encodeRecord(false, 1_800_000_000_000, 0, 0, Buffer.from('n1'), Buffer.alloc(100, 3));
  const keys = Array.from({ length: KEYS_PER_WORKER }, (_, i) =>
    Buffer.from(`key:${String(i).padStart(8, '0')}`),
  );
  const random = xorshift32(0x9e3779b9 ^ job.fragments[0]);
  let puts = 0;
  parentPort!.postMessage('ready');
  await new Promise((resolve) => parentPort!.once('message', resolve));
  const endMs = performance.now() + job.runMs;
  while (performance.now() < endMs) {
    const fragment = job.fragments[puts % job.fragments.length];
    const batch: Array<[Uint8Array, Uint8Array]> = [];
    for (let i = 0; i < BATCH; i++) batch.push([keys[random() % KEYS_PER_WORKER], record]);
    await store.commit([{ fragment, puts: batch, deletes: [], highWaterWallMs: 0 }]);
    if (job.level === 'stable') await store.sync();
    puts += BATCH;
  }
  await store.close();
  parentPort!.postMessage({ puts } satisfies WorkerDone);
}

/** One round: W workers on a fresh store in `layout`; puts per second and CPU µs per put. */
async function round(workers: number, layout: Layout, level: Level, runMs: number) {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-lmdb-groups-'));
  const fragmentCount = workers * FRAGMENTS_PER_WORKER;
  const groupCount = layout === 'shared' ? 1 : workers;
  const base: StoreLocation = { kind: 'lmdb', dataDir: dir, fragmentCount, groups: [], groupCount };
  await recoverStore({ ...base, groups: [] });
  try {
    const threads = Array.from({ length: workers }, (_, w) => {
      const fragments = Array.from({ length: FRAGMENTS_PER_WORKER }, (_, i) => w + i * workers);
      const job: WorkerJob = {
        location: { ...base, groups: layout === 'shared' ? [0] : [w] },
        fragments,
        level,
        runMs,
      };
      return new Worker(new URL(import.meta.url), { workerData: job });
    });
    const next = (t: Worker) =>
      new Promise<unknown>((resolve, reject) => t.once('message', resolve).once('error', reject));
    await Promise.all(threads.map(next));
    const cpu = process.cpuUsage();
    const startedMs = performance.now();
    const done = threads.map(next);
    for (const t of threads) t.postMessage('go');
    const results = (await Promise.all(done)) as WorkerDone[];
    const tookMs = performance.now() - startedMs;
    const used = process.cpuUsage(cpu);
    await Promise.all(threads.map((t) => t.terminate()));
    const puts = results.reduce((n, r) => n + r.puts, 0);
    return { putsPerSec: (puts / tookMs) * 1000, cpuUsPerPut: (used.user + used.system) / puts };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  const workers = Number(process.argv[2] ?? 2);
  const runMs = Number(process.argv[3] ?? 2000);
  const rounds = Number(process.argv[4] ?? 3);
  const lines = [
    `workers: ${workers}, ${BATCH} puts a commit, ${rounds} rounds of ${runMs} ms per layout (alternating)`,
    '',
    '| durability | layout | puts/s (median) | CPU µs/put | per-worker / shared |',
    '|---|---|---:|---:|---:|',
  ];
  for (const level of ['store', 'stable'] as const) {
    const seen: Record<Layout, Array<{ putsPerSec: number; cpuUsPerPut: number }>> = {
      shared: [],
      'per-worker': [],
    };
    for (let r = 0; r < rounds; r++) {
      for (const layout of ['shared', 'per-worker'] as const)
        seen[layout].push(await round(workers, layout, level, runMs));
    }
    const rate = (l: Layout) => median(seen[l].map((s) => s.putsPerSec));
    const cpu = (l: Layout) => median(seen[l].map((s) => s.cpuUsPerPut));
    for (const layout of ['shared', 'per-worker'] as const) {
      const ratio = layout === 'shared' ? '' : `${(rate('per-worker') / rate('shared')).toFixed(2)}×`;
      lines.push(
        `| ${level} | ${layout} | ${Math.round(rate(layout)).toLocaleString('en-US')} | ${cpu(layout).toFixed(1)} | ${ratio} |`,
      );
    }
  }
  console.log(lines.join('\n'));
}

if (!isMainThread) await workerMain(workerData as WorkerJob);
else if (isMain(import.meta.url)) await main();
