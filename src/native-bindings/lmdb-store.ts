// The LMDB binding (the default store): one environment per node at `<dataDir>/lmdb`, one named
// database per fragment, so a fragment is dropped whole and each worker writes only its own.
//
// Every worker thread of the process calls `openLmdbStore`; lmdb-js keeps one native MDB_env per
// path for the whole process and counts the threads holding it, so the workers share one map, one
// lock table and one write lock, and the env is closed when the last thread closes it (or dies).
//
// Stored key form — LMDB refuses the empty key and ours may be empty:
//
//   0x00 name   fragment metadata; `high-water-wall-ms` holds an 8-byte u64 BE
//   0x01 key    a user key; the value is the record, stored as-is
//
// Fences (kv-store.ts): the env runs with `noSync` + `useWritemap`, so a committed transaction is
// in the shared map (it survives the process dying, DESIGN.md "What we measured"). The stable
// fence of a worker's store is its stable log (stable-log-file.ts): one O_DSYNC append per group,
// with an env fsync only at checkpoints. A store opened without a log (readers, tools) fences with
// an env fsync each time.

import fs from 'node:fs/promises';
import path from 'node:path';
import { type Database, open, type RootDatabase } from 'lmdb';
import { assert } from '../core/assert.js';
import { asStorageError } from '../core/errors.js';
import { FRAGMENT_COUNT_MAX, KEY_BYTES_MAX, WORKER_COUNT_MAX } from '../core/limits.js';
import { fsyncPath } from './fsync-path.js';
import type { FragmentWrites, KvStore, PageStart, StoredEntry, StoreLocation } from './kv-store.js';
import { LmdbFileReserve, reserveBytesFor } from './lmdb-reserve.js';
import {
  checkFragment,
  checkKey,
  checkLocation,
  checkPageArgs,
  checkWrites,
  closedError,
  decodeHighWater,
  encodeHighWater,
} from './open-store.js';
import { replayStableLogs, StableLogFile, type StableLogReplay, stableLogFiles } from './stable-log-file.js';

/** One named database per fragment, plus headroom for LMDB's own and any future side tables. */
const LMDB_DBS_MAX = FRAGMENT_COUNT_MAX + 16;
/**
 * Reader slots of the env's lock table (LMDB's default is 126). Each thread that reads — up to
 * WORKER_COUNT_MAX workers, the main thread, the background pool — holds a read transaction, and a
 * range iterator running across a commit may hold one more.
 */
const LMDB_READERS_MAX = 4 * WORKER_COUNT_MAX;
/**
 * Initial map size. lmdb-js grows the map on demand (doubling what is used), so this only saves
 * early remaps; with `useWritemap` the data file is a sparse file of this size.
 */
const LMDB_MAP_BYTES_INITIAL = 256 * 1024 * 1024;
/** LMDB's own key limit with the default page size (lmdb-js caps keys at it). */
const LMDB_KEY_BYTES_MAX = 1978;
/** Stored keys are one prefix byte plus the user key (plus one more for an exclusive page start). */
const PREFIX_BYTES = 1;
const PREFIX_META = 0x00;
const PREFIX_DATA = 0x01;
/** The stored form of the empty key, the first data key: the default start of a page. */
const DATA_START_KEY = Buffer.from([PREFIX_DATA]);
/** The first key past every data key: the default end of a page. */
const DATA_END_KEY = Buffer.from([PREFIX_DATA + 1]);
const META_HIGH_WATER_KEY = Buffer.concat([
  Buffer.from([PREFIX_META]),
  Buffer.from('high-water-wall-ms', 'latin1'),
]);
const LMDB_DIR = 'lmdb';
/** The env's data file in LMDB_DIR (a backup's only file: the lock file is made at open). */
const LMDB_DATA_FILE = 'data.mdb';

assert(PREFIX_BYTES + KEY_BYTES_MAX + 1 <= LMDB_KEY_BYTES_MAX, 'a prefixed key must fit LMDB');

type FragmentDb = Database<Uint8Array, Uint8Array>;

/** lmdb-js has `sync(callback)` (it calls `env.sync`, an fsync on the libuv pool) but does not type it. */
interface EnvSync {
  sync(callback: (error?: Error | null) => void): void;
}

/** What lmdb-js's `getStats()` reports of a database (mdb_stat). */
interface DbStats {
  pageSize: number;
  treeBranchPageCount: number;
  treeLeafPageCount: number;
  overflowPages: number;
}

/** lmdb-js's native env, under a root database's `env`: `info()` is mdb_env_info of the last commit. */
interface NativeEnv {
  env: { info(): { lastPageNumber: number; mapSize: number } };
}

function pageBytesOf(root: RootDatabase<Uint8Array, Uint8Array>): number {
  return (root.getStats() as DbStats).pageSize;
}

export const fragmentDbName = (fragment: number): string => `fragment-${String(fragment).padStart(5, '0')}`;

export async function openLmdbStore(location: StoreLocation): Promise<KvStore> {
  checkLocation(location);
  try {
    const root = open<Uint8Array, Uint8Array>(path.join(location.dataDir, LMDB_DIR), {
      maxDbs: LMDB_DBS_MAX,
      maxReaders: LMDB_READERS_MAX,
      mapSize: LMDB_MAP_BYTES_INITIAL,
      noSync: true,
      useWritemap: true,
      encoding: 'binary',
      keyEncoding: 'binary',
    });
    const dataFile = path.join(location.dataDir, LMDB_DIR, LMDB_DATA_FILE);
    const reserve = location.reader === true ? undefined : new LmdbFileReserve(dataFile, pageBytesOf(root));
    if (location.stableLog === undefined)
      return new LmdbStore(root, location.fragmentCount, reserve, undefined);
    try {
      const log = await StableLogFile.open(path.join(location.dataDir, LMDB_DIR), location.stableLog);
      return new LmdbStore(root, location.fragmentCount, reserve, log);
    } catch (err) {
      await root.close();
      throw err;
    }
  } catch (err) {
    throw asStorageError(err);
  }
}

/**
 * Replays the stable logs workers left in the node's env (after a crash or power loss) into the
 * store, before any worker opens it. Returns what it found; a fresh directory has nothing to do.
 */
export async function recoverStableLogs(location: StoreLocation): Promise<StableLogReplay> {
  const envDir = path.join(location.dataDir, LMDB_DIR);
  const files = await stableLogFiles(envDir);
  if (files.length === 0) return { files: 0, entries: 0, applied: 0, tornBytes: 0 };
  const store = await openLmdbStore({ ...location, stableLog: undefined });
  try {
    for (let f = 0; f < location.fragmentCount; f++) await store.openFragment(f);
    return await replayStableLogs(envDir, files, store, location.fragmentCount);
  } catch (err) {
    throw asStorageError(err);
  } finally {
    await store.close();
  }
}

class LmdbStore implements KvStore {
  readonly kind = 'lmdb';
  readonly sharesReaders = true;
  readonly durable = true;

  readonly #root: RootDatabase<Uint8Array, Uint8Array>;
  readonly #fragmentCount: number;
  /** Open fragment databases by fragment id; a fragment is used only after `openFragment`. */
  readonly #dbs: Array<FragmentDb | undefined>;
  /** The stored high-water mark per fragment; this store is the fragment's only writer, so it is current. */
  readonly #highWaterWallMs: Float64Array;
  /** One reusable buffer for the prefixed key of a get, put or remove: lmdb-js copies keys at once. */
  readonly #keyScratch = Buffer.allocUnsafe(PREFIX_BYTES + KEY_BYTES_MAX);
  /** Views of the scratch by length, made on first use: a put or get creates no Buffer for its key. */
  readonly #keyViews: Array<Buffer | undefined> = new Array(PREFIX_BYTES + KEY_BYTES_MAX + 1).fill(undefined);
  /** The batch `#applyPending` applies; set just before the transaction, so no closure per commit. */
  #pending: FragmentWrites[] = [];
  readonly #applyPending = (): void => this.#apply(this.#pending);
  /** This worker's stable log; undefined: every stable fence is an env fsync. */
  readonly #log: StableLogFile | undefined;
  /** Disk blocks allocated ahead of the data file's last page before each transaction writes; none for a reader. */
  readonly #reserve: LmdbFileReserve | undefined;
  /** Fences run one after another: a log frame is written at one offset, a checkpoint truncates. */
  #fences: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(
    root: RootDatabase<Uint8Array, Uint8Array>,
    fragmentCount: number,
    reserve: LmdbFileReserve | undefined,
    log: StableLogFile | undefined,
  ) {
    this.#root = root;
    this.#log = log;
    this.#reserve = reserve;
    this.#fragmentCount = fragmentCount;
    this.#dbs = new Array<FragmentDb | undefined>(fragmentCount).fill(undefined);
    this.#highWaterWallMs = new Float64Array(fragmentCount);
  }

  async openFragment(fragment: number): Promise<void> {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    if (this.#dbs[fragment] !== undefined) return;
    try {
      // Opening a named database takes the env's write lock briefly (it may create the database,
      // in a transaction of lmdb-js's own, so a writer reserves its pages here first).
      if (this.#reserve !== undefined) this.#root.transactionSync(() => this.#reserveFor(0, 0));
      const db = this.#root.openDB<Uint8Array, Uint8Array>(fragmentDbName(fragment), {
        encoding: 'binary',
        keyEncoding: 'binary',
      });
      this.#highWaterWallMs[fragment] = decodeHighWater(db.getBinary(META_HIGH_WATER_KEY), fragment);
      this.#dbs[fragment] = db;
    } catch (err) {
      throw asStorageError(err);
    }
  }

  get(fragment: number, key: Uint8Array): Buffer | undefined {
    const db = this.#db(fragment);
    checkKey(key);
    try {
      // lmdb's reused read buffer (or the map itself for large values): no copy per read. Its
      // `length` property is patched to the value's size, but its real extent is the whole scratch
      // buffer, so hand out a view of exactly the value.
      const view = db.getBinaryFast(this.#dataKey(key));
      return view === undefined ? undefined : view.subarray(0, view.length);
    } catch (err) {
      throw asStorageError(err);
    }
  }

  refreshReads(): void {
    this.#checkOpen();
    this.#root.resetReadTxn();
  }

  async page(
    fragment: number,
    start: PageStart | undefined,
    end: Uint8Array | undefined,
    limit: number,
  ): Promise<StoredEntry[]> {
    const db = this.#db(fragment);
    checkPageArgs(start, end, limit);
    const out: StoredEntry[] = [];
    if (limit === 0) return out;
    try {
      const range = db.getRange({
        start: start === undefined ? DATA_START_KEY : dataKeyOf(start.key),
        exclusiveStart: start !== undefined && !start.inclusive,
        end: end === undefined ? DATA_END_KEY : dataKeyOf(end),
        limit,
      });
      // With binary encodings lmdb-js returns keys as fresh Buffer slices and values as fresh Buffer
      // copies, so the caller may keep both. The prefix is dropped with a second copy, not a view: a
      // key that small lives on V8's heap, and a view of it first moves it off (~1 µs against ~0.2).
      for (const { key, value } of range)
        out.push({ key: copySlice.call(key, PREFIX_BYTES) as Buffer, record: value as Buffer });
    } catch (err) {
      throw asStorageError(err);
    }
    return out;
  }

  commit(writes: FragmentWrites[]): void {
    this.#checkOpen();
    checkWrites(writes, this.#fragmentCount);
    for (const w of writes) this.#db(w.fragment);
    this.#pending = writes;
    try {
      this.#root.transactionSync(this.#applyPending);
    } catch (err) {
      throw asStorageError(err);
    } finally {
      this.#pending = [];
    }
    // Only now is the new mark stored; a failed transaction left the old one in place.
    for (const w of writes) {
      if (w.highWaterWallMs > this.#highWaterWallMs[w.fragment])
        this.#highWaterWallMs[w.fragment] = w.highWaterWallMs;
    }
    const log = this.#log;
    // Without a stable fence since the last checkpoint (a `store`-only workload) nothing is recorded.
    if (log === undefined || !log.recording) return;
    for (const w of writes) {
      // The log holds records only; a removal is made stable by the next checkpoint.
      if (w.deletes.length > 0) log.markIncomplete();
      for (const [key, record] of w.puts) log.record(w.fragment, key, record);
    }
  }

  sync(): Promise<void> {
    if (this.#closed) return Promise.reject(closedError('lmdb'));
    const fence = this.#fences.then(this.#fence);
    this.#fences = fence.catch(ignore);
    return fence;
  }

  readonly #fence = async (): Promise<void> => {
    const log = this.#log;
    if (log === undefined) return this.#syncEnv();
    if (!log.needsCheckpoint()) {
      try {
        return await log.flush();
      } catch (err) {
        throw asStorageError(err);
      }
    }
    log.beginCheckpoint();
    try {
      await this.#syncEnv();
    } catch (err) {
      log.markIncomplete();
      throw err;
    }
    try {
      await log.endCheckpoint();
    } catch (err) {
      // The env is synced, so nothing acknowledged depends on the file; it is simply longer.
      throw asStorageError(err);
    }
  };

  #syncEnv(): Promise<void> {
    return new Promise((resolve, reject) => {
      (this.#root as unknown as EnvSync).sync((error) => {
        if (error) reject(asStorageError(error));
        else resolve();
      });
    });
  }

  highWaterWallMs(fragment: number): number {
    this.#db(fragment);
    return this.#highWaterWallMs[fragment];
  }

  async dropFragment(fragment: number): Promise<void> {
    const db = this.#db(fragment);
    const highWater = this.#highWaterWallMs[fragment];
    try {
      // Empty the database but keep it: deleting it would close its DBI handle for every thread of
      // the process (a background reader may hold it). The high-water mark survives the drop: the
      // timestamps it covers were issued, and may live on in other replicas.
      this.#root.transactionSync(() => {
        // The free list takes a page number (8 bytes, twice with its overhead) per page freed.
        const stats = db.getStats() as DbStats;
        const pages = stats.treeBranchPageCount + stats.treeLeafPageCount + stats.overflowPages;
        this.#reserveFor(1, 16 * pages);
        db.clearSync();
        if (highWater > 0) db.putSync(META_HIGH_WATER_KEY, encodeHighWater(highWater));
      });
      // Replaying the log must not bring the dropped records back: the next fence checkpoints.
      this.#log?.markIncomplete();
    } catch (err) {
      throw asStorageError(err);
    }
  }

  async backup(targetDataDir: string): Promise<void> {
    this.#checkOpen();
    const dir = path.join(targetDataDir, LMDB_DIR);
    try {
      await fs.mkdir(dir, { recursive: true });
      // mdb_env_copy2 from a read transaction: a committed state, while writers go on.
      await this.#root.backup(dir, false);
      await fsyncPath(path.join(dir, LMDB_DATA_FILE));
      await fsyncPath(dir);
    } catch (err) {
      throw asStorageError(err);
    }
  }

  /** The data is on disk; its pages in memory are the OS's page cache. */
  memoryBytes(): number {
    return 0;
  }

  /** Data on disk is never evicted. */
  evict(): number {
    return 0;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // A fence in flight finishes first; the log keeps what it holds for the next start's replay.
    await this.#fences;
    await this.#log?.close();
    // Named databases are never closed one by one: mdb_dbi_close would invalidate the handle for
    // every thread sharing the env. Closing the root releases this thread's hold on the env only.
    this.#dbs.fill(undefined);
    try {
      this.#reserve?.close();
      await this.#root.close();
    } catch (err) {
      throw asStorageError(err);
    }
  }

  #apply(writes: FragmentWrites[]): void {
    let ops = 0;
    let recordBytes = 0;
    for (const w of writes) {
      // The high-water mark is one more put.
      ops += w.puts.length + w.deletes.length + 1;
      for (const [, record] of w.puts) recordBytes += record.length;
    }
    this.#reserveFor(ops, recordBytes);
    for (const w of writes) {
      const db = this.#dbs[w.fragment]!;
      // Deletes first, then puts: within one batch a put is the later write (FragmentWrites).
      for (const key of w.deletes) db.removeSync(this.#dataKey(key));
      for (const [key, record] of w.puts) db.putSync(this.#dataKey(key), record);
      if (w.highWaterWallMs > this.#highWaterWallMs[w.fragment]) {
        db.putSync(META_HIGH_WATER_KEY, encodeHighWater(w.highWaterWallMs));
      }
    }
  }

  /** Reserves the file blocks a transaction of `ops` operations storing `recordBytes` may take; inside it. */
  #reserveFor(ops: number, recordBytes: number): void {
    const reserve = this.#reserve;
    assert(reserve !== undefined, 'a reader store does not write');
    const info = (this.#root as unknown as NativeEnv).env.info();
    reserve.ensure(
      info.lastPageNumber + 1,
      reserveBytesFor(ops, recordBytes, reserve.pageBytes),
      info.mapSize,
    );
  }

  /** The prefixed key in the scratch buffer; valid until the next call. */
  #dataKey(key: Uint8Array): Buffer {
    const scratch = this.#keyScratch;
    scratch[0] = PREFIX_DATA;
    scratch.set(key, PREFIX_BYTES);
    const n = PREFIX_BYTES + key.length;
    let view = this.#keyViews[n];
    if (view === undefined) {
      view = scratch.subarray(0, n);
      this.#keyViews[n] = view;
    }
    return view;
  }

  #db(fragment: number): FragmentDb {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    const db = this.#dbs[fragment];
    assert(db !== undefined, 'fragment used before openFragment');
    return db;
  }

  #checkOpen(): void {
    if (this.#closed) throw closedError('lmdb');
  }
}

function ignore(): void {}

/** Uint8Array's own slice, a copy (Buffer's is a view); called on a Buffer it makes a Buffer. */
const copySlice = Uint8Array.prototype.slice;

/** A fresh prefixed key: range bounds are held by the iterator, so they cannot share the scratch. */
function dataKeyOf(key: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES + key.length);
  out[0] = PREFIX_DATA;
  out.set(key, PREFIX_BYTES);
  return out;
}
