// A worker's write path driven on the calling thread: request records are encoded into a request
// ring as the main thread would, then the worker's runtime runs one turn over them (copy out of the
// ring, fragment actors, one lmdb transaction on lmdb-js's write thread, replies into the result ring). The modules are loaded
// from a compiled tree given by its root (`.build` of a checkout), so two builds can be driven side
// by side in one process (worker-path-ab.ts).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { recordBytes } from '../src/core/record.js';
import type { KvStore, StoreLocation } from '../src/native-bindings/kv-store.js';
import type { WorkerInit } from '../src/threads/messages.js';

export const WORKER_PATH_FRAGMENTS = 16;
export const WORKER_PATH_KEYS = 100_000;
const RING_BYTES = 1 << 24;
const VALUE = Buffer.alloc(100, 42);
const NODE_ID = Buffer.from('node-bench-1');
/** Event-loop turns a worker turn's replies may take to come back (its commit on lmdb-js's write thread). */
const REPLY_WAIT_TURNS_MAX = 1_000_000;

export interface WorkerPath {
  /**
   * Encodes `batch` writes, runs one worker turn over them and reads the replies, which come once
   * lmdb-js's write thread has committed the turn's transaction; returns the ns from the turn's start
   * to the last reply.
   */
  turn(): Promise<number>;
  /** Fragment of each key, in key order (the keys are `key:%08d`). */
  readonly fragmentOfKey: number[];
  readonly keys: Buffer[];
  close(): Promise<void>;
}

/** The worker path of the build whose compiled tree is at `root`, on a fresh store. */
export async function openWorkerPath(root: string, batch: number): Promise<WorkerPath> {
  const load = (path: string) => import(pathToFileURL(join(root, 'src', path)).href);
  const { Keyspace } = (await load('core/keyspace.js')) as typeof import('../src/core/keyspace.js');
  const limits = (await load('core/limits.js')) as typeof import('../src/core/limits.js');
  const { Durability, OpKind, Priority } = (await load('core/ops.js')) as typeof import('../src/core/ops.js');
  const { writeRecordHeader } = (await load('core/record.js')) as typeof import('../src/core/record.js');
  const { openStore } = (await load(
    'native-bindings/open-store.js',
  )) as typeof import('../src/native-bindings/open-store.js');
  const { FragmentBoard } = (await load(
    'threads/fragment-board.js',
  )) as typeof import('../src/threads/fragment-board.js');
  const codec = (await load('threads/op-codec.js')) as typeof import('../src/threads/op-codec.js');
  const { requestBytes, writeRequestHeader } = codec;
  // A build older than Acks records has no such kind: every record is one reply.
  const acksKind: number = (codec.ResultKind as { Acks?: number }).Acks ?? -1;
  const { createRing, RingReader, RingWriter } = (await load(
    'threads/ring.js',
  )) as typeof import('../src/threads/ring.js');
  const { WorkerRuntime } = (await load(
    'workers/worker-runtime.js',
  )) as typeof import('../src/workers/worker-runtime.js');

  const dir = mkdtempSync(join(tmpdir(), 'tessera-worker-path-'));
  const fragments = Array.from({ length: WORKER_PATH_FRAGMENTS }, (_, f) => f);
  const location: StoreLocation = {
    kind: 'lmdb',
    dataDir: join(dir, 'tessera'),
    fragmentCount: WORKER_PATH_FRAGMENTS,
    groups: [0],
    groupCount: 1,
  };
  const store = await openStore(location);
  const requestRing = createRing(RING_BYTES);
  const resultRing = createRing(RING_BYTES);
  const init: WorkerInit = {
    index: 0,
    requestRing,
    resultRing,
    store: location,
    board: FragmentBoard.create(WORKER_PATH_FRAGMENTS, 1).buffer,
    fragments,
    fragment: {
      valueBytesMax: limits.VALUE_BYTES_MAX_DEFAULT,
      queueOpsMax: limits.QUEUE_OPS_MAX_DEFAULT,
      backgroundOpsPerSec: limits.BACKGROUND_OPS_PER_SEC_DEFAULT,
      flushIntervalMs: limits.FLUSH_INTERVAL_MS_DEFAULT,
      flushWritesMax: limits.FLUSH_PENDING_WRITES_MAX,
      flushBytesMax: limits.FLUSH_PENDING_BYTES_MAX,
    },
    cleanIntervalMs: 3_600_000,
    cleanKeysPerSec: limits.CLEAN_KEYS_PER_SEC_DEFAULT,
    logLevel: 'silent',
    cluster: undefined,
    restarted: false,
  };
  // The turn is private to the runtime: this drives it as the drain loop would. A build from before
  // WorkerRuntime.open (2026-12-03) opened its fragments itself, and took a public constructor.
  type Runtime = { onBatch(): void };
  const runtime = (typeof WorkerRuntime.open === 'function'
    ? await WorkerRuntime.open(init, store)
    : await openOlderRuntime(
        WorkerRuntime as unknown as OlderRuntime,
        init,
        store,
        fragments,
      )) as unknown as Runtime;
  // A build from before requestFlags took priority, durability and two booleans in their place.
  const headerFlags =
    typeof codec.requestFlags === 'function'
      ? codec.requestFlags(Priority.Default, Durability.Store)
      : undefined;
  const writeHeader = (buf: Buffer, at: number, fragment: number, reqId: number, key: Buffer): number =>
    headerFlags !== undefined
      ? writeRequestHeader(buf, at, OpKind.Write, headerFlags, fragment, reqId, key)
      : (writeRequestHeader as unknown as OlderWriteRequestHeader)(
          buf,
          at,
          OpKind.Write,
          Priority.Default,
          Durability.Store,
          false,
          fragment,
          reqId,
          key,
        );
  const requests = new RingWriter(requestRing);
  const results = new RingReader(resultRing);
  const keyspace = new Keyspace(WORKER_PATH_FRAGMENTS);
  const keys = Array.from({ length: WORKER_PATH_KEYS }, (_, i) =>
    Buffer.from(`key:${String(i).padStart(8, '0')}`),
  );
  const fragmentOfKey = keys.map((k) => keyspace.fragmentOf(k));
  let next = 0;
  let wallMs = Date.now();
  let logical = 0;

  const turn = async (): Promise<number> => {
    for (let i = 0; i < batch; i++) {
      const k = next++ % WORKER_PATH_KEYS;
      const at = requests.reserve(requestBytes(keys[k].length, WORKER_PATH_RECORD_BYTES));
      const buf = requests.bytes;
      if (++logical > limits.HLC_LOGICAL_MAX) {
        logical = 0;
        wallMs++;
      }
      let p = writeHeader(buf, at, fragmentOfKey[k], i, keys[k]);
      p = writeRecordHeader(buf, p, false, wallMs, logical, 0, NODE_ID);
      buf.set(VALUE, p);
      requests.commit();
    }
    requests.publish();
    const start = process.hrtime.bigint();
    runtime.onBatch();
    let replies = 0;
    for (let turns = 0; ; turns++) {
      for (let at: number; (at = results.next()) !== -1; ) {
        replies += results.bytes[at] === acksKind ? results.bytes.readUInt32LE(at + 4) : 1;
      }
      results.release();
      if (replies >= batch) break;
      // The replies wait for the commit's promise, settled on this thread's event loop.
      if (turns >= REPLY_WAIT_TURNS_MAX) throw new Error(`${replies} replies to ${batch} writes`);
      await new Promise(setImmediate);
    }
    if (replies !== batch) throw new Error(`${replies} replies to ${batch} writes`);
    return Number(process.hrtime.bigint() - start);
  };

  return {
    turn,
    fragmentOfKey,
    keys,
    close: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Bytes of the record every write of the path carries, for a baseline that stores as much. */
export const WORKER_PATH_RECORD_BYTES = recordBytes(NODE_ID.length, VALUE.length);

/** The worker runtime of a build from before WorkerRuntime.open. */
type OlderRuntime = new (init: WorkerInit, store: KvStore) => unknown;
/** writeRequestHeader of a build from before requestFlags. */
type OlderWriteRequestHeader = (
  buf: Buffer,
  at: number,
  kind: number,
  priority: number,
  durability: number,
  headerOnly: boolean,
  fragment: number,
  reqId: number,
  key: Uint8Array,
) => number;

async function openOlderRuntime(
  Runtime: OlderRuntime,
  init: WorkerInit,
  store: KvStore,
  fragments: number[],
): Promise<unknown> {
  for (const f of fragments) await store.openFragment(f);
  return new Runtime(init, store);
}
