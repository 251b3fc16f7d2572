// waitForReplicas (src/main/replica-waiter.ts): one ask per fragment written, the fewest replicas
// any reached; a fragment whose writes no replica can confirm any more counts as nothing reached.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Durability, Priority, Reply } from '../../src/core/ops.js';
import { AckLevel } from '../../src/core/replication-sender.js';
import { type ReplicaWaitSubmitter, waitForReplicas } from '../../src/main/replica-waiter.js';
import type { ResultHandler } from '../../src/main/worker-link.js';
import { RESULT_HEADER_BYTES, writeResultHeader } from '../../src/threads/op-codec.js';

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
