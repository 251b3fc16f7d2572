// `--cluster-redirects moved` on real processes on 127.0.0.1: a node answers a key another node
// serves with `-MOVED slot host:port`, as Redis Cluster does; keys it serves, key-less commands and
// keys across slots run where they were sent; redis-cli -c and ioredis Cluster follow the
// redirects; and while a fourth node joins and another leaves under an ioredis Cluster load, the
// client follows the redirects without a failed command, and once settled needs none.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { Cluster as RedisCluster } from 'ioredis';
import { freePorts } from '../../bench/ports.js';
import { slotOf } from '../../src/core/keyspace.js';
import {
  adminPost,
  type ClusterFixture,
  infoOf,
  keepLogs,
  NodeProcess,
  startCluster,
  unsettled,
} from './cluster-helpers.js';
import { eventually } from './helpers.js';
import { RawClient } from './resp-helpers.js';

const TOKEN = 'an-admin-token-for-the-redirect-tests';
const COMMON = ['--cluster-redirects', 'moved', '--admin-port', '0', '--admin-token', TOKEN];
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 90_000;

type SlotRange = [number, number, [string, number, string], ...unknown[]];

/** A key whose slot `port` serves as primary, per the node's CLUSTER SLOTS; and that slot. */
async function keyServedBy(
  at: NodeProcess,
  port: number,
  prefix: string,
): Promise<{ key: string; slot: number }> {
  const slots = (await (await at.client()).call('CLUSTER', 'SLOTS')) as SlotRange[];
  for (let i = 0; i < 100_000; i++) {
    const key = `${prefix}${i}`;
    const slot = slotOf(Buffer.from(key));
    const range = slots.find(([first, last]) => slot >= first && slot <= last);
    if (range?.[2][1] === port) return { key, slot };
  }
  throw new Error(`no slot of port ${port} in CLUSTER SLOTS`);
}

describe('--cluster-redirects moved', () => {
  let fixture: ClusterFixture;
  let joined: NodeProcess | undefined;

  before(async () => {
    fixture = await startCluster('cluster-redirects', ['a', 'b', 'c'], COMMON);
  });
  after(async () => {
    await joined?.stop('SIGKILL');
    await fixture?.stop();
  });

  test('a key another node serves is answered -MOVED to it; the rest runs where it was sent', async (t) => {
    const [a, b] = fixture.nodes;
    const there = await keyServedBy(a, b.respPort, 'there:');
    const here = await keyServedBy(a, a.respPort, 'here:');
    const raw = await RawClient.connect(a.respPort);
    try {
      assert.equal(await raw.call('GET', there.key), `-MOVED ${there.slot} 127.0.0.1:${b.respPort}\r\n`);
      assert.equal(await raw.call('SET', there.key, 'x'), `-MOVED ${there.slot} 127.0.0.1:${b.respPort}\r\n`);
      assert.equal(await raw.call('SET', here.key, 'h'), '+OK\r\n');
      assert.equal(await raw.call('GET', here.key), '$1\r\nh\r\n');
      assert.equal(await raw.call('PING'), '+PONG\r\n');
      // Keys in several slots: Tessera serves them across fragments (Redis would say CROSSSLOT).
      assert.equal(await raw.call('MSET', here.key, 'h2', there.key, 't2'), '+OK\r\n');
      // Redis counts a redirected command as a rejected call.
      assert.match(
        (await (await a.client()).info('commandstats')) as string,
        /cmdstat_get:calls=1,.*rejected_calls=1,/,
      );
    } finally {
      raw.destroy();
    }
    const atB = await RawClient.connect(b.respPort);
    try {
      assert.equal(await atB.call('GET', there.key), '$2\r\nt2\r\n', 'the node it was sent to answers it');
    } finally {
      atB.destroy();
    }
    // READONLY: a read of a fragment this node holds a copy of (R=3: all) is served from it, as a
    // Redis replica serves one; a write still goes to the serving node.
    const replica = await RawClient.connect(a.respPort);
    try {
      assert.equal(await replica.call('READONLY'), '+OK\r\n');
      await eventually(
        async () => (await replica.call('GET', there.key)) === '$2\r\nt2\r\n',
        CONDITION_MS_MAX,
      );
      assert.equal(
        await replica.call('SET', there.key, 'x'),
        `-MOVED ${there.slot} 127.0.0.1:${b.respPort}\r\n`,
      );
    } finally {
      replica.destroy();
    }

    const rc = new RedisCluster([{ host: '127.0.0.1', port: a.respPort }], {
      clusterRetryStrategy: () => null,
    });
    try {
      for (let i = 0; i < 100; i++) assert.equal(await rc.set(`rc:${i}`, `v${i}`), 'OK');
      for (let i = 0; i < 100; i++) assert.equal(await rc.get(`rc:${i}`), `v${i}`);
    } finally {
      rc.disconnect();
    }

    const probe = spawnSync('redis-cli', ['--version'], { encoding: 'utf8' });
    if (probe.status !== 0) {
      if (process.env.TESSERA_REQUIRE_REDIS_TOOLS === '1') assert.fail('redis-cli is required but missing');
      t.skip('redis-cli is not installed: the -c part is not run');
      return;
    }
    const cli = spawnSync('redis-cli', ['-c', '-p', String(a.respPort), 'GET', there.key], {
      encoding: 'utf8',
    });
    assert.equal(cli.stdout.trim(), 't2', 'redis-cli -c follows the redirect');
  });

  test('a node joins and another leaves under an ioredis Cluster load: the client follows every redirect, no command fails', async () => {
    const [a, b, c] = fixture.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const rc = new RedisCluster([{ host: '127.0.0.1', port: a.respPort }], {
      clusterRetryStrategy: () => null,
    });
    const failures: string[] = [];
    let commands = 0;
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        const key = `load:${i % 500}`;
        try {
          await rc.set(key, `v${i}`);
          const read = await rc.get(key);
          if (read !== `v${i}`)
            failures.push(
              `${key} (slot ${slotOf(Buffer.from(key))}, at ${Date.now()}): read ${read}, wrote v${i}`,
            );
          commands += 2;
        } catch (err) {
          failures.push(`${key}: ${(err as Error).message}`);
        }
      }
    })();
    /** The redirects the nodes answered: SET and GET rejected calls, summed. */
    const redirects = async (nodes: NodeProcess[]): Promise<number> => {
      let sum = 0;
      for (const n of nodes) {
        const stats = await infoOf(n, 'commandstats');
        for (const name of ['cmdstat_set', 'cmdstat_get'])
          sum += Number(/rejected_calls=(\d+)/.exec(stats.get(name) ?? '')?.[1] ?? 0);
      }
      return sum;
    };
    const settled = async (nodes: NodeProcess[], members: string[]) => {
      let why = '';
      await eventually(
        async () => (why = await unsettled(nodes, members, a, TOKEN)) === '',
        CONDITION_MS_MAX,
      ).catch((err: Error) => {
        throw new Error(`${err.message}: ${why}`);
      });
    };
    try {
      const [respPort, peerPort] = await freePorts(2);
      joined = new NodeProcess('d', respPort!, peerPort!, a.dataDir.replace(/\/a$/, '/d'), [
        '--peer-port',
        String(peerPort),
        '--workers',
        '2',
        '--fragments',
        '16',
        ...COMMON,
        '--join',
        `127.0.0.1:${a.peerPort}`,
      ]);
      await joined.start();
      const d = joined;
      await settled([a, b, c, d], ['a', 'b', 'c', 'd']);
      // d serves its share of fragments: CLUSTER SLOTS names it, and the client's writes go there.
      const slotsAfterJoin = (await (await a.client()).call('CLUSTER', 'SLOTS')) as SlotRange[];
      assert.ok(
        slotsAfterJoin.some((r) => r[2][1] === d.respPort),
        'd is the primary of some slots',
      );
      await eventually(async () => {
        const stats = (await infoOf(d, 'commandstats')).get('cmdstat_set') ?? '';
        return Number(/calls=(\d+)/.exec(stats)?.[1] ?? 0) > 0;
      }, CONDITION_MS_MAX);
      // b leaves: the fragments it served get a new serving node, and b redirects the client there.
      const exited = new Promise((resolve) => b.child!.once('exit', resolve));
      await adminPost(b, '/cluster/leave', {}, TOKEN);
      await exited;
      await b.stop();
      const running = [a, c, d];
      await settled(running, ['a', 'c', 'd']);
      // Settled, the client learns the last changes from the redirects of its next pass over the
      // keys (500 keys, a SET and a GET each); from then on it routes straight to each slot's
      // serving node: no more redirects.
      const settledCommands = commands;
      await eventually(async () => commands >= settledCommands + 1_000, CONDITION_MS_MAX);
      const learnedAt = await redirects(running);
      const commandsAt = commands;
      await eventually(async () => commands >= commandsAt + 1_000, CONDITION_MS_MAX);
      assert.equal(await redirects(running), learnedAt, 'no redirect once the client learned the layout');
      // A node asked for a slot another serves still redirects to the node CLUSTER SLOTS names.
      const slots = (await (await a.client()).call('CLUSTER', 'SLOTS')) as SlotRange[];
      const other = slots.find((r) => r[2][1] !== a.respPort);
      assert.ok(other !== undefined, 'a serves some slots, not all');
      const port = other[2][1];
      const elsewhere = await keyServedBy(a, port, 'elsewhere:');
      const raw = await RawClient.connect(a.respPort);
      try {
        assert.equal(await raw.call('GET', elsewhere.key), `-MOVED ${elsewhere.slot} 127.0.0.1:${port}\r\n`);
      } finally {
        raw.destroy();
      }
    } finally {
      writing = false;
      await writer;
      rc.disconnect();
    }
    assert.ok(commands > 0, 'the load ran');
    // A failed run keeps the nodes' logs, to read against the failures' times.
    if (failures.length > 0) {
      const nodes = joined === undefined ? [a, b, c] : [a, b, c, joined];
      console.log(`cluster-redirects: node logs kept in ${await keepLogs('redirects-load', nodes)}`);
    }
    assert.deepEqual(
      failures.slice(0, 5),
      [],
      `${failures.length} of ${commands + failures.length} commands failed`,
    );
  });
});
