// The TTL cleaner's page read in the background pool (src/workers/expired-span.ts), over a real
// lmdb store, the PoolSpan request that carries the cleaner's time across the rings, and the
// result that carries a span's keys and stamps back.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  encodeRecord,
  expiryTombstoneOf,
  isExpiredValue,
  isExpiringValue,
  stampOf,
} from '../../src/core/record.js';
import { openStore } from '../../src/native-bindings/open-store.js';
import {
  encodePoolSpanEntries,
  encodePoolSpanRanges,
  encodePoolSpanResult,
  type PoolSpanRequest,
  pageAnswerOf,
  poolSpanRequestBytes,
  poolSpanResultBytes,
  poolSpanTaskIdOf,
  readPoolSpanRequest,
  readPoolSpanResult,
  writePoolSpanRequest,
  writePoolSpanResult,
} from '../../src/threads/op-codec.js';
import { readExpiredSpan } from '../../src/workers/expired-span.js';

const NOW = 1_000_000;
const node = Buffer.from('n1');
const value = (expiresAtMs: number) => encodeRecord(false, 5, 0, expiresAtMs, node, Buffer.from('v'));

test('expired values are the cleaner’s; live values, values without a deadline and tombstones are not', () => {
  assert.equal(isExpiredValue(value(NOW), NOW), true, 'a deadline reached');
  assert.equal(isExpiredValue(value(NOW - 1), NOW), true);
  assert.equal(isExpiredValue(value(NOW + 1), NOW), false, 'a deadline ahead');
  assert.equal(isExpiredValue(value(0), NOW), false, 'no deadline');
  assert.equal(isExpiredValue(expiryTombstoneOf(value(NOW - 1)), NOW), false, 'already retired');
  assert.equal(isExpiringValue(value(NOW + 1)), true, 'a deadline ahead is one the cleaner will retire');
  assert.equal(isExpiringValue(value(NOW - 1)), true);
  assert.equal(isExpiringValue(value(0)), false, 'no deadline');
  assert.equal(isExpiringValue(expiryTombstoneOf(value(NOW - 1))), false, 'a tombstone');
});

test('a cleaner page says whether any key it examined holds a deadline', async () => {
  const pageOf =
    (...records: Buffer[]) =>
    async () =>
      records.map((record, i) => ({ key: Buffer.from(`k${i}`), record }));
  const none = await readExpiredSpan(pageOf(value(0), expiryTombstoneOf(value(NOW - 1))), undefined, NOW, 10);
  assert.equal(none.expiring, false);
  const ahead = await readExpiredSpan(pageOf(value(0), value(NOW + 60_000)), undefined, NOW, 10);
  assert.equal(ahead.expiring, true, 'a deadline not reached yet counts');
  assert.deepEqual(
    ahead.entries.map((e) => e.key.toString()),
    ['k1'],
    'only the last key examined comes back',
  );
});

test('a cleaner page sends back only the expired keys, and its last key to resume after', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'tessera-expired-span-'));
  const store = await openStore({
    kind: 'lmdb',
    dataDir: dir,
    fragmentCount: 1,
    groups: [0],
    groupCount: 1,
  });
  try {
    await store.openFragment(0);
    // k00..k24: every fifth expired, every seventh retired already, the rest live or without a deadline.
    const puts: Array<[Uint8Array, Uint8Array]> = [];
    const expired: string[] = [];
    for (let i = 0; i < 25; i++) {
      const key = `k${String(i).padStart(2, '0')}`;
      let record = value(i % 2 === 0 ? NOW + 60_000 : 0);
      if (i % 5 === 0) {
        record = value(NOW - i);
        expired.push(key);
      } else if (i % 7 === 0) {
        record = expiryTombstoneOf(value(NOW - 1));
      }
      puts.push([Buffer.from(key), record]);
    }
    await store.commit([{ fragment: 0, puts, deletes: [], highWaterWallMs: 5 }]);
    const read = (start: { key: Uint8Array; inclusive: boolean } | undefined, limit: number) =>
      store.page(0, start, undefined, limit);

    const seen: string[] = [];
    const pageEnds: string[] = [];
    let afterKey: Uint8Array | undefined;
    for (let pages = 0; ; pages++) {
      assert.ok(pages < 10, 'the pages come to an end');
      const span = await readExpiredSpan(read, afterKey, NOW, 10);
      const keys = span.entries.map((e) => e.key.toString());
      const last = keys[keys.length - 1];
      pageEnds.push(last);
      for (const e of span.entries) if (isExpiredValue(e.record, NOW)) seen.push(e.key.toString());
      assert.ok(
        span.entries.every((e, i) => i === span.entries.length - 1 || isExpiredValue(e.record, NOW)),
        'nothing but expired values, and the last key examined',
      );
      if (!span.truncated) break;
      afterKey = span.entries[span.entries.length - 1].key;
    }
    assert.deepEqual(seen, expired, 'every expired key, once, in key order');
    assert.deepEqual(pageEnds, ['k09', 'k19', 'k24'], 'pages of ten keys examined, resumed after the last');
  } finally {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test('a PoolSpan request carries the range count, the keys per range, the tail’s keys, the cleaner’s time (an anti-entropy one none) or the work on the span, read as views of its record', () => {
  const requests: PoolSpanRequest[] = [
    {
      fragment: 7,
      afterKey: Buffer.from('after'),
      lastKey: undefined,
      rangeCount: 0,
      rangeKeys: 16,
      openEnd: true,
      tailKeys: 256,
      expiredAtMs: 2 ** 47 + 3,
    },
    {
      fragment: 0,
      afterKey: undefined,
      lastKey: undefined,
      rangeCount: 0,
      rangeKeys: 16,
      openEnd: true,
      tailKeys: 0,
      expiredAtMs: 0,
    },
    {
      fragment: 3,
      afterKey: Buffer.from('a'),
      lastKey: Buffer.from('zz'),
      rangeCount: 16,
      rangeKeys: 16,
      openEnd: false,
      tailKeys: 2048,
    },
    // A requester's page to describe, and a responder's answer to two ranges (the second's key empty).
    {
      fragment: 4,
      afterKey: undefined,
      lastKey: undefined,
      rangeCount: 16,
      rangeKeys: 32,
      openEnd: true,
      tailKeys: 256,
      work: { kind: 'describe', horizonMs: 1_700_000_000_123 },
    },
    {
      fragment: 5,
      afterKey: Buffer.from('b'),
      lastKey: Buffer.alloc(0),
      rangeCount: 2,
      rangeKeys: 32,
      openEnd: true,
      tailKeys: 2048,
      work: {
        kind: 'answer',
        horizonMs: 0,
        recordsMax: 2048,
        ranges: [
          { lastKey: new Uint8Array(Buffer.from('k'.repeat(1024))), digest: new Uint8Array(8).fill(7) },
          { lastKey: new Uint8Array(0), digest: new Uint8Array(8).fill(255) },
        ],
      },
    },
  ];
  const asBuffers = (r: PoolSpanRequest) => ({
    ...r,
    afterKey: r.afterKey && Buffer.from(r.afterKey),
    lastKey: r.lastKey && Buffer.from(r.lastKey),
    work:
      r.work?.kind === 'answer'
        ? {
            ...r.work,
            ranges: r.work.ranges.map((x) => ({
              lastKey: Buffer.from(x.lastKey),
              digest: Buffer.from(x.digest),
            })),
          }
        : r.work,
  });
  for (const request of requests) {
    const buf = Buffer.alloc(poolSpanRequestBytes(request) + 4, 0xee);
    writePoolSpanRequest(buf, 2, 99, request);
    const read = readPoolSpanRequest(buf, 2);
    assert.equal(read.taskId, 99);
    assert.equal(poolSpanTaskIdOf(buf, 2), 99);
    assert.deepEqual(asBuffers(read.request), asBuffers(request));
    assert.equal(buf[buf.length - 2], 0xee, 'nothing written past the request');
    // The pool thread reads the record the main thread moved to it: keys are views of it, not copies.
    for (const key of [read.request.afterKey, read.request.lastKey]) {
      if (key !== undefined) assert.equal(key.buffer, buf.buffer);
    }
  }
});

test('a PoolSpan result carries each key with its stamp alone, as the pool encoded them, whether the cleaner saw a deadline, an answer or range digests, or says the pool failed', () => {
  const records = [
    {
      key: Buffer.from('a'),
      record: encodeRecord(false, 1_700_000_000_000, 1, 0, Buffer.from('n1'), Buffer.from('v')),
    },
    {
      key: Buffer.alloc(0),
      record: encodeRecord(true, 1_700_000_000_001, 0, 0, Buffer.from('node-2'), undefined),
    },
    {
      key: Buffer.from('z'.repeat(300)),
      record: encodeRecord(false, 5, 0, 9, Buffer.from('n'), Buffer.alloc(2000, 1)),
    },
  ];
  for (const [truncated, expiring] of [
    [false, false],
    [true, false],
    [false, true],
  ]) {
    const span = { entries: encodePoolSpanEntries(records), truncated, expiring };
    const buf = Buffer.alloc(poolSpanResultBytes(span) + 4, 0xee);
    writePoolSpanResult(buf, 2, 41, span);
    const read = readPoolSpanResult(buf, 2, 2 + poolSpanResultBytes(span));
    assert.deepEqual(read, {
      entries: records.map((e) => ({ key: e.key, record: stampOf(e.record) })),
      truncated,
      expiring,
    });
    assert.equal(buf[buf.length - 2], 0xee, 'nothing written past the result');
  }
  // An answer: its keys listed, then those sent whole, and where the next page starts.
  const answered = {
    entries: encodePoolSpanEntries(records),
    truncated: false,
    answer: { listedCount: 1, nextAfterKey: Buffer.from('next'), done: true },
  };
  const abuf = Buffer.alloc(poolSpanResultBytes(answered) + 4, 0xee);
  writePoolSpanResult(abuf, 2, 42, answered);
  const aread = readPoolSpanResult(abuf, 2, 2 + poolSpanResultBytes(answered))!;
  assert.equal(abuf[abuf.length - 2], 0xee, 'nothing written past the result');
  assert.deepEqual(pageAnswerOf(aread), {
    listed: [{ key: records[0].key, record: stampOf(records[0].record) }],
    tail: records.slice(1).map((e) => ({ key: e.key, record: stampOf(e.record) })),
    nextAfterKey: Buffer.from('next'),
    done: true,
  });
  assert.equal(pageAnswerOf({ ...aread, answer: { ...aread.answer!, listedCount: 4 } }), undefined);
  assert.equal(pageAnswerOf({ ...aread, answer: undefined }), undefined);
  // A describe: range digests, each as its last key and digest.
  const ranges = [
    { lastKey: Buffer.from('m'), digest: Buffer.alloc(8, 1) },
    { lastKey: Buffer.alloc(0), digest: Buffer.alloc(8, 2) },
  ];
  const described = { entries: encodePoolSpanRanges(ranges), truncated: true };
  const dbuf = Buffer.alloc(poolSpanResultBytes(described));
  writePoolSpanResult(dbuf, 0, 43, described);
  assert.deepEqual(
    readPoolSpanResult(dbuf, 0, dbuf.length)!.entries.map((e) => ({ lastKey: e.key, digest: e.record })),
    ranges,
  );
  const failed = Buffer.alloc(poolSpanResultBytes(undefined));
  writePoolSpanResult(failed, 0, 41, undefined);
  assert.equal(readPoolSpanResult(failed, 0, failed.length), undefined);
});

test('the pool writes its result as the record the worker reads, in an ArrayBuffer of its own that moves to the main thread', () => {
  const answered = {
    entries: encodePoolSpanEntries([
      { key: Buffer.from('k1'), record: encodeRecord(false, 7, 0, 0, Buffer.from('n1'), Buffer.from('v')) },
    ]),
    truncated: false,
    answer: { listedCount: 0, nextAfterKey: Buffer.from('k1'), done: false },
  };
  const record = encodePoolSpanResult(77, answered);
  // Moving a view of a shared slab would detach the slab; the record owns all of its buffer.
  assert.equal(record.byteOffset, 0);
  assert.equal(record.buffer.byteLength, record.length);
  const written = Buffer.alloc(poolSpanResultBytes(answered));
  writePoolSpanResult(written, 0, 77, answered);
  assert.deepEqual(record, written);
  assert.deepEqual(
    readPoolSpanResult(record, 0, record.length),
    readPoolSpanResult(written, 0, written.length),
  );
});
