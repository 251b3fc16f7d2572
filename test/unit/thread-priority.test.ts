// A thread's nice value (src/native-bindings/thread-priority.ts): set for the calling thread alone.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { setThreadNice } from '../../src/native-bindings/thread-priority.js';
import { niceOf } from './fixtures/thread-nice.js';

test('a thread sets its own nice value, and the other threads keep theirs', {
  skip: !existsSync('/proc/thread-self'),
}, async () => {
  const before = niceOf();
  const moduleUrl = new URL('../../src/native-bindings/thread-priority.js', import.meta.url).href;
  const fixtureUrl = new URL('./fixtures/thread-nice.js', import.meta.url).href;
  const source = `import { parentPort } from 'node:worker_threads';
     const { setThreadNice } = await import(${JSON.stringify(moduleUrl)});
     const { niceOf } = await import(${JSON.stringify(fixtureUrl)});
     const refused = setThreadNice(${before + 5});
     parentPort.postMessage({ refused, nice: niceOf() });`;
  // A data: URL is loaded as an ES module.
  const worker = new Worker(new URL(`data:text/javascript,${encodeURIComponent(source)}`));
  const answer = await new Promise<{ refused: string | undefined; nice: number }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  await worker.terminate();
  assert.equal(answer.refused, undefined);
  assert.equal(answer.nice, before + 5);
  assert.equal(niceOf(), before, 'the main thread keeps its priority');
});

test('a nice value out of range is refused with the reason, the thread unchanged', {
  skip: !existsSync('/proc/thread-self'),
}, () => {
  const before = niceOf();
  assert.match(setThreadNice(1000) ?? '', /.+/);
  assert.equal(niceOf(), before);
});
