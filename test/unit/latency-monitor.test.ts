// The latency monitor behind LATENCY: samples at or past the threshold only, one per second (the
// highest), a bounded history, the highest ever, resets, and Redis's replies.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LATENCY_HISTORY_SAMPLES } from '../../src/core/limits.js';
import { RespWriter } from '../../src/core/resp-writer.js';
import { LatencyMonitor } from '../../src/main/resp/latency-monitor.js';

const written = (write: (w: RespWriter) => void): string => {
  const w = new RespWriter(2);
  write(w);
  return w.bytes().toString('latin1');
};

test('a threshold of 0 records nothing, and the doctor says the monitor is off and how to turn it on', () => {
  const m = new LatencyMonitor(0);
  m.record('command', 500, 1000);
  assert.equal(
    written((w) => m.writeLatest(w)),
    '*0\r\n',
  );
  assert.match(
    m.doctor(),
    /^I'm sorry, Dave, I can't do that\. Latency monitoring is disabled .*--latency-monitor-threshold/,
  );
  assert.match(new LatencyMonitor(5).doctor(), /^Dave, no latency spike was observed/);
});

test('samples below the threshold are left out; one sample a second keeps the highest', () => {
  const m = new LatencyMonitor(10);
  m.record('command', 9, 1000);
  m.record('command', 12, 1000);
  m.record('command', 30, 1000);
  m.record('command', 15, 1000);
  m.record('command', 11, 1001);
  assert.equal(
    written((w) => m.writeHistory(w, 'command')),
    '*2\r\n*2\r\n:1000\r\n:30\r\n*2\r\n:1001\r\n:11\r\n',
  );
  // Latest: the last sample's time and latency, then the highest ever.
  assert.equal(
    written((w) => m.writeLatest(w)),
    '*1\r\n*4\r\n$7\r\ncommand\r\n:1001\r\n:11\r\n:30\r\n',
  );
  assert.equal(
    written((w) => m.writeHistory(w, 'fast-command')),
    '*0\r\n',
  );
  assert.match(m.doctor(), /command: 2 latency spikes \(average 21ms, worst all time 30ms\)/);
});

test('the history keeps the latest samples only', () => {
  const m = new LatencyMonitor(1);
  for (let s = 0; s < LATENCY_HISTORY_SAMPLES + 5; s++) m.record('command', 1 + s, 1000 + s);
  const history = written((w) => m.writeHistory(w, 'command'));
  assert.ok(history.startsWith(`*${LATENCY_HISTORY_SAMPLES}\r\n*2\r\n:1005\r\n`), history.slice(0, 40));
});

test('reset forgets the events named, or all, and counts them', () => {
  const m = new LatencyMonitor(1);
  m.record('command', 5, 1);
  m.record('fast-command', 5, 1);
  assert.equal(m.reset(['command', 'nope']), 1);
  assert.equal(m.reset([]), 1);
  assert.equal(
    written((w) => m.writeLatest(w)),
    '*0\r\n',
  );
});
