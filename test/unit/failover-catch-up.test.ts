// Catch-up after a failover (src/main/mesh/failover-catch-up.ts): a fragment this node serves since
// its start, or whose serving replica moved to this node because the one before is no longer up, is
// held — requests wait, in order — until an anti-entropy round against every other reachable
// replica has ended, then served; one caught up already, or with no replica to learn from, is not.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TesseraError } from '../../src/core/errors.js';
import {
  type CatchUpHost,
  FailoverCatchUp,
  type HandoverOutcome,
  type RoundEnd,
} from '../../src/main/mesh/failover-catch-up.js';
import type { ResultHandler } from '../../src/main/worker-link.js';

const SELF = 1;

class Host implements CatchUpHost {
  readonly fragmentCount = 4;
  readonly selfIndex = SELF;
  first = [0, 0, 2, SELF];
  up = new Set([0, 1, 2]);
  nowMsValue = 1_000;
  readonly rounds: Array<{ fragment: number; member: number; finish: (ok: boolean) => void }> = [];
  readonly handovers: Array<{
    fragment: number;
    member: number;
    finish: (outcome: HandoverOutcome) => void;
  }> = [];
  readonly resubmitted: string[] = [];
  readonly logs: string[] = [];

  firstServing(fragment: number): number {
    return this.first[fragment];
  }
  isUp(member: number): boolean {
    return this.up.has(member);
  }
  memberName(member: number): string {
    return `n${member}`;
  }
  peersOf(): readonly number[] {
    return [0, SELF, 2];
  }
  reconcile(fragment: number, member: number): Promise<RoundEnd> {
    return new Promise((resolve) =>
      this.rounds.push({
        fragment,
        member,
        finish: (ok) => resolve({ ok, reason: ok ? '' : 'the peer broke the round' }),
      }),
    );
  }
  handover(fragment: number, member: number): Promise<HandoverOutcome> {
    return new Promise((resolve) => this.handovers.push({ fragment, member, finish: resolve }));
  }
  resubmit(fragment: number, request: Buffer): void {
    this.resubmitted.push(`${fragment}:${request.toString()}`);
  }
  nowMs(): number {
    return this.nowMsValue;
  }
  /** Catch-up deadlines: kept, fired by hand. */
  readonly timers: Array<{ ms: number; fire: () => void; cancelled: boolean }> = [];
  after(ms: number, fire: () => void): () => void {
    const timer = { ms, fire, cancelled: false };
    this.timers.push(timer);
    return () => {
      timer.cancelled = true;
    };
  }
  log(_level: string, fields: Record<string, unknown>, message: string): void {
    this.logs.push(`${message} ${JSON.stringify(fields)}`);
  }
}

const handler: ResultHandler<unknown> = { onResult: () => {}, onFailure: () => {} };

/** Sends `text` as a request through the fragment's link, as the dispatcher would. */
function send(catchUp: FailoverCatchUp, fragment: number, text: string): void {
  const link = catchUp.link(fragment);
  assert.ok(link !== undefined, `fragment ${fragment} is not held`);
  assert.ok(link.canAccept());
  const at = link.begin(handler, text, text.length);
  link.buffer.write(text, at);
  link.end();
}

/** Fragment 3's serving goes to member 0 and comes back here (0 up): a catch-up from 0 starts. */
function servedByZeroAndBack(host: Host, catchUp: FailoverCatchUp): void {
  host.first = [0, 0, 2, 0];
  catchUp.check();
  host.first = [0, 0, 2, SELF];
  catchUp.check();
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

test('the serving replica lost: the fragment is held until a round against each other reachable replica ends', async () => {
  const host = new Host();
  const catchUp = new FailoverCatchUp(host);
  catchUp.check(); // first look: fragment 3 is served here since the start
  assert.deepEqual(
    host.rounds.map((r) => `${r.fragment}@${r.member}`),
    ['3@0', '3@2'],
  );
  for (const round of host.rounds.splice(0)) round.finish(true);
  await settle();
  assert.equal(catchUp.inProgress(), 0);
  // Member 0 stops answering: fragments 0 and 1 now route here.
  host.up.delete(0);
  host.first = [SELF, SELF, 2, SELF];
  catchUp.check();
  assert.deepEqual(
    host.rounds.map((r) => `${r.fragment}@${r.member}`),
    ['0@2', '1@2'],
    'one round per fragment, against the reachable replica (not itself, not the lost one)',
  );
  assert.equal(catchUp.link(3), undefined, 'fragment 3 caught up already');
  send(catchUp, 0, 'get-a');
  send(catchUp, 0, 'set-b');
  let forwarded = false;
  catchUp.holdForwarded(
    0,
    () => {
      forwarded = true;
    },
    () => assert.fail('not refused'),
  );
  assert.deepEqual(host.resubmitted, [], 'nothing is served while catching up');
  host.nowMsValue += 120;
  host.rounds[0].finish(true);
  await settle();
  assert.deepEqual(host.resubmitted, ['0:get-a', '0:set-b'], 'held requests go on in order');
  assert.ok(forwarded);
  assert.equal(catchUp.link(0), undefined);
  assert.equal(catchUp.inProgress(), 1, 'fragment 1 still catching up');
  assert.deepEqual(
    { ...catchUp.counters },
    { catchUps: 3, incomplete: 0, covered: 0, absorbed: 0, held: 3, lastMs: 120, maxMs: 120 },
  );
  host.rounds[1].finish(false);
  await settle();
  assert.equal(catchUp.counters.incomplete, 1, 'a round that did not complete is counted');
  assert.match(
    host.logs.at(-1) ?? '',
    /^catch-up round against another replica failed: .*"complete":false,"failed":\["n2: the peer broke the round"\]/,
    'a round that failed is logged with its replica and reason, not as late',
  );
});

test('a fragment served here since its catch-up is not held again; one whose serving came back from another is; with no other replica reachable, none is', async () => {
  const host = new Host();
  const catchUp = new FailoverCatchUp(host);
  catchUp.check();
  for (const round of host.rounds.splice(0)) round.finish(true);
  await settle();
  catchUp.check();
  assert.equal(catchUp.inProgress(), 0, 'caught up, and served here since');
  // Fragment 3 goes to member 0 (a table change) and comes back while 0 is up: writes 0 took in
  // between may not have reached this node yet, so it catches up again — 0, the only replica that
  // took writes meanwhile, hands them over, then a round against 0 alone takes what 0 never queued
  // here. A handover that fails: the round against that replica all the same.
  for (const outcome of ['drained', 'failed'] as const) {
    servedByZeroAndBack(host, catchUp);
    assert.equal(catchUp.inProgress(), 1);
    assert.deepEqual(
      host.handovers.map((r) => [r.fragment, r.member]),
      [[3, 0]],
    );
    assert.equal(host.rounds.length, 0, 'the round waits for the handover');
    host.handovers.splice(0)[0]!.finish(outcome);
    await settle();
    assert.deepEqual(
      host.rounds.map((r) => [r.fragment, r.member]),
      [[3, 0]],
    );
    assert.equal(catchUp.inProgress(), 1, 'held until the round ends');
    host.rounds.splice(0)[0]!.finish(true);
    await settle();
    assert.equal(catchUp.inProgress(), 0);
  }
  // A handover that covers the copy (verified against 0 under the continuity 0 still replicates
  // here in): served once it is drained, with no round.
  servedByZeroAndBack(host, catchUp);
  send(catchUp, 3, 'get k');
  host.handovers.splice(0)[0]!.finish('covered');
  await settle();
  assert.equal(host.rounds.length, 0, 'no round after a covering handover');
  assert.equal(catchUp.inProgress(), 0);
  assert.deepEqual(host.resubmitted, ['3:get k'], 'the held request went on');
  assert.equal(catchUp.counters.covered, 1);
  assert.equal(catchUp.counters.incomplete, 0);
  assert.match(
    host.logs.at(-1) ?? '',
    /caught up.*"from":"n0".*"handover":"covered"/,
    'the log names the member',
  );
  // Every other member lost: nothing reachable to learn from, so fragments 0–2 are served as they are.
  host.up = new Set([SELF]);
  host.first = [SELF, SELF, SELF, SELF];
  catchUp.check();
  assert.equal(catchUp.inProgress(), 0);
  assert.equal(host.rounds.length, 0);
});

test('past FAILOVER_HELD_REQUESTS_MAX a held fragment refuses with backpressure (TRYAGAIN)', () => {
  const host = new Host();
  const catchUp = new FailoverCatchUp(host);
  host.first = [0, 0, 2, 0];
  catchUp.check();
  host.up.delete(0);
  host.first = [SELF, 0, 2, 2];
  catchUp.check();
  const link = catchUp.link(0)!;
  let refused: TesseraError | undefined;
  for (let i = 0; link.canAccept(); i++) send(catchUp, 0, `r${i}`);
  catchUp.holdForwarded(
    0,
    () => assert.fail('not held'),
    (error) => {
      refused = error;
    },
  );
  assert.match(refused?.message ?? '', /catching up after a failover/);
});

test('every change of a fragment’s serving member is stamped, and only those fragments', () => {
  const host = new Host();
  host.up = new Set([0, 2]); // no replica to catch up from: only the stamps change
  host.first = [0, 0, 2, 2];
  const catchUp = new FailoverCatchUp(host);
  catchUp.check();
  const first = catchUp.servingStamp;
  assert.equal(first, 4, 'the first look changes every fragment');
  const before = [0, 1, 2, 3].map((f) => catchUp.servingChangedAt(f));
  catchUp.check();
  assert.equal(catchUp.servingStamp, first, 'nothing changed, nothing stamped');
  host.first = [2, 0, 2, 0];
  catchUp.check();
  assert.equal(catchUp.servingStamp, first + 2);
  assert.ok(catchUp.servingChangedAt(0) > first && catchUp.servingChangedAt(3) > first);
  assert.deepEqual(
    [1, 2].map((f) => catchUp.servingChangedAt(f)),
    [before[1], before[2]],
  );
  // Away and back is two changes: a write sent while it was away went elsewhere.
  host.first = [0, 0, 2, 0];
  catchUp.check();
  host.first = [2, 0, 2, 0];
  catchUp.check();
  assert.equal(catchUp.servingStamp, first + 4);
});

test('rounds that do not end in time: the fragment is served at the host’s deadline, counted incomplete', async () => {
  const host = new Host();
  const catchUp = new FailoverCatchUp(host);
  host.first = [0, 0, 2, SELF];
  catchUp.check();
  assert.equal(catchUp.inProgress(), 1);
  send(catchUp, 3, 'set x');
  const [deadline] = host.timers;
  assert.ok(deadline !== undefined && !deadline.cancelled);
  deadline.fire();
  await settle();
  assert.equal(catchUp.inProgress(), 0);
  assert.equal(catchUp.counters.incomplete, 1);
  assert.match(host.logs.at(-1) ?? '', /^catch-up from the other replicas did not complete in time: /);
  assert.deepEqual(host.resubmitted, ['3:set x']);
  // Rounds that end in time cancel their deadline.
  servedByZeroAndBack(host, catchUp);
  host.handovers.splice(0)[0]!.finish('drained');
  await settle();
  host.rounds.at(-1)!.finish(true);
  await settle();
  assert.equal(catchUp.inProgress(), 0);
  assert.equal(host.timers.at(-1)!.cancelled, true);
});

test('a catch-up from a replica that hands the fragment over ends once its handoff pulled its copy here whole', async () => {
  const host = new Host();
  const catchUp = new FailoverCatchUp(host);
  host.first = [0, 0, 2, 0];
  catchUp.check();
  // Member 0 hands fragment 3 over (the table put this node first), and its handoff has this node
  // pull its copy whole: member 0 drops its copy once that ends, so the catch-up's own round
  // against it never would.
  host.first = [0, 0, 2, SELF];
  catchUp.check();
  send(catchUp, 3, 'set k');
  host.handovers.splice(0)[0]!.finish('drained');
  await settle();
  assert.deepEqual(
    host.rounds.map((r) => [r.fragment, r.member]),
    [[3, 0]],
  );
  catchUp.absorbed(3, 2); // another member's pull says nothing of what member 0 took
  await settle();
  assert.equal(catchUp.inProgress(), 1);
  catchUp.absorbed(3, 0);
  await settle();
  assert.equal(catchUp.inProgress(), 0, 'served once the pull ended, the round still running');
  assert.deepEqual(host.resubmitted, ['3:set k']);
  assert.equal(catchUp.counters.absorbed, 1);
  assert.equal(catchUp.counters.incomplete, 0);
  assert.match(host.logs.at(-1) ?? '', /^caught up: .*"from":"n0".*"absorbed":true/);
  assert.equal(host.timers.at(-1)!.cancelled, true);
  // The pull may end before the handover answers: the catch-up ends at once, and no round follows.
  host.rounds.splice(0);
  servedByZeroAndBack(host, catchUp);
  assert.equal(catchUp.inProgress(), 1, 'a pull from before member 0 served again does not count');
  catchUp.absorbed(3, 0);
  await settle();
  assert.equal(catchUp.inProgress(), 0);
  host.handovers.splice(0)[0]!.finish('drained');
  await settle();
  assert.equal(host.rounds.length, 0, 'no round once the catch-up ended');
  assert.equal(catchUp.counters.absorbed, 2);
  // Pulled whole while no catch-up ran (the serving came here before the pull ended, as the
  // node looked at its table late): the catch-up that starts then is complete at once.
  host.first = [0, 0, 2, 0];
  catchUp.check();
  catchUp.absorbed(3, 0);
  host.first = [0, 0, 2, SELF];
  catchUp.check();
  await settle();
  assert.equal(catchUp.inProgress(), 0);
  assert.equal(catchUp.counters.absorbed, 3);
});

test('a closing node starts no catch-up, and one its closing cuts short is not reported as serving an incomplete copy', async () => {
  const host = new Host();
  const catchUp = new FailoverCatchUp(host);
  catchUp.check(); // fragment 3: a catch-up against members 0 and 2
  assert.equal(host.rounds.length, 2);
  catchUp.close();
  // Its peer links closing: member 0 no longer answers, fragments 0 and 1 route here.
  host.up.delete(0);
  host.first = [SELF, SELF, 2, SELF];
  catchUp.check();
  assert.equal(host.rounds.length, 2, 'no new round for fragments 0 and 1');
  assert.equal(catchUp.link(0), undefined);
  for (const round of host.rounds.splice(0)) round.finish(false);
  await settle();
  assert.equal(catchUp.inProgress(), 0);
  assert.equal(host.logs.length, 1);
  assert.match(host.logs[0], /^catch-up cut short: the node is closing /);
  assert.match(host.logs[0], /"complete":false/);
});
