// The simulated parts of the replication simulator (replication-sim.ts), which the driver's unit
// test (test/unit/replication-driver.test.ts) uses too: a node's committed store, its clock and the
// replication driver's one timer on simulated time, and the connections between nodes, which carry
// the peer protocol's bytes as the driver wrote them. Nothing here decides anything the database
// does; the real actor is opened here with the limits a worker gives it.

import type { DriverClock } from '../../src/core/clock.js';
import { FragmentCore, type RecordReader } from '../../src/core/fragment.js';
import {
  BACKGROUND_OPS_PER_SEC_DEFAULT,
  FLUSH_INTERVAL_MS_DEFAULT,
  FLUSH_PENDING_BYTES_MAX,
  FLUSH_PENDING_WRITES_MAX,
  QUEUE_OPS_MAX_DEFAULT,
  VALUE_BYTES_MAX_DEFAULT,
} from '../../src/core/limits.js';
import type { KvStore, PageStart, StoredEntry } from '../../src/native-bindings/kv-store.js';

/** A replicating fragment actor over `store` with the default limits, as a worker opens one. */
export function replicatingActor(
  store: RecordReader,
  fragment: number,
  storedHighWaterWallMs: number,
  nowMs: number,
): FragmentCore {
  return new FragmentCore(
    {
      fragment,
      replicates: true,
      valueBytesMax: VALUE_BYTES_MAX_DEFAULT,
      storedHighWaterWallMs,
      queueOpsMax: QUEUE_OPS_MAX_DEFAULT,
      backgroundOpsPerSec: BACKGROUND_OPS_PER_SEC_DEFAULT,
      flushIntervalMs: FLUSH_INTERVAL_MS_DEFAULT,
      flushWritesMax: FLUSH_PENDING_WRITES_MAX,
      flushBytesMax: FLUSH_PENDING_BYTES_MAX,
    },
    store,
    nowMs,
  );
}

/** A node's wall clock on simulated time, and the one timer a driver keeps, fired by the simulator. */
export class SimClock implements DriverClock {
  /** When the timer is due; Infinity while none is set. */
  private atMs = Number.POSITIVE_INFINITY;
  private fire: (() => void) | undefined;

  constructor(private readonly read: () => number) {}

  get timerAtMs(): number {
    return this.atMs;
  }

  nowMs(): number {
    return this.read();
  }

  setTimer(atMs: number, fire: () => void): void {
    this.atMs = atMs;
    this.fire = fire;
  }

  clearTimer(): void {
    this.atMs = Number.POSITIVE_INFINITY;
    this.fire = undefined;
  }

  /** Fires the timer if it is due; true when it did. */
  fireDue(): boolean {
    const fire = this.fire;
    if (fire === undefined || this.read() < this.atMs) return false;
    this.clearTimer();
    fire();
    return true;
  }
}

/** One node's committed copy of the fragment, its keys in order, as the actor's store shows it. */
export class SimStore implements RecordReader, Pick<KvStore, 'page' | 'fragmentSize'> {
  readonly data = new Map<string, Buffer>();
  /** Bytes of the keys and records in `data`. */
  private bytes = 0;
  /** The high-water mark the commits carried: what a restarted actor starts from. */
  highWaterWallMs = 0;
  private readonly sorted: Buffer[] = [];

  get(_fragment: number, key: Uint8Array): Uint8Array | undefined {
    return this.data.get(Buffer.from(key).toString('latin1'));
  }

  /** A commit's puts in order, each replacing what its key held (the actor decided the merge). */
  commit(puts: ReadonlyArray<readonly [Uint8Array, Uint8Array]>, highWaterWallMs: number): void {
    for (const [key, record] of puts) {
      const k = Buffer.from(key).toString('latin1');
      const held = this.data.get(k);
      if (held === undefined) this.sorted.splice(this.firstAtOrAfter(Buffer.from(key)), 0, Buffer.from(key));
      this.bytes += key.length + record.length - (held === undefined ? 0 : key.length + held.length);
      this.data.set(k, Buffer.from(record));
    }
    this.highWaterWallMs = Math.max(this.highWaterWallMs, highWaterWallMs);
  }

  /** Pages in key order from `start`, as KvStore.page (the one fragment, to its last key). */
  async page(
    _fragment: number,
    start: PageStart | undefined,
    end: Uint8Array | undefined,
    limit: number,
  ): Promise<StoredEntry[]> {
    if (end !== undefined) throw new Error('the simulated store reads pages to the last key only');
    let at = start === undefined ? 0 : this.firstAtOrAfter(Buffer.from(start.key));
    const skipStart =
      start !== undefined && !start.inclusive && at < this.sorted.length && this.sorted[at].equals(start.key);
    if (skipStart) at++;
    return this.sorted
      .slice(at, at + limit)
      .map((key) => ({ key, record: this.data.get(key.toString('latin1'))! }));
  }

  /** Exact, as the memory store's. */
  async fragmentSize(): Promise<{ keys: number; bytes: number }> {
    return { keys: this.data.size, bytes: this.bytes };
  }

  private firstAtOrAfter(key: Buffer): number {
    let lo = 0;
    let hi = this.sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (Buffer.compare(this.sorted[mid], key) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** A message on its way: when it arrives, between whom, and its bytes. */
export interface InFlight {
  atMs: number;
  from: number;
  to: number;
  bytes: Uint8Array;
}

/** A connection between two nodes: FIFO each way, as TCP; all in flight is lost when it breaks. */
export class Connection {
  up = false;
  /** While down: when it may come back. */
  upAtMs = 0;
  readonly queues: [InFlight[], InFlight[]] = [[], []];

  constructor(
    readonly low: number,
    readonly high: number,
  ) {}

  joins(node: number): boolean {
    return this.low === node || this.high === node;
  }

  other(node: number): number {
    return node === this.low ? this.high : this.low;
  }

  /** Queues `bytes`, arriving no sooner than `atMs` and never before what was sent earlier. */
  push(from: number, to: number, bytes: Uint8Array, atMs: number): void {
    const queue = this.queues[to === this.low ? 0 : 1];
    const last = queue.length > 0 ? queue[queue.length - 1].atMs : 0;
    queue.push({ atMs: Math.max(last, atMs), from, to, bytes });
  }

  /** Breaks the connection: what was in flight is lost. */
  drop(): void {
    this.up = false;
    this.queues[0].length = 0;
    this.queues[1].length = 0;
  }
}
