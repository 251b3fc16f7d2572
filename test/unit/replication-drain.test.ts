// A request to wait for the replication to drain is answered when the senders are drained — at
// once, or at the first check after — or as not drained at its deadline, at close, or when the one
// sender it waits for closes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DrainWaiters } from '../../src/workers/replication-drain.js';

function waiters(drainedAtFirst: boolean) {
  const state = { drained: drainedAtFirst };
  const answers: Array<[number, boolean]> = [];
  let onAnswer: (() => void) | undefined;
  const w = new DrainWaiters(
    () => state.drained,
    (reqId, drained) => {
      answers.push([reqId, drained]);
      onAnswer?.();
    },
  );
  const nextAnswer = () => new Promise<void>((resolve) => (onAnswer = resolve));
  return { w, state, answers, nextAnswer };
}

test('a request made while drained is answered at once', () => {
  const { w, answers } = waiters(true);
  w.add(1, 60_000);
  assert.deepEqual(answers, [[1, true]]);
});

test('waiting requests are answered at the first check that finds the senders drained', () => {
  const { w, state, answers } = waiters(false);
  w.add(1, 60_000);
  w.add(2, 60_000);
  w.check();
  assert.deepEqual(answers, [], 'not drained yet: nothing answered');
  state.drained = true;
  w.check();
  assert.deepEqual(answers, [
    [1, true],
    [2, true],
  ]);
  w.check();
  assert.equal(answers.length, 2, 'each request is answered once');
});

test('a request still waiting at its deadline is answered as not drained', async () => {
  const { w, answers, nextAnswer } = waiters(false);
  const answered = nextAnswer();
  w.add(7, 1);
  await answered;
  assert.deepEqual(answers, [[7, false]]);
});

test('close answers every waiting request as not drained', () => {
  const { w, answers } = waiters(false);
  w.add(1, 60_000);
  w.add(2, 60_000);
  w.close();
  assert.deepEqual(answers, [
    [1, false],
    [2, false],
  ]);
});

test('a request for one sender waits for it alone; a sender that closes is answered as not drained', () => {
  const { w, state, answers } = waiters(false);
  const one: { drained: boolean | undefined } = { drained: false };
  w.add(1, 60_000, () => one.drained);
  w.add(2, 60_000, () => one.drained);
  w.add(3, 60_000);
  state.drained = true;
  w.check();
  assert.deepEqual(answers, [[3, true]], 'the whole worker is drained, that sender is not');
  one.drained = true;
  w.add(4, 60_000, () => one.drained);
  assert.deepEqual(answers.at(-1), [4, true], 'drained already: answered at once');
  one.drained = undefined;
  w.check();
  assert.deepEqual(answers.slice(2), [
    [1, false],
    [2, false],
  ]);
  w.add(5, 60_000, () => one.drained);
  assert.deepEqual(answers.at(-1), [5, false], 'no such sender: answered at once');
});
