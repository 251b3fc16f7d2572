// The membership core (src/core/membership.ts; datum §2): SWIM probes and
// indirect probes, Lifeguard's dynamic suspicion and local health, refutation, Down only with a
// majority's view, join, leave, removal and refused input. Each test drives the real core with
// events and reads its actions; time is the events' nowMs, ticks come at nextWakeMs() as a driver's
// timer would bring them.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GossipQueue } from '../../src/core/gossip-queue.js';
import { resumesLeave } from '../../src/core/leave.js';
import { MEMBERSHIP_LEAVE_CONFIRM_MAX_MS, MEMBERSHIP_STALL_SYNC_MS } from '../../src/core/limits.js';
import { Membership, suspicionTimeoutMs } from '../../src/core/membership.js';
import {
  isValidUpdate,
  MEMBERSHIP_CONFIG_DEFAULTS,
  type MemberEventKind,
  type MemberRecord,
  type MembershipAction,
  type MembershipConfig,
  type MembershipMessage,
  type MemberUpdate,
  startsJoining,
} from '../../src/core/membership-types.js';
import { seededFractions } from './fixtures/xorshift32.js';

type Send = Extract<MembershipAction, { kind: 'send' }>;

function config(
  nodeId: string,
  others: string[],
  overrides: Partial<MembershipConfig> = {},
): MembershipConfig {
  return {
    ...MEMBERSHIP_CONFIG_DEFAULTS,
    nodeId,
    address: `${nodeId}:7000`,
    restoredIncarnation: undefined,
    members: others.map((id) => ({
      nodeId: id,
      address: `${id}:7000`,
      incarnation: 1,
      state: 'Up' as const,
    })),
    selfState: 'Up',
    selfRemoved: false,
    ...overrides,
  };
}

/**
 * One core and the members around it, played by the test: `live` members answer its pings and
 * probe for it (ack when the target is live, nack when not); the others stay silent.
 */
class Harness {
  readonly core: Membership;
  readonly actions: MembershipAction[] = [];
  nowMs = 0;

  constructor(
    cfg: MembershipConfig,
    readonly live: Set<string> = new Set(),
  ) {
    this.core = new Membership(cfg, seededFractions(7), 0);
    this.core.takeActions(this.actions);
  }

  step(event: Parameters<Membership['step']>[0]): void {
    this.nowMs = event.nowMs;
    this.core.step(event);
    const fresh: MembershipAction[] = [];
    this.core.takeActions(fresh);
    this.actions.push(...fresh);
    for (const action of fresh) if (action.kind === 'send') this.answer(action);
  }

  deliver(message: MembershipMessage, nowMs = this.nowMs): void {
    this.step({ kind: 'message', message, nowMs });
  }

  /** Ticks at every wake-up up to `untilMs`, then at `untilMs`. */
  advance(untilMs: number): void {
    for (let wake = this.core.nextWakeMs(); wake <= untilMs; wake = this.core.nextWakeMs()) {
      this.step({ kind: 'tick', nowMs: wake });
      assert.ok(this.core.nextWakeMs() > wake, `a tick at ${wake} must move the next wake-up on`);
    }
    this.step({ kind: 'tick', nowMs: untilMs });
  }

  sends(kind: MembershipMessage['kind'], sinceIndex = 0): Send[] {
    return this.actions
      .slice(sinceIndex)
      .filter((a): a is Send => a.kind === 'send' && a.message.kind === kind);
  }

  events(kind: MemberEventKind, about?: string): Array<{ sequence: number; atMs: number }> {
    const found: Array<{ sequence: number; atMs: number }> = [];
    for (const a of this.actions) {
      if (a.kind !== 'member-event' || a.event.kind !== kind) continue;
      if (about === undefined || a.event.member.nodeId === about) found.push(a.event);
    }
    return found;
  }

  private answer(send: Send): void {
    const m = send.message;
    if (!this.live.has(send.to)) return;
    if (m.kind === 'ping') this.deliver({ kind: 'ack', from: send.to, seq: m.seq, updates: [] });
    if (m.kind === 'ping-req') {
      const kind = this.live.has(m.target) ? 'ack' : 'nack';
      this.deliver({ kind, from: send.to, seq: m.seq, updates: [] });
    }
  }
}

function firstPing(h: Harness): { target: string; seq: number } {
  const ping = h.sends('ping')[0];
  assert.ok(ping !== undefined && ping.message.kind === 'ping', 'a ping was sent');
  return { target: ping.to, seq: ping.message.seq };
}

const OTHERS = ['b', 'c', 'd', 'e'];

test('probe and ack: one ping per interval, an ack ends the probe without indirect probes', () => {
  const h = new Harness(config('a', OTHERS));
  h.advance(999);
  assert.equal(h.sends('ping').length, 0, 'no probe before the first interval');
  h.advance(1000);
  const { target, seq } = firstPing(h);
  h.deliver({ kind: 'ack', from: target, seq, updates: [] }, 1010);
  h.advance(1999);
  assert.equal(h.sends('ping-req').length, 0, 'an acked probe goes no further');
  assert.equal(h.core.member(target)?.suspect, false);
  assert.equal(h.core.healthMultiplier(), 1);
  h.advance(2000);
  assert.equal(h.sends('ping').length, 2, 'the next probe one interval later');
});

test("a ping carries its sender's own record: a member that never heard of the sender admits it and acks", () => {
  // Long after the start: the news of a's own record has been retransmitted as often as it goes.
  const h = new Harness(config('a', OTHERS), new Set(OTHERS));
  h.advance(60_000);
  const ping = h.sends('ping').at(-1);
  assert.ok(ping !== undefined && ping.message.kind === 'ping');
  assert.ok(ping.message.updates.some((u) => u.kind === 'alive' && u.nodeId === 'a'));
  // Its admission was lost with the member that admitted it: this one knows only c.
  const stranger = new Harness(config(ping.to, ['c']));
  stranger.deliver({ ...ping.message, target: ping.to }, 10);
  assert.equal(stranger.core.member('a')?.state, 'Up');
  assert.equal(stranger.sends('ack').length, 1);
  assert.equal(stranger.core.counters.fromUnknown, 0);
});

test('an ack to a member held Down carries the claim, and that member refutes it at once', () => {
  const h = new Harness(config('a', OTHERS));
  h.deliver(gossip('b', [{ kind: 'down', nodeId: 'e', incarnation: 1, reporter: 'b' }]), 10);
  assert.equal(h.core.member('e')?.state, 'Down');
  const since = h.actions.length;
  h.deliver({ kind: 'ping', from: 'e', seq: 4, target: 'a', updates: [] }, 20);
  const ack = h.sends('ack', since)[0];
  assert.ok(ack !== undefined && ack.to === 'e' && ack.message.kind === 'ack');
  assert.deepEqual(ack.message.updates[0], { kind: 'down', nodeId: 'e', incarnation: 1, reporter: 'a' });
  // e, hearing it, outbids the claim with a higher incarnation.
  const e = new Harness(config('e', ['a', 'b']));
  const before = e.core.member('e')!.incarnation;
  e.deliver(
    { ...ack.message, updates: [{ kind: 'down', nodeId: 'e', incarnation: before, reporter: 'a' }] },
    30,
  );
  assert.equal(e.core.member('e')?.incarnation, before + 1);
});

test('gossip from a member held Down gets the claim back, at most once a probe interval', () => {
  const h = new Harness(config('a', OTHERS));
  h.deliver(gossip('b', [{ kind: 'down', nodeId: 'e', incarnation: 1, reporter: 'b' }]), 10);
  assert.equal(h.core.member('e')?.state, 'Down');
  const since = h.actions.length;
  // This node's own word on it (reporter a), alone in a message to e: not the gossip rounds' relay.
  const told = () =>
    h
      .sends('gossip', since)
      .filter(
        (s) =>
          s.to === 'e' &&
          s.message.kind === 'gossip' &&
          s.message.updates.length === 1 &&
          (s.message.updates[0] as { reporter?: string }).reporter === 'a',
      );
  h.deliver(gossip('e', []), 20);
  assert.equal(told().length, 1);
  const message = told()[0]!.message;
  assert.ok(message.kind === 'gossip');
  assert.deepEqual(message.updates, [{ kind: 'down', nodeId: 'e', incarnation: 1, reporter: 'a' }]);
  // Again within the probe interval: not told twice; past it, told again.
  const interval = config('a', OTHERS).probeIntervalMs;
  h.deliver(gossip('e', []), 20 + interval - 1);
  assert.equal(told().length, 1);
  h.deliver(gossip('e', []), 20 + interval);
  assert.equal(told().length, 2);
  // Gossip from a member held alive gets no such reply.
  const before = h.actions.length;
  h.deliver(gossip('b', []), 20 + interval);
  assert.equal(h.sends('gossip', before).filter((s) => s.to === 'b').length, 0);
});

test('a direct probe timeout sends 3 indirect probes through other members', () => {
  const h = new Harness(config('a', OTHERS));
  h.advance(1000);
  const { target, seq } = firstPing(h);
  h.advance(1499);
  assert.equal(h.sends('ping-req').length, 0);
  h.advance(1500);
  const requests = h.sends('ping-req');
  assert.equal(requests.length, 3);
  const helpers = new Set(requests.map((r) => r.to));
  assert.equal(helpers.size, 3, 'three distinct helpers');
  assert.ok(!helpers.has(target) && !helpers.has('a'), 'helpers are neither the target nor self');
  for (const r of requests) {
    assert.ok(r.message.kind === 'ping-req' && r.message.seq === seq && r.message.target === target);
  }
});

test('an ack relayed by an indirect prober saves the member from suspicion', () => {
  const h = new Harness(config('a', OTHERS));
  h.advance(1500);
  const { target, seq } = firstPing(h);
  const helper = h.sends('ping-req')[0]!.to;
  h.deliver({ kind: 'ack', from: helper, seq, updates: [] }, 1600);
  h.advance(2500);
  assert.equal(h.core.member(target)?.suspect, false);
  assert.equal(h.core.counters.probesFailed, 0);
});

test('a member probes for others: relays the ack, or nacks after the relay timeout (Lifeguard)', () => {
  const h = new Harness(config('a', OTHERS));
  h.deliver({ kind: 'ping-req', from: 'b', seq: 41, target: 'c', updates: [] }, 100);
  const relayed = h.sends('ping').find((s) => s.to === 'c');
  assert.ok(relayed !== undefined && relayed.message.kind === 'ping');
  h.deliver({ kind: 'ack', from: 'c', seq: relayed.message.seq, updates: [] }, 120);
  assert.ok(h.sends('ack').some((s) => s.to === 'b' && s.message.kind === 'ack' && s.message.seq === 41));
  h.deliver({ kind: 'ping-req', from: 'b', seq: 42, target: 'd', updates: [] }, 200);
  h.advance(200 + MEMBERSHIP_CONFIG_DEFAULTS.relayTimeoutMs);
  assert.ok(h.sends('nack').some((s) => s.to === 'b' && s.message.kind === 'nack' && s.message.seq === 42));
});

test('suspicion confirmed → unreachable: an unconfirmed suspicion runs its ceiling, then the member is unreachable', () => {
  const target = firstPingTarget();
  // The first member probed is dead; the others answer, and nack for it.
  const h = new Harness(config('a', OTHERS), new Set(OTHERS.filter((id) => id !== target)));
  h.advance(1_999);
  assert.equal(h.core.member(target)?.suspect, false);
  h.advance(2_000);
  assert.equal(h.core.member(target)?.suspect, true, 'suspected at the end of the probe interval');
  // N = 5: floor 2 s, ceiling 12 s, two confirmations expected; none came, so 12 s.
  h.advance(2_000 + 11_999);
  assert.equal(h.core.member(target)?.unreachable, false);
  h.advance(2_000 + 12_000);
  assert.equal(h.core.member(target)?.unreachable, true);
  assert.deepEqual(
    h.events('MemberUnreachable', target).map((e) => e.atMs),
    [14_000],
  );
  assert.equal(h.core.healthMultiplier(), 1, 'the helpers nacked: our own health is fine');
});

test("Lifeguard's dynamic suspicion: the timeout falls from ceiling to floor on a log scale as confirmations arrive", () => {
  assert.equal(suspicionTimeoutMs(0, 2, 2_000, 12_000), 12_000);
  assert.equal(suspicionTimeoutMs(1, 2, 2_000, 12_000), 5_690);
  assert.equal(suspicionTimeoutMs(2, 2, 2_000, 12_000), 2_000);
  assert.equal(suspicionTimeoutMs(5, 2, 2_000, 12_000), 2_000, 'never below the floor');
  assert.equal(suspicionTimeoutMs(0, 0, 2_000, 12_000), 2_000, 'no confirmations to wait for: the floor');
});

test('independent confirmations shorten the suspicion timeout', () => {
  // Everyone answers a's probes, c included: a's own view never confirms, only b, d and e do.
  const h = new Harness(config('a', OTHERS), new Set(OTHERS));
  // b suspects c at incarnation 1: a starts its own suspicion at 100 ms.
  h.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'c', incarnation: 1, reporter: 'b' }]), 100);
  assert.equal(h.core.member('c')?.suspect, true);
  h.advance(5_000);
  // One confirmation (d): 5.69 s from the start.
  h.deliver(gossip('d', [{ kind: 'suspect', nodeId: 'c', incarnation: 1, reporter: 'd' }]), 5_000);
  h.advance(100 + 5_689);
  assert.equal(h.core.member('c')?.unreachable, false);
  h.advance(100 + 5_690);
  assert.equal(h.core.member('c')?.unreachable, true, 'one confirmation: 5.69 s instead of 12 s');

  const g = new Harness(config('a', OTHERS), new Set(OTHERS));
  g.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'c', incarnation: 1, reporter: 'b' }]), 100);
  g.deliver(gossip('d', [{ kind: 'suspect', nodeId: 'c', incarnation: 1, reporter: 'd' }]), 200);
  g.deliver(gossip('e', [{ kind: 'suspect', nodeId: 'c', incarnation: 1, reporter: 'e' }]), 300);
  g.advance(100 + 1_999);
  assert.equal(g.core.member('c')?.unreachable, false);
  g.advance(100 + 2_000);
  assert.equal(g.core.member('c')?.unreachable, true, 'two confirmations: the 2 s floor');
});

test('members that hear a suspicion probe its target next, to confirm or refute it promptly', () => {
  const h = new Harness(config('a', OTHERS));
  h.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'e', incarnation: 1, reporter: 'b' }]), 100);
  const ping = h.sends('ping')[0];
  assert.equal(ping?.to, 'e', 'probed at once, out of the round-robin order');
  assert.ok(ping.message.kind === 'ping');
  assert.deepEqual(
    ping.message.updates[0],
    { kind: 'suspect', nodeId: 'e', incarnation: 1, reporter: 'a' },
    'with the claim',
  );
});

test('refutation: a higher incarnation clears a suspicion; a claim about self is refuted with one', () => {
  const h = new Harness(config('a', OTHERS), new Set(OTHERS));
  h.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'c', incarnation: 1, reporter: 'b' }]), 100);
  h.deliver(
    gossip('d', [{ kind: 'alive', nodeId: 'c', address: 'c:7000', incarnation: 2, state: 'Up' }]),
    500,
  );
  assert.equal(h.core.member('c')?.suspect, false);
  assert.equal(h.core.member('c')?.incarnation, 2);
  h.advance(20_000);
  assert.equal(h.core.member('c')?.unreachable, false, 'the refuted suspicion never expires');
  assert.equal(h.core.member('c')?.incarnation, 2);

  const self = new Harness(config('a', OTHERS));
  assert.equal(self.core.member('a')?.incarnation, 1);
  self.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'a', incarnation: 1, reporter: 'b' }]), 100);
  assert.equal(self.core.member('a')?.incarnation, 2);
  assert.equal(self.core.counters.refutations, 1);
  assert.equal(self.core.healthMultiplier(), 2, 'being suspected hints at our own slowness (Lifeguard)');
  self.advance(400);
  const refutation = self
    .sends('gossip')
    .flatMap((s) => (s.message.kind === 'gossip' ? s.message.updates : []))
    .find((u) => u.nodeId === 'a' && u.kind === 'alive');
  assert.deepEqual(refutation, {
    kind: 'alive',
    nodeId: 'a',
    address: 'a:7000',
    incarnation: 2,
    state: 'Up',
  });
  // A claim older than our incarnation is not refuted again, but our alive goes out again.
  self.deliver(gossip('c', [{ kind: 'unreachable', nodeId: 'a', incarnation: 1, reporter: 'c' }]), 500);
  assert.equal(self.core.member('a')?.incarnation, 2);
});

test('local health: missed nacks raise the multiplier, which lengthens the probe timeout; acks lower it', () => {
  const h = new Harness(config('a', OTHERS));
  h.advance(2_000);
  // The first probe failed with no nack from its three helpers: +3.
  assert.equal(h.core.healthMultiplier(), 4);
  const second = h.sends('ping')[1];
  assert.ok(second !== undefined && second.message.kind === 'ping');
  const before = h.sends('ping-req').length;
  h.advance(2_000 + 4 * 500 - 1);
  assert.equal(h.sends('ping-req').length, before, 'the probe timeout is 500 ms × 4');
  h.advance(2_000 + 4 * 500);
  // Two helpers: the first target is suspect now and the second is the one probed.
  assert.equal(h.sends('ping-req').length, before + 2);
  h.deliver({ kind: 'ack', from: second.to, seq: second.message.seq, updates: [] }, 4_100);
  assert.equal(h.core.healthMultiplier(), 3, 'an ack lowers it by one');

  const nacked = new Harness(config('a', OTHERS), new Set(OTHERS));
  nacked.advance(999);
  nacked.live.delete(firstPingTarget());
  nacked.advance(2_000);
  assert.equal(nacked.core.healthMultiplier(), 1, 'helpers that nack show our own network is fine');
});

/** The member the first probe goes to (the shuffle is seeded, so this is stable). */
function firstPingTarget(): string {
  const probe = new Harness(config('a', OTHERS));
  probe.advance(1_000);
  return firstPing(probe).target;
}

test('a stall of our own event loop is no evidence against others and counts against our health', () => {
  const h = new Harness(config('a', OTHERS));
  h.advance(1_000);
  const { target } = firstPing(h);
  h.step({ kind: 'tick', nowMs: 20_000 });
  assert.equal(h.core.counters.stalls, 1);
  assert.equal(h.core.healthMultiplier(), 2);
  assert.equal(h.core.member(target)?.suspect, false, 'the probe in flight is dropped unjudged');
  assert.equal(h.core.counters.probesFailed, 0);
});

test('a node pushes and pulls its whole view one probe interval after it starts, and at once after its loop stalled', () => {
  const { probeIntervalMs, pushPullIntervalMs } = MEMBERSHIP_CONFIG_DEFAULTS;
  // Restarted: what was gossiped while it was down passed it by.
  const h = new Harness(config('a', OTHERS, { restoredIncarnation: 3 }), new Set(OTHERS));
  h.advance(probeIntervalMs - 1);
  assert.equal(h.sends('sync').length, 0);
  h.advance(probeIntervalMs);
  assert.equal(h.sends('sync').length, 1, 'one probe interval after start');
  h.advance(probeIntervalMs + pushPullIntervalMs - 1);
  assert.equal(h.sends('sync').length, 1, 'then every push-pull interval');
  h.advance(probeIntervalMs + pushPullIntervalMs);
  assert.equal(h.sends('sync').length, 2);
  // A stall shorter than MEMBERSHIP_STALL_SYNC_MS (a GC pause) costs no push-pull.
  h.step({ kind: 'tick', nowMs: h.core.nextWakeMs() + MEMBERSHIP_STALL_SYNC_MS - 1 });
  assert.equal(h.core.counters.stalls, 1);
  assert.equal(h.sends('sync').length, 2);
  // Its loop stalls for 20 s, well inside the next push-pull interval: a push-pull at once.
  h.step({ kind: 'tick', nowMs: h.nowMs + 20_000 });
  assert.equal(h.core.counters.stalls, 2);
  assert.equal(h.sends('sync').length, 3, 'what was gossiped during the stall passed it by');
});

function gossip(from: string, updates: MemberUpdate[]): MembershipMessage {
  return { kind: 'gossip', from, updates };
}

function report(reporter: string, nodeId = 'e'): MembershipMessage {
  return gossip(reporter, [{ kind: 'unreachable', nodeId, incarnation: 1, reporter }]);
}

test('Down only with a majority view held for downAfterMs, never with a minority', () => {
  // a, b, c, d live; e dead. Voting members: 5, so a majority is 3 reports.
  const h = new Harness(config('a', OTHERS), new Set(['b', 'c', 'd']));
  h.deliver(report('b'), 100);
  assert.equal(h.core.member('e')?.unreachable, true, 'one report marks it unreachable: routing avoids it');
  // a's own probes of e fail too: two reports, renewed as a driver would hear them.
  for (let t = 5_000; t <= 100_000; t += 5_000) {
    h.advance(t);
    h.deliver(report('b'), t);
  }
  assert.deepEqual(h.core.reportersOf('e'), ['a', 'b']);
  assert.equal(h.core.member('e')?.state, 'Up', 'a minority view never makes it Down');
  assert.equal(h.events('MemberDown', 'e').length, 0);

  h.deliver(report('c'), 100_000);
  const downAfterMs = MEMBERSHIP_CONFIG_DEFAULTS.downAfterMs;
  for (let t = 105_000; t < 100_000 + downAfterMs; t += 5_000) {
    h.advance(t);
    h.deliver(report('b'), t);
    h.deliver(report('c'), t);
  }
  h.advance(100_000 + downAfterMs - 1);
  assert.equal(h.core.member('e')?.state, 'Up', 'not before downAfterMs');
  h.advance(100_000 + downAfterMs);
  assert.equal(h.core.member('e')?.state, 'Down');
  assert.deepEqual(
    h.events('MemberDown', 'e').map((e) => e.atMs),
    [100_000 + downAfterMs],
  );
});

test('members held Down count toward the majority while the table lists them: three nodes holding three others Down cannot down a seventh', () => {
  // a, b, c live here; d, e, f held Down (they may have restarted on the other side of a
  // partition, unheard of here); g unreachable. Seven members: a Down needs 4 reports, not 3 of 4.
  const others = ['b', 'c', 'd', 'e', 'f', 'g'];
  const cfg = config('a', others);
  const members = cfg.members.map((m) =>
    ['d', 'e', 'f'].includes(m.nodeId) ? { ...m, state: 'Down' as const } : m,
  );
  const h = new Harness({ ...cfg, members }, new Set(['b', 'c']));
  const downAfterMs = MEMBERSHIP_CONFIG_DEFAULTS.downAfterMs;
  for (let t = 100; t <= 100 + 2 * downAfterMs; t += 4_000) {
    h.advance(t);
    h.deliver(report('b', 'g'), t);
    h.deliver(report('c', 'g'), t);
  }
  assert.deepEqual(h.core.reportersOf('g'), ['a', 'b', 'c']);
  assert.equal(h.core.member('g')?.unreachable, true);
  assert.equal(h.core.member('g')?.state, 'Up', 'three reports of seven members are no majority');
  assert.equal(h.events('MemberDown', 'g').length, 0);

  // d restarted and is heard again (a higher incarnation): its report makes four of seven.
  const start = h.nowMs;
  h.live.add('d');
  h.deliver(
    gossip('d', [{ kind: 'alive', nodeId: 'd', address: 'd:7000', incarnation: 2, state: 'Up' }]),
    start,
  );
  assert.equal(h.core.member('d')?.state, 'Up');
  for (let t = start + 4_000; t <= start + downAfterMs + 8_000; t += 4_000) {
    h.advance(t);
    for (const r of ['b', 'c', 'd']) h.deliver(report(r, 'g'), t);
  }
  assert.equal(h.core.member('g')?.state, 'Down', 'a majority of all seven reports it');

  // Those the table lists count; once it lists them nowhere (their replicas were replaced),
  // members lost for good no longer keep the three from downing g.
  const p = new Harness({ ...cfg, members }, new Set(['b', 'c']));
  p.step({ kind: 'placed', members: ['a', 'b', 'c', 'd', 'e', 'g'], nowMs: 50 });
  const watch = (harness: Harness, from: number, to: number) => {
    for (let t = from; t <= to; t += 4_000) {
      harness.advance(t);
      harness.deliver(report('b', 'g'), t);
      harness.deliver(report('c', 'g'), t);
    }
  };
  watch(p, 100, 100 + 2 * downAfterMs);
  assert.equal(p.core.member('g')?.state, 'Up', 'd and e are listed: four of six needed');
  const unlisted = p.nowMs;
  p.step({ kind: 'placed', members: ['a', 'b', 'c', 'g'], nowMs: unlisted });
  watch(p, unlisted + 4_000, unlisted + downAfterMs + 8_000);
  assert.equal(p.core.member('g')?.state, 'Down', 'three of the four members listed or voting');
});

test('reports lapse unless renewed, and count only from reporters we still reach', () => {
  const h = new Harness(config('a', OTHERS), new Set(['b', 'c', 'd']));
  h.deliver(report('b'), 100);
  h.deliver(report('c'), 100);
  h.deliver(report('d'), 100);
  // Not renewed: after the TTL the reports no longer count, so no Down at 30 s.
  h.advance(60_000);
  assert.equal(h.core.member('e')?.state, 'Up');

  // b, c and d report e, but we hold c and d unreachable themselves: one live report, plus ours.
  const g = new Harness(config('a', OTHERS), new Set(['b']));
  g.deliver(
    gossip('b', [
      { kind: 'unreachable', nodeId: 'c', incarnation: 1, reporter: 'b' },
      { kind: 'unreachable', nodeId: 'd', incarnation: 1, reporter: 'b' },
    ]),
    50,
  );
  for (let t = 100; t <= 60_000; t += 4_000) {
    g.advance(t);
    for (const r of ['b', 'c', 'd']) g.deliver(report(r), t);
  }
  assert.notEqual(g.core.member('e')?.state, 'Down', 'stale minority reports do not make a majority');
});

/** Cores that talk to each other, each message delivered 1 ms after it was sent. */
class Net {
  readonly cores = new Map<string, Membership>();
  readonly log: Array<{ node: string; action: MembershipAction }> = [];
  /** Nodes cut off from the others: what they send and what is sent to them is lost. */
  readonly cutOff = new Set<string>();
  private queue: Array<{ atMs: number; to: string; message: MembershipMessage }> = [];
  nowMs = 0;

  add(cfg: MembershipConfig): Membership {
    const core = new Membership(cfg, seededFractions(cfg.nodeId.charCodeAt(0)), this.nowMs);
    this.cores.set(cfg.nodeId, core);
    this.drain(cfg.nodeId);
    return core;
  }

  step(node: string, event: Parameters<Membership['step']>[0]): void {
    this.cores.get(node)!.step(event);
    this.drain(node);
  }

  run(untilMs: number): void {
    for (;;) {
      let next = untilMs + 1;
      for (const core of this.cores.values()) next = Math.min(next, core.nextWakeMs());
      for (const m of this.queue) next = Math.min(next, m.atMs);
      if (next > untilMs) break;
      this.nowMs = next;
      const due = this.queue.filter((m) => m.atMs <= next);
      this.queue = this.queue.filter((m) => m.atMs > next);
      for (const m of due)
        if (this.cores.has(m.to)) this.step(m.to, { kind: 'message', message: m.message, nowMs: next });
      for (const [id, core] of this.cores)
        if (core.nextWakeMs() <= next) this.step(id, { kind: 'tick', nowMs: next });
    }
    this.nowMs = untilMs;
  }

  events(node: string, about: string): MemberEventKind[] {
    return this.log
      .filter(
        (l) => l.node === node && l.action.kind === 'member-event' && l.action.event.member.nodeId === about,
      )
      .map((l) => (l.action.kind === 'member-event' ? l.action.event.kind : 'Initialized'));
  }

  actionsOf(node: string, kind: MembershipAction['kind']): MembershipAction[] {
    return this.log.filter((l) => l.node === node && l.action.kind === kind).map((l) => l.action);
  }

  private drain(node: string): void {
    const actions: MembershipAction[] = [];
    this.cores.get(node)!.takeActions(actions);
    for (const action of actions) {
      this.log.push({ node, action });
      if (action.kind === 'send' && !this.cutOff.has(node) && !this.cutOff.has(action.to))
        this.queue.push({ atMs: this.nowMs + 1, to: action.to, message: structuredClone(action.message) });
    }
  }
}

test('join via a seed: the seed admits the node as Joining and answers with its state; the joiner is then Up', () => {
  const net = new Net();
  net.add(config('s', ['t']));
  net.add(config('t', ['s']));
  const j = net.add(config('j', [], { selfState: 'Joining' }));
  assert.equal(j.member('j')?.state, 'Joining');
  net.step('j', { kind: 'join', seeds: [{ nodeId: 's', address: 's:7000' }], nowMs: 0 });
  net.run(5_000);
  assert.deepEqual(net.events('s', 'j'), ['MemberJoining', 'MemberUp']);
  assert.deepEqual(net.events('j', 'j'), ['Initialized', 'MemberUp']);
  assert.deepEqual(net.events('t', 'j').at(-1), 'MemberUp', 'the third member hears of it by gossip');
  for (const core of net.cores.values()) {
    assert.deepEqual(
      core.view().map((v) => `${v.nodeId}:${v.state}:${v.unreachable}`),
      ['j:Up:false', 's:Up:false', 't:Up:false'],
    );
  }
});

test('a member known Down that joins again from an empty data dir outbids its old incarnation and rejoins', () => {
  const net = new Net();
  net.add(
    config('s', ['j'], { members: [{ nodeId: 'j', address: 'j:7000', incarnation: 3, state: 'Down' }] }),
  );
  net.add(config('j', [], { selfState: 'Joining' }));
  net.step('j', { kind: 'join', seeds: [{ nodeId: 's', address: 's:7000' }], nowMs: 0 });
  net.run(3_000);
  const seen = net.cores.get('s')!.member('j');
  assert.equal(seen?.state, 'Up');
  assert.ok(seen !== undefined && seen.incarnation > 3, 'a higher incarnation than the Down one');
  assert.equal(net.events('s', 'j').includes('MemberRejoined'), true);
  assert.equal(net.cores.get('j')!.member('j')?.incarnation, seen.incarnation);
});

test('a join is refused for a removed id and for an id a live member uses at another address', () => {
  const h = new Harness(config('s', ['b', 'c']));
  h.deliver(
    { kind: 'join-request', from: 'b', address: 'elsewhere:7000', incarnation: 5, withoutData: false },
    10,
  );
  const refusal = h.sends('refuse')[0];
  assert.ok(refusal !== undefined && refusal.to === 'b' && refusal.message.kind === 'refuse');
  assert.match(refusal.message.reason, /in use by a live member/);

  const j = new Harness(config('j', [], { selfState: 'Joining' }));
  j.step({ kind: 'join', seeds: [{ nodeId: 's', address: 's:7000' }], nowMs: 0 });
  assert.equal(j.sends('join-request').length, 1);
  j.deliver({ kind: 'refuse', from: 's', reason: 'this node id was removed from the cluster' }, 10);
  assert.deepEqual(
    j.actions.filter((a) => a.kind === 'refused'),
    [{ kind: 'refused', reason: 'join refused by s: this node id was removed from the cluster' }],
  );
  j.advance(5_000);
  assert.equal(j.sends('join-request').length, 1, 'no retry after a refusal');
});

test('a node whose join no member answered cannot leave: it knows no member to tell, and one may have admitted it', () => {
  const j = new Harness(config('j', [], { selfState: 'Joining' }));
  j.step({ kind: 'join', seeds: [{ nodeId: 's', address: 's:7000' }], nowMs: 0 });
  j.step({ kind: 'leave', requestId: 1, nowMs: 10 });
  const reply = j.actions.find((a) => a.kind === 'reply');
  assert.ok(reply?.kind === 'reply' && reply.status === 'Conflict');
  assert.match(reply.message, /has not joined yet \(no member answered its join\): stop it instead/);
  assert.equal(j.core.member('j')?.state, 'Joining');
  // It goes on joining; once admitted it is Up and may leave.
  j.advance(1_500);
  assert.ok(j.sends('join-request').length >= 2, 'the join goes on');
  const seed: MemberUpdate = { kind: 'alive', nodeId: 's', address: 's:7000', incarnation: 1, state: 'Up' };
  j.deliver({ kind: 'join-accept', from: 's', members: [seed] }, 1_600);
  assert.equal(j.core.member('j')?.state, 'Up');
  j.step({ kind: 'leave', requestId: 2, nowMs: 1_700 });
  assert.equal(j.core.member('j')?.state, 'Leaving');
});

test('a joiner whose seed admitted it and then went away asks the members it heard of since, and is Up', () => {
  const j = new Harness(config('j', [], { selfState: 'Joining' }));
  j.step({ kind: 'join', seeds: [{ nodeId: 's', address: 's:7000' }], nowMs: 0 });
  assert.deepEqual(
    j.sends('join-request').map((send) => send.to),
    ['s'],
  );
  // s admitted j, then left; its acceptance never came. t, which admitted j by gossip, gossips to it.
  j.deliver(
    gossip('t', [
      { kind: 'alive', nodeId: 't', address: 't:7000', incarnation: 1, state: 'Up' },
      { kind: 'alive', nodeId: 'j', address: 'j:7000', incarnation: 1, state: 'Joining' },
    ]),
    100,
  );
  j.advance(5_000);
  const asked = j.sends('join-request').map((send) => send.to);
  assert.ok(asked.includes('t') && asked.filter((to) => to === 's').length >= 2, `asked ${asked}`);
  assert.equal(j.core.member('j')?.state, 'Joining');
  const t: MemberUpdate = { kind: 'alive', nodeId: 't', address: 't:7000', incarnation: 1, state: 'Up' };
  j.deliver({ kind: 'join-accept', from: 't', members: [t] }, 5_100);
  assert.equal(j.core.member('j')?.state, 'Up');
});

test('a joiner whose only seed left before it answered (Removed, lingering) takes its acceptance and is Up everywhere', () => {
  // Placement simulator seed 1271475124: the seed was paused while the join request waited, then
  // left; once Removed it answered the join with its state, whose own record is `removed`, and the
  // joiner dropped it as from an unknown member: it knew no other member to ask, and stayed Joining.
  const net = threeMembers();
  net.step('a', { kind: 'leave', requestId: 1, nowMs: 2_000 });
  net.step('a', { kind: 'exit', requestId: 2, nowMs: 2_000 });
  net.run(2_000 + MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs + 10);
  assert.equal(net.cores.get('a')!.member('a')?.state, 'Removed');
  assert.deepEqual(net.actionsOf('a', 'left'), [], 'it lingers until a majority heard its Removed');
  const j = net.add(config('j', [], { selfState: 'Joining' }));
  net.step('j', { kind: 'join', seeds: [{ nodeId: 'a', address: 'a:7000' }], nowMs: net.nowMs });
  net.run(net.nowMs + 10_000);
  assert.equal(j.member('j')?.state, 'Up');
  for (const observer of ['b', 'c']) assert.equal(net.cores.get(observer)!.member('j')?.state, 'Up');
  assert.deepEqual(
    j.view().map((v) => `${v.nodeId}:${v.state}`),
    ['a:Removed', 'b:Up', 'c:Up', 'j:Up'],
  );
});

/** a, b and c, each listing the others, after 2 s of probing. */
function threeMembers(): Net {
  const net = new Net();
  for (const id of ['a', 'b', 'c'])
    net.add(
      config(
        id,
        ['a', 'b', 'c'].filter((o) => o !== id),
      ),
    );
  net.run(2_000);
  return net;
}

test('graceful leave: Leaving, Exiting once handed off, then Removed everywhere and `left`', () => {
  const net = threeMembers();
  net.step('a', { kind: 'leave', requestId: 7, nowMs: 2_000 });
  net.run(3_000);
  assert.equal(net.cores.get('b')!.member('a')?.state, 'Leaving');
  net.step('a', { kind: 'exit', requestId: 8, nowMs: 3_000 });
  net.run(10_000);
  assert.deepEqual(net.actionsOf('a', 'reply'), [
    { kind: 'reply', requestId: 7, status: 'Ok', message: 'leaving' },
    { kind: 'reply', requestId: 8, status: 'Ok', message: 'exiting' },
  ]);
  assert.deepEqual(net.actionsOf('a', 'left'), [{ kind: 'left' }]);
  for (const observer of ['b', 'c']) {
    assert.deepEqual(net.events(observer, 'a').slice(1), ['MemberLeaving', 'MemberExiting', 'MemberRemoved']);
  }
  const sequences = net.log
    .filter((l) => l.node === 'b' && l.action.kind === 'member-event')
    .map((l) => (l.action.kind === 'member-event' ? l.action.event.sequence : 0));
  assert.deepEqual(
    sequences,
    sequences.map((_, i) => i + 1),
    'event sequence numbers from 1, no gaps',
  );
});

test('a leave cancelled while Leaving is Up again everywhere at a new incarnation; only a Leaving node can cancel', () => {
  const net = threeMembers();
  net.step('a', { kind: 'cancel-leave', requestId: 6, nowMs: 1_000 });
  net.step('a', { kind: 'leave', requestId: 7, nowMs: 2_000 });
  net.run(3_000);
  const leaving = net.cores.get('b')!.member('a')!;
  assert.equal(leaving.state, 'Leaving');
  net.step('a', { kind: 'cancel-leave', requestId: 8, nowMs: 3_000 });
  net.run(6_000);
  assert.deepEqual(net.actionsOf('a', 'reply'), [
    {
      kind: 'reply',
      requestId: 6,
      status: 'Conflict',
      message: 'this node is Up, not Leaving: no leave to cancel',
    },
    { kind: 'reply', requestId: 7, status: 'Ok', message: 'leaving' },
    { kind: 'reply', requestId: 8, status: 'Ok', message: 'the leave is cancelled: Up' },
  ]);
  for (const observer of ['b', 'c']) {
    const a = net.cores.get(observer)!.member('a')!;
    assert.equal(a.state, 'Up', `${observer} sees a Up again`);
    assert.equal(a.incarnation, leaving.incarnation + 1);
    assert.deepEqual(net.events(observer, 'a').slice(1), ['MemberLeaving', 'MemberUp']);
  }
  // Persisted Up: a restart does not resume the leave.
  const persisted = net.actionsOf('a', 'persist').at(-1);
  assert.ok(persisted?.kind === 'persist');
  assert.equal(persisted.members.find((m) => m.nodeId === 'a')?.state, 'Up');
  assert.equal(persisted.incarnation, leaving.incarnation + 1);
  // It may leave again; an exit asked while Up is refused as before.
  net.step('a', { kind: 'exit', requestId: 9, nowMs: 6_000 });
  net.step('a', { kind: 'leave', requestId: 10, nowMs: 6_000 });
  net.run(8_000);
  assert.equal(net.cores.get('b')!.member('a')?.state, 'Leaving');
  assert.deepEqual(
    net
      .actionsOf('a', 'reply')
      .slice(3)
      .map((r) => (r.kind === 'reply' ? r.status : '')),
    ['Conflict', 'Ok'],
  );
});

test('a node restarted in the middle of its leave starts Leaving at its new incarnation, and its exit completes the leave', () => {
  const net = threeMembers();
  net.step('a', { kind: 'leave', requestId: 7, nowMs: 2_000 });
  net.run(3_000);
  const persisted = net.actionsOf('a', 'persist').at(-1);
  assert.ok(persisted?.kind === 'persist');
  const self = persisted.members.find((m) => m.nodeId === 'a');
  assert.equal(self?.state, 'Leaving', 'the leave is persisted');
  assert.equal(resumesLeave(self?.state), true);
  // A crash, and a start from what it persisted, as the node starts (cluster.ts).
  net.cores.delete('a');
  net.add(
    config('a', ['b', 'c'], {
      restoredIncarnation: persisted.incarnation,
      members: persisted.members,
      selfState: 'Leaving',
    }),
  );
  net.run(6_000);
  for (const observer of ['b', 'c']) {
    assert.equal(net.cores.get(observer)!.member('a')?.state, 'Leaving');
    assert.equal(net.cores.get(observer)!.member('a')?.incarnation, persisted.incarnation + 1);
  }
  net.step('a', { kind: 'exit', requestId: 8, nowMs: 6_000 });
  net.run(15_000);
  assert.deepEqual(net.actionsOf('a', 'left'), [{ kind: 'left' }]);
  for (const observer of ['b', 'c']) assert.equal(net.cores.get(observer)!.member('a')?.state, 'Removed');
  assert.equal(resumesLeave('Exiting'), true, 'an Exiting node had handed everything over: it exits again');
  for (const state of ['Up', 'Joining', 'Down', 'Removed', undefined] as const)
    assert.equal(resumesLeave(state), false);
});

test('a node killed while it waits for a majority to hear its Removed resumes the leave on restart: the members that held it Down hear it', () => {
  const net = threeMembers();
  // a leaves while cut off: no one hears of it, and b and c find it gone (Down, after downAfterMs).
  net.cutOff.add('a');
  net.step('a', { kind: 'leave', requestId: 1, nowMs: 2_000 });
  net.step('a', { kind: 'exit', requestId: 2, nowMs: 2_000 });
  const downAtMs = 2_000 + MEMBERSHIP_CONFIG_DEFAULTS.downAfterMs + 30_000;
  net.run(downAtMs);
  assert.equal(net.cores.get('a')!.member('a')?.state, 'Removed');
  assert.deepEqual(net.actionsOf('a', 'left'), [], 'still waiting for a majority to hear it');
  for (const observer of ['b', 'c']) assert.equal(net.cores.get(observer)!.member('a')?.state, 'Down');
  // Killed now, then started from what it persisted, as the node starts (cluster.ts).
  const persisted = net.actionsOf('a', 'persist').at(-1);
  assert.ok(persisted?.kind === 'persist');
  const persistedState = persisted.members.find((m) => m.nodeId === 'a')?.state;
  const resuming = resumesLeave(persistedState);
  const removed = persistedState === 'Removed';
  net.cores.delete('a');
  net.cutOff.clear();
  const restarted = net.add(
    config('a', ['b', 'c'], {
      restoredIncarnation: persisted.incarnation,
      members: persisted.members,
      selfState: resuming ? 'Leaving' : 'Up',
      selfRemoved: removed,
    }),
  );
  // It holds nothing (it handed everything over before): it exits again at once, as the node does.
  net.step('a', { kind: 'exit', requestId: 3, nowMs: downAtMs });
  net.run(downAtMs + 10_000);
  assert.equal(restarted.member('a')?.state, 'Removed');
  for (const observer of ['b', 'c']) assert.equal(net.cores.get(observer)!.member('a')?.state, 'Removed');
  assert.deepEqual(net.actionsOf('a', 'left'), [{ kind: 'left' }]);
  assert.equal(persistedState, 'Exiting', 'persisted Exiting until a majority heard its Removed');
  const last = net.actionsOf('a', 'persist').at(-1);
  assert.ok(last?.kind === 'persist');
  assert.equal(
    last.members.find((m) => m.nodeId === 'a')?.state,
    'Removed',
    'once it left, it persists Removed: a later start is refused',
  );
});

test('a leaver asks every member it counted to hear its Removed, those it has since held Down too', () => {
  // a leaves (it holds nothing): Removed, it needs 3 of its 4 members to hear it.
  const h = new Harness(config('a', OTHERS));
  h.step({ kind: 'leave', requestId: 1, nowMs: 0 });
  h.step({ kind: 'exit', requestId: 2, nowMs: 0 });
  h.advance(MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs + 10);
  assert.equal(h.core.member('a')?.state, 'Removed');
  // b and c confirm (they refuse it); then it comes to hold d and e Down, on b's word — a view it
  // no longer probes, and that may be a partition's.
  for (const from of ['b', 'c']) h.deliver({ kind: 'refuse', from, reason: 'removed from the cluster' });
  for (const nodeId of ['d', 'e'])
    h.deliver(gossip('b', [{ kind: 'down', nodeId, incarnation: 1, reporter: 'b' }]));
  assert.equal(h.core.member('d')?.state, 'Down');
  // Once its gossip queue is spent, only its announcements carry its Removed.
  h.advance(h.nowMs + 100 * MEMBERSHIP_CONFIG_DEFAULTS.gossipIntervalMs);
  const since = h.actions.length;
  h.advance(h.nowMs + 10 * MEMBERSHIP_CONFIG_DEFAULTS.gossipIntervalMs);
  const told = new Set(
    h
      .sends('gossip', since)
      .filter((s) => s.message.kind === 'gossip' && s.message.updates.some((u) => u.kind === 'removed'))
      .map((s) => s.to),
  );
  assert.deepEqual(
    [...told].sort(),
    ['d', 'e'],
    'its Removed goes to those it holds Down, not to those that heard it',
  );
  // d confirms: 3 of 4, it leaves.
  h.deliver({ kind: 'refuse', from: 'd', reason: 'removed from the cluster' });
  h.advance(h.nowMs + 2 * MEMBERSHIP_CONFIG_DEFAULTS.gossipIntervalMs);
  assert.equal(h.actions.filter((x) => x.kind === 'left').length, 1);
});

test('a leave whose Removed was lost completes anyway: an Exiting member gone from a majority is Removed, not Down', () => {
  const exiting = (id: string) =>
    config(id, [], {
      members: OTHERS.filter((o) => o !== id).map((o) => ({
        nodeId: o,
        address: `${o}:7000`,
        incarnation: 1,
        state: o === 'e' ? ('Exiting' as const) : ('Up' as const),
      })),
    });
  // e announced Exiting, then a partition swallowed its Removed and it stopped.
  const h = new Harness(exiting('a'), new Set(['b', 'c', 'd']));
  const downAfterMs = MEMBERSHIP_CONFIG_DEFAULTS.downAfterMs;
  for (let t = 100; t <= 100 + downAfterMs + 10_000; t += 4_000) {
    h.advance(t);
    h.deliver(report('b'), t);
    h.deliver(report('c'), t);
  }
  assert.equal(h.core.member('e')?.state, 'Removed');
  assert.equal(h.events('MemberDown', 'e').length, 0, 'never Down: nothing of it needs replacing');
  assert.equal(h.events('MemberRemoved', 'e').length, 1);

  // A Down decided by a member that missed e's Exiting completes the leave here too.
  const g = new Harness(exiting('a'));
  g.deliver(gossip('b', [{ kind: 'down', nodeId: 'e', incarnation: 1, reporter: 'b' }]), 10);
  assert.equal(g.core.member('e')?.state, 'Removed');

  // A later life of e (restarted Exiting, resuming its leave unaware that the others removed it)
  // reached a node that missed the removal: the others' Removed, at the earlier life, still ends it.
  const f = new Harness(exiting('a'));
  f.deliver(
    gossip('e', [{ kind: 'alive', nodeId: 'e', address: 'e:7000', incarnation: 2, state: 'Exiting' }]),
    10,
  );
  assert.equal(f.core.member('e')?.incarnation, 2);
  f.deliver(gossip('b', [{ kind: 'removed', nodeId: 'e', incarnation: 1, reporter: 'b' }]), 20);
  assert.equal(f.core.member('e')?.state, 'Removed', 'Removed is final for the id, at any incarnation');
  assert.equal(f.core.member('e')?.incarnation, 2);

  // The Exiting node itself, told others removed it, finishes its leave: `left`, not `refused`.
  const e = new Harness(config('e', ['a', 'b']));
  e.step({ kind: 'leave', requestId: 1, nowMs: 1 });
  e.step({ kind: 'exit', requestId: 2, nowMs: 2 });
  assert.equal(e.core.member('e')?.state, 'Exiting');
  e.deliver(
    gossip('a', [
      { kind: 'removed', nodeId: 'e', incarnation: e.core.member('e')!.incarnation, reporter: 'a' },
    ]),
    10,
  );
  assert.equal(e.core.member('e')?.state, 'Removed');
  for (const from of ['a', 'b']) e.deliver({ kind: 'refuse', from, reason: 'removed from the cluster' }, 20);
  e.advance(10 + 2 * MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs + 1);
  assert.deepEqual(
    e.actions.filter((x) => x.kind === 'left' || x.kind === 'refused'),
    [{ kind: 'left' }],
  );
});

test('a node that left stays, announcing it, until a majority of the others heard it; at most the bound', () => {
  const leaveNow = (h: Harness) => {
    h.step({ kind: 'leave', requestId: 1, nowMs: 1 });
    h.step({ kind: 'exit', requestId: 2, nowMs: 2 });
    h.advance(2 + MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs);
    assert.equal(h.core.member('a')?.state, 'Removed');
  };
  const left = (h: Harness) => h.actions.filter((x) => x.kind === 'left').length;
  // Four others: three must confirm. Cut off from all, it keeps announcing to those that did not.
  const h = new Harness(config('a', OTHERS));
  leaveNow(h);
  h.advance(60_000);
  assert.equal(left(h), 0, 'no one confirmed: still here');
  const announcedTo = new Set(
    h
      .sends('gossip')
      .filter((g) => g.message.kind === 'gossip' && g.message.updates.some((u) => u.kind === 'removed'))
      .map((g) => g.to),
  );
  assert.deepEqual([...announcedTo].sort(), OTHERS);
  h.deliver({ kind: 'refuse', from: 'b', reason: 'removed from the cluster' }, 60_001);
  h.deliver({ kind: 'refuse', from: 'c', reason: 'removed from the cluster' }, 60_002);
  h.advance(70_000);
  assert.equal(left(h), 0, 'two of the three needed');
  const since = h.actions.length;
  h.deliver({ kind: 'refuse', from: 'd', reason: 'removed from the cluster' }, 70_001);
  h.advance(80_000);
  assert.equal(left(h), 1, 'a majority heard it: the node stops');
  const lastAnnounce = h.sends('gossip', since).length;
  assert.ok(lastAnnounce <= 1, 'and stops announcing');

  // Nobody ever confirms: it stops at the bound, with a warning.
  const g = new Harness(config('a', OTHERS));
  leaveNow(g);
  g.advance(MEMBERSHIP_LEAVE_CONFIRM_MAX_MS);
  assert.equal(left(g), 0);
  g.advance(MEMBERSHIP_LEAVE_CONFIRM_MAX_MS + 2 * MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs + 10);
  assert.equal(left(g), 1);
  assert.ok(
    g.actions.some(
      (x) =>
        x.kind === 'log' && x.level === 'warn' && /with 0 of the 3 members needed confirming/.test(x.message),
    ),
  );
});

test('a node that left still relays an indirect probe while it lingers, with only valid records', () => {
  const h = new Harness(config('a', OTHERS));
  h.step({ kind: 'leave', requestId: 1, nowMs: 1 });
  h.step({ kind: 'exit', requestId: 2, nowMs: 2 });
  h.advance(2 + MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs);
  assert.equal(h.core.member('a')?.state, 'Removed');
  const since = h.actions.length;
  h.deliver({ kind: 'ping-req', from: 'b', seq: 9, target: 'c', updates: [] }, 2_000);
  const relayed = h.sends('ping', since);
  assert.equal(relayed.length, 1);
  const updates = relayed[0]!.message.kind === 'ping' ? relayed[0]!.message.updates : [];
  assert.ok(updates.every(isValidUpdate), JSON.stringify(updates));
  assert.ok(
    !updates.some((u) => u.kind === 'alive' && u.nodeId === 'a'),
    'no alive record of a node that left',
  );
});

test('a start with join seeds joins unless the data dir knows another member: killed mid-join, it joins again', () => {
  const self: MemberRecord = { nodeId: 'j', address: 'j:7000', incarnation: 1, state: 'Up' };
  const other: MemberRecord = { nodeId: 's', address: 's:7000', incarnation: 3, state: 'Up' };
  assert.equal(startsJoining('j', 1, []), true, 'a new data dir');
  assert.equal(startsJoining('j', 1, [self]), true, 'killed before the seed answered: only itself persisted');
  assert.equal(
    startsJoining('j', 1, [self, other]),
    false,
    'it joined: a restart rejoins the members it knew',
  );
  assert.equal(startsJoining('j', 0, [self]), false, 'no seeds: a one-member cluster, or a static start');
});

test('a member that heard of a leaver only as Removed refuses it where its message came from, so the leaver stops', () => {
  // a was away for x's whole life: it learns x only from the gossip of x's Removed, with no address.
  const a = new Harness(config('a', OTHERS));
  a.deliver(gossip('b', [{ kind: 'removed', nodeId: 'x', incarnation: 2, reporter: 'x' }]), 10);
  assert.equal(a.core.member('x')?.state, 'Removed');
  assert.equal(a.core.member('x')?.address, '');
  // x, lingering until a majority confirms, tells a it left: a refuses it at the datagram's source.
  const removed: MemberUpdate = { kind: 'removed', nodeId: 'x', incarnation: 2, reporter: 'x' };
  a.step({ kind: 'message', message: gossip('x', [removed]), nowMs: 20, remote: '10.0.0.9:7000' });
  assert.deepEqual(
    a.sends('refuse').map((s) => [s.to, s.address]),
    [['x', '10.0.0.9:7000']],
  );

  // x counts that refusal towards the majority that must hear its leave, and stops once it has one.
  const x = new Harness(config('x', ['a', 'b', 'c'], { selfState: 'Leaving' }));
  x.step({ kind: 'exit', requestId: 1, nowMs: 10 });
  x.advance(10 + MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs);
  assert.equal(x.core.member('x')?.state, 'Removed');
  const at = x.nowMs + 1;
  for (const [i, from] of ['a', 'b'].entries())
    x.deliver({ kind: 'refuse', from, reason: 'removed from the cluster' }, at + i);
  x.advance(at + 2 + 2 * MEMBERSHIP_CONFIG_DEFAULTS.leaveLingerMs);
  assert.ok(
    x.actions.some((y) => y.kind === 'left'),
    'x left once a majority refused it',
  );
  assert.ok(x.nowMs < 10 + MEMBERSHIP_LEAVE_CONFIRM_MAX_MS);
});

test('operator removal: only a Down member; the removed member is refused when it comes back', () => {
  const h = new Harness(config('a', OTHERS));
  h.step({ kind: 'remove', nodeId: 'b', requestId: 1, nowMs: 10 });
  h.step({ kind: 'remove', nodeId: 'zz', requestId: 2, nowMs: 10 });
  h.step({ kind: 'remove', nodeId: 'a', requestId: 3, nowMs: 10 });
  h.deliver(gossip('b', [{ kind: 'down', nodeId: 'e', incarnation: 1, reporter: 'b' }]), 20);
  assert.equal(h.core.member('e')?.state, 'Down');
  h.step({ kind: 'remove', nodeId: 'e', requestId: 4, nowMs: 30 });
  const replies = h.actions
    .filter((a) => a.kind === 'reply')
    .map((a) => (a.kind === 'reply' ? a.status : ''));
  assert.deepEqual(replies, ['Conflict', 'NotFound', 'BadRequest', 'Ok']);
  assert.equal(h.core.member('e')?.state, 'Removed');
  assert.equal(h.events('MemberRemoved', 'e').length, 1);

  // e comes back (restarted, higher incarnation): its messages and its join are refused.
  const alive: MemberUpdate = { kind: 'alive', nodeId: 'e', address: 'e:7000', incarnation: 9, state: 'Up' };
  h.deliver({ kind: 'ping', from: 'e', seq: 1, target: 'a', updates: [alive] }, 40);
  h.deliver({ kind: 'join-request', from: 'e', address: 'e:7000', incarnation: 10, withoutData: false }, 50);
  h.deliver(gossip('b', [alive]), 60);
  assert.equal(h.sends('ack').length, 0);
  assert.deepEqual(
    h.sends('refuse').map((s) => s.to),
    ['e', 'e'],
  );
  assert.equal(h.core.counters.fromRemoved, 1);
  assert.equal(h.core.member('e')?.state, 'Removed', 'Removed is final: no higher incarnation revives it');

  // The removed node, told so, stops.
  const e = new Harness(config('e', ['a', 'b']));
  e.deliver({ kind: 'refuse', from: 'a', reason: 'removed from the cluster' }, 10);
  assert.ok(e.actions.some((x) => x.kind === 'refused'));
  assert.equal(e.core.member('e')?.state, 'Removed');
});

test('restart bumps the incarnation, persisted before any message; an older life is outbid', () => {
  const h = new Harness(config('a', OTHERS, { restoredIncarnation: 5 }));
  assert.equal(h.core.member('a')?.incarnation, 6);
  assert.equal(h.actions[0]?.kind, 'persist');
  assert.ok(h.actions[0]?.kind === 'persist' && h.actions[0].incarnation === 6);
  // Someone still gossips our previous life at a higher incarnation (a lost persist): outbid it.
  h.deliver(
    gossip('b', [{ kind: 'alive', nodeId: 'a', address: 'a:7000', incarnation: 9, state: 'Up' }]),
    10,
  );
  assert.equal(h.core.member('a')?.incarnation, 10);
  const persists = h.actions.filter((x) => x.kind === 'persist');
  assert.ok(persists.at(-1)?.kind === 'persist' && persists.at(-1)?.incarnation === 10);

  // A member known Down that restarts with a higher incarnation rejoins.
  h.deliver(gossip('b', [{ kind: 'down', nodeId: 'c', incarnation: 1, reporter: 'b' }]), 20);
  h.deliver(
    gossip('c', [{ kind: 'alive', nodeId: 'c', address: 'c:7000', incarnation: 2, state: 'Up' }]),
    30,
  );
  assert.equal(h.core.member('c')?.state, 'Up');
  assert.equal(h.events('MemberRejoined', 'c').length, 1);
});

test('bad input: unknown senders, stale incarnations, oversized lists and invalid updates are counted and dropped', () => {
  const h = new Harness(config('a', OTHERS));
  h.deliver({ kind: 'ping', from: 'x', seq: 1, target: 'a', updates: [] }, 10);
  assert.equal(h.core.counters.fromUnknown, 1);
  assert.equal(h.sends('ack').length, 0, 'no answer to an unknown member');
  // An unknown sender carrying its own record joined and the news had not reached us: learned.
  const own: MemberUpdate = { kind: 'alive', nodeId: 'y', address: 'y:7000', incarnation: 1, state: 'Up' };
  h.deliver({ kind: 'ping', from: 'y', seq: 2, target: 'a', updates: [own] }, 20);
  assert.equal(h.sends('ack')[0]?.to, 'y');
  assert.equal(h.core.member('y')?.state, 'Up');

  h.deliver(
    gossip('b', [{ kind: 'alive', nodeId: 'c', address: 'c:7000', incarnation: 3, state: 'Up' }]),
    30,
  );
  h.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'c', incarnation: 2, reporter: 'b' }]), 40);
  assert.equal(h.core.counters.staleUpdates, 1);
  assert.equal(h.core.member('c')?.suspect, false, 'a claim about an older life is void');

  const many: MemberUpdate[] = Array.from(
    { length: MEMBERSHIP_CONFIG_DEFAULTS.updatesPerMessageMax + 1 },
    () => ({
      kind: 'suspect',
      nodeId: 'd',
      incarnation: 1,
      reporter: 'b',
    }),
  );
  h.deliver(gossip('b', many), 50);
  assert.equal(h.core.counters.oversizedMessages, 1);
  assert.equal(h.core.member('d')?.suspect, false, 'nothing on an oversized message is applied');

  h.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'd', incarnation: -1, reporter: 'b' }]), 60);
  h.deliver(gossip('b', [{ kind: 'suspect', nodeId: '', incarnation: 1, reporter: 'b' }]), 60);
  assert.equal(h.core.counters.invalidUpdates, 2);
  h.deliver({ kind: 'ping', from: 'b', seq: 3, target: 'someone-else', updates: [] }, 70);
  assert.equal(h.core.counters.wrongTarget, 1, 'a ping meant for another node is not acked');
  assert.ok(h.actions.some((x) => x.kind === 'log' && /unknown member x/.test(x.message)));
});

test('member events carry sequence numbers from 1 and start with Initialized for every known member', () => {
  const h = new Harness(config('a', ['b', 'c']));
  const events = h.actions.filter((x) => x.kind === 'member-event');
  assert.deepEqual(
    events.map((x) =>
      x.kind === 'member-event' ? `${x.event.sequence}:${x.event.kind}:${x.event.member.nodeId}` : '',
    ),
    ['1:Initialized:a', '2:Initialized:b', '3:Initialized:c'],
  );
});

test('gossip queue: fewest-sent first, dropped at the retransmit limit, and a refutation voids older claims', () => {
  const queue = new GossipQueue();
  const suspectB: MemberUpdate = { kind: 'suspect', nodeId: 'b', incarnation: 1, reporter: 'a' };
  const suspectC: MemberUpdate = { kind: 'suspect', nodeId: 'c', incarnation: 1, reporter: 'a' };
  queue.push(suspectB);
  queue.push(suspectC);
  assert.deepEqual(queue.take(1, 2), [suspectC], 'the newest of the unsent first');
  assert.deepEqual(queue.take(1, 2), [suspectB], 'then the least sent');
  assert.deepEqual(queue.take(2, 2), [suspectC, suspectB]);
  assert.equal(queue.length, 0, 'each sent its limit (2) and dropped');

  queue.push(suspectB);
  queue.push({ kind: 'unreachable', nodeId: 'b', incarnation: 1, reporter: 'd' });
  const refutation: MemberUpdate = {
    kind: 'alive',
    nodeId: 'b',
    address: 'b:7000',
    incarnation: 2,
    state: 'Up',
  };
  queue.push(refutation);
  assert.deepEqual(queue.take(16, 4), [refutation], 'claims at the refuted incarnation are gone');
});

test('a lost peer connection makes that member the next probe, at once, out of its turn', () => {
  const h = new Harness(config('a', OTHERS), new Set(['b', 'c', 'd']));
  h.advance(1000);
  const first = firstPing(h);
  h.advance(1400);
  const before = h.actions.length;
  // e's connection closes mid-interval: its probe starts now, not at the next interval or its turn.
  h.step({ kind: 'connection-lost', nodeId: 'e', nowMs: 1400 });
  const pings = h.sends('ping', before);
  assert.equal(first.target === 'e' ? 0 : pings.length, first.target === 'e' ? 0 : 1);
  if (first.target !== 'e') assert.equal(pings[0]!.to, 'e');
  // e is silent: suspected once the probe and its indirect round run out.
  h.advance(3500);
  assert.equal(h.core.member('e')?.suspect, true);
  // A member already unreachable is not probed out of turn again.
  const quiet = new Harness(config('a', OTHERS));
  quiet.step({ kind: 'connection-lost', nodeId: 'zz', nowMs: 10 });
  assert.equal(quiet.sends('ping').length, 0, 'an unknown member is ignored');
});

test('a sync asked for out of turn sends the named member the whole view and asks for its own back', () => {
  const h = new Harness(config('a', OTHERS));
  h.step({ kind: 'sync-with', nodeId: 'c', nowMs: 100 });
  const [sync] = h.sends('sync');
  assert.ok(sync !== undefined && sync.message.kind === 'sync', 'a sync was sent');
  assert.equal(sync.to, 'c');
  assert.equal(sync.message.reply, true, 'it asks for the member’s view back');
  assert.deepEqual(sync.message.members.map((m) => m.nodeId).sort(), ['a', ...OTHERS]);
  // c's answer carries what this node missed: d left.
  h.deliver({
    kind: 'sync',
    from: 'c',
    reply: false,
    members: [{ kind: 'alive', nodeId: 'd', address: 'd:7000', incarnation: 2, state: 'Leaving' }],
  });
  assert.equal(h.core.member('d')?.state, 'Leaving');
  // Neither itself nor a member it does not know.
  h.step({ kind: 'sync-with', nodeId: 'a', nowMs: 200 });
  h.step({ kind: 'sync-with', nodeId: 'zz', nowMs: 200 });
  assert.equal(h.sends('sync').length, 1);
});

test('a record of this node from an earlier run is told once; its own incarnations and a configured placeholder are not', () => {
  const earlierRuns = (h: Harness) =>
    h.actions.filter(
      (a): a is Extract<MembershipAction, { kind: 'earlier-run' }> => a.kind === 'earlier-run',
    );
  const alive = (incarnation: number): MemberUpdate => ({
    kind: 'alive',
    nodeId: 'a',
    address: 'a:7000',
    incarnation,
    state: 'Up',
  });
  // A run restored at incarnation 40 uses 41.
  const h = new Harness(config('a', ['b', 'c'], { restoredIncarnation: 40 }));
  h.deliver(gossip('b', [alive(0)]), 10); // --peers' placeholder for a member never heard from
  h.deliver(gossip('b', [alive(41)]), 20); // this run's own
  h.deliver(gossip('b', [{ kind: 'suspect', nodeId: 'a', incarnation: 41, reporter: 'b' }]), 30);
  h.deliver(gossip('b', [alive(42)]), 40); // refuted at 42: still this run's
  assert.deepEqual(earlierRuns(h), []);
  h.deliver(gossip('c', [alive(40)]), 50); // the run before
  h.deliver(gossip('c', [alive(39)]), 60);
  assert.deepEqual(
    earlierRuns(h).map((a) => a.incarnation),
    [40],
    'told once per run',
  );

  // A node on a lost data directory starts low and hears of a later incarnation of its id.
  const wiped = new Harness(config('a', ['b'], { restoredIncarnation: undefined }));
  wiped.deliver(gossip('b', [alive(7)]), 10);
  assert.deepEqual(
    earlierRuns(wiped).map((a) => a.incarnation),
    [7],
  );
});

test('a node that gives up stops as a refused one: the reason goes out, it probes and answers no one', () => {
  const h = new Harness(config('a', ['b', 'c']), new Set(['b', 'c']));
  h.advance(2_000);
  const before = h.actions.length;
  h.step({ kind: 'give-up', reason: 'it lost its copies', nowMs: 2_100 });
  const refused = h.actions
    .slice(before)
    .filter((a): a is Extract<MembershipAction, { kind: 'refused' }> => a.kind === 'refused');
  assert.deepEqual(
    refused.map((a) => a.reason),
    ['it lost its copies'],
  );
  assert.equal(h.core.nextWakeMs(), Number.POSITIVE_INFINITY);
  const afterGiveUp = h.actions.length;
  h.deliver({ kind: 'ping', from: 'b', seq: 99, target: 'a', updates: [] }, 2_200);
  h.advance(10_000);
  assert.equal(h.sends('ping', afterGiveUp).length, 0, 'no probe');
  assert.equal(h.sends('ack', afterGiveUp).length, 0, 'no answer to a probe');
});

test('a seed has a joiner without its earlier run’s data wait while its table lists the id, and its lost copies dropped', () => {
  const join = (from: string, withoutData: boolean): MembershipMessage => ({
    kind: 'join-request',
    from,
    address: `${from}:7000`,
    incarnation: 1_796_000_000_000,
    withoutData,
  });
  const answersTo = (h: Harness, to: string, since = 0) =>
    h
      .sends('refuse', since)
      .filter((s) => s.to === to)
      .map((s) => s.message as Extract<MembershipMessage, { kind: 'refuse' }>);
  const lostCopies = (h: Harness) => h.actions.filter((a) => a.kind === 'lost-copies');

  // b, a member the table lists, restarts on an empty store: told to wait, its lost copies asked
  // to be dropped, at each attempt.
  const h = new Harness(config('s', ['b', 'c']));
  h.step({ kind: 'placed', members: ['s', 'b', 'c'], onlyCopies: [], nowMs: 5 });
  h.deliver(join('b', true), 10);
  h.deliver(join('b', true), 1_010);
  const waits = answersTo(h, 'b');
  assert.equal(waits.length, 2);
  for (const wait of waits) {
    assert.equal(wait.retry, true);
    assert.match(wait.reason, /node id b is a replica in the cluster's table .* drops its lost copies/);
  }
  assert.deepEqual(lostCopies(h), [
    { kind: 'lost-copies', member: 'b', incarnation: 1_796_000_000_000 },
    { kind: 'lost-copies', member: 'b', incarnation: 1_796_000_000_000 },
  ]);
  assert.equal(h.sends('join-accept').length, 0);
  assert.equal(h.core.member('b')?.incarnation, 1, 'its record is left as it was');

  // With its data (a restart that kept its data directory), the same id is admitted at once.
  h.deliver(join('b', false), 1_020);
  assert.equal(h.sends('join-accept').filter((s) => s.to === 'b').length, 1);

  // Once the table lists it no more, it is admitted without data, as a new id is.
  const g = new Harness(config('s', ['b', 'c']));
  g.step({ kind: 'placed', members: ['s', 'b', 'c'], onlyCopies: [], nowMs: 5 });
  g.deliver(join('b', true), 10);
  g.step({ kind: 'placed', members: ['s', 'c'], onlyCopies: [], nowMs: 500 });
  const admittedAt = g.actions.length;
  g.deliver(join('n', true), 1_000);
  g.deliver(join('b', true), 1_010);
  assert.equal(answersTo(g, 'n', admittedAt).length + answersTo(g, 'b', admittedAt).length, 0);
  assert.deepEqual(
    g.sends('join-accept').map((s) => s.to),
    ['n', 'b'],
  );

  // Where it held some fragment's only whole copy, nothing can replace it: refused, naming the way out.
  const f = new Harness(config('s', ['b', 'c']));
  f.step({ kind: 'placed', members: ['s', 'b', 'c'], onlyCopies: ['b'], nowMs: 5 });
  f.deliver(join('b', true), 10);
  const [refusal] = answersTo(f, 'b');
  assert.equal(refusal?.retry, undefined);
  assert.match(refusal!.reason, /node id b held the only copy of some fragments/);
  assert.match(refusal!.reason, /tessera cluster remove b/);
  assert.deepEqual(lostCopies(f), []);
});

test('a joiner told to wait keeps asking, says so once, and is admitted later', () => {
  const j = new Harness(
    config('b', [], { selfState: 'Joining', restoredIncarnation: 5_000, withoutData: true }),
  );
  j.step({ kind: 'join', seeds: [{ nodeId: 's', address: 's:7000' }], nowMs: 0 });
  const wait: MembershipMessage = {
    kind: 'refuse',
    from: 's',
    reason: 'lost copies dropped first',
    retry: true,
  };
  j.deliver(wait, 10);
  j.advance(1_100);
  j.deliver(wait, 1_110);
  assert.equal(j.core.member('b')?.state, 'Joining');
  assert.equal(j.actions.filter((a) => a.kind === 'refused').length, 0);
  assert.equal(j.sends('join-request').length, 2, 'asked again at its next attempt');
  assert.deepEqual(
    j.actions.filter((a) => a.kind === 'log').map((a) => (a as { message: string }).message),
    ['join waits at s: lost copies dropped first'],
  );
  const seed: MemberUpdate = { kind: 'alive', nodeId: 's', address: 's:7000', incarnation: 1, state: 'Up' };
  j.deliver({ kind: 'join-accept', from: 's', members: [seed] }, 1_200);
  assert.equal(j.core.member('b')?.state, 'Up');
  // A member that tells a member to wait refuses nothing.
  j.deliver(wait, 1_300);
  assert.equal(j.core.member('b')?.state, 'Up');
});

test('a node without its earlier run’s data asks the members it knows first, and hears of that run', () => {
  const net = new Net();
  // a holds b from b's earlier run (incarnation 100), unreachable since it stopped.
  net.add(
    config('a', ['b'], { members: [{ nodeId: 'b', address: 'b:7000', incarnation: 100, state: 'Up' }] }),
  );
  net.run(20_000);
  assert.equal(net.cores.get('a')!.member('b')?.unreachable, true);
  // b restarts on the memory store: a configured member list (--peers, incarnation 0), a new incarnation.
  net.add(
    config('b', ['a'], {
      members: [{ nodeId: 'a', address: 'a:7000', incarnation: 0, state: 'Up' }],
      restoredIncarnation: 5_000,
      withoutData: true,
    }),
  );
  net.run(net.nowMs + 10);
  assert.deepEqual(
    net.actionsOf('b', 'earlier-run'),
    [{ kind: 'earlier-run', incarnation: 100 }],
    'within one round trip of its start',
  );
});

test('a start without data among members asks them first, telling none of itself, and joins through them when they knew it', () => {
  const net = new Net();
  // a and c hold b from its earlier run (incarnation 100).
  const b100 = { nodeId: 'b', address: 'b:7000', incarnation: 100, state: 'Up' as const };
  const others = (self: string, ids: string[]) =>
    ids
      .filter((id) => id !== self)
      .map((id) => ({ nodeId: id, address: `${id}:7000`, incarnation: 1, state: 'Up' as const }));
  net.add(config('a', [], { members: [...others('a', ['c']), b100] }));
  net.add(config('c', [], { members: [...others('c', ['a']), b100] }));
  net.cutOff.add('b');
  net.run(20_000);
  net.cutOff.delete('b');
  const since = net.log.length;
  // b restarts without its data: --peers names a and c at incarnation 0, a new incarnation.
  const b = net.add(
    config('b', [], {
      members: ['a', 'c'].map((id) => ({
        nodeId: id,
        address: `${id}:7000`,
        incarnation: 0,
        state: 'Up' as const,
      })),
      restoredIncarnation: 5_000,
      withoutData: true,
    }),
  );
  assert.equal(b.member('b')?.state, 'Joining', 'it starts asking, not as a member');
  const sent = () =>
    net.log
      .slice(since)
      .filter((l) => l.node === 'b' && l.action.kind === 'send')
      .map((l) => (l.action as Send).message);
  assert.deepEqual(
    sent().map((m) => [m.kind, m.kind === 'sync' ? m.members.length : -1]),
    [
      ['sync', 0],
      ['sync', 0],
    ],
    'an empty view to each member: nothing about itself',
  );
  // The answers arrive one round trip later: b asks to join, and no member holds this run yet.
  net.run(net.nowMs + 2);
  assert.deepEqual(net.actionsOf('b', 'earlier-run'), [{ kind: 'earlier-run', incarnation: 100 }]);
  const join = sent().find((m) => m.kind === 'join-request');
  assert.ok(join !== undefined && join.kind === 'join-request', 'it asks to join');
  assert.equal(join.withoutData, true);
  assert.ok(join.incarnation > 100);
  for (const id of ['a', 'c']) assert.equal(net.cores.get(id)!.member('b')?.incarnation, 100);
  for (const m of sent())
    assert.ok(m.kind !== 'ping' && m.kind !== 'gossip' && m.kind !== 'ack', `no ${m.kind}`);
  // Admitted (no table lists b here), it is Up.
  net.run(net.nowMs + 2_000);
  assert.equal(b.member('b')?.state, 'Up');
  for (const id of ['a', 'c']) assert.equal(net.cores.get(id)!.member('b')?.incarnation, join.incarnation);
});

test('a start without data is a member once a member shows no earlier run, or every member starts so too, or no one answers in time', () => {
  const peers = (ids: string[]) =>
    ids.map((id) => ({ nodeId: id, address: `${id}:7000`, incarnation: 0, state: 'Up' as const }));
  const upEvents = (h: Harness) => h.events('MemberUp', 'b').length;

  // A running member whose view holds b only as --peers' placeholder: b never ran before.
  const fresh = new Harness(config('b', [], { members: peers(['a', 'c']), withoutData: true }));
  assert.equal(fresh.core.member('b')?.state, 'Joining');
  // Not a member yet, it admits no joiner: its accept would tell of it.
  fresh.deliver(
    { kind: 'join-request', from: 'n', address: 'n:7000', incarnation: 9, withoutData: false },
    1,
  );
  assert.equal(fresh.sends('join-accept').length + fresh.sends('refuse').length, 0);
  const aUp: MemberUpdate = { kind: 'alive', nodeId: 'a', address: 'a:7000', incarnation: 3, state: 'Up' };
  const bPlaceholder: MemberUpdate = {
    kind: 'alive',
    nodeId: 'b',
    address: 'b:7000',
    incarnation: 0,
    state: 'Up',
  };
  fresh.deliver({ kind: 'sync', from: 'a', reply: false, members: [aUp, bPlaceholder] }, 5);
  assert.equal(fresh.core.member('b')?.state, 'Up');
  assert.equal(upEvents(fresh), 1);
  assert.equal(fresh.sends('join-request').length, 0);

  // A new cluster: each member starts as b does, and answers with an empty view.
  const cluster = new Net();
  for (const id of ['a', 'b', 'c'])
    cluster.add(
      config(id, [], { members: peers(['a', 'b', 'c'].filter((o) => o !== id)), withoutData: true }),
    );
  cluster.run(100);
  for (const id of ['a', 'b', 'c'])
    assert.equal(cluster.cores.get(id)!.member(id)?.state, 'Up', `${id} is a member`);
  assert.deepEqual(cluster.actionsOf('b', 'earlier-run'), []);

  // No answer: asked again every resend interval, a member at the end of the wait.
  const alone = new Harness(config('b', [], { members: peers(['a', 'c']), withoutData: true }));
  alone.advance(MEMBERSHIP_CONFIG_DEFAULTS.discoveryResendMs - 1);
  assert.equal(alone.sends('sync').length, 2);
  alone.advance(MEMBERSHIP_CONFIG_DEFAULTS.discoveryResendMs);
  assert.equal(alone.sends('sync').length, 4, 'asked again');
  alone.advance(MEMBERSHIP_CONFIG_DEFAULTS.discoveryMs - 1);
  assert.equal(alone.core.member('b')?.state, 'Joining');
  assert.equal(alone.sends('ping').length, 0, 'it probes no one meanwhile');
  alone.advance(MEMBERSHIP_CONFIG_DEFAULTS.discoveryMs);
  assert.equal(alone.core.member('b')?.state, 'Up');
  assert.equal(upEvents(alone), 1);
  const said = alone.actions.filter((a) => a.kind === 'log').at(-1);
  assert.equal(said?.kind === 'log' && said.level, 'warn', 'no member could rule out an earlier run');
  assert.match(said?.kind === 'log' ? said.message : '', /^starting as a member: a, c did not answer/);

  // A node with its data, or a first member alone, starts a member at once.
  for (const cfg of [config('b', ['a']), config('b', [], { withoutData: true })])
    assert.equal(new Harness(cfg).core.member('b')?.state, 'Up');
});
