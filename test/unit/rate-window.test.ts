import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RATE_SAMPLE_INTERVAL_MS, RATE_SAMPLES, RateWindow } from '../../src/core/rate-window.js';

test('a steady counter reads as its rate once the window is full; before, the missing samples count as 0', () => {
  const w = new RateWindow(1000, 0);
  let total = 0;
  let now = 1000;
  // 50 per 100 ms = 500/s.
  for (let i = 1; i <= RATE_SAMPLES / 2; i++) w.sample((now += RATE_SAMPLE_INTERVAL_MS), (total += 50));
  assert.equal(w.perSecond(), 250);
  for (let i = 1; i <= RATE_SAMPLES; i++) w.sample((now += RATE_SAMPLE_INTERVAL_MS), (total += 50));
  assert.equal(w.perSecond(), 500);
});

test('old samples leave the window; uneven intervals are weighed by their length', () => {
  const w = new RateWindow(0, 0);
  let now = 0;
  let total = 0;
  for (let i = 0; i < RATE_SAMPLES; i++) w.sample((now += 100), (total += 100));
  assert.equal(w.perSecond(), 1000);
  // A quiet window replaces every busy sample.
  for (let i = 0; i < RATE_SAMPLES; i++) w.sample((now += 100), total);
  assert.equal(w.perSecond(), 0);
  // 30 in 300 ms is 100/s for that one sample.
  w.sample((now += 300), (total += 30));
  assert.equal(w.perSecond(), 100 / RATE_SAMPLES);
});

test('a clock that does not move records nothing; a counter going backwards is a bug', () => {
  const w = new RateWindow(500, 10);
  w.sample(500, 20);
  assert.equal(w.perSecond(), 0);
  w.sample(600, 30);
  assert.equal(w.perSecond(), 200 / RATE_SAMPLES);
  assert.throws(() => w.sample(700, 29), /went backwards/);
});
