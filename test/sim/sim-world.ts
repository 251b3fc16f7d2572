// The simulated parts of the replication simulator (replication-sim.ts): a node's committed store
// and the connections between nodes, which carry each message as the peer protocol's bytes (the
// real codecs: src/core/replication-wire.ts for batches, protobufjs for the rest). Nothing here
// decides anything the database does.

import type { RecordReader } from '../../src/core/fragment.js';
import { EnvelopeField, peekEnvelope } from '../../src/core/peer-frame.js';
import type {
  DataPage,
  FetchRequest,
  KeyRecord,
  PageRequest,
  SummaryPage,
} from '../../src/core/reconciler.js';
import { wallMsOf } from '../../src/core/record.js';
import type { AckLevel } from '../../src/core/replication-sender.js';
import { encodeReplicateBatch, readReplicateBatch } from '../../src/core/replication-wire.js';
import { decodeEnvelope, encodeEnvelope } from '../../src/threads/peer-messages.js';
import type { PageReader } from '../../src/workers/reconcile-span.js';

/** The fragment every message is about. */
const FRAGMENT = 0;

/** What nodes send each other about the fragment; batches and data pages name their newest wall ms. */
export type Message =
  | { kind: 'session-start'; sessionId: number }
  | { kind: 'session-reset' }
  | {
      kind: 'batch';
      sessionId: number;
      batchSeq: number;
      level: AckLevel;
      maxWallMs: number;
      ops: KeyRecord[];
    }
  | { kind: 'ack'; sessionId: number; batchSeq: number; level: AckLevel }
  | { kind: 'nack'; sessionId: number; batchSeq: number; error: string }
  | { kind: 'request'; q: PageRequest }
  | { kind: 'summaries'; page: SummaryPage }
  | { kind: 'fetch'; f: FetchRequest }
  | { kind: 'data'; page: DataPage; maxWallMs: number };

/** The newest wall ms among records, as a sender writes it into a batch or data page. */
export function maxWallMsOf(entries: readonly KeyRecord[]): number {
  let max = 0;
  for (const e of entries) max = Math.max(max, wallMsOf(e.record));
  return max;
}

/** A message as the peer protocol's bytes (an Envelope without the frame's length prefix). */
export function toWire(m: Message): Uint8Array {
  const fragment = FRAGMENT;
  switch (m.kind) {
    case 'session-start':
      return encodeEnvelope({ sessionStart: { fragment, sessionId: m.sessionId } });
    case 'session-reset':
      return encodeEnvelope({ sessionReset: { fragment } });
    case 'batch': {
      const { sessionId, batchSeq, level, maxWallMs, ops } = m;
      return encodeReplicateBatch({ fragment, sessionId, batchSeq, requiredAckLevel: level, maxWallMs, ops });
    }
    case 'ack':
      return encodeEnvelope({
        batchAck: { fragment, sessionId: m.sessionId, batchSeq: m.batchSeq, level: m.level },
      });
    case 'nack':
      return encodeEnvelope({
        batchNack: { fragment, sessionId: m.sessionId, batchSeq: m.batchSeq, error: m.error },
      });
    case 'request':
      return encodeEnvelope({ reconcileRequest: { fragment, ...m.q } });
    case 'summaries':
      return encodeEnvelope({ reconcileResponse: { fragment, ...m.page } });
    case 'fetch':
      return encodeEnvelope({ reconcileFetch: { fragment, ...m.f, keys: [...m.f.keys] } });
    case 'data':
      return encodeEnvelope({ reconcileData: { fragment, pageSeq: 0, maxWallMs: m.maxWallMs, ...m.page } });
  }
}

/** The message these bytes carry; the receiving driver's decoding, as src/workers/replication.ts. */
export function fromWire(bytes: Uint8Array): Message {
  if (peekEnvelope(bytes)?.field === EnvelopeField.ReplicateBatch) {
    const b = readReplicateBatch(bytes);
    if (b === undefined) throw new Error('a replication batch the codec could not read back');
    const ops = b.ops.map((op) => ({ key: Buffer.from(op.key), record: Buffer.from(op.record) }));
    const level = b.requiredAckLevel as AckLevel;
    return {
      kind: 'batch',
      sessionId: b.sessionId,
      batchSeq: b.batchSeq,
      level,
      maxWallMs: b.maxWallMs,
      ops,
    };
  }
  const e = decodeEnvelope(bytes);
  if (e.sessionStart !== undefined) return { kind: 'session-start', sessionId: e.sessionStart.sessionId };
  if (e.sessionReset !== undefined) return { kind: 'session-reset' };
  if (e.batchAck !== undefined) {
    const { sessionId, batchSeq, level } = e.batchAck;
    return { kind: 'ack', sessionId, batchSeq, level: level as AckLevel };
  }
  if (e.batchNack !== undefined) {
    const { sessionId, batchSeq, error } = e.batchNack;
    return { kind: 'nack', sessionId, batchSeq, error };
  }
  if (e.reconcileRequest !== undefined) return { kind: 'request', q: e.reconcileRequest };
  if (e.reconcileResponse !== undefined) return { kind: 'summaries', page: e.reconcileResponse };
  if (e.reconcileFetch !== undefined) {
    const f = e.reconcileFetch;
    return { kind: 'fetch', f: { ...f, keys: f.keys.map((k) => Buffer.from(k)) } };
  }
  if (e.reconcileData !== undefined) {
    const { maxWallMs, ...page } = e.reconcileData;
    return { kind: 'data', page, maxWallMs };
  }
  throw new Error('a message of no kind the simulator sends');
}

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
