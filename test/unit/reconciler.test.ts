// Anti-entropy state machines without sockets or stores: a requester and a responder over two maps
// converge to the LWW winner while listing only the ranges whose digests differ; the responder
// refuses out-of-order pages and unadvertised fetches; the requester refuses pages and records that
// break the protocol. fast-check holds a round against a set difference: it fetches exactly the keys
// whose peer record wins. The requester keeps the size of the peer's copy its pages say.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { Keyspace } from '../../src/core/keyspace.js';
import {
  KEY_BYTES_MAX,
  RECONCILE_PAGE_BYTES_MAX,
  RECONCILE_PAGE_ITEMS_MAX,
  RECONCILE_PAGE_RECORDS_MAX,
  RECONCILE_RANGE_KEYS_MAX,
} from '../../src/core/limits.js';
import {
  answerPage,
  type DataPage,
  describePage,
  digestOf,
  type KeyRecord,
  type PageRequest,
  ReconcileResponder,
  ReconcileRound,
  type RecordCheck,
  type RoundStep,
  rangeKeysOf,
  recordsTakenBy,
  type SourceSize,
  type SummaryPage,
  type VersionReader,
} from '../../src/core/reconciler.js';
import { ApplyOutcome, encodeRecord, mergeOutcome, stampOf } from '../../src/core/record.js';
import { type PageReader, readSpan, spanQueryOf } from '../../src/workers/reconcile-span.js';

const NODE_A = Buffer.from('a');
const NODE_B = Buffer.from('b');
const NODE_C = Buffer.from('c');
const keyspace = new Keyspace(1);
type Start = { key: Uint8Array; inclusive: boolean } | undefined;
type Version = { wallMs: number; node: Buffer };

/** One replica's copy of fragment 0. */
class Replica implements VersionReader {
  readonly data = new Map<string, Buffer>();
  put(key: string, wallMs: number, node: Buffer, value: string | undefined): void {
    this.data.set(key, encodeRecord(value === undefined, wallMs, 0, 0, node, Buffer.from(value ?? '')));
  }
  current(key: Buffer): Uint8Array | undefined {
    return this.data.get(key.toString('latin1'));
  }
  /** What the store returns for a page from `start`. */
  page(start: Start, limit: number): Array<{ key: Buffer; record: Buffer }> {
    const keys = [...this.data.keys()].sort((x, y) =>
      Buffer.compare(Buffer.from(x, 'latin1'), Buffer.from(y, 'latin1')),
    );
    const after = (k: string) => {
      if (start === undefined) return true;
      const c = Buffer.compare(Buffer.from(k, 'latin1'), Buffer.from(start.key));
      return start.inclusive ? c >= 0 : c > 0;
    };
    return keys
      .filter(after)
      .slice(0, limit)
      .map((k) => ({ key: Buffer.from(k, 'latin1'), record: this.data.get(k)! }));
  }
  readonly read: PageReader = async (start, limit) => this.page(start, limit);
  merge(entries: readonly KeyRecord[]): void {
    for (const e of entries) {
      const key = Buffer.from(e.key).toString('latin1');
      if (mergeOutcome(this.data.get(key), e.record, 0) !== ApplyOutcome.Superseded)
        this.data.set(key, Buffer.from(e.record));
    }
  }
  values(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [k, r] of [...this.data.entries()].sort())
      out[k] = `${r[0] & 1 ? '(deleted)' : ''}${r.toString('latin1', 17)}`;
    return out;
  }
}

const check = (nowMs = 1_000_000): RecordCheck => ({
  fragment: 0,
  fragmentOf: (key) => keyspace.fragmentOf(key),
  nowMs,
  maxClockSkewMs: 300_000,
});

interface PullOptions {
  /** The round's horizon (0: none). */
  horizonMs?: number;
  /** Gets the keys (latin1) the round fetched or took as records. */
  fetched?: Set<string>;
  /** Called after each span the responder reads. */
  onSpanRead?: () => void;
  /** Records the requester takes in place of summaries: 0 (the default here) as older versions ask. */
  recordsMax?: number;
  /** Called with each page the responder answers. */
  onPage?: (page: SummaryPage) => void;
  /** Where the requester reads its pages (the largest page it describes depends on it). */
  pagesRead?: 'pool' | 'inline';
  /** The responder is a version that reads every range as DIGEST_RANGE_KEYS keys. */
  olderResponder?: boolean;
}

/**
 * One whole round of `local` pulling from `remote`: messages, summaries listed, keys repaired.
 */
async function pull(
  local: Replica,
  remote: Replica,
  { horizonMs = 0, fetched, onSpanRead, recordsMax = 0, onPage, pagesRead, olderResponder }: PullOptions = {},
): Promise<{ messages: number; repaired: number; summaries: number }> {
  const responder = new ReconcileResponder();
  responder.onSessionStart(7);
  const round = new ReconcileRound(7, 1, horizonMs, recordsMax, pagesRead);
  let step: RoundStep | undefined = round.start();
  let messages = 0;
  let summaries = 0;
  while (step !== undefined) {
    messages++;
    if (step.kind === 'request-page') {
      const start = step.pageSeq === 0 ? undefined : { key: step.afterKey, inclusive: false };
      // The keys the round asks to describe, and one more that shows whether any follow.
      const mine = local.page(start, step.keys + 1);
      const q: PageRequest = {
        sessionId: 7,
        roundId: 1,
        pageSeq: step.pageSeq,
        afterKey: step.afterKey,
        ...describePage(
          mine.slice(0, step.keys),
          mine.length <= step.keys,
          round.horizonMs,
          rangeKeysOf(step.keys),
        ),
        horizonMs: round.horizonMs,
        recordsMax: round.recordsMax,
        rangeKeys: rangeKeysOf(step.keys),
      };
      const serve = responder.onRequest(q);
      assert.equal(serve.kind, 'read-page');
      const span = await readSpan(
        remote.read,
        serve.kind === 'read-page' ? serve.afterKey : undefined,
        spanQueryOf(olderResponder === true ? { ...q, rangeKeys: undefined } : q),
      );
      onSpanRead?.();
      const page = pageRead(responder, q, span.entries, span.truncated, remote, span.exhausted === true)!;
      onPage?.(page);
      summaries += page.summaries.length;
      step = round.onSummaries(page, local, check());
    } else if (step.kind === 'merge') {
      for (const e of step.entries) fetched?.add(Buffer.from(e.key).toString('latin1'));
      local.merge(step.entries);
      step = step.next;
    } else if (step.kind === 'fetch') {
      for (const key of step.keys) fetched?.add(key.toString('latin1'));
      const pages = responder.onFetch(
        { sessionId: 7, roundId: 1, chunkSeq: step.chunkSeq, keys: step.keys },
        remote,
      );
      assert.ok(Array.isArray(pages));
      step = undefined;
      for (const page of pages as DataPage[]) {
        const next = round.onData(page, check());
        assert.equal(next.kind, 'merge');
        if (next.kind === 'merge') {
          local.merge(next.entries);
          step = next.next;
        }
      }
    } else if (step.kind === 'done') {
      step = undefined;
    } else {
      assert.fail(`unexpected step ${step.kind}`);
    }
  }
  return { messages, repaired: round.repaired, summaries };
}

/** A responder's page for `q` over `span`, answered as the worker's inline path does. */
function pageRead(
  responder: ReconcileResponder,
  q: PageRequest,
  span: readonly KeyRecord[],
  truncated: boolean,
  local: VersionReader,
  exhausted = false,
): SummaryPage | undefined {
  return responder.pageAnswered(q, answerPage(q, span, truncated, recordsTakenBy(q), exhausted), local);
}

/** A round's first page request from a requester holding no keys, of round 1 of `sessionId`. */
const first = (sessionId: number, recordsMax = 0): PageRequest => ({
  sessionId,
  roundId: 1,
  pageSeq: 0,
  afterKey: Buffer.alloc(0),
  ranges: [],
  openEnd: true,
  horizonMs: 0,
  recordsMax,
});

/** A round of `copy` pulling from `source`, taking records as this version does; the copy then holds the source's. */
async function pullWithRecords(copy: Replica, source: Replica) {
  const pages: SummaryPage[] = [];
  const fetched = new Set<string>();
  const result = await pull(copy, source, {
    recordsMax: RECONCILE_PAGE_RECORDS_MAX,
    fetched,
    onPage: (p) => pages.push(p),
  });
  assert.deepEqual(copy.values(), source.values());
  return { result, pages, fetched };
}

/** Two replicas holding the same `count` keys k0000… at one version. */
function twins(count: number): [Replica, Replica] {
  const a = new Replica();
  const b = new Replica();
  for (let i = 0; i < count; i++) {
    const key = `k${String(i).padStart(4, '0')}`;
    a.put(key, 100, NODE_A, 'same');
    b.put(key, 100, NODE_A, 'same');
  }
  return [a, b];
}

describe('range digests', () => {
  test('a digest is the first 8 bytes of SHA-256 over each key and stamp, length-prefixed, as the wire says', () => {
    const entries: KeyRecord[] = [
      { key: Buffer.from(''), record: encodeRecord(false, 5, 0, 0, NODE_A, Buffer.from('value')) },
      { key: Buffer.from('k1'), record: encodeRecord(true, 7, 1, 0, NODE_B, Buffer.alloc(0)) },
      { key: Buffer.alloc(300, 7), record: encodeRecord(false, 9, 0, 1234, NODE_C, Buffer.alloc(5000, 1)) },
      { key: Buffer.from('late'), record: encodeRecord(false, 500, 0, 0, NODE_A, Buffer.from('v')) },
    ];
    // The reference: each key and stamp fed to the hash in turn (how every version computes it).
    const reference = (upTo: number, horizonMs: number) => {
      const hash = createHash('sha256');
      for (const e of entries.slice(0, upTo)) {
        if (horizonMs > 0 && e === entries[3]) continue;
        const stamp = stampOf(e.record);
        const lengths = Buffer.alloc(3);
        lengths.writeUInt16LE(e.key.length, 0);
        lengths[2] = stamp.length;
        hash.update(lengths).update(e.key).update(stamp);
      }
      return hash.digest().subarray(0, 8);
    };
    assert.deepEqual(digestOf(entries, 0, 4), reference(4, 0));
    assert.deepEqual(digestOf(entries, 0, 4, 100), reference(4, 100), 'the late write left out');
    assert.deepEqual(digestOf(entries, 0, 0), reference(0, 0));
    // Larger than the scratch it starts with, then a small one after it.
    const many = Array.from({ length: 16 }, (_, i) => ({
      key: Buffer.alloc(1000, i),
      record: entries[0].record,
    }));
    const hash = createHash('sha256');
    for (const e of many) {
      const stamp = stampOf(e.record);
      hash
        .update(Buffer.from([e.key.length & 0xff, e.key.length >> 8, stamp.length]))
        .update(e.key)
        .update(stamp);
    }
    assert.deepEqual(digestOf(many, 0, 16), hash.digest().subarray(0, 8));
    assert.deepEqual(
      digestOf(entries, 1, 2),
      (() => {
        const h = createHash('sha256');
        const stamp = stampOf(entries[1].record);
        return h
          .update(Buffer.from([2, 0, stamp.length]))
          .update('k1')
          .update(stamp)
          .digest()
          .subarray(0, 8);
      })(),
    );
  });
});

describe('anti-entropy rounds', () => {
  test('two diverged replicas converge to the LWW winner, tombstones included, in both directions', async () => {
    const [a, b] = twins(600);
    a.put('k0001', 200, NODE_A, 'newer-on-a');
    b.put('k0001', 150, NODE_B, 'older-on-b');
    b.put('k0002', 300, NODE_B, 'newer-on-b');
    b.put('k0003', 300, NODE_B, undefined);
    a.put('only-a', 100, NODE_A, 'x');
    b.put('only-b', 100, NODE_B, 'y');
    const ab = await pull(a, b);
    const ba = await pull(b, a);
    assert.deepEqual(a.values(), b.values());
    assert.equal(a.values().k0001, 'newer-on-a');
    assert.equal(a.values().k0002, 'newer-on-b');
    assert.equal(a.values().k0003, '(deleted)', 'the delete wins and is kept as a tombstone');
    assert.equal(ab.repaired, 3, 'a fetched exactly k0002, k0003 and only-b');
    assert.equal(ba.repaired, 2, 'b fetched exactly k0001 and only-a');
    assert.ok(ab.messages >= 3, 'three pages of 256');
    assert.ok(
      ab.summaries <= 3 * 16,
      `only differing ranges are listed (${ab.summaries} summaries for 602 keys)`,
    );
  });

  test('equal replicas fetch nothing and list nothing', async () => {
    const a = new Replica();
    const b = new Replica();
    for (let i = 0; i < 300; i++) {
      a.put(`k${i}`, 100, NODE_A, 'v');
      b.put(`k${i}`, 100, NODE_A, 'v');
    }
    assert.deepEqual(await pull(a, b), { messages: 3, repaired: 0, summaries: 0 });
  });

  test('pages grow while the replicas agree, and start small again after one that differed', async () => {
    const [a, b] = [new Replica(), new Replica()];
    for (let i = 0; i < 20_000; i++) {
      a.put(`k${String(i).padStart(5, '0')}`, 100, NODE_A, 'v');
      b.put(`k${String(i).padStart(5, '0')}`, 100, NODE_A, 'v');
    }
    // 256 to 4 096 keys, three more of 4 096, then the last 3 872 open-ended: 8 pages, and done
    // (pages of 256 took 79).
    assert.deepEqual(await pull(a, b), { messages: 9, repaired: 0, summaries: 0 });
    // Where pages are read in the worker they stop at 2 048 keys: eight of those, then the last
    // 1 824: 12 pages.
    assert.deepEqual(await pull(a, b, { pagesRead: 'inline' }), { messages: 13, repaired: 0, summaries: 0 });
    b.put('k10000', 200, NODE_B, 'newer');
    const { messages, repaired, summaries } = await pull(a, b);
    assert.equal(repaired, 1);
    // k10000 is in the sixth page, of 4 096 keys in ranges of 32: the one range that differs is listed.
    assert.equal(rangeKeysOf(4096), 32);
    assert.equal(summaries, 32);
    // Six pages, the fetch (its data merged as it comes), then the last 7 968 keys in pages of 256,
    // 512, 1 024, 2 048, 4 096 and the last 32, and done.
    assert.equal(messages, 6 + 1 + 6 + 1, `${messages} messages`);
    const inline = await pull(a, b, { pagesRead: 'inline' });
    assert.deepEqual(inline, { messages: 13, repaired: 0, summaries: 0 });
  });

  test('a responder that reads every range as 16 keys still finds each difference in large pages', async () => {
    const [a, b] = [new Replica(), new Replica()];
    for (let i = 0; i < 20_000; i++) {
      a.put(`k${String(i).padStart(5, '0')}`, 100, NODE_A, 'v');
      b.put(`k${String(i).padStart(5, '0')}`, 100, NODE_A, 'v');
    }
    b.put('k03000', 200, NODE_B, 'newer');
    b.put('k15000', 200, NODE_B, 'newer');
    b.put('k19999x', 200, NODE_B, 'only-b');
    const fetched = new Set<string>();
    const older = await pull(a, b, { olderResponder: true, fetched });
    // It reads too few keys for a large page's ranges and lists the rest of what it read: more
    // summaries, the same keys repaired.
    assert.equal(older.repaired, 3);
    assert.deepEqual([...fetched].sort(), ['k03000', 'k15000', 'k19999x']);
    assert.deepEqual(a.values(), b.values());
    assert.deepEqual(await pull(a, b), { messages: 9, repaired: 0, summaries: 0 });
  });

  test('a round ends once the responder has no keys left to send, however many the requester holds past them', async () => {
    const [a, b] = [new Replica(), new Replica()];
    for (let i = 0; i < 20_000; i++) a.put(`k${String(i).padStart(5, '0')}`, 100, NODE_A, 'v');
    // b is a copy of the fragment under way: it holds the first 1 000 of a's keys, one of them newer.
    for (let i = 0; i < 1_000; i++) b.put(`k${String(i).padStart(5, '0')}`, 100, NODE_A, 'v');
    b.put('k00500', 200, NODE_B, 'newer');
    const fetched = new Set<string>();
    let lastPage: SummaryPage | undefined;
    const round = await pull(a, b, { fetched, onPage: (page) => (lastPage = page) });
    assert.deepEqual([...fetched], ['k00500']);
    assert.equal(a.values().k00500, 'newer');
    assert.equal(lastPage?.done, true);
    // Pages of 256 keys, then 512 (k00500's range differs: its fetch), then 256 again, which reaches
    // past b's last key and ends the round; done. Otherwise a would describe its other 19 000 keys.
    assert.equal(round.messages, 3 + 1 + 1, `${round.messages} messages`);
    // An empty responder ends the round at its first page.
    assert.deepEqual(await pull(a, new Replica()), { messages: 2, repaired: 0, summaries: 0 });
    // The other way, nothing changes: the copy pulls everything it lacks.
    assert.equal((await pull(b, a)).repaired, 19_000);
    assert.deepEqual(a.values(), b.values());
  });

  test('a replica missing a long run of keys gets all of them, a page at a time', async () => {
    const a = new Replica();
    const b = new Replica();
    for (let i = 0; i < 5000; i++) b.put(`k${String(i).padStart(5, '0')}`, 1, NODE_B, 'v');
    a.put('k00000', 1, NODE_B, 'v');
    a.put('k04999', 1, NODE_B, 'v');
    a.put('zzz', 1, NODE_A, 'only-a');
    assert.equal((await pull(a, b)).repaired, 4998);
    assert.equal((await pull(b, a)).repaired, 1);
    assert.deepEqual(a.values(), b.values());
  });

  test('a copy into an empty replica takes records in its pages: no fetch, a page per 2 048 keys', async () => {
    const copy = new Replica();
    const source = new Replica();
    for (let i = 0; i < 5000; i++) source.put(`k${String(i).padStart(5, '0')}`, 1, NODE_B, 'v');
    const { result, pages } = await pullWithRecords(copy, source);
    assert.equal(result.repaired, 5000);
    assert.equal(result.summaries, 0, 'nothing to fetch: the copy lacks every key past its last');
    assert.deepEqual(
      pages.map((p) => p.records.length),
      [2048, 2048, 904],
    );
    // Three pages, each asked for and merged, and the end: no fetch.
    assert.equal(result.messages, 3 * 2 + 1);
    // The same copy taking no records (a requester of an older version): a page and a fetch per 256.
    const old = await pull(new Replica(), source);
    assert.equal(old.repaired, 5000);
    assert.equal(old.messages, Math.ceil(5000 / RECONCILE_PAGE_ITEMS_MAX) * 2 + 1);
  });

  test('records are cut at about a MiB; a record larger than that goes alone', async () => {
    const copy = new Replica();
    const source = new Replica();
    for (let i = 0; i < 600; i++) source.put(`k${String(i).padStart(3, '0')}`, 1, NODE_B, 'x'.repeat(4000));
    source.put('k600', 1, NODE_B, 'y'.repeat(RECONCILE_PAGE_BYTES_MAX + 10));
    source.put('k601', 1, NODE_B, 'z');
    const { pages } = await pullWithRecords(copy, source);
    const bytesOf = (p: SummaryPage) => p.records.reduce((n, r) => n + r.key.length + r.record.length, 0);
    for (const p of pages.slice(0, -1)) {
      assert.ok(bytesOf(p) <= RECONCILE_PAGE_BYTES_MAX || p.records.length === 1, `${bytesOf(p)} bytes`);
    }
    assert.ok(pages.length >= 4, `${pages.length} pages`);
    assert.ok(
      pages.some((p) => p.records.length === 1 && bytesOf(p) > RECONCILE_PAGE_BYTES_MAX),
      'the large record in a page of its own',
    );
  });

  test('a requester that holds some keys gets summaries for its ranges and records past its last key', async () => {
    const copy = new Replica();
    const source = new Replica();
    for (let i = 0; i < 1000; i++) source.put(`k${String(i).padStart(4, '0')}`, 2, NODE_B, 'v');
    // Older versions of a few keys up to k0300: everything after is past its last key.
    for (let i = 0; i <= 300; i += 100) copy.put(`k${String(i).padStart(4, '0')}`, 1, NODE_A, 'old');
    const { result, pages, fetched } = await pullWithRecords(copy, source);
    assert.equal(result.repaired, 1000);
    assert.equal(fetched.size, 1000);
    const records = pages.reduce((n, p) => n + p.records.length, 0);
    assert.equal(records, 1000 - 301, 'the keys past k0300 came as records');
    assert.equal(result.summaries, 301, 'the keys within its ranges were listed and fetched');
  });

  test('a key gone between the span and the page is left out of its records', async () => {
    const source = new Replica();
    for (let i = 0; i < 10; i++) source.put(`k${i}`, 1, NODE_B, 'v');
    const r = new ReconcileResponder();
    r.onSessionStart(1);
    const q = first(1, RECONCILE_PAGE_RECORDS_MAX);
    r.onRequest(q);
    const span = source.page(undefined, 300);
    source.data.delete('k3');
    const page = pageRead(r, q, span, false, source)!;
    assert.deepEqual(
      page.records.map((e) => Buffer.from(e.key).toString()),
      ['k0', 'k1', 'k2', 'k4', 'k5', 'k6', 'k7', 'k8', 'k9'],
    );
    assert.equal(page.summaries.length, 0);
    assert.equal(page.done, true);
  });

  test("a responder reads about the keys a page needs: a copy's page and one more, an agreeing page's keys and one more", async () => {
    const copy = new Replica();
    const full = new Replica();
    const source = new Replica();
    for (let i = 0; i < 1000; i++) {
      full.put(`k${String(i).padStart(4, '0')}`, 1, NODE_B, 'v');
      source.put(`k${String(i).padStart(4, '0')}`, 1, NODE_B, 'v');
    }
    const reads: number[] = [];
    let keysRead = 0;
    const counting = source.read;
    (source as { read: PageReader }).read = async (start, limit) => {
      const page = await counting(start, limit);
      reads.push(limit);
      keysRead += page.length;
      return page;
    };
    assert.equal((await pull(copy, source)).repaired, 1000);
    // Four pages of 256 keys: each reads its 256 and the one after (the last page finds none).
    assert.deepEqual(reads, [257, 257, 257, 257]);
    assert.equal(keysRead, 1000 + 3);
    reads.length = 0;
    keysRead = 0;
    assert.equal((await pull(full, source)).repaired, 0);
    // Pages of 16 ranges of 16 keys, then 32 (a page doubles after one that listed nothing), the
    // last (232 keys, 15 ranges) open-ended: each reads its keys and the one after (the second in
    // reads of 512 at most: its 512, then one), the last as many as it might list past its ranges.
    assert.deepEqual(reads, [257, 512, 1, 15 * 16 + 256 + 1]);
    assert.equal(keysRead, 1000 + 2);
  });

  test('a responder stops reading a page once it holds a page of keys more than the requester described', async () => {
    // A copy under writes: it holds a prefix, and keys replication brought all over the fragment.
    const copy = new Replica();
    const source = new Replica();
    const keyOf = (i: number) => `k${String(i).padStart(4, '0')}`;
    for (let i = 0; i < 4000; i++) source.put(keyOf(i), 1, NODE_B, 'v');
    let held = 0;
    for (let i = 0; i < 4000; i++) {
      if (i >= 500 && i % 40 !== 0) continue;
      copy.put(keyOf(i), 1, NODE_B, 'v');
      held++;
    }
    const perPage: number[] = [];
    const counting = source.read;
    let pageKeys = 0;
    (source as { read: PageReader }).read = async (start, limit) => {
      const page = await counting(start, limit);
      pageKeys += page.length;
      return page;
    };
    const onSpanRead = () => {
      perPage.push(pageKeys);
      pageKeys = 0;
    };
    const { repaired } = await pull(copy, source, { onSpanRead });
    assert.equal(repaired, 4000 - held);
    assert.deepEqual(copy.values(), source.values());
    // Each page reads its ranges' keys up to a page more than the copy described (after the first
    // page, which agreed, 32 ranges of 16 keys at most), and what an open page may list past them;
    // reading to the copy's last range's key read the rest of the fragment for every page.
    const most = Math.max(...perPage);
    assert.ok(most <= 32 * 16 + 256 + 256 + 1, `a page read ${most} keys`);
    const total = perPage.reduce((a, b) => a + b, 0);
    assert.ok(total < 2 * 4000, `the round read ${total} keys for 4000 (pages: ${perPage.join(', ')})`);
  });

  test('the empty key is a key like any other', async () => {
    const a = new Replica();
    const b = new Replica();
    b.put('', 5, NODE_B, 'empty');
    b.put('x', 5, NODE_B, 'x');
    await pull(a, b);
    assert.deepEqual(a.values(), b.values());
  });

  test('a round compares the replicas as of its horizon: later writes are neither listed nor fetched', async () => {
    const [a, b] = twins(600);
    // Before the horizon: a real difference, repaired as ever.
    b.put('k0100', 150, NODE_B, 'older-than-the-round');
    // After it: writes replication is still carrying, on both sides, new keys and overwrites.
    for (let i = 0; i < 600; i += 3) b.put(`k${String(i).padStart(4, '0')}`, 500, NODE_B, 'in flight');
    for (let i = 0; i < 100; i++) b.put(`new${String(i).padStart(3, '0')}`, 500, NODE_B, 'in flight');
    for (let i = 1; i < 600; i += 7) a.put(`k${String(i).padStart(4, '0')}`, 501, NODE_A, 'local, in flight');
    const result = await pull(a, b, { horizonMs: 200 });
    assert.equal(result.repaired, 1, 'only the difference older than the round');
    assert.equal(a.values().k0100, 'older-than-the-round');
    assert.equal(a.values().new000, undefined, 'left to replication');
    assert.equal(a.values().k0003, 'same', 'left to replication');
    // Without a horizon the same replicas list and fetch the in-flight writes too.
    const c = new Replica();
    for (const [k, r] of a.data) c.data.set(k, r);
    assert.ok((await pull(c, b)).repaired > 100);
  });

  test('keys inserted after the horizon leave the ranges equal: nothing is listed for them', async () => {
    const [a, b] = twins(600);
    for (let i = 0; i < 600; i += 2) b.put(`k${String(i).padStart(4, '0')}x`, 500, NODE_B, 'in flight');
    // Two pages: 256 keys, then the other 344 (a page doubles after one that listed nothing).
    assert.deepEqual(await pull(a, b, { horizonMs: 200 }), { messages: 3, repaired: 0, summaries: 0 });
    assert.ok((await pull(a, b)).summaries >= 300, 'without a horizon every range differs');
  });

  test('a span of keys all past the horizon still advances the round', async () => {
    const a = new Replica();
    const b = new Replica();
    a.put('a', 100, NODE_A, 'v');
    a.put('z', 100, NODE_A, 'v');
    b.put('a', 100, NODE_A, 'v');
    b.put('z', 150, NODE_B, 'older-than-the-round');
    // More keys than one responder span between two of the requester's keys, all in flight.
    for (let i = 0; i < 5000; i++) b.put(`m${String(i).padStart(5, '0')}`, 500, NODE_B, 'in flight');
    const result = await pull(a, b, { horizonMs: 200 });
    assert.equal(a.values().z, 'older-than-the-round');
    assert.equal(result.repaired, 1);
  });

  test('an empty peer is one page', async () => {
    const a = new Replica();
    a.put('k', 1, NODE_A, 'v');
    assert.deepEqual(await pull(a, new Replica()), { messages: 2, repaired: 0, summaries: 0 });
  });
});

/** A write's version: a few wall ms and three writers, so that replicas often tie or cross. */
const versionArb = fc.record({
  wallMs: fc.integer({ min: 1, max: 40 }),
  node: fc.constantFrom(NODE_A, NODE_B, NODE_C),
});
/** Keys (the empty key among them) with what each replica holds of them: a version, or nothing. */
const replicasArb = fc.uniqueArray(
  fc.record({
    key: fc.uint8Array({ maxLength: 4 }).map((k) => Buffer.from(k).toString('latin1')),
    a: fc.option(versionArb, { nil: undefined }),
    b: fc.option(versionArb, { nil: undefined }),
  }),
  { maxLength: 700, size: 'max', selector: (c) => c.key },
);

/** The reference LWW order of two versions: wall ms, then writer (every writer id here is one byte). */
function newer(x: Version, y: Version | undefined): boolean {
  return y === undefined || x.wallMs > y.wallMs || (x.wallMs === y.wallMs && x.node[0] > y.node[0]);
}

/** The record of a version: one version is one write, so its value and kind follow from it. */
function putVersion(replica: Replica, key: string, v: Version): void {
  const tombstone = (v.wallMs * 3 + v.node[0]) % 5 === 0;
  replica.put(key, v.wallMs, v.node, tombstone ? undefined : `v${v.wallMs}${v.node.toString()}`);
}

function replicasOf(cases: ReadonlyArray<{ key: string; a?: Version; b?: Version }>): [Replica, Replica] {
  const a = new Replica();
  const b = new Replica();
  for (const c of cases) {
    if (c.a !== undefined) putVersion(a, c.key, c.a);
    if (c.b !== undefined) putVersion(b, c.key, c.b);
  }
  return [a, b];
}

/** Records a requester takes: none (as older versions), a few (pages cut by them), or this version's. */
const recordsMaxArb = fc.constantFrom(0, 3, RECONCILE_PAGE_RECORDS_MAX);

describe('anti-entropy against a set difference (spec §6)', () => {
  test('fast-check: a round pulls exactly the keys whose peer record wins, and merges nothing else', async () => {
    await fc.assert(
      fc.asyncProperty(
        replicasArb,
        fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 40 })),
        recordsMaxArb,
        async (cases, horizonMs, recordsMax) => {
          const [a, b] = replicasOf(cases);
          const before = new Map(a.data);
          // The peer's versions not past the horizon that are newer than the requester's (or new to it).
          const wins = new Set<string>();
          for (const c of cases) {
            if (c.b === undefined || (horizonMs > 0 && c.b.wallMs > horizonMs)) continue;
            if (newer(c.b, c.a)) wins.add(c.key);
          }
          const fetched = new Set<string>();
          const { repaired } = await pull(a, b, { horizonMs, fetched, recordsMax });
          assert.deepEqual([...fetched].sort(), [...wins].sort());
          assert.equal(repaired, wins.size);
          for (const c of cases) {
            assert.deepEqual(a.data.get(c.key), wins.has(c.key) ? b.data.get(c.key) : before.get(c.key));
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  test('fast-check: a round each way leaves both replicas with the LWW winner of every key', async () => {
    await fc.assert(
      fc.asyncProperty(replicasArb, recordsMaxArb, async (cases, recordsMax) => {
        const [a, b] = replicasOf(cases);
        const winners = new Replica();
        for (const c of cases) {
          const winner = c.a !== undefined && !(c.b !== undefined && newer(c.b, c.a)) ? c.a : c.b;
          if (winner !== undefined) putVersion(winners, c.key, winner);
        }
        await pull(a, b, { recordsMax });
        await pull(b, a, { recordsMax });
        assert.deepEqual(a.data, winners.data);
        assert.deepEqual(b.data, winners.data);
      }),
      { numRuns: 60 },
    );
  });
});

describe('the responder refuses', () => {
  const remote = new Replica();
  for (let i = 0; i < 300; i++) remote.put(`k${String(i).padStart(3, '0')}`, 1, NODE_B, 'v');

  test('stale sessions (ignored), a first page with a cursor, and a page out of order', () => {
    const r = new ReconcileResponder();
    r.onSessionStart(5);
    assert.equal(r.onRequest(first(4)).kind, 'ignore');
    assert.equal(r.onRequest(first(0)).kind, 'ignore');
    assert.equal(r.onRequest({ ...first(5), afterKey: Buffer.from('x') }).kind, 'violation');
    const q = first(5);
    assert.equal(r.onRequest(q).kind, 'read-page');
    const page = pageRead(r, q, remote.page(undefined, 300), true, remote)!;
    assert.equal(page.summaries.length, RECONCILE_PAGE_ITEMS_MAX, 'an open page lists up to a page of keys');
    const next = { ...first(5), pageSeq: 1, afterKey: page.nextAfterKey };
    assert.equal(r.onRequest({ ...next, pageSeq: 2 }).kind, 'violation');
    assert.equal(r.onRequest({ ...next, roundId: 9 }).kind, 'violation');
    assert.equal(
      r.onRequest({ ...next, afterKey: Buffer.from('k100') }).kind,
      'violation',
      'a cursor it did not give',
    );
    assert.equal(r.onRequest(next).kind, 'read-page');
  });

  test('a page of more ranges than a page holds, ranges of more keys than a page cuts, or a range of a key too long or a digest not 8 bytes', () => {
    const r = new ReconcileResponder();
    r.onSessionStart(5);
    const range = (lastKey: Buffer, digest = Buffer.alloc(8)) => ({ lastKey, digest });
    const bad = [
      Array.from({ length: RECONCILE_PAGE_ITEMS_MAX + 1 }, (_, i) => range(Buffer.from(`k${i}`))),
      [range(Buffer.alloc(KEY_BYTES_MAX + 1))],
      [range(Buffer.from('k'), Buffer.alloc(9))],
      [range(Buffer.from('k'), Buffer.alloc(0))],
    ];
    for (const ranges of bad) assert.equal(r.onRequest({ ...first(5), ranges }).kind, 'violation');
    assert.equal(
      r.onRequest({ ...first(5), rangeKeys: RECONCILE_RANGE_KEYS_MAX + 1 }).kind,
      'violation',
      'ranges larger than the largest page cuts',
    );
    assert.equal(r.onRequest({ ...first(5), rangeKeys: RECONCILE_RANGE_KEYS_MAX }).kind, 'read-page');
    assert.equal(
      r.onRequest({ ...first(5), ranges: [range(Buffer.alloc(KEY_BYTES_MAX))] }).kind,
      'read-page',
    );
  });

  test('fetches of keys it did not advertise, twice, or too many', () => {
    const r = new ReconcileResponder();
    r.onSessionStart(5);
    const q = first(5);
    r.onRequest(q);
    pageRead(r, q, remote.page(undefined, 300), true, remote);
    const fetch = (keys: string[]) =>
      r.onFetch({ sessionId: 5, roundId: 1, chunkSeq: 1, keys: keys.map((k) => Buffer.from(k)) }, remote);
    assert.equal((fetch(['k299']) as { kind: string }).kind, 'violation', 'k299 is on the next page');
    const ok = fetch(['k001', 'k002']);
    assert.ok(Array.isArray(ok) && ok.length === 1 && ok[0].done && ok[0].entries.length === 2);
    assert.equal((fetch(['k001']) as { kind: string }).kind, 'violation', 'fetched already');
    assert.equal((fetch([]) as { kind: string }).kind, 'violation');
    r.onSessionStart(6);
    assert.equal((fetch(['k003']) as { kind: string }).kind, 'ignore', 'the old session is over');
  });

  test('large records are cut into pages of about a megabyte', () => {
    const big = new Replica();
    for (let i = 0; i < 5; i++) big.put(`big${i}`, 1, NODE_B, 'x'.repeat(400_000));
    const r = new ReconcileResponder();
    r.onSessionStart(1);
    const q = first(1);
    r.onRequest(q);
    pageRead(r, q, big.page(undefined, 300), false, big);
    const keys = [0, 1, 2, 3, 4].map((i) => Buffer.from(`big${i}`));
    const pages = r.onFetch({ sessionId: 1, roundId: 1, chunkSeq: 1, keys }, big) as DataPage[];
    assert.deepEqual(
      pages.map((p) => p.entries.length),
      [2, 2, 1],
    );
    assert.deepEqual(
      pages.map((p) => p.done),
      [false, false, true],
    );
  });
});

describe('the requester refuses', () => {
  const stamp = encodeRecord(false, 1, 0, 0, NODE_B, Buffer.alloc(0));
  const page = (pageSeq: number, keys: string[], s: Uint8Array = stamp) => ({
    sessionId: 3,
    roundId: 4,
    pageSeq,
    done: false,
    nextAfterKey: Buffer.from(keys[keys.length - 1] ?? 'z'),
    summaries: keys.map((k) => ({ key: Buffer.from(k), stamp: s })),
    records: [] as KeyRecord[],
  });

  test('a page out of order, summaries out of key order, a malformed stamp, data without a fetch', () => {
    const round = new ReconcileRound(3, 4);
    const local = new Replica();
    round.start();
    assert.equal(round.onSummaries({ ...page(0, []), sessionId: 2 }, local, check()).kind, 'ignore');
    assert.equal(round.onSummaries(page(1, ['a']), local, check()).kind, 'violation');
    assert.equal(new ReconcileRound(3, 4).onSummaries(page(0, ['b', 'a']), local, check()).kind, 'violation');
    assert.equal(
      new ReconcileRound(3, 4).onSummaries(page(0, ['a'], Buffer.alloc(3)), local, check()).kind,
      'violation',
    );
    const data = { sessionId: 3, roundId: 4, chunkSeq: 1, entries: [], done: true };
    assert.equal(new ReconcileRound(3, 4).onData(data, check()).kind, 'violation');
  });

  test('more records than it takes, records out of order or before a summary, records of another fragment', () => {
    const record = encodeRecord(false, 1, 0, 0, NODE_B, Buffer.from('v'));
    const withRecords = (keys: string[], summaries: string[] = []) => ({
      ...page(0, summaries),
      nextAfterKey: Buffer.from(keys.at(-1) ?? 'z'),
      records: keys.map((k) => ({ key: Buffer.from(k), record })),
    });
    const local = new Replica();
    const ok = new ReconcileRound(3, 4, 0, 2).onSummaries(withRecords(['a', 'b']), local, check());
    assert.equal(ok.kind, 'merge');
    const more = new ReconcileRound(3, 4, 0, 2).onSummaries(withRecords(['a', 'b', 'c']), local, check());
    assert.equal(more.kind, 'violation');
    assert.equal(
      new ReconcileRound(3, 4, 0, 0).onSummaries(withRecords(['a']), local, check()).kind,
      'violation',
    );
    const order = new ReconcileRound(3, 4).onSummaries(withRecords(['b', 'a']), local, check());
    assert.equal(order.kind, 'violation');
    const before = new ReconcileRound(3, 4).onSummaries(withRecords(['a'], ['m']), local, check());
    assert.equal(before.kind, 'violation');
    const elsewhere = new ReconcileRound(3, 4).onSummaries(withRecords(['a']), local, {
      ...check(),
      fragmentOf: () => 1,
    });
    assert.equal(elsewhere.kind, 'violation');
  });

  test('a page that does not advance', () => {
    const round = new ReconcileRound(3, 4);
    assert.equal(round.onSummaries(page(0, []), new Replica(), check()).kind, 'request-page');
    assert.equal(
      round.onSummaries({ ...page(1, []), nextAfterKey: Buffer.from('z') }, new Replica(), check()).kind,
      'violation',
    );
  });

  test('records from the future, or of another fragment', () => {
    const round = new ReconcileRound(3, 4);
    const fetch = round.onSummaries({ ...page(0, ['k']), done: true }, new Replica(), check());
    assert.equal(fetch.kind, 'fetch');
    const future = encodeRecord(false, 1_000_000 + 600_000, 0, 0, NODE_B, Buffer.from('v'));
    const step = round.onData(
      {
        sessionId: 3,
        roundId: 4,
        chunkSeq: 1,
        entries: [{ key: Buffer.from('k'), record: future }],
        done: true,
      },
      check(),
    );
    assert.equal(step.kind, 'violation');
    assert.match((step as { reason: string }).reason, /ahead of this node's clock/);
    const round2 = new ReconcileRound(3, 4);
    round2.onSummaries({ ...page(0, ['k']), done: true }, new Replica(), check());
    const wrong = round2.onData(
      {
        sessionId: 3,
        roundId: 4,
        chunkSeq: 1,
        entries: [{ key: Buffer.from('k'), record: stamp }],
        done: true,
      },
      { ...check(), fragmentOf: () => 1 },
    );
    assert.equal(wrong.kind, 'violation');
  });
});

describe("the size of the peer's copy (SourceSize)", () => {
  const page = (pageSeq: number, after: string, sourceSize?: SourceSize | null) => ({
    sessionId: 3,
    roundId: 4,
    pageSeq,
    done: false,
    nextAfterKey: Buffer.from(after),
    summaries: [],
    sourceSize,
    records: [],
  });

  test('the requester keeps what the latest page of its round said; a page that says nothing keeps it', () => {
    const round = new ReconcileRound(3, 4);
    round.start();
    assert.equal(round.sourceSize, undefined, 'nothing said yet');
    assert.equal(
      round.onSummaries(page(0, 'b', { keys: 10, bytes: 1_000 }), new Replica(), check()).kind,
      'request-page',
    );
    assert.deepEqual(round.sourceSize, { keys: 10, bytes: 1_000 });
    // Decoded from a peer that did not say: null.
    assert.equal(round.onSummaries(page(1, 'c', null), new Replica(), check()).kind, 'request-page');
    assert.deepEqual(round.sourceSize, { keys: 10, bytes: 1_000 });
    // A page of another round is stale: what it says is not heard.
    const stale = { ...page(2, 'd', { keys: 99, bytes: 9_900 }), roundId: 5 };
    assert.equal(round.onSummaries(stale, new Replica(), check()).kind, 'ignore');
    assert.deepEqual(round.sourceSize, { keys: 10, bytes: 1_000 });
    // The copy grew since: the newer size replaces it; an empty copy is a size too.
    assert.equal(
      round.onSummaries(page(2, 'd', { keys: 12, bytes: 1_300 }), new Replica(), check()).kind,
      'request-page',
    );
    assert.deepEqual(round.sourceSize, { keys: 12, bytes: 1_300 });
    round.onSummaries(page(3, 'e', { keys: 0, bytes: 0 }), new Replica(), check());
    assert.deepEqual(round.sourceSize, { keys: 0, bytes: 0 });
  });

  test('the requester refuses a size that is no count, and keeps what it heard before', () => {
    for (const bad of [
      { keys: -1, bytes: 10 },
      { keys: 1.5, bytes: 10 },
      { keys: 1, bytes: Number.NaN },
      { keys: 1, bytes: Number.POSITIVE_INFINITY },
      { keys: 2 ** 53, bytes: 10 },
    ]) {
      const round = new ReconcileRound(3, 4);
      round.onSummaries(page(0, 'b', { keys: 1, bytes: 10 }), new Replica(), check());
      const step = round.onSummaries(page(1, 'c', bad), new Replica(), check());
      assert.equal(step.kind, 'violation', JSON.stringify(bad));
      assert.deepEqual(round.sourceSize, { keys: 1, bytes: 10 });
    }
  });
});
