// Three-node clusters as child processes on 127.0.0.1: routing, replication, anti-entropy after a
// crash and after a split, replication drain on shutdown, and cluster-mode clients.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { Cluster as RedisCluster } from 'ioredis';
import { type ClusterFixture, infoOf, localValues, startCluster } from './cluster-helpers.js';
import { eventually, sleep } from './helpers.js';
import { RawClient } from './resp-helpers.js';

const keysOf = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
/** Writes of the crash test's stream acknowledged before the kill: a small share of its 2000. */
const ACKED_BEFORE_KILL = 100;

describe('a three-node cluster', () => {
  let cluster: ClusterFixture;
  before(async () => {
    cluster = await startCluster(
      'cluster-basic',
      ['a', 'b', 'c'],
      ['--anti-entropy-interval', '1s', '--admin-port', '0'],
    );
  });
  after(async () => {
    await cluster?.stop();
  });

  test('a write at any node is readable at every replica, and replication lag returns to 0', async () => {
    const keys = keysOf('any:', 300);
    for (const [i, node] of cluster.nodes.entries()) {
      const redis = await node.client();
      for (let k = i; k < keys.length; k += 3) assert.equal(await redis.set(keys[k], `v${k}`), 'OK');
    }
    const expected = keys.map((_, k) => `v${k}`);
    // Every node answers every key at once: reads go to the replica that applied the write.
    let counted = 0;
    for (const node of cluster.nodes) {
      const redis = await node.client();
      assert.deepEqual(await redis.mget(...keys), expected);
      // KEYS walks every fragment at its serving replica; DBSIZE counts the fragments this node
      // serves, as a Redis Cluster master counts its slots, so the nodes' counts add up.
      assert.equal((await redis.keys('any:*')).length, keys.length);
      counted += await redis.dbsize();
    }
    assert.equal(counted, keys.length);
    for (const node of cluster.nodes) {
      await eventually(async () => {
        const values = await localValues(node, keys);
        return values.every((v, k) => v === expected[k]);
      }, 15_000);
    }
    for (const node of cluster.nodes) {
      await eventually(
        async () => (await infoOf(node, 'replication')).get('replication_backlog_ops') === '0',
      );
      const info = await infoOf(node, 'replication');
      assert.equal(info.get('connected_slaves'), '2');
      // Redis's per-replica lines name the other nodes' client ports.
      const others = cluster.nodes.filter((n) => n !== node).map((n) => n.respPort);
      for (const line of [info.get('slave0'), info.get('slave1')]) {
        const m = /^ip=127\.0\.0\.1,port=(\d+),state=online,offset=\d+,lag=\d+$/.exec(line ?? '');
        assert.ok(m !== null && others.includes(Number(m[1])), `slave line: ${line}`);
      }
      assert.match(info.get('peer_a') ?? info.get('peer_b') ?? '', /state=online/);
    }
  });

  test('read-modify-writes run at the serving replica and replicate their result', async () => {
    const a = await cluster.nodes[0].client();
    const b = await cluster.nodes[1].client();
    for (let i = 0; i < 10; i++) await (i % 2 === 0 ? a : b).incr('counter');
    assert.equal(await a.get('counter'), '10');
    assert.equal(await b.append('counter', '!'), 3);
    for (const node of cluster.nodes) {
      await eventually(async () => (await localValues(node, ['counter']))[0] === '10!');
    }
  });

  test('bit, HyperLogLog, LCS and BITFIELD commands answer alike at every node and replicate', async () => {
    const [a, b, c] = await Promise.all(cluster.nodes.map((node) => node.client()));
    // One hash slot: whichever node serves it, the other two forward to it.
    assert.equal(await a.pfadd('{x}hll', 'p', 'q', 'r'), 1);
    assert.equal(await b.pfadd('{x}hll', 's'), 1);
    assert.equal(await c.pfcount('{x}hll'), 4);
    assert.equal(await a.pfmerge('{x}union', '{x}hll'), 'OK');
    assert.equal(await b.pfcount('{x}hll', '{x}union'), 4);
    assert.equal(await a.setbit('{x}bits', 9, 1), 0);
    assert.deepEqual(
      await b.call('BITFIELD', '{x}bits', 'INCRBY', 'u8', '8', '1', 'GET', 'u16', '0'),
      [65, 65],
    );
    assert.equal(await c.bitop('NOT', '{x}not', '{x}bits'), 2);
    assert.equal(await c.bitcount('{x}not'), 14);
    await a.mset('{x}s1', 'ohmytext', '{x}s2', 'mynewtext');
    assert.equal(await b.call('LCS', '{x}s1', '{x}s2'), 'mytext');
    assert.equal(await c.getset('{x}s1', 'new'), 'ohmytext');
    const keys = ['{x}bits', '{x}not', '{x}s1'];
    for (const node of cluster.nodes) {
      await eventually(async () => {
        const values = await localValues(node, keys);
        // (The NOT result is not UTF-8: only its presence is compared here; its bits were counted above.)
        return values[0] === '\u0000A' && values[1] !== null && values[2] === 'new';
      });
    }
  });

  test('the admin face reports the peers: /cluster, /metrics, /placement', async () => {
    const a = cluster.nodes[0];
    const base = `http://127.0.0.1:${a.adminPort}`;
    const info = (await (await fetch(`${base}/cluster`)).json()) as {
      members: string[];
      peers: Array<{ id: string; connected: boolean }>;
    };
    assert.deepEqual(info.members, ['a', 'b', 'c']);
    assert.deepEqual(
      info.peers.map((p) => [p.id, p.connected]),
      [
        ['b', true],
        ['c', true],
      ],
    );
    const metrics = await (await fetch(`${base}/metrics`)).text();
    assert.match(metrics, /\ntessera_peer_up\{peer="b"\} 1\n/);
    assert.match(metrics, /\ntessera_replication_lag_seconds\{peer="c"\} [0-9.]+\n/);
    const placement = (await (await fetch(`${base}/placement`)).json()) as Array<{ replicas: string[] }>;
    assert.equal(placement.length, 16);
    assert.ok(placement.every((f) => f.replicas.length === 3));
  });

  test('CLUSTER SLOTS covers every slot once, and ioredis Cluster reads and writes through it', async () => {
    const a = await cluster.nodes[0].client();
    const slots = (await a.call('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number, string]]>;
    const covered = new Array(16384).fill(0);
    for (const [first, last, primary] of slots) {
      for (let s = first; s <= last; s++) covered[s]++;
      assert.ok(
        cluster.nodes.some((n) => n.respPort === primary[1]),
        'the primary is a member',
      );
    }
    assert.ok(
      covered.every((n) => n === 1),
      'every slot exactly once',
    );
    assert.match((await a.call('CLUSTER', 'INFO')) as string, /cluster_state:ok/);
    assert.equal(await a.call('CLUSTER', 'KEYSLOT', 'foo'), 12182);
    const nodes = (await a.call('CLUSTER', 'NODES')) as string;
    assert.equal(nodes.trim().split('\n').length, 3);
    // WAIT counts the replicas that acknowledged the connection's writes (cluster-wait.test.ts).
    assert.equal(await a.call('SET', 'wait:k', 'v'), 'OK');
    assert.ok(Number(await a.call('WAIT', '1', '5000')) >= 1);

    const rc = new RedisCluster([{ host: '127.0.0.1', port: cluster.nodes[2].respPort }], {
      enableOfflineQueue: true,
      clusterRetryStrategy: () => null,
    });
    try {
      for (let i = 0; i < 50; i++) assert.equal(await rc.set(`rc:${i}`, `x${i}`), 'OK');
      for (let i = 0; i < 50; i++) assert.equal(await rc.get(`rc:${i}`), `x${i}`);
    } finally {
      rc.disconnect();
    }
    const counted = await a.call(
      'CLUSTER',
      'COUNTKEYSINSLOT',
      String(await a.call('CLUSTER', 'KEYSLOT', 'rc:1')),
    );
    assert.ok((counted as number) >= 1);
  });

  test('Pub/Sub: a message published at any node reaches the subscribers of every node, once', async () => {
    const [a, b, c] = cluster.nodes;
    const subB = await RawClient.connect(b.respPort);
    const subC = await RawClient.connect(c.respPort);
    try {
      subB.sendCommand('SUBSCRIBE', 'cluster:news');
      subC.sendCommand('PSUBSCRIBE', 'cluster:*');
      subC.sendCommand('SSUBSCRIBE', 'cluster:{shard}');
      for (const client of [subB, subC, subC]) await client.readReply();
      const pub = await a.client();
      // Redis Cluster's count: the receivers at the node that was asked.
      assert.equal(await pub.publish('cluster:news', 'one'), 0);
      assert.equal(await pub.spublish('cluster:{shard}', 'two'), 0);
      const local = await c.client();
      assert.equal(await local.publish('cluster:news', 'three'), 1);
      const message = (...parts: string[]) =>
        `*${parts.length}\r\n${parts.map((p) => `$${p.length}\r\n${p}\r\n`).join('')}`;
      // Each exactly once (a receiver never passes a message on); from two nodes, in either order.
      const atB = [(await subB.readReply()).toString(), (await subB.readReply()).toString()];
      assert.deepEqual(atB.sort(), [
        message('message', 'cluster:news', 'one'),
        message('message', 'cluster:news', 'three'),
      ]);
      const atC = [];
      for (let i = 0; i < 3; i++) atC.push((await subC.readReply()).toString());
      assert.deepEqual(
        atC.sort(),
        [
          message('pmessage', 'cluster:*', 'cluster:news', 'one'),
          message('pmessage', 'cluster:*', 'cluster:news', 'three'),
          message('smessage', 'cluster:{shard}', 'two'),
        ].sort(),
      );
      await sleep(200);
      assert.equal(subB.pendingBytes + subC.pendingBytes, 0, 'no message arrived twice');
      // PUBSUB answers for the node asked, as in Redis Cluster.
      assert.deepEqual(await pub.pubsub('NUMSUB', 'cluster:news'), ['cluster:news', 0]);
      assert.deepEqual(await (await b.client()).pubsub('NUMSUB', 'cluster:news'), ['cluster:news', 1]);
    } finally {
      subB.destroy();
      subC.destroy();
    }
  });

  test('redis-cli -c reads and writes through any node', (t) => {
    const probe = spawnSync('redis-cli', ['--version'], { encoding: 'utf8' });
    if (probe.status !== 0) {
      if (process.env.TESSERA_REQUIRE_REDIS_TOOLS === '1') assert.fail('redis-cli is required but missing');
      t.skip('redis-cli is not installed');
      return;
    }
    const port = String(cluster.nodes[1].respPort);
    const set = spawnSync('redis-cli', ['-c', '-p', port, 'SET', 'cli:key', 'cli-value'], {
      encoding: 'utf8',
    });
    assert.equal(set.stdout.trim(), 'OK');
    const get = spawnSync('redis-cli', ['-c', '-p', String(cluster.nodes[2].respPort), 'GET', 'cli:key'], {
      encoding: 'utf8',
    });
    assert.equal(get.stdout.trim(), 'cli-value');
  });

  test('DBSIZE counts the keys a node serves, so redis-cli --cluster info and check count each key once', async (t) => {
    if (spawnSync('redis-cli', ['--version']).status !== 0) {
      if (process.env.TESSERA_REQUIRE_REDIS_TOOLS === '1') assert.fail('redis-cli is required but missing');
      t.skip('redis-cli is not installed');
      return;
    }
    await Promise.all(keysOf('count:', 200).map(async (k) => (await cluster.nodes[0].client()).set(k, 'v')));
    // Every key once: a SCAN through any node walks every fragment where it is served.
    let total = 0;
    let cursor = '0';
    do {
      const [next, keys] = await (await cluster.nodes[0].client()).scan(cursor, 'COUNT', 1000);
      total += keys.length;
      cursor = next;
    } while (cursor !== '0');
    assert.ok(total >= 200);
    const sizes = await Promise.all(cluster.nodes.map(async (n) => (await n.client()).dbsize()));
    assert.equal(
      sizes.reduce((a, b) => a + b, 0),
      total,
      `DBSIZE per node ${sizes.join(' + ')} should add up to the cluster's ${total} keys`,
    );
    const seed = `127.0.0.1:${cluster.nodes[1].respPort}`;
    for (const sub of ['info', 'check']) {
      const run = spawnSync('redis-cli', ['--cluster', sub, seed], { encoding: 'utf8' });
      assert.match(
        run.stdout,
        new RegExp(`\\[OK\\] ${total} keys in 3 masters`),
        `--cluster ${sub}:\n${run.stdout}`,
      );
    }
  });
});

describe('failures', () => {
  test('SIGKILL of a replica during a write stream: writes continue, and after restart it converges', async () => {
    const cluster = await startCluster('cluster-crash', ['a', 'b', 'c'], ['--anti-entropy-interval', '1s']);
    try {
      const [a, b, c] = cluster.nodes;
      const writerA = await a.client();
      const writerB = await b.client();
      const keys = keysOf('crash:', 2000);
      let failed = 0;
      const acked: number[] = [];
      const stream = (async () => {
        for (let i = 0; i < keys.length; i++) {
          try {
            await (i % 2 === 0 ? writerA : writerB).set(keys[i], `v${i}`);
            acked.push(i);
          } catch {
            failed++;
          }
        }
      })();
      // Kill c once the stream is under way, and check that it was still running when c was gone:
      // the writes after the kill are the ones this test is about.
      await eventually(() => acked.length >= ACKED_BEFORE_KILL);
      await c.stop('SIGKILL');
      const ackedAtKill = acked.length;
      await stream;
      assert.ok(
        ackedAtKill < keys.length,
        `writes were outstanding when c was gone (${ackedAtKill} of ${keys.length} acknowledged)`,
      );
      assert.equal(failed, 0, 'every write of the stream succeeded');
      assert.equal(acked.length, keys.length);
      // Writes while c is down land on a and b only; c must repair them by anti-entropy.
      for (let i = 0; i < 200; i++) await writerA.set(`down:${i}`, `d${i}`);
      await writerA.del('crash:5', 'crash:6');
      await c.start();
      await cluster.connected();
      // Every acknowledged write is somewhere durable (store durability at its serving replica), and
      // anti-entropy brings all three copies to the same state: exactly what was acknowledged.
      const universe = [...keys, ...keysOf('down:', 200)];
      const expected = universe.map((k, i) => {
        if (k === 'crash:5' || k === 'crash:6') return null;
        return i < keys.length ? `v${i}` : `d${i - keys.length}`;
      });
      for (const node of cluster.nodes) {
        await eventually(async () => {
          const values = await localValues(node, universe);
          return values.every((v, i) => v === expected[i]);
        }, 20_000);
      }
      // lmdb nodes read the pages they compare in the background pool, not in the fragment's worker.
      // (The senders' replay may converge c before its first round has read a page: wait for one.)
      await eventually(
        async () => Number((await infoOf(c, 'replication')).get('anti_entropy_pool_pages')) > 0,
        20_000,
      );
    } finally {
      await cluster.stop();
    }
  });

  test('a split: both sides write the same keys; after rejoining every node holds the LWW winner', async () => {
    const cluster = await startCluster('cluster-split', ['a', 'b', 'c'], ['--anti-entropy-interval', '1s']);
    try {
      const [a, b, c] = cluster.nodes;
      const keys = keysOf('split:', 100);
      const base = await a.client();
      for (const k of keys) await base.set(k, 'base');
      await eventually(async () => (await localValues(c, keys)).every((v) => v === 'base'));

      // Side one: a and b, with c down.
      await c.stop('SIGKILL');
      const one = await a.client();
      for (let i = 0; i < 50; i++) await one.set(keys[i], 'A');
      await one.del(...keys.slice(50, 60));
      await sleep(20);

      // Side two: c alone, later in time.
      await a.stop('SIGKILL');
      await b.stop('SIGKILL');
      await c.start();
      const two = await c.client();
      for (let i = 20; i < 40; i++) await two.set(keys[i], 'C');
      await two.del(...keys.slice(0, 10));
      for (let i = 50; i < 55; i++) await two.set(keys[i], 'C');

      await a.start();
      await b.start();
      await cluster.connected();
      const expected = keys.map((_, i) => {
        if (i < 10) return null;
        if (i >= 20 && i < 40) return 'C';
        if (i < 50) return 'A';
        if (i < 55) return 'C';
        if (i < 60) return null;
        return 'base';
      });
      for (const node of cluster.nodes) {
        await eventually(async () => {
          const values = await localValues(node, keys);
          return values.every((v, i) => v === expected[i]);
        }, 20_000);
      }
    } finally {
      await cluster.stop();
    }
  });

  for (const how of ['SIGTERM', 'SHUTDOWN'] as const) {
    test(`shutdown (${how}) with replication drain loses no acknowledged write`, async () => {
      // No periodic anti-entropy: whatever b holds after a is gone came through a's senders.
      const cluster = await startCluster('cluster-drain', ['a', 'b'], ['--anti-entropy-interval', '1h']);
      try {
        const [a, b] = cluster.nodes;
        const writer = await a.client();
        const keys = keysOf('drain:', 3000);
        const pipeline = writer.pipeline();
        for (const k of keys) pipeline.set(k, `value-of-${k}`);
        const results = await pipeline.exec();
        assert.ok(results!.every(([err]) => err === null));
        if (how === 'SIGTERM') await a.stop('SIGTERM');
        else {
          const exited = new Promise<void>((resolve) => a.child!.once('exit', () => resolve()));
          // SHUTDOWN answers nothing: the connection closes as the node goes down.
          await writer.call('SHUTDOWN').catch(() => undefined);
          await exited;
          await a.stop();
        }
        assert.match(a.log, /"msg":"node closed"/);
        assert.doesNotMatch(a.log, /replication drain timed out/);
        const values = await localValues(b, keys);
        assert.deepEqual(
          values.map((v, i) => v === `value-of-${keys[i]}`).filter((ok) => !ok).length,
          0,
          'b holds every acknowledged write',
        );
      } finally {
        await cluster.stop();
      }
    });
  }
});
