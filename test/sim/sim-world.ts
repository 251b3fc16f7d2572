// The simulated parts of the replication simulator (replication-sim.ts): a node's committed store
// and the connections between nodes. Nothing here decides anything the database does.

import type { RecordReader } from '../../src/core/fragment.js';
import type { DataPage, FetchRequest, PageRequest, SummaryPage } from '../../src/core/reconciler.js';
import type { AckLevel } from '../../src/core/replication-sender.js';
import type { PageReader } from '../../src/workers/reconcile-span.js';

/** What nodes send each other: the peer protocol's messages about one fragment, undecoded. */
export type Message =
  | { kind: 'session-start'; sessionId: number }
  | { kind: 'session-reset' }
  | { kind: 'batch'; sessionId: number; batchSeq: number; level: AckLevel; ops: Array<[Buffer, Buffer]> }
  | { kind: 'ack'; sessionId: number; batchSeq: number; level: AckLevel }
  | { kind: 'nack'; sessionId: number; batchSeq: number; error: string }
  | { kind: 'request'; q: PageRequest }
  | { kind: 'summaries'; page: SummaryPage }
  | { kind: 'fetch'; f: FetchRequest }
  | { kind: 'data'; page: DataPage };

/** One node's committed copy of the fragment, its keys in order, as the actor's store shows it. */
export class SimStore implements RecordReader {
  readonly data = new Map<string, Buffer>();
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
      if (!this.data.has(k)) this.sorted.splice(this.firstAtOrAfter(Buffer.from(key)), 0, Buffer.from(key));
      this.data.set(k, Buffer.from(record));
    }
    this.highWaterWallMs = Math.max(this.highWaterWallMs, highWaterWallMs);
  }

  /** Pages in key order, as KvStore.page bound to the fragment. */
  readonly read: PageReader = async (start, limit) => {
    let at = start === undefined ? 0 : this.firstAtOrAfter(Buffer.from(start.key));
    const skipStart =
      start !== undefined && !start.inclusive && at < this.sorted.length && this.sorted[at].equals(start.key);
    if (skipStart) at++;
    return this.sorted
      .slice(at, at + limit)
      .map((key) => ({ key, record: this.data.get(key.toString('latin1'))! }));
  };

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

/** A message on its way: when it arrives, and between whom. */
export interface InFlight {
  atMs: number;
  from: number;
  to: number;
  message: Message;
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

  /** Queues `message`, arriving no sooner than `atMs` and never before one sent earlier. */
  push(from: number, to: number, message: Message, atMs: number): void {
    const queue = this.queues[to === this.low ? 0 : 1];
    const last = queue.length > 0 ? queue[queue.length - 1].atMs : 0;
    queue.push({ atMs: Math.max(last, atMs), from, to, message });
  }

  /** Breaks the connection: what was in flight is lost. */
  drop(): void {
    this.up = false;
    this.queues[0].length = 0;
    this.queues[1].length = 0;
  }
}
