import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import type { FragmentCore } from '../../src/core/fragment.js';
import { CLEAN_FULL_PASS_INTERVALS } from '../../src/core/limits.js';
import { encodeRecord } from '../../src/core/record.js';
import type { KvStore } from '../../src/native-bindings/kv-store.js';
import { openStore } from '../../src/native-bindings/open-store.js';
import { TtlSweeper } from '../../src/workers/ttl-sweeper.js';
import { eventually } from '../integration/helpers.js';

/** A memory store's fragment 0 holding `keys` values, none with a deadline; page reads counted. */
async function storeWith(keys: number): Promise<{ store: KvStore; pagesRead: () => number }> {
  const store = await openStore({
    kind: 'memory',
    dataDir: '',
    fragmentCount: 1,
    groups: [0],
    groupCount: 0,
  });
  await store.openFragment(0);
  const record = encodeRecord(false, 1_800_000_000_000, 0, 0, Buffer.from('n1'), Buffer.from('v'));
  const puts: Array<[Uint8Array, Uint8Array]> = [];
  for (let i = 0; i < keys; i++) puts.push([Buffer.from(`k${i}`), record]);
  await store.commit([{ fragment: 0, puts, deletes: [], highWaterWallMs: 0 }]);
  let pages = 0;
  const page = store.page.bind(store);
  store.page = (...args) => {
    pages++;
    return page(...args);
  };
  return { store, pagesRead: () => pages };
}

test('the TTL sweep skips a fragment that holds no value with a deadline, until one is written or a full pass is due', async () => {
  const { store, pagesRead } = await storeWith(10);
  // The sweep reads only the count of values with a deadline the actor staged.
  const core = { expiringWritten: 0 } as { expiringWritten: number };
  const sweeper = new TtlSweeper(
    { cleanIntervalMs: 5, cleanKeysPerSec: 1_000_000 },
    store,
    undefined,
    { fragments: () => [0], core: () => core as unknown as FragmentCore, sweepPage: () => {} },
    pino({ level: 'silent' }),
    { nowMs: () => Date.now() },
  );
  sweeper.start();
  try {
    // The first pass reads the fragment through (a page of 10 keys, then an empty one).
    await eventually(() => sweeper.stats.passes >= 3);
    const afterFirst = pagesRead();
    assert.equal(afterFirst, 2);
    assert.ok(sweeper.stats.fragmentsSkipped >= 1, 'later passes skip it');
    // A value with a deadline staged: the next pass reads the fragment again.
    core.expiringWritten++;
    await eventually(() => pagesRead() >= afterFirst + 2);
    // And the one after, with nothing new, skips it again; the tenth pass reads every fragment.
    const skipped = sweeper.stats.fragmentsSkipped;
    await eventually(() => sweeper.stats.fragmentsSkipped > skipped);
    await eventually(() => sweeper.stats.passes > CLEAN_FULL_PASS_INTERVALS + 1);
    assert.ok(pagesRead() >= afterFirst + 4, `a full pass read the fragment (${pagesRead()} pages)`);
    assert.ok(
      pagesRead() <= 2 * (3 + Math.ceil(sweeper.stats.passes / CLEAN_FULL_PASS_INTERVALS)),
      `only the first pass, the one after the write and the full passes read (${pagesRead()} pages in ${sweeper.stats.passes} passes)`,
    );
  } finally {
    sweeper.close();
    await store.close();
  }
});
