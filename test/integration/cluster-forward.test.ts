// Admin work across the peer mesh on three real processes on 127.0.0.1: a change posted to a node
// that is not the coordinator is executed by the coordinator and answered with its status unchanged
// and the node that executed it (a move pins the fragment, and its pin serves it); `leave` stays where it was posted (and is
// refused there when its replicas could go nowhere); a member Down whose replicas can go nowhere
// blocks the planner, and every report says so; `GET /cluster/metrics` merges
// every member's sample, and with one member stopped by SIGSTOP it is partial, naming that member.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { ClusterMetrics } from '../../src/main/admin/cluster-metrics.js';
import type { MovesReport } from '../../src/main/mesh/cluster.js';
import type { FragmentPlacement } from '../../src/main/node.js';
import { type ClusterFixture, eventsUntil, type NodeProcess, startCluster } from './cluster-helpers.js';
import { eventually } from './helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const TOKEN = 'an-admin-token-for-the-forward-tests';
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 30_000;

interface Answer {
  status: string;
  message: string;
  executedBy?: string;
  forwardedTo?: string;
  [field: string]: unknown;
}

async function change(node: NodeProcess, path: string, body: unknown, token?: string) {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}${path}`, {
    method: 'POST',
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  return { http: response.status, body: (await response.json()) as Answer };
}

async function getJson<T>(node: NodeProcess, path: string): Promise<{ status: number; body: T }> {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}${path}`);
  return { status: response.status, body: (await response.json()) as T };
}

interface CoordinatorSeen {
  cluster: { coordinator: { id: string | null; role: string } };
}

/** `tessera cluster …` against a node's admin port. */
function cli(node: NodeProcess, ...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const run = spawnSync(
    process.execPath,
    [MAIN, 'cluster', ...args, '--admin-port', String(node.adminPort)],
    {
      encoding: 'utf8',
    },
  );
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

describe('admin changes and metrics across the peer mesh', () => {
  let fixture: ClusterFixture;

  before(async () => {
    fixture = await startCluster(
      'cluster-forward',
      ['a', 'b', 'c'],
      ['--admin-port', '0', '--admin-token', TOKEN, '--down-after', '2s'],
    );
    // a, the lowest id, coordinates once it has the members' reports; b and c name it.
    await eventually(async () => {
      for (const n of fixture.nodes) {
        const { coordinator } = (await getJson<CoordinatorSeen>(n, '/health')).body.cluster;
        if (coordinator.id !== 'a' || (n.id === 'a' && coordinator.role !== 'coordinator')) return false;
      }
      return true;
    }, CONDITION_MS_MAX);
  });

  after(async () => {
    if (fixture !== undefined) {
      fixture.nodes[2].child?.kill('SIGCONT');
      await fixture.stop();
    }
  });

  test('plan, remove and move posted to b or c are executed by the coordinator a, their status unchanged', async () => {
    const [a, b, c] = fixture.nodes;
    const plan = await change(b, '/cluster/plan', { action: 'join', node: 'd' }, TOKEN);
    assert.equal(plan.http, 200, plan.body.message);
    assert.equal(plan.body.status, 'Ok');
    assert.equal(plan.body.executedBy, 'a');
    assert.equal(plan.body.forwardedTo, 'a');
    assert.deepEqual(plan.body.question, { action: 'join', node: 'd' });
    assert.ok(Array.isArray(plan.body.changes));

    // Whatever the coordinator answers a removal of a node it does not know, b and c answer the same.
    const direct = await change(a, '/cluster/remove', { node: 'nobody' }, TOKEN);
    assert.equal(direct.body.executedBy, 'a');
    assert.equal(direct.body.forwardedTo, undefined, 'the coordinator executes its own');
    assert.equal(direct.body.status, 'NotFound', direct.body.message);
    for (const n of [b, c]) {
      const forwarded = await change(n, '/cluster/remove', { node: 'nobody' }, TOKEN);
      assert.equal(forwarded.http, 404);
      assert.deepEqual(forwarded.body, { ...direct.body, forwardedTo: 'a' });
    }
    const invalid = await change(c, '/cluster/remove', { node: '' }, TOKEN);
    assert.equal(invalid.body.status, 'BadRequest');
    assert.equal(invalid.body.executedBy, 'a');

    // b holds a replica of every fragment already (three nodes, three replicas): the pin moves
    // nothing, and b serves the fragment at once (every node's events say so).
    const placement = await getJson<FragmentPlacement[]>(c, '/cluster/placement');
    const pinned = placement.body.find((f) => f.replicas[0] !== 'b')!;
    const fragment = pinned.fragment;
    const move = await change(c, '/cluster/move', { fragment, to: 'b' }, TOKEN);
    assert.equal(move.http, 200, move.body.message);
    assert.equal(move.body.status, 'Ok');
    assert.equal(move.body.executedBy, 'a');
    assert.match(move.body.message, new RegExp(`fragment ${fragment} pinned to b`));
    const events = await eventsUntil(c, CONDITION_MS_MAX, (seen) =>
      seen.some((e) => e.kind === 'ServingChanged' && e.data.fragment === fragment),
    );
    const changed = events.find((e) => e.kind === 'ServingChanged' && e.data.fragment === fragment)!;
    assert.deepEqual(
      [changed.data.from, changed.data.to, changed.data.reason],
      [pinned.replicas[0], 'b', 'move'],
    );
    assert.ok(
      (await getJson<FragmentPlacement[]>(c, '/cluster/placement')).body[fragment]!.replicas[0] === 'b',
    );
    const pinnedAgain = await change(b, '/cluster/move', { fragment, to: 'b' }, TOKEN);
    assert.match(pinnedAgain.body.message, /pinned to b already/);
    const unknown = await change(b, '/cluster/move', { fragment, to: 'nobody' }, TOKEN);
    assert.equal(unknown.body.status, 'NotFound');
    assert.equal(unknown.body.executedBy, 'a');

    // The token is checked where the change arrives.
    const unauthorized = await change(b, '/cluster/plan', {}, `${TOKEN}x`);
    assert.equal(unauthorized.http, 401);
    assert.equal(unauthorized.body.executedBy, undefined);

    const run = cli(c, 'remove', 'nobody', '--admin-token', TOKEN);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /^NotFound: .* \(executed by a\)\n$/);
  });

  test('/cluster/metrics merges all three samples; with c stopped it is partial and names c', async () => {
    const [a, b, c] = fixture.nodes;
    const whole = await getJson<ClusterMetrics>(b, '/cluster/metrics');
    assert.equal(whole.status, 200);
    assert.deepEqual(Object.keys(whole.body.nodes), ['a', 'b', 'c']);
    assert.equal(whole.body.partial, false);
    assert.deepEqual(whole.body.errors, {});
    for (const [id, sample] of Object.entries(whole.body.nodes)) {
      assert.equal(sample.nodeId, id);
      assert.equal(sample.workers.length, 2);
      assert.ok(sample.process.residentBytes > 0);
      assert.deepEqual(
        sample.peers.map((p) => p.id),
        ['a', 'b', 'c'].filter((p) => p !== id),
      );
      // Every node here has an admin port, so each sample carries its RESP counters.
      assert.ok(sample.resp !== undefined && sample.resp.commandsProcessed > 0, id);
    }
    const table = cli(a, 'metrics');
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^node +state +up +resident +workers +writes +reads +commands +clients\n/);
    for (const id of ['a', 'b', 'c']) assert.match(table.stdout, new RegExp(`\\n${id} +\\w+ +\\d+ s +`));

    c.child!.kill('SIGSTOP');
    try {
      const partial = await getJson<ClusterMetrics>(a, '/cluster/metrics');
      assert.equal(partial.status, 200);
      assert.equal(partial.body.partial, true);
      assert.deepEqual(Object.keys(partial.body.nodes), ['a', 'b']);
      assert.deepEqual(Object.keys(partial.body.errors), ['c']);
      // Not answered in time, or already unreachable to membership: either way, said as datum says it.
      const error = partial.body.errors.c;
      assert.ok(['DeadlineExceeded', 'Failed'].includes(error.status), error.status);
      assert.match(error.message, /\bc\b/);
      const json = cli(a, 'metrics', '--json');
      assert.equal(json.code, 1);
      assert.equal((JSON.parse(json.stdout) as ClusterMetrics).partial, true);
      const text = cli(a, 'metrics');
      assert.equal(text.code, 1);
      assert.match(text.stdout, /\nc: no sample \((DeadlineExceeded|Failed): /);
    } finally {
      c.child!.kill('SIGCONT');
    }
  });

  test('leave is executed by the node it was posted to, never forwarded; with as many members as replicas it is refused', async () => {
    const [, b] = fixture.nodes;
    const leave = await change(b, '/cluster/leave', {}, TOKEN);
    // Three members, three replicas of each fragment: b's could go nowhere, so its leave would
    // never finish. b refuses it at once, and stays Up. (c, just resumed from SIGSTOP above, may
    // still be Down: then one other member could take them.)
    assert.equal(leave.http, 409);
    assert.equal(leave.body.status, 'Conflict');
    assert.match(
      leave.body.message,
      /^cannot leave: (2 other Up members|1 other Up member) could take this node's replicas, fewer than the 3 each fragment has; join a member first$/,
    );
    assert.equal(leave.body.executedBy, 'b');
    assert.equal(leave.body.forwardedTo, undefined);
    const view = await getJson<{ members: Array<{ nodeId: string; state: string }> }>(b, '/cluster/members');
    assert.equal(view.body.members.find((m) => m.nodeId === 'b')?.state, 'Up');
    // The command line says the same, and fails.
    const asked = cli(b, 'leave', '--admin-token', TOKEN);
    assert.equal(asked.code, 1);
    assert.match(asked.stderr, /^Conflict: cannot leave: .* join a member first \(executed by b\)\n/);
    // Only a Leaving node has a leave to cancel.
    const cancel = await change(b, '/cluster/leave', { cancel: true }, TOKEN);
    assert.equal(cancel.http, 409);
    assert.equal(cancel.body.message, 'this node is Up, not Leaving: no leave to cancel');
    const cancelled = cli(b, 'leave', 'cancel', '--admin-token', TOKEN);
    assert.equal(cancelled.code, 1);
    assert.match(
      cancelled.stderr,
      /^Conflict: this node is Up, not Leaving: no leave to cancel \(executed by b\)\n/,
    );
    const unknown = cli(b, 'leave', 'now', '--admin-token', TOKEN);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown argument "now"/);
    const malformed = await change(b, '/cluster/leave', { cancel: 'yes' }, TOKEN);
    assert.equal(malformed.http, 400);
    assert.equal(malformed.body.message, 'body must be {} or {"cancel": true}');
  });

  test('a member Down with no other to take its replicas blocks the planner: said in /cluster/moves, by tessera cluster moves and in the log, until it is back', async () => {
    const [a, , c] = fixture.nodes;
    const blocked = '2 eligible members cannot hold 3 replicas of each fragment';
    const from = a.log.length;
    c.child!.kill('SIGSTOP');
    try {
      // Down after --down-after (2 s): its replicas can go nowhere, two members for three replicas.
      await eventually(
        async () => (await getJson<MovesReport>(a, '/cluster/moves')).body.blocked.includes(blocked),
        CONDITION_MS_MAX,
      );
      const moves = cli(a, 'moves');
      assert.equal(moves.code, 1);
      assert.match(moves.stdout, new RegExp(`\nblocked: ${blocked}\n`));
      // The report reads the node's view at once; the coordinator logs at its next plan.
      await eventually(() => a.log.includes(`"msg":"placement blocked: ${blocked}`, from), CONDITION_MS_MAX);
    } finally {
      c.child!.kill('SIGCONT');
    }
    // c refutes its Down once it runs again: nothing blocks the planner any more.
    await eventually(async () => {
      const report = (await getJson<MovesReport>(a, '/cluster/moves')).body;
      return report.blocked.length === 0;
    }, CONDITION_MS_MAX);
    await eventually(() => a.log.includes('"msg":"placement no longer blocked"', from), CONDITION_MS_MAX);
  });
});
