// Strings as bit arrays, for SETBIT, GETBIT, BITCOUNT and BITPOS: bit 0 is the most significant bit
// of the first byte, as in Redis. Pure functions over value bytes; the fragment actor runs them
// (src/core/modify.ts), so a count over a large value never stalls the main thread.

/** Highest bit offset Redis takes (its 512 MiB string limit, in bits, less one). */
export const BIT_OFFSET_MAX = 2 ** 32 - 1;
/** Arguments after the key that BITCOUNT and BITPOS look at: bit, start, end, unit at most. */
export const BIT_ARGS_KEPT = 4;
/**
 * Longest argument kept as sent. Anything longer is neither an int64 nor a unit name, so it travels
 * as an empty argument, which is refused the same way (and no operand outgrows its 16-bit length).
 */
const BIT_ARG_BYTES_MAX = 32;
/** Argument counts past this are all "too many" alike. */
const BIT_ARG_COUNT_MAX = 255;

/** The arguments of BITCOUNT / BITPOS after the key: their count, and the first few. */
export interface BitArgs {
  count: number;
  args: Uint8Array[];
}

/**
 * Encodes the arguments for the operand: their number (`count`, capped at BIT_ARG_COUNT_MAX) as a
 * u8, then (u8 length, bytes) for each of the first BIT_ARGS_KEPT, which `args` must hold.
 */
export function encodeBitArgs(args: readonly Uint8Array[], count = args.length): Buffer {
  const kept = args.slice(0, BIT_ARGS_KEPT).map((a) => (a.length > BIT_ARG_BYTES_MAX ? new Uint8Array() : a));
  const out = Buffer.allocUnsafe(1 + kept.reduce((n, a) => n + 1 + a.length, 0));
  out[0] = Math.min(count, BIT_ARG_COUNT_MAX);
  let p = 1;
  for (const a of kept) {
    out[p++] = a.length;
    out.set(a, p);
    p += a.length;
  }
  return out;
}

/** Decodes `encodeBitArgs`' operand; undefined if malformed. */
export function decodeBitArgs(operand: Uint8Array | undefined): BitArgs | undefined {
  if (operand === undefined || operand.length === 0) return undefined;
  const count = operand[0];
  const args: Uint8Array[] = [];
  let p = 1;
  while (p < operand.length) {
    const n = operand[p];
    if (p + 1 + n > operand.length) return undefined;
    args.push(operand.subarray(p + 1, p + 1 + n));
    p += 1 + n;
  }
  return args.length === Math.min(count, BIT_ARGS_KEPT) ? { count, args } : undefined;
}

/** The bit at `offset` (0 past the end). */
export function bitAt(value: Uint8Array, offset: number): 0 | 1 {
  const byte = Math.floor(offset / 8);
  if (byte >= value.length) return 0;
  return ((value[byte] >> (7 - (offset % 8))) & 1) as 0 | 1;
}

/** A copy of `value` with the bit at `offset` set to `bit`, grown with zero bytes to reach it. */
export function withBit(value: Uint8Array, offset: number, bit: 0 | 1): Buffer {
  const byte = Math.floor(offset / 8);
  const out = Buffer.alloc(Math.max(value.length, byte + 1));
  out.set(value, 0);
  const mask = 1 << (7 - (offset % 8));
  out[byte] = bit === 1 ? out[byte] | mask : out[byte] & ~mask;
  return out;
}

/** Set bits per byte value. */
const POPCOUNT = new Uint8Array(256);
for (let i = 1; i < 256; i++) POPCOUNT[i] = (i & 1) + POPCOUNT[i >> 1];

/** Set bits among bits `first`..`last` (inclusive, both inside the value). */
export function countBits(value: Uint8Array, first: number, last: number): number {
  const firstByte = Math.floor(first / 8);
  const lastByte = Math.floor(last / 8);
  let count = 0;
  for (let i = firstByte; i <= lastByte; i++) count += POPCOUNT[value[i]];
  // Take back the bits of the edge bytes outside the range.
  count -= POPCOUNT[value[firstByte] & ~(0xff >> (first % 8)) & 0xff];
  count -= POPCOUNT[value[lastByte] & (0xff >> ((last % 8) + 1))];
  return count;
}

/** The first bit equal to `bit` among bits `first`..`last` (inclusive, inside the value); -1 if none. */
export function firstBit(value: Uint8Array, bit: 0 | 1, first: number, last: number): number {
  const skip = bit === 1 ? 0x00 : 0xff;
  for (let i = Math.floor(first / 8); i <= Math.floor(last / 8); i++) {
    if (value[i] === skip) continue;
    for (let b = Math.max(first, i * 8); b <= Math.min(last, i * 8 + 7); b++) {
      if (((value[i] >> (7 - (b % 8))) & 1) === bit) return b;
    }
  }
  return -1;
}

/** BITOP's operations. */
export const BitOperation = { And: 1, Or: 2, Xor: 3, Not: 4 } as const;
export type BitOperation = (typeof BitOperation)[keyof typeof BitOperation];
export const BIT_OPERATION_NAMES: Readonly<Record<string, BitOperation>> = {
  AND: BitOperation.And,
  OR: BitOperation.Or,
  XOR: BitOperation.Xor,
  NOT: BitOperation.Not,
};

/**
 * BITOP's result over `values` (NOT takes the first only): as long as the longest, shorter values
 * read as zero bytes past their end. Empty when every value is.
 */
export function combineBits(operation: BitOperation, values: readonly Uint8Array[]): Buffer {
  const length = values.reduce((n, v) => Math.max(n, v.length), 0);
  const out = Buffer.alloc(length);
  if (values.length === 0) return out;
  out.set(values[0], 0);
  if (operation === BitOperation.Not) {
    for (let i = 0; i < length; i++) out[i] = ~out[i];
    return out;
  }
  for (let k = 1; k < values.length; k++) {
    const v = values[k];
    if (operation === BitOperation.And) {
      for (let i = 0; i < length; i++) out[i] &= i < v.length ? v[i] : 0;
    } else if (operation === BitOperation.Or) {
      for (let i = 0; i < v.length; i++) out[i] |= v[i];
    } else {
      for (let i = 0; i < v.length; i++) out[i] ^= v[i];
    }
  }
  return out;
}
