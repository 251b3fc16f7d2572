// The main thread's membership driver (src/main/mesh/membership-driver.ts) with its datagram
// layout (src/threads/membership-datagram.ts) and the cluster event log (src/core/event-log.ts):
// three real drivers on a simulated clock exchange real datagrams through a test network, so what
// is checked is the code the node runs — tagging, transport choice, persist ordering, timers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DriverClock } from '../../src/core/clock.js';
import { EventLog } from '../../src/core/event-log.js';
import { MEMBERSHIP_DATAGRAM_BYTES_MAX } from '../../src/core/limits.js';
import {
  MEMBERSHIP_CONFIG_DEFAULTS,
  type MemberEventRecord,
  type MemberRecord,
} from '../../src/core/membership-types.js';
import { MembershipDriver, type MembershipIo } from '../../src/main/mesh/membership-driver.js';
import {
  DATAGRAM_HEADER_BYTES,
  datagramKey,
  encodeDatagram,
  openDatagram,
} from '../../src/threads/membership-datagram.js';
import { seededFractions } from './fixtures/xorshift32.js';

const SECRET = Buffer.from('a-cluster-secret-of-at-least-32-bytes!');

/** Simulated time shared by every driver: timers fire in order as the test advances it. */
class SimTime {
  nowMs = 1_000;
  private readonly timers = new Map<SimClock, { atMs: number; fire: () => void }>();

  clock(): SimClock {
    return new SimClock(this);
  }

  set(clock: SimClock, atMs: number, fire: () => void): void {
    this.timers.set(clock, { atMs, fire });
  }

  clear(clock: SimClock): void {
    this.timers.delete(clock);
  }

  /** Runs every timer due up to `untilMs`, in time order, with the network delivering between. */
  advance(untilMs: number, deliver: () => void): void {
    for (;;) {
      deliver();
      let next: [SimClock, { atMs: number; fire: () => void }] | undefined;
      for (const entry of this.timers) if (next === undefined || entry[1].atMs < next[1].atMs) next = entry;
      if (next === undefined || next[1].atMs > untilMs) break;
      this.nowMs = Math.max(this.nowMs, next[1].atMs);
      this.timers.delete(next[0]);
      next[1].fire();
    }
    this.nowMs = untilMs;
  }
}

class SimClock implements DriverClock {
  constructor(private readonly time: SimTime) {}
  nowMs(): number {
    return this.time.nowMs;
  }
  setTimer(atMs: number, fire: () => void): void {
    this.time.set(this, atMs, fire);
  }
  clearTimer(): void {
    this.time.clear(this);
  }
}

interface Node {
  id: string;
  driver: MembershipDriver;
  events: MemberEventRecord[];
  persisted: Array<{ incarnation: number; members: MemberRecord[] }>;
  /** Persist calls not yet completed (the test completes them). */
  pendingPersists: Array<() => void>;
  envelopes: number;
  logs: string[];
}

/** Drivers on 127.0.0.1 ports 7001…; `stopped` members (paused) neither receive nor send. */
class Network {
  readonly time = new SimTime();
  readonly nodes = new Map<string, Node>();
  readonly stopped = new Set<string>();
  private readonly inFlight: Array<{ to: string; datagram: Buffer; from: string }> = [];

  constructor(
    ids: string[],
    options: { keys?: Record<string, Buffer | undefined | null>; holdPersists?: boolean } = {},
  ) {
    const address = (id: string) => `127.0.0.1:${7001 + ids.indexOf(id)}`;
    for (const [i, id] of ids.entries()) {
      const node: Node = {
        id,
        driver: undefined as unknown as MembershipDriver,
        events: [],
        persisted: [],
        pendingPersists: [],
        envelopes: 0,
        logs: [],
      };
      const io: MembershipIo = {
        sendDatagram: (to, datagram) => {
          assert.ok(datagram.length <= MEMBERSHIP_DATAGRAM_BYTES_MAX, 'a datagram fits its bound');
          this.inFlight.push({ to, datagram, from: address(id) });
        },
        sendEnvelope: () => {
          node.envelopes++;
          return false;
        },
        persist: (incarnation, members) => {
          node.persisted.push({ incarnation, members });
          if (!options.holdPersists) return Promise.resolve();
          return new Promise((resolve) => node.pendingPersists.push(resolve));
        },
        log: (_level, fields, message) => node.logs.push(`${message} ${JSON.stringify(fields)}`),
      };
      const key = options.keys === undefined ? datagramKey(SECRET) : options.keys[id];
      node.driver = new MembershipDriver(
        {
          ...MEMBERSHIP_CONFIG_DEFAULTS,
          nodeId: id,
          address: address(id),
          restoredIncarnation: 4,
          members: ids
            .filter((other) => other !== id)
            .map((other) => ({
              nodeId: other,
              address: address(other),
              incarnation: 0,
              state: 'Up' as const,
            })),
          selfState: 'Up',
          selfRemoved: false,
          downAfterMs: 3_000,
        },
        io,
        {
          onMemberEvent: (event) => node.events.push(event),
          onRefused: () => {},
          onLeft: () => {},
          onEarlierRun: () => {},
          onLostCopies: () => {},
        },
        this.time.clock(),
        key,
        seededFractions(11 + i),
      );
      this.nodes.set(id, node);
    }
    this.addressOf = address;
  }

  readonly addressOf: (id: string) => string;

  deliver(): void {
    while (this.inFlight.length > 0) {
      const { to, datagram, from } = this.inFlight.shift()!;
      const target = [...this.nodes.values()].find((n) => this.addressOf(n.id) === to);
      const sender = [...this.nodes.values()].find((n) => this.addressOf(n.id) === from);
      if (target === undefined || this.stopped.has(target.id) || this.stopped.has(sender!.id)) continue;
      target.driver.onDatagram(datagram, from);
    }
  }

  run(untilMs: number): void {
    this.time.advance(untilMs, () => this.deliver());
  }

  view(of: string, about: string) {
    return this.nodes.get(of)!.driver.member(about)!;
  }
}

/** Completes `node`'s persists, and those queued behind them, until none is pending. */
async function settlePersists(node: Node): Promise<void> {
  while (node.pendingPersists.length > 0) {
    for (const done of node.pendingPersists.splice(0)) done();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test('a datagram carries its envelope behind a format byte and a tag of the cluster secret', () => {
  const key = datagramKey(SECRET)!;
  const envelope = Buffer.from('an envelope');
  const datagram = encodeDatagram(key, envelope);
  assert.equal(datagram.length, DATAGRAM_HEADER_BYTES + envelope.length);
  assert.equal(datagram[0], 1);
  const opened = openDatagram(key, datagram);
  assert.equal(opened.kind, 'envelope');
  assert.deepEqual(opened.kind === 'envelope' ? opened.envelope : undefined, envelope);

  const otherKey = datagramKey(Buffer.from('another-cluster-secret-of-32-bytes-or-more'));
  assert.deepEqual(openDatagram(otherKey, datagram), {
    kind: 'refused',
    reason: 'cluster secret differs (bad datagram tag)',
  });
  const flipped = Buffer.from(datagram);
  flipped[flipped.length - 1] ^= 1;
  assert.equal(openDatagram(key, flipped).kind, 'refused');
  assert.equal(openDatagram(undefined, datagram).kind, 'refused', 'a tagged datagram is not taken untagged');
  assert.equal(openDatagram(key, encodeDatagram(undefined, envelope)).kind, 'refused');
  assert.equal(openDatagram(undefined, encodeDatagram(undefined, envelope)).kind, 'envelope');
  assert.match((openDatagram(key, datagram.subarray(0, 5)) as { reason: string }).reason, /too short/);
  const wrongFormat = Buffer.from(datagram);
  wrongFormat[0] = 9;
  assert.match((openDatagram(key, wrongFormat) as { reason: string }).reason, /format 9/);
  assert.match(
    (openDatagram(key, Buffer.alloc(MEMBERSHIP_DATAGRAM_BYTES_MAX + 1, 1)) as { reason: string }).reason,
    /exceeds MEMBERSHIP_DATAGRAM_BYTES_MAX/,
  );
});

test('drivers probe each other by datagram; a member that stops answering is unreachable, then Down', () => {
  const net = new Network(['a', 'b', 'c']);
  net.run(10_000);
  for (const of of ['a', 'b', 'c']) {
    for (const about of ['a', 'b', 'c']) {
      const v = net.view(of, about);
      assert.equal(v.state, 'Up', `${of} sees ${about} Up`);
      assert.equal(v.unreachable, false, `${of} reaches ${about}`);
    }
  }
  assert.ok(net.nodes.get('a')!.driver.counters.probes > 0);
  assert.equal(net.nodes.get('a')!.envelopes, 0, 'probes fit datagrams: no peer connection needed');
  assert.ok(net.nodes.get('a')!.driver.traffic.datagramsSent > 0);

  net.stopped.add('c');
  const stoppedAt = net.time.nowMs;
  let unreachableAt: number | undefined;
  while (unreachableAt === undefined && net.time.nowMs < stoppedAt + 20_000) {
    net.run(net.time.nowMs + 100);
    if (net.view('a', 'c').unreachable && net.view('b', 'c').unreachable) unreachableAt = net.time.nowMs;
  }
  assert.ok(
    unreachableAt !== undefined && unreachableAt - stoppedAt <= 5_000,
    `unreachable after ${unreachableAt! - stoppedAt} ms`,
  );
  assert.notEqual(net.view('a', 'c').state, 'Down', 'unreachable is not Down');
  net.run(unreachableAt! + 3_000 + 6_000);
  assert.equal(net.view('a', 'c').state, 'Down');
  assert.equal(net.view('b', 'c').state, 'Down');
  const kinds = net.nodes
    .get('a')!
    .events.filter((e) => e.member.nodeId === 'c' && e.atMs >= stoppedAt)
    .map((e) => e.kind);
  assert.deepEqual(kinds, ['MemberUnreachable', 'MemberDown']);
  const sequences = net.nodes.get('a')!.events.map((e) => e.sequence);
  assert.deepEqual(
    sequences,
    sequences.map((_, i) => i + 1),
    'member events are numbered from 1 without gaps',
  );
});

test('datagrams tagged with another secret are refused and logged; that member is never reached', () => {
  const other = datagramKey(Buffer.from('another-cluster-secret-of-32-bytes-or-more'));
  const net = new Network(['a', 'b', 'c'], {
    keys: { a: datagramKey(SECRET), b: datagramKey(SECRET), c: other },
  });
  net.run(15_000);
  assert.equal(net.view('a', 'c').unreachable, true);
  assert.equal(net.view('a', 'b').unreachable, false);
  const c = net.nodes.get('c')!;
  assert.ok(c.driver.traffic.datagramsRefused > 0);
  assert.ok(
    c.logs.some((l) => l.includes('membership datagram refused') && l.includes('cluster secret differs')),
  );
});

test('without datagrams (a TLS mesh with no secret) messages take the peer connections', () => {
  const net = new Network(['a', 'b'], { keys: { a: null, b: null } });
  net.run(3_000);
  const a = net.nodes.get('a')!;
  assert.equal(a.driver.traffic.datagramsSent, 0);
  assert.ok(a.envelopes > 0, 'probes went to the peer connection');
  assert.ok(a.driver.traffic.unsent > 0, 'with no connection open they are lost like datagrams');
});

test('after a raised incarnation, nothing leaves until it is on disk', async () => {
  const net = new Network(['a', 'b', 'c'], { holdPersists: true });
  const a = net.nodes.get('a')!;
  // The start's own persist: the incarnation is already on disk (the node wrote it), so no hold.
  net.run(2_000);
  assert.ok(a.driver.traffic.datagramsSent > 0);
  await settlePersists(a);
  // b claims a is suspect at a's incarnation: a refutes with a higher one, which must persist first.
  const incarnation = a.driver.member('a')!.incarnation;
  const sentBefore = a.driver.traffic.datagramsSent;
  const claim = {
    kind: 'gossip' as const,
    from: 'b',
    updates: [{ kind: 'suspect' as const, nodeId: 'a', incarnation, reporter: 'b' }],
  };
  const { encodeMembershipMessage } = await import('../../src/threads/membership-wire.js');
  a.driver.onDatagram(encodeDatagram(datagramKey(SECRET), encodeMembershipMessage(claim)), '127.0.0.1:7002');
  assert.equal(a.driver.member('a')!.incarnation, incarnation + 1, `refuted; ${a.logs.join('; ')}`);
  net.run(net.time.nowMs + 1_500);
  assert.equal(a.driver.traffic.datagramsSent, sentBefore, 'held while the persist is pending');
  await settlePersists(a);
  assert.ok(a.persisted.some((p) => p.incarnation === incarnation + 1));
  assert.ok(a.driver.traffic.datagramsSent > sentBefore, 'released once written');
});

test('a leave is answered once the Leaving state is on disk', async () => {
  const net = new Network(['a', 'b', 'c'], { holdPersists: true });
  const a = net.nodes.get('a')!;
  net.run(2_000);
  await settlePersists(a);
  let answered = false;
  const reply = a.driver.leave().then((r) => {
    answered = true;
    return r;
  });
  const written = a.persisted.at(-1)!;
  assert.equal(written.members.find((m) => m.nodeId === 'a')?.state, 'Leaving', 'the leave is being written');
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(answered, false, 'not answered while the write is pending');
  await settlePersists(a);
  assert.deepEqual(await reply, { status: 'Ok', message: 'leaving' });
});

test('the event log numbers events, keeps the newest, and tells a late reader what it lost', () => {
  const log = new EventLog<number>(3);
  const seen: number[] = [];
  const unsubscribe = log.subscribe((e) => seen.push(e.sequence));
  for (let i = 0; i < 5; i++) log.append('x', i, i * 10);
  assert.deepEqual(seen, [1, 2, 3, 4, 5]);
  unsubscribe();
  log.append('x', 5, 50);
  assert.deepEqual(seen, [1, 2, 3, 4, 5], 'no calls after unsubscribing');
  assert.equal(log.lastSequence, 6);
  assert.equal(log.firstSequence, 4);
  assert.deepEqual(log.since(0), { events: log.since(3).events, lost: 3 });
  assert.deepEqual(
    log.since(4).events.map((e) => [e.sequence, e.data]),
    [
      [5, 40],
      [6, 50],
    ],
  );
  assert.equal(log.since(4).lost, 0);
  assert.deepEqual(log.since(6), { events: [], lost: 0 });
  assert.deepEqual(log.since(1).lost, 2);
});

test('a listener that steps the driver again while it carries out actions gets each action once', () => {
  const time = new SimTime();
  const events: string[] = [];
  let driver: MembershipDriver | undefined;
  driver = new MembershipDriver(
    {
      ...MEMBERSHIP_CONFIG_DEFAULTS,
      nodeId: 'a',
      address: '127.0.0.1:7001',
      restoredIncarnation: 4,
      members: [{ nodeId: 'b', address: '127.0.0.1:7002', incarnation: 0, state: 'Up' }],
      selfState: 'Up',
      selfRemoved: false,
      downAfterMs: 3_000,
    },
    {
      sendDatagram: () => {},
      sendEnvelope: () => false,
      persist: () => Promise.resolve(),
      log: () => {},
    },
    {
      // As the node does: a member event reaches the table, which tells membership what it places.
      onMemberEvent: (event) => {
        events.push(`${event.kind} ${event.member.nodeId}`);
        driver?.placed(['a', 'b'], []);
      },
      onRefused: () => {},
      onLeft: () => {},
      onEarlierRun: () => {},
      onLostCopies: () => {},
    },
    time.clock(),
    datagramKey(SECRET),
    seededFractions(5),
  );
  const before = events.length;
  void driver.leave();
  assert.deepEqual(events.slice(before), ['MemberLeaving a']);
});
