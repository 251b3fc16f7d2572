// HyperLogLog in Redis's format (src/core/hyperloglog.ts). The expected bytes and counts are what
// redis-server 7.0.15 answered for the same PFADD / PFCOUNT / GET commands.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  cacheCardinality,
  cachedCardinality,
  createHll,
  encodeHllPatterns,
  HLL_DENSE_SIZE,
  hllAdd,
  hllBytes,
  hllCount,
  hllMergeInto,
  isDense,
  isHll,
  newRegisterMax,
  openHll,
  registersCount,
} from '../../src/core/hyperloglog.js';

const elements = (from: number, to: number) =>
  Array.from({ length: to - from }, (_, i) => Buffer.from(`e${from + i}`));

test('PFADD a b c: the sparse bytes Redis writes, then PFCOUNT 3, cached in the header', () => {
  const hll = createHll();
  assert.equal(hllAdd(hll, encodeHllPatterns(['a', 'b', 'c'].map((e) => Buffer.from(e)))), 3);
  const expected = Buffer.concat([
    Buffer.from('HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80', 'latin1'),
    Buffer.from('60f38050b1844bfb80425a', 'hex'),
  ]);
  assert.deepEqual(hllBytes(hll), expected);
  assert.equal(cachedCardinality(hll), undefined, 'the cache is stale after an add');
  assert.equal(hllCount(hll), 3);
  cacheCardinality(hll, 3);
  assert.deepEqual(hllBytes(hll).subarray(8, 16), Buffer.from([3, 0, 0, 0, 0, 0, 0, 0]));
  assert.equal(cachedCardinality(hll), 3);
});

test('5 000 elements promote the sparse form to dense; the estimates match Redis', () => {
  const hll = createHll();
  hllAdd(hll, encodeHllPatterns(elements(0, 5000)));
  assert.ok(isDense(hll));
  assert.equal(hllBytes(hll).length, HLL_DENSE_SIZE);
  assert.equal(hllCount(hll), 4968);
  for (let from = 5000; from < 20_000; from += 5000)
    hllAdd(hll, encodeHllPatterns(elements(from, from + 5000)));
  assert.equal(hllCount(hll), 19_901);
  // PFCOUNT of two keys counts their union.
  const small = createHll();
  hllAdd(small, encodeHllPatterns(['a', 'b', 'c'].map((e) => Buffer.from(e))));
  const max = newRegisterMax();
  assert.ok(hllMergeInto(max, hll) && hllMergeInto(max, small));
  assert.equal(registersCount(max), 19_907);
});

test('a value passes as a HyperLogLog only with the magic, a known encoding and the dense length', () => {
  assert.ok(isHll(hllBytes(createHll())));
  assert.equal(isHll(Buffer.from('HYLL')), false, 'shorter than the header');
  assert.equal(isHll(Buffer.from('HYLX\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00', 'latin1')), false);
  assert.equal(isHll(Buffer.from('HYLL\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00', 'latin1')), false);
  assert.equal(isHll(Buffer.from('HYLL\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00', 'latin1')), false);
});

test('corrupt sparse opcodes are reported, never followed past the registers', () => {
  // One XZERO covering every register, then a VAL past the end.
  const hll = openHll(Buffer.concat([hllBytes(createHll()), Buffer.from([0x80])]));
  assert.equal(hllCount(hll), undefined);
  assert.equal(hllMergeInto(newRegisterMax(), hll), false);
  // Too short: one ZERO of a single register.
  const short = openHll(Buffer.concat([hllBytes(createHll()).subarray(0, 16), Buffer.from([0x00])]));
  assert.equal(hllAdd(short, encodeHllPatterns([Buffer.from('a')])), -1);
});
