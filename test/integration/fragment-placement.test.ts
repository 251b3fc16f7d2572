// Fragments gained and dropped at runtime on real workers (Dispatcher.holdFragment, dropFragment,
// reconcileNow, drainedTo, watchRounds): on each store a dropped fragment's data is gone and its
// operations are refused, and held again it starts empty and serves; on two embedded nodes a
// fragment held again pulls its peer's keys in its first round, and a replica list's change opens
// and closes senders (the health report's per-sender state).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freePorts } from '../../bench/ports.js';
import { AckLevel } from '../../src/core/replication-sender.js';
import { NOT_LOCAL } from '../../src/main/key-router.js';
import { Tessera } from '../../src/main/node.js';
import type { RoundReport } from '../../src/threads/op-codec.js';
import { CLUSTER_SECRET } from './cluster-helpers.js';
import { eventually, readOnWorker, STORES, tempDir } from './helpers.js';

const FRAGMENTS = 8;
const WAIT_MS = 10_000;

/** `count` keys of `fragment`. */
function keysOf(node: Tessera, fragment: number, count: number, prefix: string): string[] {
  const keys: string[] = [];
  for (let i = 0; keys.length < count; i++) {
    const key = `${prefix}:${i}`;
    if (node.dispatcher.fragmentOf(Buffer.from(key)) === fragment) keys.push(key);
  }
  return keys;
}

/** Two embedded nodes, a and b, each holding every fragment (R=2), in a temp directory. */
async function startPair(
  name: string,
  antiEntropyIntervalMs: number,
): Promise<{ dir: Awaited<ReturnType<typeof tempDir>>; a: Tessera; b: Tessera }> {
  const dir = await tempDir(name);
  const ports = await freePorts(2);
  const common = {
    peers: `a@127.0.0.1:${ports[0]},b@127.0.0.1:${ports[1]}`,
    clusterSecret: CLUSTER_SECRET,
    fragments: FRAGMENTS,
    workers: 1,
    antiEntropyIntervalMs,
  };
  const a = await Tessera.start({ ...common, nodeId: 'a', dataDir: `${dir.path}/a` });
  const b = await Tessera.start({ ...common, nodeId: 'b', dataDir: `${dir.path}/b` });
  return { dir, a, b };
}

for (const store of STORES) {
  test(`${store}: a dropped fragment's data is gone and its operations refused; held again it starts empty`, async () => {
    const dir = await tempDir(`placement-${store}`);
    const node = await Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: FRAGMENTS });
    try {
      const fragment = 3;
      const keys = keysOf(node, fragment, 20, 'gone');
      const other = keysOf(node, fragment + 1, 5, 'kept');
      for (const key of [...keys, ...other]) await node.put(key, `v-${key}`);
      if (store === 'lmdb') {
        await eventually(() => node.dispatcher.readLocal(fragment, Buffer.from(keys[0])) !== NOT_LOCAL);
      }

      await node.dispatcher.dropFragment(fragment);
      assert.equal(node.dispatcher.readLocal(fragment, Buffer.from(keys[0])), NOT_LOCAL, 'no snapshot read');
      await assert.rejects(node.get(keys[0]), /fragment 3 is not served by this worker/);
      await assert.rejects(node.put(keys[0], 'x'), /fragment 3 is not served by this worker/);
      for (const key of other) assert.equal((await node.get(key))?.toString(), `v-${key}`, 'others serve on');
      const health = await node.health();
      assert.ok(
        health.fragments.every((f) => f.fragment !== fragment),
        'no worker reports the dropped fragment',
      );
      // A second drop (as after a worker restart) is answered the same.
      await node.dispatcher.dropFragment(fragment);

      await node.dispatcher.holdFragment(fragment, []);
      for (const key of keys)
        assert.equal(await node.get(key), undefined, `${key} was removed with its fragment`);
      await node.put(keys[0], 'again');
      assert.equal((await node.get(keys[0]))?.toString(), 'again');
      // Held twice: nothing changes.
      await node.dispatcher.holdFragment(fragment, []);
      assert.equal((await node.get(keys[0]))?.toString(), 'again');
      if (store === 'lmdb') {
        await eventually(() => node.dispatcher.readLocal(fragment, Buffer.from(keys[0])) !== NOT_LOCAL);
        assert.equal(node.dispatcher.snapshotReads > 0, true);
      }
    } finally {
      await node.close();
      await dir.cleanup();
    }
  });
}

test('a restarted worker opens the fragments held at runtime, not the dropped ones', async () => {
  const dir = await tempDir('placement-restart');
  const node = await Tessera.start({ store: 'memory', dataDir: dir.path, workers: 1, fragments: FRAGMENTS });
  try {
    await node.dispatcher.dropFragment(2);
    node.debug.crashWorker(0);
    await eventually(async () => (await node.health()).workers[0].restarts === 1);
    const fragments = (await node.health()).fragments.map((f) => f.fragment);
    assert.deepEqual(fragments, [0, 1, 3, 4, 5, 6, 7]);
    await node.dispatcher.holdFragment(2, []);
    const [key] = keysOf(node, 2, 1, 'back');
    await node.put(key, 'v');
    assert.equal((await node.get(key))?.toString(), 'v');
  } finally {
    await node.close();
    await dir.cleanup();
  }
});

test('two nodes: a fragment held again pulls its peer’s keys; replica lists open and close senders', async () => {
  const { dir, a, b } = await startPair('placement-cluster', 3_600_000);
  const A = 0;
  const B = 1;
  try {
    await eventually(async () => (await a.health()).cluster?.peers[0].connected === true);
    await eventually(async () => (await b.health()).cluster?.peers[0].connected === true);
    // A fragment a serves: writes to it are applied at a, then replicated to b.
    const fragment = [...Array(FRAGMENTS).keys()].find((f) => a.cluster!.replicasOf(f)[0] === A)!;
    const keys = keysOf(a, fragment, 40, 'pulled');
    for (const key of keys) await a.put(key, `v-${key}`);
    assert.equal(await a.dispatcher.drainedTo(fragment, B, WAIT_MS), true, 'b acknowledged every write');
    // The senders ask for `store` (the default); a drain at `stable` asks b for it on demand.
    await a.put(keys[0], `v-${keys[0]}`);
    assert.equal(
      await a.dispatcher.drainedTo(fragment, B, WAIT_MS, AckLevel.Stable),
      true,
      'b synced every write',
    );
    for (const key of keys) assert.equal(await readOnWorker(b, key), `v-${key}`);
    // A drain asked right behind writes the worker has not applied yet counts them: they reach b
    // before it answers (a handover drains so, and the new serving replica then reads them).
    const behind = keysOf(a, fragment, 40, 'behind');
    const puts = behind.map((key) => a.put(key, `w-${key}`));
    assert.equal(await a.dispatcher.drainedTo(fragment, B, WAIT_MS), true);
    for (const key of behind) assert.equal(await readOnWorker(b, key), `w-${key}`, `${key} reached b first`);
    await Promise.all(puts);
    // A round (not a copy's verifying one) reads what a's store has committed: writes a has only
    // logged are left to replication. Commit them, so that the round below compares every key.
    await a.flush();

    const sendersOf = async (node: Tessera) =>
      (await node.health()).cluster!.senders.filter((s) => s.fragment === fragment);
    assert.deepEqual(
      (await sendersOf(b)).map((s) => s.peer),
      ['a'],
    );

    // b drops its copy: its sender toward a closes, and a drain or round of it is refused.
    await b.dispatcher.dropFragment(fragment);
    assert.deepEqual(await sendersOf(b), []);
    await assert.rejects(b.dispatcher.drainedTo(fragment, A, WAIT_MS), /no replication sender/);
    await assert.rejects(b.dispatcher.reconcileNow(fragment, A, WAIT_MS), /no replication sender/);

    // b holds it again, empty: its new sender starts no round by itself (a copy being gained asks
    // for its rounds, one source after another); the round asked for pulls every key a holds.
    const rounds: RoundReport[] = [];
    const unwatch = b.dispatcher.watchRounds((r) => {
      if (r.fragment === fragment) rounds.push(r);
    });
    await b.dispatcher.holdFragment(fragment, [A, B]);
    const pulled = b.dispatcher.reconcileNow(fragment, A, WAIT_MS);
    await eventually(() => rounds.some((r) => r.ok), WAIT_MS);
    assert.equal((await pulled).ok, true);
    unwatch();
    const first = rounds.find((r) => r.ok)!;
    assert.equal(first.member, A);
    // A round cut short (the sender reconnecting) keeps what it pulled; a later one pulls the rest.
    const upToFirst = rounds.slice(0, rounds.indexOf(first) + 1);
    assert.equal(
      upToFirst.reduce((n, r) => n + r.keysPulled, 0),
      keys.length + behind.length,
      `the copy was removed: every key is pulled back (rounds ${JSON.stringify(upToFirst)})`,
    );
    for (const key of keys) assert.equal(await readOnWorker(b, key), `v-${key}`);
    for (const key of behind) assert.equal(await readOnWorker(b, key), `w-${key}`);

    // reconcileNow waits for a round that starts after it: complete, and nothing left to pull.
    const now = await b.dispatcher.reconcileNow(fragment, A, WAIT_MS);
    assert.equal(now.ok, true, now.reason);
    assert.equal(now.member, A);
    assert.ok(now.roundSeq > first.roundSeq, 'a later round than the one running before');
    assert.equal(now.keysPulled, 0);

    // The replica list: without a, b's sender toward it closes; the same list twice keeps it.
    await b.dispatcher.holdFragment(fragment, [B]);
    assert.deepEqual(await sendersOf(b), []);
    await b.dispatcher.holdFragment(fragment, [A, B]);
    const [opened] = await sendersOf(b);
    assert.equal(opened.peer, 'a');
    await eventually(async () => (await sendersOf(b))[0].connected, WAIT_MS);
    const { sessionId } = (await sendersOf(b))[0];
    await b.dispatcher.holdFragment(fragment, [A, B]);
    assert.equal((await sendersOf(b))[0].sessionId, sessionId, 'the same list changes nothing');
    await assert.rejects(b.dispatcher.holdFragment(fragment, [A]), /must name this node/);
    await assert.rejects(b.dispatcher.drainedTo(fragment, A, WAIT_MS, 7 as AckLevel), /cannot be told/);
    assert.equal(await b.dispatcher.drainedTo(fragment, A, WAIT_MS), true);
  } finally {
    await Promise.allSettled([a.close(), b.close()]);
    await dir.cleanup();
  }
});

test('two nodes: anti-entropy verifies each copy against the other replica; a restarted worker’s copies are verified anew', async () => {
  const { dir, a, b } = await startPair('placement-verified', 300);
  try {
    const unverified = (node: Tessera) => node.cluster!.movesReport().unverified;
    // Every fragment on both nodes (R=2): a pair each, verified once a round compared everything
    // (counted by the table, once the nodes have one).
    const verified = (node: Tessera) => node.cluster!.movesReport().tableEpoch > 0 && unverified(node) === 0;
    await eventually(() => verified(a) && verified(b), WAIT_MS);
    const rounds: RoundReport[] = [];
    const unwatch = a.dispatcher.watchRounds((r) => rounds.push(r));
    // As the restarted worker serves (before any round of its own can end): what its rounds merged
    // may not have been committed, so its copies are not taken as verified.
    const cluster = a.cluster!;
    const serving = cluster.onWorkerServing.bind(cluster);
    let atRestart = -1;
    cluster.onWorkerServing = (link, fragments) => {
      serving(link, fragments);
      atRestart = unverified(a);
    };
    a.debug.crashWorker(0);
    await eventually(async () => (await a.health()).workers[0].restarts === 1, WAIT_MS);
    await eventually(() => atRestart !== -1, WAIT_MS);
    assert.equal(atRestart, FRAGMENTS);
    await eventually(() => verified(a), WAIT_MS);
    unwatch();
    assert.ok(
      rounds.some((r) => r.ok && r.whole && r.continuity !== 0),
      'verified again by rounds that compared everything',
    );
  } finally {
    await Promise.allSettled([a.close(), b.close()]);
    await dir.cleanup();
  }
});
