import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import type { FragmentCore } from '../../src/core/fragment.js';
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

/** A sweeper over `store`'s fragment 0, run by `core`, whose `committed` answers as `committed` does. */
function sweeperOf(store: KvStore, core: { expiringWritten: number }, committed: () => Promise<void>) {
  return new TtlSweeper(
    { cleanIntervalMs: 5, cleanKeysPerSec: 1_000_000 },
    store,
    undefined,
    {
      fragments: () => [0],
      // The sweep reads only the actor's count of values with a deadline it staged.
      core: () => core as unknown as FragmentCore,
      committed,
      sweepPage: () => {},
    },
    pino({ level: 'silent' }),
    { nowMs: () => Date.now() },
  );
}

test('the TTL sweep skips a fragment that holds no value with a deadline, until one is written', async () => {
  const { store, pagesRead } = await storeWith(10);
  const core = { expiringWritten: 0 };
  let fences = 0;
  const sweeper = sweeperOf(store, core, async () => {
    fences++;
  });
  sweeper.start();
  try {
    // The first pass waits for what the actor staged, then reads the fragment through (a page of
    // 10 keys, then an empty one).
    await eventually(() => sweeper.stats.passes >= 4);
    assert.equal(pagesRead(), 2);
    assert.equal(fences, 1);
    assert.ok(sweeper.stats.fragmentsSkipped >= 2, 'later passes skip it');
    // A value with a deadline staged: the next pass reads the fragment again, and the one after
    // skips it again.
    core.expiringWritten++;
    await eventually(() => pagesRead() === 4);
    const skipped = sweeper.stats.fragmentsSkipped;
    await eventually(() => sweeper.stats.fragmentsSkipped > skipped + 2);
    assert.equal(pagesRead(), 4, 'nothing new: not read again');
    assert.equal(fences, 2);
  } finally {
    sweeper.close();
    await store.close();
  }
});

test('a pass that cannot wait for the staged writes to be committed proves nothing: the next reads again', async () => {
  const { store, pagesRead } = await storeWith(10);
  const sweeper = sweeperOf(store, { expiringWritten: 0 }, () => Promise.reject(new Error('store failing')));
  sweeper.start();
  try {
    await eventually(() => sweeper.stats.passes >= 3 && pagesRead() >= 6);
    assert.equal(sweeper.stats.fragmentsSkipped, 0);
  } finally {
    sweeper.close();
    await store.close();
  }
});
