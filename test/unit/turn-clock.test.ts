import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TurnClock } from '../../src/main/turn-clock.js';

/** A wall clock that advances 5 ms at every read, counting them. */
function steppingClock(): { read: () => number; reads: () => number } {
  let now = 1_700_000_000_000;
  let reads = 0;
  return {
    read: () => {
      reads++;
      now += 5;
      return now;
    },
    reads: () => reads,
  };
}

test('calls in one synchronous run share one reading of the wall clock', () => {
  const wall = steppingClock();
  const clock = new TurnClock(wall.read);
  const first = clock.nowMs();
  for (let i = 0; i < 100; i++) assert.equal(clock.nowMs(), first);
  assert.equal(wall.reads(), 1);
});

test('the reading is dropped at the next microtask checkpoint, so a later run reads afresh', async () => {
  const wall = steppingClock();
  const clock = new TurnClock(wall.read);
  const first = clock.nowMs();
  await Promise.resolve();
  const second = clock.nowMs();
  assert.equal(second, first + 5);
  assert.equal(clock.nowMs(), second);
  assert.equal(wall.reads(), 2);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(clock.nowMs(), second + 5);
  assert.equal(wall.reads(), 3);
});

test('the default clock is the wall clock', () => {
  const before = Date.now();
  const now = new TurnClock().nowMs();
  assert.ok(now >= before && now <= Date.now(), `${now} is not between ${before} and now`);
});
