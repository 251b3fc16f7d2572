// Keyspace (DESIGN.md "Slots and fragments"): Redis Cluster's CRC16 slots and contiguous ranges.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { crc16, Keyspace, slotOf, slotOfRange, slotRange } from '../../src/core/keyspace.js';
import { SLOT_COUNT } from '../../src/core/limits.js';

const b = (s: string) => Buffer.from(s);

test('CRC16/XMODEM check value: "123456789" → 0x31C3', () => {
  assert.equal(crc16(b('123456789')), 0x31c3);
});

test('known Redis Cluster slots', () => {
  assert.equal(slotOf(b('foo')), 12182);
  assert.equal(slotOf(b('bar')), 5061);
  assert.equal(slotOf(b('')), 0);
});

test('hash tags: keys sharing {tag} share a slot', () => {
  assert.equal(slotOf(b('{user1000}.following')), slotOf(b('{user1000}.followers')));
  assert.equal(slotOf(b('{user1000}.following')), slotOf(b('user1000')));
});

test('hash tag edge cases follow Redis rules', () => {
  // Empty tag "{}": the whole key is hashed.
  assert.equal(slotOf(b('foo{}{bar}')), crc16(b('foo{}{bar}')) & 16383);
  // Only the first {…} counts.
  assert.equal(slotOf(b('foo{{bar}}zap')), crc16(b('{bar')) & 16383);
  assert.equal(slotOf(b('foo{bar}{zap}')), slotOf(b('bar')));
  // No closing brace: the whole key.
  assert.equal(slotOf(b('foo{bar')), crc16(b('foo{bar')) & 16383);
});

test('a key read in place, inside a larger buffer, has the slot of the key alone', () => {
  for (const key of ['foo', '', '{user1000}.following', 'foo{}{bar}', 'foo{{bar}}zap', 'foo{bar', 'a}b{c']) {
    // Braces around the key must not count: they are another argument's bytes.
    const buf = Buffer.from(`{x}${key}{y}`);
    assert.equal(slotOfRange(buf, 3, 3 + Buffer.byteLength(key)), slotOf(b(key)), key);
  }
});

test('fragments own contiguous slot ranges covering every slot once', () => {
  for (const count of [1, 2, 3, 7, 16, 1000, 16384]) {
    const ks = new Keyspace(count);
    let expected = 0;
    for (let f = 0; f < count; f++) {
      const [first, end] = slotRange(f, count);
      assert.equal(first, expected, `fragment ${f} of ${count} starts where the previous ended`);
      assert.ok(end > first, 'every fragment owns at least one slot');
      for (const s of [first, end - 1]) assert.equal(ks.fragmentOfSlot(s), f);
      expected = end;
    }
    assert.equal(expected, SLOT_COUNT);
  }
});

test('fragmentOf routes a key by its slot', () => {
  const ks = new Keyspace(16);
  assert.equal(ks.fragmentOf(b('foo')), Math.floor(12182 / 1024));
});

test('fragment count outside 1..16384 is refused', () => {
  assert.throws(() => new Keyspace(0));
  assert.throws(() => new Keyspace(16385));
  assert.throws(() => new Keyspace(1.5));
});
