// The worker's commit loop over a store that logs its writes: the first commit after a quiet spell
// starts at once; commits handed over within LOGGED_COMMIT_GAP_MS of the last transaction's end wait
// and go to the store together, in one transaction, each actor told its own generation; a store
// that keeps no log commits every turn's writes at once.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { CommitAction, FragmentCore, FragmentEvent } from '../../src/core/fragment.js';
import { LOGGED_COMMIT_GAP_MS } from '../../src/core/limits.js';
import type { FragmentWrites, KvStore } from '../../src/native-bindings/kv-store.js';
import { FragmentBoard } from '../../src/threads/fragment-board.js';
import { CommitLoop } from '../../src/workers/commit-loop.js';
import { eventually } from '../integration/helpers.js';

const FRAGMENTS = 4;

/**
 * A store that records each transaction (the fragments it took) and commits it at once; `ended`
 * resolves once the loop has handled the last one's outcome (its handler was chained first).
 */
function recordingStore(logsWrites: boolean): {
  store: KvStore;
  transactions: number[][];
  ended: () => Promise<void>;
  /** The next transactions fail, as on a full disk, until set back to false. */
  failing: { now: boolean };
} {
  const transactions: number[][] = [];
  const failing = { now: false };
  let last = Promise.resolve();
  const store = {
    logsWrites,
    commit(writes: FragmentWrites[]): Promise<void> {
      transactions.push(writes.map((w) => w.fragment));
      last = failing.now ? Promise.reject(new Error('disk full')) : Promise.resolve();
      return last;
    },
    log: () => (failing.now ? 'disk full' : undefined),
    memoryBytes: () => 0,
  } as unknown as KvStore;
  return { store, transactions, ended: () => last.catch(() => {}), failing };
}

function commitLoop(store: KvStore): { loop: CommitLoop; events: Array<[number, FragmentEvent]> } {
  const events: Array<[number, FragmentEvent]> = [];
  const core = (fragment: number) =>
    ({ step: (event: FragmentEvent) => events.push([fragment, event]) }) as unknown as FragmentCore;
  const loop = new CommitLoop(
    { worker: 0, evictAboveBytes: undefined },
    store,
    FragmentBoard.create(FRAGMENTS, 1),
    { core, collect: () => {}, afterAsync: (fn) => fn() },
    pino({ level: 'silent' }),
    { nowMs: () => Date.now() },
  );
  return { loop, events };
}

const commit = (fragment: number, generation: number): CommitAction => ({
  kind: 'commit',
  fragment,
  generation,
  puts: [[Buffer.from(`k${fragment}`), Buffer.from('record')]],
  highWaterWallMs: 0,
});

describe('commit loop', () => {
  it('over a logging store, holds the commits of the gap after a transaction and commits them in one', async () => {
    const { store, transactions, ended } = recordingStore(true);
    const { loop, events } = commitLoop(store);
    loop.commit([commit(0, 1)]);
    assert.deepEqual(transactions, [[0]], 'the first commit after a quiet spell starts at once');
    await ended();
    assert.equal(events.length, 1);
    const endedAtMs = Date.now();
    loop.commit([commit(1, 1)]);
    loop.commit([commit(2, 1), commit(0, 2)]);
    assert.deepEqual(transactions, [[0]], 'commits within the gap are held');
    await eventually(async () => transactions.length === 2);
    assert.ok(Date.now() - endedAtMs >= LOGGED_COMMIT_GAP_MS - 1, 'the held transaction waited out the gap');
    assert.deepEqual(transactions[1], [1, 2, 0], 'one transaction took every held commit');
    await eventually(async () => events.length === 4);
    assert.deepEqual(
      events.map(([f, e]) => [f, e.kind, (e as { generation: number }).generation]),
      [
        [0, 'committed', 1],
        [1, 'committed', 1],
        [2, 'committed', 1],
        [0, 'committed', 2],
      ],
    );
    loop.close();
  });

  it('closing stops the timer of held commits: their writes are in the log', async () => {
    const { store, transactions, ended } = recordingStore(true);
    const { loop, events } = commitLoop(store);
    loop.commit([commit(0, 1)]);
    await ended();
    assert.equal(events.length, 1);
    loop.commit([commit(0, 2)]);
    loop.close();
    // Its timer would have fired within the gap; three gaps later the store has seen nothing more.
    await new Promise((resolve) => setTimeout(resolve, LOGGED_COMMIT_GAP_MS * 3));
    assert.deepEqual(transactions, [[0]]);
  });

  it('after a failed transaction or log append, commits every turn at once until one succeeds', async () => {
    const { store, transactions, ended, failing } = recordingStore(true);
    const { loop, events } = commitLoop(store);
    failing.now = true;
    loop.commit([commit(0, 1)]);
    await ended();
    loop.commit([commit(1, 1)]);
    assert.deepEqual(transactions, [[0], [1]], 'the store is failing: nothing is held');
    await ended();
    failing.now = false;
    loop.commit([commit(2, 1)]);
    await ended();
    loop.commit([commit(3, 1)]);
    assert.deepEqual(transactions, [[0], [1], [2]], 'a success: the gap holds again');
    loop.log([{ kind: 'log', fragment: 3, generation: 2, puts: [] }]);
    failing.now = true;
    loop.log([{ kind: 'log', fragment: 1, generation: 2, puts: [] }]);
    loop.commit([commit(1, 2)]);
    assert.deepEqual(transactions.at(-1), [1], 'a log that cannot append: commits start at once');
    assert.ok(events.some(([f, e]) => f === 1 && e.kind === 'log-failed'));
    loop.close();
  });

  it('over a store that keeps no log, commits every turn at once', async () => {
    const { store, transactions, ended } = recordingStore(false);
    const { loop, events } = commitLoop(store);
    loop.commit([commit(0, 1)]);
    await ended();
    assert.equal(events.length, 1);
    loop.commit([commit(1, 1)]);
    assert.deepEqual(transactions, [[0], [1]]);
    loop.close();
  });
});
