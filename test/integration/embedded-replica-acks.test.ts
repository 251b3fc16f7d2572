// Replica acknowledgements through the embedded API, on two embedded nodes (R=2): `put`, `delete`
// and `putMany` with `replicaAcks` resolve once the other replica holds the write — its own copy has
// it at once, whichever node serves the key — and a write that asks for more replicas than there
// are fails with TESSERA_REPLICA_TIMEOUT after `replicaAckTimeoutMs`, applied where it was served.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { freePorts } from '../../bench/ports.js';
import { TesseraError } from '../../src/core/errors.js';
import { Tessera } from '../../src/main/node.js';
import { CLUSTER_SECRET } from './cluster-helpers.js';
import { eventually, readOnWorker, tempDir } from './helpers.js';

const KEYS = Array.from({ length: 32 }, (_, i) => `acked:${i}`);

describe('replica acknowledgements in the embedded API (2 nodes, R=2)', () => {
  let a: Tessera;
  let b: Tessera;
  let cleanup: () => Promise<void>;
  before(async () => {
    const dir = await tempDir('embedded-acks');
    cleanup = dir.cleanup;
    const ports = await freePorts(2);
    const common = {
      peers: `a@127.0.0.1:${ports[0]},b@127.0.0.1:${ports[1]}`,
      clusterSecret: CLUSTER_SECRET,
      fragments: 8,
      workers: 1,
      // Nothing but replication brings a write to b while the test reads b's copy.
      antiEntropyIntervalMs: 3_600_000,
      replicaAckTimeoutMs: 300,
    };
    a = await Tessera.start({ ...common, nodeId: 'a', dataDir: `${dir.path}/a` });
    b = await Tessera.start({ ...common, nodeId: 'b', dataDir: `${dir.path}/b` });
    await eventually(async () => (await a.health()).cluster?.peers[0].connected === true);
    await eventually(async () => (await b.health()).cluster?.peers[0].connected === true);
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await cleanup?.();
  });

  test('the keys span fragments each node serves', () => {
    const servers = new Set(
      KEYS.map((k) => a.cluster!.replicasOf(a.dispatcher.fragmentOf(Buffer.from(k)))[0]),
    );
    assert.deepEqual([...servers].sort(), [0, 1]);
  });

  test('put and delete with replicaAcks 1 resolve once the other replica holds the write', async () => {
    // Each read right behind its write: no time for replication to catch up on its own.
    for (const key of KEYS) {
      await a.put(key, `v-${key}`, { replicaAcks: 1 });
      assert.equal(await readOnWorker(b, key), `v-${key}`, key);
    }
    for (const key of KEYS.slice(0, 8)) {
      assert.equal(await a.delete(key, { replicaAcks: 1 }), true);
      assert.equal(await readOnWorker(b, key), undefined, key);
    }
  });

  test('putMany with replicaAcks 1 resolves once the other replica holds every entry', async () => {
    const settled = await b.putMany(
      KEYS.map((key) => [key, `many-${key}`] as const),
      { replicaAcks: 1 },
    );
    assert.deepEqual(
      settled.map((s) => s.ok),
      KEYS.map(() => true),
    );
    for (const key of KEYS) assert.equal(await readOnWorker(a, key), `many-${key}`, key);
  });

  test('more replicas than there are: TESSERA_REPLICA_TIMEOUT, the write applied all the same', async () => {
    const key = KEYS[0]!;
    await assert.rejects(a.put(key, 'lonely', { replicaAcks: 2 }), (err: unknown) => {
      assert.ok(err instanceof TesseraError);
      assert.equal(err.code, 'TESSERA_REPLICA_TIMEOUT');
      assert.match(err.message, /1 of 2 replicas acknowledged it within 300 ms/);
      return true;
    });
    assert.equal((await a.get(key))?.toString(), 'lonely');
  });
});
