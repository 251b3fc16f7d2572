// String commands: GET, SET and its variants, the counters, APPEND and ranges, MGET / MSET.
// Conditional and read-modify-write forms run inside the owning fragment actor (src/core/modify.ts).

import { slotOf } from '../../core/keyspace.js';
import { EXPIRES_AT_MS_MAX } from '../../core/limits.js';
import { LONG_DOUBLE_TEXT_BYTES_MAX } from '../../core/long-double.js';
import {
  ERR_NOT_FLOAT,
  ERR_TOO_LARGE,
  encodeKeys,
  LcsFlag,
  Modifier,
  ModifyFlag,
} from '../../core/modify.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { MODIFY_OPERAND_BYTES_MAX } from '../../threads/op-codec.js';
import {
  type CommandSpec,
  crossSlot,
  integerArg,
  NOT_INTEGER,
  optionName,
  replyError,
  SYNTAX_ERROR,
  writeErrorText,
} from './commands.js';
import type { RespConnection } from './connection.js';
import {
  finishParts,
  keyFits,
  keyOnlyModify,
  keysInOneSlot,
  ModifyMode,
  modifyKey,
  ReadMode,
  readKey,
  readPart,
  WriteMode,
  writeKey,
  writePart,
} from './key-access.js';

type ExpiryUnit = 'EX' | 'PX' | 'EXAT' | 'PXAT';
/** An expiry option as given: its unit and its number (undefined: not an integer). */
interface ExpiryOption {
  unit: ExpiryUnit;
  n: number | undefined;
}

const isExpiryUnit = (option: string): option is ExpiryUnit =>
  option === 'EX' || option === 'PX' || option === 'EXAT' || option === 'PXAT';

/**
 * Whether an expiry option may follow `earlier`: Redis refuses two different units, but a repeated
 * one replaces the earlier (only the last number is read: `SET k v EX x EX 10` sets a 10 s TTL).
 */
const repeatsOrFirst = (earlier: ExpiryOption | undefined, unit: ExpiryUnit): boolean =>
  earlier === undefined || earlier.unit === unit;

/** A deadline option parsed from EX / PX / EXAT / PXAT: milliseconds since the epoch. */
type Deadline = { ok: true; expiresAtMs: number } | { ok: false; error: string };

/** Turns an expiry option's number into an absolute deadline (relative ones from `nowMs`), with Redis's errors. */
export function deadlineFrom(
  unit: ExpiryUnit,
  n: number | undefined,
  command: string,
  nowMs: number,
): Deadline {
  if (n === undefined) return { ok: false, error: NOT_INTEGER };
  const invalid = { ok: false, error: `invalid expire time in '${command}' command` } as const;
  if (n <= 0) return invalid;
  const ms = unit === 'EX' || unit === 'EXAT' ? n * 1000 : n;
  const expiresAtMs = unit === 'EX' || unit === 'PX' ? nowMs + ms : ms;
  if (!Number.isSafeInteger(ms) || expiresAtMs > EXPIRES_AT_MS_MAX) return invalid;
  return { ok: true, expiresAtMs };
}

/** Checks a value against the node's limit; writes Redis's error when it is too large. */
function valueFits(conn: RespConnection, value: Uint8Array, w: RespWriter): boolean {
  if (value.length <= conn.server.settings.valueBytesMax) return true;
  writeErrorText(w, ERR_TOO_LARGE);
  return false;
}

function get(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  return readKey(conn, key, ReadMode.Get, w);
}

/** SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL] */
function set(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  const value = cmd.arg(2);
  if (!keyFits(key, w) || !valueFits(conn, value, w)) return true;
  let flags = 0;
  let expiry: ExpiryOption | undefined;
  for (let i = 3; i < cmd.argc; i++) {
    const option = optionName(cmd, i);
    if (option === 'NX' && !(flags & ModifyFlag.Xx)) flags |= ModifyFlag.Nx;
    else if (option === 'XX' && !(flags & ModifyFlag.Nx)) flags |= ModifyFlag.Xx;
    else if (option === 'GET') flags |= ModifyFlag.Get;
    else if (option === 'KEEPTTL' && expiry === undefined) flags |= ModifyFlag.KeepDeadline;
    else if (
      isExpiryUnit(option) &&
      repeatsOrFirst(expiry, option) &&
      !(flags & ModifyFlag.KeepDeadline) &&
      i + 1 < cmd.argc
    )
      expiry = { unit: option, n: integerArg(cmd, ++i) };
    else return replyError(w, SYNTAX_ERROR);
  }
  let expiresAtMs = 0;
  if (expiry !== undefined) {
    const deadline = deadlineFrom(expiry.unit, expiry.n, 'set', conn.nowMs());
    if (!deadline.ok) return replyError(w, deadline.error);
    expiresAtMs = deadline.expiresAtMs;
  }
  if (flags === 0) writeKey(conn, key, value, expiresAtMs, WriteMode.Ok, false);
  else {
    const mode = flags & ModifyFlag.Get ? ModifyMode.SetGet : ModifyMode.SetOk;
    modifyKey(conn, key, Modifier.Set, flags, value, expiresAtMs, mode);
  }
  return false;
}

/** SETEX key seconds value / PSETEX key milliseconds value */
function setWithTtl(unit: 'EX' | 'PX', command: string) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    const value = cmd.arg(3);
    if (!keyFits(key, w) || !valueFits(conn, value, w)) return true;
    const deadline = deadlineFrom(unit, integerArg(cmd, 2), command, conn.nowMs());
    if (!deadline.ok) return replyError(w, deadline.error);
    writeKey(conn, key, value, deadline.expiresAtMs, WriteMode.Ok, false);
    return false;
  };
}

function setnx(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  const value = cmd.arg(2);
  if (!keyFits(key, w) || !valueFits(conn, value, w)) return true;
  modifyKey(conn, key, Modifier.Set, ModifyFlag.Nx, value, 0, ModifyMode.SetFlag);
  return false;
}

/** GETSET key value: SET key value GET (the deadline goes, as with any plain SET). */
function getset(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  const value = cmd.arg(2);
  if (!keyFits(key, w) || !valueFits(conn, value, w)) return true;
  modifyKey(conn, key, Modifier.Set, ModifyFlag.Get, value, 0, ModifyMode.SetGet);
  return false;
}

/** GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST] */
function getex(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  let persist = false;
  let expiry: ExpiryOption | undefined;
  for (let i = 2; i < cmd.argc; i++) {
    const option = optionName(cmd, i);
    if (option === 'PERSIST' && expiry === undefined) persist = true;
    else if (isExpiryUnit(option) && !persist && repeatsOrFirst(expiry, option) && i + 1 < cmd.argc)
      expiry = { unit: option, n: integerArg(cmd, ++i) };
    else return replyError(w, SYNTAX_ERROR);
  }
  // Without options GETEX is a GET; through the actor all the same, so it orders with writes.
  if (expiry === undefined) {
    const flags = persist ? 0 : ModifyFlag.KeepDeadline;
    modifyKey(conn, key, Modifier.GetEx, flags, undefined, 0, ModifyMode.Value);
    return false;
  }
  const deadline = deadlineFrom(expiry.unit, expiry.n, 'getex', conn.nowMs());
  if (deadline.ok) {
    modifyKey(conn, key, Modifier.GetEx, 0, undefined, deadline.expiresAtMs, ModifyMode.Value);
  } else {
    // Redis reads the expiry only once it has found the key: a missing key answers a null.
    modifyKey(
      conn,
      key,
      Modifier.GetEx,
      ModifyFlag.KeepDeadline,
      undefined,
      0,
      ModifyMode.RefuseIfPresent,
    ).error = deadline.error;
  }
  return false;
}

function mget(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  for (let i = 1; i < cmd.argc; i++) if (!keyFits(cmd.arg(i), w)) return true;
  const slot = conn.defer();
  slot.values = new Array<Buffer | null>(cmd.argc - 1).fill(null);
  for (let i = 1; i < cmd.argc; i++) readPart(conn, slot, cmd.arg(i), ReadMode.MgetPart, i - 1);
  finishParts(slot);
  return false;
}

function mset(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc % 2 === 0) return replyError(w, "wrong number of arguments for 'mset' command");
  for (let i = 1; i < cmd.argc; i += 2) {
    if (!keyFits(cmd.arg(i), w) || !valueFits(conn, cmd.arg(i + 1), w)) return true;
  }
  const slot = conn.defer();
  slot.mode = WriteMode.Ok;
  for (let i = 1; i < cmd.argc; i += 2) writePart(conn, slot, cmd.arg(i), cmd.arg(i + 1), false);
  finishParts(slot);
  return false;
}

/** MSETNX: all keys must share one hash slot, so one fragment actor decides for all of them. */
function msetnx(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc % 2 === 0) return replyError(w, "wrong number of arguments for 'msetnx' command");
  const slot = slotOf(cmd.arg(1));
  for (let i = 1; i < cmd.argc; i += 2) {
    if (!keyFits(cmd.arg(i), w) || !valueFits(conn, cmd.arg(i + 1), w)) return true;
    if (slotOf(cmd.arg(i)) !== slot) return crossSlot(w);
  }
  const operand = encodePairs(cmd, 3);
  // The pairs travel in one operation, so all of them are decided at once; its operand is bounded.
  if (operand.length > MODIFY_OPERAND_BYTES_MAX) {
    return replyError(
      w,
      `MSETNX takes at most ${MODIFY_OPERAND_BYTES_MAX} bytes of keys and values after its first pair`,
    );
  }
  modifyKey(conn, cmd.arg(1), Modifier.SetAllIfNone, 0, cmd.arg(2), 0, ModifyMode.SetFlag, 0, operand);
  return false;
}

/** The key/value pairs from argument `from` on, as MSETNX's operand: (u16 key length, key, u32 value length, value)*. */
function encodePairs(cmd: RespCommand, from: number): Buffer {
  let bytes = 0;
  for (let i = from; i < cmd.argc; i += 2) bytes += 6 + cmd.argLength(i) + cmd.argLength(i + 1);
  const out = Buffer.allocUnsafe(bytes);
  let p = 0;
  for (let i = from; i < cmd.argc; i += 2) {
    p = out.writeUInt16LE(cmd.argLength(i), p);
    p += cmd.copyArg(i, out, p);
    p = out.writeUInt32LE(cmd.argLength(i + 1), p);
    p += cmd.copyArg(i + 1, out, p);
  }
  return out;
}

function strlen(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  return readKey(conn, key, ReadMode.Strlen, w);
}

function append(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w) || !valueFits(conn, cmd.arg(2), w)) return true;
  modifyKey(conn, key, Modifier.Append, 0, cmd.arg(2), 0, ModifyMode.Integer);
  return false;
}

function getrange(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  const start = integerArg(cmd, 2);
  const end = integerArg(cmd, 3);
  if (start === undefined || end === undefined) return replyError(w, NOT_INTEGER);
  return readKey(conn, key, ReadMode.GetRange, w, start, end);
}

function setrange(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  const offset = integerArg(cmd, 2);
  if (offset === undefined) return replyError(w, NOT_INTEGER);
  if (offset < 0) return replyError(w, 'offset is out of range');
  const patchBytes = cmd.argLength(3);
  // An empty patch writes nothing and answers the length whatever the offset, as in Redis.
  if (patchBytes > 0 && offset + patchBytes > conn.server.settings.valueBytesMax) {
    writeErrorText(w, ERR_TOO_LARGE);
    return true;
  }
  modifyKey(
    conn,
    key,
    Modifier.SetRange,
    0,
    cmd.arg(3),
    0,
    ModifyMode.Integer,
    patchBytes === 0 ? 0 : offset,
  );
  return false;
}

/** INCR / DECR / INCRBY / DECRBY: the delta travels as decimal text; the actor does the 64-bit math. */
function counter(sign: 1 | -1, fixed: string | undefined) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    if (!keyFits(key, w)) return true;
    let delta = fixed;
    if (delta === undefined) {
      const text = cmd.arg(2).toString('latin1');
      if (
        !/^-?(0|[1-9][0-9]{0,18})$/.test(text) ||
        BigInt(text) > 2n ** 63n - 1n ||
        BigInt(text) < -(2n ** 63n)
      ) {
        return replyError(w, NOT_INTEGER);
      }
      delta = text;
    }
    if (sign === -1) {
      if (delta === '-9223372036854775808') return replyError(w, 'decrement would overflow');
      delta = delta.startsWith('-') ? delta.slice(1) : delta === '0' ? '0' : `-${delta}`;
    }
    modifyKey(
      conn,
      key,
      Modifier.IncrBy,
      0,
      undefined,
      0,
      ModifyMode.Integer,
      0,
      Buffer.from(delta, 'latin1'),
    );
    return false;
  };
}

function incrbyfloat(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  // Too long to be a float for Redis too; refused here, since the operand travels with a 16-bit length.
  if (cmd.argLength(2) > LONG_DOUBLE_TEXT_BYTES_MAX) {
    writeErrorText(w, ERR_NOT_FLOAT);
    return true;
  }
  modifyKey(conn, key, Modifier.IncrByFloat, 0, undefined, 0, ModifyMode.Text, 0, cmd.arg(2));
  return false;
}

/**
 * LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: both keys in one hash slot, so the first
 * key's fragment actor reads both and computes the answer.
 */
function lcs(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const keys = keysInOneSlot(cmd, 1, 3, w);
  if (keys === undefined) return true;
  const [key, other] = keys;
  let flags = 0;
  let minRangeLength = 0;
  for (let i = 3; i < cmd.argc; i++) {
    const option = optionName(cmd, i);
    if (option === 'IDX') flags |= LcsFlag.Ranges;
    else if (option === 'LEN') flags |= LcsFlag.Length;
    else if (option === 'WITHMATCHLEN') flags |= LcsFlag.WithRangeLength;
    else if (option === 'MINMATCHLEN' && i + 1 < cmd.argc) {
      const n = integerArg(cmd, ++i);
      if (n === undefined) return replyError(w, NOT_INTEGER);
      // Negative counts as none; past u32 no range can reach it anyway.
      minRangeLength = Math.min(Math.max(n, 0), 0xffff_ffff);
    } else return replyError(w, SYNTAX_ERROR);
  }
  if (flags & LcsFlag.Ranges && flags & LcsFlag.Length)
    return replyError(w, 'If you want both the length and indexes, please just use IDX.');
  const mode =
    flags & LcsFlag.Ranges
      ? ModifyMode.LcsRanges
      : flags & LcsFlag.Length
        ? ModifyMode.Integer
        : ModifyMode.Value;
  modifyKey(conn, key, Modifier.Lcs, flags, undefined, 0, mode, minRangeLength, encodeKeys([other]));
  return false;
}

const READ = ['readonly', 'fast'] as const;
const WRITE = ['write', 'denyoom'] as const;
const FIRST: readonly [number, number, number] = [1, 1, 1];

export const STRING_COMMANDS: CommandSpec[] = [
  { name: 'GET', arity: 2, flags: READ, keys: FIRST, run: get },
  { name: 'SET', arity: -3, flags: WRITE, keys: FIRST, run: set },
  { name: 'SETEX', arity: 4, flags: WRITE, keys: FIRST, run: setWithTtl('EX', 'setex') },
  { name: 'PSETEX', arity: 4, flags: WRITE, keys: FIRST, run: setWithTtl('PX', 'psetex') },
  { name: 'SETNX', arity: 3, flags: [...WRITE, 'fast'], keys: FIRST, run: setnx },
  {
    name: 'GETDEL',
    arity: 2,
    flags: ['write', 'fast'],
    keys: FIRST,
    run: keyOnlyModify(Modifier.GetDel, ModifyMode.Value),
  },
  { name: 'GETSET', arity: 3, flags: [...WRITE, 'fast'], keys: FIRST, run: getset },
  { name: 'GETEX', arity: -2, flags: ['write', 'fast'], keys: FIRST, run: getex },
  { name: 'MGET', arity: -2, flags: READ, keys: [1, -1, 1], run: mget },
  { name: 'MSET', arity: -3, flags: WRITE, keys: [1, -1, 2], run: mset },
  { name: 'MSETNX', arity: -3, flags: WRITE, keys: [1, -1, 2], run: msetnx },
  { name: 'STRLEN', arity: 2, flags: READ, keys: FIRST, run: strlen },
  { name: 'APPEND', arity: 3, flags: WRITE, keys: FIRST, run: append },
  { name: 'GETRANGE', arity: 4, flags: ['readonly'], keys: FIRST, run: getrange },
  { name: 'SUBSTR', arity: 4, flags: ['readonly'], keys: FIRST, run: getrange },
  { name: 'SETRANGE', arity: 4, flags: WRITE, keys: FIRST, run: setrange },
  { name: 'INCR', arity: 2, flags: [...WRITE, 'fast'], keys: FIRST, run: counter(1, '1') },
  { name: 'DECR', arity: 2, flags: [...WRITE, 'fast'], keys: FIRST, run: counter(-1, '1') },
  { name: 'INCRBY', arity: 3, flags: [...WRITE, 'fast'], keys: FIRST, run: counter(1, undefined) },
  { name: 'DECRBY', arity: 3, flags: [...WRITE, 'fast'], keys: FIRST, run: counter(-1, undefined) },
  { name: 'LCS', arity: -3, flags: ['readonly'], keys: [1, 2, 1], run: lcs },
  { name: 'INCRBYFLOAT', arity: 3, flags: [...WRITE, 'fast'], keys: FIRST, run: incrbyfloat },
];
