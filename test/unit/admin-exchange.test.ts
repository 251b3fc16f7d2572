// Admin requests between nodes (src/main/mesh/admin-exchange.ts): real exchanges on a test clock,
// joined by a test link that delivers envelopes when the test says, so what is checked is the code
// the node runs — matching replies to pending requests by id, whatever their order; late, duplicate,
// unknown and misdirected replies dropped and counted; deadlines; a lost connection; the bounds on
// requests in flight and served; malformed and oversized envelopes refused with a reason.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ADMIN_RESULT_BYTES_MAX } from '../../src/core/limits.js';
import { AdminExchange, type AdminExchangeLimits } from '../../src/main/mesh/admin-exchange.js';
import { type AdminAnswer, type AdminRequest, encodeAdminReply } from '../../src/threads/admin-wire.js';
import { SimClock } from '../sim/sim-world.js';

/** A node's clock: its own time, moved on by the test, and the exchange's one timer. */
class TestClock extends SimClock {
  private readonly time: { nowMs: number };

  constructor(time = { nowMs: 1_000 }) {
    super(() => time.nowMs);
    this.time = time;
  }

  /** Moves time on by `ms`, firing the timer once it is due. */
  advance(ms: number): void {
    this.time.nowMs += ms;
    this.fireDue();
  }
}

/** Nodes joined by connections that hold envelopes until `deliver`. */
class TestLink {
  readonly nodes = new Map<string, AdminExchange>();
  readonly clocks = new Map<string, TestClock>();
  readonly connected = new Set<string>();
  readonly queue: Array<{ from: string; to: string; envelope: Uint8Array }> = [];
  readonly dropped: Array<{ at: string; from: string; reason: string }> = [];

  add(id: string, limits?: AdminExchangeLimits): AdminExchange {
    const clock = new TestClock();
    const exchange = new AdminExchange(
      id,
      {
        sendEnvelope: (to, envelope) => {
          if (!this.connected.has(to)) return false;
          this.queue.push({ from: id, to, envelope });
          return true;
        },
      },
      clock,
      limits,
    );
    this.nodes.set(id, exchange);
    this.clocks.set(id, clock);
    this.connected.add(id);
    return exchange;
  }

  /** Hands every queued envelope to its receiver, in order (and what that sends, until quiet). */
  async deliver(): Promise<void> {
    for (let round = 0; round < 10; round++) {
      // Served requests answer after their handler's promise settles.
      await new Promise((resolve) => setImmediate(resolve));
      if (this.queue.length === 0) return;
      for (const { from, to, envelope } of this.queue.splice(0)) this.receive(from, to, envelope);
    }
  }

  receive(from: string, to: string, envelope: Uint8Array): void {
    const reason = this.nodes.get(to)!.onEnvelope(from, envelope);
    if (reason !== undefined) this.dropped.push({ at: to, from, reason });
  }
}

const METRICS: AdminRequest = { kind: 'metrics' };
const ok = (result: Record<string, unknown>): AdminAnswer => ({ status: 'Ok', message: 'ok', result });

/** A handler whose answers the test gives, in any order. */
function heldHandler(
  exchange: AdminExchange,
): Array<{ request: AdminRequest; answer: (a: AdminAnswer) => void }> {
  const held: Array<{ request: AdminRequest; answer: (a: AdminAnswer) => void }> = [];
  exchange.handler = (_from, request) => new Promise((resolve) => held.push({ request, answer: resolve }));
  return held;
}

/** What `promise` settled to, read by the test (undefined while it is pending). */
function watch<T>(promise: Promise<T>): () => T | undefined {
  let settled: T | undefined;
  promise.then((v) => {
    settled = v;
  });
  return () => settled;
}

describe('admin exchange', () => {
  test('replies in another order than the requests each answer their own request', async () => {
    const link = new TestLink();
    const a = link.add('a');
    const b = link.add('b');
    const held = heldHandler(b);
    const asked = [0, 1, 2].map((n) =>
      a.ask('b', { kind: 'change', path: '/cluster/plan', body: { n } }, 5_000),
    );
    await link.deliver();
    assert.equal(held.length, 3);
    for (const i of [2, 0, 1]) {
      const req = held[i].request;
      held[i].answer(ok({ n: req.kind === 'change' ? req.body.n : -1 }));
    }
    await link.deliver();
    const answers = await Promise.all(asked);
    assert.deepEqual(
      answers.map((x) => x.result.n),
      [0, 1, 2],
    );
    assert.equal(a.pendingCount, 0);
    assert.equal(a.counters.answered, 3);
    assert.equal(b.counters.served, 3);
  });

  test('a duplicate reply, one with an unknown id and one from another peer are dropped and counted, the connection kept', async () => {
    const link = new TestLink();
    const a = link.add('a');
    link.add('b');
    link.add('c');
    const first = watch(a.ask('b', METRICS, 5_000));
    const second = watch(a.ask('b', METRICS, 5_000));
    link.queue.length = 0; // b never sees them: the test answers for it
    // Ids are 1 and 2. c answering b's request does not settle it.
    link.receive('c', 'a', encodeAdminReply(1, ok({ from: 'c' })));
    link.receive('b', 'a', encodeAdminReply(99, ok({})));
    await link.deliver();
    assert.equal(first(), undefined);
    assert.equal(a.counters.unmatchedReplies, 2);
    link.receive('b', 'a', encodeAdminReply(1, ok({ from: 'b' })));
    link.receive('b', 'a', encodeAdminReply(1, ok({ from: 'b again' })));
    await link.deliver();
    assert.deepEqual(first()?.result, { from: 'b' });
    assert.equal(second(), undefined);
    assert.equal(a.counters.unmatchedReplies, 3);
    assert.equal(a.pendingCount, 1);
    assert.deepEqual(link.dropped, []);
  });

  test('past its deadline a request is answered DeadlineExceeded, and its late reply dropped', async () => {
    const link = new TestLink();
    const a = link.add('a');
    const b = link.add('b');
    const held = heldHandler(b);
    const early = watch(a.ask('b', METRICS, 1_000));
    link.clocks.get('a')!.advance(400);
    const later = watch(a.ask('b', METRICS, 1_000));
    await link.deliver();
    link.clocks.get('a')!.advance(599);
    await link.deliver();
    assert.equal(early(), undefined, 'not before its deadline');
    link.clocks.get('a')!.advance(1);
    await link.deliver();
    assert.deepEqual(early(), {
      status: 'DeadlineExceeded',
      message: 'b did not answer within 1000 ms',
      result: {},
    });
    assert.equal(later(), undefined, 'the second has its own deadline');
    held[0].answer(ok({ late: true }));
    await link.deliver();
    assert.equal(a.counters.unmatchedReplies, 1);
    link.clocks.get('a')!.advance(400);
    await link.deliver();
    assert.equal(later()?.status, 'DeadlineExceeded');
    assert.equal(a.counters.expired, 2);
  });

  test('a lost connection answers Failed what that peer was asked, and only that; a peer not connected is Failed at once', async () => {
    const link = new TestLink();
    const a = link.add('a');
    heldHandler(link.add('b'));
    heldHandler(link.add('c'));
    const toB = [watch(a.ask('b', METRICS, 5_000)), watch(a.ask('b', METRICS, 5_000))];
    const toC = watch(a.ask('c', METRICS, 5_000));
    await link.deliver();
    a.connectionLost('b');
    await link.deliver();
    for (const w of toB) {
      assert.deepEqual(w(), {
        status: 'Failed',
        message: 'the connection to b was lost before it answered',
        result: {},
      });
    }
    assert.equal(toC(), undefined);
    assert.equal(a.counters.lost, 2);

    link.connected.delete('c');
    assert.deepEqual(await a.ask('c', METRICS, 5_000), {
      status: 'Failed',
      message: 'node a is not connected to c',
      result: {},
    });
    a.close();
    await link.deliver();
    assert.equal(toC()?.status, 'Failed');
    assert.match(toC()!.message, /shutting down/);
  });

  test('requests in flight and requests served are bounded; a failing or missing handler answers Failed', async () => {
    const link = new TestLink();
    const a = link.add('a', { pendingMax: 2, servingMax: 1 });
    const b = link.add('b', { pendingMax: 2, servingMax: 1 });
    const held = heldHandler(b);
    const asked = [watch(a.ask('b', METRICS, 5_000)), watch(a.ask('b', METRICS, 5_000))];
    const third = await a.ask('b', METRICS, 5_000);
    assert.equal(third.status, 'Failed');
    assert.match(third.message, /2 admin requests to peers are in flight/);
    await link.deliver();
    assert.equal(held.length, 1, 'one served at once');
    assert.equal(asked[1]()?.status, 'Failed');
    assert.match(asked[1]()!.message, /node b is serving 1 admin requests, the most at once/);
    assert.equal(b.counters.refusedBusy, 1);
    held[0].answer(ok({ done: true }));
    await link.deliver();
    assert.deepEqual(asked[0]()?.result, { done: true });

    b.handler = () => Promise.reject(new Error('no health'));
    assert.deepEqual(await settle(link, a.ask('b', METRICS, 5_000)), {
      status: 'Failed',
      message: 'node b failed to serve it: no health',
      result: {},
    });
    b.handler = undefined;
    const unserved = await settle(link, a.ask('b', METRICS, 5_000));
    assert.equal(unserved.status, 'Failed');
    assert.equal(unserved.message, 'node b is not serving admin requests yet');
  });

  test('an answer too large for the wire arrives as Failed; a malformed or oversized envelope is refused with a reason', async () => {
    const link = new TestLink();
    const a = link.add('a');
    const b = link.add('b');
    b.handler = async () => ok({ pad: 'x'.repeat(ADMIN_RESULT_BYTES_MAX) });
    const answer = await settle(link, a.ask('b', METRICS, 5_000));
    assert.equal(answer.status, 'Failed');
    assert.match(answer.message, /more than ADMIN_RESULT_BYTES_MAX/);

    assert.match(String(a.onEnvelope('b', Buffer.from([0xd2, 0x01, 0x09]))), /^malformed admin message: /);
    const oversized = Buffer.alloc(ADMIN_RESULT_BYTES_MAX + 1024 * 1024);
    assert.match(String(a.onEnvelope('b', oversized)), /an admin message may take/);
    assert.equal(a.pendingCount, 0);
  });
});

/** Delivers until `promise` settles. */
async function settle(link: TestLink, promise: Promise<AdminAnswer>): Promise<AdminAnswer> {
  await link.deliver();
  return promise;
}
