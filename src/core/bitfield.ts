// BITFIELD: integers of 1 to 64 bits at any bit offset of a string value, read, set and incremented
// with Redis's overflow rules (WRAP, SAT, FAIL), in 64-bit two's complement as Redis computes them.
// The face parses the subcommands (every error Redis reports comes before it reads the key); the
// fragment actor runs them in order over the value.

/** A BITFIELD subcommand. */
export const BitfieldOpcode = { Get: 1, Set: 2, IncrBy: 3 } as const;
export type BitfieldOpcode = (typeof BitfieldOpcode)[keyof typeof BitfieldOpcode];
/** What SET and INCRBY do when the result does not fit the field. */
export const Overflow = { Wrap: 1, Sat: 2, Fail: 3 } as const;
export type Overflow = (typeof Overflow)[keyof typeof Overflow];

export interface BitfieldOp {
  opcode: BitfieldOpcode;
  signed: boolean;
  /** Field width: 1..64 signed, 1..63 unsigned. */
  bits: number;
  /** Bit offset of the field's most significant bit. */
  offset: number;
  overflow: Overflow;
  /** SET's value or INCRBY's increment (an int64). */
  operand: bigint;
}

/** Bytes of one encoded op: opcode, signed, bits, overflow (u8 each), offset (u32), operand (i64). */
export const BITFIELD_OP_BYTES = 16;

export function encodeBitfieldOps(ops: readonly BitfieldOp[]): Buffer {
  const out = Buffer.alloc(ops.length * BITFIELD_OP_BYTES);
  ops.forEach((op, i) => {
    const at = i * BITFIELD_OP_BYTES;
    out[at] = op.opcode;
    out[at + 1] = op.signed ? 1 : 0;
    out[at + 2] = op.bits;
    out[at + 3] = op.overflow;
    out.writeUInt32LE(op.offset, at + 4);
    out.writeBigInt64LE(op.operand, at + 8);
  });
  return out;
}

/** Decodes `encodeBitfieldOps`' operand; undefined if malformed. */
export function decodeBitfieldOps(operand: Uint8Array | undefined): BitfieldOp[] | undefined {
  // No subcommands travel as no operand: BITFIELD key alone answers an empty array.
  if (operand === undefined) return [];
  if (operand.length % BITFIELD_OP_BYTES !== 0) return undefined;
  const buf = Buffer.from(operand.buffer, operand.byteOffset, operand.byteLength);
  const ops: BitfieldOp[] = [];
  for (let at = 0; at < buf.length; at += BITFIELD_OP_BYTES) {
    const op: BitfieldOp = {
      opcode: buf[at] as BitfieldOpcode,
      signed: buf[at + 1] === 1,
      bits: buf[at + 2],
      overflow: buf[at + 3] as Overflow,
      offset: buf.readUInt32LE(at + 4),
      operand: buf.readBigInt64LE(at + 8),
    };
    if (op.opcode < BitfieldOpcode.Get || op.opcode > BitfieldOpcode.IncrBy) return undefined;
    if (op.overflow < Overflow.Wrap || op.overflow > Overflow.Fail) return undefined;
    if (op.bits < 1 || op.bits > (op.signed ? 64 : 63)) return undefined;
    ops.push(op);
  }
  return ops;
}

/** Whether every op only reads. */
export const readsOnly = (ops: readonly BitfieldOp[]): boolean =>
  ops.every((op) => op.opcode === BitfieldOpcode.Get);

/** The last bit any SET or INCRBY touches; -1 when none writes. */
export function highestWrittenBit(ops: readonly BitfieldOp[]): number {
  let highest = -1;
  for (const op of ops)
    if (op.opcode !== BitfieldOpcode.Get) highest = Math.max(highest, op.offset + op.bits - 1);
  return highest;
}

/**
 * Runs `ops` in order over `value` (already long enough for every write; reads past its end see
 * zeros) and returns each one's answer: the integer, or null when FAIL refused an overflow.
 */
export function runBitfield(value: Buffer, ops: readonly BitfieldOp[]): Array<bigint | null> {
  return ops.map((op) => {
    const old = readField(value, op);
    if (op.opcode === BitfieldOpcode.Get) return old;
    const [next, overflowed] =
      op.opcode === BitfieldOpcode.IncrBy ? fit(old, op.operand, op) : fit(op.operand, 0n, op);
    if (overflowed && op.overflow === Overflow.Fail) return null;
    writeField(value, op, next);
    return op.opcode === BitfieldOpcode.IncrBy ? next : old;
  });
}

const u64 = (n: bigint) => BigInt.asUintN(64, n);
const i64 = (n: bigint) => BigInt.asIntN(64, n);

/** `value + increment` for the field, and whether it overflowed (Redis's check*BitfieldOverflow). */
function fit(value: bigint, increment: bigint, op: BitfieldOp): [bigint, boolean] {
  const bits = BigInt(op.bits);
  if (!op.signed) {
    // The unsigned value arrives as a uint64 (a negative SET value wraps around to a huge one).
    const v = u64(value);
    const max = (1n << bits) - 1n;
    const maxIncrement = i64(max - v);
    const minIncrement = i64(-v);
    let overflow = 0;
    if (v > max || (increment > 0n && increment > maxIncrement)) overflow = 1;
    else if (increment < 0n && increment < minIncrement) overflow = -1;
    if (overflow === 0) return [v + increment, false];
    if (op.overflow === Overflow.Sat) return [overflow > 0 ? max : 0n, true];
    return [u64(v + increment) & max, true];
  }
  const max = bits === 64n ? (1n << 63n) - 1n : (1n << (bits - 1n)) - 1n;
  const min = -max - 1n;
  const maxIncrement = i64(u64(max) - u64(value));
  const minIncrement = i64(min - value);
  let overflow = 0;
  if (
    value > max ||
    (bits !== 64n && increment > maxIncrement) ||
    (value >= 0n && increment > 0n && increment > maxIncrement)
  )
    overflow = 1;
  else if (
    value < min ||
    (bits !== 64n && increment < minIncrement) ||
    (value < 0n && increment < 0n && increment < minIncrement)
  )
    overflow = -1;
  if (overflow === 0) return [value + increment, false];
  if (op.overflow === Overflow.Sat) return [overflow > 0 ? max : min, true];
  // Wrap: add as uint64, then sign-extend from the field's top bit.
  const sum = u64(value + increment);
  if (bits === 64n) return [i64(sum), true];
  const field = sum & ((1n << bits) - 1n);
  return [field & (1n << (bits - 1n)) ? field - (1n << bits) : field, true];
}

function readField(value: Uint8Array, op: BitfieldOp): bigint {
  let n = 0n;
  for (let i = 0; i < op.bits; i++) {
    const bit = op.offset + i;
    const byte = Math.floor(bit / 8);
    const set = byte < value.length && (value[byte] >> (7 - (bit % 8))) & 1;
    n = (n << 1n) | (set ? 1n : 0n);
  }
  if (op.signed && op.bits < 64 && n & (1n << BigInt(op.bits - 1))) n -= 1n << BigInt(op.bits);
  if (op.signed && op.bits === 64) n = i64(n);
  return n;
}

function writeField(value: Buffer, op: BitfieldOp, n: bigint): void {
  const bits = u64(n);
  for (let i = 0; i < op.bits; i++) {
    const bit = op.offset + i;
    const byte = Math.floor(bit / 8);
    const mask = 1 << (7 - (bit % 8));
    if ((bits >> BigInt(op.bits - 1 - i)) & 1n) value[byte] |= mask;
    else value[byte] &= ~mask;
  }
}

/** The answers as text for the result ring: comma-separated integers, "_" for a null. */
export const formatBitfieldAnswers = (answers: ReadonlyArray<bigint | null>): string =>
  answers.map((a) => (a === null ? '_' : a.toString())).join(',');

export function parseBitfieldAnswers(text: string): Array<bigint | null> {
  if (text === '') return [];
  return text.split(',').map((a) => (a === '_' ? null : BigInt(a)));
}
