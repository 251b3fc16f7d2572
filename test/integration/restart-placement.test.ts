// What a node holds, on real processes on 127.0.0.1: three nodes (R=2) started with the same
// --peers, so each places the same replicas at first, and each holds (has its workers keep open,
// replicating with the others) the fragments the table lists it for, and no other. A pin moves a
// replica of one fragment to the node that held none, and the node it left drops its copy.
// Restarted, that node holds what its store holds and what the table it accepted last lists it for:
// not the fragment its start-up placement put there, whose copy it dropped and must not hand over
// again, nor pull again.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { MovesReport } from '../../src/main/mesh/cluster.js';
import type { FragmentPlacement } from '../../src/main/node.js';
import {
  adminGet,
  adminPost,
  type ClusterFixture,
  type NodeProcess,
  settledWithin,
  startCluster,
} from './cluster-helpers.js';
import { eventually } from './helpers.js';

const TOKEN = 'an-admin-token-for-the-restart-placement-test';
const IDS = ['a', 'b', 'c'];
/** A loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 60_000;

let fixture: ClusterFixture;

before(async () => {
  fixture = await startCluster('restart-placement', IDS, [
    '--replicas',
    '2',
    '--admin-port',
    '0',
    '--admin-token',
    TOKEN,
  ]);
});

after(async () => {
  await fixture?.stop();
});

const byId = (id: string) => fixture.nodes.find((n) => n.id === id)!;

/** The fragments a node's workers hold (`/health`), and those the table lists it for. */
async function heldAndListed(node: NodeProcess): Promise<[number[], number[]]> {
  const health = await adminGet<{ fragments: Array<{ fragment: number }> }>(node, '/health');
  const placement = await adminGet<FragmentPlacement[]>(node, '/cluster/placement');
  const held = health.fragments.map((f) => f.fragment).sort((x, y) => x - y);
  const listed = placement.filter((f) => f.replicas.includes(node.id)).map((f) => f.fragment);
  return [held, listed];
}
const settled = () =>
  settledWithin(
    () => fixture.nodes,
    IDS,
    async () => byId('a'),
    TOKEN,
    CONDITION_MS_MAX,
  );

test('each node holds the fragments the table lists it for and no other', async () => {
  await settled();
  for (const node of fixture.nodes) {
    const [held, listed] = await heldAndListed(node);
    assert.ok(listed.length < 16, `${node.id} is listed for some fragments only`);
    assert.deepEqual(held, listed, `${node.id} holds the fragments it is listed for`);
  }
});

test('a node restarted after a copy moved away holds neither it nor its start-up placement: nothing is handed over again', async () => {
  await settled();
  const placement = await adminGet<FragmentPlacement[]>(byId('a'), '/cluster/placement');
  // A fragment c holds and b does not: pinned to b, a replica moves there, from a or from c.
  const moved = placement.find((f) => f.replicas.includes('c') && !f.replicas.includes('b'));
  assert.ok(moved !== undefined, `no fragment on c and not on b: ${JSON.stringify(placement)}`);
  const pin = await adminPost<{ status: string; message: string }>(
    byId('a'),
    '/cluster/move',
    { fragment: moved.fragment, to: 'b' },
    TOKEN,
  );
  assert.equal(pin.status, 'Ok', pin.message);
  await settled();
  const now = (await adminGet<FragmentPlacement[]>(byId('a'), '/cluster/placement'))[moved.fragment]!;
  assert.ok(now.replicas.includes('b'), `b holds fragment ${moved.fragment}: ${now.replicas}`);
  const left = moved.replicas.find((id) => !now.replicas.includes(id))!;
  const leftNode = byId(left);
  await eventually(
    async () => (await adminGet<MovesReport>(leftNode, '/cluster/moves')).placement.handedOver === 1,
    CONDITION_MS_MAX,
  );

  await leftNode.stop();
  await leftNode.start();
  await settled();
  const counters = (await adminGet<MovesReport>(leftNode, '/cluster/moves')).placement;
  assert.deepEqual(
    [counters.gained, counters.handedOver, counters.dropped],
    [0, 0, 0],
    `${left} after its restart: ${JSON.stringify(counters)}`,
  );
  assert.ok(
    !leftNode.log.includes(
      '"msg":"handing over a fragment"',
      leftNode.log.lastIndexOf('"msg":"node started"'),
    ),
    `${left} handed a fragment over after its restart`,
  );
  const [held, listed] = await heldAndListed(leftNode);
  assert.ok(!listed.includes(moved.fragment));
  assert.deepEqual(held, listed, `${left} holds what the table lists it for after its restart`);
});
