// BITFIELD (src/core/bitfield.ts): Redis's documentation examples, the overflow rules at the edges of
// 64-bit arithmetic, and properties of fields of every width.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  type BitfieldOp,
  BitfieldOpcode,
  decodeBitfieldOps,
  encodeBitfieldOps,
  formatBitfieldAnswers,
  highestWrittenBit,
  Overflow,
  parseBitfieldAnswers,
  runBitfield,
} from '../../src/core/bitfield.js';

const op = (
  opcode: BitfieldOpcode,
  type: string,
  offset: number,
  operand = 0n,
  overflow: Overflow = Overflow.Wrap,
): BitfieldOp => ({
  opcode,
  signed: type[0] === 'i',
  bits: Number(type.slice(1)),
  offset,
  overflow,
  operand,
});
const { Get, Set: SetField, IncrBy } = BitfieldOpcode;

test('documentation examples: INCRBY i5 100 1, GET u4 0; then the OVERFLOW examples on u2', () => {
  const value = Buffer.alloc(13);
  assert.deepEqual(runBitfield(value, [op(IncrBy, 'i5', 100, 1n), op(Get, 'u4', 0)]), [1n, 0n]);
  const counter = Buffer.alloc(13);
  const incr = (overflow: Overflow) => [op(IncrBy, 'u2', 100, 1n), op(IncrBy, 'u2', 102, 1n, overflow)];
  assert.deepEqual(runBitfield(counter, incr(Overflow.Sat)), [1n, 1n]);
  assert.deepEqual(runBitfield(counter, incr(Overflow.Sat)), [2n, 2n]);
  assert.deepEqual(runBitfield(counter, incr(Overflow.Sat)), [3n, 3n]);
  assert.deepEqual(runBitfield(counter, incr(Overflow.Sat)), [0n, 3n]);
  assert.deepEqual(runBitfield(counter, [op(IncrBy, 'u2', 102, 1n, Overflow.Fail)]), [null]);
});

test('SET answers the old value; fields are big-endian at any bit offset; signed fields sign-extend', () => {
  const value = Buffer.alloc(2);
  assert.deepEqual(runBitfield(value, [op(SetField, 'u8', 4, 0xabn), op(SetField, 'u8', 4, 1n)]), [
    0n,
    0xabn,
  ]);
  assert.deepEqual(value, Buffer.from([0x00, 0x10]));
  assert.deepEqual(runBitfield(Buffer.from([0xff]), [op(Get, 'i8', 0), op(Get, 'u8', 0), op(Get, 'i4', 6)]), [
    -1n,
    255n,
    -4n,
  ]);
});

test('the edges of 64 bits: i64 wraps, saturates and fails like int64; u63 stays below 2^63', () => {
  const max = 2n ** 63n - 1n;
  const at = (n: bigint, o: Overflow) => [op(SetField, 'i64', 0, n), op(IncrBy, 'i64', 0, 1n, o)];
  assert.deepEqual(runBitfield(Buffer.alloc(8), at(max, Overflow.Wrap)), [0n, -max - 1n]);
  assert.deepEqual(runBitfield(Buffer.alloc(8), at(max, Overflow.Sat)), [0n, max]);
  assert.deepEqual(runBitfield(Buffer.alloc(8), at(max, Overflow.Fail)), [0n, null]);
  // A negative SET of an unsigned field is a huge uint64: it wraps to the field's low bits.
  assert.deepEqual(runBitfield(Buffer.alloc(8), [op(SetField, 'u63', 0, -1n), op(Get, 'u63', 0)]), [0n, max]);
  assert.deepEqual(
    runBitfield(Buffer.alloc(8), [op(SetField, 'u8', 0, -1n, Overflow.Sat), op(Get, 'u8', 0)]),
    [0n, 255n],
  );
});

test('property: a value that fits is read back as set; WRAP is arithmetic modulo the width', () => {
  const width = fc.record({ signed: fc.boolean(), bits: fc.integer({ min: 1, max: 63 }) });
  fc.assert(
    fc.property(width, fc.nat(40), fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (w, offset, n) => {
      const type = `${w.signed ? 'i' : 'u'}${w.bits}`;
      const value = Buffer.alloc(16);
      const size = 1n << BigInt(w.bits);
      const [, read] = runBitfield(value, [op(SetField, type, offset, n), op(Get, type, offset)]);
      let wrapped = ((n % size) + size) % size;
      if (w.signed && wrapped >= size / 2n) wrapped -= size;
      assert.equal(read, wrapped);
    }),
  );
});

test('ops and answers travel intact', () => {
  const ops = [op(Get, 'i64', 4_294_967_295), op(IncrBy, 'u63', 8, -(2n ** 63n), Overflow.Fail)];
  assert.deepEqual(decodeBitfieldOps(encodeBitfieldOps(ops)), ops);
  assert.deepEqual(decodeBitfieldOps(undefined), []);
  assert.equal(decodeBitfieldOps(Buffer.alloc(15)), undefined);
  assert.equal(highestWrittenBit(ops), 8 + 63 - 1);
  assert.deepEqual(parseBitfieldAnswers(formatBitfieldAnswers([1n, null, -(2n ** 63n)])), [
    1n,
    null,
    -(2n ** 63n),
  ]);
  assert.deepEqual(parseBitfieldAnswers(formatBitfieldAnswers([])), []);
});
