// The storage contract every binding (lmdb, classic-level, memory) fulfils. A worker opens one
// KvStore and reads and writes the fragments it owns through it; nothing else writes them.
//
// Keys here are user keys (0..1024 bytes, the empty key included); each binding maps them to its own
// stored form. Values are versioned records (src/core/record.ts), opaque to the store.
//
// Two fences (DESIGN.md "native-bindings"):
//   committed — `commit()` has returned (or resolved): the batch survives the process dying.
//   stable    — `sync()` has resolved: everything committed before the call survives power loss.
// A store with a write-ahead log (`logsWrites`: lmdb, opened by its writer) reaches both earlier:
//   logged    — `log()` returned true: the writes survive the process dying (they are in the log's
//               file), before they are committed; `sync()` then makes them survive power loss.

export type StoreKind = 'lmdb' | 'level' | 'memory';

/** What an operator does about a store a binding found damaged, as every binding's error says it. */
export const DAMAGED_STORE_REMEDY =
  'the node cannot serve from it. In a cluster, move the data directory aside and restart the node ' +
  'empty: anti-entropy refills it from its replicas. A node without peers needs a backup restored ' +
  '(README "Backups").';
export const STORE_KINDS: readonly StoreKind[] = ['lmdb', 'level', 'memory'];

/**
 * What a memory store bound by `maxMemoryBytes` removes to make room (Redis's `maxmemory-policy`):
 * nothing (writes that add data are refused), the least recently used key, or the least recently
 * used key that has a deadline.
 */
export type EvictionPolicy = 'noeviction' | 'allkeys-lru' | 'volatile-lru';
export const EVICTION_POLICIES: readonly EvictionPolicy[] = ['noeviction', 'allkeys-lru', 'volatile-lru'];

/** The writes one commit applies to one fragment. */
export interface FragmentWrites {
  fragment: number;
  /** Keys and records to store; a later entry for the same key wins. */
  puts: Array<[key: Uint8Array, record: Uint8Array]>;
  /** Keys to remove. */
  deletes: Uint8Array[];
  /**
   * Largest timestamp wall-ms among records ever committed to the fragment, kept beside the data so
   * a restarted node's clock starts after everything it stored. 0 leaves it unchanged.
   */
  highWaterWallMs: number;
  /**
   * The fragment actor's generation of these writes, when an actor wrote them: a store that logs
   * (`log`) knows by it which logged writes a commit holds (those of this fragment logged at
   * generations up to this one).
   */
  generation?: number;
}

/** Where a page of an ordered iteration starts. */
export interface PageStart {
  key: Uint8Array;
  /** True: the page may begin at `key` itself; false: strictly after it (a resumed cursor). */
  inclusive: boolean;
}

export interface StoredEntry {
  key: Buffer;
  record: Buffer;
}

/**
 * How big a fragment's copy is: its entries (tombstones included), and the bytes of their keys and
 * records — what anti-entropy pulls of it, counted as a pull counts them (src/workers/replication.ts).
 * Each binding says how close it comes (`KvStore.fragmentSize`).
 */
export interface FragmentSize {
  keys: number;
  bytes: number;
}

export interface KvStore {
  readonly kind: StoreKind;
  /**
   * True when another thread of this process may open a read-only view of the fragments (lmdb), so
   * the background pool can scan them; false when the store has one owner (LevelDB, memory).
   */
  readonly sharesReaders: boolean;
  /** True when committed data outlives the process (false for memory). */
  readonly durable: boolean;
  /**
   * True when the store keeps a write-ahead log (lmdb opened by its writer): `log` makes writes
   * survive the process dying before their commit, and `sync` covers what was logged.
   */
  readonly logsWrites: boolean;
  /** What opening the store replayed from its write-ahead logs, when they held anything. */
  readonly replayed?: LogReplay;

  /** Makes a fragment usable, creating its namespace if it is new. */
  openFragment(fragment: number): Promise<void>;
  /**
   * Point read. The result is a view valid until the next call on this store, and may be the
   * store's own memory: copy what you keep, never modify it.
   */
  get(fragment: number, key: Uint8Array): Buffer | undefined;
  /**
   * Makes later reads on this thread see every commit made so far by any thread (lmdb keeps a read
   * snapshot per thread until told otherwise; the other stores always read the latest).
   */
  refreshReads(): void;
  /**
   * Up to `limit` entries in ascending key order from `start` (or the first key) to `end`
   * (exclusive; undefined = the fragment's last key). With `stampsOnly` a record may be cut to its
   * stamp (`stampOf`), which spares lmdb copying every value out of the map.
   */
  page(
    fragment: number,
    start: PageStart | undefined,
    end: Uint8Array | undefined,
    limit: number,
    stampsOnly?: boolean,
  ): Promise<StoredEntry[]>;
  /**
   * Applies the writes of several fragments, each fragment's atomically (one transaction per group
   * they touch); returns at the committed fence, once all are committed.
   * Keys and records are the caller's until then; a store that reads them later (LevelDB's batch
   * runs after the call returns) keeps its own copy.
   */
  commit(writes: FragmentWrites[]): void | Promise<void>;
  /**
   * Appends the writes to the write-ahead log, synchronously: on undefined they survive the process
   * dying, and are replayed into the store when it is next opened by its writer if their commit
   * never happened. Otherwise the append failed, and the answer says why (the log stays whole; the
   * writes are safe only once committed, and `sync` then waits for the store's own flush). A store
   * that keeps no log (`logsWrites` false) always fails.
   */
  log(writes: readonly FragmentWrites[]): string | undefined;
  /**
   * The stable fence: resolves once everything committed — or logged — before the call is on disk.
   */
  sync(): Promise<void>;
  /** The fragment's stored high-water timestamp wall-ms (0 if none). */
  highWaterWallMs(fragment: number): number;
  /**
   * The fragment's size as of now, without reading it whole: anti-entropy tells a peer copying the
   * fragment how much there is (on the first page of each round it serves). Exact for memory; lmdb
   * counts the keys exactly and estimates the bytes from its pages; LevelDB counts a small fragment
   * exactly and estimates a larger one (see each binding).
   */
  fragmentSize(fragment: number): Promise<FragmentSize>;
  /** Removes a fragment's data whole. */
  dropFragment(fragment: number): Promise<void>;
  /**
   * Writes a consistent copy of everything committed so far into the data directory
   * `targetDataDir`, in this store's own layout, and fsyncs it; the store keeps serving meanwhile
   * (lmdb copies each group's env from a read snapshot; LevelDB each group this store owns from an
   * iterator's). The store's files only: the caller copies the manifest. The memory store, which
   * has no files, rejects with InvalidInput.
   */
  backup(targetDataDir: string): Promise<void>;
  /**
   * Bytes of this thread's memory the committed data takes (the memory store's records and their
   * bookkeeping, MEMORY_ENTRY_OVERHEAD_BYTES an entry); 0 for the stores that keep it on disk.
   */
  memoryBytes(): number;
  /**
   * Removes committed entries, least recently used first (read or written; of those with a deadline
   * under `volatile-lru`; approximately, from a sample), until they took `bytes` of memory or none is
   * left to remove; returns how many it removed. Only a memory store opened with an eviction policy
   * evicts (0 for the others).
   */
  evict(bytes: number): number;
  /** Releases the store; later calls fail. */
  close(): Promise<void>;
}

/** What a store's opening replayed from its write-ahead logs (lmdb's writer). */
export interface LogReplay {
  segments: number;
  /** Entries read from whole frames, and how many were newer than the store and written to it. */
  entries: number;
  applied: number;
  /** Bytes after the last whole frame of each segment: appends a crash cut short, never acknowledged. */
  tornBytes: number;
}

/** What a worker needs to open its store. */
export interface StoreLocation {
  kind: StoreKind;
  /** Node data directory (unused for memory). */
  dataDir: string;
  fragmentCount: number;
  /** The groups (LevelDB databases, LMDB environments) this store opens (manifest.ts `groupsOfWorker`). */
  groups: number[];
  /** The group count bound at first start (manifest.ts); 0 for the memory store. */
  groupCount: number;
  /**
   * lmdb: this store is the groups' writer (a worker), so it replays their write-ahead logs when it
   * opens and keeps them (`KvStore.logsWrites`). Readers (the main thread, the pool) leave it unset.
   */
  writer?: boolean;
  /** lmdb writer: bytes of a write-ahead log segment before the next (default WAL_SEGMENT_BYTES_DEFAULT). */
  walSegmentBytes?: number;
  /**
   * memory: a tombstone is stored as the key's absence. Only for a node without peers: no replica can
   * bring back what a delete removed, and nothing the store holds outlives the process, so the
   * tombstone guards nothing and would only take memory (`maxMemoryBytes`) for ever.
   */
  dropTombstones?: boolean;
  /**
   * memory, with `dropTombstones` only: note each entry's last use so `evict` can remove the least
   * recently used (an evicted key is absent, as if deleted; on a node with peers a replica would
   * bring it back). Undefined: `noeviction`.
   */
  eviction?: Exclude<EvictionPolicy, 'noeviction'>;
}
