// The background pool (piscina) that serves pattern scans over lmdb: bounded (a full queue answers
// Backpressure) and rate-limited like the Background queue (DESIGN.md "piscina").
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { test } from 'node:test';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import { POOL_QUEUE_TASKS_MAX, POOL_THREAD_NICE } from '../../src/core/limits.js';
import { niceOf } from '../unit/fixtures/thread-nice.js';
import { withNode } from './helpers.js';

test('pattern scans past the pool queue bound answer Backpressure; the rest complete', async () => {
  await withNode('pool-bound', { store: 'lmdb', workers: 1, fragments: 1, poolThreads: 1 }, async (node) => {
    await node.putMany(Array.from({ length: 300 }, (_, i) => [`item:${i}`, 'v'] as const));
    const scans = Array.from({ length: POOL_QUEUE_TASKS_MAX * 2 }, () =>
      node.scan({ match: '*:1?', limit: 100 }),
    );
    const results = await Promise.allSettled(scans);
    const shed = results.filter(
      (r) =>
        r.status === 'rejected' &&
        r.reason instanceof TesseraError &&
        r.reason.kind === ErrorKind.Backpressure,
    );
    const done = results.filter((r) => r.status === 'fulfilled');
    assert.equal(shed.length + done.length, results.length, 'no other failures');
    assert.ok(shed.length > 0, 'some scans were shed');
    assert.ok(done.length >= POOL_QUEUE_TASKS_MAX, 'a full queue still completes');
    for (const r of done) {
      if (r.status === 'fulfilled') assert.equal(r.value.entries.length, 10, 'item:10 … item:19');
    }
  });
});

test('pool tasks start no faster than poolTasksPerSec', async () => {
  await withNode(
    'pool-rate',
    { store: 'lmdb', workers: 1, fragments: 1, poolTasksPerSec: 4 },
    async (node) => {
      await node.put('a:1', 'v');
      const started = Date.now();
      // Burst of one token at 4/s: the fourth task cannot start before ~750 ms.
      await Promise.all(Array.from({ length: 4 }, () => node.scan({ match: 'a:*' })));
      assert.ok(Date.now() - started >= 700, `4 tasks took ${Date.now() - started} ms`);
    },
  );
});

/** The nice value of each of this process's threads, by thread id (field 19 of its /proc stat line). */
function threadNices(): Map<number, number> {
  const nices = new Map<number, number>();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      nices.set(Number(tid), niceOf(`/proc/self/task/${tid}/stat`));
    } catch {
      // the thread ended meanwhile
    }
  }
  return nices;
}

test('the pool’s threads run at POOL_THREAD_NICE; the threads serving clients keep their priority', {
  skip: !existsSync('/proc/self/task'),
}, async () => {
  const before = threadNices();
  await withNode('pool-nice', { store: 'lmdb', workers: 1, fragments: 1, poolThreads: 1 }, async (node) => {
    await node.put('a:1', 'v');
    await node.scan({ match: 'a:*' });
    const niced = [...threadNices()].filter(([tid, nice]) => !before.has(tid) && nice === POOL_THREAD_NICE);
    assert.equal(niced.length, 1, 'the one pool thread');
    assert.equal(threadNices().get(process.pid), before.get(process.pid), 'the main thread is unchanged');
    const others = [...threadNices()].filter(([tid, nice]) => !before.has(tid) && nice !== POOL_THREAD_NICE);
    assert.ok(others.length > 0, 'the worker and its threads started too');
    for (const [tid, nice] of others) assert.equal(nice, before.get(process.pid), `thread ${tid}`);
  });
});
