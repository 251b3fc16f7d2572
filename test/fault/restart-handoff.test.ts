// Restarts and crashes, on real processes on 127.0.0.1: four nodes (R=3).
// 1. A node restarted among running peers serves only once they are connected (the others paused
//    with SIGSTOP while it starts), so it forwards what they serve from its first request on.
// 2. b, c and d are killed (SIGKILL); a acknowledges writes alone (no replica acknowledgement asked,
//    so it cannot send them anywhere) and is killed too. b, c and d come back, mark a Down and
//    re-replicate its fragments from their copies, which lack those writes. Restarted, a finds its
//    copies listed nowhere: before each goes, every replica pulls it whole, so every write a
//    acknowledged ends on every replica.
// 3. d is asked to leave and is killed (SIGKILL) while it hands its fragments over; restarted, it
//    goes on leaving; killed again right after it handed the last one over, and restarted, it
//    exits by itself and is Removed.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Keyspace } from '../../src/core/keyspace.js';
import { PEERS_AT_START_WAIT_MS } from '../../src/core/limits.js';
import type { MovesReport } from '../../src/main/mesh/cluster.js';
import type { FragmentPlacement } from '../../src/main/node.js';
import {
  adminGet,
  adminPost,
  type ClusterFixture,
  keepLogs,
  localValues,
  type NodeProcess,
  settledWithin,
  startCluster,
} from '../integration/cluster-helpers.js';
import { eventually } from '../integration/helpers.js';

const TOKEN = 'an-admin-token-for-the-restart-handoff-test';
const FRAGMENTS = 16;
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 120_000;
/** Written before the faults, so a leave has seconds of copying to do at MOVE_RATE. */
const PRELOAD_KEYS = 2_400;
const PRELOAD_VALUE_BYTES = 1_024;
const MOVE_RATE = '256kb';
/** Writes a acknowledges alone. */
const ALONE_WRITES = 60;

interface MemberSeen {
  nodeId: string;
  state: string;
}

describe('a restart among peers, copies found at start, and a leave across a crash', () => {
  let cluster: ClusterFixture;
  const keyspace = new Keyspace(FRAGMENTS);
  /** key → the value its one acknowledged SET wrote. */
  const acked = new Map<string, string>();
  const byId = (id: string): NodeProcess => cluster.nodes.find((n) => n.id === id)!;
  const running = (): NodeProcess[] => cluster.nodes.filter((n) => n.running);

  async function members(): Promise<MemberSeen[]> {
    return (await adminGet<{ members: MemberSeen[] }>(running()[0]!, '/cluster/members')).members;
  }

  function settled(ids: string[]): Promise<void> {
    return settledWithin(running, ids, async () => running()[0], TOKEN, CONDITION_MS_MAX);
  }

  /** Of `keys`, those some replica the table lists does not hold at their acknowledged value. */
  async function missingOnReplicas(keys: string[]): Promise<string[]> {
    const placement = await adminGet<FragmentPlacement[]>(running()[0]!, '/cluster/placement');
    const missing = new Set<string>();
    for (const node of running()) {
      const held = keys.filter((k) =>
        placement[keyspace.fragmentOf(Buffer.from(k))]!.replicas.includes(node.id),
      );
      const values = await localValues(node, held);
      held.forEach((k, i) => {
        if (values[i] !== acked.get(k)) missing.add(k);
      });
    }
    return [...missing];
  }

  before(async () => {
    cluster = await startCluster(
      'restart-handoff',
      ['a', 'b', 'c', 'd'],
      [
        '--replicas',
        '3',
        '--down-after',
        '3s',
        '--move-rate',
        MOVE_RATE,
        '--admin-port',
        '0',
        '--admin-token',
        TOKEN,
      ],
    );
    await settled(['a', 'b', 'c', 'd']);
    const client = await byId('a').client();
    const value = 'p'.repeat(PRELOAD_VALUE_BYTES);
    const pipeline = client.pipeline();
    for (let i = 0; i < PRELOAD_KEYS; i++) pipeline.set(`preload:${i}`, value);
    for (const [i, [err]] of (await pipeline.exec())!.entries()) {
      assert.equal(err, null);
      acked.set(`preload:${i}`, value);
    }
  });

  after(async () => {
    await cluster?.stop();
  });

  test('a node restarted among running peers serves once they are connected: it forwards what they serve from its first request on', async () => {
    const b = byId('b');
    await b.stop('SIGKILL');
    // The others answer nothing while b starts: its connections to them cannot open until they go on.
    const others = ['a', 'c', 'd'].map(byId);
    for (const n of others) n.child!.kill('SIGSTOP');
    const from = b.log.length;
    const started = b.start();
    try {
      await eventually(() => b.log.includes('"msg":"peer mesh listening"', from), CONDITION_MS_MAX);
      // Paused for half of what b waits for them, or until b serves without them.
      const pausedUntilMs = Date.now() + PEERS_AT_START_WAIT_MS / 2;
      await eventually(
        () => b.log.includes('"msg":"ready"', from) || Date.now() >= pausedUntilMs,
        CONDITION_MS_MAX,
      );
    } finally {
      for (const n of others) n.child!.kill('SIGCONT');
    }
    await started;
    const lines = b.log.slice(from).split('\n');
    const ready = lines.findIndex((l) => l.includes('"msg":"ready"'));
    for (const id of ['a', 'c', 'd']) {
      const connected = lines.findIndex(
        (l) => l.includes('"msg":"peer connected"') && l.includes(`"peer":"${id}"`),
      );
      assert.ok(connected !== -1 && connected < ready, `b connected to ${id} before it served`);
    }
    // One key per fragment, at once: most are served by the others.
    const keys: string[] = [];
    const fragments = new Set<number>();
    for (let i = 0; fragments.size < FRAGMENTS; i++) {
      const f = keyspace.fragmentOf(Buffer.from(`first:${i}`));
      if (!fragments.has(f)) {
        fragments.add(f);
        keys.push(`first:${i}`);
      }
    }
    const client = await b.client();
    const answers = await Promise.allSettled(keys.map((k) => client.set(k, 'v')));
    assert.deepEqual(
      answers.flatMap((a, i) => (a.status === 'rejected' ? [`${keys[i]}: ${a.reason}`] : [])),
      [],
    );
    for (const key of keys) acked.set(key, 'v');
    await settled(['a', 'b', 'c', 'd']);
  });

  test('writes a node acknowledged alone, then crashed: replaced while it is Down, pulled from its copies once it is back', async () => {
    const placement = await adminGet<FragmentPlacement[]>(byId('a'), '/cluster/placement');
    const servedByA = (key: string) => placement[keyspace.fragmentOf(Buffer.from(key))]!.replicas[0] === 'a';
    const alone: string[] = [];
    for (let i = 0; alone.length < ALONE_WRITES; i++) if (servedByA(`alone:${i}`)) alone.push(`alone:${i}`);

    await Promise.all(['b', 'c', 'd'].map((id) => byId(id).stop('SIGKILL')));
    const client = await byId('a').client();
    for (const key of alone) {
      await client.set(key, `only-a-${key}`);
      acked.set(key, `only-a-${key}`);
    }
    await byId('a').stop('SIGKILL');
    await Promise.all(['b', 'c', 'd'].map((id) => byId(id).start()));
    await eventually(
      async () => (await members()).some((m) => m.nodeId === 'a' && m.state === 'Down'),
      CONDITION_MS_MAX,
    );
    await settled(['b', 'c', 'd']);
    // What makes the case: the replicas that replaced a's copies lack what a acknowledged alone.
    assert.deepEqual(
      (await missingOnReplicas(alone)).length,
      ALONE_WRITES,
      'the survivors were never sent a write a acknowledged alone',
    );

    await byId('a').start();
    await settled(['a', 'b', 'c', 'd']);
    let missing: string[] = [];
    try {
      await eventually(
        async () => (missing = await missingOnReplicas([...acked.keys()])).length === 0,
        30_000,
      );
    } catch {
      const kept = await keepLogs('restart-handoff', running());
      assert.fail(
        `${missing.length} acknowledged writes missing on some replica: ${missing.slice(0, 5)} (logs in ${kept})`,
      );
    }
    const pulled = ['b', 'c', 'd'].filter((id) =>
      byId(id).log.includes('"msg":"pulled a copy handed over whole"'),
    );
    assert.deepEqual(pulled, ['b', 'c', 'd'], 'each replica pulled a copy of a');
  });

  test('a node killed while it leaves, and again once it handed everything over, goes on leaving once restarted, exits by itself and is Removed', async () => {
    const d = byId('d');
    const asked = await adminPost<{ status: string; message: string }>(d, '/cluster/leave', {}, TOKEN);
    assert.equal(asked.status, 'Ok', asked.message);
    await eventually(async () => {
      const moves = await adminGet<MovesReport>(byId('a'), '/cluster/moves');
      return moves.inFlight.some((m) => m.source === 'd');
    }, CONDITION_MS_MAX);
    await d.stop('SIGKILL');
    await d.start();
    assert.ok(d.log.includes('"msg":"resuming the leave the last run began"'));
    // Killed again once it has handed everything over, before the others see it go (it lingers a
    // second): restarted, it takes the copies its configuration placed here for found again,
    // hands them over once more (the table lists it nowhere) and exits.
    const resumed = d.log.length;
    await eventually(
      () => d.log.includes('"msg":"every fragment handed over: leaving membership"', resumed),
      CONDITION_MS_MAX,
    );
    await d.stop('SIGKILL');
    const restarted = d.log.length;
    await d.start();
    assert.ok(d.log.includes('"msg":"resuming the leave the last run began"', restarted));
    const exit = await d.exited(CONDITION_MS_MAX);
    if (exit !== 0) {
      const kept = await keepLogs('restart-handoff', cluster.nodes);
      assert.fail(`d exits by itself once it has left: ${exit} (logs in ${kept})`);
    }
    await d.stop();
    await eventually(
      async () => (await members()).some((m) => m.nodeId === 'd' && m.state === 'Removed'),
      CONDITION_MS_MAX,
    );
    await settled(['a', 'b', 'c']);
    assert.deepEqual(await missingOnReplicas([...acked.keys()]), []);
  });
});
