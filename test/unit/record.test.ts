// Versioned records and LWW (DESIGN.md "Version", spec §2.2, §2.6).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  ApplyOutcome,
  compareVersions,
  encodeRecord,
  expiresAtOf,
  expiryTombstoneOf,
  isLive,
  isTombstone,
  isWellFormedRecord,
  logicalOf,
  mergeOutcome,
  nodeIdOf,
  restampRecord,
  valueBytesOf,
  wallMsOf,
} from '../../src/core/record.js';

const node = (s: string) => Buffer.from(s);
const value = (wall: number, logical: number, n: string, v = 'v', exp = 0) =>
  encodeRecord(false, wall, logical, exp, node(n), Buffer.from(v));
const tomb = (wall: number, logical: number, n: string, exp = 0) =>
  encodeRecord(true, wall, logical, exp, node(n), undefined);

test('encode/decode round trip of every field', () => {
  fc.assert(
    fc.property(
      fc.boolean(),
      fc.integer({ min: 0, max: 2 ** 48 - 1 }),
      fc.integer({ min: 0, max: 0xffff }),
      fc.integer({ min: 0, max: 2 ** 48 - 1 }),
      fc.uint8Array({ minLength: 1, maxLength: 255 }),
      fc.uint8Array({ maxLength: 300 }),
      (tombstone, wall, logical, exp, nodeId, v) => {
        const r = encodeRecord(tombstone, wall, logical, exp, nodeId, v);
        assert.ok(isWellFormedRecord(r));
        assert.equal(isTombstone(r), tombstone);
        assert.equal(wallMsOf(r), wall);
        assert.equal(logicalOf(r), logical);
        assert.equal(expiresAtOf(r), exp);
        assert.deepEqual(Buffer.from(nodeIdOf(r)), Buffer.from(nodeId));
        assert.deepEqual(Buffer.from(valueBytesOf(r)), tombstone ? Buffer.alloc(0) : Buffer.from(v));
      },
    ),
  );
});

test('malformed records are recognised', () => {
  assert.equal(isWellFormedRecord(Buffer.alloc(3)), false);
  const r = value(1, 0, 'n1');
  assert.equal(isWellFormedRecord(r.subarray(0, 17)), false); // node id cut
  const badFlags = Buffer.from(r);
  badFlags[0] = 0x80;
  assert.equal(isWellFormedRecord(badFlags), false);
});

test('LWW order: timestamp wall, then logical, then node id bytes, then tombstone over value', () => {
  assert.ok(compareVersions(value(2, 0, 'a'), value(1, 9, 'z')) > 0);
  assert.ok(compareVersions(value(1, 2, 'a'), value(1, 1, 'z')) > 0);
  assert.ok(compareVersions(value(1, 1, 'b'), value(1, 1, 'a')) > 0);
  assert.ok(compareVersions(value(1, 1, 'ab'), value(1, 1, 'a')) > 0, 'a prefix sorts first');
  assert.ok(compareVersions(tomb(1, 1, 'a'), value(1, 1, 'a')) > 0, 'tombstone outranks its value');
  assert.equal(
    compareVersions(value(1, 1, 'a', 'x'), value(1, 1, 'a', 'y')),
    0,
    'the version, not the value',
  );
});

test('LWW order is a total order consistent with a reference sort (property)', () => {
  const rec = fc
    .record({
      tombstone: fc.boolean(),
      wall: fc.integer({ min: 0, max: 5 }),
      logical: fc.integer({ min: 0, max: 3 }),
      n: fc.constantFrom('a', 'b', 'ab', 'n1', 'é'),
    })
    .map((x) => ({ ...x, r: x.tombstone ? tomb(x.wall, x.logical, x.n) : value(x.wall, x.logical, x.n) }));
  fc.assert(
    fc.property(rec, rec, (a, b) => {
      const ref =
        a.wall - b.wall ||
        a.logical - b.logical ||
        Buffer.compare(Buffer.from(a.n), Buffer.from(b.n)) ||
        Number(a.tombstone) - Number(b.tombstone);
      assert.equal(Math.sign(compareVersions(a.r, b.r)), Math.sign(ref));
      assert.equal(Math.sign(compareVersions(b.r, a.r)), -Math.sign(ref) || 0, 'antisymmetric');
    }),
  );
});

test('merge outcomes: Applied, AlreadyPresent, Superseded, Expired', () => {
  const cur = value(10, 0, 'n1');
  assert.equal(mergeOutcome(undefined, cur, 0), ApplyOutcome.Applied);
  assert.equal(mergeOutcome(cur, value(11, 0, 'n1'), 0), ApplyOutcome.Applied);
  assert.equal(mergeOutcome(cur, value(10, 0, 'n1', 'other bytes'), 0), ApplyOutcome.AlreadyPresent);
  assert.equal(mergeOutcome(cur, value(9, 5, 'n9'), 0), ApplyOutcome.Superseded);
  assert.equal(mergeOutcome(cur, tomb(11, 0, 'n1'), 0), ApplyOutcome.Applied);
  assert.equal(mergeOutcome(undefined, value(1, 0, 'n1', 'v', 100), 100), ApplyOutcome.Expired);
  assert.equal(mergeOutcome(undefined, value(1, 0, 'n1', 'v', 101), 100), ApplyOutcome.Applied);
  // A superseded write is Superseded even when also expired: nothing is installed.
  assert.equal(mergeOutcome(cur, value(9, 0, 'n1', 'v', 5), 100), ApplyOutcome.Superseded);
  // Tombstones carry the deadline of the value they retired but never "expire".
  assert.equal(mergeOutcome(undefined, tomb(1, 0, 'n1', 5), 100), ApplyOutcome.Applied);
});

test('TTL: live until the deadline, absent from it; 0 means no expiry', () => {
  assert.equal(isLive(value(1, 0, 'n', 'v', 0), 2 ** 47), true);
  assert.equal(isLive(value(1, 0, 'n', 'v', 1000), 999), true);
  assert.equal(isLive(value(1, 0, 'n', 'v', 1000), 1000), false);
  assert.equal(isLive(tomb(1, 0, 'n'), 0), false);
});

test('expiry tombstone keeps version and deadline, drops the value, and wins over its value', () => {
  const v = value(42, 3, 'n7', 'payload', 900);
  const t = expiryTombstoneOf(v);
  assert.ok(isTombstone(t));
  assert.equal(wallMsOf(t), 42);
  assert.equal(logicalOf(t), 3);
  assert.equal(expiresAtOf(t), 900);
  assert.equal(valueBytesOf(t).length, 0);
  assert.ok(isWellFormedRecord(t));
  assert.equal(mergeOutcome(v, t, 0), ApplyOutcome.Applied);
  assert.equal(mergeOutcome(t, v, 0), ApplyOutcome.Superseded);
});

test('restamp keeps the value under a new version and deadline', () => {
  const v = value(1, 0, 'n1', 'keep me', 0);
  const r = restampRecord(v, 5, 1, 777, node('n2'));
  assert.equal(Buffer.from(valueBytesOf(r)).toString(), 'keep me');
  assert.equal(wallMsOf(r), 5);
  assert.equal(expiresAtOf(r), 777);
  assert.equal(Buffer.from(nodeIdOf(r)).toString(), 'n2');
});

test('out-of-range fields are programmer errors', () => {
  assert.throws(() => encodeRecord(false, 2 ** 48, 0, 0, node('n'), undefined));
  assert.throws(() => encodeRecord(false, 0, 0x10000, 0, node('n'), undefined));
  assert.throws(() => encodeRecord(false, 0, 0, 0, Buffer.alloc(0), undefined));
  assert.throws(() => encodeRecord(false, 0, 0, 0, Buffer.alloc(256), undefined));
});
