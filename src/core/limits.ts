// Every bound Tessera enforces, in one place. Units last; each says why its value.
// Module-load assertions at the bottom check how the limits relate to each other.

import { assert } from './assert.js';

/** Redis Cluster's slot space; fragments own contiguous slot ranges of it. */
export const SLOT_COUNT = 16384;
/** A fragment owns at least one slot, so there can be no more fragments than slots. */
export const FRAGMENT_COUNT_MAX = SLOT_COUNT;
/** The default keeps 16 slot ranges: enough to spread over the workers of a large machine. */
export const FRAGMENT_COUNT_DEFAULT = 16;

/** Keys up to 1 KiB, as the data model promises; LMDB's own key limit (1978 bytes) leaves room for a prefix. */
export const KEY_BYTES_MAX = 1024;
/** Default largest value: 4 MiB keeps a value plus its envelope inside a 16 MiB peer frame with room to spare. */
export const VALUE_BYTES_MAX_DEFAULT = 4 * 1024 * 1024;
/** The configurable value limit may not exceed this: a record must fit one peer frame (16 MiB) with its header. */
export const VALUE_BYTES_MAX_CEILING = 15 * 1024 * 1024;
/**
 * A published Pub/Sub message, channel name and message together: what one PUBLISH may carry. Redis
 * bounds it only by its bulk limit; here it must also cross to peers in one frame.
 */
export const PUBSUB_PAYLOAD_BYTES_MAX = 15 * 1024 * 1024;
/** Hard limit of one peer frame (spec §4.6). */
export const FRAME_BYTES_MAX = 16 * 1024 * 1024;

/** Largest frame accepted before the peer handshake completes: only Hello and HelloAuth fit (spec §4.1). */
export const PREAUTH_FRAME_BYTES_MAX = 4 * 1024;
/** Both handshake flights must complete within this (spec §4.3). */
export const HANDSHAKE_TIMEOUT_MS = 5_000;
/** A cluster secret shorter than this is refused: the HMAC proof is only as strong as the secret. */
export const CLUSTER_SECRET_BYTES_MIN = 32;
/** Redial backoff of a peer connection: doubles from the base to the maximum, plus 0–50 % jitter. */
export const PEER_RECONNECT_MS_BASE = 100;
export const PEER_RECONNECT_MS_MAX = 30_000;
/** Connection attempt timeout of a dial. */
export const PEER_CONNECT_TIMEOUT_MS = 5_000;
/**
 * Bytes queued for one peer socket beyond which the connection is closed (fail-closed, as the seed
 * does): senders replay after the reconnect, and forwarded operations fail with a Network error.
 */
export const PEER_OUTBOUND_BYTES_MAX = 64 * 1024 * 1024;
/**
 * Bytes queued for a peer beyond which Pub/Sub messages for it are dropped (at most once, as Redis's
 * delivery) rather than queued: a flood of publishes must not push the connection to the limit
 * above and so cut replication off.
 */
export const PUBSUB_PEER_QUEUED_BYTES_MAX = 16 * 1024 * 1024;
/** A forwarded operation chain stops after this many nodes (spec §5.7). */
export const MAX_FORWARD_HOPS = 4;
/**
 * A forwarded operation that would go back to the node that sent it (the two tables disagree for a
 * moment: one has a move's end, the other not yet) waits this long at most for this node's table
 * or serving to change before it fails.
 */
export const FORWARD_DISAGREEMENT_WAIT_MS = 2_000;
/** A forwarded operation without a result after this long fails with a Network error. */
export const FORWARD_TIMEOUT_MS = 5_000;
/** Forwarded operations one node may have waiting on its peers; past it callers get Backpressure. */
export const FORWARD_IN_FLIGHT_MAX = 65_536;
/**
 * Replication: ops and bytes per ReplicateBatch, and how long a partial batch waits. A sender had
 * one batch in flight, so one fragment replicated at most a batch per round trip: with 512 a hot
 * fragment (hash tags, or redis-benchmark --cluster, which sends each client's keys to one slot)
 * outran its sender under load until the backlog overflowed into anti-entropy; 2048 carries the
 * same load with no overflow and a third less CPU per write (bench/RESULTS.md "Cluster"), and
 * stays well inside the fragment queue a receiver applies a batch through (QUEUE_OPS_MAX_DEFAULT).
 */
export const REPLICATION_BATCH_OPS_MAX = 2048;
export const REPLICATION_BATCH_BYTES_MAX = 1024 * 1024;
export const REPLICATION_BATCH_INTERVAL_MS = 2;
/**
 * Batches a sender keeps in flight toward one peer, retired in order by each ACK: a fragment written
 * by clients that WAIT for every write is bounded by a batch per round trip no longer, and 8 small
 * batches cover a link's latency at loopback to LAN rates. Their ops and bytes are bounded too: a
 * receiver applies the window through its fragment queue (QUEUE_OPS_MAX_DEFAULT), so it holds two
 * full batches at most, and the frames in transit stay a few MiB.
 */
export const REPLICATION_WINDOW_BATCHES = 8;
export const REPLICATION_WINDOW_OPS_MAX = 2 * REPLICATION_BATCH_OPS_MAX;
export const REPLICATION_WINDOW_BYTES_MAX = 4 * REPLICATION_BATCH_BYTES_MAX;
/** A sender's backlog bound (ops and bytes, buffered plus in flight); past it the backlog is dropped and anti-entropy repairs. */
export const REPLICATION_BUFFER_OPS_MAX = 100_000;
export const REPLICATION_BUFFER_BYTES_MAX = 64 * 1024 * 1024;
/** An unacknowledged batch is replayed in a new session after this long (spec §5.3: 30 s). */
export const REPLICATION_ACK_TIMEOUT_MS = 30_000;
/** After a NACK or a failed anti-entropy round a sender waits this long before it retries (seed: ~1 s). */
export const REPLICATION_RETRY_FLOOR_MS = 1_000;
/** Default period of anti-entropy rounds per (fragment, peer). */
export const ANTI_ENTROPY_INTERVAL_MS_DEFAULT = 60_000;
/**
 * Keys a node's routine anti-entropy rounds compare per second at most (`--anti-entropy-rate`),
 * shared by its workers; rounds asked for (a failover's catch-up, a copy's verification), a
 * session's first round and the repair after a dropped replication buffer are not paced. A routine
 * round reads every key of its fragment on both replicas: unpaced, four idle nodes of 1 GiB (16
 * fragments, 3 replicas) ran them back to back and kept most of two cores busy; paced at 20 000
 * keys a second a node still spent ~0.2 of a core (about 10 µs per key compared, both sides'
 * threads together). At this rate such a node compares all its copies with their peers in about
 * 6 minutes, and a node below ~150 000 keys every interval. CockroachDB paces its consistency
 * checks the same way (`server.consistency_check.max_rate`, 8 MiB/s, once a day).
 */
export const ANTI_ENTROPY_KEYS_PER_SEC_DEFAULT = 5_000;
/** The least `--anti-entropy-rate` other than 0 (unlimited). */
export const ANTI_ENTROPY_KEYS_PER_SEC_MIN = 100;
/** The most `--anti-entropy-rate` short of unlimited. */
export const ANTI_ENTROPY_KEYS_PER_SEC_MAX = 1_000_000_000;
/**
 * Each routine round comes at a point spread over this fraction of the interval around it (1: from
 * half an interval to one and a half after the last round ended). A node's rounds start together
 * when a peer connects; at one fixed period every (fragment, peer) round then ran at once, each
 * interval, and the node's clients felt it (a 64 MiB node under load: p99 from 30 ms to 500 ms for
 * the seconds it took). memberlist staggers its periodic timers' first ticks for the same reason.
 */
export const ANTI_ENTROPY_INTERVAL_SPREAD = 1;
/**
 * Routine anti-entropy rounds a worker runs at once; the others wait their turn, oldest due first.
 * Rounds asked for (a failover's catch-up, a copy's verification) and a session's first round do
 * not wait. A routine round reads every key of its fragment on both nodes: at 1 GiB a node (16
 * fragments, 3 replicas) ~20 ran at once for 15-30 s each, and the pages of a failover's catch-up
 * waited behind theirs in the background pool for 5 s and more (3.3-3.5 s taking turns one at a
 * time, 4.4-4.6 s two at a time). Rounds that take longer in turn than the interval allows run back
 * to back: a large node's sweep becomes a steady trickle instead of a flood.
 */
export const ANTI_ENTROPY_ROUTINE_ROUNDS_MAX = 1;
/**
 * An anti-entropy round without progress (a page answered, a fetch sent or waiting on --move-rate,
 * a page of records merged) for this long is abandoned and retried.
 */
export const ANTI_ENTROPY_ROUND_TIMEOUT_MS = 10_000;
/** Summaries per anti-entropy page (spec §6: 256) and the soft byte target of a page (≈1 MiB). */
export const RECONCILE_PAGE_ITEMS_MAX = 256;
/**
 * Keys a requester describes in one anti-entropy page at most. A page starts at
 * RECONCILE_PAGE_ITEMS_MAX keys and doubles after each page the peer found nothing in, back to the
 * start after one that listed keys: replicas that agree compare a fragment of 86 000 keys (1 GiB on
 * a node of 16 fragments, 3 replicas) in 25 page round trips instead of ~340, each a turn of two
 * workers, two main threads and two pool threads (a failover's catch-up took 5 s and more). Past
 * 2048 keys a page's ranges grow instead of their number (reconciler.ts `rangeKeysOf`). Not more:
 * a page's keys and stamps are live objects until it is worked out, and past about 4 096 they
 * outlive V8's young generation, which copies them (reading a key of a page of 16 384 cost 2.7×
 * one of 4 096). Half of what a responder reads for a page (RECONCILE_SPAN_KEYS_MAX), so a page's
 * ranges fit its span.
 */
export const RECONCILE_DESCRIBED_KEYS_MAX = 4096;
/**
 * The same where the page is read in the fragment's worker (a store without the background pool's
 * second reader): a page of 2048 keys holds the worker's actor for about a millisecond or two.
 */
export const RECONCILE_DESCRIBED_KEYS_INLINE_MAX = 2048;
/** Keys per digest range a requester may say it cut its page into (the largest page's ranges). */
export const RECONCILE_RANGE_KEYS_MAX = 32;
/**
 * Anti-entropy pages waiting for the background pool; past it a page is read in the fragment's
 * worker. Rounds bound themselves (one page in flight per round and per served round), so this only
 * caps a burst, such as every fragment's first round when a peer connects.
 */
export const ANTI_ENTROPY_POOL_TASKS_MAX = 256;
export const RECONCILE_PAGE_BYTES_MAX = 1024 * 1024;
/**
 * Records an anti-entropy page carries at most for the keys past the requester's last key, which it
 * lacks for certain: sent whole in place of summaries to fetch, within RECONCILE_PAGE_BYTES_MAX.
 * A copy into an empty replica is all such pages: with summaries of 256 keys and a fetch each, a
 * copy of 100-byte values spent most of its time on the round trips of its pages.
 */
export const RECONCILE_PAGE_RECORDS_MAX = 2048;

/** Node ids are 1–255 bytes, as the seed's wire format and error texts say (spec §2.1). */
export const NODE_ID_BYTES_MAX = 255;

/** Wall milliseconds of a hybrid logical clock timestamp: 48 bits (year 10889). */
export const HLC_WALL_MS_MAX = 2 ** 48 - 1;
/** Logical counter of a timestamp: 16 bits; a burst past it borrows the next millisecond. */
export const HLC_LOGICAL_MAX = 0xffff;
/** A remote or stored timestamp further ahead of the wall clock than this is refused (spec §2.3). */
export const MAX_CLOCK_SKEW_MS_DEFAULT = 5 * 60 * 1000;
/** TTL deadlines are wall milliseconds stored in 48 bits, like timestamps; 0 means "no expiry". */
export const EXPIRES_AT_MS_MAX = HLC_WALL_MS_MAX;

/** Fragment TTL cleaner period (spec §1.3 `clean_interval`). */
export const CLEAN_INTERVAL_MS_DEFAULT = 30_000;
/** Keys the cleaner examines per fragment per event-loop turn, so a sweep never stalls the actor. */
export const CLEAN_PAGE_KEYS_MAX = 512;
/**
 * Keys the background pool examines for the cleaner per task (lmdb): only the expired ones come
 * back, so a page can be larger than one the actor reads itself.
 */
export const CLEAN_POOL_PAGE_KEYS = 4096;
/**
 * Keys the cleaner examines per second per worker, so its cost stays bounded however many keys a
 * node holds: a pass over N keys takes at least N / rate seconds (expired values are hidden from
 * reads meanwhile; the cleaner only reclaims their space).
 */
export const CLEAN_KEYS_PER_SEC_DEFAULT = 100_000;

/**
 * How long `memory`-durability writes may stay unflushed before the actor commits them anyway;
 * bounds what a process crash can lose at that level. 0 (the default): they commit at the end of
 * the worker turn that applied them, right after their replies went out — a turn is already a
 * batch, and a commit that waits for a later turn touches writes gone cold in the cache: pipelined
 * SETs ran 23–37 % faster than at 2 ms, and 100 ms cost a further ~20 % and a 3× p99
 * (bench/RESULTS.md "Memory flush interval").
 */
export const FLUSH_INTERVAL_MS_DEFAULT = 0;
/** Unflushed writes per fragment that force a commit regardless of the interval. */
export const FLUSH_PENDING_WRITES_MAX = 4096;
/** Unflushed bytes per fragment that force a commit. */
export const FLUSH_PENDING_BYTES_MAX = 16 * 1024 * 1024;
/**
 * Over a store with a write-ahead log: logged bytes per fragment not yet handed to the store beyond
 * which no further generation is logged until a commit takes them. Writes then wait for the store,
 * so a disk that commits slower than the log appends bounds the writers, not the worker's memory.
 */
export const LOGGED_PENDING_BYTES_MAX = 16 * 1024 * 1024;
/**
 * Over a store with a write-ahead log: a worker starts a store transaction no sooner than this
 * after its last one ended. The writes are durable once logged, so a transaction may wait to take
 * more of them: one per turn of a lightly loaded worker flushed a few writes' pages each time
 * (unpipelined SET through the worker ports, lmdb: +15–25 % SET/s for −20 % CPU per write;
 * bench/RESULTS.md "Write-ahead log"). Fragments stay dirty that much longer, so the main
 * thread's snapshot reads of a fragment just written go to its worker meanwhile.
 */
export const LOGGED_COMMIT_GAP_MS = 20;
/**
 * Consecutive failed commits of a fragment before the requests waiting on them are answered with
 * the error. A failed commit's writes stay pending and are retried, and a retry that succeeds
 * answers the earlier waiters too: a transient failure (lmdb-js's free-list code has failed one
 * commit and not the next, bench/RESULTS.md "Worker scaling on 16 cores") costs a retry, not an
 * error. Once this many have failed in a row, the fragment's waiters are answered with the error
 * and new writes are refused with it (reads go on) until a retry succeeds.
 */
export const COMMIT_ATTEMPTS_MAX = 3;
/** Delay before the first retry of a failed commit; it doubles with each consecutive failure. */
export const COMMIT_RETRY_DELAY_MS_MIN = 1;
/** The longest delay between retries: a store that keeps failing (a full disk) is retried this often. */
export const COMMIT_RETRY_DELAY_MS_MAX = 1000;

/**
 * One stable-log frame (src/core/stable-log.ts) at most: a frame larger than this in a log an older
 * version of the lmdb store left is read as torn, not allocated (src/native-bindings/stable-log-file.ts).
 */
export const STABLE_LOG_FRAME_BYTES_MAX = 16 * 1024 * 1024;

/**
 * Bytes of one write-ahead log segment of the lmdb store (src/native-bindings/write-ahead-log.ts)
 * before the next is started (`--wal-segment-size`); a segment is removed once its writes are in
 * LMDB's flushed state, so a start replays at most about this much per group beyond what the last
 * transactions took. 64 MiB as etcd's WAL segments: a rotation (an fdatasync, a file created) is rare.
 */
export const WAL_SEGMENT_BYTES_DEFAULT = 64 * 1024 * 1024;
/** Smallest segment: below this a rotation's fdatasync and file creation come every few turns. */
export const WAL_SEGMENT_BYTES_MIN = 64 * 1024;
/** Largest segment: more only lengthens the replay after a crash. */
export const WAL_SEGMENT_BYTES_MAX = 1024 * 1024 * 1024;

/**
 * How often a worker port sends the main thread its INFO commandstats, latencystats and errorstats
 * figures when they moved: a snapshot of every command's counts and latency buckets, so not at the
 * 100 ms of its plain counters.
 */
export const PORT_STATS_PUBLISH_INTERVAL_MS = 1_000;

/** Queued operations per fragment per priority; a full queue answers Backpressure (spec §8.1). */
export const QUEUE_OPS_MAX_DEFAULT = 8192;
/** Background-priority operations each fragment admits per second (the seed's default, spec §1.3). */
export const BACKGROUND_OPS_PER_SEC_DEFAULT = 1000;
/** Longest delay a Node timer keeps: past it, setTimeout fires at once. Timeouts given by callers are checked against it. */
export const TIMER_DELAY_MS_MAX = 2 ** 31 - 1;
/** Operations a worker processes in one turn before yielding to its event loop (timers, store callbacks). */
export const WORKER_TURN_OPS_MAX = 4096;
/** Header-only replies a worker sends together in one result record (ResultKind.Acks). */
export const RESULT_ACKS_MAX = 1024;
/**
 * Requests each fragment with work in a turn may run, at least, however many fragments share the
 * turn (they split WORKER_TURN_OPS_MAX otherwise): a turn spread thin still moves each a real step.
 */
export const FRAGMENT_TURN_OPS_MIN = 64;
/**
 * Request records up to this size are copied out of the ring together with their neighbours, in
 * one copy; a larger one gets a copy of its own, so a small record kept long (in a replication
 * backlog) never holds a large one's memory.
 */
export const SHARED_COPY_RECORD_BYTES_MAX = 16 * 1024;
/**
 * A failing store is logged at most once per this interval (a full disk fails every turn's commit);
 * the failures in between are counted in the next line.
 */
export const STORAGE_FAILURE_LOG_INTERVAL_MS = 5_000;

/**
 * A worker thread's young generation (V8 new space, MiB). A worker turn keeps every operation of a
 * drained batch alive until its commit and reply; with V8's default size a scavenge lands inside
 * that window often enough that the batch is promoted, and the old generation then fills with
 * garbage that only mark-compact reclaims (measured: half the runs at ~1.5× the CPU per write).
 */
export const WORKER_YOUNG_GENERATION_MB = 96;
/**
 * What an entry of the memory store takes beyond its key and record bytes: the Map's slot, the
 * key's string header and the record's Buffer object (measured: ~160 bytes an entry of a 12-byte key
 * and a 30–5 000-byte record, heap and external memory after a full GC). `maxMemoryBytes` counts it.
 */
export const MEMORY_ENTRY_OVERHEAD_BYTES = 160;
/**
 * What a key the memory store may evict takes on top (an eviction policy keeps it in a Map: a slot
 * for the key's string, which the entry already holds, and its use stamp; measured ~29 bytes an
 * entry for 10⁶ keys after a full GC). `maxMemoryBytes` counts it.
 */
export const MEMORY_RECENCY_ENTRY_BYTES = 32;
/**
 * Keys an eviction compares, to remove the one least recently used (Redis's `maxmemory-samples`,
 * 5 by default there): read in turn from the fragments' hands, all of them in a store that small.
 */
export const EVICTION_SAMPLE_KEYS = 16;
/**
 * Old-generation room a memory store's worker has beyond `maxMemoryBytes` (its queues, pending
 * writes, turn copies and replication backlog), so the bound refuses writes before V8's own
 * heap limit ends the thread.
 */
export const WORKER_HEAP_HEADROOM_MB = 512;
/**
 * The largest `maxMemoryBytes`: 1 TiB. Workers publish their memory in KiB on the fragment board's
 * 32-bit cells, which holds up to 2 TiB each.
 */
export const MAX_MEMORY_BYTES_CEILING = 2 ** 40;

/**
 * Requests the main thread encodes for a worker before it shows them to the worker without waiting
 * for the end of the burst: a worker starts on the first part of a large burst (a long pipeline, a
 * `putMany`) while the main thread encodes the rest, and the replies to that part come back sooner.
 */
export const REQUEST_PUBLISH_RECORDS = 256;

/** Byte capacity of each SharedArrayBuffer ring; must hold two of the largest records (see below). */
export const RING_BYTES_MIN = 8 * 1024 * 1024;
/** Bytes of one ring record header beyond its payload: the u32 length prefix. */
export const RING_RECORD_HEADER_BYTES = 4;
/**
 * Requests the main thread holds for one worker while its ring is full; past it callers get
 * Backpressure instead of an unbounded wait.
 */
export const RING_OVERFLOW_RECORDS_MAX = 65_536;
/**
 * Period of each thread's ring watchdog: a ring wait whose counter has moved for a whole period was
 * not woken (a wake-up lost below us: seen about once in 10^6 waits under CPU contention on Node 20),
 * and the watchdog ends it. A timed `Atomics.waitAsync` would do the same at ~30 % more CPU per wait.
 */
export const RING_WAKE_CHECK_MS = 100;

/** Workers at most; more threads than this would only contend on the store's write lock. */
export const WORKER_COUNT_MAX = 64;
/** Restart backoff of a crashed worker: doubles from the minimum to the maximum. */
export const WORKER_RESTART_BACKOFF_MS_MIN = 50;
export const WORKER_RESTART_BACKOFF_MS_MAX = 5_000;
/** How long a worker may take to open its stores before the start is failed. */
export const WORKER_START_TIMEOUT_MS = 60_000;

/** Keys a scan page returns at most. */
export const SCAN_PAGE_KEYS_MAX = 10_000;
/** Default keys per scan page. */
export const SCAN_PAGE_KEYS_DEFAULT = 100;
/** Keys a pattern-filtered scan examines per page before returning what it has, so no page stalls. */
export const SCAN_EXAMINED_KEYS_MAX = 100_000;
/**
 * Pattern pages over lmdb that may examine more keys than this run in the background pool; smaller
 * ones (Redis SCAN … COUNT 10) are cheaper in the fragment's own worker than a pool round trip.
 */
export const SCAN_POOL_EXAMINED_MIN = 10_000;
/** Bytes of keys and values one scan page carries (past it a page ends early), so a page fits a ring record. */
export const SCAN_PAGE_BYTES_MAX = 2 * 1024 * 1024;
/** Glob patterns are matched by a backtracking matcher; a length bound keeps it cheap. */
export const SCAN_PATTERN_BYTES_MAX = 1024;
/** Background-pool tasks waiting for a thread; past it scans answer Backpressure. */
export const POOL_QUEUE_TASKS_MAX = 64;
/** Background-pool tasks started per second, like the Background queue's rate limit. */
export const POOL_TASKS_PER_SEC_DEFAULT = 200;
/**
 * The background pool's threads run at this nice value (Linux; 0 is a thread's default, 19 the
 * lowest): on busy cores the threads serving clients go first, as a database's background work
 * (rebalancing reads, compactions) yields to its foreground. Each nice step is ~1.25× less CPU
 * weight: at 10 a pool thread has about a tenth of a serving thread's share while both want a core.
 */
export const POOL_THREAD_NICE = 10;
/** How long closing the pool waits for its threads to finish loading before it ends them anyway. */
export const POOL_THREAD_LOAD_WAIT_MS_MAX = 10_000;
/** How often closing the pool looks again at threads still loading. */
export const POOL_THREAD_LOAD_POLL_MS = 5;
/** How long closing the pool waits for running tasks before it ends the threads anyway. */
export const POOL_CLOSE_TIMEOUT_MS = 10_000;

/** Keys and values per putMany / getMany call: a bound on one call's memory. */
export const BATCH_ITEMS_MAX = 100_000;

/**
 * Largest bulk argument. Redis allows 512 MiB (proto-max-bulk-len); we store nothing larger than a
 * value, whose ceiling is 15 MiB, so 16 MiB leaves slack for it and refuses everything else early.
 */
export const RESP_BULK_BYTES_MAX = 16 * 1024 * 1024;
/** Most arguments in one multibulk command: Redis's bound before 7.0 raised it to INT_MAX. */
export const RESP_MULTIBULK_ARGS_MAX = 1024 * 1024;
/**
 * Longest inline command line (before its LF), and longest length line (`*<n>` / `$<n>` before its
 * CR): Redis's PROTO_INLINE_MAX_SIZE.
 */
export const RESP_INLINE_BYTES_MAX = 64 * 1024;
/**
 * Unparsed plus partial-command bytes one connection may hold; the driver closes the connection past
 * it (see `RespParser.bufferedBytes`). Redis's client-query-buffer-limit is 1 GiB; ours only needs
 * one maximal SET (a 16 MiB bulk, a key, headers) with room for pipelined commands behind it.
 */
export const RESP_CLIENT_BUFFER_BYTES_MAX = 32 * 1024 * 1024;
/** Error messages crossing a ring or the wire are cut to this many bytes. */
export const ERROR_MESSAGE_BYTES_MAX = 1024;

/** Smallest power of two ≥ n. */
export function ceilPowerOfTwo(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/** Bytes of the largest record a ring must carry for values up to `valueBytesMax`. */
export function ringRecordBytesMax(valueBytesMax: number): number {
  // request header + key + value, or a result carrying a stored record; 64 KiB covers every header.
  return valueBytesMax + KEY_BYTES_MAX + 64 * 1024;
}

/**
 * Ring capacity for a value limit: a power of two whose largest payload (capacity/2 − 8, see
 * src/threads/ring.ts) holds the largest record.
 */
export function ringBytesFor(valueBytesMax: number): number {
  return ceilPowerOfTwo(
    Math.max(RING_BYTES_MIN, 2 * (ringRecordBytesMax(valueBytesMax) + 2 * RING_RECORD_HEADER_BYTES)),
  );
}

// ---- Operating limits of the node's faces, peers and workers ----

/** Clients connected at once; more are refused with Redis's error. */
export const RESP_CLIENTS_MAX = 10_000;
/** Consecutive failed restarts after which a worker is given up and its requests fail at once. */
export const WORKER_RESTART_ATTEMPTS_MAX = 8;
/** Ops per replication batch a sender may be configured to send (the seed's MAX_WIRE_BATCH_ITEMS role): bounds per-op framing overhead. */
export const REPLICATION_BATCH_OPS_CEILING = 4096;
/** Longest configured period (flush, clean, …), one hour: longer is almost certainly a unit mistake (seconds for milliseconds). */
export const INTERVAL_MS_MAX = 3_600_000;
/** How long a cluster node waits for its replicas on shutdown unless told otherwise. */
export const DRAIN_TIMEOUT_MS_DEFAULT = 5_000;
/**
 * Replica acknowledgements a client may ask of one write or WAIT: more than any replica count a
 * cluster runs (a write's answer carries the count reached in 7 bits of a byte on the ring).
 */
export const REPLICA_ACKS_MAX = 127;
/** How long a write that asks for replica acknowledgements waits for them before it is refused (NOREPLICAS). */
export const REPLICA_ACK_TIMEOUT_MS_DEFAULT = 5_000;
/**
 * Longest one wait for replica acknowledgements runs at the serving node: shorter than
 * FORWARD_TIMEOUT_MS, so a forwarded wait is answered before its forwarding gives up on it; a
 * longer WAIT (or one without a timeout) asks again, round after round.
 */
export const REPLICA_WAIT_ROUND_MS_MAX = 2_000;
/** Waits for replica acknowledgements one worker holds at once; past it a wait is refused as backpressure. */
export const REPLICA_WAITS_PER_WORKER_MAX = 65_536;
/** How often forwarded requests are checked against FORWARD_TIMEOUT_MS. */
export const FORWARD_TIMEOUT_CHECK_MS = 500;
/** A batch of forwarded operations past this many bytes leaves at once rather than at the end of the turn. */
export const FORWARD_BATCH_FLUSH_BYTES = 1024 * 1024;
/** Pending reply bytes that are handed to the socket at once instead of at the end of the turn. */
export const CONNECTION_FLUSH_BYTES = 1024 * 1024;
/**
 * How long a RESP connection closed after its last reply (QUIT, a protocol error) keeps reading
 * what the client still sends before it lets go: closing with unread input resets the connection,
 * and a reset can discard the reply before the client reads it.
 */
export const CONNECTION_LINGER_MS = 1000;
/** Keys `deleteAll` deletes per page: one scan page, its deletes in flight together. */
export const DELETE_ALL_PAGE_KEYS = 1000;
/** Keys read per page while counting them (DBSIZE, INFO keyspace). */
export const KEY_COUNT_PAGE_KEYS = 1000;
/**
 * A new count for INFO also waits this many times as long as the last count took, so however large
 * the keyspace, monitoring that polls INFO keeps the workers counting at most a tenth of the time.
 */
export const KEY_COUNT_REUSE_PER_COUNT_MS = 10;
/** How long a key count stays good enough for INFO's keyspace line before INFO starts a new one. */
export const KEY_COUNT_REUSE_MS_DEFAULT = 10_000;
/** Keys COUNTKEYSINSLOT examines at most (like KEYS, it walks the slot's fragment). */
export const COUNT_KEYS_IN_SLOT_EXAMINED_MAX = 1_000_000;
/** Keys COUNTKEYSINSLOT reads per page. */
export const COUNT_KEYS_IN_SLOT_PAGE_KEYS = 10_000;
/** Anti-entropy rounds at most this often: each compares every fragment's summary with a peer's. */
export const ANTI_ENTROPY_INTERVAL_MS_MIN = 10;
/** Anti-entropy rounds at least once a day. */
export const ANTI_ENTROPY_INTERVAL_MS_MAX = 86_400_000;
/**
 * Subcommands of container commands (`client|list`) INFO commandstats counts apart; past it a
 * subcommand is counted under its container, so clients sending made-up subcommands cannot grow the
 * table without bound. Redis's containers have under 200 subcommands in all.
 */
export const COMMAND_STATS_SUBCOMMANDS_MAX = 256;
/** Redis's `slowlog-log-slower-than` default: commands of 10 ms or more are kept. */
export const SLOWLOG_LOG_SLOWER_THAN_US_DEFAULT = 10_000;
/** Redis's `slowlog-max-len` default. */
export const SLOWLOG_MAX_LEN_DEFAULT = 128;
/** A longer slow log is refused at start: each entry keeps up to 32 arguments of 128 bytes. */
export const SLOWLOG_MAX_LEN_MAX = 100_000;
/** Arguments a slow log entry keeps, the last saying how many more there were (Redis's 32). */
export const SLOWLOG_ENTRY_ARGS_MAX = 32;
/** Bytes of each argument a slow log entry keeps (Redis's 128). */
export const SLOWLOG_ENTRY_ARG_BYTES_MAX = 128;
/** Samples LATENCY HISTORY keeps per event, one a second (Redis's LATENCY_TS_LEN). */
export const LATENCY_HISTORY_SAMPLES = 160;
/** Largest --latency-monitor-threshold: a command's main-thread time is far below a minute. */
export const LATENCY_MONITOR_THRESHOLD_MS_MAX = 60_000;
/** A manifest is a few hundred bytes; anything far larger is not one. */
export const MANIFEST_BYTES_MAX = 64 * 1024;

// ---- Membership and failure detection (core/membership.ts) ----

/** One probe per interval, round-robin over a shuffled member list: memberlist's DefaultLANConfig ProbeInterval. */
export const MEMBERSHIP_PROBE_INTERVAL_MS = 1_000;
/** A direct probe unanswered this long goes indirect: memberlist's ProbeTimeout (LAN). */
export const MEMBERSHIP_PROBE_TIMEOUT_MS = 500;
/**
 * A member probing for another answers nack after this long without an ack (Lifeguard). Within the
 * prober's indirect wait (interval − timeout, 500 ms) with 100 ms for the nack to travel: a late nack
 * would count as missing and raise the prober's health score for nothing.
 */
export const MEMBERSHIP_RELAY_TIMEOUT_MS = 400;
/** Members asked to probe for us after a direct timeout: memberlist's IndirectChecks. */
export const MEMBERSHIP_INDIRECT_PROBES = 3;
/**
 * Suspicion lasts at least this many probe intervals (×log10 N past 10 members), memberlist's
 * SuspicionMult formula with 2 for the LAN 4: with a prompt confirming probe (the members that hear
 * a suspicion probe its target next) a killed node is unreachable everywhere in ≈ 1.5 s detection +
 * 2 s, the 5 s goal for a small cluster. False suspicions cost little: Down still waits
 * MEMBERSHIP_DOWN_AFTER_MS_DEFAULT, and a live member refutes within a probe round.
 */
export const MEMBERSHIP_SUSPICION_MULT = 2;
/** Independent confirmations that bring a suspicion down to its floor: memberlist's LAN SuspicionMult − 2. */
export const MEMBERSHIP_SUSPICION_CONFIRMATIONS = 2;
/** An unconfirmed suspicion lasts at most this multiple of the floor: memberlist's SuspicionMaxTimeoutMult. */
export const MEMBERSHIP_SUSPICION_MAX_TIMEOUT_MULT = 6;
/** Lifeguard's local health: probe timeout and interval stretch up to ×8 (memberlist's AwarenessMaxMultiplier). */
export const MEMBERSHIP_AWARENESS_MAX_MULT = 8;
/** Pending updates go to a few random members this often besides riding on probes: memberlist's GossipInterval. */
export const MEMBERSHIP_GOSSIP_INTERVAL_MS = 200;
/** Members each gossip round goes to: memberlist's GossipNodes. */
export const MEMBERSHIP_GOSSIP_NODES = 3;
/** Each update is sent RetransmitMult × ⌈log10(N + 1)⌉ times: memberlist's RetransmitMult (LAN). */
export const MEMBERSHIP_RETRANSMIT_MULT = 4;
/**
 * Updates on one message, sent and accepted; more is refused as malformed. memberlist fills a
 * 1400-byte UDP packet, about a dozen updates; 16 leaves room for a node id near its limit.
 */
export const MEMBERSHIP_UPDATES_PER_MESSAGE_MAX = 16;
/** Updates waiting to be gossiped; past it the most-sent go first (memberlist prunes its queue the same way). */
export const MEMBERSHIP_BROADCAST_QUEUE_MAX = 4096;
/** Members known at once, removed ones included (they are kept to refuse them): bounds a join reply and a sync. */
export const MEMBERSHIP_MEMBERS_MAX = 1024;
/** Probes relayed for others at once (ping-req); one per member probing us is the normal load. */
export const MEMBERSHIP_RELAYS_MAX = 256;
/** Full-state exchange with one random member, so views converge after partitions: memberlist's PushPullInterval. */
export const MEMBERSHIP_PUSH_PULL_INTERVAL_MS = 30_000;
/**
 * An unreachable member is Down once a majority has reported it unreachable for this long (the
 * issue's --down-after default), so a restart or a GC pause moves nothing; Pekko's split-brain
 * resolver waits 20 s (stable-after) after its ≈5.5 s detection, about the same.
 */
export const MEMBERSHIP_DOWN_AFTER_MS_DEFAULT = 30_000;
/**
 * A member that still cannot reach an unreachable member says so again this often, so every view
 * holds fresh reports; a report not renewed within MEMBERSHIP_REPORT_TTL_MS no longer counts
 * toward Down (the reporter may reach it again, or its refutation may not have reached us).
 */
export const MEMBERSHIP_REPORT_REFRESH_MS = 5_000;
/** Three refreshes: a report survives two lost renewals. */
export const MEMBERSHIP_REPORT_TTL_MS = 15_000;
/** A join request unanswered this long is sent again, to the next seed. */
export const MEMBERSHIP_JOIN_RETRY_MS = 1_000;
/**
 * A node that starts without its earlier run's data under a static member list (the memory store, a
 * new data directory with --peers) first asks its members whether they knew its id before: it waits
 * this long at most for one of them to answer (a member that never started, or datagrams lost), then
 * starts as a member, as a new cluster's node does. Its members, running, answer within a round trip.
 */
export const MEMBERSHIP_DISCOVERY_MS_MAX = 3_000;
/** The question asked again, of the members that have not answered, this often. */
export const MEMBERSHIP_DISCOVERY_RESEND_MS = 500;
/** A leaving node stays Exiting, then Removed, this long each so the news is gossiped before it stops. */
export const MEMBERSHIP_LEAVE_LINGER_MS = 1_000;
/**
 * A node that left stays, gossiping its Removed, until a majority of the others confirmed they
 * heard it (they refuse its messages), or this long: a partition could otherwise swallow the news
 * and leave it Down in their views, for an operator to remove.
 */
export const MEMBERSHIP_LEAVE_CONFIRM_MAX_MS = 300_000;
/**
 * A wake-up this late means this node's event loop stalled (a pause, a long GC): the stall counts
 * against its own health, not against the members it could not hear. One probe timeout: an ack may
 * have waited unread past its deadline.
 */
export const MEMBERSHIP_STALL_MS = 500;
/**
 * A stall this long may have missed an update's whole spread (each member passes it on a few
 * times, within about a second at these sizes): the node exchanges its whole view with a member at
 * once. Shorter stalls (a GC pause under load) do not each cost a push-pull.
 */
export const MEMBERSHIP_STALL_SYNC_MS = 2_000;
/**
 * A membership message up to this size travels as one UDP datagram beside the peer connection, so a
 * probe never waits behind replication bytes queued on it; a larger one (a full-state sync, a join
 * reply) takes the peer connection. memberlist's UDPBufferSize: fits an Ethernet MTU unfragmented.
 */
export const MEMBERSHIP_DATAGRAM_BYTES_MAX = 1_400;
/** Shortest and longest --down-after: below a few probe rounds a GC pause would move data. */
export const MEMBERSHIP_DOWN_AFTER_MS_MIN = 2_000;
export const MEMBERSHIP_DOWN_AFTER_MS_MAX = 24 * 60 * 60 * 1000;
/**
 * Cluster events (member events, coordinator changes, moves) a node keeps for `GET /cluster/events`
 * readers resuming with Last-Event-ID; older ones slide out and a reader asking for them is told how
 * many it lost (datum's sliding overflow).
 */
export const CLUSTER_EVENTS_KEPT = 1_024;
/** Event-stream readers at once per node; more are refused with 503. */
export const CLUSTER_EVENT_READERS_MAX = 16;
/**
 * Bytes queued to one event-stream reader before it counts as slow: it is then ended with an
 * `overflow` event naming the next sequence to resume from, never buffered without bound.
 */
export const CLUSTER_EVENT_READER_QUEUE_BYTES_MAX = 256 * 1024;
/** A coordinator taking over asks the members that have not reported their tables again this often. */
export const COORDINATOR_REPORT_RETRY_MS = 1_000;
/** The coordinator sends every member its table digest this often; a member whose table differs pulls it. */
export const COORDINATOR_DIGEST_INTERVAL_MS = 5_000;
/**
 * A member refusing changes from a coordinator its membership view does not name exchanges its whole
 * view with that coordinator at most this often: gossip that missed it (a leave, a takeover) would
 * otherwise reach it only at the next push-pull, up to 30 s later, and it would refuse the table
 * meanwhile.
 */
export const COORDINATOR_VIEW_SYNC_INTERVAL_MS = 1_000;
/** The shortest --admin-token: a guessable token guards nothing. */
export const ADMIN_TOKEN_BYTES_MIN = 16;
/** A change request's JSON body on the admin port (`POST /cluster/…`): a few fields, never more. */
export const ADMIN_BODY_BYTES_MAX = 64 * 1024;
/** An admin path on the peer wire (`/cluster/remove`, …): the longest path the admin port serves fits. */
export const ADMIN_PATH_BYTES_MAX = 64;
/**
 * An admin answer's fields beyond status and message, as JSON on the peer wire: a plan's changes for
 * every fragment of a large keyspace (a few hundred KiB) with room to spare, in one peer frame.
 */
export const ADMIN_RESULT_BYTES_MAX = 8 * 1024 * 1024;
/**
 * Admin requests this node has asked of peers and not had answered: a few operators and scrapers,
 * each request fanning out to at most every member (`/cluster/metrics`). Past it a request is
 * answered `Failed` at once.
 */
export const ADMIN_REQUESTS_PENDING_MAX = 1_024;
/** Admin requests from peers this node serves at once; more are answered `Failed` at once. */
export const ADMIN_REQUESTS_SERVING_MAX = 64;
/**
 * How long a change forwarded to the coordinator may take before it is answered `DeadlineExceeded`:
 * a removal is a membership round trip; well within the admin port's 10 s request timeout, which
 * the CLI's own timeout matches, so the operator hears the status, not a timeout.
 */
export const ADMIN_FORWARD_DEADLINE_MS = 5_000;
/** How long `/cluster/metrics` waits for members' samples; a member later than that is reported in `errors`. */
export const CLUSTER_METRICS_DEADLINE_MS = 2_000;
/** A member's host:peerPort: a 253-byte DNS name or a bracketed IPv6 address, a colon, 5 digits. */
export const MEMBER_ADDRESS_BYTES_MAX = 253 + 2 + 1 + 5;

// ---- Placement coordinator and assignment table (control-plane-anchors.md §3, datum-agent.md §3) ----

/**
 * History entries kept per fragment in the assignment table, oldest dropped first: enough to read
 * the last few moves of a fragment in `/cluster/placement`, while the table stays bounded (fragments
 * × entries) as churn goes on.
 */
export const ASSIGNMENT_HISTORY_ENTRIES_MAX = 16;
/** A history reason is a fixed word plus at most one node id (`node_down:<id>`). */
export const ASSIGNMENT_REASON_BYTES_MAX = NODE_ID_BYTES_MAX + 16;
/** Replicas per fragment at most (`--replicas`): more copies than this buy no safety a cluster needs. */
export const REPLICAS_PER_FRAGMENT_MAX = 7;
/**
 * Replica moves a node receives at once unless `--max-moves-per-node` says otherwise: Scylla's 2
 * streaming sessions per shard and Riak's `transfer_limit` 2 (anchors §3), so a join or a leave
 * moves steadily without starving client traffic.
 */
export const PLACEMENT_MOVES_IN_PER_NODE_DEFAULT = 2;
/** Replica moves a node sends at once by default (Scylla's 2 outbound sessions, Riak's 2). */
export const PLACEMENT_MOVES_OUT_PER_NODE_DEFAULT = 2;
/** Largest `--max-moves-per-node`: Riak's "common value" is 8; far more only queues behind the disk. */
export const PLACEMENT_MOVES_PER_NODE_MAX = 32;
/**
 * Replicas a node may hold above an even share: the balance cap is ⌈F·R/N⌉ + this. One spare slot
 * lets rendezvous keep most of its choices (minimal movement) while no node carries a second share.
 */
export const PLACEMENT_BALANCE_SLACK_REPLICAS = 1;

assert(
  PLACEMENT_MOVES_IN_PER_NODE_DEFAULT <= PLACEMENT_MOVES_PER_NODE_MAX &&
    PLACEMENT_MOVES_OUT_PER_NODE_DEFAULT <= PLACEMENT_MOVES_PER_NODE_MAX,
  'default move limits exceed their ceiling',
);

/** The coordinator plans again this often while moves wait (actordb's placement_poll_interval, 1 s). */
export const PLACEMENT_PLAN_INTERVAL_MS = 1_000;
/**
 * Serving transfers (coordinator.ts servingTransfers) a settled table makes per plan interval: each
 * new serving replica catches the fragment up from the others before it serves, its requests
 * waiting meanwhile, so they go a few at a time (CockroachDB moves leases to balance gradually too).
 */
export const PLACEMENT_SERVING_TRANSFERS_PER_PLAN_MAX = 8;
/** A failed hold, verification or drop of a fragment is tried again after this long. */
export const PLACEMENT_RETRY_MS = 1_000;
/**
 * A handoff that keeps failing is tried again after PLACEMENT_RETRY_MS doubled for each failure in
 * a row, up to this many times it. Each try has every new replica pull the whole copy again: a
 * handoff held up by one target (one that refuses it, or is slow) had the others compare the
 * fragment every second for as long as it lasted.
 */
export const PLACEMENT_DRAIN_RETRY_BACKOFF_MAX = 8;
/**
 * How long one placement step may wait on the workers: the anti-entropy round that verifies a
 * gained copy, or a new replica's acknowledgement of a handoff (actordb's BOOTSTRAP_TIMEOUT, 30 s);
 * a step that runs out is retried, never given up.
 */
export const PLACEMENT_STEP_TIMEOUT_MS = 30_000;

/**
 * How long a node handing over a copy waits for each replica to pull it whole (its table to catch
 * up, a complete round, a fence at stable: a placement step each at most); a drain that runs out is
 * retried, never given up.
 */
export const ABSORB_TIMEOUT_MS = 3 * PLACEMENT_STEP_TIMEOUT_MS;

/**
 * How long a node restarting in a cluster waits for its reachable peers' connections before it
 * serves (a node joining also for its admission and the cluster's table), so it forwards what they
 * serve from its first request on. Redis Cluster answers CLUSTERDOWN until a restarted node reaches
 * the others; a peer that is down costs a start this long.
 */
export const PEERS_AT_START_WAIT_MS = 2_000;
/**
 * How long a node that became a fragment's serving replica by a failover holds the fragment's
 * requests while it catches up from the other replicas (the goal for the window is 1 s);
 * past it, it serves with what its copy has.
 */
export const FAILOVER_CATCH_UP_MS_MAX = 5_000;
/** Requests held per fragment during a catch-up; more are refused (TRYAGAIN) until it ends. */
export const FAILOVER_HELD_REQUESTS_MAX = 10_000;
/**
 * How long a handover waits for the copy's verifying round against the replica that hands over,
 * when that round still runs (the copy was published once a round against another replica ended):
 * once it ends, the drain completes the copy; past this wait, a round follows the drain instead.
 * The rounds of one copy end within a few hundred milliseconds of each other under load.
 */
export const HANDOVER_VERIFY_WAIT_MS = 1_000;
/** Replica-list changes `GET /cluster/moves` lists, newest first. */
export const MOVES_RECENT_MAX = 64;
/**
 * Ranks a fragment's rendezvous order is kept past the deepest one asked (placement.ts): a member
 * that goes strikes one out of the lists that hold it, and a list is weighed again over every
 * member only once the planner asks past what is left. The placement's cap sends some fragments
 * several ranks deep, more so after a change: at 3, the first plan after a Down over 16 384
 * fragments and 1 000 members weighed ~38 000 pairs again, at 8 ~7 000 (the kept orders cost a few
 * MiB at most).
 */
export const RENDEZVOUS_SPARE_RANKS = 8;
/**
 * Weighs (SHA-256 of a member and a fragment, ~0.5 µs) the coordinator makes in one go when it must
 * rank cold before planning: ~16 ms, then RENDEZVOUS_SLICE_PAUSE_MS for the event loop. A cold
 * ranking over 1 000 members and 16 384 fragments is 16 million weighs: ~500 slices.
 */
export const RENDEZVOUS_WEIGHS_PER_SLICE = 32_768;
/** Between two slices of a cold ranking, the event loop's turn (membership probes, clients). */
export const RENDEZVOUS_SLICE_PAUSE_MS = 10;
/** Fragment counts whose rendezvous rankings are kept at once (a node has one; a simulator may run several). */
export const RENDEZVOUS_RANKINGS_KEPT_MAX = 4;
/** Reasons the planner is blocked that the coordinator's log line names (the rest are counted). */
export const PLACEMENT_BLOCKED_LISTED_MAX = 8;
/** A verified copy tells the coordinator it is ready again this often until its move finishes. */
export const PLACEMENT_READY_RESEND_MS = 2_000;
/**
 * Bytes per second a node's anti-entropy rounds pull at most (`--move-rate`), each worker an even
 * share: CockroachDB's snapshot rate (kv.snapshot_rebalance.max_rate, 32 MiB/s), so a move's copy
 * leaves clients most of the disk and the link. 0 lifts the limit.
 */
export const MOVE_RATE_BYTES_PER_SEC_DEFAULT = 32 * 1024 * 1024;
/**
 * The lowest limit: a fetch's data pages (about RECONCILE_PAGE_BYTES_MAX each) arrive whole, so a
 * slower rate would only stretch the waits after each, and a copy's verification past its step time.
 */
export const MOVE_RATE_BYTES_PER_SEC_MIN = 64 * 1024;
/** The highest limit short of none: past any link; 0 is the way to say unlimited. */
export const MOVE_RATE_BYTES_PER_SEC_MAX = 64 * 1024 ** 3;
/** A worker's pull bucket saves up this much of its rate: after a pause, a second's pull goes at once. */
export const MOVE_RATE_BURST_MS = 1_000;

assert(
  MOVE_RATE_BYTES_PER_SEC_MIN <= MOVE_RATE_BYTES_PER_SEC_DEFAULT &&
    MOVE_RATE_BYTES_PER_SEC_DEFAULT <= MOVE_RATE_BYTES_PER_SEC_MAX,
  'the default move rate lies outside its bounds',
);

/**
 * How often a fragment that cannot finish its handoff is warned about (`--drain-warn-interval`;
 * actordb's placement_drain_warn_interval, 10 s). Observability only: nothing is dropped on a timer.
 */
export const PLACEMENT_DRAIN_WARN_INTERVAL_MS_DEFAULT = 10_000;

// ---- Cluster state file (native-bindings/cluster-state-file.ts) ----

/**
 * A table on the peer wire (a report, or the whole table after a pull), as the JSON the data
 * directory stores, within one peer frame with room for the envelope: 16384 fragments with three
 * replicas and full histories of short ids fit.
 */
export const PLACEMENT_TABLE_BYTES_MAX = FRAME_BYTES_MAX - 64 * 1024;
/** Member records in `<dataDir>/cluster-state.json`: every member membership admits, and this node. */
export const CLUSTER_STATE_MEMBERS_MAX = MEMBERSHIP_MEMBERS_MAX + 1;
/**
 * Bytes of `<dataDir>/cluster-state.json` at most, checked before it is read whole at a start. The
 * assignment table dominates: at FRAGMENT_COUNT_MAX fragments with every history full and replicas
 * named by fresh node ids (`n-` and 12 hex digits) it is about 55 MiB at 3 replicas and 90 MiB at
 * REPLICAS_PER_FRAGMENT_MAX. A state that would not fit is not written (the old file stays), so a
 * node never writes what its restart would refuse.
 */
export const CLUSTER_STATE_BYTES_MAX = 128 * 1024 * 1024;
/** A member record's share of the file: its id, a host:port address with room, and JSON framing. */
const CLUSTER_STATE_MEMBER_BYTES_TYPICAL = NODE_ID_BYTES_MAX + 1024;

assert(
  CLUSTER_STATE_MEMBERS_MAX * CLUSTER_STATE_MEMBER_BYTES_TYPICAL <= CLUSTER_STATE_BYTES_MAX / 16,
  'a full member list must leave the cluster state file to the table',
);

assert(FRAGMENT_COUNT_DEFAULT <= FRAGMENT_COUNT_MAX, 'default fragment count exceeds the slot count');
assert(
  VALUE_BYTES_MAX_CEILING + KEY_BYTES_MAX + NODE_ID_BYTES_MAX + 64 <= STABLE_LOG_FRAME_BYTES_MAX,
  'a stable log frame must hold the largest write',
);
assert(
  REPLICATION_BATCH_OPS_MAX * 2 <= QUEUE_OPS_MAX_DEFAULT,
  'a replicated batch must fit a fragment queue with room for clients',
);
assert(
  REPLICATION_WINDOW_OPS_MAX >= REPLICATION_BATCH_OPS_MAX &&
    REPLICATION_WINDOW_BYTES_MAX >= REPLICATION_BATCH_BYTES_MAX,
  'a full batch must fit the window',
);
assert(
  REPLICATION_WINDOW_OPS_MAX * 2 <= QUEUE_OPS_MAX_DEFAULT,
  'a sender window must fit a fragment queue with room for clients',
);
assert(
  REPLICATION_WINDOW_OPS_MAX <= REPLICATION_BUFFER_OPS_MAX &&
    REPLICATION_WINDOW_BYTES_MAX <= REPLICATION_BUFFER_BYTES_MAX,
  'the window is part of the backlog',
);
assert(VALUE_BYTES_MAX_DEFAULT <= VALUE_BYTES_MAX_CEILING, 'default value limit exceeds its ceiling');
assert(
  VALUE_BYTES_MAX_CEILING + KEY_BYTES_MAX + 64 * 1024 <= FRAME_BYTES_MAX,
  'a maximal record must fit one peer frame',
);
assert(
  PUBSUB_PAYLOAD_BYTES_MAX + 64 * 1024 <= FRAME_BYTES_MAX,
  'a published message must fit one peer frame',
);
assert(
  PUBSUB_PEER_QUEUED_BYTES_MAX + FRAME_BYTES_MAX <= PEER_OUTBOUND_BYTES_MAX,
  'Pub/Sub alone must never fill a peer queue to its limit',
);
assert(ringBytesFor(VALUE_BYTES_MAX_CEILING) <= 2 ** 30, 'ring counters need capacity ≤ 2^30');
assert(
  ADMIN_PATH_BYTES_MAX + ADMIN_BODY_BYTES_MAX + ERROR_MESSAGE_BYTES_MAX + ADMIN_RESULT_BYTES_MAX + 64 <=
    FRAME_BYTES_MAX,
  'an admin message must fit in one peer frame',
);
/** Framing bytes of one scan entry in a ring record (u16 key length + u32 record length). */
export const SCAN_ENTRY_FRAMING_BYTES = 6;
assert(
  SCAN_PAGE_BYTES_MAX + SCAN_PAGE_KEYS_MAX * SCAN_ENTRY_FRAMING_BYTES + KEY_BYTES_MAX + 64 <=
    RING_BYTES_MIN / 2 - 2 * RING_RECORD_HEADER_BYTES,
  'a full scan page (which stops before the entry that would pass its byte bound) must fit a ring record',
);
assert(
  RING_RECORD_HEADER_BYTES + 8 + 4 * RESULT_ACKS_MAX <= RING_BYTES_MIN / 2,
  'a full Acks result must fit a ring record',
);
assert(CLEAN_PAGE_KEYS_MAX <= WORKER_TURN_OPS_MAX, 'a cleaner page must fit in one worker turn');
assert(RESP_BULK_BYTES_MAX >= VALUE_BYTES_MAX_CEILING, 'a RESP bulk must carry the largest value');
assert(
  RESP_CLIENT_BUFFER_BYTES_MAX >= RESP_BULK_BYTES_MAX + KEY_BYTES_MAX + 64,
  'one maximal SET must fit a client buffer',
);
assert(REPLICA_ACKS_MAX <= 0x7f, "a write's answer carries the replicas it reached in 7 bits");
assert(
  REPLICA_WAIT_ROUND_MS_MAX < FORWARD_TIMEOUT_MS,
  'a forwarded replica wait must answer before its forwarding times out',
);
