// The LMDB binding (the default store): one environment per group at `<dataDir>/lmdb/group-<g>`,
// one named database per fragment, so a fragment is dropped whole and each worker writes only its
// own. Fragment f lives in group f mod G, G bound at first start (the manifest's `groupCount`: the
// workers then), and each worker opens the groups it owns (`location.groups`), so workers commit
// in parallel, each under its own environment's write lock, instead of taking turns on one.
//
// lmdb-js keeps one native MDB_env per path for the whole process and counts the threads holding
// it: the main thread's read snapshot and the background pool open every group beside the worker
// that writes it, and an env is closed when the last thread closes it (or dies).
//
// A format 1 directory (manifest.ts) has one environment for the node at `<dataDir>/lmdb`; the
// start migrates it (`recoverLmdbStore`): each group's env is built under `lmdb/migration/` and
// flushed, the manifest is rewritten as format 2 (the moment the migration takes effect), then the
// groups are renamed into place and the old env removed. A crash before the manifest is rewritten
// leaves the old env in use and the migration is made again; one after it is finished at the next
// start.
//
// Stored key form — LMDB refuses the empty key and ours may be empty:
//
//   0x00 name   fragment metadata; `high-water-wall-ms` holds an 8-byte u64 BE
//   0x01 key    a user key; the value is the record, stored as-is
//
// Power loss (README "Durability"): the env runs with lmdb-js's `overlappingSync` and without a
// write map. A transaction's pages are written to the file (pwrite) and its meta page marked
// unflushed; lmdb-js's write thread then fdatasyncs the file and writes a flushed meta of its own,
// on an O_DSYNC descriptor, in a third meta slot. Pages the last flushed transaction can reach are
// never reused until a later one is flushed. After a reboot (the kernel's boot id changed) LMDB
// opens at the newest flushed meta, so the unflushed pages a power loss leaves half-written are
// never read. With a write map (this store's mode before) the kernel writes pages back in any
// order and the map's dirty pages may overwrite what the last synced state needs: a power loss
// then damaged the file in most crash states (test/crash/).
//
// Fences (kv-store.ts): commits go to lmdb-js's write thread (`batch`), which commits them in one
// transaction with the other batches queued meanwhile; the batch's promise resolves once the
// transaction is committed and visible (the committed fence: it survives the process dying), and
// `flushed` once the file holds it on disk (the stable fence). Every transaction is flushed, and the
// next waits for that flush: a commit costs the disk's flush of every page it changed. So the store
// a worker writes (`StoreLocation.writer`) keeps a write-ahead log per env in front of it
// (write-ahead-log.ts): writes are logged before they are committed, the logged fence stands for
// `store`, and `sync` fdatasyncs the log instead of waiting for the env's flush.

import fs from 'node:fs/promises';
import path from 'node:path';
import { type Database, type DatabaseOptions, open, type RootDatabase, type RootDatabaseOptions } from 'lmdb';
import { assert } from '../core/assert.js';
import { asStorageError, storageError, type TesseraError } from '../core/errors.js';
import { FRAGMENT_COUNT_MAX, KEY_BYTES_MAX, WORKER_COUNT_MAX } from '../core/limits.js';
import { RECORD_HEADER_BYTES, valueOffsetOf } from '../core/record.js';
import { fsyncPath, renameIntoPlaceDurably } from './fsync-path.js';
import {
  DAMAGED_STORE_REMEDY,
  type FragmentSize,
  type FragmentWrites,
  type KvStore,
  type LogReplay,
  type PageStart,
  type StoredEntry,
  type StoreLocation,
} from './kv-store.js';
import { upgradeManifest } from './manifest.js';
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
import {
  isStableLogName,
  replayStableLogs,
  type StableLogReplay,
  stableLogFiles,
} from './stable-log-file.js';
import { replayWal, WriteAheadLog } from './write-ahead-log.js';

/** One named database per fragment of the group, plus headroom for LMDB's own and any future side tables. */
const LMDB_DBS_MAX = FRAGMENT_COUNT_MAX + 16;
/**
 * Reader slots of the env's lock table (LMDB's default is 126). Each thread that reads — up to
 * WORKER_COUNT_MAX workers, the main thread, the background pool — holds a read transaction, and a
 * range iterator running across a commit may hold one more.
 */
const LMDB_READERS_MAX = 4 * WORKER_COUNT_MAX;
/** Initial map size. lmdb-js grows the map on demand (doubling what is used), so this only saves early remaps. */
const LMDB_MAP_BYTES_INITIAL = 256 * 1024 * 1024;
/** LMDB's two meta pages at the file's start (two pages of the smallest page size it uses). */
const LMDB_META_PAGES_BYTES = 8192;
/** Bytes read at a time when a data file is checked for zeros. */
const LMDB_CHECK_CHUNK_BYTES = 1024 * 1024;
/**
 * A commit that fails while its file system has less than this free is reported as a full disk: a
 * transaction of a turn's writes needs at most a few MiB of new pages.
 */
const LMDB_FULL_FREE_BYTES_MAX = 16 * 1024 * 1024;
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
/** In the root database: the env's creation, its first transaction (`createEnvDurably`). */
const META_CREATED_KEY = Buffer.concat([Buffer.from([PREFIX_META]), Buffer.from('created', 'latin1')]);
const META_HIGH_WATER_KEY = Buffer.concat([
  Buffer.from([PREFIX_META]),
  Buffer.from('high-water-wall-ms', 'latin1'),
]);
/**
 * A fragment's size from its database's page counts (`fragmentSize`). LMDB (mdb.c) heads each page
 * with 16 bytes and gives each entry of a leaf an 8-byte node header and a 2-byte slot; the stored
 * key adds our prefix byte. A leaf is split in half when full and merged below a quarter full, so
 * the fill of a tree grown by writes in random key order is about ln 2 (Yao's 69 %).
 */
const LMDB_PAGE_HEADER_BYTES = 16;
const LMDB_ENTRY_OVERHEAD_BYTES = 8 + 2 + PREFIX_BYTES;
const LMDB_LEAF_FILL = Math.LN2;
const LMDB_DIR = 'lmdb';
/** Where a format 1 directory's groups are built before the migration takes effect. */
const LMDB_MIGRATION_DIR = 'migration';
/** Entries copied per transaction when a format 1 env is migrated: bounds one transaction's pages. */
const LMDB_MIGRATION_BATCH_ENTRIES = 4096;
/** Where a new env is made before it is renamed into place (`createEnvDurably`). */
const LMDB_NEW_ENV_SUFFIX = '-new'; // no dot: lmdb-js takes a path with an extension for a file
/** The env's data file in LMDB_DIR (a backup's only file: the lock file is made at open). */
const LMDB_DATA_FILE = 'data.mdb';
const LMDB_LOCK_FILE = 'lock.mdb';

assert(PREFIX_BYTES + KEY_BYTES_MAX + 1 <= LMDB_KEY_BYTES_MAX, 'a prefixed key must fit LMDB');

type FragmentDb = Database<Uint8Array, Uint8Array>;
/** What lmdb-js's `getStats` returns of a named database (mdb_stat), among the env's figures. */
interface LmdbStats {
  pageSize: number;
  treeLeafPageCount: number;
  overflowPages: number;
  entryCount: number;
}

/**
 * The env's options. `overlappingSync` is lmdb-js's default on Linux, named here because the power
 * loss guarantee rests on it; `noSync` and `useWritemap` must stay off (see the file's header).
 */
const LMDB_ENV_OPTIONS: RootDatabaseOptions = {
  maxDbs: LMDB_DBS_MAX,
  maxReaders: LMDB_READERS_MAX,
  mapSize: LMDB_MAP_BYTES_INITIAL,
  overlappingSync: true,
  noSync: false,
  useWritemap: false,
  // Each commit is one explicit `batch`. lmdb-js's batching of an event turn's writes makes a
  // promise of its own that nothing awaits, whose rejection on a failed commit would end the worker.
  eventTurnBatching: false,
  encoding: 'binary',
  keyEncoding: 'binary',
};

/**
 * LMDB's codes for a file whose pages do not hold what its meta page says (mdb.c's error table):
 * what a damaged data file reports, at open or at the first read of a damaged page.
 */
const LMDB_DAMAGE_CODES = [
  'MDB_CORRUPTED',
  'MDB_PAGE_NOTFOUND',
  'MDB_INVALID',
  'MDB_PROBLEM',
  'MDB_VERSION_MISMATCH',
];

export const fragmentDbName = (fragment: number): string => `fragment-${String(fragment).padStart(5, '0')}`;

/** The env directory of group `group`. */
export const lmdbGroupDir = (dataDir: string, group: number): string =>
  path.join(dataDir, LMDB_DIR, groupDirName(group));
const groupDirName = (group: number): string => `group-${group}`;

/** Opens the envs of the groups `location.groups` (of `location.groupCount`). */
export async function openLmdbStore(location: StoreLocation): Promise<KvStore> {
  checkLocation(location);
  const groupCount = location.groupCount;
  assert(Number.isInteger(groupCount) && groupCount >= 1, 'lmdb group count must be at least 1');
  assert(groupCount <= location.fragmentCount, 'more lmdb groups than fragments');
  const dirs = new Map<number, string>();
  for (const g of location.groups) {
    assert(Number.isInteger(g) && g >= 0 && g < groupCount, 'lmdb group out of range');
    dirs.set(g, lmdbGroupDir(location.dataDir, g));
  }
  const store = await openEnvs(dirs, groupCount, location.fragmentCount);
  if (location.writer === true) {
    try {
      await store.startLogs(location.walSegmentBytes);
    } catch (err) {
      await store.close().catch(ignore);
      throw asStorageError(err);
    }
  }
  return store;
}

/** A store over the envs `dirs` (by group), fragment f in group f mod `groupCount`. */
async function openEnvs(
  dirs: Map<number, string>,
  groupCount: number,
  fragmentCount: number,
): Promise<LmdbStore> {
  const envs = new Map<number, LmdbEnv>();
  try {
    for (const [g, dir] of dirs) {
      const dataFile = path.join(dir, LMDB_DATA_FILE);
      await checkMetaPages(dataFile, false);
      try {
        envs.set(g, newEnv(open<Uint8Array, Uint8Array>(dir, LMDB_ENV_OPTIONS), dir, g));
      } catch (err) {
        throw lmdbError(err, dataFile);
      }
    }
  } catch (err) {
    await Promise.allSettled([...envs.values()].map((env) => env.root.close()));
    throw err;
  }
  return new LmdbStore(envs, groupCount, fragmentCount);
}

/**
 * Refuses a data file whose meta pages are zeros, which lmdb-js cannot open (3.5 crashes the process
 * instead of reporting it). A file that is zeros throughout is one a power loss took before its
 * first flush, which is also when LMDB's first meta pages reach the disk: it never held anything
 * durable, so `recoverLmdbStore`, which runs before any thread opens the env, removes it
 * (`remove`) and the store starts empty, as it did then. Any other such file is damaged.
 */
async function checkMetaPages(dataFile: string, remove: boolean): Promise<void> {
  let file: fs.FileHandle;
  try {
    file = await fs.open(dataFile, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw asStorageError(err);
  }
  let allZeros = true;
  try {
    const chunk = Buffer.alloc(LMDB_CHECK_CHUNK_BYTES);
    const meta = await file.read(chunk, 0, LMDB_META_PAGES_BYTES, 0);
    // Meta pages that hold anything (or an empty file, which LMDB initialises) are LMDB's to judge.
    if (meta.bytesRead === 0 || !isZeros(chunk.subarray(0, meta.bytesRead))) return;
    for (let at = meta.bytesRead; allZeros; at += chunk.length) {
      const { bytesRead } = await file.read(chunk, 0, chunk.length, at);
      if (bytesRead === 0) break;
      allZeros = isZeros(chunk.subarray(0, bytesRead));
    }
  } finally {
    await file.close();
  }
  if (!allZeros) throw lmdbError(new Error('MDB_INVALID: its meta pages are zeros'), dataFile);
  if (!remove) {
    throw storageError(
      `the LMDB data file ${dataFile} is zeros throughout (a power loss before its first flush): a starting node removes it`,
    );
  }
  await fs.rm(dataFile);
}

const isZeros = (bytes: Uint8Array): boolean => bytes.every((byte) => byte === 0);

/**
 * A storage error for an LMDB failure. A damaged data file is named, with what to do: its pages
 * cannot be trusted, so the node must not serve from it.
 */
function lmdbError(err: unknown, dataFile: string): TesseraError {
  const message = err instanceof Error ? err.message : String(err);
  if (!LMDB_DAMAGE_CODES.some((code) => message.includes(code))) return asStorageError(err);
  return storageError(`the LMDB data file ${dataFile} is damaged (${message}); ${DAMAGED_STORE_REMEDY}`);
}

/**
 * Creates an env (a group's, or a format 1 directory's one), if there is none, with a flushed
 * transaction in it before it can be used.
 * After a reboot lmdb-js rolls an env back to its newest flushed transaction, and one whose only
 * flushed state is the empty env it was created with cannot be rolled back (lmdb-js 3.5 aborts the
 * process at its next write; the power-loss simulator found it). So a new env is made under a
 * temporary name, given one transaction, flushed and closed, its files and directory synced, and
 * only then renamed into place; a temporary left by a crash held nothing and is made again.
 */
async function createEnvDurably(envDir: string): Promise<void> {
  if (await exists(path.join(envDir, LMDB_DATA_FILE))) return;
  const fresh = `${envDir}${LMDB_NEW_ENV_SUFFIX}`;
  try {
    await fs.rm(fresh, { recursive: true, force: true });
    const root = open<Uint8Array, Uint8Array>(fresh, LMDB_ENV_OPTIONS);
    await root.put(META_CREATED_KEY, encodeHighWater(1));
    await root.flushed;
    await root.close();
    // An env directory without a data file holds at most a lock file; anything else is refused.
    await fs.rm(path.join(envDir, LMDB_LOCK_FILE), { force: true });
    await fs.rmdir(envDir).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
    await renameIntoPlaceDurably(fresh, envDir);
  } catch (err) {
    throw asStorageError(err);
  }
}

/** What a start did to ready the lmdb store: stable logs an older version left, a format 1 migration. */
export interface LmdbRecovery {
  replay: StableLogReplay;
  /** Set when a format 1 env was migrated into groups: how many, the entries copied, how long it took. */
  migrated?: { groups: number; entries: number; tookMs: number };
  /** Set when a migration a crash interrupted after it took effect was finished: the groups moved. */
  finishedMigration?: { groups: number };
}

const NOTHING_REPLAYED: StableLogReplay = { files: 0, entries: 0, applied: 0, tornBytes: 0 };

/**
 * Brings the node's envs back after a crash or a power loss, before any thread opens them. A format
 * 1 directory (`singleEnv`) first has its one env recovered as that format was — created if new,
 * a data file that never held a flushed state removed (`checkMetaPages`), the stable logs an older
 * version left replayed into it — and is then migrated into `location.groupCount` groups. Then each
 * group's env is created if new and checked the same way.
 */
export async function recoverLmdbStore(location: StoreLocation, singleEnv: boolean): Promise<LmdbRecovery> {
  checkLocation(location);
  const lmdbDir = path.join(location.dataDir, LMDB_DIR);
  const migrationDir = path.join(lmdbDir, LMDB_MIGRATION_DIR);
  let recovery: LmdbRecovery = { replay: NOTHING_REPLAYED };
  try {
    if (singleEnv) {
      // The manifest still says format 1: a migration a crash interrupted never took effect.
      await fs.rm(migrationDir, { recursive: true, force: true });
      recovery = await migrateSingleEnv(location, await recoverSingleEnv(location));
    } else if (await exists(migrationDir)) {
      // The manifest says format 2 and the groups are not all in place: finish what was started.
      recovery = { replay: NOTHING_REPLAYED, finishedMigration: { groups: await finishMigration(lmdbDir) } };
    }
    // The groups' parent, made durable before them: a power loss must not take it, and them with it.
    await fs.mkdir(lmdbDir, { recursive: true });
    await fsyncPath(location.dataDir);
  } catch (err) {
    throw asStorageError(err);
  }
  for (let g = 0; g < location.groupCount; g++) {
    const dir = lmdbGroupDir(location.dataDir, g);
    await createEnvDurably(dir);
    await checkMetaPages(path.join(dir, LMDB_DATA_FILE), true);
  }
  return recovery;
}

/** The format 1 env at `<dataDir>/lmdb`, readied as that format's start did; returns what it replayed. */
async function recoverSingleEnv(location: StoreLocation): Promise<StableLogReplay> {
  const envDir = path.join(location.dataDir, LMDB_DIR);
  await createEnvDurably(envDir);
  await checkMetaPages(path.join(envDir, LMDB_DATA_FILE), true);
  const files = await stableLogFiles(envDir);
  if (files.length === 0) return NOTHING_REPLAYED;
  const store = await openEnvs(new Map([[0, envDir]]), 1, location.fragmentCount);
  try {
    for (let f = 0; f < location.fragmentCount; f++) await store.openFragment(f);
    return await replayStableLogs(envDir, files, store, location.fragmentCount);
  } finally {
    await store.close();
  }
}

/**
 * Copies every fragment's database of the format 1 env into its group's new env under
 * `lmdb/migration/`, flushes and closes each, rewrites the manifest as format 2 (from here on the
 * groups are the store), then moves them into place (`finishMigration`).
 */
async function migrateSingleEnv(location: StoreLocation, replay: StableLogReplay): Promise<LmdbRecovery> {
  const startedMs = Date.now();
  const lmdbDir = path.join(location.dataDir, LMDB_DIR);
  const migrationDir = path.join(lmdbDir, LMDB_MIGRATION_DIR);
  const groupCount = location.groupCount;
  let entries = 0;
  try {
    entries = await buildGroups(lmdbDir, migrationDir, groupCount, location.fragmentCount);
    await upgradeManifest(location.dataDir, groupCount);
  } catch (err) {
    throw storageError(
      `the LMDB store in ${lmdbDir} could not be migrated to one environment per group ` +
        `(${err instanceof Error ? err.message : String(err)}); the old environment is kept, and the next ` +
        'start makes the migration again',
    );
  }
  await finishMigration(lmdbDir);
  return { replay, migrated: { groups: groupCount, entries, tookMs: Date.now() - startedMs } };
}

/** Builds each group's env under `migrationDir` from the format 1 env in `lmdbDir`, flushed; returns the entries copied. */
async function buildGroups(
  lmdbDir: string,
  migrationDir: string,
  groupCount: number,
  fragmentCount: number,
): Promise<number> {
  await fs.mkdir(migrationDir);
  const legacy = open<Uint8Array, Uint8Array>(lmdbDir, LMDB_ENV_OPTIONS);
  let entries = 0;
  try {
    for (let g = 0; g < groupCount; g++) {
      const dir = path.join(migrationDir, groupDirName(g));
      const root = open<Uint8Array, Uint8Array>(dir, LMDB_ENV_OPTIONS);
      try {
        await root.put(META_CREATED_KEY, encodeHighWater(1));
        for (let f = g; f < fragmentCount; f += groupCount) {
          entries += await copyDatabase(legacy, root, fragmentDbName(f));
        }
        await root.flushed;
      } finally {
        await root.close();
      }
      await fsyncPath(dir);
    }
  } finally {
    await legacy.close();
  }
  await fsyncPath(migrationDir);
  await fsyncPath(lmdbDir);
  return entries;
}

/** Copies the named database `name` of `from` into `to`, entry by entry, a batch at a time; returns the entries. */
async function copyDatabase(
  from: RootDatabase<Uint8Array, Uint8Array>,
  to: RootDatabase<Uint8Array, Uint8Array>,
  name: string,
): Promise<number> {
  const dbOptions = { encoding: 'binary', keyEncoding: 'binary' } as const;
  const source = from.openDB<Uint8Array, Uint8Array>(name, dbOptions);
  const target = to.openDB<Uint8Array, Uint8Array>(name, dbOptions);
  let copied = 0;
  let after: Uint8Array | undefined;
  for (;;) {
    const page = [
      ...source.getRange({
        start: after,
        exclusiveStart: after !== undefined,
        limit: LMDB_MIGRATION_BATCH_ENTRIES,
      }),
    ];
    if (page.length === 0) return copied;
    await to.batch(() => {
      for (const { key, value } of page) target.put(key, value);
    });
    copied += page.length;
    after = page[page.length - 1].key;
  }
}

/**
 * Moves the migrated groups from `lmdb/migration/` into place, then removes the format 1 env's
 * files and the migration directory, each step durable; a crash in between is finished by the
 * next start. Returns how many groups it moved.
 */
async function finishMigration(lmdbDir: string): Promise<number> {
  const migrationDir = path.join(lmdbDir, LMDB_MIGRATION_DIR);
  const groups = (await fs.readdir(migrationDir)).filter((name) => name.startsWith('group-'));
  for (const name of groups) {
    const target = path.join(lmdbDir, name);
    if (await exists(target)) {
      throw storageError(
        `the LMDB migration cannot finish: both ${path.join(migrationDir, name)} and ${target} exist. ` +
          'Move the data directory aside and restart the node empty, or restore a backup (README "Backups")',
      );
    }
    await fs.rename(path.join(migrationDir, name), target);
  }
  await fsyncPath(lmdbDir);
  for (const name of await fs.readdir(lmdbDir)) {
    if (name === LMDB_DATA_FILE || name === LMDB_LOCK_FILE || isStableLogName(name))
      await fs.rm(path.join(lmdbDir, name), { force: true });
  }
  await fs.rm(migrationDir, { recursive: true, force: true });
  await fsyncPath(lmdbDir);
  return groups.length;
}

async function exists(p: string): Promise<boolean> {
  try {
    await fs.access(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * One group's environment, with what its commits share: the writes `applyPending` applies (set just
 * before the transaction, so no closure per commit) and the commits not yet settled.
 */
interface LmdbEnv {
  readonly root: RootDatabase<Uint8Array, Uint8Array>;
  /** The env's data file, named in errors that report it damaged. */
  readonly dataFile: string;
  pending: FragmentWrites[];
  applyPending: () => void;
  /** Commits handed to the write thread and not yet settled: close waits for them. */
  committing: Promise<unknown>;
  /** Commits handed to the write thread so far, and the last of them to succeed. */
  commitsStarted: number;
  lastCommitSucceeded: number;
  /** The error of a commit later than the last to succeed, if one failed: nothing flushes until one succeeds. */
  commitFailure: unknown;
  /** The rejections of `flushed` waits under way (`LmdbStore.#flushed`). */
  readonly flushWaiters: Set<(err: unknown) => void>;
  /** The store's read generation this env's read snapshot was last renewed at (`refreshReads`). */
  readGeneration: number;
  /** The group's write-ahead log, when this store is its writer (`StoreLocation.writer`). */
  log: WriteAheadLog | undefined;
  /** The group's fragment ids modulo the group count. */
  readonly group: number;
  /** The env's directory. */
  readonly dir: string;
}

const NO_WRITES: FragmentWrites[] = [];

const newEnv = (root: RootDatabase<Uint8Array, Uint8Array>, dir: string, group: number): LmdbEnv => ({
  root,
  dataFile: path.join(dir, LMDB_DATA_FILE),
  pending: NO_WRITES,
  applyPending: ignore,
  committing: Promise.resolve(),
  commitsStarted: 0,
  lastCommitSucceeded: 0,
  commitFailure: undefined,
  flushWaiters: new Set(),
  readGeneration: 0,
  log: undefined,
  group,
  dir,
});

class LmdbStore implements KvStore {
  readonly kind = 'lmdb';
  readonly sharesReaders = true;
  readonly durable = true;
  /** Set by `startLogs`: the writer's store logs. */
  logsWrites = false;
  replayed: LogReplay | undefined;

  /** The open groups' envs, by group. */
  readonly #envs: Map<number, LmdbEnv>;
  readonly #groupCount: number;
  readonly #fragmentCount: number;
  /** Open fragment databases by fragment id; a fragment is used only after `openFragment`. */
  readonly #dbs: Array<FragmentDb | undefined>;
  /** Each fragment's stamp reader (`#stampReader`), opened on its first stamp page. */
  readonly #stampDbs: Array<FragmentDb | undefined>;
  /** Each open fragment's env. */
  readonly #envOf: Array<LmdbEnv | undefined>;
  /** The stored high-water mark per fragment; this store is the fragment's only writer, so it is current. */
  readonly #highWaterWallMs: Float64Array;
  /** One reusable buffer for the prefixed key of a get, put or remove: lmdb-js copies keys at once. */
  readonly #keyScratch = Buffer.allocUnsafe(PREFIX_BYTES + KEY_BYTES_MAX);
  /** Views of the scratch by length, made on first use: a put or get creates no Buffer for its key. */
  readonly #keyViews: Array<Buffer | undefined> = new Array(PREFIX_BYTES + KEY_BYTES_MAX + 1).fill(undefined);
  /** The last transaction promise `#apply` marked handled. */
  #handledTxnPromise: Promise<unknown> | undefined;
  /**
   * Bumped by `refreshReads`: an env renews its read snapshot at its next read when it is behind,
   * so a refresh costs nothing for the envs not read after it.
   */
  #readGeneration = 0;
  #closed = false;

  constructor(envs: Map<number, LmdbEnv>, groupCount: number, fragmentCount: number) {
    this.#envs = envs;
    this.#groupCount = groupCount;
    this.#fragmentCount = fragmentCount;
    this.#dbs = new Array<FragmentDb | undefined>(fragmentCount).fill(undefined);
    this.#stampDbs = new Array<FragmentDb | undefined>(fragmentCount).fill(undefined);
    this.#envOf = new Array<LmdbEnv | undefined>(fragmentCount).fill(undefined);
    this.#highWaterWallMs = new Float64Array(fragmentCount);
    for (const env of envs.values()) env.applyPending = () => this.#apply(env.pending);
  }

  /**
   * Replays each group's write-ahead log into its env (what a worker that stopped had logged and not
   * committed), flushes the env and removes the log, then starts a fresh one: from here on `log`
   * appends to it.
   */
  async startLogs(segmentBytes?: number): Promise<void> {
    const total: LogReplay = { segments: 0, entries: 0, applied: 0, tornBytes: 0 };
    for (const env of this.#envs.values()) {
      const flushed = () => this.#flushed(env);
      const accepts = (fragment: number) => fragment % this.#groupCount === env.group;
      const replay = await replayWal(env.dir, this, accepts, flushed);
      total.segments += replay.segments;
      total.entries += replay.entries;
      total.applied += replay.applied;
      total.tornBytes += replay.tornBytes;
      env.log = await WriteAheadLog.create(env.dir, flushed, segmentBytes);
    }
    if (total.entries > 0 || total.tornBytes > 0) this.replayed = total;
    this.logsWrites = true;
  }

  log(writes: readonly FragmentWrites[]): string | undefined {
    if (this.#closed) return 'the lmdb store is closed';
    if (!this.logsWrites) return "this store was not opened as its groups' writer: it keeps no log";
    if (this.#envs.size === 1) return this.#envs.values().next().value!.log!.append(writes);
    let failure: string | undefined;
    for (const [env, list] of this.#byEnv(writes)) failure = env.log!.append(list) ?? failure;
    return failure;
  }

  /**
   * `writes` split by the env of each fragment's group: a worker owns one group unless the node was
   * restarted with fewer workers than at creation.
   */
  #byEnv(writes: readonly FragmentWrites[]): Map<LmdbEnv, FragmentWrites[]> {
    const byEnv = new Map<LmdbEnv, FragmentWrites[]>();
    for (const w of writes) {
      const own = this.#envs.get(w.fragment % this.#groupCount)!;
      const list = byEnv.get(own);
      if (list === undefined) byEnv.set(own, [w]);
      else list.push(w);
    }
    return byEnv;
  }

  async openFragment(fragment: number): Promise<void> {
    this.#checkOpen();
    checkFragment(fragment, this.#fragmentCount);
    if (this.#dbs[fragment] !== undefined) return;
    const env = this.#envs.get(fragment % this.#groupCount);
    assert(env !== undefined, 'fragment opened by a thread that did not open its lmdb group');
    try {
      // Opening a named database takes the env's write lock briefly (it may create the database).
      const db = env.root.openDB<Uint8Array, Uint8Array>(fragmentDbName(fragment), {
        encoding: 'binary',
        keyEncoding: 'binary',
      });
      this.#highWaterWallMs[fragment] = decodeHighWater(db.getBinary(META_HIGH_WATER_KEY), fragment);
      this.#dbs[fragment] = db;
      this.#envOf[fragment] = env;
    } catch (err) {
      throw lmdbError(err, env.dataFile);
    }
  }

  get(fragment: number, key: Uint8Array): Buffer | undefined {
    const db = this.#readable(fragment);
    checkKey(key);
    try {
      // lmdb's reused read buffer (or the map itself for large values): no copy per read. Its
      // `length` property is patched to the value's size, but its real extent is the whole scratch
      // buffer, so hand out a view of exactly the value.
      const view = db.getBinaryFast(this.#dataKey(key));
      return view === undefined ? undefined : view.subarray(0, view.length);
    } catch (err) {
      throw lmdbError(err, this.#envOf[fragment]!.dataFile);
    }
  }

  refreshReads(): void {
    this.#checkOpen();
    this.#readGeneration++;
  }

  async page(
    fragment: number,
    start: PageStart | undefined,
    end: Uint8Array | undefined,
    limit: number,
    stampsOnly = false,
  ): Promise<StoredEntry[]> {
    const db = stampsOnly ? this.#stampReader(fragment) : this.#readable(fragment);
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
      // The stamp reader's keys come without it (STAMP_READER_OPTIONS).
      if (stampsOnly)
        for (const { key, value } of range) out.push({ key: key as Buffer, record: value as Buffer });
      else
        for (const { key, value } of range)
          out.push({ key: copySlice.call(key, PREFIX_BYTES) as Buffer, record: value as Buffer });
    } catch (err) {
      throw lmdbError(err, this.#envOf[fragment]!.dataFile);
    }
    return out;
  }

  /**
   * Queues the writes for lmdb-js's write thread as one batch per env they touch (one transaction
   * each, with whatever else is queued there), and resolves once every one is committed. lmdb-js
   * copies each key at once but keeps the record buffers until then: they are the caller's not to
   * change (kv-store.ts).
   */
  commit(writes: FragmentWrites[]): Promise<void> {
    let env: LmdbEnv | undefined;
    let envs = 1;
    try {
      this.#checkOpen();
      checkWrites(writes, this.#fragmentCount);
      for (const w of writes) {
        this.#db(w.fragment);
        const own = this.#envOf[w.fragment];
        if (env === undefined) env = own;
        else if (own !== env) envs++;
      }
    } catch (err) {
      return Promise.reject(asStorageError(err));
    }
    if (env === undefined) return Promise.resolve();
    if (envs === 1) return this.#commitTo(env, writes);
    return Promise.all([...this.#byEnv(writes)].map(([own, list]) => this.#commitTo(own, list))).then(ignore);
  }

  #commitTo(env: LmdbEnv, writes: FragmentWrites[]): Promise<void> {
    const sequence = ++env.commitsStarted;
    let committed: Promise<boolean>;
    try {
      env.pending = writes;
      committed = env.root.batch(env.applyPending);
    } catch (err) {
      return Promise.reject(asStorageError(err));
    } finally {
      env.pending = NO_WRITES;
    }
    const done = committed.then(
      () => {
        // Only now is the new mark stored; a failed transaction left the old one in place.
        for (const w of writes) {
          if (w.highWaterWallMs > this.#highWaterWallMs[w.fragment])
            this.#highWaterWallMs[w.fragment] = w.highWaterWallMs;
        }
        if (sequence > env.lastCommitSucceeded) {
          env.lastCommitSucceeded = sequence;
          env.commitFailure = undefined;
        }
        env.log?.committed(writes);
      },
      (err: unknown) => {
        const failed = this.#commitFailed(err, env.dataFile);
        failed.catch((cause: unknown) => {
          // A later commit that already succeeded flushes what this one would have.
          if (sequence < env.lastCommitSucceeded) return;
          env.commitFailure = cause;
          for (const reject of env.flushWaiters) reject(cause);
          env.flushWaiters.clear();
        });
        return failed;
      },
    );
    env.committing = done.catch(ignore);
    return done;
  }

  /**
   * lmdb-js rejects a failed batch with a generic error whose `commitError`, a promise, rejects with
   * LMDB's own; a write that failed for want of space reports EIO as often as ENOSPC (a short
   * write), so the file system's free space decides whether it is called a full disk.
   */
  async #commitFailed(err: unknown, dataFile: string): Promise<never> {
    const commitError = (err as { commitError?: Promise<unknown> }).commitError;
    const cause =
      commitError === undefined
        ? err
        : await commitError.then(
            () => err,
            (e: unknown) => e,
          );
    const message = cause instanceof Error ? cause.message : String(cause);
    let free = Number.POSITIVE_INFINITY;
    try {
      const { bavail, bsize } = await fs.statfs(path.dirname(dataFile));
      free = bavail * bsize;
    } catch {
      // No figure: the error stands as LMDB gave it.
    }
    if (free < LMDB_FULL_FREE_BYTES_MAX)
      throw storageError(
        `disk full: the LMDB data file ${dataFile} could not be written (${message}); ${free} bytes free`,
      );
    throw lmdbError(cause, dataFile);
  }

  /**
   * Resolves once everything committed so far is on disk, in every env: what the write-ahead log
   * holds once it is fdatasynced (a writer's store), else once the env has flushed its transactions
   * (lmdb-js's `flushed`).
   */
  async sync(): Promise<void> {
    this.#checkOpen();
    for (const env of this.#envs.values()) {
      try {
        if (env.log !== undefined) await env.log.sync();
        else await this.#flushed(env);
      } catch (err) {
        throw lmdbError(err, env.dataFile);
      }
    }
  }

  /**
   * Resolves once the env has flushed what it committed. lmdb-js never settles the flush of a
   * transaction that failed (a full disk), so a sync that waited for it would never answer its
   * stable writes: a failed commit, before this call or while it waits, rejects it with that
   * commit's error instead, until a commit succeeds.
   */
  #flushed(env: LmdbEnv): Promise<void> {
    if (env.commitFailure !== undefined) return Promise.reject(env.commitFailure);
    return new Promise<void>((resolve, reject) => {
      env.flushWaiters.add(reject);
      env.root.flushed.then(
        () => {
          env.flushWaiters.delete(reject);
          resolve();
        },
        (err: unknown) => {
          env.flushWaiters.delete(reject);
          reject(err);
        },
      );
    });
  }

  highWaterWallMs(fragment: number): number {
    this.#db(fragment);
    return this.#highWaterWallMs[fragment];
  }

  /**
   * From the database's stats (mdb_stat: counts LMDB keeps, nothing is read): the entries exactly,
   * less the high-water mark's; the bytes estimated as the leaf pages at LMDB_LEAF_FILL less each
   * entry's overhead, plus the overflow pages that hold values too large for a leaf (~2 KiB and up).
   * Measured against the truth: -17 % for records written in key order (their leaves fill up), +14
   * to +31 % for small records written scattered, +43 % for 1 KiB records (a few a leaf), +36 % for
   * 3 KiB ones (a value in overflow pages counts up to a page more than it holds), +2 % for 100 KiB
   * ones. Deletes may leave leaves down to a quarter full: up to 2.8 times the truth.
   */
  async fragmentSize(fragment: number): Promise<FragmentSize> {
    const db = this.#db(fragment);
    let stats: LmdbStats;
    try {
      stats = db.getStats() as LmdbStats;
    } catch (err) {
      throw lmdbError(err, this.#envOf[fragment]!.dataFile);
    }
    const keys = Math.max(0, stats.entryCount - (this.#highWaterWallMs[fragment] > 0 ? 1 : 0));
    // The high-water mark alone takes a leaf.
    if (keys === 0) return { keys: 0, bytes: 0 };
    const leafBytes =
      stats.treeLeafPageCount * (stats.pageSize - LMDB_PAGE_HEADER_BYTES) * LMDB_LEAF_FILL -
      keys * LMDB_ENTRY_OVERHEAD_BYTES;
    const bytes = Math.max(0, Math.round(leafBytes)) + stats.overflowPages * stats.pageSize;
    return { keys, bytes };
  }

  async dropFragment(fragment: number): Promise<void> {
    const db = this.#db(fragment);
    const env = this.#envOf[fragment]!;
    const highWater = this.#highWaterWallMs[fragment];
    // First void the fragment's logged writes: a replay must not bring them back.
    env.log?.appendDrop(fragment);
    try {
      // Empty the database but keep it: deleting it would close its DBI handle for every thread of
      // the process (a background reader may hold it). The high-water mark survives the drop: the
      // timestamps it covers were issued, and may live on in other replicas. In the write thread's
      // queue, not a synchronous transaction: this thread serves the worker's other fragments, and
      // would otherwise wait for the write lock (a batch being committed) and for the commit.
      await env.root.transaction(() => {
        db.clearSync();
        if (highWater > 0) db.putSync(META_HIGH_WATER_KEY, encodeHighWater(highWater));
      });
    } catch (err) {
      throw asStorageError(err);
    }
  }

  /** Copies each open group's env into `<targetDataDir>/lmdb/group-<g>` (mdb_env_copy2 from a read snapshot). */
  async backup(targetDataDir: string): Promise<void> {
    this.#checkOpen();
    try {
      for (const [g, env] of this.#envs) {
        const dir = lmdbGroupDir(targetDataDir, g);
        await fs.mkdir(dir, { recursive: true });
        // A committed state of the env, while writers go on.
        await env.root.backup(dir, false);
        await fsyncPath(path.join(dir, LMDB_DATA_FILE));
        await fsyncPath(dir);
      }
      await fsyncPath(path.join(targetDataDir, LMDB_DIR));
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
    const envs = [...this.#envs.values()];
    // Commits in flight settle first (their writers wait for them); lmdb-js flushes an env when
    // the last thread holding it closes it, or at the process's exit.
    await Promise.all(envs.map((env) => env.committing));
    await Promise.all(envs.map((env) => env.log?.close()));
    // Named databases are never closed one by one: mdb_dbi_close would invalidate the handle for
    // every thread sharing the env. Closing a root releases this thread's hold on its env only.
    this.#dbs.fill(undefined);
    this.#envOf.fill(undefined);
    const closed = await Promise.allSettled(envs.map((env) => env.root.close()));
    const failed = closed.find((c) => c.status === 'rejected');
    if (failed !== undefined) throw asStorageError(failed.reason);
  }

  /** Queues the writes of one env's batch; runs inside `batch` (see LmdbEnv). */
  #apply(writes: FragmentWrites[]): void {
    for (const w of writes) {
      const db = this.#dbs[w.fragment]!;
      // Deletes first, then puts: within one batch a put is the later write (FragmentWrites).
      for (const key of w.deletes) this.#handled(db.remove(this.#dataKey(key)));
      for (const [key, record] of w.puts) this.#handled(db.put(this.#dataKey(key), record));
      if (w.highWaterWallMs > this.#highWaterWallMs[w.fragment]) {
        this.#handled(db.put(META_HIGH_WATER_KEY, encodeHighWater(w.highWaterWallMs)));
      }
    }
  }

  /**
   * Each put or removal returns lmdb-js's promise for the transaction it joins — one per
   * transaction, though lmdb-js may start a new one partway — which rejects when the commit fails.
   * The batch's own promise reports that, so each of these is only marked handled (unhandled, it
   * ends the worker).
   */
  #handled(txnPromise: unknown): void {
    if (txnPromise === this.#handledTxnPromise || !(txnPromise instanceof Promise)) return;
    this.#handledTxnPromise = txnPromise;
    txnPromise.catch(ignore);
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

  /** The fragment's database, its env's read snapshot renewed first if `refreshReads` was called since. */
  #readable(fragment: number): FragmentDb {
    const db = this.#db(fragment);
    const env = this.#envOf[fragment]!;
    if (env.readGeneration !== this.#readGeneration) {
      env.root.resetReadTxn();
      env.readGeneration = this.#readGeneration;
    }
    return db;
  }

  /**
   * A second handle on the fragment's database whose reads copy only each record's stamp out of
   * lmdb's read buffer (`STAMP_READER_OPTIONS`): an anti-entropy span compares versions, not values.
   */
  #stampReader(fragment: number): FragmentDb {
    // The binary handle's checks, and the env's read snapshot renewed: both handles read through it.
    this.#readable(fragment);
    let db = this.#stampDbs[fragment];
    if (db === undefined) {
      const env = this.#envOf[fragment]!;
      try {
        db = env.root.openDB<Uint8Array, Uint8Array>(fragmentDbName(fragment), STAMP_READER_OPTIONS);
      } catch (err) {
        throw lmdbError(err, env.dataFile);
      }
      this.#stampDbs[fragment] = db;
    }
    return db;
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

/**
 * A stamp reader's handle: lmdb-js hands a decoder that copies (`decoderCopies`, set for an encoder
 * of its own) the shared read buffer itself, `length` patched to the value's size; this one copies
 * the stamp alone. Records are written through the fragment's binary handle only.
 */
const STAMP_READER_OPTIONS: DatabaseOptions & {
  encoder: { encode(): never; decode(bytes: Uint8Array): Buffer };
  keyEncoder: {
    writeKey(key: Uint8Array, target: Uint8Array, start: number): number;
    readKey(target: Uint8Array, start: number, end: number): Buffer;
  };
} = {
  // lmdb-js takes `encoder` and `keyEncoder` (documented, not in openDB's types).
  encoder: {
    encode(): never {
      throw new Error('a stamp reader does not write');
    },
    decode(bytes: Uint8Array): Buffer {
      const end =
        bytes.length < RECORD_HEADER_BYTES ? bytes.length : Math.min(bytes.length, valueOffsetOf(bytes));
      return copySlice.call(bytes, 0, end) as Buffer;
    },
  },
  // Range bounds are written as given (prefixed, as the binary handle's are); keys are read without
  // their prefix in the one copy lmdb-js makes of each, not in a second one (a span reads ~10^5).
  keyEncoder: {
    writeKey(key: Uint8Array, target: Uint8Array, start: number): number {
      target.set(key, start);
      return start + key.length;
    },
    readKey(target: Uint8Array, start: number, end: number): Buffer {
      return copySlice.call(target, start + PREFIX_BYTES, end) as Buffer;
    },
  },
};

/** A fresh prefixed key: range bounds are held by the iterator, so they cannot share the scratch. */
function dataKeyOf(key: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES + key.length);
  out[0] = PREFIX_DATA;
  out.set(key, PREFIX_BYTES);
  return out;
}
