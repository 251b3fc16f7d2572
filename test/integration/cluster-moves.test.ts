// Fragments that move while serving, on real processes on 127.0.0.1 with a writer counting
// acknowledged writes: two nodes join three (R=3) under load and receive their share; one leaves
// (its replicas handed over, then it exits the cluster and stops); one is killed and, once Down, every fragment it held
// is re-replicated from the survivors until none is under-replicated; a rolling restart, each node
// back within --down-after, moves nothing; one that acknowledged writes alone and crashed hands its copies over
// whole once it is back, though nothing in its configuration placed them there. After each step
// every acknowledged write is readable from every replica the table lists, and the move counts are
// reported.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePorts } from '../../bench/ports.js';
import { Keyspace } from '../../src/core/keyspace.js';
import type { MovesReport } from '../../src/main/mesh/cluster.js';
import type { FragmentPlacement } from '../../src/main/node.js';
import {
  adminGet,
  type ClusterEvent,
  type ClusterFixture,
  eventsUntil,
  keepLogs,
  localValues,
  NodeProcess,
  startCluster,
  unsettled,
} from './cluster-helpers.js';
import { eventually } from './helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const TOKEN = 'an-admin-token-for-the-move-tests';
const FRAGMENTS = 16;
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 90_000;
/**
 * Anti-entropy every ~5 s (not 60): the replicas verify each other's copies within seconds of
 * their start, as they do within a minute in a cluster that runs.
 */
const COMMON = [
  '--admin-port',
  '0',
  '--admin-token',
  TOKEN,
  '--down-after',
  '6s',
  '--anti-entropy-interval',
  '5s',
];
/** Writes a joined node acknowledges alone before it is killed. */
const ALONE_WRITES = 40;

const getJson = adminGet;

interface MemberSeen {
  nodeId: string;
  state: string;
  unreachable: boolean;
  incarnation: number;
}

async function membersAt(node: NodeProcess): Promise<MemberSeen[]> {
  return (await getJson<{ members: MemberSeen[] }>(node, '/cluster/members')).members;
}

/** Waits until `unsettled` says nothing, failing with what it said last. */
async function settled(nodes: NodeProcess[], members: string[], coordinator: NodeProcess): Promise<void> {
  let why = '';
  try {
    await eventually(
      async () => (why = await unsettled(nodes, members, coordinator, TOKEN)) === '',
      CONDITION_MS_MAX,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}: ${why}`);
  }
}

describe('fragments that move while serving', () => {
  let fixture: ClusterFixture;
  const joined: NodeProcess[] = [];
  const keyspace = new Keyspace(FRAGMENTS);
  /** key → the value the writer's last acknowledged SET of it wrote. */
  const acked = new Map<string, string>();
  /**
   * key → the values of writes that failed since its last acknowledged one: a write in flight when
   * its node stopped may have been applied (and replicated) though its reply never came.
   */
  const unsure = new Map<string, Set<string>>();
  let writing = true;
  let writer: Promise<void> | undefined;
  /** Writes acknowledged so far. */
  let ackedWrites = 0;
  let failures = 0;
  /** The first failed writes' errors, for the assertion's message. */
  const failed: string[] = [];

  const running = (): NodeProcess[] => [...fixture.nodes, ...joined].filter((n) => n.running);
  const byId = (id: string): NodeProcess => running().find((n) => n.id === id) as NodeProcess;

  /** Every acknowledged write is in the copy of every replica the table lists for its fragment. */
  async function everyReplicaHoldsEveryWrite(): Promise<void> {
    const placement = await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement');
    const keysOf = new Map<string, string[]>();
    for (const key of acked.keys()) {
      for (const replica of placement[keyspace.fragmentOf(Buffer.from(key))].replicas) {
        const list = keysOf.get(replica) ?? [];
        list.push(key);
        keysOf.set(replica, list);
      }
    }
    const holds = (key: string, value: string | null): boolean =>
      value === acked.get(key) || (value !== null && unsure.get(key)?.has(value) === true);
    for (const [replica, keys] of keysOf) {
      // A copy published after verification may still receive the last writes by replication.
      let wrong = '';
      await eventually(async () => {
        const values = await localValues(byId(replica), keys);
        const i = values.findIndex((v, j) => !holds(keys[j]!, v));
        wrong = i === -1 ? '' : `${keys[i]} is ${values[i]}, acknowledged ${acked.get(keys[i]!)}`;
        return wrong === '';
      }, CONDITION_MS_MAX).catch((err: Error) => {
        throw new Error(`${replica}: ${wrong}: ${err.message}`);
      });
    }
  }

  before(async () => {
    fixture = await startCluster('cluster-moves', ['a', 'b', 'c'], COMMON);
    let client = await fixture.nodes[0].client();
    writer = (async () => {
      for (let i = 0; writing; i++) {
        const key = `move-key-${i % 400}`;
        const value = `v${i}`;
        try {
          await client.set(key, value);
          acked.set(key, value);
          unsure.delete(key);
          ackedWrites++;
        } catch (err) {
          let values = unsure.get(key);
          if (values === undefined) unsure.set(key, (values = new Set()));
          values.add(value);
          failures++; // a write that fails is not acknowledged: nothing to check for it
          if (failed.length < 5) failed.push(`${key}: ${(err as Error).message}`);
          // A client whose node is gone fails at once: let the event loop run between failures,
          // and write through a node that runs from then on (a restart ends the client).
          await new Promise((resolve) => setImmediate(resolve));
          const next = running()[0];
          if (client.status === 'end' && next !== undefined) client = await next.client();
        }
      }
    })();
  });

  after(async () => {
    writing = false;
    await writer;
    for (const n of joined) await n.stop('SIGKILL');
    if (fixture !== undefined) await fixture.stop();
  });

  test('two nodes join three under load: moves run within the per-node limit and the table settles with every write everywhere', async (t) => {
    // Anti-entropy has verified each replica's copy against the others' before the joins.
    let unverified: number[] = [];
    await eventually(async () => {
      const reports = await Promise.all(running().map((n) => getJson<MovesReport>(n, '/cluster/moves')));
      unverified = reports.map((r) => r.unverified);
      return unverified.every((n) => n === 0);
    }, CONDITION_MS_MAX).catch(() => assert.fail(`copies left unverified on a, b, c: ${unverified}`));
    const ports = await freePorts(4);
    const seed = ['--join', `127.0.0.1:${fixture.nodes[0].peerPort}`];
    for (const [i, id] of ['d', 'e'].entries()) {
      const dir = fixture.nodes[0].dataDir.replace(/\/a$/, `/${id}`);
      const node = new NodeProcess(id, ports[2 * i]!, ports[2 * i + 1]!, dir, [
        '--peer-port',
        String(ports[2 * i + 1]),
        '--workers',
        '2',
        '--fragments',
        String(FRAGMENTS),
        ...COMMON,
        ...seed,
      ]);
      joined.push(node);
    }
    await Promise.all(joined.map((n) => n.start()));
    await settled(running(), ['a', 'b', 'c', 'd', 'e'], byId('a'));
    const moves = await getJson<MovesReport>(byId('a'), '/cluster/moves');
    // The optimum for joining nodes is R·F/N of the replicas per new node.
    const optimum = Math.ceil((3 * FRAGMENTS * 2) / 5);
    t.diagnostic(
      `moves finished ${moves.coordinator.movesFinished}, optimum ${optimum}, write failures ${failures}`,
    );
    // Forwarded through a while fragments changed hands, no write failed (where tables or serving
    // disagree for a moment, the node behind waits for what it lacks).
    if (failures !== 0) {
      const kept = await keepLogs('moves-join', running());
      assert.fail(`write failures during the joins: ${failed.join(' | ')} (node logs kept in ${kept})`);
    }
    assert.ok(
      moves.coordinator.movesFinished <= Math.ceil(optimum * 1.1) + 1,
      `${moves.coordinator.movesFinished} moves for an optimum of ${optimum}`,
    );
    assert.ok(acked.size > 0);
    // Each joiner holds an even share, and, once the coordinator has evened out who serves (the
    // first replica serves), serves one too, not only holds copies.
    const placement = await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement');
    const lists = JSON.stringify(placement.map((f) => f.replicas));
    for (const id of ['d', 'e']) {
      const held = placement.filter((f) => f.replicas.includes(id)).length;
      assert.ok(held >= Math.floor((3 * FRAGMENTS) / 5), `${id} holds ${held} replicas: ${lists}`);
    }
    let serving: number[] = [];
    await eventually(async () => {
      const now = await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement');
      serving = ['a', 'b', 'c', 'd', 'e'].map((id) => now.filter((f) => f.replicas[0] === id).length);
      return Math.max(...serving) - Math.min(...serving) <= 1;
    }, CONDITION_MS_MAX).catch(() => assert.fail(`serving stays uneven: a..e serve ${serving}`));
    await everyReplicaHoldsEveryWrite();
    // A source's handoff: a joiner verified its copy against the source while the move ran, and a
    // replica that stays had it verified by anti-entropy, so neither pulls anything (the source's
    // drain proves the copy complete).
    const logged = (ids: string[], msg: string) =>
      ids.filter((id) => byId(id).log.includes(`"msg":"${msg}"`));
    const skipped = 'a copy handed over was verified against it already: no round';
    assert.deepEqual(logged(['d', 'e'], skipped), ['d', 'e']);
    assert.ok(logged(['a', 'b', 'c'], skipped).length > 0, 'replicas that stay skip the round too');
    // The status page says who coordinates and that nothing is moving or short.
    const page = await (await fetch(`http://127.0.0.1:${byId('d').adminPort}/`)).text();
    assert.match(
      page,
      /<h2>Placement<\/h2><p>Coordinator a@\d+ · this node: follower · table epoch \d+ · 0 moves in flight · 0 fragments under-replicated/,
    );
  });

  test('a node that leaves hands every replica over, then exits the cluster and stops', async () => {
    const b = byId('b');
    const exited = new Promise<number | null>((resolve) => b.child!.once('exit', (code) => resolve(code)));
    const cli = spawnSync(
      process.execPath,
      [MAIN, 'cluster', 'leave', '--admin-port', String(b.adminPort), '--admin-token', TOKEN],
      { encoding: 'utf8' },
    );
    assert.equal(cli.status, 0, cli.stderr);
    assert.match(cli.stdout, /b is Leaving/);
    assert.equal(await exited, 0, 'b stops by itself once it has left');
    assert.ok(b.log.includes('"msg":"every fragment handed over: leaving membership"'));
    assert.ok(b.log.includes('"msg":"left the cluster"'));
    await b.stop();
    await eventually(
      async () => (await membersAt(byId('a'))).some((m) => m.nodeId === 'b' && m.state === 'Removed'),
      CONDITION_MS_MAX,
    );
    await settled(running(), ['a', 'c', 'd', 'e'], byId('a'));
    await everyReplicaHoldsEveryWrite();
    // Each replica that took b's serving over caught up from b before b's handoff had it pull b's
    // whole copy: it verified its copy against b while b's replicas moved, so b's handover
    // completed it (covered); where it could not, a round against b did (it replicated with b for
    // the round, though the table no longer listed b).
    const fromB = running()
      .flatMap((n) => n.log.split('\n'))
      .filter((line) => line.includes('"from":"b"') && line.includes('"handover":'));
    assert.ok(fromB.length > 0, 'some replica took serving over from b');
    assert.deepEqual(
      fromB.filter((line) => line.includes('no replication sender')),
      [],
      'no catch-up round against b lacked a sender',
    );
    assert.ok(
      fromB.some((line) => line.includes('"complete":true') && line.includes('"handover":"covered"')),
      `a catch-up from b completed with b's handover alone:\n${fromB.join('\n')}`,
    );
    // The events stream at a shows each step in order: b Leaving, its replicas moved, b Exiting, Removed.
    const steps = (events: ClusterEvent[]) =>
      events.filter(
        (e) =>
          (e.kind.startsWith('Member') && e.data.member?.nodeId === 'b' && e.kind !== 'MemberUpdated') ||
          (e.kind.startsWith('Move') && e.data.reason === 'leave:b'),
      );
    const seen = steps(
      await eventsUntil(byId('a'), CONDITION_MS_MAX, (events) =>
        steps(events).some((e) => e.kind === 'MemberRemoved'),
      ),
    );
    const kinds = seen.map((e) => e.kind).filter((k) => k !== 'MemberUp');
    const leaving = kinds.indexOf('MemberLeaving');
    const exiting = kinds.indexOf('MemberExiting');
    assert.ok(leaving !== -1 && exiting > leaving && kinds.at(-1) === 'MemberRemoved', kinds.join(' '));
    const moves = kinds.slice(leaving + 1, exiting);
    assert.ok(
      moves.length > 0 && moves.every((k) => k === 'MoveStarted' || k === 'MoveFinished'),
      kinds.join(' '),
    );
    assert.equal(
      moves.filter((k) => k === 'MoveStarted').length,
      moves.filter((k) => k === 'MoveFinished').length,
    );
  });

  test('a leave cancelled while the node is Leaving: Up again everywhere, and it holds its share once settled', async () => {
    const d = byId('d');
    const admin = ['--admin-port', String(d.adminPort), '--admin-token', TOKEN];
    // A member stopped whose place in some fragment of d's only it could take (the fragment's other
    // two replicas are a and the third member): d's leave cannot finish while it is stopped.
    const placement = await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement');
    const stopped = ['c', 'e'].find((id) =>
      placement.some((f) => f.replicas.includes('d') && f.replicas.includes('a') && !f.replicas.includes(id)),
    );
    assert.ok(stopped !== undefined, JSON.stringify(placement.map((f) => f.replicas)));
    byId(stopped).child!.kill('SIGSTOP');
    try {
      const left = spawnSync(process.execPath, [MAIN, 'cluster', 'leave', ...admin], { encoding: 'utf8' });
      assert.equal(left.status, 0, left.stderr);
      await eventually(
        async () => (await membersAt(byId('a'))).some((m) => m.nodeId === 'd' && m.state === 'Leaving'),
        CONDITION_MS_MAX,
      );
      const cancelled = spawnSync(process.execPath, [MAIN, 'cluster', 'leave', 'cancel', ...admin], {
        encoding: 'utf8',
      });
      assert.equal(cancelled.status, 0, cancelled.stderr);
      assert.match(cancelled.stdout, /d is Up again: its leave is cancelled/);
    } finally {
      byId(stopped).child!.kill('SIGCONT');
    }
    await eventually(() => d.log.includes('"msg":"leave cancelled: Up again"'), CONDITION_MS_MAX);
    for (const node of running())
      await eventually(
        async () => (await membersAt(node)).some((m) => m.nodeId === 'd' && m.state === 'Up'),
        CONDITION_MS_MAX,
      );
    await settled(running(), ['a', 'c', 'd', 'e'], byId('a'));
    await everyReplicaHoldsEveryWrite();
    // Replicas its leave moved away came back: d holds an even share again.
    const after = await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement');
    const held = after.filter((f) => f.replicas.includes('d')).length;
    assert.ok(held >= Math.floor((3 * FRAGMENTS) / 4), `d holds ${held} of ${3 * FRAGMENTS} replicas`);
    assert.equal(d.child!.exitCode, null, 'd still runs');
  });

  test('a killed node is Down, and every fragment it held is re-replicated until none is under-replicated', async () => {
    await byId('c').stop('SIGKILL');
    await eventually(
      async () => (await membersAt(byId('a'))).some((m) => m.nodeId === 'c' && m.state === 'Down'),
      CONDITION_MS_MAX,
    );
    await settled(running(), ['a', 'd', 'e'], byId('a'));
    const info = await (await byId('a').client()).info('cluster');
    assert.match(info, /cluster_fragments_under_replicated:0\r\n/);
    await everyReplicaHoldsEveryWrite();
  });

  test('a rolling restart, each node back within --down-after, moves nothing', async () => {
    // Every node in turn, the coordinator a included, as an upgrade would: each is stopped
    // (SIGTERM), started again, and seen Up in a new life before the next goes, while the writer
    // goes on (every write it had acknowledged is on every replica at the end).
    const listed = async () =>
      (await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement')).map((p) => ({
        replicas: p.replicas,
        changes: p.history?.length,
      }));
    // A table settled after a re-replication may still even out who serves (the coordinator's
    // serving transfers, a batch per plan interval): those change entries, so they go first.
    let uneven = '';
    await eventually(async () => {
      const placement = await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement');
      const serves = new Map<string, number>();
      for (const { replicas } of placement) serves.set(replicas[0]!, (serves.get(replicas[0]!) ?? 0) + 1);
      const servesOf = (id: string) => serves.get(id) ?? 0;
      const transfer = placement.find(({ replicas }) =>
        replicas.some((id) => servesOf(replicas[0]!) - servesOf(id) > 1),
      );
      uneven = transfer === undefined ? '' : `fragment ${transfer.fragment}: ${transfer.replicas}`;
      return uneven === '';
    }, CONDITION_MS_MAX).catch(() => assert.fail(`serving stays uneven: ${uneven}`));
    const before = await listed();
    for (const node of running()) {
      const observer = running().find((n) => n !== node)!;
      const incarnation = (await membersAt(observer)).find((m) => m.nodeId === node.id)!.incarnation;
      await node.stop();
      await node.start();
      let seen: MemberSeen | undefined;
      await eventually(async () => {
        seen = (await membersAt(observer)).find((m) => m.nodeId === node.id);
        return (
          seen !== undefined && seen.state === 'Up' && !seen.unreachable && seen.incarnation > incarnation
        );
      }, CONDITION_MS_MAX).catch((err: Error) => {
        throw new Error(
          `${observer.id} sees ${node.id}, restarted from incarnation ${incarnation}, as ${JSON.stringify(seen)}: ${err.message}`,
        );
      });
      await settled(running(), ['a', 'd', 'e'], byId('a'));
      // The writer goes on, through a node that runs.
      const ackedAt = ackedWrites;
      await eventually(async () => ackedWrites > ackedAt, CONDITION_MS_MAX);
      // It holds the copies it finds on disk, as the table lists them: none gained anew, none
      // handed over or dropped. d joined, so its configuration places nothing there, yet the same.
      const at = await getJson<MovesReport>(node, '/cluster/moves');
      assert.deepEqual(
        [at.placement.gained, at.placement.handedOver, at.placement.dropped],
        [0, 0, 0],
        `${node.id}: ${JSON.stringify(at.placement)}`,
      );
    }
    assert.deepEqual(await listed(), before, 'no entry of the table changed');
    writing = false;
    await writer;
    await everyReplicaHoldsEveryWrite();
  });

  test('writes a joined node acknowledged alone, then crashed: its copies, listed nowhere once it is back, are handed over whole', async () => {
    writing = false;
    await writer;
    const nodeOf = (id: string) => [...fixture.nodes, ...joined].find((n) => n.id === id)!;
    const d = nodeOf('d');
    const placement = await getJson<FragmentPlacement[]>(byId('a'), '/cluster/placement');
    const alone: string[] = [];
    for (let i = 0; alone.length < ALONE_WRITES && i < 100_000; i++) {
      const key = `alone:${i}`;
      if (placement[keyspace.fragmentOf(Buffer.from(key))]!.replicas[0] === 'd') alone.push(key);
    }
    assert.equal(alone.length, ALONE_WRITES, 'd serves some fragment');
    // d joined: nothing in its configuration places a copy on it. Its peers gone, it acknowledges
    // writes to the fragments it serves alone, then is killed.
    await Promise.all(['a', 'e'].map((id) => nodeOf(id).stop('SIGKILL')));
    const client = await d.client();
    for (const key of alone) {
      await client.set(key, `only-d-${key}`);
      acked.set(key, `only-d-${key}`);
    }
    await d.stop('SIGKILL');
    await Promise.all(['a', 'c', 'e'].map((id) => nodeOf(id).start()));
    await eventually(
      async () => (await membersAt(nodeOf('a'))).some((m) => m.nodeId === 'd' && m.state === 'Down'),
      CONDITION_MS_MAX,
    );
    await settled(running(), ['a', 'c', 'e'], nodeOf('a'));
    // What makes the case: the replicas that replaced d's copies lack what d acknowledged alone.
    for (const id of ['a', 'c', 'e']) {
      const values = await localValues(nodeOf(id), alone);
      assert.ok(
        values.every((v, i) => v !== acked.get(alone[i]!)),
        `${id} was never sent a write d acknowledged alone`,
      );
    }
    // Back, d holds the copies it finds on disk; the table lists it nowhere, so before each goes
    // every replica pulls it whole.
    const from = new Map(['a', 'c', 'e'].map((id) => [id, nodeOf(id).log.length]));
    await d.start();
    await settled(running(), ['a', 'c', 'd', 'e'], nodeOf('a'));
    const pulled = ['a', 'c', 'e'].filter((id) =>
      nodeOf(id)
        .log.slice(from.get(id))
        .split('\n')
        .some((l) => l.includes('"msg":"pulled a copy handed over whole"') && l.includes('"from":"d"')),
    );
    if (pulled.length !== 3) {
      const kept = await keepLogs('cluster-moves', running());
      assert.fail(`only ${pulled} pulled a copy d handed over (logs in ${kept})`);
    }
    await everyReplicaHoldsEveryWrite();
  });
});
