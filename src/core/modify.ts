// Read-modify-write operations, decided inside the fragment actor so they are atomic there
// (DESIGN.md "Faces: RESP"): conditional SET, GETDEL, GETEX, INCRBY / INCRBYFLOAT, APPEND, SETRANGE,
// EXPIRE with NX/XX/GT/LT, PERSIST. `planModify` is pure: given the key's live record (if any) it
// says what to write and what to answer, with Redis's semantics and error texts. The new version
// (timestamp, node) always comes stamped from the node that received the request.

import {
  addLongDoubles,
  formatLongDouble,
  LONG_DOUBLE_INFINITE,
  type LongDouble,
  parseLongDouble,
} from './long-double.js';
import { encodeRecord, expiresAtOf, logicalOf, nodeIdOf, valueBytesOf, wallMsOf } from './record.js';

export const Modifier = {
  /** SET with NX / XX / GET / KEEPTTL: the record carries the new value and deadline. */
  Set: 1,
  /** GETDEL: the record carries the stamp of the tombstone to write. */
  GetDel: 2,
  /** GETEX: the record carries the new deadline (flag KEEP_DEADLINE: plain GET semantics). */
  GetEx: 3,
  /** INCRBY: the operand is the decimal delta. */
  IncrBy: 4,
  /** INCRBYFLOAT: the operand is the decimal delta. */
  IncrByFloat: 5,
  /** APPEND: the record's value is the suffix. */
  Append: 6,
  /** SETRANGE: the record's value is written at byte `arg`. */
  SetRange: 7,
  /** EXPIRE family: the record carries the new deadline; flags carry NX / XX / GT / LT. */
  Expire: 8,
  /** PERSIST: removes the deadline. */
  Persist: 9,
  /**
   * MSETNX: the key and record are the first pair, the operand holds the others (`decodePairs`);
   * all are written, with the stamp's version, only if none of the keys exists. Every key must
   * belong to this fragment.
   */
  SetAllIfNone: 10,
  /**
   * RENAME / RENAMENX (flag Nx): the operand is the new key, which must belong to this fragment; the
   * record carries the stamp. The value and its deadline move to the new key under the stamp's
   * version and the old key gets a tombstone, both or neither.
   */
  Rename: 11,
  /** COPY (flag Nx unless REPLACE): as Rename, but the key keeps its value. */
  Copy: 12,
} as const;
export type Modifier = (typeof Modifier)[keyof typeof Modifier];
/** The highest Modifier: decoders refuse anything past it. */
export const MODIFIER_MAX: Modifier = Modifier.Copy;

/** Modifier flags (a bit set). */
export const ModifyFlag = {
  /** Only if the key does not exist (SET NX) / has no deadline (EXPIRE NX). */
  Nx: 1,
  /** Only if the key exists (SET XX) / has a deadline (EXPIRE XX). */
  Xx: 2,
  /** EXPIRE GT: only if the new deadline is later (no deadline counts as infinite). */
  Gt: 4,
  /** EXPIRE LT: only if the new deadline is earlier. */
  Lt: 8,
  /** SET GET: answer with the old value. */
  Get: 16,
  /** SET KEEPTTL: keep the key's deadline; GETEX without options: change nothing. */
  KeepDeadline: 32,
} as const;

/** What a planned modification answers (the fragment maps it onto its reply). */
export const ModifyAnswer = {
  /** The write (if any) applies; `record` is the value to return, if any. */
  Done: 1,
  /** A condition failed: nothing written; `record` is the old value for SET … GET. */
  NotDone: 2,
  /** The key does not exist; nothing written. */
  Missing: 3,
  /** Reply with the integer in `text` (once the write, if any, applies). */
  Integer: 4,
  /** Reply with the bulk string in `text` (INCRBYFLOAT). */
  Text: 5,
  /** Refused with the Redis error in `text` (not an integer, too large…); nothing written. */
  Refused: 6,
} as const;
export type ModifyAnswer = (typeof ModifyAnswer)[keyof typeof ModifyAnswer];

export interface ModifyRequest {
  modifier: Modifier;
  flags: number;
  /** SETRANGE offset. */
  arg: number;
  /** INCRBY / INCRBYFLOAT delta, as the client sent it. */
  operand: Uint8Array | undefined;
  /** Stamp (version, node, deadline) and, for SET / APPEND / SETRANGE, the value bytes. */
  record: Uint8Array;
}

export interface ModifyPlan {
  answer: ModifyAnswer;
  /** Record to merge under LWW, or undefined when nothing is written. */
  write: Uint8Array | undefined;
  /** Value record to return (old value, GETDEL / GETEX result), a view valid only now. */
  record: Uint8Array | undefined;
  text: string;
}

export const ERR_NOT_INTEGER = 'ERR value is not an integer or out of range';
export const ERR_OVERFLOW = 'ERR increment or decrement would overflow';
export const ERR_NOT_FLOAT = 'ERR value is not a valid float';
export const ERR_FLOAT_RESULT = 'ERR increment would produce NaN or Infinity';
export const ERR_TOO_LARGE = 'ERR string exceeds maximum allowed size (proto-max-bulk-len)';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
/** Longest canonical int64 in decimal, sign included (Redis's string2ll limit). */
const INT64_DIGITS_MAX = 20;

const plan = (answer: ModifyAnswer, write?: Uint8Array, record?: Uint8Array, text = ''): ModifyPlan => ({
  answer,
  write,
  record,
  text,
});

/** Decides a read-modify-write over the key's live record (`live`, undefined if absent or expired). */
export function planModify(
  req: ModifyRequest,
  live: Uint8Array | undefined,
  valueBytesMax: number,
): ModifyPlan {
  switch (req.modifier) {
    case Modifier.Set:
      return planSet(req, live);
    case Modifier.GetDel:
      if (live === undefined) return plan(ModifyAnswer.Missing);
      return plan(ModifyAnswer.Done, tombstoneOf(req.record), live);
    case Modifier.GetEx:
      if (live === undefined) return plan(ModifyAnswer.Missing);
      if (req.flags & ModifyFlag.KeepDeadline) return plan(ModifyAnswer.Done, undefined, live);
      return plan(ModifyAnswer.Done, withDeadlineOf(req.record, live, expiresAtOf(req.record)), live);
    case Modifier.IncrBy:
      return planIncrBy(req, live);
    case Modifier.IncrByFloat:
      return planIncrByFloat(req, live);
    case Modifier.Append:
      return planAppend(req, live, valueBytesMax);
    case Modifier.SetRange:
      return planSetRange(req, live, valueBytesMax);
    case Modifier.Expire:
      return planExpire(req, live);
    case Modifier.Persist:
      if (live === undefined || expiresAtOf(live) === 0)
        return plan(ModifyAnswer.Integer, undefined, undefined, '0');
      return plan(ModifyAnswer.Integer, withDeadlineOf(req.record, live, 0), undefined, '1');
    case Modifier.SetAllIfNone:
    case Modifier.Rename:
    case Modifier.Copy:
      // Multi-key: the fragment decides it (it must look at every key); see FragmentCore.
      return plan(
        ModifyAnswer.Refused,
        undefined,
        undefined,
        'ERR a multi-key command must be planned by the fragment',
      );
  }
}

/** MSETNX's operand: (u16 LE key length, key, u32 LE value length, value)*; undefined if malformed. */
export function decodePairs(
  operand: Uint8Array | undefined,
): Array<[key: Buffer, value: Buffer]> | undefined {
  const pairs: Array<[Buffer, Buffer]> = [];
  if (operand === undefined) return pairs;
  const buf = Buffer.from(operand.buffer, operand.byteOffset, operand.byteLength);
  let p = 0;
  while (p < buf.length) {
    if (p + 2 > buf.length) return undefined;
    const keyBytes = buf.readUInt16LE(p);
    if (p + 2 + keyBytes + 4 > buf.length) return undefined;
    const key = buf.subarray(p + 2, p + 2 + keyBytes);
    p += 2 + keyBytes;
    const valueBytes = buf.readUInt32LE(p);
    if (p + 4 + valueBytes > buf.length) return undefined;
    pairs.push([key, buf.subarray(p + 4, p + 4 + valueBytes)]);
    p += 4 + valueBytes;
  }
  return pairs;
}

function planSet(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  const old = req.flags & ModifyFlag.Get ? live : undefined;
  if (req.flags & ModifyFlag.Nx && live !== undefined) return plan(ModifyAnswer.NotDone, undefined, old);
  if (req.flags & ModifyFlag.Xx && live === undefined) return plan(ModifyAnswer.NotDone, undefined, old);
  let write = req.record;
  if (req.flags & ModifyFlag.KeepDeadline && live !== undefined) {
    write = encodeRecord(
      false,
      wallMsOf(write),
      logicalOf(write),
      expiresAtOf(live),
      nodeIdOf(write),
      valueBytesOf(write),
    );
  }
  return plan(ModifyAnswer.Done, write, old);
}

function planIncrBy(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  const delta = req.operand === undefined ? undefined : parseInt64(req.operand);
  if (delta === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_INTEGER);
  const current = live === undefined ? 0n : parseInt64(valueBytesOf(live));
  if (current === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_INTEGER);
  const next = current + delta;
  if (next < INT64_MIN || next > INT64_MAX)
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_OVERFLOW);
  const text = next.toString();
  return plan(
    ModifyAnswer.Integer,
    withValue(req.record, live, Buffer.from(text, 'latin1')),
    undefined,
    text,
  );
}

function planIncrByFloat(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  // Redis parses the value it holds first, then the increment; either one bad is "not a valid float".
  const current = live === undefined ? NO_VALUE : parseLongDouble(valueBytesOf(live));
  const delta = req.operand === undefined ? undefined : parseLongDouble(req.operand);
  if (current === undefined || delta === undefined)
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_FLOAT);
  const sum =
    current === LONG_DOUBLE_INFINITE || delta === LONG_DOUBLE_INFINITE
      ? LONG_DOUBLE_INFINITE
      : addLongDoubles(current, delta);
  if (sum === LONG_DOUBLE_INFINITE) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_FLOAT_RESULT);
  const text = formatLongDouble(sum);
  return plan(ModifyAnswer.Text, withValue(req.record, live, Buffer.from(text, 'latin1')), undefined, text);
}

/** A missing key counts as 0. */
const NO_VALUE: LongDouble = { significand: 0n, exponent: 0 };

function planAppend(req: ModifyRequest, live: Uint8Array | undefined, valueBytesMax: number): ModifyPlan {
  const suffix = valueBytesOf(req.record);
  const prefix = live === undefined ? EMPTY : valueBytesOf(live);
  const length = prefix.length + suffix.length;
  if (length > valueBytesMax) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_TOO_LARGE);
  const value = Buffer.allocUnsafe(length);
  value.set(prefix, 0);
  value.set(suffix, prefix.length);
  return plan(ModifyAnswer.Integer, withValue(req.record, live, value), undefined, String(length));
}

function planSetRange(req: ModifyRequest, live: Uint8Array | undefined, valueBytesMax: number): ModifyPlan {
  const patch = valueBytesOf(req.record);
  const old = live === undefined ? EMPTY : valueBytesOf(live);
  if (patch.length === 0) return plan(ModifyAnswer.Integer, undefined, undefined, String(old.length));
  const length = Math.max(old.length, req.arg + patch.length);
  if (length > valueBytesMax) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_TOO_LARGE);
  const value = Buffer.alloc(length);
  value.set(old, 0);
  value.set(patch, req.arg);
  return plan(ModifyAnswer.Integer, withValue(req.record, live, value), undefined, String(length));
}

function planExpire(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  const no = plan(ModifyAnswer.Integer, undefined, undefined, '0');
  if (live === undefined) return no;
  const current = expiresAtOf(live);
  const next = expiresAtOf(req.record);
  const f = req.flags;
  if (f & ModifyFlag.Nx && current !== 0) return no;
  if (f & ModifyFlag.Xx && current === 0) return no;
  // A key without a deadline has an infinite one: GT never beats it, LT always does.
  if (f & ModifyFlag.Gt && (current === 0 || next <= current)) return no;
  if (f & ModifyFlag.Lt && current !== 0 && next >= current) return no;
  // A deadline already past deletes the key, as Redis does: the fragment's merge sees the write as
  // expired on arrival and installs its expiry tombstone instead.
  return plan(ModifyAnswer.Integer, withDeadlineOf(req.record, live, next), undefined, '1');
}

const EMPTY = Buffer.alloc(0);

/** A tombstone carrying the stamp's version and node. */
function tombstoneOf(stamp: Uint8Array): Buffer {
  return encodeRecord(true, wallMsOf(stamp), logicalOf(stamp), 0, nodeIdOf(stamp), undefined);
}

/** The stamp's version and node over `live`'s value, with `expiresAtMs` as the deadline. */
function withDeadlineOf(stamp: Uint8Array, live: Uint8Array, expiresAtMs: number): Buffer {
  return encodeRecord(
    false,
    wallMsOf(stamp),
    logicalOf(stamp),
    expiresAtMs,
    nodeIdOf(stamp),
    valueBytesOf(live),
  );
}

/** The stamp's version and node with a new value; the key keeps its deadline (Redis INCR, APPEND…). */
function withValue(stamp: Uint8Array, live: Uint8Array | undefined, value: Uint8Array): Buffer {
  const expiresAtMs = live === undefined ? 0 : expiresAtOf(live);
  return encodeRecord(false, wallMsOf(stamp), logicalOf(stamp), expiresAtMs, nodeIdOf(stamp), value);
}

/** A canonical signed 64-bit decimal, as Redis's string2ll accepts it; undefined otherwise. */
export function parseInt64(bytes: Uint8Array): bigint | undefined {
  const n = bytes.length;
  if (n === 0 || n > INT64_DIGITS_MAX) return undefined;
  let i = 0;
  const negative = bytes[0] === 0x2d;
  if (negative) i = 1;
  if (i === n) return undefined;
  // No leading zeros (except "0" itself), no "+", no spaces: the canonical form only.
  if (bytes[i] === 0x30 && n - i > 1) return undefined;
  if (negative && bytes[i] === 0x30) return undefined;
  for (let j = i; j < n; j++) if (bytes[j] < 0x30 || bytes[j] > 0x39) return undefined;
  const value = BigInt(Buffer.from(bytes).toString('latin1'));
  return value < INT64_MIN || value > INT64_MAX ? undefined : value;
}
