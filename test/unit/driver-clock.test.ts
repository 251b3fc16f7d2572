// SystemClock (src/threads/driver-clock.ts): the drivers' one timer fires when due, and never keeps
// the process alive by itself — a driver left with a step due (a placement retry, a ready resent)
// must not stop a closed node from exiting.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SystemClock } from '../../src/threads/driver-clock.js';

const timeouts = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

test('the timer fires when due, and a later one replaces it', async () => {
  const clock = new SystemClock();
  const fired: string[] = [];
  // The node's sockets keep it alive while it runs; here a ref'd timer does, until the wait ends.
  const alive = setInterval(() => {}, 1_000);
  clock.setTimer(clock.nowMs() + 60_000, () => fired.push('replaced'));
  await new Promise<void>((resolve) =>
    clock.setTimer(clock.nowMs() + 5, () => {
      fired.push('due');
      resolve();
    }),
  );
  clearInterval(alive);
  assert.deepEqual(fired, ['due']);
  clock.clearTimer();
});

test('a pending timer does not keep the process alive', () => {
  const before = timeouts();
  const clock = new SystemClock();
  clock.setTimer(clock.nowMs() + 60_000, () => assert.fail('cleared before it was due'));
  assert.equal(timeouts(), before);
  clock.clearTimer();
});
