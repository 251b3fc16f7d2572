// The versioned record: the one binary form of a value (or tombstone) with its LWW version and TTL.
// The same bytes are stored by every KvStore, carried through the rings, and compared by LWW, so a
// write is encoded once, on the main thread, and never re-encoded.
//
//   offset  size  field
//   0       1     flags: bit 0 = tombstone
//   1       6     wallMs       u48 BE  ┐ hybrid logical clock timestamp; bytes 1..8 compare
//   7       2     logical      u16 BE  ┘ lexicographically in timestamp order
//   9       6     expiresAtMs  u48 BE  absolute wall-clock deadline; 0 = no expiry
//   15      1     nodeIdLength
//   16      n     nodeId       UTF-8, the writer's node id
//   16+n    …     value        (empty for tombstones)

import { assert } from './assert.js';
import { readU48BE, writeU48BE } from './bytes.js';
import { EXPIRES_AT_MS_MAX, HLC_LOGICAL_MAX, HLC_WALL_MS_MAX, NODE_ID_BYTES_MAX } from './limits.js';

export const RECORD_HEADER_BYTES = 16;
const FLAGS = 0;
const WALL = 1;
const LOGICAL = 7;
const EXPIRES = 9;
const NODE_ID_LENGTH = 15;
const FLAG_TOMBSTONE = 1;

export function recordBytes(nodeIdBytes: number, valueBytes: number): number {
  return RECORD_HEADER_BYTES + nodeIdBytes + valueBytes;
}

/** Writes a record header and node id at `offset`; the caller copies the value after it. Returns the value offset. */
export function writeRecordHeader(
  buf: Buffer,
  offset: number,
  tombstone: boolean,
  wallMs: number,
  logical: number,
  expiresAtMs: number,
  nodeId: Uint8Array,
): number {
  assert(wallMs >= 0 && wallMs <= HLC_WALL_MS_MAX, 'record wallMs out of range');
  assert(logical >= 0 && logical <= HLC_LOGICAL_MAX, 'record logical out of range');
  assert(expiresAtMs >= 0 && expiresAtMs <= EXPIRES_AT_MS_MAX, 'record expiresAtMs out of range');
  assert(nodeId.length >= 1 && nodeId.length <= NODE_ID_BYTES_MAX, 'record node id length out of range');
  buf[offset + FLAGS] = tombstone ? FLAG_TOMBSTONE : 0;
  writeU48BE(buf, offset + WALL, wallMs);
  buf[offset + LOGICAL] = logical >>> 8;
  buf[offset + LOGICAL + 1] = logical;
  writeU48BE(buf, offset + EXPIRES, expiresAtMs);
  buf[offset + NODE_ID_LENGTH] = nodeId.length;
  buf.set(nodeId, offset + RECORD_HEADER_BYTES);
  return offset + RECORD_HEADER_BYTES + nodeId.length;
}

/** A whole record in a fresh buffer. */
export function encodeRecord(
  tombstone: boolean,
  wallMs: number,
  logical: number,
  expiresAtMs: number,
  nodeId: Uint8Array,
  value: Uint8Array | undefined,
): Buffer {
  const valueBytes = tombstone || value === undefined ? 0 : value.length;
  const buf = Buffer.allocUnsafe(recordBytes(nodeId.length, valueBytes));
  const at = writeRecordHeader(buf, 0, tombstone, wallMs, logical, expiresAtMs, nodeId);
  if (valueBytes > 0) buf.set(value!, at);
  return buf;
}

/** True when `bytes` is long enough and self-consistent to be read as a record. */
export function isWellFormedRecord(bytes: Uint8Array): boolean {
  if (bytes.length < RECORD_HEADER_BYTES) return false;
  const n = bytes[NODE_ID_LENGTH];
  if (n < 1 || bytes.length < RECORD_HEADER_BYTES + n) return false;
  if ((bytes[FLAGS] & ~FLAG_TOMBSTONE) !== 0) return false;
  return !(bytes[FLAGS] & FLAG_TOMBSTONE) || bytes.length === RECORD_HEADER_BYTES + n;
}

export const isTombstone = (r: Uint8Array): boolean => (r[FLAGS] & FLAG_TOMBSTONE) !== 0;
export const wallMsOf = (r: Uint8Array): number => readU48BE(r, WALL);
export const logicalOf = (r: Uint8Array): number => (r[LOGICAL] << 8) | r[LOGICAL + 1];
export const expiresAtOf = (r: Uint8Array): number => readU48BE(r, EXPIRES);
export const nodeIdOf = (r: Uint8Array): Uint8Array =>
  r.subarray(RECORD_HEADER_BYTES, RECORD_HEADER_BYTES + r[NODE_ID_LENGTH]);
export const valueOffsetOf = (r: Uint8Array): number => RECORD_HEADER_BYTES + r[NODE_ID_LENGTH];
export const valueBytesOf = (r: Uint8Array): Uint8Array => r.subarray(valueOffsetOf(r));
/** A record without its value: what a summary carries. */
export function stampOf<T extends Uint8Array>(record: T): T {
  // A Buffer's subarray is a Buffer, a Uint8Array's a Uint8Array.
  return record.subarray(0, valueOffsetOf(record)) as T;
}

/** Live means: a value (not a tombstone) whose deadline, if any, is still ahead of `nowMs`. */
export function isLive(r: Uint8Array, nowMs: number): boolean {
  if (r[FLAGS] & FLAG_TOMBSTONE) return false;
  const expiresAt = readU48BE(r, EXPIRES);
  return expiresAt === 0 || expiresAt > nowMs;
}

/** A value (not a tombstone) with a deadline: one the cleaner will retire some day. */
export function isExpiringValue(r: Uint8Array): boolean {
  return (r[FLAGS] & FLAG_TOMBSTONE) === 0 && readU48BE(r, EXPIRES) !== 0;
}

/** A value (not a tombstone) whose deadline has passed at `nowMs`: the cleaner's to retire. */
export function isExpiredValue(r: Uint8Array, nowMs: number): boolean {
  return (r[FLAGS] & FLAG_TOMBSTONE) === 0 && !isLive(r, nowMs);
}

/**
 * Last-writer-wins order of two records (DESIGN.md "Version"): timestamp, then writer node id (bytewise),
 * then tombstone over value. The last rule only separates a value from the expiry tombstone that
 * retires it — the cleaner keeps the value's version — so every replica converges to the tombstone.
 * Returns < 0, 0 or > 0 like a comparator; 0 means the same write.
 */
export function compareVersions(a: Uint8Array, b: Uint8Array): number {
  for (let i = WALL; i < EXPIRES; i++) {
    const d = a[i] - b[i];
    if (d !== 0) return d;
  }
  const an = a[NODE_ID_LENGTH];
  const bn = b[NODE_ID_LENGTH];
  const n = Math.min(an, bn);
  for (let i = 0; i < n; i++) {
    const d = a[RECORD_HEADER_BYTES + i] - b[RECORD_HEADER_BYTES + i];
    if (d !== 0) return d;
  }
  if (an !== bn) return an - bn;
  return (a[FLAGS] & FLAG_TOMBSTONE) - (b[FLAGS] & FLAG_TOMBSTONE);
}

/** The tombstone installed when a value's TTL passes: same version and deadline, no value. */
export function expiryTombstoneOf(r: Uint8Array): Buffer {
  const end = RECORD_HEADER_BYTES + r[NODE_ID_LENGTH];
  const out = Buffer.allocUnsafe(end);
  out.set(r.subarray(0, end));
  out[FLAGS] = FLAG_TOMBSTONE;
  return out;
}

/** A copy of `r` carrying another version and deadline (EXPIRE, PERSIST: same value, new write). */
export function restampRecord(
  r: Uint8Array,
  wallMs: number,
  logical: number,
  expiresAtMs: number,
  nodeId: Uint8Array,
): Buffer {
  const value = valueBytesOf(r);
  return encodeRecord(false, wallMs, logical, expiresAtMs, nodeId, value);
}

export const ApplyOutcome = {
  Applied: 1,
  AlreadyPresent: 2,
  Superseded: 3,
  Expired: 4,
} as const;
export type ApplyOutcome = (typeof ApplyOutcome)[keyof typeof ApplyOutcome];

/**
 * The exact outcome of merging `incoming` over `current` (spec §2.6): an older version is
 * Superseded; the same version is AlreadyPresent; a newer value whose deadline has passed is
 * Expired (the caller installs its expiry tombstone); anything else is Applied.
 */
export function mergeOutcome(
  current: Uint8Array | undefined,
  incoming: Uint8Array,
  nowMs: number,
): ApplyOutcome {
  if (current !== undefined) {
    const order = compareVersions(incoming, current);
    if (order < 0) return ApplyOutcome.Superseded;
    if (order === 0) return ApplyOutcome.AlreadyPresent;
  }
  if (!(incoming[FLAGS] & FLAG_TOMBSTONE)) {
    const expiresAt = readU48BE(incoming, EXPIRES);
    if (expiresAt !== 0 && expiresAt <= nowMs) return ApplyOutcome.Expired;
  }
  return ApplyOutcome.Applied;
}

/** Human-readable form for golden files and logs: `value@12.0/n1 exp=0 "abc"`. */
export function describeRecord(r: Uint8Array | undefined): string {
  if (r === undefined) return 'none';
  const kind = isTombstone(r) ? 'tombstone' : 'value';
  const node = Buffer.from(nodeIdOf(r)).toString('utf8');
  const exp = expiresAtOf(r);
  const body = isTombstone(r) ? '' : ` ${JSON.stringify(Buffer.from(valueBytesOf(r)).toString('latin1'))}`;
  return `${kind}@${wallMsOf(r)}.${logicalOf(r)}/${node}${exp ? ` exp=${exp}` : ''}${body}`;
}
