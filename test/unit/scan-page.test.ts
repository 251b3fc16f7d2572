// Scan pages over a store with a fragment's uncommitted writes laid over it (`withPending`,
// src/workers/scan-page.ts), as a worker reads while its store's commits fail: paged to the end
// from any start, with any page size and range, the keys and records must be those of the store
// and the pending writes merged (a pending record in place of the stored one, tombstones hiding
// keys), in key order, each once. Checked by fast-check against a sorted map.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { encodeRecord, isLive } from '../../src/core/record.js';
import type { KvStore } from '../../src/native-bindings/kv-store.js';
import { openStore } from '../../src/native-bindings/open-store.js';
import type { ScanRequest } from '../../src/threads/op-codec.js';
import { collectScanPage, withPending } from '../../src/workers/scan-page.js';

const NODE = Buffer.from('n1');
const NOW_MS = 10_000;
const keyOf = (k: number): Buffer => Buffer.from([k]);

function recordOf(tombstone: boolean, version: number): Buffer {
  return encodeRecord(
    tombstone,
    1_000 + version,
    0,
    0,
    NODE,
    tombstone ? Buffer.alloc(0) : Buffer.from(`v${version}`),
  );
}

const entriesArb = fc.uniqueArray(fc.record({ key: fc.nat(40), tombstone: fc.boolean() }), {
  selector: (e) => e.key,
  maxLength: 30,
});

test('pages of a store with pending writes laid over it are the merged map, in key order, each key once', async () => {
  await fc.assert(
    fc.asyncProperty(
      entriesArb,
      entriesArb,
      fc.integer({ min: 1, max: 7 }),
      fc.option(fc.nat(40), { nil: undefined }),
      fc.option(fc.integer({ min: 1, max: 41 }), { nil: undefined }),
      async (stored, pending, limit, start, end) => {
        const store: KvStore = await openStore({
          kind: 'memory',
          dataDir: '',
          fragmentCount: 1,
          groups: [],
          groupCount: 0,
        });
        await store.openFragment(0);
        await store.commit([
          {
            fragment: 0,
            puts: stored.map((e) => [keyOf(e.key), recordOf(e.tombstone, 1)]),
            deletes: [],
            highWaterWallMs: 0,
          },
        ]);
        const overlay = withPending(
          store,
          pending.map((e) => [keyOf(e.key), recordOf(e.tombstone, 2)]),
        );
        // The reference: every key's freshest record, live ones in range, in order.
        const merged = new Map<number, Buffer>();
        for (const e of stored) merged.set(e.key, recordOf(e.tombstone, 1));
        for (const e of pending) merged.set(e.key, recordOf(e.tombstone, 2));
        const expected = [...merged]
          .filter(
            ([k, r]) =>
              isLive(r, NOW_MS) && (start === undefined || k >= start) && (end === undefined || k < end),
          )
          .sort(([a], [b]) => a - b)
          .map(([k, r]) => `${k}:${r.toString('hex')}`);

        const seen: string[] = [];
        const request: ScanRequest = {
          fragment: 0,
          start: start === undefined ? undefined : keyOf(start),
          startInclusive: true,
          end: end === undefined ? undefined : keyOf(end),
          limit,
          byteLimit: 1 << 20,
          examineLimit: limit + 3,
          pattern: undefined,
          keysOnly: false,
          stampsOnly: false,
        };
        for (let pages = 0; ; pages++) {
          assert.ok(pages < 200, 'the scan ends');
          const page = await collectScanPage(overlay, request, NOW_MS);
          for (const e of page.entries) seen.push(`${e.key[0]}:${Buffer.from(e.record!).toString('hex')}`);
          if (page.done) break;
          request.start = page.resumeKey;
          request.startInclusive = false;
        }
        assert.deepEqual(seen, expected);
      },
    ),
    { numRuns: 300 },
  );
});
