// Read-modify-write operations, decided inside the fragment actor so they are atomic there
// (DESIGN.md "Faces: RESP"): conditional SET, GETDEL, GETEX, INCRBY / INCRBYFLOAT, APPEND, SETRANGE,
// EXPIRE with NX/XX/GT/LT, PERSIST, the bit commands, BITFIELD, LCS, the HyperLogLog commands, DUMP
// and RESTORE. `planModify` (and `planWithOtherKeys`, for those that read more keys of the fragment)
// is pure: given the key's live record (if any) it says what to write and what to answer, with
// Redis's semantics and error texts; the arithmetic of each lives in its own module (bits, bitfield,
// lcs, hyperloglog, long-double, dump-payload). The new version (timestamp, node) always comes
// stamped from the node that received the request.

import {
  decodeBitfieldOps,
  formatBitfieldAnswers,
  highestWrittenBit,
  readsOnly,
  runBitfield,
} from './bitfield.js';
import {
  type BitOperation,
  bitAt,
  combineBits,
  countBits,
  decodeBitArgs,
  firstBit,
  withBit,
} from './bits.js';
import { dumpPayload } from './dump-payload.js';
import {
  cacheCardinality,
  cachedCardinality,
  createHll,
  ERR_CORRUPT_HLL,
  ERR_NOT_HLL,
  type Hll,
  hllAdd,
  hllBytes,
  hllCount,
  hllMergeInto,
  hllRaiseAll,
  invalidateCache,
  isDense,
  isHll,
  newRegisterMax,
  openHll,
  registersCount,
} from './hyperloglog.js';
import { INT64_MAX, INT64_MIN, parseInt64 } from './int64.js';
import { formatLcsRanges, lcsTableBytes, longestCommonSubsequence } from './lcs.js';
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
  /** SETBIT: sets the bit at offset `arg` to `flags` (0 or 1), growing the value; answers the old bit. */
  SetBit: 13,
  /** GETBIT: the bit at offset `arg`; writes nothing. */
  GetBit: 14,
  /** BITCOUNT: the operand holds the arguments after the key (`encodeBitArgs`); writes nothing. */
  BitCount: 15,
  /** BITPOS: the operand holds the arguments after the key (`encodeBitArgs`); writes nothing. */
  BitPos: 16,
  /**
   * BITOP: flags hold the BitOperation, the operand the source keys (`encodeKeys`), which must belong
   * to this fragment; the key gets the result under the stamp's version (no deadline), or loses its
   * value when the result is empty. Answers the result's length.
   */
  BitOp: 17,
  /**
   * LCS: the operand holds the second key (`encodeKeys`), which must belong to this fragment; flags
   * are LcsFlag bits, `arg` the least range length IDX reports. Writes nothing.
   */
  Lcs: 18,
  /**
   * BITFIELD / BITFIELD_RO: the operand holds the subcommands (`encodeBitfieldOps`). Writes, keeping
   * the deadline, unless every subcommand is a GET; answers each one's integer or null.
   */
  Bitfield: 19,
  /** PFADD: the operand holds the elements' registers and counts (`encodeHllPatterns`). */
  PfAdd: 20,
  /**
   * PFCOUNT: alone, answers the key's cardinality, caching it in the value (a write); with flag
   * PfFlag.Union, of the union of the key and the operand's keys (`encodeKeys`), writing nothing.
   */
  PfCount: 21,
  /** PFMERGE: the key (the destination, a source too) takes the union of itself and the operand's keys. */
  PfMerge: 22,
  /** DUMP: answers the value's DUMP payload (`dumpPayload`); writes nothing. */
  Dump: 23,
  /**
   * RESTORE: the record carries the value and deadline; flag Nx unless REPLACE (a live key is
   * BUSYKEY). An operand is the error the payload or TTL earned, answered only when the key is free.
   */
  Restore: 24,
} as const;
export type Modifier = (typeof Modifier)[keyof typeof Modifier];
/** The highest Modifier: decoders refuse anything past it. */
export const MODIFIER_MAX: Modifier = Modifier.Restore;

/** PFCOUNT's flags. */
export const PfFlag = { Union: 1 } as const;

/** Modifiers that also read the keys listed in their operand (`encodeKeys`). */
export const readsOtherKeys = (modifier: Modifier): boolean =>
  modifier === Modifier.BitOp ||
  modifier === Modifier.Lcs ||
  modifier === Modifier.PfCount ||
  modifier === Modifier.PfMerge;

/** LCS's options (the `flags` of a Modifier.Lcs operation). */
export const LcsFlag = { Length: 1, Ranges: 2, WithRangeLength: 4 } as const;

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
export const ERR_SYNTAX = 'ERR syntax error';
export const ERR_BUSY_KEY = 'BUSYKEY Target key name already exists.';
export const ERR_BIT_ARGUMENT = 'ERR The bit argument must be 1 or 0.';

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
    case Modifier.SetBit:
      return planSetBit(req, live, valueBytesMax);
    case Modifier.GetBit:
      return integer(live === undefined ? 0 : bitAt(valueBytesOf(live), req.arg));
    case Modifier.BitCount:
      return planBitCount(req, live);
    case Modifier.BitPos:
      return planBitPos(req, live);
    case Modifier.Bitfield:
      return planBitfield(req, live, valueBytesMax);
    case Modifier.PfAdd:
      return planPfAdd(req, live);
    case Modifier.Dump: {
      if (live === undefined) return plan(ModifyAnswer.Missing);
      return plan(
        ModifyAnswer.Done,
        undefined,
        withValue(req.record, undefined, dumpPayload(valueBytesOf(live))),
      );
    }
    case Modifier.Restore:
      // Redis looks for the key before it reads the TTL or the payload.
      if (req.flags & ModifyFlag.Nx && live !== undefined)
        return plan(ModifyAnswer.Refused, undefined, undefined, ERR_BUSY_KEY);
      if (req.operand !== undefined)
        return plan(ModifyAnswer.Refused, undefined, undefined, Buffer.from(req.operand).toString('utf8'));
      return plan(ModifyAnswer.Done, req.record);
    case Modifier.SetAllIfNone:
    case Modifier.Rename:
    case Modifier.Copy:
    case Modifier.BitOp:
    case Modifier.Lcs:
    case Modifier.PfCount:
    case Modifier.PfMerge:
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

/**
 * A modification that also reads the keys in its operand (`readsOtherKeys`): `others` holds their
 * live values in order (undefined: missing), read by the fragment, which owns them all.
 */
export function planWithOtherKeys(
  req: ModifyRequest,
  live: Uint8Array | undefined,
  others: ReadonlyArray<Uint8Array | undefined>,
  valueBytesMax: number,
): ModifyPlan {
  switch (req.modifier) {
    case Modifier.BitOp:
      return planBitOp(
        req,
        live,
        combineBits(
          req.flags as BitOperation,
          others.map((v) => v ?? EMPTY),
        ),
      );
    case Modifier.Lcs:
      return planLcs(req, live, others[0] ?? EMPTY, valueBytesMax);
    case Modifier.PfCount:
      return req.flags & PfFlag.Union ? planPfUnionCount(live, others) : planPfCount(req, live);
    case Modifier.PfMerge:
      return planPfMerge(req, live, others);
    default:
      return plan(ModifyAnswer.Refused, undefined, undefined, 'ERR this command reads no other keys');
  }
}

/** The value bytes of `record`, or undefined. */
const liveValue = (record: Uint8Array | undefined) =>
  record === undefined ? undefined : valueBytesOf(record);

function planPfAdd(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  let hll: Hll;
  let changed = 0;
  if (live === undefined) {
    hll = createHll();
    changed = 1;
  } else {
    const value = valueBytesOf(live);
    if (!isHll(value)) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_HLL);
    hll = openHll(value);
  }
  const added = hllAdd(hll, req.operand ?? EMPTY);
  if (added < 0) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_CORRUPT_HLL);
  changed += added;
  if (changed === 0) return integer(0);
  invalidateCache(hll);
  return plan(ModifyAnswer.Integer, withValue(req.record, live, hllBytes(hll)), undefined, '1');
}

/** PFCOUNT of one key: the cached cardinality, or a fresh one, cached in the value as Redis does. */
function planPfCount(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  const value = liveValue(live);
  if (value === undefined) return integer(0);
  if (!isHll(value)) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_HLL);
  const hll = openHll(value);
  const cached = cachedCardinality(hll);
  if (cached !== undefined) return integer(cached);
  const cardinality = hllCount(hll);
  if (cardinality === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_CORRUPT_HLL);
  cacheCardinality(hll, cardinality);
  return plan(
    ModifyAnswer.Integer,
    withValue(req.record, live, hllBytes(hll)),
    undefined,
    String(cardinality),
  );
}

/**
 * The registers of the union of `values` (missing ones skipped), with whether any was dense; a
 * Redis error when one is not a HyperLogLog or is corrupt.
 */
function unionOf(values: ReadonlyArray<Uint8Array | undefined>) {
  const max = newRegisterMax();
  let dense = false;
  for (const value of values) {
    if (value === undefined) continue;
    if (!isHll(value)) return ERR_NOT_HLL;
    const hll = openHll(value);
    dense ||= isDense(hll);
    if (!hllMergeInto(max, hll)) return ERR_CORRUPT_HLL;
  }
  return { max, dense };
}

/** PFCOUNT of several keys: the union's cardinality; nothing is written. */
function planPfUnionCount(
  live: Uint8Array | undefined,
  others: ReadonlyArray<Uint8Array | undefined>,
): ModifyPlan {
  const union = unionOf([liveValue(live), ...others]);
  if (typeof union === 'string') return plan(ModifyAnswer.Refused, undefined, undefined, union);
  return integer(registersCount(union.max));
}

/** PFMERGE: the destination (a source too) takes the union, dense if any source was. */
function planPfMerge(
  req: ModifyRequest,
  live: Uint8Array | undefined,
  others: ReadonlyArray<Uint8Array | undefined>,
): ModifyPlan {
  const union = unionOf([liveValue(live), ...others]);
  if (typeof union === 'string') return plan(ModifyAnswer.Refused, undefined, undefined, union);
  const destination = live === undefined ? createHll() : openHll(valueBytesOf(live));
  if (!hllRaiseAll(destination, union.max, union.dense))
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_CORRUPT_HLL);
  return plan(ModifyAnswer.Done, withValue(req.record, live, hllBytes(destination)));
}

/** BITOP's write, given its result (computed from the source keys). */
function planBitOp(req: ModifyRequest, live: Uint8Array | undefined, result: Uint8Array): ModifyPlan {
  const answer = String(result.length);
  if (result.length > 0) {
    return plan(ModifyAnswer.Integer, withValue(req.record, undefined, result), undefined, answer);
  }
  // An empty result deletes the key, as in Redis.
  return plan(
    ModifyAnswer.Integer,
    live === undefined ? undefined : tombstoneOf(req.record),
    undefined,
    answer,
  );
}

/**
 * LCS over the key's value and the second key's (`other`; a missing key is empty). Answers the
 * subsequence as a value record, its length, or its ranges as text (`formatLcsRanges`).
 */
function planLcs(
  req: ModifyRequest,
  live: Uint8Array | undefined,
  other: Uint8Array,
  valueBytesMax: number,
): ModifyPlan {
  const a = live === undefined ? EMPTY : valueBytesOf(live);
  // Redis bounds the table by its largest string (proto-max-bulk-len); Tessera by its largest value.
  if (lcsTableBytes(a.length, other.length) > valueBytesMax)
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_LCS_TABLE);
  const options = {
    length: (req.flags & LcsFlag.Length) !== 0,
    ranges: (req.flags & LcsFlag.Ranges) !== 0,
    withRangeLength: (req.flags & LcsFlag.WithRangeLength) !== 0,
    minRangeLength: req.arg,
  };
  const result = longestCommonSubsequence(a, other, options);
  if (options.ranges)
    return plan(ModifyAnswer.Text, undefined, undefined, formatLcsRanges(result, options.withRangeLength));
  if (options.length) return integer(result.length);
  return plan(ModifyAnswer.Done, undefined, withValue(req.record, undefined, result.subsequence ?? EMPTY));
}

const ERR_LCS_TABLE = 'ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len';

/** Keys as an operand: (u16 LE key length, key)*. */
export function encodeKeys(keys: readonly Uint8Array[]): Buffer {
  const out = Buffer.allocUnsafe(keys.reduce((n, k) => n + 2 + k.length, 0));
  let p = 0;
  for (const key of keys) {
    p = out.writeUInt16LE(key.length, p);
    out.set(key, p);
    p += key.length;
  }
  return out;
}

/** Decodes `encodeKeys`' operand; undefined if malformed. */
export function decodeKeys(operand: Uint8Array | undefined): Buffer[] | undefined {
  const keys: Buffer[] = [];
  if (operand === undefined) return keys;
  const buf = Buffer.from(operand.buffer, operand.byteOffset, operand.byteLength);
  let p = 0;
  while (p < buf.length) {
    if (p + 2 > buf.length) return undefined;
    const n = buf.readUInt16LE(p);
    if (p + 2 + n > buf.length) return undefined;
    keys.push(buf.subarray(p + 2, p + 2 + n));
    p += 2 + n;
  }
  return keys;
}

function planBitfield(req: ModifyRequest, live: Uint8Array | undefined, valueBytesMax: number): ModifyPlan {
  const ops = decodeBitfieldOps(req.operand);
  if (ops === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, 'ERR malformed BITFIELD');
  const old = live === undefined ? EMPTY : valueBytesOf(live);
  if (readsOnly(ops))
    return plan(
      ModifyAnswer.Text,
      undefined,
      undefined,
      formatBitfieldAnswers(runBitfield(Buffer.from(old), ops)),
    );
  // A write first grows the value to its highest bit, as Redis does, whatever the subcommands answer.
  const lastByte = Math.floor(highestWrittenBit(ops) / 8);
  if (lastByte >= Math.max(old.length, valueBytesMax))
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_TOO_LARGE);
  const value = Buffer.alloc(Math.max(old.length, lastByte + 1));
  value.set(old, 0);
  const answers = runBitfield(value, ops);
  return plan(
    ModifyAnswer.Text,
    withValue(req.record, live, value),
    undefined,
    formatBitfieldAnswers(answers),
  );
}

function planSetBit(req: ModifyRequest, live: Uint8Array | undefined, valueBytesMax: number): ModifyPlan {
  const old = live === undefined ? EMPTY : valueBytesOf(live);
  const offset = req.arg;
  if (Math.floor(offset / 8) >= Math.max(old.length, valueBytesMax))
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_TOO_LARGE);
  const value = withBit(old, offset, req.flags === 1 ? 1 : 0);
  return plan(
    ModifyAnswer.Integer,
    withValue(req.record, live, value),
    undefined,
    String(bitAt(old, offset)),
  );
}

/** BITCOUNT key [start end [BYTE | BIT]]: as in Redis 7.0, a missing key answers 0 whatever follows it. */
function planBitCount(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  const given = decodeBitArgs(req.operand);
  if (given === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_MALFORMED_BIT_ARGS);
  if (live === undefined) return integer(0);
  const { count, args } = given;
  if (count === 0) {
    const value = valueBytesOf(live);
    return integer(value.length === 0 ? 0 : countBits(value, 0, value.length * 8 - 1));
  }
  if (count !== 2 && count !== 3) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_SYNTAX);
  const start = parseInt64(args[0]);
  const end = parseInt64(args[1]);
  if (start === undefined || end === undefined)
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_INTEGER);
  // Both from the end and the wrong way round: empty, before any clamping or even the unit's
  // check (Redis's shortcut: `BITCOUNT k -1 -2 junk` answers 0).
  if (start < 0n && end < 0n && start > end) return integer(0);
  const unit = count === 3 ? bitUnit(args[2]) : BitUnit.Byte;
  if (unit === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_SYNTAX);
  const value = valueBytesOf(live);
  const range = bitRange(value.length, start, end, unit);
  return integer(range === undefined ? 0 : countBits(value, range[0], range[1]));
}

/** BITPOS key bit [start [end [BYTE | BIT]]]: the bit is checked before the key, the range after. */
function planBitPos(req: ModifyRequest, live: Uint8Array | undefined): ModifyPlan {
  const given = decodeBitArgs(req.operand);
  if (given === undefined || given.count === 0)
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_MALFORMED_BIT_ARGS);
  const { count, args } = given;
  const wanted = parseInt64(args[0]);
  if (wanted === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_INTEGER);
  if (wanted !== 0n && wanted !== 1n)
    return plan(ModifyAnswer.Refused, undefined, undefined, ERR_BIT_ARGUMENT);
  const bit = wanted === 1n ? 1 : 0;
  // A missing key is an endless run of zero bits.
  if (live === undefined) return integer(bit === 1 ? -1 : 0);
  const value = valueBytesOf(live);
  let range: [number, number] | undefined;
  let endGiven = false;
  if (count === 1) range = value.length === 0 ? undefined : [0, value.length * 8 - 1];
  else if (count <= 4) {
    const start = parseInt64(args[1]);
    if (start === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_INTEGER);
    const unit = count === 4 ? bitUnit(args[3]) : BitUnit.Byte;
    if (unit === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_SYNTAX);
    let end = BigInt(value.length - 1);
    if (count >= 3) {
      const given = parseInt64(args[2]);
      if (given === undefined) return plan(ModifyAnswer.Refused, undefined, undefined, ERR_NOT_INTEGER);
      end = given;
      endGiven = true;
    }
    range = bitRange(value.length, start, end, unit);
  } else return plan(ModifyAnswer.Refused, undefined, undefined, ERR_SYNTAX);
  if (range === undefined) return integer(-1);
  const found = firstBit(value, bit, range[0], range[1]);
  if (found !== -1) return integer(found);
  // No clear bit up to the end of the value: the zeros that follow it start right after, unless
  // the client named the end of the range.
  return integer(bit === 0 && !endGiven ? range[1] + 1 : -1);
}

const ERR_MALFORMED_BIT_ARGS = 'ERR malformed bit command arguments';

const BitUnit = { Byte: 1, Bit: 2 } as const;
type BitUnit = (typeof BitUnit)[keyof typeof BitUnit];

function bitUnit(arg: Uint8Array): BitUnit | undefined {
  const name = Buffer.from(arg).toString('latin1').toUpperCase();
  return name === 'BYTE' ? BitUnit.Byte : name === 'BIT' ? BitUnit.Bit : undefined;
}

/**
 * Redis's start / end of BITCOUNT and BITPOS, in bytes or bits (negative from the end, clamped to
 * the value), as an inclusive range of bits; undefined when empty.
 */
function bitRange(length: number, start: bigint, end: bigint, unit: BitUnit): [number, number] | undefined {
  const total = BigInt(unit === BitUnit.Bit ? length * 8 : length);
  let first = start < 0n ? start + total : start;
  let last = end < 0n ? end + total : end;
  if (first < 0n) first = 0n;
  if (last < 0n) last = 0n;
  if (last >= total) last = total - 1n;
  if (first > last) return undefined;
  return unit === BitUnit.Bit ? [Number(first), Number(last)] : [Number(first) * 8, Number(last) * 8 + 7];
}

const integer = (n: number): ModifyPlan => plan(ModifyAnswer.Integer, undefined, undefined, String(n));

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
