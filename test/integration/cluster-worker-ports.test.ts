// Worker ports in a cluster, on real processes on 127.0.0.1: the members tell each other their
// workers' ports, so every node's slot map names, for each slot, the port of the worker that owns
// it on the member serving it; a worker port serves the keys its node serves, answers another
// member's `-MOVED` to that member's worker, and its writes replicate as the main port's do; a
// write that waits for replica acknowledgements is run by the main thread; ioredis Cluster reaches
// every key.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Cluster as RedisCluster } from 'ioredis';
import { slotOf } from '../../src/core/keyspace.js';
import { type ClusterFixture, type NodeProcess, startCluster } from './cluster-helpers.js';
import { eventually } from './helpers.js';
import { RawClient } from './resp-helpers.js';

type SlotRange = [number, number, [string, number, string], ...Array<[string, number, string]>];
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 60_000;

let fixture: ClusterFixture;

before(async () => {
  fixture = await startCluster('cluster-worker-ports', ['a', 'b', 'c'], ['--worker-ports', '0']);
});

after(async () => {
  await fixture?.stop();
});

/** `node`'s workers' ports, from its CLUSTER NODES. */
async function workerPortsOf(node: NodeProcess): Promise<number[]> {
  const lines = ((await (await node.client()).call('CLUSTER', 'NODES')) as string).trim().split('\n');
  return lines
    .filter((line) => line.includes(`,${node.id}/worker-`))
    .map((line) => Number(line.split(' ')[1].split(/[:@]/)[1]));
}

/** A key whose slot CLUSTER SLOTS (asked at `at`) gives to a primary at one of `ports`, and that port. */
async function keyServedAt(
  at: NodeProcess,
  ports: number[],
  prefix: string,
): Promise<{ key: string; port: number }> {
  const slots = (await (await at.client()).call('CLUSTER', 'SLOTS')) as SlotRange[];
  for (let i = 0; i < 100_000; i++) {
    const key = `${prefix}${i}`;
    const slot = slotOf(Buffer.from(key));
    const range = slots.find(([first, last]) => slot >= first && slot <= last);
    if (range !== undefined && ports.includes(range[2][1])) return { key, port: range[2][1] };
  }
  throw new Error(`no slot served at ${ports.join(', ')}`);
}

test('every node’s slot map names the workers’ ports of the member serving each slot; keys go where it says', async () => {
  const [a, b, c] = fixture.nodes as [NodeProcess, NodeProcess, NodeProcess];
  const [aPorts, bPorts, cPorts] = await Promise.all([a, b, c].map((n) => workerPortsOf(n)));
  assert.equal(aPorts.length, 2);
  // Once the members have told each other their worker ports, every primary is a worker port.
  const all = [...aPorts, ...bPorts, ...cPorts];
  await eventually(async () => {
    for (const node of [a, b, c]) {
      const slots = (await (await node.client()).call('CLUSTER', 'SLOTS')) as SlotRange[];
      if (!slots.every((s) => all.includes(s[2][1]))) return false;
    }
    return true;
  }, CONDITION_MS_MAX);
  const mine = await keyServedAt(a, aPorts, 'mine:');
  const worker = await RawClient.connect(mine.port);
  try {
    // Until a has caught the fragment up from its peers (after its start), its worker port says so.
    await eventually(async () => {
      const reply = await worker.call('SET', mine.key, 'from-a-worker');
      if (reply.startsWith('-TRYAGAIN slot ')) return false;
      assert.equal(reply, '+OK\r\n');
      return true;
    }, CONDITION_MS_MAX);
    assert.equal(await worker.call('GET', mine.key), '$13\r\nfrom-a-worker\r\n');
    // A slot a's map gives to b: a's worker sends it there. While a still catches up a fragment it
    // holds a copy of, a's map names the next replica and its worker says TRYAGAIN (and once caught
    // up, a may serve that slot itself): the key is picked again from the map until it is settled.
    let theirs = await keyServedAt(a, bPorts, 'theirs:');
    await eventually(async () => {
      theirs = await keyServedAt(a, bPorts, 'theirs:');
      const reply = await worker.call('SET', theirs.key, 'v');
      // (+OK: a took the slot over between the map and the write.)
      if (reply.startsWith('-TRYAGAIN slot ') || reply === '+OK\r\n') return false;
      assert.equal(reply, `-MOVED ${slotOf(Buffer.from(theirs.key))} 127.0.0.1:${theirs.port}\r\n`);
      return true;
    }, CONDITION_MS_MAX);
    // b's own map gives that slot to the same port.
    assert.deepEqual(await keyServedAt(b, [theirs.port], 'theirs:'), theirs);
    // b and c read a's write: forwarded to a, or from the copy replication gave them.
    for (const other of [b, c]) {
      const reader = await other.client(true);
      await eventually(async () => (await reader.get(mine.key)) === 'from-a-worker', CONDITION_MS_MAX);
    }
    // A write that waits for a replica's acknowledgement: the main thread runs it and counts them.
    assert.equal(await worker.call('TESSERA.DURABILITY', 'store', 'REPLICAS', '1'), '+OK\r\n');
    assert.equal(await worker.call('SET', mine.key, 'acknowledged'), '+OK\r\n');
    for (const other of [b, c]) {
      const reader = await other.client(true);
      await eventually(async () => (await reader.get(mine.key)) === 'acknowledged', CONDITION_MS_MAX);
    }
    // WAIT runs on the main thread, for the fragments this worker-port connection wrote: with one
    // of the key's replicas paused, it reaches one fewer (with nothing written it would answer at
    // once with every replica).
    assert.equal(await worker.call('TESSERA.DURABILITY', 'store', 'REPLICAS', '0'), '+OK\r\n');
    assert.equal(await worker.call('WAIT', '0', '0'), `:${await otherReplicas(a)}\r\n`);
    const slot = slotOf(Buffer.from(mine.key));
    const range = ((await (await a.client()).call('CLUSTER', 'SLOTS')) as SlotRange[]).find(
      ([first, last]) => slot >= first && slot <= last,
    )!;
    const replicaPorts = range.slice(3).map((e) => (e as [string, number, string])[1]);
    const paused = [b, c].find((n) => (n === b ? bPorts : cPorts).includes(replicaPorts[0]))!;
    const others = replicaPorts.length;
    paused.child!.kill('SIGSTOP');
    try {
      assert.equal(await worker.call('SET', mine.key, 'while-paused'), '+OK\r\n');
      assert.equal(await worker.call('WAIT', String(others), '1500'), `:${others - 1}\r\n`);
    } finally {
      paused.child!.kill('SIGCONT');
    }
  } finally {
    worker.destroy();
  }
});

/** The replicas each fragment has besides its serving one, from CLUSTER INFO. */
async function otherReplicas(node: NodeProcess): Promise<number> {
  const info = (await (await node.client()).call('CLUSTER', 'INFO')) as string;
  return Number(/tessera_replicas:(\d+)/.exec(info)![1]) - 1;
}

test('ioredis Cluster reaches every key through the worker ports and the members', async () => {
  const [a, b] = fixture.nodes as [NodeProcess, NodeProcess];
  const rc = new RedisCluster([{ host: '127.0.0.1', port: a.respPort }], {
    clusterRetryStrategy: () => null,
  });
  try {
    for (let i = 0; i < 200; i++) assert.equal(await rc.set(`wp:${i}`, `v${i}`), 'OK');
    for (let i = 0; i < 200; i++) assert.equal(await rc.get(`wp:${i}`), `v${i}`);
    // The client talks to the workers' ports only: the members' main ports serve no slot in the map.
    const ports = new Set(rc.nodes('master').map((n) => n.options.port));
    for (const node of fixture.nodes)
      assert.ok(!ports.has(node.respPort), `${node.id}'s main port in the map`);
    for (const port of await workerPortsOf(a)) assert.ok(ports.has(port), `a's worker port ${port} is used`);
  } finally {
    rc.disconnect();
  }
  const reader = await b.client();
  for (let i = 0; i < 200; i++) assert.equal(await reader.get(`wp:${i}`), `v${i}`);
});
