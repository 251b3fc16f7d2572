// Chaos: three nodes with two replicas per fragment take writes on every node while nodes are
// killed (SIGKILL) or shut down (SIGTERM) and restarted, or paused (SIGSTOP) and resumed, one after
// another. A paused node keeps its connections and the requests it had taken: once the others find
// it unreachable they serve its fragments, and on resuming it answers what it held. Afterwards every
// acknowledged write is on both of its fragment's replicas, read from each replica's own copy.
//
// A seed draws the schedule: which node each round takes down, with which signal, and how many
// acknowledged writes pass before the fault, while the node is down, and after the last restart (the
// gaps are counted in writes, not timed). The seed is printed and every failure names it;
// `TESSERA_CHAOS_SEED=<seed>` replays the schedule (the writers' interleaving is the machine's).

import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import type { Redis } from 'ioredis';
import { slotOf } from '../../src/core/keyspace.js';
import {
  type ClusterFixture,
  flaggedAt,
  type NodeProcess,
  startCluster,
} from '../integration/cluster-helpers.js';
import { eventually } from '../integration/helpers.js';
import { newClient } from '../integration/resp-helpers.js';
import { seededFractions, seedFromEnv } from '../unit/fixtures/xorshift32.js';

const CHAOS_ROUNDS = 4;
const NODE_IDS = ['a', 'b', 'c'];
/**
 * A round's fault is a crash (SIGKILL), the one this test is about, or in this share of the rounds a
 * shutdown that drains replication first (SIGTERM), or in this share a pause (SIGSTOP, then SIGCONT).
 */
const SIGTERM_SHARE = 0.2;
const SIGSTOP_SHARE = 0.25;
/** Acknowledged writes before each fault: the cluster is under load when it strikes. */
const ACKS_BEFORE_FAULT_MIN = 100;
const ACKS_BEFORE_FAULT_MAX = 300;
/** Acknowledged writes through the other nodes while the victim is down (0: restarted at once). */
const ACKS_WHILE_DOWN_MAX = 200;
/** Acknowledged writes after the last restart, the restarted node among the writers again. */
const ACKS_AFTER_LAST_MIN = 100;
const ACKS_AFTER_LAST_MAX = 200;
/** How long a gap of acknowledged writes may take: far more than ~250 writes a second need. */
const ACKS_WAIT_MS_MAX = 60_000;

interface ChaosRound {
  victim: number;
  signal: 'SIGKILL' | 'SIGTERM' | 'SIGSTOP';
  acksBefore: number;
  acksWhileDown: number;
}

/** The schedule `seed` draws: every random choice of the run. */
function scheduleOf(seed: number): { rounds: ChaosRound[]; acksAfterLast: number } {
  const random = seededFractions(seed);
  const between = (min: number, max: number) => min + Math.floor(random() * (max - min + 1));
  const rounds: ChaosRound[] = Array.from({ length: CHAOS_ROUNDS }, () => ({
    victim: between(0, NODE_IDS.length - 1),
    signal: signalOf(random()),
    acksBefore: between(ACKS_BEFORE_FAULT_MIN, ACKS_BEFORE_FAULT_MAX),
    acksWhileDown: between(0, ACKS_WHILE_DOWN_MAX),
  }));
  return { rounds, acksAfterLast: between(ACKS_AFTER_LAST_MIN, ACKS_AFTER_LAST_MAX) };
}

function signalOf(fraction: number): ChaosRound['signal'] {
  if (fraction < SIGTERM_SHARE) return 'SIGTERM';
  return fraction < SIGTERM_SHARE + SIGSTOP_SHARE ? 'SIGSTOP' : 'SIGKILL';
}

function describeSchedule({ rounds, acksAfterLast }: ReturnType<typeof scheduleOf>): string {
  const steps = rounds.map(
    (r) =>
      `${r.acksBefore} writes, ${r.signal} ${NODE_IDS[r.victim]}, ${r.acksWhileDown} writes while ${r.signal === 'SIGSTOP' ? 'paused' : 'down'}`,
  );
  return [...steps, `${acksAfterLast} writes`].join('; ');
}

test('kill -9, SIGTERM or SIGSTOP nodes under writes, then restart or resume them: no acknowledged write is lost on any replica', async (t) => {
  const seed = seedFromEnv('TESSERA_CHAOS_SEED');
  const schedule = scheduleOf(seed);
  console.log(
    `cluster-chaos seed ${seed} (replay: TESSERA_CHAOS_SEED=${seed}): ${describeSchedule(schedule)}`,
  );
  /** Where the run is, for a failure's message. */
  let stage = 'starting the cluster';
  try {
    await chaos(t, schedule, (s) => {
      stage = s;
    });
  } catch (error) {
    throw new Error(
      `cluster chaos failed with seed ${seed} (replay: TESSERA_CHAOS_SEED=${seed}) while ${stage}: ${(error as Error).message}`,
      { cause: error },
    );
  }
});

async function chaos(
  t: TestContext,
  schedule: ReturnType<typeof scheduleOf>,
  at: (stage: string) => void,
): Promise<void> {
  const cluster = await startCluster('cluster-chaos', NODE_IDS, [
    '--replicas',
    '2',
    '--anti-entropy-interval',
    '2s',
  ]);
  const acked = new Map<string, string>();
  let attempted = 0;
  /** Per node, while it is down: the promise its own clients wait on until it is ready again. */
  const back: Array<Promise<void> | undefined> = new Array(NODE_IDS.length).fill(undefined);
  const reopen: Array<() => void> = new Array(NODE_IDS.length).fill(() => {});
  const failures = new Map<string, number>();
  /** The node paused now, if one is: resumed before the cluster stops, even on a failure. */
  let paused: NodeProcess | undefined;
  let stop = false;
  try {
    /**
     * Runs `step` over and over through node `index` until the end, waiting while the node is down
     * and reconnecting after a failed step (which `step` has already counted or ignored).
     */
    const through = async (index: number, step: (client: Redis, i: number) => Promise<void>) => {
      let client: Redis | undefined;
      for (let i = 0; !stop; i++) {
        const down = back[index];
        if (down !== undefined) {
          client?.disconnect();
          client = undefined;
          await down;
          continue;
        }
        client ??= newClient(cluster.nodes[index].respPort);
        try {
          await step(client, i);
        } catch {
          client.disconnect();
          client = undefined;
        }
      }
      client?.disconnect();
    };
    const writer = (index: number) =>
      through(index, async (client, i) => {
        const key = `chaos:${index}:${i}`;
        const value = `v${i}`;
        attempted++;
        try {
          await client.set(key, value);
          acked.set(key, value);
        } catch (err) {
          // Not acknowledged (the node or the serving replica died): it may or may not be stored.
          const reason = (err as Error).message.slice(0, 60);
          failures.set(reason, (failures.get(reason) ?? 0) + 1);
          throw err;
        }
      });
    /** Overwrites and deletes of a few hot keys through every node: the replicas must agree at the end. */
    const hot = Array.from({ length: 20 }, (_, i) => `hot:${i}`);
    const contender = (index: number) =>
      through(index, async (client, i) => {
        const key = hot[(i * 7 + index) % hot.length];
        if (i % 5 === 4) await client.del(key);
        else await client.set(key, `${index}:${i}`);
      });
    /** Waits until `count` more writes have been acknowledged. */
    const acksPass = async (count: number) => {
      const target = acked.size + count;
      await eventually(() => acked.size >= target, ACKS_WAIT_MS_MAX);
    };
    const nodeIndexes = cluster.nodes.map((_, i) => i);
    const writers = nodeIndexes.map((i) => writer(i));
    const contenders = nodeIndexes.map((i) => contender(i));
    for (const [round, { victim, signal, acksBefore, acksWhileDown }] of schedule.rounds.entries()) {
      const node = cluster.nodes[victim];
      const what = `round ${round + 1} of ${CHAOS_ROUNDS} (${signal} to ${node.id})`;
      at(`waiting for ${acksBefore} acknowledged writes before ${what}`);
      await acksPass(acksBefore);
      if (signal === 'SIGSTOP') {
        // Its own clients' requests wait in its sockets: they are answered, or fail, once it resumes.
        at(`pausing ${node.id} in ${what}`);
        paused = node;
        node.child!.kill('SIGSTOP');
        // Long enough to be found: the others serve what it served first, as after a crash.
        at(`waiting for the others to find ${node.id} unreachable in ${what}`);
        const others = cluster.nodes.filter((n) => n !== node);
        await eventually(() => flaggedAt(others, node.id, 'fail?', 'fail'), ACKS_WAIT_MS_MAX);
        at(`waiting for ${acksWhileDown} acknowledged writes while ${node.id} is paused in ${what}`);
        await acksPass(acksWhileDown);
        at(`resuming ${node.id} in ${what}`);
        node.child!.kill('SIGCONT');
        paused = undefined;
        continue;
      }
      at(`stopping ${node.id} in ${what}`);
      back[victim] = new Promise((resolve) => {
        reopen[victim] = resolve;
      });
      await node.stop(signal);
      at(`waiting for ${acksWhileDown} acknowledged writes while ${node.id} is down in ${what}`);
      await acksPass(acksWhileDown);
      at(`restarting ${node.id} in ${what}`);
      await node.start();
      back[victim] = undefined;
      reopen[victim]();
    }
    at(`waiting for ${schedule.acksAfterLast} acknowledged writes after the last restart`);
    await acksPass(schedule.acksAfterLast);
    stop = true;
    await Promise.all([...writers, ...contenders]);
    at('waiting for the nodes to reconnect');
    await cluster.connected();
    // The waits above saw every gap's writes acknowledged: the faults struck a cluster under load.
    t.diagnostic(`${acked.size} of ${attempted} writes acknowledged through ${CHAOS_ROUNDS} faults`);
    t.diagnostic(`not acknowledged: ${JSON.stringify([...failures])}`);

    await checkReplicas(cluster, acked, hot, at);
  } finally {
    stop = true;
    // A paused node must run again to end on the stop's signal.
    paused?.child?.kill('SIGCONT');
    // Writers parked behind a node that never came back end too.
    for (const open of reopen) open();
    await cluster.stop();
  }
}

/** Every acknowledged write is on both of its key's replicas, and the hot keys' replicas agree. */
async function checkReplicas(
  cluster: ClusterFixture,
  acked: ReadonlyMap<string, string>,
  hot: readonly string[],
  at: (stage: string) => void,
): Promise<void> {
  at('reading the slot map');
  // Where each slot lives, from the slot map every node now agrees on.
  const probe = newClient(cluster.nodes[0].respPort);
  const slots = (await probe.call('CLUSTER', 'SLOTS')) as Array<[number, number, ...Array<[string, number]>]>;
  probe.disconnect();
  const holders = (key: string) => {
    const slot = slotOf(Buffer.from(key));
    const entry = slots.find(([first, last]) => slot >= first && slot <= last)!;
    return entry.slice(2).map((e) => (e as [string, number])[1]);
  };
  const readers = new Map<number, Redis>();
  for (const node of cluster.nodes) {
    const r = newClient(node.respPort);
    await r.call('READONLY');
    readers.set(node.respPort, r);
  }
  try {
    const keys = [...acked.keys()];
    for (const key of keys) assert.equal(holders(key).length, 2, 'both replicas are up and listed');
    at('waiting for every acknowledged write on both of its replicas');
    await eventually(async () => {
      for (const key of keys) {
        for (const port of holders(key)) {
          if ((await readers.get(port)!.get(key)) !== acked.get(key)) return false;
        }
      }
      return true;
    }, 30_000);
    // Concurrent overwrites and deletes of the same keys settle on one LWW winner per key.
    at('waiting for the replicas of the hot keys to agree');
    await eventually(async () => {
      for (const key of hot) {
        const [x, y] = holders(key);
        if ((await readers.get(x)!.get(key)) !== (await readers.get(y)!.get(key))) return false;
      }
      return true;
    }, 30_000);
  } finally {
    for (const r of readers.values()) r.disconnect();
  }
}
