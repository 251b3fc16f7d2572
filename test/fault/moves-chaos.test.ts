// Moves under faults, on real processes on 127.0.0.1: three nodes (R=3) take writes through every
// node while a fourth joins, then one of the four leaves. In the middle of each, while a copy is
// under way, a node is killed (SIGKILL) or paused (SIGSTOP): the coordinator, the copy's target or
// its source. A killed node is restarted at once (within --down-after), or only once the others
// have marked it Down and the table has settled without it. A paused one resumes (SIGCONT) once
// the others find it unreachable, or once they have marked it Down: it comes back with the table,
// the moves and (for a coordinator) the epoch it had, which the others have moved past meanwhile.
// Afterwards the table settles with every member that should be in
// it, nothing is under-replicated, the node that was asked to leave has left (a crash does not
// cancel a leave), and every acknowledged write is in the copy of every replica the table lists.
//
// A seed draws the schedule (the leaver, each fault's victim and fate, and how many acknowledged
// writes pass between a copy starting and the kill). It is printed and every failure names it;
// `TESSERA_MOVES_CHAOS_SEED=<seed>` replays the schedule (the writers' interleaving is the machine's);
// `TESSERA_MOVES_CHAOS_LOGS=1` keeps the nodes' logs of a run that passes too.

import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { freePorts } from '../../bench/ports.js';
import { Keyspace } from '../../src/core/keyspace.js';
import type { MovesReport } from '../../src/main/mesh/cluster.js';
import type { FragmentPlacement } from '../../src/main/node.js';
import {
  adminGet,
  adminPost,
  type ClusterFixture,
  flaggedAt,
  keepLogs,
  localValues,
  NodeProcess,
  settledWithin,
  startCluster,
} from '../integration/cluster-helpers.js';
import { eventually } from '../integration/helpers.js';
import { newClient } from '../integration/resp-helpers.js';
import { seededFractions, seedFromEnv } from '../unit/fixtures/xorshift32.js';

const TOKEN = 'an-admin-token-for-the-moves-chaos-test';
const FRAGMENTS = 16;
/** The node that joins a, b and c. */
const JOINER_ID = 'd';
/**
 * The copy rate of every node: slow enough that a copy of the preloaded data takes seconds, so a
 * kill lands while one is under way.
 */
const MOVE_RATE = '256kb';
const DOWN_AFTER = '3s';
/** Written before the join, so each fragment holds ~PRELOAD_KEYS / FRAGMENTS values to copy. */
const PRELOAD_KEYS = 2_400;
const PRELOAD_VALUE_BYTES = 1_024;
/**
 * Writes each node's writer sends a second at most. A fixed rate keeps the copies the same size on
 * any host: unpaced, a fast host wrote ~40 000 keys into a fragment, and a copy at MOVE_RATE took
 * longer than CONDITION_MS_MAX.
 */
const WRITES_PER_SEC_PER_NODE = 200;
/** Acknowledged writes between a copy starting and the kill, at most (0: at once). */
const ACKS_BEFORE_KILL_MAX = 150;
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 120_000;
const REPLICAS = 3;
const COMMON = [
  '--replicas',
  String(REPLICAS),
  '--down-after',
  DOWN_AFTER,
  '--move-rate',
  MOVE_RATE,
  '--admin-port',
  '0',
  '--admin-token',
  TOKEN,
];

type Victim = 'coordinator' | 'target' | 'source';
/**
 * Killed and restarted at once, or only after the others marked it Down and settled without it; or
 * paused, and resumed once the others find it unreachable, or once they marked it Down.
 */
type Fate = 'restart' | 'down' | 'pause' | 'pause-down';
const FATES: readonly Fate[] = ['restart', 'down', 'pause', 'pause-down'];

interface Fault {
  victim: Victim;
  fate: Fate;
  acksBeforeKill: number;
}

interface Schedule {
  join: Fault;
  /** Index of the member that leaves, of a, b, c, d. */
  leaver: number;
  leave: Fault;
}

const VICTIMS: Victim[] = ['coordinator', 'target', 'source'];

function scheduleOf(seed: number): Schedule {
  const random = seededFractions(seed);
  const pick = <T>(of: readonly T[]): T => of[Math.floor(random() * of.length)]!;
  const fault = (): Fault => ({
    victim: pick(VICTIMS),
    fate: pick(FATES),
    acksBeforeKill: Math.floor(random() * (ACKS_BEFORE_KILL_MAX + 1)),
  });
  return { join: fault(), leaver: Math.floor(random() * 4), leave: fault() };
}

function describeSchedule(s: Schedule): string {
  const fates: Record<Fate, string> = {
    restart: 'SIGKILL the VICTIM, restart it at once',
    down: 'SIGKILL the VICTIM, restart it once Down and settled',
    pause: 'SIGSTOP the VICTIM, SIGCONT once the others find it unreachable',
    'pause-down': 'SIGSTOP the VICTIM, SIGCONT once it is Down',
  };
  const fault = (f: Fault) =>
    `${f.acksBeforeKill} writes into a copy, ${fates[f.fate].replace('VICTIM', f.victim)}`;
  return `d joins: ${fault(s.join)}; ${String.fromCharCode(97 + s.leaver)} leaves: ${fault(s.leave)}`;
}

test('a node killed or paused mid-move (coordinator, target or source), back at once or after Down: every acknowledged write on every replica, and a leave survives the fault', async (t) => {
  const seed = seedFromEnv('TESSERA_MOVES_CHAOS_SEED');
  const schedule = scheduleOf(seed);
  console.log(
    `moves-chaos seed ${seed} (replay: TESSERA_MOVES_CHAOS_SEED=${seed}): ${describeSchedule(schedule)}`,
  );
  let stage = 'starting the cluster';
  const run = new ChaosRun(t, (s) => {
    stage = s;
  });
  try {
    await run.play(schedule);
  } catch (error) {
    const kept = await keepLogs('moves-chaos', run.nodes);
    throw new Error(
      `moves chaos failed with seed ${seed} (replay: TESSERA_MOVES_CHAOS_SEED=${seed}) while ${stage}: ${(error as Error).message} (node logs kept in ${kept})`,
      { cause: error },
    );
  } finally {
    await run.stop();
  }
});

interface MemberSeen {
  nodeId: string;
  state: string;
}

class ChaosRun {
  nodes: NodeProcess[] = [];
  private fixture: ClusterFixture | undefined;
  private readonly keyspace = new Keyspace(FRAGMENTS);
  /** key → the value its one acknowledged SET wrote (every write has a key of its own). */
  private readonly acked = new Map<string, string>();
  private readonly failures = new Map<string, number>();
  private attempted = 0;
  private stopping = false;
  /** Per node id: while it is down, what its writer waits on until it is back. */
  private readonly back = new Map<string, { wait: Promise<void>; open: () => void }>();
  /** Members that have left for good: their writers end. */
  private readonly gone = new Set<string>();
  /** The node paused now (SIGSTOP), if any: nothing is asked of it until it resumes. */
  private paused: NodeProcess | undefined;
  private readonly writers: Promise<void>[] = [];

  constructor(
    private readonly t: TestContext,
    private readonly at: (stage: string) => void,
  ) {}

  async play(schedule: Schedule): Promise<void> {
    this.fixture = await startCluster('moves-chaos', ['a', 'b', 'c'], COMMON);
    this.nodes = [...this.fixture.nodes];
    this.at('preloading');
    await this.preload();
    for (const node of this.nodes) this.writers.push(this.writer(node));

    this.at(`starting ${JOINER_ID}`);
    const [resp, peer] = await freePorts(2);
    const d = new NodeProcess(
      JOINER_ID,
      resp!,
      peer!,
      this.nodes[0]!.dataDir.replace(/\/a$/, `/${JOINER_ID}`),
      [
        '--peer-port',
        String(peer),
        '--workers',
        '2',
        '--fragments',
        String(FRAGMENTS),
        '--log-level',
        'info',
        ...COMMON,
        '--join',
        `127.0.0.1:${this.nodes[0]!.peerPort}`,
      ],
    );
    this.nodes.push(d);
    await d.start();
    this.writers.push(this.writer(d));
    await this.faultMidCopy('the join', schedule.join, () => true);
    this.at('settling after the join');
    await this.settled(['a', 'b', 'c', 'd']);
    await this.everyReplicaHoldsEveryWrite();

    const leaver = this.nodes[schedule.leaver]!;
    this.at(`asking ${leaver.id} to leave`);
    const asked = await adminPost<{ status: string; message: string }>(leaver, '/cluster/leave', {}, TOKEN);
    assert.equal(asked.status, 'Ok', asked.message);
    await this.faultMidCopy(`${leaver.id}'s leave`, schedule.leave, (move) => move.source === leaver.id);
    this.at(`waiting for ${leaver.id} to leave and stop`);
    assert.equal(await leaver.exited(CONDITION_MS_MAX), 0, `${leaver.id} stops by itself once it has left`);
    this.gone.add(leaver.id);
    this.back.get(leaver.id)?.open();
    await leaver.stop();
    const stay = this.nodes.filter((n) => n !== leaver).map((n) => n.id);
    await this.memberBecomes(leaver.id, 'Removed');
    this.at('settling after the leave');
    await this.settled(stay);

    this.stopping = true;
    await Promise.all(this.writers);
    this.t.diagnostic(
      `${this.acked.size - PRELOAD_KEYS} of ${this.attempted} writes acknowledged (after ${PRELOAD_KEYS} preloaded)`,
    );
    this.t.diagnostic(`not acknowledged: ${JSON.stringify([...this.failures])}`);
    if (process.env.TESSERA_MOVES_CHAOS_LOGS !== undefined)
      this.t.diagnostic(`node logs kept in ${await keepLogs('moves-chaos', this.nodes)}`);
    this.at('checking every replica');
    await this.everyReplicaHoldsEveryWrite();
    const info = await (await this.running()[0]!.client()).info('cluster');
    assert.match(info, /cluster_fragments_under_replicated:0\r\n/);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    for (const b of this.back.values()) b.open();
    await Promise.all(this.writers);
    await Promise.all(this.nodes.map((n) => n.stop('SIGKILL')));
    await this.fixture?.stop();
  }

  /** The nodes that run and answer (a paused one holds every request until it resumes). */
  private running(): NodeProcess[] {
    return this.nodes.filter((n) => n.running && n !== this.paused);
  }

  private byId(id: string): NodeProcess {
    return this.nodes.find((n) => n.id === id)!;
  }

  private async members(): Promise<MemberSeen[]> {
    for (const n of this.running()) {
      try {
        return (await adminGet<{ members: MemberSeen[] }>(n, '/cluster/members')).members;
      } catch {
        // That node went away between the check and the request: ask the next.
      }
    }
    throw new Error('no running node answers');
  }

  /** Waits until the running nodes list member `id` in `state`. */
  private memberBecomes(id: string, state: string): Promise<void> {
    return eventually(
      async () => (await this.members()).some((m) => m.nodeId === id && m.state === state),
      CONDITION_MS_MAX,
    );
  }

  /** The coordinator the running nodes name (asked of the first that answers). */
  private async coordinator(): Promise<NodeProcess | undefined> {
    for (const n of this.running()) {
      try {
        const cluster = await adminGet<{ coordinator: { id: string | null } }>(n, '/cluster');
        const id = cluster.coordinator.id;
        const node = id === null ? undefined : this.byId(id);
        if (node?.running) return node;
      } catch {
        // That node went away between the check and the request: ask the next.
      }
    }
    return undefined;
  }

  private async preload(): Promise<void> {
    const client = newClient(this.nodes[0]!.respPort);
    try {
      const value = 'p'.repeat(PRELOAD_VALUE_BYTES);
      const pipeline = client.pipeline();
      for (let i = 0; i < PRELOAD_KEYS; i++) pipeline.set(`preload:${i}`, value);
      const replies = (await pipeline.exec())!;
      for (const [i, [err]] of replies.entries()) {
        assert.equal(err, null, `preload ${i}: ${err?.message}`);
        this.acked.set(`preload:${i}`, value);
      }
    } finally {
      client.disconnect();
    }
  }

  /**
   * SETs of fresh keys through `node` until the end, WRITES_PER_SEC_PER_NODE at most, parked while
   * it is down, ended once it left.
   */
  private async writer(node: NodeProcess): Promise<void> {
    let client: Redis | undefined;
    let nextWriteMs = Date.now();
    for (let i = 0; !this.stopping && !this.gone.has(node.id); i++) {
      const down = this.back.get(node.id);
      if (down !== undefined) {
        client?.disconnect();
        client = undefined;
        await down.wait;
        continue;
      }
      client ??= newClient(node.respPort);
      // The load's pace (WRITES_PER_SEC_PER_NODE), not a wait for an event.
      if (nextWriteMs > Date.now()) await delay(nextWriteMs - Date.now());
      nextWriteMs = Math.max(nextWriteMs, Date.now() - 1000) + 1000 / WRITES_PER_SEC_PER_NODE;
      const key = `chaos:${node.id}:${i}`;
      const value = `v${i}`;
      this.attempted++;
      try {
        await client.set(key, value);
        this.acked.set(key, value);
      } catch (err) {
        // Not acknowledged (the node or the serving replica went away): it may or may not be stored.
        const reason = `through ${node.id}: ${(err as Error).message.slice(0, 60)}`;
        this.failures.set(reason, (this.failures.get(reason) ?? 0) + 1);
        client.disconnect();
        client = undefined;
      }
    }
    client?.disconnect();
  }

  /**
   * Waits until a copy is under way in a move `fits` (its target has pulled bytes into it), lets
   * `fault.acksBeforeKill` more writes be acknowledged, kills the victim and restarts it as the fault
   * says.
   */
  private async faultMidCopy(
    what: string,
    fault: Fault,
    fits: (move: MovesReport['inFlight'][number]) => boolean,
  ): Promise<void> {
    this.at(`waiting for a copy in ${what}`);
    let move: MovesReport['inFlight'][number] | undefined;
    await eventually(async () => {
      const coordinator = await this.coordinator();
      if (coordinator === undefined) return false;
      const moves = await adminGet<MovesReport>(coordinator, '/cluster/moves');
      for (const m of moves.inFlight.filter(fits)) {
        const target = this.byId(m.target);
        const here = (await adminGet<MovesReport>(target, '/cluster/moves')).here;
        if (here.some((h) => h.fragment === m.fragment && (h.bytesDone ?? 0) > 0)) {
          move = m;
          return true;
        }
      }
      return false;
    }, CONDITION_MS_MAX);
    const target = this.acked.size + fault.acksBeforeKill;
    await eventually(() => this.acked.size >= target, CONDITION_MS_MAX);
    const victim =
      fault.victim === 'coordinator'
        ? await this.coordinator()
        : this.byId(fault.victim === 'target' ? move!.target : (move!.source ?? move!.target));
    if (victim === undefined) throw new Error('no coordinator to kill');
    const pause = fault.fate === 'pause' || fault.fate === 'pause-down';
    this.t.diagnostic(
      `${what}: fragment ${move!.fragment} ${move!.source} → ${move!.target}; ${pause ? 'SIGSTOP' : 'SIGKILL'} ${victim.id} (the ${fault.victim}), ${fault.fate}`,
    );
    if (pause) return this.pause(victim, what, fault.fate === 'pause-down');
    let open = () => {};
    const wait = new Promise<void>((resolve) => {
      open = resolve;
    });
    this.back.set(victim.id, { wait, open });
    this.at(`killing ${victim.id} in ${what}`);
    await victim.stop('SIGKILL');
    if (fault.fate === 'down') {
      this.at(`waiting for ${victim.id} to be Down in ${what}`);
      await this.memberBecomes(victim.id, 'Down');
      // With fewer than R members Up (one leaving, one Down) no fragment can get its third replica:
      // the cluster waits, under-replicated, for a member to come back.
      const up = (await this.members()).filter((m) => m.state === 'Up').map((m) => m.nodeId);
      if (up.length >= REPLICAS) {
        this.at(`settling without ${victim.id} in ${what}`);
        await this.settled(up);
      }
    }
    this.at(`restarting ${victim.id} in ${what}`);
    await victim.start();
    this.back.delete(victim.id);
    open();
  }

  /**
   * Pauses `victim` (its writer's request waits in its socket) until the others flag it unreachable,
   * or until they mark it Down, then resumes it.
   */
  private async pause(victim: NodeProcess, what: string, untilDown: boolean): Promise<void> {
    this.paused = victim;
    victim.child!.kill('SIGSTOP');
    try {
      if (untilDown) {
        this.at(`waiting for paused ${victim.id} to be Down in ${what}`);
        await this.memberBecomes(victim.id, 'Down');
      } else {
        this.at(`waiting for the others to find paused ${victim.id} unreachable in ${what}`);
        await eventually(() => flaggedAt(this.running(), victim.id, 'fail?', 'fail'), CONDITION_MS_MAX);
      }
    } finally {
      this.at(`resuming ${victim.id} in ${what}`);
      victim.child?.kill('SIGCONT');
      this.paused = undefined;
    }
  }

  /** Waits until `unsettled` says nothing for the running nodes and `members`, failing with what it said last. */
  private settled(members: string[]): Promise<void> {
    return settledWithin(
      () => this.running(),
      members,
      () => this.coordinator(),
      TOKEN,
      CONDITION_MS_MAX,
    );
  }

  /** Every acknowledged write is in the copy of every replica the table lists for its fragment. */
  private async everyReplicaHoldsEveryWrite(): Promise<void> {
    const placement = await adminGet<FragmentPlacement[]>(this.running()[0]!, '/cluster/placement');
    const keysOf = new Map<string, string[]>();
    for (const key of this.acked.keys()) {
      for (const replica of placement[this.keyspace.fragmentOf(Buffer.from(key))]!.replicas) {
        const list = keysOf.get(replica) ?? [];
        list.push(key);
        keysOf.set(replica, list);
      }
    }
    for (const [replica, keys] of keysOf) {
      let missing: string[] = [];
      try {
        // Writes acknowledged just now may still be on their way to the other replicas.
        await eventually(async () => {
          const values = await localValues(this.byId(replica), keys);
          missing = keys.filter((k, i) => values[i] !== this.acked.get(k));
          return missing.length === 0;
        }, CONDITION_MS_MAX);
      } catch (err) {
        throw new Error(
          `${replica} lacks ${missing.length} of ${keys.length} acknowledged writes (${missing.slice(0, 5).join(', ')}): ${(err as Error).message}`,
        );
      }
    }
  }
}
