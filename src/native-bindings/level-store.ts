// The LevelDB binding (classic-level). LevelDB allows one owner per database, so the node's
// fragments are spread over `groupCount` databases ("groups", bound at first start) at
// `<dataDir>/level/group-<g>`; fragment f lives in group f % groupCount, and each worker
// opens the groups it owns (`location.groups`).
//
// Stored key form, so a group's fragments are disjoint, ordered ranges:
//
//   [fragment u16 BE][0x00][name]   fragment metadata; `high-water-wall-ms` holds an 8-byte u64 BE
//   [fragment u16 BE][0x01][key]    a user key; the value is the record, stored as-is
//
// Fences (kv-store.ts): a batch written with `sync: false` is in LevelDB's log, which survives the
// process dying (committed); `sync()` writes a `sync: true` batch, fsyncing the log (stable).
//
// A worker that dies without closing its databases does not keep them locked: classic-level closes
// every database of a thread in the thread's environment-cleanup hook, which runs when a worker
// thread exits for any reason, so a restarted worker can reopen them.

import fs from 'node:fs/promises';
import path from 'node:path';
import { type ChainedBatch, ClassicLevel, type Iterator } from 'classic-level';
import { assert } from '../core/assert.js';
import { asBuffer } from '../core/bytes.js';
import { asStorageError, storageError } from '../core/errors.js';
import { FRAGMENT_COUNT_MAX, KEY_BYTES_MAX } from '../core/limits.js';
import { fsyncDirectoryFiles, fsyncPath, renameIntoPlaceDurably } from './fsync-path.js';
import {
  DAMAGED_STORE_REMEDY,
  type FragmentSize,
  type FragmentWrites,
  type KvStore,
  type PageStart,
  type StoredEntry,
  type StoreLocation,
} from './kv-store.js';
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

const FRAGMENT_BYTES = 2;
const PREFIX_BYTES = FRAGMENT_BYTES + 1;
const TAG_META = 0x00;
const TAG_DATA = 0x01;
const META_HIGH_WATER_NAME = Buffer.from('high-water-wall-ms', 'latin1');
/**
 * The key `sync()` deletes with `sync: true`: deleting a key that is never written still appends a
 * log record, and so fsyncs the log. Fragment 0xffff does not exist, so it is in no fragment's range.
 */
const SYNC_MARKER_KEY = Buffer.from([0xff, 0xff, TAG_META]);
const LEVEL_DIR = 'level';
/** Entries a backup reads and writes per step. */
const BACKUP_BATCH_ENTRIES = 1000;
/**
 * Free bytes a failed group's file system needs before the group is reopened: opening turns the log
 * into a table (up to LevelDB's 4 MiB write buffer) and starts a new log and manifest.
 */
const LEVEL_REOPEN_FREE_BYTES_MIN = 16 * 1024 * 1024;
/** Where a group's new database is made before it is renamed into place (`createGroupDurably`). */
const LEVEL_NEW_GROUP_SUFFIX = '.new';
/**
 * Entries `fragmentSize` reads from a fragment's start: all of a fragment this small, which is then
 * counted exactly, and otherwise the sample its average entry comes from.
 */
const LEVEL_SIZE_SAMPLE_ENTRIES = 256;
/** LevelDB names its write-ahead logs `<number>.log`; rotated ones wait there for compaction. */
const LOG_FILE_PATTERN = /^\d+\.log$/;

assert(FRAGMENT_COUNT_MAX < 0xffff, 'fragment ids must fit the u16 key prefix, below the sync marker');

type LevelDb = ClassicLevel<Buffer, Buffer>;
type LevelIterator = Iterator<LevelDb, Buffer, Buffer>;
/**
 * A commit's writes to one group. A chained batch copies each key and value into LevelDB's write
 * batch as it is added, so the caller's buffers (and the key scratch) are free at once; an array
 * batch cost 4–6× as much per write (abstract-level clones each operation object, and that clone's
 * map changes from call to call).
 */
type LevelBatch = ChainedBatch<LevelDb, Buffer, Buffer>;
/** A commit is in LevelDB's log, not fsynced: `committed` (see Fences above). */
const COMMIT_WRITE_OPTIONS = { sync: false } as const;

interface Group {
  readonly dir: string;
  readonly db: LevelDb;
  /**
   * The last write issued to this group. Writes are chained so they reach LevelDB in call order:
   * classic-level runs each batch on the libuv pool, where two batches in flight may swap.
   */
  tail: Promise<void>;
  /**
   * A write failed. LevelDB keeps the first failed write's error and fails every later one with
   * it (a full disk stays an error after space is freed), so the group is reopened, once its file
   * system has room, before it is written again.
   */
  failed: boolean;
}

export const levelGroupDir = (dataDir: string, group: number): string =>
  path.join(dataDir, LEVEL_DIR, `group-${group}`);

export async function openLevelStore(location: StoreLocation): Promise<KvStore> {
  checkLocation(location);
  const groupCount = location.groupCount;
  assert(Number.isInteger(groupCount) && groupCount >= 1, 'level group count must be at least 1');
  assert(groupCount <= location.fragmentCount, 'more level groups than fragments');
  for (const g of location.groups) {
    assert(Number.isInteger(g) && g >= 0 && g < groupCount, 'level group out of range');
  }
  const groups = new Map<number, Group>();
  try {
    await fs.mkdir(path.join(location.dataDir, LEVEL_DIR), { recursive: true });
    // The directory's name must outlive a power loss before a database is created in it.
    await fsyncPath(location.dataDir);
    for (const g of location.groups) groups.set(g, await openGroup(location.dataDir, g));
  } catch (err) {
    await Promise.allSettled([...groups.values()].map((group) => group.db.close()));
    throw asStorageError(err);
  }
  return new LevelStore(groups, groupCount, location.fragmentCount);
}

async function openGroup(dataDir: string, g: number): Promise<Group> {
  const dir = levelGroupDir(dataDir, g);
  await createGroupDurably(dir);
  const db: LevelDb = new ClassicLevel<Buffer, Buffer>(dir, {
    keyEncoding: 'buffer',
    valueEncoding: 'buffer',
  });
  try {
    await db.open();
  } catch (err) {
    if (isLockedError(err)) {
      throw storageError(
        `LevelDB group ${g} at ${dir} is locked: another process (or a live worker) has it open`,
      );
    }
    throw storageError(
      `LevelDB group ${g} at ${dir} cannot be opened (${causesOf(err)}); if it is damaged, ${DAMAGED_STORE_REMEDY}`,
    );
  }
  return { dir, db, tail: Promise.resolve(), failed: false };
}

/**
 * Creates a group's database, if it has none, so that a power loss cannot leave it unopenable.
 * The LevelDB that classic-level bundles writes a new database's first MANIFEST without syncing it
 * before CURRENT names it (later LevelDB releases sync it), and the power-loss simulator found the
 * crash state that follows: CURRENT naming an empty MANIFEST, which LevelDB refuses to open. So a
 * new database is made under a temporary name, closed, its files and directory synced, and only
 * then renamed into place; a temporary left by a crash held nothing and is made again.
 */
async function createGroupDurably(dir: string): Promise<void> {
  try {
    await fs.access(dir);
    return;
  } catch {
    // No database yet.
  }
  const fresh = `${dir}${LEVEL_NEW_GROUP_SUFFIX}`;
  await fs.rm(fresh, { recursive: true, force: true });
  const db: LevelDb = new ClassicLevel<Buffer, Buffer>(fresh, { errorIfExists: true });
  await db.open();
  await db.close();
  await renameIntoPlaceDurably(fresh, dir);
}

/** An error and its causes' messages: classic-level wraps LevelDB's own ("Corruption: …") as a cause. */
function causesOf(err: unknown): string {
  const messages: string[] = [];
  for (let e: unknown = err; e instanceof Error; e = e.cause) messages.push(e.message);
  return messages.length > 0 ? messages.join(': ') : String(err);
}

/** classic-level reports a held LOCK with code LEVEL_LOCKED, as the cause of LEVEL_DATABASE_NOT_OPEN. */
function isLockedError(err: unknown): boolean {
  for (let e: unknown = err; e instanceof Error; e = e.cause) {
    if ((e as Error & { code?: unknown }).code === 'LEVEL_LOCKED') return true;
  }
  return false;
}

class LevelStore implements KvStore {
  readonly kind = 'level';
  readonly sharesReaders = false;
  readonly durable = true;
  /** LevelDB's own log makes each commit survive the process dying: no log of ours. */
  readonly logsWrites = false;

  readonly #groups: Map<number, Group>;
  readonly #groupCount: number;
  readonly #fragmentCount: number;
  /** Open fragments' groups by fragment id; a fragment is used only after `openFragment`. */
  readonly #fragmentGroups: Array<Group | undefined>;
  /** The high-water mark per fragment as of the last write issued (writes reach LevelDB in order). */
  readonly #highWaterWallMs: Float64Array;
  /** Reusable key for `getSync`, which reads it synchronously; batches get their own keys. */
  readonly #keyScratch = Buffer.allocUnsafe(PREFIX_BYTES + KEY_BYTES_MAX);
  #closed = false;

  constructor(groups: Map<number, Group>, groupCount: number, fragmentCount: number) {
    this.#groups = groups;
    this.#groupCount = groupCount;
    this.#fragmentCount = fragmentCount;
    this.#fragmentGroups = new Array<Group | undefined>(fragmentCount).fill(undefined);
    this.#highWaterWallMs = new Float64Array(fragmentCount);
  }

  async openFragment(fragment: number): Promise<void> {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    if (this.#fragmentGroups[fragment] !== undefined) return;
    const group = this.#groups.get(fragment % this.#groupCount);
    assert(group !== undefined, 'fragment opened by a worker that does not own its level group');
    this.#highWaterWallMs[fragment] = this.#readHighWater(group, fragment);
    this.#fragmentGroups[fragment] = group;
  }

  get(fragment: number, key: Uint8Array): Buffer | undefined {
    const group = this.#group(fragment);
    checkKey(key);
    try {
      // classic-level returns a fresh buffer, so the caller may keep it.
      return group.db.getSync(this.#scratchKey(fragment, TAG_DATA, key));
    } catch (err) {
      throw asStorageError(err);
    }
  }

  /** Reads always see the latest commit. */
  refreshReads(): void {}

  async page(
    fragment: number,
    start: PageStart | undefined,
    end: Uint8Array | undefined,
    limit: number,
  ): Promise<StoredEntry[]> {
    const group = this.#group(fragment);
    checkPageArgs(start, end, limit);
    if (limit === 0) return [];
    const startKey = storedKey(fragment, TAG_DATA, start === undefined ? EMPTY : start.key);
    const endKey = end === undefined ? tagEnd(fragment, TAG_DATA) : storedKey(fragment, TAG_DATA, end);
    const exclusive = start !== undefined && !start.inclusive;
    try {
      const entries = await group.db
        .iterator(exclusive ? { gt: startKey, lt: endKey, limit } : { gte: startKey, lt: endKey, limit })
        .all();
      const out: StoredEntry[] = new Array(entries.length);
      for (let i = 0; i < entries.length; i++) {
        out[i] = { key: entries[i][0].subarray(PREFIX_BYTES), record: entries[i][1] };
      }
      return out;
    } catch (err) {
      throw asStorageError(err);
    }
  }

  commit(writes: FragmentWrites[]): Promise<void> {
    let failed: Group[] | undefined;
    try {
      this.#checkOpen();
      checkWrites(writes, this.#fragmentCount);
      for (const w of writes) {
        const group = this.#group(w.fragment);
        if (group.failed && !failed?.includes(group)) (failed ??= []).push(group);
      }
    } catch (err) {
      return Promise.reject(err);
    }
    // A batch belongs to the database it was made on: reopen first, then stage.
    if (failed !== undefined) {
      return Promise.all(failed.map((group) => this.#enqueue(group, () => reopenGroup(group)))).then(
        () => this.commit(writes),
        (err: unknown) => {
          throw asStorageError(err);
        },
      );
    }
    let batches: Map<Group, LevelBatch>;
    try {
      batches = this.#stageAll(writes);
    } catch (err) {
      return Promise.reject(this.#recoverHighWater(writes, err));
    }
    const done: Promise<void>[] = [];
    for (const [group, batch] of batches) {
      done.push(this.#enqueue(group, () => failsGroup(group, batch.write(COMMIT_WRITE_OPTIONS))));
    }
    return Promise.all(done).then(
      () => undefined,
      (err: unknown) => {
        throw this.#recoverHighWater(writes, err);
      },
    );
  }

  /** This store keeps no write-ahead log (`logsWrites`). */
  log(): string {
    return 'this store keeps no write-ahead log';
  }

  async sync(): Promise<void> {
    this.#checkOpen();
    const done: Promise<void>[] = [];
    for (const group of this.#groups.values()) done.push(this.#enqueue(group, () => syncGroup(group)));
    try {
      await Promise.all(done);
    } catch (err) {
      throw asStorageError(err);
    }
  }

  highWaterWallMs(fragment: number): number {
    this.#group(fragment);
    return this.#highWaterWallMs[fragment];
  }

  /**
   * Copies each group this store owns into a new LevelDB under `targetDataDir`, entry by entry from
   * an iterator's snapshot taken after every write issued so far; writes go on meanwhile.
   */
  async backup(targetDataDir: string): Promise<void> {
    this.#checkOpen();
    try {
      await fs.mkdir(path.join(targetDataDir, LEVEL_DIR), { recursive: true });
      for (const [g, group] of this.#groups) await this.#backupGroup(group, levelGroupDir(targetDataDir, g));
      await fsyncPath(path.join(targetDataDir, LEVEL_DIR));
    } catch (err) {
      throw asStorageError(err);
    }
  }

  async #backupGroup(group: Group, dir: string): Promise<void> {
    let snapshot: LevelIterator | undefined;
    // In the group's write order: the iterator's implicit snapshot holds every write issued before.
    await this.#enqueue(group, async () => {
      snapshot = group.db.iterator();
    });
    const copy: LevelDb = new ClassicLevel<Buffer, Buffer>(dir, {
      keyEncoding: 'buffer',
      valueEncoding: 'buffer',
      errorIfExists: true,
    });
    await copy.open();
    try {
      for (;;) {
        const entries = await snapshot!.nextv(BACKUP_BATCH_ENTRIES);
        if (entries.length === 0) break;
        await copy.batch(entries.map(([key, value]) => ({ type: 'put' as const, key, value })));
      }
    } finally {
      await snapshot!.close();
      await copy.close();
    }
    // Closed, the copy is its files: make them and their names durable.
    await fsyncDirectoryFiles(dir);
  }

  /**
   * LevelDB keeps no count of a range's keys, and this store none of its own. A fragment of fewer
   * than LEVEL_SIZE_SAMPLE_ENTRIES entries is read whole and counted exactly. A larger one is
   * estimated: its bytes are LevelDB's `approximateSize` of its range (at least those of the
   * entries read), its keys those bytes over the average entry read. That size is of the table
   * files: compressed (Snappy: a half to a tenth of compressible records), without what is still
   * in the log and memtables (a write buffer or two, 4 MiB each), and with overwritten versions
   * until compaction drops them, so the estimate may fall well short, or somewhat over.
   */
  async fragmentSize(fragment: number): Promise<FragmentSize> {
    const sample = await this.page(fragment, undefined, undefined, LEVEL_SIZE_SAMPLE_ENTRIES);
    let sampleBytes = 0;
    for (const e of sample) sampleBytes += e.key.length + e.record.length;
    if (sample.length < LEVEL_SIZE_SAMPLE_ENTRIES) return { keys: sample.length, bytes: sampleBytes };
    const group = this.#group(fragment);
    let fileBytes: number;
    try {
      fileBytes = await group.db.approximateSize(
        storedKey(fragment, TAG_DATA, EMPTY),
        tagEnd(fragment, TAG_DATA),
      );
    } catch (err) {
      throw asStorageError(err);
    }
    const bytes = Math.max(sampleBytes, fileBytes);
    return { keys: Math.round((bytes * sample.length) / sampleBytes), bytes };
  }

  async dropFragment(fragment: number): Promise<void> {
    const group = this.#group(fragment);
    // Only the data range goes: the high-water mark stays, since the timestamps it covers were
    // issued and may live on in other replicas. (LevelDB's range clear is not one atomic write.)
    const gte = storedKey(fragment, TAG_DATA, EMPTY);
    const lt = tagEnd(fragment, TAG_DATA);
    try {
      await this.#enqueue(group, () => group.db.clear({ gte, lt }));
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
    this.#fragmentGroups.fill(undefined);
    // Let issued writes finish first: closing under them would fail them for no reason.
    const closing = [...this.#groups.values()].map((g) => g.tail.then(() => g.db.close()));
    const results = await Promise.allSettled(closing);
    for (const r of results) if (r.status === 'rejected') throw asStorageError(r.reason);
  }

  /** One batch per group the writes touch; if staging fails, the batches made so far are closed. */
  #stageAll(writes: FragmentWrites[]): Map<Group, LevelBatch> {
    const batches = new Map<Group, LevelBatch>();
    try {
      for (const w of writes) {
        const group = this.#fragmentGroups[w.fragment]!;
        let batch = batches.get(group);
        if (batch === undefined) batches.set(group, (batch = group.db.batch()));
        this.#stage(w, batch);
      }
    } catch (err) {
      for (const batch of batches.values()) batch.close().catch(ignore);
      throw err;
    }
    return batches;
  }

  /** Adds one fragment's writes to its group's batch, and its new high-water mark if higher. */
  #stage(w: FragmentWrites, batch: LevelBatch): void {
    // Deletes first, then puts: within one batch a put is the later write (FragmentWrites).
    for (const key of w.deletes) batch.del(this.#scratchKey(w.fragment, TAG_DATA, key));
    for (const [key, record] of w.puts)
      batch.put(this.#scratchKey(w.fragment, TAG_DATA, key), asBuffer(record));
    if (w.highWaterWallMs > this.#highWaterWallMs[w.fragment]) {
      batch.put(highWaterKey(w.fragment), encodeHighWater(w.highWaterWallMs));
      this.#highWaterWallMs[w.fragment] = w.highWaterWallMs;
    }
  }

  /** Runs `write` after every write issued to the group before it; the chain survives a failure. */
  #enqueue(group: Group, write: () => Promise<void>): Promise<void> {
    const result = group.tail.then(write);
    group.tail = result.then(ignore, ignore);
    return result;
  }

  /**
   * A failed batch may not have stored the marks `#stage` counted on: re-read them, and return the
   * failure as a storage error.
   */
  #recoverHighWater(writes: FragmentWrites[], err: unknown): Error {
    for (const w of writes) {
      const group = this.#fragmentGroups[w.fragment];
      if (group === undefined) continue;
      try {
        this.#highWaterWallMs[w.fragment] = this.#readHighWater(group, w.fragment);
      } catch {
        // The original error says more than a failed re-read would.
      }
    }
    return asStorageError(err);
  }

  #readHighWater(group: Group, fragment: number): number {
    try {
      return decodeHighWater(group.db.getSync(highWaterKey(fragment)), fragment);
    } catch (err) {
      throw asStorageError(err);
    }
  }

  /** The stored key in the scratch buffer; valid until the next call. */
  #scratchKey(fragment: number, tag: number, key: Uint8Array): Buffer {
    writePrefix(this.#keyScratch, fragment, tag);
    this.#keyScratch.set(key, PREFIX_BYTES);
    return this.#keyScratch.subarray(0, PREFIX_BYTES + key.length);
  }

  #group(fragment: number): Group {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    const group = this.#fragmentGroups[fragment];
    assert(group !== undefined, 'fragment used before openFragment');
    return group;
  }

  #checkOpen(): void {
    if (this.#closed) throw closedError('level');
  }
}

const EMPTY = new Uint8Array(0);
const ignore = (): void => {};

function writePrefix(out: Buffer, fragment: number, tag: number): void {
  out.writeUInt16BE(fragment, 0);
  out[FRAGMENT_BYTES] = tag;
}

function storedKey(fragment: number, tag: number, key: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES + key.length);
  writePrefix(out, fragment, tag);
  out.set(key, PREFIX_BYTES);
  return out;
}

/** The first key past every key with this fragment and tag. */
function tagEnd(fragment: number, tag: number): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES);
  writePrefix(out, fragment, tag + 1);
  return out;
}

const highWaterKey = (fragment: number): Buffer => storedKey(fragment, TAG_META, META_HIGH_WATER_NAME);

/** `write`, marking its group failed if it fails. */
function failsGroup(group: Group, write: Promise<void>): Promise<void> {
  return write.catch((err: unknown) => {
    group.failed = true;
    throw err;
  });
}

/**
 * Closes and opens a group whose write failed, so that LevelDB forgets the failure; refuses while
 * its file system has too little room for the reopening (it would fail, and leave the group closed).
 */
async function reopenGroup(group: Group): Promise<void> {
  const { bavail, bsize } = await fs.statfs(group.dir);
  const free = bavail * bsize;
  if (free < LEVEL_REOPEN_FREE_BYTES_MIN) {
    throw storageError(
      `disk full: ${free} bytes free for LevelDB at ${group.dir}, which stays failed until ${LEVEL_REOPEN_FREE_BYTES_MIN} are`,
    );
  }
  await group.db.close();
  await group.db.open();
  group.failed = false;
}

/**
 * The stable fence for one group. A `sync: true` write fsyncs the current log, but LevelDB never
 * fsyncs a log it rotates away from (google/leveldb#193): until that log's memtable is compacted
 * into a table, its writes are only in the page cache. So every log still present is fsynced too,
 * and the directory, which may hold log files created since the last fence.
 */
async function syncGroup(group: Group): Promise<void> {
  if (group.failed) await reopenGroup(group);
  await failsGroup(group, group.db.batch([{ type: 'del', key: SYNC_MARKER_KEY }], { sync: true }));
  const names = await fs.readdir(group.dir);
  // A log deleted meanwhile was compacted into a table LevelDB has already synced.
  for (const name of names)
    if (LOG_FILE_PATTERN.test(name)) await fsyncPath(path.join(group.dir, name), true);
  await fsyncPath(group.dir);
}
