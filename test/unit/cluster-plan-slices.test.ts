// POST /cluster/plan on a node whose members are not ranked yet (any node but the coordinator)
// ranks them in slices, the event loop free between them, as the coordinator does before a plan:
// in one go a cold ranking holds the main thread for seconds at 16 384 fragments and 1 000 members.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AssignmentTable } from '../../src/core/assignment-table.js';
import { bootstrapChanges, type MemberView, previewPlan } from '../../src/core/coordinator.js';
import { RENDEZVOUS_WEIGHS_PER_SLICE } from '../../src/core/limits.js';
import { rendezvousRanking } from '../../src/core/placement.js';
import { executeChange } from '../../src/main/admin/cluster-changes.js';
import type { Tessera } from '../../src/main/node.js';

const FRAGMENTS = 4096;
const MEMBERS = 100;
const REPLICAS = 3;

test('a plan asked of a node with a cold ranking ranks in slices, and answers as the planner does', async () => {
  const view: MemberView[] = Array.from({ length: MEMBERS }, (_, i) => ({
    id: `m${i}`,
    state: 'Up',
    reachable: true,
    incarnation: 0,
  }));
  const fence = { coordinatorId: 'm0', incarnation: 0, epoch: 1 };
  const table = new AssignmentTable(FRAGMENTS);
  for (const change of bootstrapChanges(FRAGMENTS, view, REPLICAS, fence, 0))
    table.apply(change, { id: 'm0', incarnation: 0 });
  const expected = previewPlan(table, view, REPLICAS, { action: 'join', node: 'm-new' });
  // Another member set entirely: every kept order is dropped, so the next plan over `view` is cold.
  rendezvousRanking(
    FRAGMENTS,
    Array.from({ length: MEMBERS }, (_, i) => `other${i}`),
  );
  const node = {
    nodeId: 'm1',
    cluster: { coordinator: { table }, coordinatorView: () => view, config: { replicas: REPLICAS } },
  } as unknown as Tessera;

  // Turns of the event loop while the plan is asked for: none if it ran in one go.
  let turns = 0;
  let asking = true;
  const count = (): void => {
    turns++;
    if (asking) setTimeout(count, 1);
  };
  setTimeout(count, 1);
  const answer = await executeChange(node, '/cluster/plan', { action: 'join', node: 'm-new' });
  asking = false;

  const slices = Math.floor((FRAGMENTS * MEMBERS) / RENDEZVOUS_WEIGHS_PER_SLICE);
  assert.ok(turns >= slices / 2, `${turns} turns of the event loop for a ranking of ${slices} slices`);
  assert.equal(answer.status, 'Ok', JSON.stringify(answer).slice(0, 300));
  if ('status' in expected) assert.fail(expected.message);
  assert.equal(answer.replicaMoves, expected.replicaMoves);
  assert.ok(expected.replicaMoves > 0, 'the join moves replicas');
});
