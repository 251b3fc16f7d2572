// Two embedded nodes in one process form a cluster: the embedded API routes across them, reports
// placement and replication, and closes with a replication drain.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freePorts } from '../../bench/ports.js';
import { Tessera } from '../../src/main/node.js';
import { CLUSTER_SECRET } from './cluster-helpers.js';
import { eventually, tempDir } from './helpers.js';
import { startResp } from './resp-helpers.js';

test('embedded cluster: routing, placementReport, health and close with drain', async () => {
  const dir = await tempDir('cluster-embedded');
  const ports = await freePorts(2);
  const peers = `a@127.0.0.1:${ports[0]},b@127.0.0.1:${ports[1]}`;
  const common = {
    peers,
    clusterSecret: CLUSTER_SECRET,
    fragments: 8,
    workers: 1,
    antiEntropyIntervalMs: 3_600_000,
  };
  const a = await Tessera.start({ ...common, nodeId: 'a', dataDir: `${dir.path}/a` });
  const b = await Tessera.start({ ...common, nodeId: 'b', dataDir: `${dir.path}/b` });
  try {
    await eventually(async () => (await a.health()).cluster?.peers[0].connected === true);
    await eventually(async () => (await b.health()).cluster?.peers[0].connected === true);

    // The coordinator's first table reaches both nodes: then they report the same placement.
    await eventually(
      () =>
        a.placementReport()[0].generation !== undefined && b.placementReport()[0].generation !== undefined,
    );
    const placement = a.placementReport();
    assert.equal(placement.length, 8);
    assert.deepEqual(placement, b.placementReport(), 'both nodes see the same placement');
    assert.equal(placement[0].history?.[0]?.reason, 'bootstrap');
    assert.deepEqual(placement.at(-1)!.slots, [14336, 16383]);
    for (const f of placement) {
      assert.equal(f.replicas.length, 2);
      assert.equal(f.serving, f.replicas[0]);
      assert.equal(f.local, true);
    }
    assert.ok(new Set(placement.map((f) => f.serving)).size === 2, 'both nodes serve some fragments');

    for (let i = 0; i < 200; i++) await a.put(`k${i}`, `v${i}`);
    for (let i = 0; i < 200; i++) assert.equal((await b.get(`k${i}`))?.toString(), `v${i}`);
    const results = await b.getMany(['k1', 'missing', 'k2']);
    assert.deepEqual(
      results.map((r) => (r.ok ? r.value?.toString() : r.error.code)),
      ['v1', undefined, 'v2'],
    );

    const health = await a.health();
    assert.equal(health.cluster!.members.length, 2);
    assert.ok(health.cluster!.senders.length > 0, 'a replicates the fragments it serves to b');
    await eventually(async () =>
      (await a.health()).cluster!.senders.every((s) => s.buffered + s.inFlight === 0),
    );
    assert.ok((await a.health()).cluster!.peers[0].replicationBytesSent > 0);

    // b's worker dies and restarts: it tells a to reopen its sessions, so replication resumes at
    // once rather than after a's 30 s ACK timeout.
    b.debug.crashWorker(0);
    await eventually(async () => (await b.health()).workers[0].restarts === 1);
    for (let i = 0; i < 200; i++) await a.put(`after-crash:${i}`, `w${i}`);
    await eventually(async () => {
      const senders = (await a.health()).cluster!.senders;
      return senders.some((s) => s.opsAcked > 0) && senders.every((s) => s.buffered + s.inFlight === 0);
    }, 5_000);
  } finally {
    let bClosed = false;
    try {
      await a.close({ drainReplication: { timeoutMs: 5_000 } });
      // b alone now serves every fragment, from what it holds itself.
      for (let i = 0; i < 200; i++) assert.equal((await b.get(`k${i}`))?.toString(), `v${i}`);
      // With its only peer gone, a drain cannot complete: close says so, after closing.
      await b.put('after-a', 'x');
      bClosed = true;
      await assert.rejects(b.close({ drainReplication: { timeoutMs: 300 } }), /replication drain timed out/);
    } finally {
      // A failed check above must not leave b's threads and sockets holding the test process open.
      if (!bClosed) await b.close().catch(() => {});
      await a.close().catch(() => {});
      await dir.cleanup();
    }
  }
});

test('INCR from either node counts when one node clock runs ahead: the serving replica re-stamps', async () => {
  const ports = await freePorts(2);
  const peers = `a@127.0.0.1:${ports[0]},b@127.0.0.1:${ports[1]}`;
  const node = { peers, clusterSecret: CLUSTER_SECRET, fragments: 4, workers: 1 };
  const a = await startResp({ label: 'restamp-a', node: { ...node, nodeId: 'a' } });
  const b = await startResp({ label: 'restamp-b', node: { ...node, nodeId: 'b' } });
  try {
    await eventually(async () => (await a.node.health()).cluster?.peers[0].connected === true);
    await eventually(async () => (await b.node.health()).cluster?.peers[0].connected === true);
    const clients = { a: await a.client(), b: await b.client() };
    const servedBy = (name: string) => {
      const f = a.node.dispatcher.keyspace.fragmentOf(Buffer.from(name));
      return a.node.placementReport()[f].serving;
    };
    const keyServedBy = (id: string, prefix: string) => {
      for (let i = 0; ; i++) if (servedBy(`${prefix}:${i}`) === id) return `${prefix}:${i}`;
    };
    // Each way round: the node whose clock is a minute ahead serves the key, or forwards to it.
    for (const [ahead, server, prefix] of [
      [b, 'b', 'served-by-the-node-ahead'],
      [a, 'b', 'forwarded-from-the-node-ahead'],
    ] as const) {
      ahead.node.dispatcher.observeRemote(Date.now() + 60_000);
      const key = keyServedBy(server, prefix);
      for (let i = 1; i <= 10; i++) {
        assert.equal(await (i % 2 === 0 ? clients.a : clients.b).incr(key), i, `INCR ${i} of ${key}`);
      }
    }
  } finally {
    await a.stop();
    await b.stop();
  }
});
