// Strings as bit arrays (src/core/bits.ts), against a plain reference that reads one bit at a time.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  BitOperation,
  bitAt,
  combineBits,
  countBits,
  decodeBitArgs,
  encodeBitArgs,
  firstBit,
  withBit,
} from '../../src/core/bits.js';

/** Bit `i` of `value`, most significant bit of the first byte first. */
const bitOf = (value: Uint8Array, i: number) => (value[i >> 3] >> (7 - (i & 7))) & 1;

/** A value and an inclusive range of bits inside it. */
const valueAndRange = fc
  .uint8Array({ minLength: 1, maxLength: 40 })
  .chain((value) =>
    fc
      .tuple(fc.nat(value.length * 8 - 1), fc.nat(value.length * 8 - 1))
      .map(([a, b]) => ({ value, first: Math.min(a, b), last: Math.max(a, b) })),
  );

test('bit 0 is the most significant bit of the first byte; past the end every bit is 0', () => {
  const value = Buffer.from([0b1000_0000, 0b0000_0001]);
  assert.equal(bitAt(value, 0), 1);
  assert.equal(bitAt(value, 1), 0);
  assert.equal(bitAt(value, 15), 1);
  assert.equal(bitAt(value, 16), 0);
  assert.equal(bitAt(value, 2 ** 32 - 1), 0);
});

test('withBit sets or clears one bit, grows with zero bytes, and leaves its input alone', () => {
  const value = Buffer.from('a'); // 0x61
  assert.deepEqual(withBit(value, 6, 1), Buffer.from('c'));
  assert.deepEqual(withBit(value, 1, 0), Buffer.from('!'));
  assert.deepEqual(withBit(value, 23, 1), Buffer.from([0x61, 0, 1]));
  assert.deepEqual(value, Buffer.from('a'));
});

test('countBits: Redis documentation examples over "foobar"', () => {
  const foobar = Buffer.from('foobar');
  assert.equal(countBits(foobar, 0, 47), 26);
  assert.equal(countBits(foobar, 8, 15), 6);
  assert.equal(countBits(foobar, 5, 30), 17);
});

test('property: countBits counts the set bits of the range, edges included', () => {
  fc.assert(
    fc.property(valueAndRange, ({ value, first, last }) => {
      let expected = 0;
      for (let i = first; i <= last; i++) expected += bitOf(value, i);
      assert.equal(countBits(value, first, last), expected);
    }),
  );
});

test('property: firstBit finds the first bit of either kind in the range, or -1', () => {
  fc.assert(
    fc.property(valueAndRange, fc.constantFrom(0 as const, 1 as const), ({ value, first, last }, bit) => {
      let expected = -1;
      for (let i = first; i <= last && expected === -1; i++) if (bitOf(value, i) === bit) expected = i;
      assert.equal(firstBit(value, bit, first, last), expected);
    }),
  );
});

test('property: withBit then bitAt reads the bit back, and no other bit changes', () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ maxLength: 16 }),
      fc.nat(200),
      fc.constantFrom(0 as const, 1 as const),
      (value, offset, bit) => {
        const out = withBit(value, offset, bit);
        assert.equal(out.length, Math.max(value.length, (offset >> 3) + 1));
        for (let i = 0; i < out.length * 8; i++)
          assert.equal(bitAt(out, i), i === offset ? bit : bitAt(value, i));
      },
    ),
  );
});

test('BITCOUNT / BITPOS arguments travel intact; overlong ones as empty, extra ones only counted', () => {
  const args = ['1', '-5', '10', 'BIT'].map((a) => Buffer.from(a));
  assert.deepEqual(decodeBitArgs(encodeBitArgs(args)), { count: 4, args });
  assert.deepEqual(decodeBitArgs(encodeBitArgs([])), { count: 0, args: [] });
  const long = Buffer.alloc(100, 0x31);
  const many = [long, ...Array.from({ length: 300 }, () => Buffer.from('7'))];
  const decoded = decodeBitArgs(encodeBitArgs(many));
  assert.equal(decoded?.count, 255, 'a count past 255 stays past the largest one that matters');
  assert.deepEqual(decoded?.args, [Buffer.alloc(0), Buffer.from('7'), Buffer.from('7'), Buffer.from('7')]);
  assert.equal(decodeBitArgs(Buffer.from([2, 5, 0x31])), undefined, 'cut short');
  assert.equal(decodeBitArgs(undefined), undefined);
});

test('property: combineBits is the byte-wise operation over values padded with zeros to the longest', () => {
  const operation = fc.constantFrom(BitOperation.And, BitOperation.Or, BitOperation.Xor);
  fc.assert(
    fc.property(
      operation,
      fc.array(fc.uint8Array({ maxLength: 8 }), { minLength: 1, maxLength: 4 }),
      (op, values) => {
        const length = Math.max(...values.map((v) => v.length));
        const expected = Buffer.alloc(length);
        for (let i = 0; i < length; i++) {
          let byte = i < values[0].length ? values[0][i] : 0;
          for (const v of values.slice(1)) {
            const other = i < v.length ? v[i] : 0;
            byte =
              op === BitOperation.And ? byte & other : op === BitOperation.Or ? byte | other : byte ^ other;
          }
          expected[i] = byte;
        }
        assert.deepEqual(combineBits(op, values), expected);
      },
    ),
  );
  assert.deepEqual(combineBits(BitOperation.Not, [Buffer.from([0xf0, 0x41])]), Buffer.from([0x0f, 0xbe]));
  assert.deepEqual(combineBits(BitOperation.And, [Buffer.alloc(0), Buffer.alloc(0)]), Buffer.alloc(0));
});
