// --move-rate: the token bucket a worker's anti-entropy pulls spend their bytes from (src/core/
// op-queue.ts TokenBucket, as src/workers/replication.ts uses it: a page's bytes spent once pulled,
// the next fetch held until the bucket is out of debt), and the main thread's sum of what rounds
// pulled into each fragment (src/main/pulled-counts.ts) that `GET /cluster/moves` shows, with what
// is left to pull as estimated from the size the sources said (`leftToPull`).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { MOVE_RATE_BURST_MS, MOVE_RATE_BYTES_PER_SEC_MIN } from '../../src/core/limits.js';
import { TokenBucket } from '../../src/core/op-queue.js';
import { leftToPull, PulledCounts } from '../../src/main/pulled-counts.js';
import type { RoundReport } from '../../src/threads/op-codec.js';

test('pulls paced by the bucket stay within the rate and its burst, and wait no longer than it needs', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: MOVE_RATE_BYTES_PER_SEC_MIN, max: 64 * 1024 * 1024 }),
      fc.array(fc.integer({ min: 1, max: 4 * 1024 * 1024 }), { minLength: 1, maxLength: 40 }),
      (rate, pages) => {
        const burst = (rate * MOVE_RATE_BURST_MS) / 1000;
        const bucket = new TokenBucket(rate, burst, 0);
        let nowMs = 0;
        let pulled = 0;
        for (const bytes of pages) {
          // The driver holds the fetch until then; the page's bytes are spent once it arrived.
          nowMs += bucket.waitMs(nowMs);
          assert.ok(pulled <= burst + (rate * nowMs) / 1000, `${pulled} bytes pulled by ${nowMs} ms`);
          bucket.spend(bytes, nowMs);
          pulled += bytes;
        }
        // Every page but the last was waited off, less the burst; a wait is rounded up to a ms.
        const owedBytes = pulled - pages[pages.length - 1] - burst;
        const neededMs = Math.max(0, (owedBytes * 1000) / rate);
        assert.ok(nowMs >= neededMs, `${nowMs} ms, the rate needs ${neededMs}`);
        assert.ok(nowMs <= neededMs + pages.length, `${nowMs} ms, the rate needs ${neededMs}`);
      },
    ),
  );
});

test('a bucket of 64 KiB/s holds a 1 MiB page back 15 s, its first second free', () => {
  const rate = 64 * 1024;
  const bucket = new TokenBucket(rate, (rate * MOVE_RATE_BURST_MS) / 1000, 0);
  assert.equal(bucket.waitMs(0), 0);
  bucket.spend(1024 * 1024, 0);
  assert.equal(bucket.waitMs(0), 15_001);
  assert.equal(bucket.waitMs(15_000), 1);
  assert.equal(bucket.waitMs(15_001), 0);
});

function report(
  member: number,
  roundSeq: number,
  keysPulled: number,
  bytesPulled: number,
  sourceSize?: RoundReport['sourceSize'],
): RoundReport {
  return {
    fragment: 5,
    member,
    roundSeq,
    roundId: 100 + roundSeq,
    ok: false,
    continuity: 0,
    whole: false,
    keysPulled,
    bytesPulled,
    sourceSize,
    reason: '',
  };
}

const NONE = { source: undefined };

test('what rounds pulled into a fragment: each report adds what grew since its round’s last', () => {
  const counts = new PulledCounts();
  assert.deepEqual(counts.of(5), { keys: 0, bytes: 0, ...NONE });
  const steps: Array<[RoundReport, number, number]> = [
    // Round 1 toward member 1: two pages, then its end (the same counts: nothing more).
    [report(1, 1, 10, 1_000), 10, 1_000],
    [report(1, 1, 25, 2_500), 25, 2_500],
    [{ ...report(1, 1, 25, 2_500), ok: true }, 25, 2_500],
    // Round 2 counts from zero again.
    [report(1, 2, 3, 300), 28, 2_800],
    // A round toward another peer adds its own.
    [report(2, 1, 4, 400), 32, 3_200],
    // A restarted worker's sender counts rounds from 1 again: less than seen is a new round.
    [report(2, 1, 1, 100), 33, 3_300],
    // An answer that no round ended for carries nothing.
    [report(1, 0, 0, 0), 33, 3_300],
  ];
  for (const [r, keys, bytes] of steps) {
    counts.add(r);
    assert.deepEqual(counts.of(5), { keys, bytes, ...NONE }, JSON.stringify(r));
  }
  assert.deepEqual(counts.of(4), { keys: 0, bytes: 0, ...NONE }, 'other fragments count apart');
  counts.forget(5);
  assert.deepEqual(
    counts.of(5),
    { keys: 0, bytes: 0, ...NONE },
    'dropped: opened again, it counts from zero',
  );
  counts.add(report(1, 2, 5, 500));
  assert.deepEqual(counts.of(5), { keys: 5, bytes: 500, ...NONE });
});

test('the source of a copy: the largest a peer said, kept across rounds until the copy is dropped', () => {
  const counts = new PulledCounts();
  counts.add(report(1, 1, 0, 0));
  assert.equal(counts.of(5).source, undefined, 'no page said a size yet');
  counts.add(report(1, 1, 0, 0, { keys: 100, bytes: 10_000 }));
  assert.deepEqual(counts.of(5).source, { keys: 100, bytes: 10_000 });
  // Another source with more keys is the larger copy; a later round that has not said keeps the last.
  counts.add(report(2, 1, 10, 1_000, { keys: 120, bytes: 11_000 }));
  counts.add(report(2, 2, 0, 0));
  assert.deepEqual(counts.of(5).source, { keys: 120, bytes: 11_000 });
  // A source's newer size replaces its older one, smaller or not.
  counts.add(report(2, 2, 0, 0, { keys: 90, bytes: 9_000 }));
  assert.deepEqual(counts.of(5).source, { keys: 100, bytes: 10_000 });
  counts.forget(5);
  assert.equal(counts.of(5).source, undefined);
});

test('what a copy has left: the source’s keys less those pulled, at the average size pulled', () => {
  // Nothing heard from a source: unknown.
  assert.equal(leftToPull({ keys: 10, bytes: 1_000, source: undefined }), undefined);
  // Heard, nothing pulled yet: all its keys, at the bytes it said.
  assert.deepEqual(leftToPull({ keys: 0, bytes: 0, source: { keys: 400, bytes: 50_000 } }), {
    keys: 400,
    bytes: 50_000,
  });
  // A quarter pulled at 120 bytes a key: 300 keys left, 36 000 bytes.
  assert.deepEqual(leftToPull({ keys: 100, bytes: 12_000, source: { keys: 400, bytes: 50_000 } }), {
    keys: 300,
    bytes: 36_000,
  });
  // Pulled more than the source said it holds (twice from two sources, or it shrank): none left.
  assert.deepEqual(leftToPull({ keys: 500, bytes: 60_000, source: { keys: 400, bytes: 50_000 } }), {
    keys: 0,
    bytes: 0,
  });
});
