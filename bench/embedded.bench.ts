// The embedded API against lmdb used directly in the same process and commit mode (commit without
// fsync: Tessera's `store` durability). Each iteration is a batch of concurrent operations, as a busy
// application issues them, two batches in flight at a time. Three lmdb baselines for writes: its
// idiomatic async `put` (batched by lmdb-js's write thread, resolved at commit) — the goal's
// baseline; `putSync` outside a transaction (a commit per put); and the ceiling — synchronous puts in
// one transaction, no concurrency and no per-operation result at all. Reads
// compare with lmdb's `getBinary` and with its faster reused-buffer read plus a copy of the value,
// which is what a Tessera read does on the main thread when the fragment has nothing uncommitted.
// The put tasks run twice: in calls of BATCHES_PER_CALL batches that each wait for all of theirs
// (an application's bursts: the pipeline fills and drains every call), and sustained — the window
// kept full across calls, each call awaiting the oldest batch and issuing the next (an application
// that never stops writing: throughput without the fill and drain).
// The tasks take turns in ROUNDS rounds and each reports its median round (`runTasks`).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open } from 'lmdb';
import { Tessera } from '../src/main/node.js';
import { type BenchRow, type BenchTask, formatTable, isMain, runTasks } from './common.js';

// The write workload, shared with embedded-ab.ts.
export const BATCH = 1000;
/** Batches per task call, and how many may be in flight at once: a busy application overlaps them. */
export const BATCHES_PER_CALL = 4;
const WINDOW = 2;
export const KEYS = 100_000;
export const VALUE = Buffer.alloc(100, 42);
const ROUNDS = 5;

/** The KEYS keys, `key:%08d`. */
export function benchKeys(): Buffer[] {
  return Array.from({ length: KEYS }, (_, i) => Buffer.from(`key:${String(i).padStart(8, '0')}`));
}

/** Runs BATCHES_PER_CALL batches, WINDOW of them in flight at a time. */
export async function windowed(batch: () => Promise<unknown>): Promise<void> {
  const inFlight: Promise<unknown>[] = [];
  for (let b = 0; b < BATCHES_PER_CALL; b++) {
    if (inFlight.length >= WINDOW) await inFlight.shift();
    inFlight.push(batch());
  }
  await Promise.all(inFlight);
}

/**
 * A task keeping WINDOW batches in flight across its calls: each call waits for the oldest and
 * issues one more. The window is filled before the timed calls and drained after them.
 */
function sustained(name: string, batch: () => Promise<unknown>, baseline?: string): BenchTask {
  const inFlight: Promise<unknown>[] = [];
  return {
    name,
    opsPerCall: BATCH,
    baseline,
    beforeAll: () => {
      while (inFlight.length < WINDOW) inFlight.push(batch());
    },
    fn: async () => {
      await inFlight.shift();
      inFlight.push(batch());
    },
    afterAll: async () => {
      await Promise.all(inFlight.splice(0));
    },
  };
}

export async function embeddedBench(workers = 1): Promise<BenchRow[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-bench-'));
  const keys = benchKeys();
  // The lmdb store's durability (overlapping sync, no write map): lmdb-js's own default on Linux.
  const env = open({ path: join(dir, 'raw'), overlappingSync: true, maxDbs: 4 });
  const raw = env.openDB({ name: 'raw', encoding: 'binary', keyEncoding: 'binary' });
  const node = await Tessera.start({ store: 'lmdb', dataDir: join(dir, 'tessera'), workers, fragments: 16 });
  let n = 0;
  const nextKeys = () => {
    const batch: Buffer[] = [];
    for (let i = 0; i < BATCH; i++) batch.push(keys[n++ % KEYS]);
    return batch;
  };
  // Preload both so reads hit.
  for (let i = 0; i < KEYS; i += BATCH) {
    const batch = keys.slice(i, i + BATCH);
    await Promise.all(batch.map((k) => raw.put(k, VALUE)));
    await Promise.all(batch.map((k) => node.put(k, VALUE)));
  }
  try {
    const workersLabel = `${workers} worker${workers > 1 ? 's' : ''}`;
    return await runTasks(
      'embedded vs lmdb',
      [
        {
          name: 'lmdb put (async, batched by lmdb-js)',
          opsPerCall: BATCH * BATCHES_PER_CALL,
          fn: () => windowed(() => Promise.all(nextKeys().map((k) => raw.put(k, VALUE)))),
        },
        {
          name: 'lmdb putSync, a commit each',
          opsPerCall: BATCH / 10,
          fn: () => {
            const batch = nextKeys();
            for (let i = 0; i < BATCH / 10; i++) raw.putSync(batch[i], VALUE);
          },
        },
        {
          name: 'lmdb putSync in one transaction',
          opsPerCall: BATCH,
          fn: () => {
            const batch = nextKeys();
            raw.transactionSync(() => {
              for (const k of batch) raw.putSync(k, VALUE);
            });
          },
        },
        {
          name: `tessera put @store (${workersLabel})`,
          opsPerCall: BATCH * BATCHES_PER_CALL,
          fn: () => windowed(() => Promise.all(nextKeys().map((k) => node.put(k, VALUE)))),
          baseline: 'lmdb put (async, batched by lmdb-js)',
        },
        sustained('lmdb put (async), sustained', () => Promise.all(nextKeys().map((k) => raw.put(k, VALUE)))),
        sustained(
          `tessera put @store (${workersLabel}), sustained`,
          () => Promise.all(nextKeys().map((k) => node.put(k, VALUE))),
          'lmdb put (async), sustained',
        ),
        {
          name: 'lmdb getBinary',
          opsPerCall: BATCH,
          fn: () => {
            for (const k of nextKeys()) raw.getBinary(k);
          },
        },
        {
          name: 'lmdb getBinaryFast + copy',
          opsPerCall: BATCH,
          fn: () => {
            for (const k of nextKeys()) {
              const v = raw.getBinaryFast(k);
              if (v !== undefined) Buffer.from(v.subarray(0, v.length));
            }
          },
        },
        {
          name: `tessera get (${workersLabel})`,
          opsPerCall: BATCH * BATCHES_PER_CALL,
          fn: () => windowed(() => Promise.all(nextKeys().map((k) => node.get(k)))),
          baseline: 'lmdb getBinaryFast + copy',
        },
      ],
      ROUNDS,
    );
  } finally {
    await node.close();
    await env.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (isMain(import.meta.url)) console.log(formatTable(await embeddedBench(Number(process.argv[2] ?? 1))));
