// Named limits relate as documented; typed errors carry stable codes (spec §9.1).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ERROR_CODES,
  ErrorKind,
  expired,
  shuttingDown,
  superseded,
  TesseraError,
  truncateErrorMessage,
} from '../../src/core/errors.js';
import * as limits from '../../src/core/limits.js';
import { BoundedQueue, TokenBucket } from '../../src/core/op-queue.js';

test('ring capacity holds two maximal records and is a power of two', () => {
  for (const v of [1, limits.VALUE_BYTES_MAX_DEFAULT, limits.VALUE_BYTES_MAX_CEILING]) {
    const cap = limits.ringBytesFor(v);
    assert.equal(cap & (cap - 1), 0);
    // The ring's largest payload is capacity/2 − 8 (src/threads/ring.ts).
    assert.ok(cap / 2 - 8 >= limits.ringRecordBytesMax(v));
  }
});

test('every error kind has a distinct stable code', () => {
  const codes = Object.values(ErrorKind).map((k) => ERROR_CODES[k]);
  assert.equal(new Set(codes).size, codes.length);
  assert.ok(codes.every((c) => /^TESSERA_[A-Z_]+$/.test(c)));
});

test('error messages are actionable and typed', () => {
  const e = shuttingDown();
  assert.ok(e instanceof TesseraError);
  assert.equal(e.code, 'TESSERA_SHUTTING_DOWN');
  assert.equal(e.message, 'node is shutting down');
  assert.equal(expired().message, 'write expired before it could be applied');
  const s = superseded({ wallMs: 5, logical: 1, nodeId: 'n2', tombstone: true });
  assert.equal(s.kind, ErrorKind.Superseded);
  assert.deepEqual(s.winner, { wallMs: 5, logical: 1, nodeId: 'n2', tombstone: true });
  assert.match(s.message, /timestamp=5\.1 node_id=n2 tombstone=true/);
});

test('error messages are cut on a UTF-8 boundary', () => {
  const long = '🦀'.repeat(limits.ERROR_MESSAGE_BYTES_MAX);
  const cut = truncateErrorMessage(long);
  assert.ok(Buffer.byteLength(cut) <= limits.ERROR_MESSAGE_BYTES_MAX);
  assert.ok(!cut.includes('\ufffd'));
  assert.equal(truncateErrorMessage('short'), 'short');
});

test('bounded queue refuses past capacity and keeps FIFO order across wrap-around', () => {
  const q = new BoundedQueue<number>(3);
  assert.ok(q.push(1) && q.push(2) && q.push(3));
  assert.equal(q.push(4), false);
  assert.equal(q.shift(), 1);
  assert.ok(q.push(4));
  assert.deepEqual([q.shift(), q.shift(), q.shift(), q.shift()], [2, 3, 4, undefined]);
});

test('token bucket admits its burst, then its rate', () => {
  const b = new TokenBucket(10, 2, 0);
  assert.ok(b.tryTake(0) && b.tryTake(0));
  assert.equal(b.tryTake(0), false);
  assert.equal(b.waitMs(0), 100);
  assert.equal(b.tryTake(99), false);
  assert.ok(b.tryTake(100));
  assert.ok(b.tryTake(1000) && b.tryTake(1000));
  assert.equal(b.tryTake(1000), false, 'never more than the burst saved up');
});

test('token bucket: work spent after the fact is paid for by waiting before the next', () => {
  // 1 000 a second with a page of 100 saved up: a page costs nothing, the next page 100 ms.
  const b = new TokenBucket(1000, 100, 0);
  b.spend(100, 0);
  assert.equal(b.waitMs(0), 1, 'a page spent the burst: the next token is a millisecond away');
  b.spend(400, 0);
  assert.equal(b.waitMs(0), 401, 'a larger page runs into debt, and the debt is waited off');
  assert.equal(b.waitMs(300), 101);
  assert.equal(b.waitMs(401), 0);
  b.spend(100, 10_000);
  assert.equal(b.waitMs(10_000), 1, 'an idle spell saves up no more than the burst');
});
