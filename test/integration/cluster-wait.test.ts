// WAIT, WAITAOF and replica acknowledgements on writes, with real processes: three nodes, three
// replicas per fragment. A write WAIT confirmed is on the replicas it counted (read from their own
// copies at once, no waiting); a write that asks for more replicas than answer gets NOREPLICAS;
// WAITAOF reaches replicas under the default `store` acknowledgements too; and under SIGKILLs at
// seeded moments no write a WAIT (or --replica-acks) confirmed is lost.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { seededFractions } from '../unit/fixtures/xorshift32.js';
import { type ClusterFixture, keepLogs, localValues, startCluster } from './cluster-helpers.js';
import { eventually } from './helpers.js';
import { newClient, rejectsWith } from './resp-helpers.js';

const NODE_IDS = ['a', 'b', 'c'];
const KEYS = Array.from({ length: 40 }, (_, i) => `wait:${i}`);

describe('WAIT and replica acknowledgements (3 nodes, R=3, --replication-ack stable)', () => {
  let cluster: ClusterFixture;
  before(async () => {
    cluster = await startCluster('wait', NODE_IDS, [
      '--replication-ack',
      'stable',
      '--replica-ack-timeout',
      '300ms',
    ]);
  });
  after(() => cluster?.stop());

  test('WAIT 2 answers 2 once both other replicas hold every write of the connection, forwarded ones too', async () => {
    const c = await cluster.nodes[0].client();
    for (const key of KEYS) await c.set(key, `v-${key}`);
    // ioredis sends WAIT as it is.
    assert.equal(await c.wait(2, 10_000), 2);
    // Acknowledged by both: each node's own copy has every write now, not eventually.
    for (const node of cluster.nodes) {
      assert.deepEqual(
        await localValues(node, KEYS),
        KEYS.map((k) => `v-${k}`),
        node.id,
      );
    }
    assert.equal(await c.wait(1, 0), 2, 'nothing new to wait for: every replica there is');
  });

  test('WAITAOF 1 2 answers [1, 2] once the writes are on disk here and at both replicas', async () => {
    const c = await cluster.nodes[1].client();
    for (const key of KEYS) await c.set(key, `aof-${key}`);
    assert.deepEqual(await c.call('WAITAOF', '1', '2', '10000'), [1, 2]);
    for (const node of cluster.nodes) {
      assert.deepEqual(
        await localValues(node, KEYS),
        KEYS.map((k) => `aof-${k}`),
        node.id,
      );
    }
  });

  test('a write with REPLICAS n is answered once n replicas hold it; more than there are is NOREPLICAS', async () => {
    const c = await cluster.nodes[2].client();
    assert.equal(await c.call('TESSERA.DURABILITY', 'store', 'REPLICAS', '2'), 'OK');
    for (const key of KEYS.slice(0, 10)) assert.equal(await c.set(key, `acked-${key}`), 'OK');
    for (const node of cluster.nodes) {
      assert.deepEqual(
        await localValues(node, KEYS.slice(0, 10)),
        KEYS.slice(0, 10).map((k) => `acked-${k}`),
        node.id,
      );
    }
    // A modification carries its wait too, to whichever node serves its key.
    const counters = Array.from({ length: 8 }, (_, i) => `wait:n:${i}`);
    for (let round = 1; round <= 3; round++)
      for (const key of counters) assert.equal(await c.incr(key), round);
    for (const node of cluster.nodes) {
      assert.deepEqual(
        await localValues(node, counters),
        counters.map(() => '3'),
        node.id,
      );
    }
    assert.equal(await c.call('TESSERA.DURABILITY', 'store', 'REPLICAS', '3'), 'OK');
    await rejectsWith(
      c.set('wait:none', 'x'),
      /^NOREPLICAS the write is applied locally but not yet replicated: 2 of 3/,
    );
    await rejectsWith(c.mset('wait:m1', 'x', 'wait:m2', 'y'), /^NOREPLICAS /);
    // Applied at the serving replica all the same.
    assert.equal(await c.get('wait:none'), 'x');
    // A write that writes nothing answers as itself, replicated or not.
    assert.equal(await c.set('wait:none', 'y', 'NX'), null);
    await rejectsWith(c.incr('wait:none'), /^ERR value is not an integer/);
    await rejectsWith(
      c.call('TESSERA.DURABILITY', 'store', 'REPLICAS', '-1'),
      /^ERR REPLICAS must be an integer/,
    );
  });
});

test('under the default --replication-ack store, WAITAOF asks the replicas for stable on demand', async () => {
  const cluster = await startCluster('waitaof-store', NODE_IDS, []);
  try {
    const c = await cluster.nodes[0].client();
    for (const key of KEYS) await c.set(key, `store-${key}`);
    assert.equal(await c.wait(2, 10_000), 2, 'store, as batches ask');
    assert.deepEqual(await c.call('WAITAOF', '1', '2', '10000'), [1, 2], 'stable, asked after the fact');
    await c.set(KEYS[0]!, 'again');
    assert.deepEqual(await c.call('WAITAOF', '0', '2', '10000'), [1, 2], 'and for a write not sent yet');
  } finally {
    await cluster.stop();
  }
});

/**
 * Kills at seeded moments; each round's writers run on every node until the kill. Three per run;
 * `TESSERA_WAIT_KILLS=<n>` runs n in one (a long check by hand, e.g. 50).
 */
const KILL_ROUNDS = Number(process.env.TESSERA_WAIT_KILLS ?? 3);
const WRITE_MS_MIN = 300;
const WRITE_MS_MAX = 900;

function seedOf(): number {
  const given = process.env.TESSERA_WAIT_SEED;
  return given === undefined ? (Date.now() ^ (process.pid << 16)) >>> 0 : Number(given) >>> 0;
}

test('SIGKILL at random moments: every write a WAIT or --replica-acks confirmed is readable through each survivor', async () => {
  const seed = seedOf();
  const random = seededFractions(seed);
  console.log(`cluster-wait seed ${seed} (replay: TESSERA_WAIT_SEED=${seed})`);
  // Anti-entropy at its default (60 s) does not repair a survivor in time: a confirmed write must be
  // read through each survivor because the one that serves its fragment caught up before serving.
  const cluster = await startCluster('wait-kill', NODE_IDS, ['--replica-ack-timeout', '2s']);
  try {
    const confirmed = new Map<string, string>();
    let written = 0;
    for (let round = 0; round < KILL_ROUNDS; round++) {
      const victim = Math.floor(random() * NODE_IDS.length);
      const writeMs = WRITE_MS_MIN + Math.floor(random() * (WRITE_MS_MAX - WRITE_MS_MIN));
      let stop = false;
      let confirmedInRound = 0;
      const writers = cluster.nodes.flatMap((node, n) =>
        [false, true].map(async (acksOnWrite) => {
          const c = newClient(node.respPort, { maxRetriesPerRequest: 0 });
          c.on('error', () => {});
          try {
            if (acksOnWrite) await c.call('TESSERA.DURABILITY', 'store', 'REPLICAS', '1');
            for (let i = 0; !stop; i++) {
              const key = `k:${round}:${n}:${acksOnWrite ? 'r' : 'w'}:${i}`;
              const value = `${seed}-${key}`;
              await c.set(key, value);
              written++;
              if (acksOnWrite || (await c.wait(1, 0)) >= 1) {
                confirmed.set(key, value);
                confirmedInRound++;
              }
            }
          } catch {
            // The node died under it (or its forwarding did): what was confirmed before stands.
          } finally {
            c.disconnect();
          }
        }),
      );
      // The kill's moment counts from the round's first confirmed write: a node that just started
      // (or restarted) holds requests while it catches up, for up to a second on a busy machine.
      await eventually(async () => confirmedInRound > 0, 30_000).catch(() => {
        throw new Error(`seed ${seed} round ${round}: no write was confirmed within 30 s`);
      });
      await new Promise((resolve) => setTimeout(resolve, writeMs));
      await cluster.nodes[victim].stop('SIGKILL');
      stop = true;
      await Promise.all(writers);
      const survivors = cluster.nodes.filter((n) => n.running);
      const clients = survivors.map((n) => newClient(n.respPort));
      try {
        const keys = [...confirmed.keys()];
        assert.ok(keys.length > 0, `seed ${seed} round ${round}: no write was confirmed`);
        // Until the survivors find the victim unreachable a read may fail (and is asked again);
        // a read that is answered must hold every confirmed write.
        let problem = '';
        await eventually(async () => {
          for (const [s, c] of clients.entries()) {
            const values = await c.mget(...keys).catch((err: Error) => err.message);
            if (typeof values === 'string') {
              problem = `${survivors[s]!.id}: ${values}`;
              return false;
            }
            const i = values.findIndex((v, i) => v !== confirmed.get(keys[i]!));
            assert.equal(
              i,
              -1,
              `seed ${seed} round ${round} (SIGKILL ${NODE_IDS[victim]}): ${survivors[s]!.id} reads confirmed ${keys[i]} as ${values[i]}`,
            );
          }
          return true;
        }, 30_000).catch((err: Error) => {
          if (err.name === 'AssertionError') throw err;
          throw new Error(
            `seed ${seed} round ${round} (SIGKILL ${NODE_IDS[victim]}): a survivor never answered: ${problem}`,
          );
        });
      } finally {
        for (const c of clients) c.disconnect();
      }
      await cluster.nodes[victim].start();
      await cluster.connected();
    }
    console.log(`cluster-wait seed ${seed}: ${confirmed.size} of ${written} writes confirmed, all readable`);
    assert.ok(confirmed.size > 0 && confirmed.size <= written, `seed ${seed}: ${confirmed.size} confirmed`);
  } catch (err) {
    console.log(`cluster-wait seed ${seed}: node logs kept in ${await keepLogs('wait-kill', cluster.nodes)}`);
    throw err;
  } finally {
    await cluster.stop();
  }
});
