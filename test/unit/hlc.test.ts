// Hybrid logical clock (spec §2.3).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HybridLogicalClock, sharedClockCell } from '../../src/core/hlc.js';

const stamp = (c: HybridLogicalClock) => [c.wallMs, c.logical];

test('follows the wall clock when it advances', () => {
  const c = new HybridLogicalClock();
  c.tick(1000);
  assert.deepEqual(stamp(c), [1000, 0]);
  c.tick(1005);
  assert.deepEqual(stamp(c), [1005, 0]);
});

test('a burst within one millisecond advances the logical counter', () => {
  const c = new HybridLogicalClock();
  for (let i = 0; i < 5; i++) c.tick(1000);
  assert.deepEqual(stamp(c), [1000, 4]);
});

test('stays strictly monotonic when the wall clock moves backwards', () => {
  const c = new HybridLogicalClock();
  c.tick(5000);
  c.tick(4000);
  assert.deepEqual(stamp(c), [5000, 1]);
  c.tick(4999);
  assert.deepEqual(stamp(c), [5000, 2]);
  c.tick(5001);
  assert.deepEqual(stamp(c), [5001, 0]);
});

test('logical overflow borrows the next millisecond', () => {
  const c = new HybridLogicalClock();
  c.tick(1000);
  for (let i = 0; i < 0xffff; i++) c.tick(1000);
  assert.deepEqual(stamp(c), [1000, 0xffff]);
  c.tick(1000);
  assert.deepEqual(stamp(c), [1001, 0]);
  c.tick(1001);
  assert.deepEqual(stamp(c), [1001, 1]);
});

test('every tick is greater than the previous (many random clocks)', () => {
  const c = new HybridLogicalClock();
  let prev = [0, 0];
  let wall = 1_000_000;
  for (let i = 0; i < 20_000; i++) {
    wall += Math.floor(Math.random() * 7) - 3;
    c.tick(wall);
    const cur = stamp(c);
    assert.ok(cur[0] > prev[0] || (cur[0] === prev[0] && cur[1] > prev[1]), `tick ${i}`);
    prev = cur;
  }
});

test('observe moves the clock past a remote timestamp', () => {
  const c = new HybridLogicalClock();
  c.tick(1000);
  assert.equal(c.observe(1500, 7, 1000), true);
  c.tick(1000);
  assert.deepEqual(stamp(c), [1500, 8]);
});

test('observe of an older timestamp changes nothing', () => {
  const c = new HybridLogicalClock();
  c.tick(2000);
  assert.equal(c.observe(1000, 99, 2000), true);
  assert.deepEqual(stamp(c), [2000, 0]);
});

test('observe rejects a timestamp more than maxClockSkew ahead and never stores it', () => {
  const c = new HybridLogicalClock(5 * 60_000);
  c.tick(1000);
  assert.equal(c.observe(1000 + 5 * 60_000 + 1, 0, 1000), false);
  assert.deepEqual(stamp(c), [1000, 0]);
  c.tick(1000);
  assert.deepEqual(stamp(c), [1000, 1]);
  // Exactly at the bound is accepted.
  assert.equal(c.observe(1000 + 5 * 60_000, 0, 1000), true);
  assert.deepEqual(stamp(c), [301_000, 0]);
});

test('a clock seeded from a stored millisecond ahead of the wall clock issues no stamp within it again', () => {
  // Before a restart the node followed a faster peer: its clock ran at the peer's 5 000 while its
  // own wall clock read 4 980, and it stamped 5000.1, 5000.2, … Only 5 000 is stored.
  const before = new HybridLogicalClock();
  before.observe(5000, 0, 4980);
  const issued: Array<[number, number]> = [];
  for (let i = 0; i < 3; i++) {
    before.tick(4980);
    issued.push([before.wallMs, before.logical]);
  }
  const after = new HybridLogicalClock();
  assert.equal(after.observeWallMs(5000, 4990), true);
  after.tick(4990);
  for (const [wallMs, logical] of issued) {
    assert.ok(
      after.wallMs > wallMs || (after.wallMs === wallMs && after.logical > logical),
      `${after.wallMs}.${after.logical} after ${wallMs}.${logical}`,
    );
  }
  assert.deepEqual([after.wallMs, after.logical], [5001, 0]);
});

test('observeWallMs refuses a millisecond more than maxClockSkew ahead, as observe does', () => {
  const clock = new HybridLogicalClock(1000);
  assert.equal(clock.observeWallMs(10_000, 8_000), false);
  assert.deepEqual([clock.wallMs, clock.logical], [0, 0]);
});

test("a tick after observing a peer frame's newest millisecond orders after every stamp in it", () => {
  // The frame's newest record is 7000.9; the frame says 7000 only. A client write right after it
  // must not lose to it.
  const clock = new HybridLogicalClock();
  clock.observeWallMs(7000, 6990);
  clock.tick(6990);
  assert.deepEqual([clock.wallMs, clock.logical], [7001, 0]);
});

test('clocks sharing one cell issue one strictly increasing sequence between them', () => {
  const cell = sharedClockCell();
  const a = new HybridLogicalClock(1000, cell);
  const b = new HybridLogicalClock(1000, cell);
  a.tick(1000);
  assert.deepEqual(stamp(a), [1000, 0]);
  b.tick(1000);
  assert.deepEqual(stamp(b), [1000, 1]);
  // b observed a stamp ahead of both wall clocks: a's next tick orders after it.
  assert.equal(b.observe(1200, 7, 1000), true);
  a.tick(1001);
  assert.deepEqual(stamp(a), [1200, 8]);
  // A refused observation changes nothing, for either clock.
  assert.equal(b.observe(9000, 0, 1000), false);
  b.tick(1001);
  assert.deepEqual(stamp(b), [1200, 9]);
});
