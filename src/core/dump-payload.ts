// DUMP / RESTORE payloads in Redis's format, for string values: the RDB type byte (0, string), the
// string in RDB encoding (length-prefixed raw bytes, an 8/16/32-bit integer, or LZF-compressed), the
// RDB version (2 bytes, little-endian) and a CRC-64/Jones of everything before it (8 bytes, little-
// endian). RESTORE reads every string encoding Redis writes; DUMP writes integers as Redis does and
// other strings uncompressed, which every Redis RESTOREs.

import { parseInt64 } from './int64.js';

/** The RDB version Redis 7.0 writes; a payload from a later version is refused, as Redis 7.0 does. */
export const RDB_VERSION = 10;
const RDB_TYPE_STRING = 0;
const FOOTER_BYTES = 10;
const ENCODED = 3;
const ENC_INT8 = 0;
const ENC_INT16 = 1;
const ENC_INT32 = 2;
const ENC_LZF = 3;
const LEN_32BIT = 0x80;
const LEN_64BIT = 0x81;

export const ERR_DUMP_CHECK = 'ERR DUMP payload version or checksum are wrong';
export const ERR_BAD_FORMAT = 'ERR Bad data format';
export const ERR_NOT_STRING_PAYLOAD = 'ERR Bad data format: Tessera stores strings only';

// ── CRC-64/Jones (reflected, polynomial 0xad93d23594c935a9), as Redis's crc64 ─────────────────────

const CRC_HI = new Uint32Array(256);
const CRC_LO = new Uint32Array(256);
{
  // The reflected polynomial, 0x95ac9329ac4bc9b5, in halves.
  const polyHi = 0x95ac9329;
  const polyLo = 0xac4bc9b5;
  for (let n = 0; n < 256; n++) {
    let hi = 0;
    let lo = n;
    for (let k = 0; k < 8; k++) {
      const odd = lo & 1;
      lo = ((lo >>> 1) | (hi << 31)) >>> 0;
      hi >>>= 1;
      if (odd) {
        hi = (hi ^ polyHi) >>> 0;
        lo = (lo ^ polyLo) >>> 0;
      }
    }
    CRC_HI[n] = hi;
    CRC_LO[n] = lo;
  }
}

/** CRC-64/Jones of `data`, little-endian, as the 8 bytes Redis appends. */
export function crc64(data: Uint8Array): Buffer {
  let hi = 0;
  let lo = 0;
  for (let i = 0; i < data.length; i++) {
    const index = (lo ^ data[i]) & 0xff;
    lo = (((lo >>> 8) | (hi << 24)) ^ CRC_LO[index]) >>> 0;
    hi = ((hi >>> 8) ^ CRC_HI[index]) >>> 0;
  }
  const out = Buffer.allocUnsafe(8);
  out.writeUInt32LE(lo, 0);
  out.writeUInt32LE(hi, 4);
  return out;
}

// ── DUMP ──────────────────────────────────────────────────────────────────────────────────────

/** DUMP's payload for a string value. */
export function dumpPayload(value: Uint8Array): Buffer {
  const body = Buffer.concat([Buffer.from([RDB_TYPE_STRING]), encodeString(value), versionBytes()]);
  return Buffer.concat([body, crc64(body)]);
}

function versionBytes(): Buffer {
  const out = Buffer.alloc(2);
  out.writeUInt16LE(RDB_VERSION, 0);
  return out;
}

/** A string in RDB encoding: an integer when it is one's canonical text and fits 32 bits, else raw. */
function encodeString(value: Uint8Array): Buffer {
  // Only text up to 11 bytes can be an int32's canonical form.
  const parsed = value.length <= 11 ? parseInt64(value) : undefined;
  if (parsed !== undefined) {
    const integer = Number(parsed);
    if (integer >= -128 && integer <= 127) return Buffer.from([0xc0 | ENC_INT8, integer & 0xff]);
    if (integer >= -32768 && integer <= 32767) {
      const out = Buffer.from([0xc0 | ENC_INT16, 0, 0]);
      out.writeInt16LE(integer, 1);
      return out;
    }
    if (integer >= -(2 ** 31) && integer <= 2 ** 31 - 1) {
      const out = Buffer.from([0xc0 | ENC_INT32, 0, 0, 0, 0]);
      out.writeInt32LE(integer, 1);
      return out;
    }
  }
  return Buffer.concat([encodeLength(value.length), value]);
}

function encodeLength(n: number): Buffer {
  if (n < 64) return Buffer.from([n]);
  if (n < 16384) return Buffer.from([0x40 | (n >> 8), n & 0xff]);
  const out = Buffer.alloc(5);
  out[0] = LEN_32BIT;
  out.writeUInt32BE(n, 1);
  return out;
}

// ── RESTORE ───────────────────────────────────────────────────────────────────────────────────

/**
 * The string value in a RESTORE payload, or the Redis error that refuses it: a wrong version or
 * checksum, a type other than string, or an encoding that does not parse. `valueBytesMax` bounds
 * what the payload may claim before anything is allocated.
 */
export function restoreValue(payload: Uint8Array, valueBytesMax: number): Buffer | string {
  if (payload.length < FOOTER_BYTES) return ERR_DUMP_CHECK;
  const footer = payload.length - FOOTER_BYTES;
  const version = payload[footer] | (payload[footer + 1] << 8);
  if (version > RDB_VERSION) return ERR_DUMP_CHECK;
  if (!crc64(payload.subarray(0, payload.length - 8)).equals(payload.subarray(payload.length - 8)))
    return ERR_DUMP_CHECK;
  const reader = { data: payload, at: 1 };
  if (payload[0] !== RDB_TYPE_STRING) return ERR_NOT_STRING_PAYLOAD;
  const value = readString(reader, valueBytesMax);
  return value === TOO_LARGE ? ERR_VALUE_TOO_LARGE : (value ?? ERR_BAD_FORMAT);
}

/** A payload whose string is longer than the value limit. */
const TOO_LARGE = Symbol('too large');
const ERR_VALUE_TOO_LARGE = 'ERR string exceeds maximum allowed size (proto-max-bulk-len)';

interface Reader {
  data: Uint8Array;
  at: number;
}

/** An RDB length, or an encoding marker (`encoded`); undefined when cut short or unknown. */
function readLength(r: Reader): { n: number; encoded: boolean } | undefined {
  if (r.at >= r.data.length) return undefined;
  const first = r.data[r.at++];
  const kind = first >> 6;
  if (kind === 0) return { n: first & 0x3f, encoded: false };
  if (kind === 1) {
    if (r.at >= r.data.length) return undefined;
    return { n: ((first & 0x3f) << 8) | r.data[r.at++], encoded: false };
  }
  if (kind === ENCODED) return { n: first & 0x3f, encoded: true };
  if (first === LEN_32BIT) {
    if (r.at + 4 > r.data.length) return undefined;
    const n = Buffer.from(r.data.buffer, r.data.byteOffset + r.at, 4).readUInt32BE(0);
    r.at += 4;
    return { n, encoded: false };
  }
  if (first === LEN_64BIT) {
    if (r.at + 8 > r.data.length) return undefined;
    const n = Buffer.from(r.data.buffer, r.data.byteOffset + r.at, 8).readBigUInt64BE(0);
    r.at += 8;
    return n > BigInt(Number.MAX_SAFE_INTEGER) ? undefined : { n: Number(n), encoded: false };
  }
  return undefined;
}

function readString(r: Reader, valueBytesMax: number): Buffer | undefined | typeof TOO_LARGE {
  const length = readLength(r);
  if (length === undefined) return undefined;
  const view = Buffer.from(r.data.buffer, r.data.byteOffset, r.data.byteLength);
  if (!length.encoded) {
    if (length.n > valueBytesMax) return TOO_LARGE;
    if (r.at + length.n > r.data.length) return undefined;
    const value = Buffer.from(view.subarray(r.at, r.at + length.n));
    r.at += length.n;
    return value;
  }
  switch (length.n) {
    case ENC_INT8:
      if (r.at + 1 > r.data.length) return undefined;
      return Buffer.from(String(view.readInt8(r.at++)));
    case ENC_INT16:
      if (r.at + 2 > r.data.length) return undefined;
      r.at += 2;
      return Buffer.from(String(view.readInt16LE(r.at - 2)));
    case ENC_INT32:
      if (r.at + 4 > r.data.length) return undefined;
      r.at += 4;
      return Buffer.from(String(view.readInt32LE(r.at - 4)));
    case ENC_LZF: {
      const compressed = readLength(r);
      const plain = readLength(r);
      if (compressed === undefined || plain === undefined || compressed.encoded || plain.encoded)
        return undefined;
      if (plain.n > valueBytesMax) return TOO_LARGE;
      if (r.at + compressed.n > r.data.length) return undefined;
      const out = Buffer.alloc(plain.n);
      const n = lzfDecompress(view.subarray(r.at, r.at + compressed.n), out);
      r.at += compressed.n;
      return n === plain.n ? out : undefined;
    }
    default:
      return undefined;
  }
}

/** liblzf's decompression into `out`: the bytes written, or -1 when the input is invalid or too long. */
export function lzfDecompress(input: Uint8Array, out: Uint8Array): number {
  let ip = 0;
  let op = 0;
  while (ip < input.length) {
    let ctrl = input[ip++];
    if (ctrl < 32) {
      // A literal run of ctrl + 1 bytes.
      ctrl++;
      if (op + ctrl > out.length || ip + ctrl > input.length) return -1;
      out.set(input.subarray(ip, ip + ctrl), op);
      op += ctrl;
      ip += ctrl;
    } else {
      // A back reference: length (ctrl >> 5) + 2, offset from the high bits and the next byte.
      let len = ctrl >> 5;
      let ref = op - ((ctrl & 0x1f) << 8) - 1;
      if (ip >= input.length) return -1;
      if (len === 7) {
        len += input[ip++];
        if (ip >= input.length) return -1;
      }
      ref -= input[ip++];
      if (op + len + 2 > out.length || ref < 0) return -1;
      for (let k = 0; k < len + 2; k++) out[op++] = out[ref++];
    }
  }
  return op;
}
