// Chaos: three nodes with two replicas per fragment take writes on every node while nodes are
// killed (SIGKILL) and restarted one after another. Afterwards every acknowledged write is on both
// of its fragment's replicas, read from each replica's own copy.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Redis } from 'ioredis';
import { slotOf } from '../../src/core/keyspace.js';
import { startCluster } from '../integration/cluster-helpers.js';
import { eventually, sleep } from '../integration/helpers.js';
import { newClient } from '../integration/resp-helpers.js';

const CHAOS_ROUNDS = 4;

test('kill -9 and restart nodes under writes: no acknowledged write is lost on any replica', async (t) => {
  const cluster = await startCluster(
    'cluster-chaos',
    ['a', 'b', 'c'],
    ['--replicas', '2', '--anti-entropy-interval', '2s'],
  );
  const acked = new Map<string, string>();
  let attempted = 0;
  /** Nodes between their kill and their next ready line: their own clients wait. */
  const down = [false, false, false];
  const failures = new Map<string, number>();
  let stop = false;
  try {
    /**
     * Runs `step` over and over through node `index` until the end, waiting while the node is down
     * and reconnecting after a failed step (which `step` has already counted or ignored).
     */
    const through = async (index: number, step: (client: Redis, i: number) => Promise<void>) => {
      let client: Redis | undefined;
      for (let i = 0; !stop; i++) {
        if (down[index]) {
          client?.disconnect();
          client = undefined;
          await sleep(50);
          continue;
        }
        client ??= newClient(cluster.nodes[index].respPort);
        try {
          await step(client, i);
        } catch {
          client.disconnect();
          client = undefined;
        }
      }
      client?.disconnect();
    };
    const writer = (index: number) =>
      through(index, async (client, i) => {
        const key = `chaos:${index}:${i}`;
        const value = `v${i}`;
        attempted++;
        try {
          await client.set(key, value);
          acked.set(key, value);
        } catch (err) {
          // Not acknowledged (the node or the serving replica died): it may or may not be stored.
          const reason = (err as Error).message.slice(0, 60);
          failures.set(reason, (failures.get(reason) ?? 0) + 1);
          throw err;
        }
      });
    /** Overwrites and deletes of a few hot keys through every node: the replicas must agree at the end. */
    const hot = Array.from({ length: 20 }, (_, i) => `hot:${i}`);
    const contender = (index: number) =>
      through(index, async (client, i) => {
        const key = hot[(i * 7 + index) % hot.length];
        if (i % 5 === 4) await client.del(key);
        else await client.set(key, `${index}:${i}`);
      });
    const writers = [0, 1, 2].map((i) => writer(i));
    const contenders = [0, 1, 2].map((i) => contender(i));
    for (let round = 0; round < CHAOS_ROUNDS; round++) {
      await sleep(700);
      const victim = cluster.nodes[round % 3];
      down[round % 3] = true;
      await victim.stop('SIGKILL');
      await sleep(500);
      await victim.start();
      down[round % 3] = false;
    }
    await sleep(500);
    stop = true;
    await Promise.all([...writers, ...contenders]);
    await cluster.connected();
    assert.ok(acked.size > 200, `enough writes were acknowledged (${acked.size} of ${attempted})`);
    t.diagnostic(`${acked.size} of ${attempted} writes acknowledged through ${CHAOS_ROUNDS} kills`);
    t.diagnostic(`not acknowledged: ${JSON.stringify([...failures])}`);

    // Where each slot lives, from the slot map every node now agrees on.
    const probe = newClient(cluster.nodes[0].respPort);
    const slots = (await probe.call('CLUSTER', 'SLOTS')) as Array<
      [number, number, ...Array<[string, number]>]
    >;
    probe.disconnect();
    const holders = (key: string) => {
      const slot = slotOf(Buffer.from(key));
      const entry = slots.find(([first, last]) => slot >= first && slot <= last)!;
      return entry.slice(2).map((e) => (e as [string, number])[1]);
    };
    const readers = new Map<number, Redis>();
    for (const node of cluster.nodes) {
      const r = newClient(node.respPort);
      await r.call('READONLY');
      readers.set(node.respPort, r);
    }
    try {
      const keys = [...acked.keys()];
      for (const key of keys) assert.equal(holders(key).length, 2, 'both replicas are up and listed');
      await eventually(async () => {
        for (const key of keys) {
          for (const port of holders(key)) {
            if ((await readers.get(port)!.get(key)) !== acked.get(key)) return false;
          }
        }
        return true;
      }, 30_000);
      // Concurrent overwrites and deletes of the same keys settle on one LWW winner per key.
      await eventually(async () => {
        for (const key of hot) {
          const [x, y] = holders(key);
          if ((await readers.get(x)!.get(key)) !== (await readers.get(y)!.get(key))) return false;
        }
        return true;
      }, 30_000);
    } finally {
      for (const r of readers.values()) r.disconnect();
    }
  } finally {
    stop = true;
    await cluster.stop();
  }
});
