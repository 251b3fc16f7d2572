// The latency histogram behind INFO latencystats keeps values to under 1.6 %, as HdrHistogram with
// two significant figures does, and reads percentiles as Redis's do.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LatencyHistogram } from '../../src/main/resp/command-stats.js';
import { seededFractions } from './fixtures/xorshift32.js';

test('small values are kept exactly', () => {
  const h = new LatencyHistogram();
  for (const ns of [0, 1, 5, 100, 127]) h.record(ns);
  assert.equal(h.valueAt(0), 0);
  assert.equal(h.valueAt(50), 5);
  assert.equal(h.valueAt(100), 127);
});

test('a percentile is within 1.6 % above the exact one, over six decades', () => {
  const draw = seededFractions(42);
  const values: number[] = [];
  const h = new LatencyHistogram();
  for (let i = 0; i < 20_000; i++) {
    const ns = Math.floor(10 ** (2 + draw() * 6)); // 100 ns .. 100 ms
    values.push(ns);
    h.record(ns);
  }
  values.sort((a, b) => a - b);
  for (const p of [1, 50, 90, 99, 99.9, 100]) {
    const exact = values[Math.max(0, Math.ceil((p / 100) * values.length) - 1)];
    const reported = h.valueAt(p);
    assert.ok(reported >= exact, `p${p}: ${reported} below ${exact}`);
    assert.ok(reported <= exact * 1.016, `p${p}: ${reported} more than 1.6 % above ${exact}`);
  }
});

test('an empty histogram reads 0, and values past its range count at its top', () => {
  const h = new LatencyHistogram();
  assert.equal(h.valueAt(99), 0);
  h.record(10 * 2 ** 31);
  assert.ok(h.valueAt(50) >= 2 ** 30 && h.valueAt(50) < 2 ** 31);
});
