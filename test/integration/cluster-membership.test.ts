// Failure detection on real processes on 127.0.0.1 (SWIM with Lifeguard's defences,
// src/core/membership.ts; DESIGN.md "Cluster", Membership): a killed member is unreachable at every
// survivor within 5 s and Down only once --down-after has passed since; a SIGSTOPped member, whose
// TCP connections stay open, is routed around so that plain and cluster-mode clients keep
// succeeding, and once resumed it is reachable again and holds what was written meanwhile; pauses
// shorter than --down-after never make a member Down. One cluster serves every test; each leaves
// all three nodes running and reachable.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Cluster as RedisCluster } from 'ioredis';
import { Keyspace, slotRange } from '../../src/core/keyspace.js';
import { MEMBERSHIP_PROBE_INTERVAL_MS, MEMBERSHIP_SUSPICION_MULT } from '../../src/core/limits.js';
import {
  type ClusterFixture,
  type Flag,
  flaggedAt,
  flagOf,
  localValues,
  memberEvents,
  memberEventTime,
  type NodeProcess,
  startCluster,
} from './cluster-helpers.js';
import { eventually, sleep } from './helpers.js';

const DOWN_AFTER_MS = 3_000;
/**
 * The detection goal: a member that died is unreachable at every survivor within this. A kill
 * closes its peer connections, so each survivor probes it at once: the probe fails within an
 * interval, and the suspicion, confirmed by the other survivor, runs out MEMBERSHIP_SUSPICION_MULT
 * intervals later — about 3 s (bench/RESULTS.md "Failure detection").
 */
const UNREACHABLE_WITHIN_MS = 5_000;
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 30_000;
/**
 * A member event is logged as the driver carries out the step that decided it, a moment after the
 * clock reading the core decided on: two lines' times can be that much closer than the core's.
 */
const LOG_TIME_SLACK_MS = 50;
/** startCluster's --fragments. */
const FRAGMENTS = 16;
/** A pause the detector must ride out: well under --down-after. */
const PAUSE_MS = 1_500;
/**
 * From a pause's start, when a Down it caused would have been decided: a probe sent during the
 * pause fails a probe interval later, a confirmed suspicion lasts its floor (MEMBERSHIP_SUSPICION_MULT
 * probe intervals among three members), and Down follows --down-after later.
 */
const PAUSE_DOWN_DECIDED_MS =
  PAUSE_MS + (1 + MEMBERSHIP_SUSPICION_MULT) * MEMBERSHIP_PROBE_INTERVAL_MS + DOWN_AFTER_MS;
/** Requests each load completes on the other replicas while the member is stopped, at the least. */
const REQUESTS_WHILE_STOPPED_MIN = 30;
/** The cluster-mode client's request deadline: far above a served request, even on a busy machine. */
const CLUSTER_CLIENT_TIMEOUT_MS = 2_000;
/** How long the loads keep running around the stopped member, at the least. */
const STOPPED_LOAD_MS_MIN = 3_000;

/** Samples how `observers` flag `member` until `stop`, which answers every flag seen. */
function watchFlags(observers: NodeProcess[], member: string): { stop(): Promise<Set<Flag>> } {
  const seen = new Set<Flag>();
  let running = true;
  const sampling = (async () => {
    while (running) {
      for (const node of observers) seen.add(await flagOf(node, member));
      await sleep(50);
    }
  })();
  return {
    async stop() {
      running = false;
      await sampling;
      return seen;
    },
  };
}

/** A hash tag per fragment, so keys can be spread over every fragment on purpose. */
function fragmentTags(): string[] {
  const keyspace = new Keyspace(FRAGMENTS);
  const tags: string[] = new Array(FRAGMENTS);
  for (let i = 0, found = 0; found < FRAGMENTS; i++) {
    const f = keyspace.fragmentOf(Buffer.from(`t${i}`));
    if (tags[f] === undefined) {
      tags[f] = `t${i}`;
      found++;
    }
  }
  return tags;
}

interface Outcome {
  startMs: number;
  fragment: number;
  key: string;
  value: string;
  error: string | undefined;
}

/** What a load needs of a client: ioredis's Redis and Cluster both fit. */
interface KeyValueClient {
  set(key: string, value: string): Promise<unknown>;
  get(key: string): Promise<string | null>;
}

/**
 * One request after another: SET of a fresh key, cycling through the fragments, then GET of it.
 * Fresh keys make every acknowledged write one value to find later, whatever else a late request
 * leaves behind.
 */
class WriteReadLoad {
  readonly outcomes: Outcome[] = [];
  private running = true;
  private readonly done: Promise<void>;

  constructor(
    private readonly name: string,
    private readonly client: KeyValueClient,
    private readonly tags: string[],
  ) {
    this.done = this.run();
  }

  private async run(): Promise<void> {
    for (let seq = 0; this.running; seq++) {
      const fragment = seq % this.tags.length;
      const key = `{${this.tags[fragment]}}${this.name}:${seq}`;
      const value = `${this.name}-${seq}`;
      const startMs = Date.now();
      let error: string | undefined;
      try {
        assert.equal(await this.client.set(key, value), 'OK');
        assert.equal(await this.client.get(key), value);
      } catch (err) {
        error = (err as Error).message;
      }
      this.outcomes.push({ startMs, fragment, key, value, error });
    }
  }

  /** Requests started at or after `sinceMs` that succeeded, to one of `fragments` if given. */
  succeededSince(sinceMs: number, fragments?: number[]): number {
    return this.outcomes.filter(
      (o) => o.startMs >= sinceMs && o.error === undefined && (fragments?.includes(o.fragment) ?? true),
    ).length;
  }

  failedSince(sinceMs: number): Outcome[] {
    return this.outcomes.filter((o) => o.startMs >= sinceMs && o.error !== undefined);
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

describe('failure detection in a three-node cluster', () => {
  let cluster: ClusterFixture;
  before(async () => {
    cluster = await startCluster('membership', ['a', 'b', 'c'], ['--down-after', `${DOWN_AFTER_MS}ms`]);
  });
  after(async () => {
    await cluster?.stop();
  });

  /** Every node running, connected to the others and finding each of them reachable. */
  async function allReachable(): Promise<void> {
    await cluster.connected();
    await eventually(async () => {
      for (const node of cluster.nodes) {
        const others = cluster.nodes.filter((n) => n !== node);
        for (const other of others) if ((await flagOf(node, other.id)) !== 'ok') return false;
      }
      return true;
    }, CONDITION_MS_MAX);
  }

  test('pauses shorter than --down-after never make a member Down anywhere', async () => {
    await allReachable();
    const [a, b, c] = cluster.nodes;
    const from = cluster.nodes.map((n) => n.log.length);
    const watch = watchFlags([a, b], 'c');
    let lastPauseMs = 0;
    for (let pause = 0; pause < 2; pause++) {
      lastPauseMs = Date.now();
      c.child!.kill('SIGSTOP');
      // The pause's length is what is tested, not something waited for.
      await sleep(PAUSE_MS);
      c.child!.kill('SIGCONT');
      // The next pause is a pause of its own: c answers again in between.
      await eventually(
        async () => Date.now() - lastPauseMs >= 2 * PAUSE_MS && (await flaggedAt([a, b], 'c', 'ok')),
        CONDITION_MS_MAX,
      );
    }
    // Watch on until a Down that the pauses caused would have been decided.
    await eventually(() => Date.now() - lastPauseMs >= PAUSE_DOWN_DECIDED_MS, CONDITION_MS_MAX);
    const seen = await watch.stop();
    assert.ok(!seen.has('fail'), `a survivor flagged c fail (Down): saw ${[...seen].join(', ')}`);
    for (const [i, node] of cluster.nodes.entries()) {
      const downs = memberEvents(node, from[i]).filter((e) => e.event === 'MemberDown');
      assert.deepEqual(downs, [], `${node.id} logged no MemberDown`);
    }
  });

  test('SIGSTOP: once detected, plain and cluster-mode clients are served by the other replicas; resumed, it catches up', async () => {
    await allReachable();
    const [a, b, c] = cluster.nodes;
    const tags = fragmentTags();
    // Fragments c serves first (all three up): their requests are what must move.
    const slots = (await (await a.client()).call('CLUSTER', 'SLOTS')) as Array<
      [number, number, [string, number]]
    >;
    const cFirst = tags
      .map((_, f) => f)
      .filter((f) => {
        const [first] = slotRange(f, FRAGMENTS);
        return slots.find(([lo, hi]) => lo <= first && first <= hi)?.[2][1] === c.respPort;
      });
    assert.ok(cFirst.length > 0, 'c serves some fragments first');

    const rc = new RedisCluster([{ host: '127.0.0.1', port: a.respPort }], {
      enableOfflineQueue: true,
      clusterRetryStrategy: () => null,
      // A cluster-mode client learns a new slot map by asking again, here every second; a request
      // it sent to c before then is stuck there, and is given up.
      slotsRefreshInterval: 1_000,
      redisOptions: { commandTimeout: CLUSTER_CLIENT_TIMEOUT_MS },
    });
    rc.on('error', () => {});
    const cAddress = `127.0.0.1:${c.respPort}`;
    try {
      await eventually(() => rc.slots.length === 16384 && rc.slots.some((s) => s[0] === cAddress));
      const plain = new WriteReadLoad('plain', await a.client(), tags);
      const clustered = new WriteReadLoad('rc', rc, tags);
      await eventually(
        () => plain.succeededSince(0) >= FRAGMENTS && clustered.succeededSince(0) >= FRAGMENTS,
      );

      const stoppedMs = Date.now();
      c.child!.kill('SIGSTOP');
      // Unreachable (fail?), or already Down (fail) if this machine is slow to answer.
      await eventually(() => flaggedAt([a, b], 'c', 'fail?', 'fail'), CONDITION_MS_MAX);
      const detectedMs = Date.now();
      // The cluster-mode client has asked a survivor for the slots since: none of them is c's now.
      await eventually(() => rc.slots.every((s) => s[0] !== cAddress), CONDITION_MS_MAX);
      const rerouteMs = Date.now();
      await eventually(
        () =>
          Date.now() - rerouteMs >= STOPPED_LOAD_MS_MIN &&
          plain.succeededSince(rerouteMs, cFirst) >= REQUESTS_WHILE_STOPPED_MIN &&
          clustered.succeededSince(rerouteMs, cFirst) >= REQUESTS_WHILE_STOPPED_MIN,
        CONDITION_MS_MAX,
      );
      await Promise.all([plain.stop(), clustered.stop()]);
      // What a forwarded to c before then is retried elsewhere once c is unreachable, unless it
      // timed out first (FORWARD_TIMEOUT_MS). The cluster-mode client's requests sent to c before it
      // rerouted are its own.
      assert.deepEqual(
        plain.failedSince(detectedMs),
        [],
        'every request through a since detection succeeded',
      );
      assert.deepEqual(
        clustered.failedSince(rerouteMs),
        [],
        'every cluster-mode request since it rerouted succeeded',
      );

      c.child!.kill('SIGCONT');
      await eventually(() => flaggedAt([a, b], 'c', 'ok'), CONDITION_MS_MAX);
      const written = [...plain.outcomes, ...clustered.outcomes].filter(
        (o) => o.startMs >= stoppedMs && o.error === undefined,
      );
      assert.ok(written.length > 0);
      await eventually(async () => {
        const values = await localValues(
          c,
          written.map((o) => o.key),
        );
        return values.every((v, i) => v === written[i].value);
      }, CONDITION_MS_MAX);
    } finally {
      rc.disconnect();
      if (c.child?.exitCode === null) c.child.kill('SIGCONT');
    }
  });

  test('SIGKILL: every survivor finds the member unreachable within 5 s, and Down only after --down-after', async () => {
    await allReachable();
    const [a, b, c] = cluster.nodes;
    const survivors = [a, b];
    const from = survivors.map((n) => n.log.length);
    const killedMs = Date.now();
    await c.stop('SIGKILL');
    const unreachableMs: number[] = [];
    for (const [i, node] of survivors.entries()) {
      await eventually(
        () => memberEventTime(node, from[i], 'MemberUnreachable', 'c') !== undefined,
        CONDITION_MS_MAX,
      );
      const at = memberEventTime(node, from[i], 'MemberUnreachable', 'c')!;
      unreachableMs.push(at);
      assert.ok(
        at - killedMs <= UNREACHABLE_WITHIN_MS,
        `${node.id} found c unreachable ${at - killedMs} ms after the kill`,
      );
    }
    await eventually(() => flaggedAt(survivors, 'c', 'fail'), CONDITION_MS_MAX);
    for (const [i, node] of survivors.entries()) {
      // The log line comes through the child's stdout, which may be read after the flag's reply.
      await eventually(
        () => memberEventTime(node, from[i], 'MemberDown', 'c') !== undefined,
        CONDITION_MS_MAX,
      ).catch(() => assert.fail(`${node.id} logged no MemberDown of c, though it flags c fail`));
      const downMs = memberEventTime(node, from[i], 'MemberDown', 'c')!;
      assert.ok(
        downMs - unreachableMs[i] >= DOWN_AFTER_MS - LOG_TIME_SLACK_MS,
        `${node.id}: c Down ${downMs - unreachableMs[i]} ms after it was unreachable (--down-after ${DOWN_AFTER_MS} ms)`,
      );
    }

    await c.start();
    await allReachable();
    for (const [i, node] of survivors.entries()) {
      await eventually(
        () => memberEventTime(node, from[i], 'MemberRejoined', 'c') !== undefined,
        CONDITION_MS_MAX,
      ).catch(() => assert.fail(`${node.id} did not log c's rejoin, though it reaches c`));
    }
  });
});
