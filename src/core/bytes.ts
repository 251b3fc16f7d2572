// Byte-array helpers. Fixed-width integers by index: Buffer's writeUInt32LE and friends validate every
// argument on each call; on the per-operation path these plain stores are several times cheaper.
// Callers guarantee ranges (the codecs check lengths where input enters).

export function writeU16LE(b: Uint8Array, at: number, v: number): void {
  b[at] = v;
  b[at + 1] = v >>> 8;
}

export function writeU32LE(b: Uint8Array, at: number, v: number): void {
  b[at] = v;
  b[at + 1] = v >>> 8;
  b[at + 2] = v >>> 16;
  b[at + 3] = v >>> 24;
}

export function readU16LE(b: Uint8Array, at: number): number {
  return b[at] | (b[at + 1] << 8);
}

export function readU32LE(b: Uint8Array, at: number): number {
  return (b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (b[at + 3] << 24)) >>> 0;
}

/** Unsigned 48-bit big-endian (timestamps and deadlines: byte order is time order). */
export function writeU48BE(b: Uint8Array, at: number, v: number): void {
  const high = Math.floor(v / 2 ** 32);
  const low = v >>> 0;
  b[at] = high >>> 8;
  b[at + 1] = high;
  b[at + 2] = low >>> 24;
  b[at + 3] = low >>> 16;
  b[at + 4] = low >>> 8;
  b[at + 5] = low;
}

export function readU48BE(b: Uint8Array, at: number): number {
  const high = (b[at] << 8) | b[at + 1];
  const low = ((b[at + 2] << 24) | (b[at + 3] << 16) | (b[at + 4] << 8) | b[at + 5]) >>> 0;
  return high * 2 ** 32 + low;
}

/** Bytes as a string of one character per byte: an exact identity for a Map key. */
export function latin1(bytes: Uint8Array): string {
  return asBuffer(bytes).toString('latin1');
}

/** The bytes as a Buffer: themselves if they are one, else a view of the same memory (no copy). */
export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
}

/**
 * From this size up a copy is one native `memcpy` (Buffer#fill with a buffer as its value) rather
 * than a typed-array `set`. V8 copies to or from shared memory (the rings) with relaxed word moves,
 * and byte by byte when the two addresses differ mod 8: 1 KiB costs ~340 ns misaligned, ~55 ns
 * aligned, ~65 ns through `fill`; 16 KiB ~4.9 µs, 0.65 µs, 0.17 µs. Below it the native call's fixed
 * cost (~50 ns) is more than it saves.
 */
export const NATIVE_COPY_BYTES_MIN = 256;

/**
 * Copies all of `source` into `target` at `at`; returns the bytes copied. The two must not overlap.
 * For copies that may touch shared memory; plain ones may use `set`.
 */
export function copyBytes(target: Uint8Array, at: number, source: Uint8Array): number {
  const n = source.length;
  if (n < NATIVE_COPY_BYTES_MIN) target.set(source, at);
  else nativeFill.call(target, source, at, at + n);
  return n;
}

/**
 * Copies source[start, end) into `target` at `at`, as `copyBytes`; returns the bytes copied. A range
 * outside either array throws (Buffer#copy would copy what fits and say so only in its count).
 */
export function copyRange(
  source: Uint8Array,
  start: number,
  end: number,
  target: Uint8Array,
  at: number,
): number {
  const n = end - start;
  if (start < 0 || n < 0 || end > source.length || at < 0 || at + n > target.length) {
    throw new RangeError(`copy of [${start}, ${end}) of ${source.length} bytes to ${at} of ${target.length}`);
  }
  if (n < NATIVE_COPY_BYTES_MIN) bufferCopy.call(source, target, at, start, end);
  else nativeFill.call(target, source.subarray(start, end), at, at + n);
  return n;
}

// Called on any Uint8Array: neither reads a Buffer-only property of `this`.
const nativeFill = Buffer.prototype.fill as (
  this: Uint8Array,
  value: Uint8Array,
  offset: number,
  end: number,
) => void;
const bufferCopy = Buffer.prototype.copy as (
  this: Uint8Array,
  target: Uint8Array,
  targetStart: number,
  sourceStart: number,
  sourceEnd: number,
) => number;
