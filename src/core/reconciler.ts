// Anti-entropy for one (fragment, peer), as two pure state machines (spec §6, A7): the requesting
// side of a round — page through the fragment in key order, fetch the keys where the peer is newer,
// hand their records over to be merged — and the responding side, which checks that requests
// continue the round it serves and that fetches ask only for keys it advertised. Store reads are the
// driver's: pages arrive as entries it read, and the freshest local version comes from an injected
// synchronous reader (as the fragment actor's RecordReader).
//
// Beyond the seed, a page is compared by range digests before any key is listed: the requester
// describes its next page as runs of DIGEST_RANGE_KEYS keys (more in a large page: `rangeKeysOf`),
// each with a digest of its keys and versions; the responder digests its own keys over the same key
// ranges and lists summaries only for the ranges that differ. Replicas that mostly agree exchange a
// few bytes per run instead of a summary per key (bench/RESULTS.md measures it).
//
// Keys past the requester's last range on an open-ended page are keys it lacks: where its request
// allows (`recordsMax`), the responder sends their records in the page instead of summaries to fetch,
// up to RECONCILE_PAGE_RECORDS_MAX of them within RECONCILE_PAGE_BYTES_MAX. A copy into an empty
// replica is then a page round trip per 2048 keys (or per MiB) instead of a page and a fetch per 256.
//
// A round's first summary page also says how big the responder's copy is (SourceSize), so a node
// copying the fragment can tell how much it has left to pull (`GET /cluster/moves`).
//
// A round pulls: it repairs this node from the peer. The peer's own round toward this node repairs
// the peer, so both converge to the LWW winner.
//
// A round compares the replicas as of its start (`horizonMs`): records stamped later are left out
// of both sides' digests and summaries. Under a write load every range would otherwise differ by
// the writes replication is still carrying, and the round would list and fetch them a second time;
// what it leaves out, replication delivers — or the next round, whose horizon is later.

import * as crypto from 'node:crypto';
import { assert } from './assert.js';
import { copyRange, writeU16LE } from './bytes.js';
import {
  KEY_BYTES_MAX,
  RECONCILE_DESCRIBED_KEYS_INLINE_MAX,
  RECONCILE_DESCRIBED_KEYS_MAX,
  RECONCILE_PAGE_BYTES_MAX,
  RECONCILE_PAGE_ITEMS_MAX,
  RECONCILE_PAGE_RECORDS_MAX,
  RECONCILE_RANGE_KEYS_MAX,
} from './limits.js';
import {
  compareVersions,
  isWellFormedRecord,
  RECORD_HEADER_BYTES,
  stampOf,
  valueOffsetOf,
  wallMsOf,
} from './record.js';

/** The freshest local version of a key (a view valid until the next call), or undefined. */
export interface VersionReader {
  current(key: Buffer): Uint8Array | undefined;
}

export interface KeyRecord {
  key: Uint8Array;
  record: Uint8Array;
}
/**
 * Keys per digest range in a page of up to DIGEST_RANGES_PER_PAGE × this many keys: small enough
 * that a 1 % random difference leaves most ranges equal. Older versions cut every page so, and a
 * request that does not say (`rangeKeys` 0) is read so.
 */
export const DIGEST_RANGE_KEYS = 16;
/**
 * Ranges a larger page is cut into: its ranges grow with it (`rangeKeysOf`). A page that large
 * comes only after pages that found the replicas agreeing; a range that differs lists its keys,
 * and the next page is small again.
 */
export const DIGEST_RANGES_PER_PAGE = 128;
/** Bytes of a range digest (a SHA-256 prefix): collisions between replicas are not a concern at 2^-64. */
export const DIGEST_BYTES = 8;
/** Keys a responder reads for one page at most, when it holds many keys the requester lacks. */
export const RECONCILE_SPAN_KEYS_MAX = 2 * RECONCILE_DESCRIBED_KEYS_MAX;

/** Keys per range in a page of `pageKeys` keys (a power of two times RECONCILE_PAGE_ITEMS_MAX). */
export function rangeKeysOf(pageKeys: number): number {
  return Math.max(DIGEST_RANGE_KEYS, pageKeys / DIGEST_RANGES_PER_PAGE);
}

/** Keys per range a request says its page was cut into (DIGEST_RANGE_KEYS when it does not say). */
export function rangeKeysIn(q: { rangeKeys?: number }): number {
  return q.rangeKeys === undefined || q.rangeKeys === 0 ? DIGEST_RANGE_KEYS : q.rangeKeys;
}

assert(
  RECONCILE_DESCRIBED_KEYS_MAX % RECONCILE_PAGE_ITEMS_MAX === 0 &&
    RECONCILE_DESCRIBED_KEYS_INLINE_MAX <= RECONCILE_DESCRIBED_KEYS_MAX &&
    rangeKeysOf(RECONCILE_DESCRIBED_KEYS_MAX) === RECONCILE_RANGE_KEYS_MAX &&
    rangeKeysOf(RECONCILE_PAGE_ITEMS_MAX) === DIGEST_RANGE_KEYS &&
    DIGEST_RANGES_PER_PAGE <= RECONCILE_PAGE_ITEMS_MAX,
  'a page described at most must be whole ranges, no more than a request may carry, within a span',
);

/** A run of the requester's keys: those after the previous run up to `lastKey`, and their digest. */
export interface RangeDigest {
  lastKey: Uint8Array;
  digest: Uint8Array;
}

/**
 * How big the responder's copy of the fragment is, as its store counts it when it answers a round's
 * first page (KvStore.fragmentSize): entries, and bytes of their keys and records. An estimate: it
 * tells the requester how much a copy has left to pull, and nothing checks what it pulls against it.
 */
export interface SourceSize {
  keys: number;
  bytes: number;
}

export interface SummaryPage {
  sessionId: number;
  roundId: number;
  pageSeq: number;
  /** Keys and versions of the ranges that differ, in key order. */
  summaries: ReadonlyArray<{ key: Uint8Array; stamp: Uint8Array }>;
  /** The next page starts after this key. */
  nextAfterKey: Uint8Array;
  /** Nothing follows: the round is complete once this page is repaired. */
  done: boolean;
  /** The responder's copy as of this page; absent (null as decoded) when it did not say. */
  sourceSize?: SourceSize | null;
  /** Records of the keys past the requester's last range, in key order after the summaries. */
  records: readonly KeyRecord[];
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
  /** Page 0 starts at the first key; later pages after this one. */
  afterKey: Uint8Array;
  /** The requester's keys of this page as consecutive ranges. */
  ranges: readonly RangeDigest[];
  /** The requester has no keys after its last range: the page extends to the end. */
  openEnd: boolean;
  /** Records stamped after this wall ms are left out of digests and summaries (0: none are). */
  horizonMs: number;
  /** Records the requester takes in place of summaries past its last range (0 or absent: none). */
  recordsMax?: number;
  /** Keys per range the requester cut its page into, at most (0 or absent: DIGEST_RANGE_KEYS). */
  rangeKeys?: number;
}

/** Records a page answering `q` may carry: what its requester takes, within this version's bound. */
export function recordsTakenBy(q: { recordsMax?: number }): number {
  return Math.min(q.recordsMax ?? 0, RECONCILE_PAGE_RECORDS_MAX);
}

/** True when a round with this horizon leaves `record` out (see the top of this file). */
export function pastHorizon(record: Uint8Array, horizonMs: number): boolean {
  return horizonMs > 0 && wallMsOf(record) > horizonMs;
}

/**
 * The digest of a run of entries: SHA-256 over each key and stamp, length-prefixed, cut to 8 bytes;
 * entries past the horizon are left out.
 */
export function digestOf(entries: readonly KeyRecord[], from: number, to: number, horizonMs = 0): Buffer {
  // The hashed bytes are laid out in one buffer and hashed with one call: three calls into the hash
  // per key cost more than the hashing (a fragment compared is ~1 M of them).
  let bytes = 0;
  for (let i = from; i < to; i++) bytes += 3 + entries[i].key.length + valueOffsetOf(entries[i].record);
  if (digestScratch.length < bytes)
    digestScratch = Buffer.allocUnsafe(Math.max(bytes, 2 * digestScratch.length));
  let at = 0;
  for (let i = from; i < to; i++) {
    const { key, record } = entries[i];
    if (pastHorizon(record, horizonMs)) continue;
    // The stamp is copied from the record, not taken as a view of it: a view per key was a sixth of
    // a pool thread's time as it compared a fragment.
    const stampBytes = valueOffsetOf(record);
    writeU16LE(digestScratch, at, key.length);
    digestScratch[at + 2] = stampBytes;
    digestScratch.set(key, at + 3);
    copyRange(record, 0, stampBytes, digestScratch, at + 3 + key.length);
    at += 3 + key.length + stampBytes;
  }
  return sha256(digestScratch.subarray(0, at)).subarray(0, DIGEST_BYTES);
}

/**
 * SHA-256 of `bytes`: Node's one-shot `crypto.hash` where it has one (20.12 and later), about half
 * the cost of a Hash object per range digested; `createHash` before.
 */
const sha256: (bytes: Uint8Array) => Buffer =
  typeof crypto.hash === 'function'
    ? (bytes) => crypto.hash('sha256', bytes, 'buffer')
    : (bytes) => crypto.createHash('sha256').update(bytes).digest();
/** Where digestOf lays out a range's bytes; grown as ranges need. */
let digestScratch = Buffer.allocUnsafe(4096);

/**
 * The requester's page (its next keys, in order) as range digests; `openEnd` when no key follows
 * them. Ranges are cut from every key, so the page advances as without a horizon; only the digests
 * leave records past it out.
 */
export function describePage(
  entries: readonly KeyRecord[],
  openEnd: boolean,
  horizonMs = 0,
  rangeKeys = DIGEST_RANGE_KEYS,
): { ranges: RangeDigest[]; openEnd: boolean } {
  const ranges: RangeDigest[] = [];
  for (let from = 0; from < entries.length; from += rangeKeys) {
    const to = Math.min(entries.length, from + rangeKeys);
    ranges.push({ lastKey: entries[to - 1].key, digest: digestOf(entries, from, to, horizonMs) });
  }
  return { ranges, openEnd };
}

/**
 * What a responder's page says, before its records are read (answerPage): keys with their stamps
 * (records without values) to list, and to send whole; where the next page starts; whether it ends
 * the round.
 */
export interface PageAnswer {
  listed: KeyRecord[];
  tail: KeyRecord[];
  nextAfterKey: Uint8Array;
  done: boolean;
}

/** The query of `answerPage` as the background pool gets it: the request without its ids. */
export type PageQuery = Pick<PageRequest, 'afterKey' | 'ranges' | 'openEnd' | 'horizonMs'>;

/**
 * The responder's answer to a page: `span` holds its keys after the request's start, in order (at
 * most RECONCILE_SPAN_KEYS_MAX; `spanTruncated` when more exist). Summaries are listed for every
 * range whose digest differs — and, with `openEnd`, for the keys past the last range — up to
 * RECONCILE_PAGE_ITEMS_MAX; the page ends early, after the last key it handled (listed, or left out
 * as past the horizon), when that bound is hit. With `recordsMax`, the keys past the last range go
 * to `tail` instead, up to that many: the page sends their records.
 *
 * `spanExhausted`: the responder holds no key after the span's last. Once a page has handled them
 * all the round is done, whatever the requester holds further on: a round pulls, and there is
 * nothing left to pull. A source's round toward a replica still copying the fragment would
 * otherwise describe every key past the copy's progress, page after page, to hear the copy lacks it.
 */
export function answerPage(
  q: PageQuery,
  span: readonly KeyRecord[],
  spanTruncated: boolean,
  recordsMax = 0,
  spanExhausted = false,
): PageAnswer {
  const listed: KeyRecord[] = [];
  const tail: KeyRecord[] = [];
  let i = 0;
  let end: Uint8Array = q.afterKey;
  /** The last span key `list` listed or left out: where a page cut short ends. */
  let handled: Uint8Array | undefined;
  /** Lists span[from, to); false when the page filled up (the page then ends after `handled`). */
  const list = (from: number, to: number, into = listed, max = RECONCILE_PAGE_ITEMS_MAX): boolean => {
    for (let k = from; k < to; k++) {
      if (!pastHorizon(span[k].record, q.horizonMs)) {
        if (into.length === max) return false;
        into.push(span[k]);
      }
      handled = span[k].key;
    }
    return true;
  };
  const cut = () => ({ listed, tail, nextAfterKey: handled!, done: false });
  for (const r of q.ranges) {
    let j = i;
    while (j < span.length && Buffer.compare(span[j].key, r.lastKey) <= 0) j++;
    if (j === span.length && spanTruncated) {
      // The span ends inside this range: what was read is listed, the rest comes next page.
      if (!list(i, j) || handled !== undefined) return cut();
      break;
    }
    if (!digestOf(span, i, j, q.horizonMs).equals(r.digest) && !list(i, j)) return cut();
    end = r.lastKey;
    i = j;
    if (spanExhausted && i === span.length) return { listed, tail, nextAfterKey: end, done: true };
  }
  if (!q.openEnd) return { listed, tail, nextAfterKey: end, done: false };
  const filled = recordsMax > 0 ? !list(i, span.length, tail, recordsMax) : !list(i, span.length);
  if (filled || spanTruncated)
    return handled !== undefined ? cut() : { listed, tail, nextAfterKey: end, done: false };
  const last = tail.length > 0 ? tail[tail.length - 1] : listed[listed.length - 1];
  return { listed, tail, nextAfterKey: last !== undefined ? last.key : end, done: true };
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
  /**
   * Ask for the summary page after `afterKey` (page 0: from the first key), describing this node's
   * next `keys` keys.
   */
  | { kind: 'request-page'; pageSeq: number; afterKey: Buffer; keys: number }
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
  /** Keys the next page describes (RECONCILE_DESCRIBED_KEYS_MAX says how it changes). */
  private pageKeys = RECONCILE_PAGE_ITEMS_MAX;
  /** The most keys a page describes: RECONCILE_DESCRIBED_KEYS_MAX, or less where pages are read inline. */
  private readonly pageKeysMax: number;
  /** Fetch chunk awaited (0: none, a summary page is awaited instead). */
  private chunkSeq = 0;
  private nextChunkSeq = 1;
  /** Keys fetched and merged, for reports. */
  repaired = 0;
  /** The peer's copy of the fragment as its latest page said; undefined until one did. */
  sourceSize: SourceSize | undefined = undefined;

  constructor(
    readonly sessionId: number,
    readonly roundId: number,
    /** Wall ms the round compares the replicas as of (0: everything); its page requests carry it. */
    readonly horizonMs = 0,
    /** Records its pages may carry in place of summaries (recordsTakenBy); its requests say it. */
    readonly recordsMax = RECONCILE_PAGE_RECORDS_MAX,
    /** Where this node reads its pages: in the background pool, or in the fragment's worker. */
    pagesRead: 'pool' | 'inline' = 'pool',
  ) {
    this.pageKeysMax =
      pagesRead === 'pool' ? RECONCILE_DESCRIBED_KEYS_MAX : RECONCILE_DESCRIBED_KEYS_INLINE_MAX;
  }

  start(): RoundStep {
    return { kind: 'request-page', pageSeq: 0, afterKey: Buffer.alloc(0), keys: this.pageKeys };
  }

  /** A summary page: merge the records it carries, fetch what the peer holds newer, or move on. */
  onSummaries(page: SummaryPage, local: VersionReader, check: RecordCheck): RoundStep {
    if (page.sessionId !== this.sessionId || page.roundId !== this.roundId) return { kind: 'ignore' };
    if (page.pageSeq !== this.pageSeq || this.chunkSeq !== 0) {
      return { kind: 'violation', reason: 'unexpected anti-entropy page' };
    }
    if (page.summaries.length > RECONCILE_PAGE_ITEMS_MAX) {
      return { kind: 'violation', reason: `anti-entropy page of ${page.summaries.length} summaries` };
    }
    const records = page.records;
    if (records.length > this.recordsMax) {
      return { kind: 'violation', reason: `anti-entropy page of ${records.length} records` };
    }
    const size = page.sourceSize ?? undefined;
    if (size !== undefined && !(isCount(size.keys) && isCount(size.bytes))) {
      return { kind: 'violation', reason: 'malformed anti-entropy fragment size' };
    }
    const wanted: Buffer[] = [];
    let previous: Uint8Array | undefined = this.pageSeq === 0 ? undefined : this.lastKey;
    for (const s of page.summaries) {
      if (s.stamp.length < RECORD_HEADER_BYTES || s.stamp.length < valueOffsetOf(s.stamp)) {
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
    for (const r of records) {
      if (previous !== undefined && Buffer.compare(previous, r.key) >= 0) {
        return { kind: 'violation', reason: 'anti-entropy records out of order' };
      }
      previous = r.key;
    }
    const invalid = checkRecords(records, check);
    if (invalid !== undefined) return { kind: 'violation', reason: invalid };
    if (!page.done && this.pageSeq > 0 && Buffer.compare(page.nextAfterKey, this.lastKey!) <= 0) {
      return { kind: 'violation', reason: 'anti-entropy page does not advance' };
    }
    this.pageDone = page.done;
    this.lastKey = Buffer.from(page.nextAfterKey);
    this.pageKeys =
      page.summaries.length === 0 ? Math.min(2 * this.pageKeys, this.pageKeysMax) : RECONCILE_PAGE_ITEMS_MAX;
    if (size !== undefined) this.sourceSize = { keys: size.keys, bytes: size.bytes };
    let next: RoundStep;
    if (wanted.length > 0) {
      this.chunkSeq = this.nextChunkSeq++;
      next = { kind: 'fetch', chunkSeq: this.chunkSeq, keys: wanted };
    } else {
      next = this.next();
    }
    if (records.length === 0) return next;
    this.repaired += records.length;
    return { kind: 'merge', entries: records, next };
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
    return {
      kind: 'request-page',
      pageSeq: this.pageSeq,
      afterKey: this.lastKey ?? Buffer.alloc(0),
      keys: this.pageKeys,
    };
  }
}

/** A count a peer may send: a whole number, 0 to 2^53. */
function isCount(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}

export type ServeStep =
  /** Read up to RECONCILE_SPAN_KEYS_MAX keys after `afterKey` (undefined: from the first), then answer. */
  | { kind: 'read-page'; afterKey: Uint8Array | undefined }
  | { kind: 'ignore' }
  | { kind: 'violation'; reason: string };

/** The responding side for one peer's rounds of one fragment. */
export class ReconcileResponder {
  /** Set by the peer's SessionStart; requests of other sessions are stale. */
  sessionId = 0;
  private roundId = 0;
  private nextPageSeq = 0;
  private nextAfterKey: Uint8Array = Buffer.alloc(0);
  private advertised = new Set<string>();

  onSessionStart(sessionId: number): void {
    this.sessionId = sessionId;
    this.roundId = 0;
    this.advertised.clear();
  }

  onRequest(q: PageRequest): ServeStep {
    if (q.sessionId === 0 || q.roundId === 0 || q.sessionId !== this.sessionId) return { kind: 'ignore' };
    if (q.ranges.length > RECONCILE_PAGE_ITEMS_MAX) {
      return { kind: 'violation', reason: `anti-entropy page of ${q.ranges.length} ranges` };
    }
    if (q.ranges.some((r) => r.lastKey.length > KEY_BYTES_MAX || r.digest.length !== DIGEST_BYTES)) {
      return { kind: 'violation', reason: 'malformed anti-entropy range' };
    }
    if (rangeKeysIn(q) > RECONCILE_RANGE_KEYS_MAX) {
      return { kind: 'violation', reason: `anti-entropy ranges of ${q.rangeKeys} keys` };
    }
    if (q.pageSeq === 0) {
      if (q.afterKey.length > 0)
        return { kind: 'violation', reason: 'first anti-entropy page with a cursor' };
      this.roundId = q.roundId;
      this.nextPageSeq = 0;
      this.advertised.clear();
      return { kind: 'read-page', afterKey: undefined };
    }
    if (
      q.roundId !== this.roundId ||
      q.pageSeq !== this.nextPageSeq ||
      !Buffer.from(q.afterKey).equals(this.nextAfterKey)
    ) {
      return { kind: 'violation', reason: 'unexpected anti-entropy continuation' };
    }
    return { kind: 'read-page', afterKey: q.afterKey };
  }

  /**
   * The page answering `q` (answerPage worked out over the span read for it, in the worker or the
   * background pool): the summaries to send (keys with their stamps), the keys it may fetch next,
   * and the records past the requester's last range (read from `local`, freshest first, as a fetch
   * reads them). Undefined when the session or round changed while the store read.
   */
  pageAnswered(q: PageRequest, answer: PageAnswer, local: VersionReader): SummaryPage | undefined {
    if (q.sessionId !== this.sessionId || q.roundId !== this.roundId) return undefined;
    let { nextAfterKey, done } = answer;
    const records: KeyRecord[] = [];
    let bytes = 0;
    for (let t = 0; t < answer.tail.length; t++) {
      const key = Buffer.from(answer.tail[t].key);
      const view = local.current(key);
      // Gone since the span was read (dropped fragment): the requester's next round sees that.
      if (view === undefined) continue;
      if (records.length > 0 && bytes + key.length + view.length > RECONCILE_PAGE_BYTES_MAX) {
        nextAfterKey = answer.tail[t - 1].key;
        done = false;
        break;
      }
      records.push({ key, record: Buffer.from(view) });
      bytes += key.length + view.length;
    }
    this.nextPageSeq = q.pageSeq + 1;
    this.nextAfterKey = Buffer.from(nextAfterKey);
    this.advertised = new Set(answer.listed.map((e) => Buffer.from(e.key).toString('latin1')));
    return {
      sessionId: q.sessionId,
      roundId: q.roundId,
      pageSeq: q.pageSeq,
      summaries: answer.listed.map((e) => ({ key: e.key, stamp: stampOf(e.record) })),
      nextAfterKey,
      done,
      records,
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
