// The latency histogram behind INFO latencystats keeps values to under 1.6 %, as HdrHistogram with
// two significant figures does, and reads percentiles as Redis's do; a worker port's figures add to
// the main port's by name.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CommandStats, LatencyHistogram } from '../../src/main/resp/command-stats.js';
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

test("another counter's snapshot adds up by name: calls, time, refusals, failures, subcommands and latencies", () => {
  const names = ['GET', 'SET', 'CLIENT'];
  const containers = new Set([2]);
  const main = new CommandStats(names, containers);
  const port = new CommandStats(names, containers);
  const draw = seededFractions(7);
  const all = new LatencyHistogram();
  for (let i = 0; i < 1000; i++) {
    const ms = draw() * 2;
    (i % 2 === 0 ? main : port).ran(1, ms);
    all.record(Math.round(ms * 1e6));
  }
  main.reject(0);
  port.fail(0);
  port.ran(0, 0.01);
  // A subcommand the main counter has not seen: `client|list`, known by name only.
  const list = port.statOf(2, {
    argc: 2,
    arg: (i: number) => Buffer.from(i === 0 ? 'CLIENT' : 'LIST'),
  } as never);
  port.ran(list, 0.02);
  const total = main.plus([port.snapshot()]);
  const rows = new Map(total.commandRows());
  assert.match(rows.get('cmdstat_set')!, /^calls=1000,usec=\d+,/);
  assert.match(
    rows.get('cmdstat_get')!,
    /^calls=1,usec=10,usec_per_call=10\.00,rejected_calls=1,failed_calls=1$/,
  );
  assert.match(rows.get('cmdstat_client|list')!, /^calls=1,usec=20,/);
  const latency = new Map(total.latencyRows()).get('latency_percentiles_usec_set')!;
  const expected = [50, 99, 99.9].map((p) => `p${p}=${(all.valueAt(p) / 1000).toFixed(3)}`).join(',');
  assert.equal(latency, expected, 'the merged histogram reads as one that recorded every call');
  // The counters added from are unchanged.
  assert.match(new Map(main.commandRows()).get('cmdstat_set')!, /^calls=500,/);
});
