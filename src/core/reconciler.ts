// Anti-entropy for one (fragment, peer), as two pure state machines (spec §6, A7): the requesting
// side of a round — page through the peer's (key, version) summaries in key order, fetch the keys
// where the peer is newer, hand their records over to be merged — and the responding side, which
// checks that requests continue the round it serves and that fetches ask only for keys it
// advertised. Store reads are the driver's: summaries arrive as pages it read, and the freshest local
// version comes from an injected synchronous reader (as the fragment actor's RecordReader).
//
// A round pulls: it repairs this node from the peer. The peer's own round toward this node repairs
// the peer, so both converge to the LWW winner.

import { KEY_BYTES_MAX, RECONCILE_PAGE_BYTES_MAX, RECONCILE_PAGE_ITEMS_MAX } from './limits.js';
import { compareVersions, isWellFormedRecord, RECORD_HEADER_BYTES, wallMsOf } from './record.js';

/** The freshest local version of a key (a view valid until the next call), or undefined. */
export interface VersionReader {
  current(key: Buffer): Uint8Array | undefined;
}

export interface KeyRecord {
  key: Uint8Array;
  record: Uint8Array;
}
export interface SummaryPage {
  sessionId: number;
  roundId: number;
  pageSeq: number;
  summaries: ReadonlyArray<{ key: Uint8Array; stamp: Uint8Array }>;
  done: boolean;
}
export interface DataPage {
  sessionId: number;
  roundId: number;
  chunkSeq: number;
  entries: readonly KeyRecord[];
  done: boolean;
}
export interface PageRequest {
  sessionId: number;
  roundId: number;
  pageSeq: number;
  afterKey: Uint8Array;
}
export interface FetchRequest {
  sessionId: number;
  roundId: number;
  chunkSeq: number;
  keys: readonly Uint8Array[];
}

/** Checks records arriving from a peer before any is merged. */
export interface RecordCheck {
  fragment: number;
  fragmentOf(key: Uint8Array): number;
  nowMs: number;
  maxClockSkewMs: number;
}

/** Why records from a peer cannot be merged, or undefined when all can. */
export function checkRecords(entries: readonly KeyRecord[], c: RecordCheck): string | undefined {
  for (const e of entries) {
    if (e.key.length > KEY_BYTES_MAX)
      return `replicated key of ${e.key.length} bytes exceeds ${KEY_BYTES_MAX}`;
    if (c.fragmentOf(e.key) !== c.fragment)
      return `replicated key does not belong to declared fragment ${c.fragment}`;
    if (!isWellFormedRecord(e.record)) return 'malformed replicated record';
    const wallMs = wallMsOf(e.record);
    if (wallMs > c.nowMs + c.maxClockSkewMs) {
      return `replicated timestamp ${wallMs} is ${wallMs - c.nowMs} ms ahead of this node's clock (max skew ${c.maxClockSkewMs} ms)`;
    }
  }
  return undefined;
}

export type RoundStep =
  /** Ask for the summary page after `afterKey` (page 0: from the first key). */
  | { kind: 'request-page'; pageSeq: number; afterKey: Buffer }
  /** Ask for the records of these keys. */
  | { kind: 'fetch'; chunkSeq: number; keys: Buffer[] }
  /** Merge these records (then, when `next` is set, carry it out too). */
  | { kind: 'merge'; entries: readonly KeyRecord[]; next: RoundStep | undefined }
  /** The round is complete. */
  | { kind: 'done' }
  /** The reply was stale (another session or round): nothing to do. */
  | { kind: 'ignore' }
  /** The peer broke the protocol: close its connection. */
  | { kind: 'violation'; reason: string };

/** The requesting side of one round. */
export class ReconcileRound {
  private pageSeq = 0;
  private lastKey: Buffer | undefined;
  private pageDone = false;
  /** Fetch chunk awaited (0: none, a summary page is awaited instead). */
  private chunkSeq = 0;
  private nextChunkSeq = 1;
  /** Keys fetched and merged, for reports. */
  repaired = 0;

  constructor(
    readonly sessionId: number,
    readonly roundId: number,
  ) {}

  start(): RoundStep {
    return { kind: 'request-page', pageSeq: 0, afterKey: Buffer.alloc(0) };
  }

  /** A summary page: fetch what the peer holds newer, or move on. */
  onSummaries(page: SummaryPage, local: VersionReader): RoundStep {
    if (page.sessionId !== this.sessionId || page.roundId !== this.roundId) return { kind: 'ignore' };
    if (page.pageSeq !== this.pageSeq || this.chunkSeq !== 0) {
      return { kind: 'violation', reason: 'unexpected anti-entropy page' };
    }
    if (page.summaries.length > RECONCILE_PAGE_ITEMS_MAX) {
      return { kind: 'violation', reason: `anti-entropy page of ${page.summaries.length} summaries` };
    }
    const wanted: Buffer[] = [];
    let previous: Uint8Array | undefined = this.lastKey;
    for (const s of page.summaries) {
      if (s.stamp.length < RECORD_HEADER_BYTES || s.stamp.length < RECORD_HEADER_BYTES + s.stamp[15]) {
        return { kind: 'violation', reason: 'malformed anti-entropy stamp' };
      }
      // Pages are in strictly ascending key order; the cursor of the next page depends on it.
      if (previous !== undefined && Buffer.compare(previous, s.key) >= 0) {
        return { kind: 'violation', reason: 'anti-entropy summaries out of order' };
      }
      previous = s.key;
      const key = Buffer.from(s.key);
      const mine = local.current(key);
      if (mine === undefined || compareVersions(s.stamp, mine) > 0) wanted.push(key);
    }
    this.pageDone = page.done;
    if (page.summaries.length > 0) this.lastKey = Buffer.from(page.summaries[page.summaries.length - 1].key);
    if (wanted.length > 0) {
      this.chunkSeq = this.nextChunkSeq++;
      return { kind: 'fetch', chunkSeq: this.chunkSeq, keys: wanted };
    }
    return this.next();
  }

  /** A page of fetched records: merge them; after the chunk's last page, move on. */
  onData(page: DataPage, check: RecordCheck): RoundStep {
    if (page.sessionId !== this.sessionId || page.roundId !== this.roundId) return { kind: 'ignore' };
    if (this.chunkSeq === 0 || page.chunkSeq !== this.chunkSeq) {
      return { kind: 'violation', reason: 'unexpected anti-entropy data page' };
    }
    const invalid = checkRecords(page.entries, check);
    if (invalid !== undefined) return { kind: 'violation', reason: invalid };
    this.repaired += page.entries.length;
    if (!page.done) return { kind: 'merge', entries: page.entries, next: undefined };
    this.chunkSeq = 0;
    return { kind: 'merge', entries: page.entries, next: this.next() };
  }

  private next(): RoundStep {
    if (this.pageDone) return { kind: 'done' };
    this.pageSeq++;
    return { kind: 'request-page', pageSeq: this.pageSeq, afterKey: this.lastKey ?? Buffer.alloc(0) };
  }
}

export type ServeStep =
  /** Read the page of up to RECONCILE_PAGE_ITEMS_MAX keys after `afterKey` (undefined: from the first). */
  | { kind: 'read-page'; afterKey: Uint8Array | undefined }
  | { kind: 'ignore' }
  | { kind: 'violation'; reason: string };

/** The responding side for one peer's rounds of one fragment. */
export class ReconcileResponder {
  /** Set by the peer's SessionStart; requests of other sessions are stale. */
  sessionId = 0;
  private roundId = 0;
  private nextPageSeq = 0;
  private advertised = new Set<string>();

  onSessionStart(sessionId: number): void {
    this.sessionId = sessionId;
    this.roundId = 0;
    this.advertised.clear();
  }

  onRequest(q: PageRequest): ServeStep {
    if (q.sessionId === 0 || q.roundId === 0 || q.sessionId !== this.sessionId) return { kind: 'ignore' };
    if (q.pageSeq === 0) {
      if (q.afterKey.length > 0)
        return { kind: 'violation', reason: 'first anti-entropy page with a cursor' };
      this.roundId = q.roundId;
      this.nextPageSeq = 0;
      this.advertised.clear();
      return { kind: 'read-page', afterKey: undefined };
    }
    if (q.roundId !== this.roundId || q.pageSeq !== this.nextPageSeq) {
      return { kind: 'violation', reason: 'unexpected anti-entropy continuation' };
    }
    return { kind: 'read-page', afterKey: q.afterKey };
  }

  /**
   * The page the driver read for `q`: the summaries to send (keys with their stamps), and the keys
   * it may fetch next. Undefined when the session or round changed while the store read.
   */
  pageRead(q: PageRequest, entries: readonly KeyRecord[]): SummaryPage | undefined {
    if (q.sessionId !== this.sessionId || q.roundId !== this.roundId) return undefined;
    this.nextPageSeq = q.pageSeq + 1;
    this.advertised = new Set(entries.map((e) => Buffer.from(e.key).toString('latin1')));
    return {
      sessionId: q.sessionId,
      roundId: q.roundId,
      pageSeq: q.pageSeq,
      summaries: entries.map((e) => ({ key: e.key, stamp: stampOf(e.record) })),
      done: entries.length < RECONCILE_PAGE_ITEMS_MAX,
    };
  }

  /** The records of fetched keys, freshest first, in pages of about RECONCILE_PAGE_BYTES_MAX. */
  onFetch(f: FetchRequest, local: VersionReader): DataPage[] | ServeStep {
    if (f.sessionId === 0 || f.sessionId !== this.sessionId || f.roundId !== this.roundId)
      return { kind: 'ignore' };
    if (f.keys.length === 0 || f.keys.length > RECONCILE_PAGE_ITEMS_MAX) {
      return { kind: 'violation', reason: `anti-entropy fetch of ${f.keys.length} keys` };
    }
    for (const k of f.keys) {
      if (!this.advertised.delete(Buffer.from(k).toString('latin1'))) {
        return { kind: 'violation', reason: 'unadvertised or repeated anti-entropy fetch' };
      }
    }
    const pages: DataPage[] = [];
    let entries: KeyRecord[] = [];
    let bytes = 0;
    const cut = (done: boolean) => {
      pages.push({ sessionId: f.sessionId, roundId: f.roundId, chunkSeq: f.chunkSeq, entries, done });
      entries = [];
      bytes = 0;
    };
    for (const k of f.keys) {
      const view = local.current(Buffer.from(k));
      // Gone since it was advertised (dropped fragment): the requester's next round sees that.
      if (view === undefined) continue;
      const record = Buffer.from(view);
      if (entries.length > 0 && bytes + k.length + record.length > RECONCILE_PAGE_BYTES_MAX) cut(false);
      entries.push({ key: Buffer.from(k), record });
      bytes += k.length + record.length;
    }
    cut(true);
    return pages;
  }
}

/** A record without its value: what a summary carries. */
export function stampOf(record: Uint8Array): Uint8Array {
  return record.subarray(0, RECORD_HEADER_BYTES + record[15]);
}
