// waitForReplicas (src/main/replica-waiter.ts): one ask per fragment written, the fewest replicas
// any reached; a fragment whose writes no replica can confirm any more counts as nothing reached.
// GatedWrite: a write that carries its first ask; fences ask on only after a whole ask fell short.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FragmentSet } from '../../src/core/fragment-set.js';
import { REPLICA_WAIT_ROUND_MS_MAX } from '../../src/core/limits.js';
import { Durability, Priority, Reply } from '../../src/core/ops.js';
import { AckLevel } from '../../src/core/replication-sender.js';
import {
  forgetAfterWait,
  GatedWrite,
  gatedWriteHandler,
  type ReplicaWaitSubmitter,
  splitWritten,
  waitForReplicas,
} from '../../src/main/replica-waiter.js';
import type { ResultHandler } from '../../src/main/worker-link.js';
import { RESULT_HEADER_BYTES, writeDetail, writeResultHeader } from '../../src/threads/op-codec.js';

/** Answers each ask at once: `reached[fragment]` replicas, the fence reached. */
function submitter(reached: Record<number, number>, asked: number[]): ReplicaWaitSubmitter {
  return {
    turnClock: { nowMs: () => 1_000 },
    submitReplicaWait<T>(
      fragment: number,
      _p: unknown,
      _d: unknown,
      _pr: unknown,
      handler: ResultHandler<T>,
      token: T,
    ) {
      asked.push(fragment);
      const out = Buffer.alloc(RESULT_HEADER_BYTES);
      writeResultHeader(out, 0, Reply.FenceReached, reached[fragment] ?? 0, 0);
      queueMicrotask(() => handler.onResult(token, out, 0, out.length));
      return undefined;
    },
  };
}

const request = {
  replicas: 2,
  level: AckLevel.Store,
  durability: Durability.Memory,
  priority: Priority.Default,
  timeoutMs: 0,
  idleReached: 2,
};

test('the answer is the fewest replicas any fragment reached', async () => {
  const asked: number[] = [];
  const answer = await waitForReplicas(submitter({ 3: 2, 5: 1 }, asked), { ...request, fragments: [3, 5] });
  assert.deepEqual(asked, [3, 5]);
  assert.deepEqual(answer, { reached: 1, local: true });
});

test('a fragment that moved counts as nothing once; a write to it after the WAIT is asked about again', () => {
  // Fragments 1 and 2 written since serving stamp 5; 2's serving replica changed at 7; the WAIT starts at 8.
  const changedAt = (f: number) => (f === 2 ? 7 : 0);
  const written = new FragmentSet(8);
  written.add(1);
  written.add(2);
  const first = splitWritten(written.toArray(), 5, changedAt);
  assert.deepEqual(first, { fragments: [1], unconfirmable: [2] });
  // Not every replica confirmed (2 counted as none): 1 stays tracked, 2 is forgotten.
  const since = forgetAfterWait(written, first.unconfirmable, false, 8);
  assert.deepEqual(written.toArray(), [1]);
  // The connection writes 2 again (1 still tracked, so its stamp stays): 2 is confirmable now.
  written.add(2);
  assert.deepEqual(splitWritten(written.toArray(), since, changedAt), {
    fragments: [1, 2],
    unconfirmable: [],
  });
  // A WAIT that confirmed every replica forgets everything.
  forgetAfterWait(written, [], true, 9);
  assert.equal(written.size, 0);
});

test('an unconfirmable fragment is not asked about and counts as nothing reached', async () => {
  const asked: number[] = [];
  const answer = await waitForReplicas(submitter({ 3: 2 }, asked), {
    ...request,
    fragments: [3],
    unconfirmable: 1,
  });
  assert.deepEqual(asked, [3]);
  assert.deepEqual(answer, { reached: 0, local: false });
  const none = await waitForReplicas(submitter({}, asked), { ...request, fragments: [], unconfirmable: 2 });
  assert.deepEqual(none, { reached: 0, local: false });
  assert.deepEqual(asked, [3]);
});

/** A write's result as its serving replica answers it: `status`, with `reached` replicas. */
function writeResult(status: number, reached: number): Buffer {
  const out = Buffer.alloc(RESULT_HEADER_BYTES);
  writeResultHeader(out, 0, status, writeDetail(false, reached), 0);
  return out;
}

/** Records what reaches a gated write's own handler. */
function outcome(): { handler: ResultHandler<null>; results: Buffer[]; errors: Error[] } {
  const results: Buffer[] = [];
  const errors: Error[] = [];
  return {
    results,
    errors,
    handler: {
      onResult: (_t, buf, at, length) => results.push(Buffer.from(buf.subarray(at, at + length))),
      onFailure: (_t, error) => errors.push(error),
    },
  };
}

describe('a write that waits for its replicas', () => {
  const gated = { replicas: 2, level: AckLevel.Store, priority: Priority.Default, timeoutMs: 5_000 };
  let nowMs = 1_000;
  const asks: Array<{ fragment: number; timeoutMs: number }> = [];
  /** Answers each fence at once with `fenceReached` replicas. */
  let fenceReached = 0;
  const fences: ReplicaWaitSubmitter = {
    turnClock: { nowMs: () => nowMs },
    submitReplicaWait<T>(
      fragment: number,
      params: { timeoutMs: number },
      _d: unknown,
      _pr: unknown,
      handler: ResultHandler<T>,
      token: T,
    ) {
      asks.push({ fragment, timeoutMs: params.timeoutMs });
      const out = Buffer.alloc(RESULT_HEADER_BYTES);
      writeResultHeader(out, 0, Reply.FenceReached, fenceReached, 0);
      queueMicrotask(() => handler.onResult(token, out, 0, out.length));
      return undefined;
    },
  };
  function start(): { gate: GatedWrite<null>; seen: ReturnType<typeof outcome> } {
    nowMs = 1_000;
    asks.length = 0;
    const seen = outcome();
    const gate = new GatedWrite(fences, seen.handler, null, gated);
    gate.fragment = 7;
    return { gate, seen };
  }

  test('carries its first ask, at most one round long, and is answered as written once reached', () => {
    const { gate, seen } = start();
    assert.deepEqual(gate.params, {
      replicas: 2,
      level: AckLevel.Store,
      timeoutMs: REPLICA_WAIT_ROUND_MS_MAX,
    });
    nowMs += 3;
    gatedWriteHandler.onResult(gate, writeResult(Reply.Applied, 2), 0, RESULT_HEADER_BYTES);
    assert.deepEqual(seen.results, [writeResult(Reply.Applied, 2)]);
    assert.deepEqual(seen.errors, []);
    assert.deepEqual(asks, [], 'no fence');
  });

  test('a write that wrote nothing answers as itself; a failure stands', () => {
    const { gate, seen } = start();
    gate.written(writeResult(Reply.NotApplied, 0), 0, RESULT_HEADER_BYTES);
    assert.deepEqual(seen.results, [writeResult(Reply.NotApplied, 0)]);
    const failing = start();
    gatedWriteHandler.onFailure(failing.gate, new Error('peer gone') as never);
    assert.equal(failing.seen.errors[0]?.message, 'peer gone');
  });

  test('short of its replicas before its ask was up: NOREPLICAS, with the count reached', () => {
    const { gate, seen } = start();
    nowMs += 10;
    gate.written(writeResult(Reply.Applied, 1), 0, RESULT_HEADER_BYTES);
    assert.deepEqual(seen.results, []);
    assert.match(
      seen.errors[0]?.message ?? '',
      /not yet replicated: 1 of 2 replicas acknowledged it within 5000 ms/,
    );
    assert.deepEqual(asks, []);
  });

  test('short after its whole ask, with time left: fences ask on for the rest, and their answer decides', async () => {
    const { gate, seen } = start();
    nowMs += REPLICA_WAIT_ROUND_MS_MAX;
    fenceReached = 2;
    gate.written(writeResult(Reply.Applied, 1), 0, RESULT_HEADER_BYTES);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(asks, [{ fragment: 7, timeoutMs: REPLICA_WAIT_ROUND_MS_MAX }]);
    assert.deepEqual(seen.results, [writeResult(Reply.Applied, 1)], 'the write, answered as it came');
    const late = start();
    nowMs += 4_000;
    fenceReached = 1;
    late.gate.written(writeResult(Reply.Applied, 0), 0, RESULT_HEADER_BYTES);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(asks, [{ fragment: 7, timeoutMs: 1_000 }], 'what is left of the timeout');
    assert.match(late.seen.errors[0]?.message ?? '', /1 of 2 replicas/);
  });
});
