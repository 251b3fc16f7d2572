// A node that comes back under its old id without that run's data — the memory store keeps none
// across restarts, a data directory can be lost — would be listed by the table as a replica of copies
// it no longer holds: serving them, or a failover to it, would answer acknowledged writes as
// missing. On real processes on 127.0.0.1: such a node rejoining with --join waits while its seed has
// the coordinator drop its lost copies, then joins empty and takes them anew, no read through it
// missing a key meanwhile; where it held a fragment's only copy it is refused. One started with
// --peers (a lost data directory, the memory store) first asks its members whether they knew it,
// and joins through them the same way. A cluster that starts on new data directories, or on the
// memory store, is not refused.

import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { setTimeout as pause } from 'node:timers/promises';
import {
  JoiningNodes,
  keepLogs,
  localValues,
  type NodeProcess,
  settledWithin,
  startCluster,
} from './cluster-helpers.js';
import { eventually } from './helpers.js';

const TOKEN = 'an-admin-token-for-the-lost-data-tests';
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 30_000;
const KEYS = 300;
const GAVE_UP = /this node was refused by the cluster/;
/** Between two reads through the node whose copies are refilled (a pace, not a wait for anything). */
const READ_PACE_MS = 20;

const keys = Array.from({ length: KEYS }, (_, i) => `lost-data-${i}`);
const values = keys.map((_, i) => `v${i}`);

/**
 * Writes every key through `node`, each confirmed on `replicas` other replicas. A write whose serving
 * replica handed the fragment on before the WAIT (the coordinator evening out who serves) cannot be
 * confirmed and counts as none: the keys are written again until one WAIT confirms them all.
 */
async function writeAll(node: NodeProcess, replicas: number): Promise<void> {
  const client = await node.client();
  await eventually(async () => {
    for (let i = 0; i < KEYS; i++) await client.set(keys[i], values[i]);
    return (await client.call('WAIT', String(replicas), '10000')) === replicas;
  }, CONDITION_MS_MAX);
}

/** Every key reads back through `node` (forwarded where another serves it). */
async function readsEverything(node: NodeProcess): Promise<boolean> {
  const client = await node.client();
  try {
    const got = await client.mget(...keys);
    return got.every((v, i) => v === values[i]);
  } catch {
    return false;
  }
}

/**
 * Reads every key through `node` (paced) while `body` runs: each read, from the node's start until
 * its copies are back, answers every key or fails — none reads as missing — and some are answered.
 */
async function readingThrough(node: NodeProcess, body: () => Promise<void>): Promise<void> {
  let reading = true;
  let reads = 0;
  const reader = (async () => {
    const client = await node.client();
    for (; reading; await pause(READ_PACE_MS)) {
      const got = await client.mget(...keys).catch(() => undefined);
      if (got === undefined) continue;
      reads++;
      const missing = got.filter((v, i) => v !== values[i]).length;
      assert.equal(missing, 0, `a read through ${node.id} answered ${missing} of ${KEYS} keys wrong`);
    }
  })();
  try {
    await body();
  } finally {
    reading = false;
    await reader;
  }
  assert.ok(reads > 0, `reads through ${node.id} were answered`);
}

/** Runs `body`; when it fails, the nodes' logs are kept and the failure says where. */
async function keepingLogs(
  label: string,
  nodes: () => NodeProcess[],
  body: () => Promise<void>,
): Promise<void> {
  try {
    await body();
  } catch (err) {
    const kept = await keepLogs(label, nodes());
    throw new Error(`${(err as Error).message} (node logs kept in ${kept})`, { cause: err });
  }
}

describe('a node back without its data', () => {
  let joining: JoiningNodes;

  before(async () => {
    joining = await JoiningNodes.create('cluster-lost-data', 10, TOKEN, [
      '--store',
      'memory',
      '--workers',
      '1',
    ]);
  });

  after(async () => {
    await joining.stop();
  });

  test('memory store: rejoining under its id, its lost copies are dropped and taken anew, and no read through it misses', () =>
    keepingLogs(
      'lost-data-memory',
      () => joining.nodes,
      async () => {
        // b joins through c, which is not the coordinator (a, the lowest id): its seed asks a over the mesh.
        const a = joining.node('a', 0, []);
        await a.start();
        const c = joining.node('c', 2, joining.joinVia(0));
        await c.start();
        const b = joining.node('b', 1, joining.joinVia(2));
        await b.start();
        const running = () => joining.nodes.filter((n) => n.running);
        await settledWithin(running, ['a', 'b', 'c'], async () => a, TOKEN, CONDITION_MS_MAX);
        for (const n of [a, b, c]) assert.doesNotMatch(n.log, GAVE_UP, `${n.id} started on the memory store`);
        await writeAll(a, 2);

        // b dies and comes back at once, under its id, on an empty memory store.
        await b.stop('SIGKILL');
        const from = b.log.length;
        await b.start();
        await readingThrough(b, async () => {
          await eventually(
            () => /join waits at c: node id b is a replica/.test(b.log.slice(from)),
            CONDITION_MS_MAX,
          );
          await eventually(
            () => /b is back without its data \(joining through c\)/.test(a.log),
            CONDITION_MS_MAX,
          );
          await settledWithin(running, ['a', 'b', 'c'], async () => a, TOKEN, CONDITION_MS_MAX);
          assert.deepEqual(await localValues(b, keys), values, 'b holds its own copy of every key again');
        });
        assert.doesNotMatch(b.log, GAVE_UP);
        for (const n of [a, b, c]) assert.equal(await readsEverything(n), true);
      },
    ));

  test('memory store: an id that held the only copy of some fragments is refused', () =>
    keepingLogs(
      'lost-data-only-copy',
      () => joining.nodes,
      async () => {
        // R = 1: each fragment's one copy is on one of the two nodes.
        const e = joining.node('e', 3, ['--replicas', '1']);
        await e.start();
        const f = joining.node('f', 4, [...joining.joinVia(3), '--replicas', '1']);
        await f.start();
        const running = () => [e, f].filter((n) => n.running);
        await settledWithin(running, ['e', 'f'], async () => e, TOKEN, CONDITION_MS_MAX);
        await f.stop('SIGKILL');
        const from = f.log.length;
        await f.start();
        await eventually(() => GAVE_UP.test(f.log.slice(from)), CONDITION_MS_MAX);
        assert.match(f.log.slice(from), /node id f held the only copy of some fragments/);
        assert.match(e.log, /join of f refused/);
      },
    ));
});

describe('a node back without its data under --peers', () => {
  for (const store of ['lmdb', 'memory'] as const) {
    test(`${store}: a cluster starting ${store === 'lmdb' ? 'on new directories' : 'on the memory store'} serves; a node back without its data rejoins through its members, no read through it missing`, async () => {
      const cluster = await startCluster(
        `cluster-lost-peers-${store}`,
        ['a', 'b', 'c'],
        ['--down-after', '2s', '--store', store, '--admin-port', '0', '--admin-token', TOKEN],
      );
      try {
        await keepingLogs(
          `lost-data-peers-${store}`,
          () => cluster.nodes,
          async () => {
            const [a, b, c] = cluster.nodes;
            const running = () => cluster.nodes.filter((n) => n.running);
            for (const n of cluster.nodes) {
              assert.doesNotMatch(n.log, GAVE_UP, `${n.id} started without data`);
              assert.doesNotMatch(n.log, /knew node id/, `${n.id} ran before`);
            }
            await writeAll(a, 2);

            await b.stop('SIGKILL');
            if (store === 'lmdb') await rm(b.dataDir, { recursive: true, force: true });
            const from = b.log.length;
            await b.start();
            await readingThrough(b, async () => {
              await eventually(
                () => /knew node id b before this run .* joins through its members/.test(b.log.slice(from)),
                CONDITION_MS_MAX,
              );
              await eventually(() => /b is back without its data/.test(a.log), CONDITION_MS_MAX);
              await settledWithin(running, ['a', 'b', 'c'], async () => a, TOKEN, CONDITION_MS_MAX);
              assert.deepEqual(await localValues(b, keys), values, 'b holds its own copy of every key again');
            });
            assert.doesNotMatch(b.log, GAVE_UP);
            for (const n of [a, b, c]) assert.equal(await readsEverything(n), true);
          },
        );
      } finally {
        await cluster.stop();
      }
    });
  }
});
