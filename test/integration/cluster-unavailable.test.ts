// A key whose fragment has no reachable replica: the node says so as Redis Cluster says of a slot no
// node serves (`-CLUSTERDOWN Hash slot not served`, which cluster clients retry after refreshing
// their map), naming the fragment; the embedded API throws TESSERA_UNAVAILABLE. Keys of fragments
// it can reach are served as before.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freePorts } from '../../bench/ports.js';
import { TesseraError } from '../../src/core/errors.js';
import { CLUSTER_SECRET } from './cluster-helpers.js';
import { eventually } from './helpers.js';
import { rejectsWith, startResp } from './resp-helpers.js';

const NOT_SERVED = /^CLUSTERDOWN Hash slot not served \(no replica of fragment \d+ is reachable\)$/;

test('with one replica per fragment and its node gone, its keys answer CLUSTERDOWN; the others are served', async () => {
  const ports = await freePorts(2);
  const peers = `a@127.0.0.1:${ports[0]},b@127.0.0.1:${ports[1]}`;
  const node = { peers, clusterSecret: CLUSTER_SECRET, fragments: 8, workers: 1, replicas: 1 };
  const a = await startResp({ label: 'unavailable-a', node: { ...node, nodeId: 'a' } });
  const b = await startResp({ label: 'unavailable-b', node: { ...node, nodeId: 'b' } });
  let bStopped = false;
  try {
    await eventually(() => a.node.placementReport().every((f) => f.generation !== undefined), 20_000);
    const servedBy = (id: string, prefix: string): string => {
      for (let i = 0; ; i++) {
        const key = `${prefix}:${i}`;
        const f = a.node.dispatcher.keyspace.fragmentOf(Buffer.from(key));
        if (a.node.placementReport()[f].serving === id) return key;
      }
    };
    const onA = servedBy('a', 'here');
    const onB = servedBy('b', 'there');
    const client = await a.client();
    await eventually(async () => (await client.set(onB, 'v').catch(() => null)) === 'OK', 20_000);
    await client.set(onA, 'w');

    await b.stop();
    bStopped = true;
    await eventually(async () => {
      try {
        await client.get(onB);
        return false;
      } catch (err) {
        return err instanceof Error && NOT_SERVED.test(err.message);
      }
    }, 20_000);
    await rejectsWith(client.set(onB, 'x'), NOT_SERVED);
    await rejectsWith(client.mget(onA, onB), NOT_SERVED);
    await rejectsWith(client.exists(onA, onB), NOT_SERVED);
    assert.equal(await client.get(onA), 'w', 'a key of a fragment this node serves is read');
    await assert.rejects(
      a.node.get(onB),
      (err: unknown) => err instanceof TesseraError && err.code === 'TESSERA_UNAVAILABLE',
    );
    // INFO errorstats counts the refusals under Redis's code.
    assert.match(await client.info('errorstats'), /errorstat_CLUSTERDOWN:count=[1-9]/);
  } finally {
    await a.stop();
    if (!bStopped) await b.stop();
  }
});
