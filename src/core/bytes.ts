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
