// How RESP commands read and write keys. A read is answered on the main thread from the store's
// snapshot when the fragment has nothing uncommitted and this connection has no write of its own
// still in flight (a pipeline must read its own writes); otherwise it travels to the owning worker
// behind those writes. Results come back to the module-level handlers below with the reply slot as
// token; each handler formats its command's reply by the slot's `mode`.

import { assert } from '../../core/assert.js';
import { parseBitfieldAnswers } from '../../core/bitfield.js';
import type { WallClock } from '../../core/clock.js';
import type { TesseraError } from '../../core/errors.js';
import { parseInt64 } from '../../core/int64.js';
import { slotOf } from '../../core/keyspace.js';
import { parseLcsRanges } from '../../core/lcs.js';
import { KEY_BYTES_MAX } from '../../core/limits.js';
import { Modifier, ModifyFlag } from '../../core/modify.js';
import { OpKind, Priority, Reply } from '../../core/ops.js';
import { expiresAtOf, valueBytesOf } from '../../core/record.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { RESULT_HEADER_BYTES, resultHadPrior, resultStatus } from '../../threads/op-codec.js';
import { blankWriteSpec, NOT_LOCAL, releaseWriteSpec, type WriteSpec } from '../key-router.js';
import { resultError } from '../result-error.js';
import type { ResultHandler } from '../worker-link.js';
import { crossSlot, failureText, writeErrorText, writeFailure } from './commands.js';
import type { ReplySlot, RespConnection } from './connection.js';

// Reply modes: what a deferred reply answers, kept in its slot (ReplySlot.mode). The three kinds
// take values of their own, so the types are distinct and a write's mode cannot be passed to a read.

/** What a read answers, given the key's live record (or none). */
export const ReadMode = {
  Get: 1,
  Strlen: 2,
  Type: 3,
  Exists: 4,
  Ttl: 5,
  Pttl: 6,
  ExpireTime: 7,
  PexpireTime: 8,
  GetRange: 9,
  /** One position of MGET. */
  MgetPart: 10,
  /** One position of EXISTS with several keys. */
  ExistsPart: 11,
  /** MEMORY USAGE: the key's length (in `a`) plus its stored record's, or null. */
  MemoryUsage: 12,
  /** OBJECT ENCODING / REFCOUNT / FREQ / IDLETIME: null for a missing key (`formatObject`). */
  ObjectEncoding: 13,
  ObjectRefcount: 14,
  ObjectFreq: 15,
  ObjectIdletime: 16,
} as const;
export type ReadMode = (typeof ReadMode)[keyof typeof ReadMode];

const HEADER_ONLY_MODES = new Set<number>([
  ReadMode.Ttl,
  ReadMode.Pttl,
  ReadMode.ExpireTime,
  ReadMode.PexpireTime,
  ReadMode.Type,
  ReadMode.Exists,
  ReadMode.ExistsPart,
]);

/** Checks a key argument's size; writes the error and returns false when it is too long. */
export function keyFits(key: Uint8Array, w: RespWriter): boolean {
  if (key.length <= KEY_BYTES_MAX) return true;
  w.error(`key is ${key.length} bytes; the limit is ${KEY_BYTES_MAX}`);
  return false;
}

/**
 * Arguments `from` to `to` (exclusive) as keys that fit and share one hash slot, as Redis Cluster
 * requires of a multi-key command; undefined, with the error written, otherwise.
 */
export function keysInOneSlot(
  cmd: RespCommand,
  from: number,
  to: number,
  w: RespWriter,
): Uint8Array[] | undefined {
  const slot = slotOf(cmd.arg(from));
  const keys: Uint8Array[] = [];
  for (let i = from; i < to; i++) {
    const key = cmd.arg(i);
    if (!keyFits(key, w)) return undefined;
    if (slotOf(key) !== slot) {
      crossSlot(w);
      return undefined;
    }
    keys.push(key);
  }
  return keys;
}

/**
 * Reads `key` for `mode`. Answers into `w` (returns true) when the snapshot can serve it; otherwise
 * sends it to the worker with a reply slot and returns false.
 */
export function readKey(
  conn: RespConnection,
  key: Uint8Array,
  mode: ReadMode,
  w: RespWriter,
  a = 0,
  b = 0,
): boolean {
  const dispatcher = conn.server.keys;
  const fragment = dispatcher.fragmentOf(key);
  if (conn.writesInFlight === 0) {
    const local = dispatcher.readLocal(fragment, key, conn.readReplica);
    if (local !== NOT_LOCAL) {
      conn.server.stats.lookup(local !== undefined);
      formatRead(w, mode, local, a, b, dispatcher.turnClock);
      return true;
    }
  }
  const slot = conn.defer();
  slot.mode = mode;
  slot.a = a;
  slot.b = b;
  const error = dispatcher.submitRead(
    fragment,
    key,
    Priority.Default,
    HEADER_ONLY_MODES.has(mode),
    readHandler,
    slot,
    conn.readReplica,
  );
  if (error !== undefined) failSlot(slot, error);
  return false;
}

/**
 * One position of a multi-key read (MGET, EXISTS): answered from the snapshot into the slot's
 * accumulator when possible, else sent to the worker as a part of `slot`.
 */
export function readPart(
  conn: RespConnection,
  slot: ReplySlot,
  key: Uint8Array,
  mode: ReadMode,
  index: number,
): void {
  const dispatcher = conn.server.keys;
  const fragment = dispatcher.fragmentOf(key);
  if (conn.writesInFlight === 0) {
    const local = dispatcher.readLocal(fragment, key, conn.readReplica);
    if (local !== NOT_LOCAL) {
      accumulate(slot, mode, local, index);
      return;
    }
  }
  slot.parts++;
  const part = new ReadPart(slot, index, mode);
  const error = dispatcher.submitRead(
    fragment,
    key,
    Priority.Default,
    HEADER_ONLY_MODES.has(mode),
    partReadHandler,
    part,
    conn.readReplica,
  );
  if (error !== undefined) {
    slot.error ??= failureText(error);
    slot.parts--;
  }
}

/** The shared, reusable spec for writes from the RESP server (filled and submitted synchronously). */
const spec = blankWriteSpec();

/** What a write answers (slot.mode for writeHandler). */
export const WriteMode = {
  /** +OK (SET, SETEX, PSETEX, MSET parts). */
  Ok: 32,
  /** :1 if a live value existed, else :0 (DEL, UNLINK, and their parts). */
  CountPrior: 33,
} as const;
export type WriteMode = (typeof WriteMode)[keyof typeof WriteMode];

/** Sends a plain write (value, or tombstone when `value` is undefined) answered by `mode`. */
export function writeKey(
  conn: RespConnection,
  key: Uint8Array,
  value: Uint8Array | undefined,
  expiresAtMs: number,
  mode: WriteMode,
  wantsPrior: boolean,
): ReplySlot {
  const slot = conn.defer();
  slot.mode = mode;
  const write = specFor(conn, OpKind.Write, key);
  write.value = value;
  write.expiresAtMs = expiresAtMs;
  write.wantsPrior = wantsPrior;
  submit(conn, slot, writeHandler);
  return slot;
}

/** One write of a multi-key command (MSET, DEL k1 k2 …) counted into `slot`. */
export function writePart(
  conn: RespConnection,
  slot: ReplySlot,
  key: Uint8Array,
  value: Uint8Array | undefined,
  wantsPrior: boolean,
): void {
  slot.parts++;
  const write = specFor(conn, OpKind.Write, key);
  write.value = value;
  write.wantsPrior = wantsPrior;
  submit(conn, slot, partWriteHandler);
}

/** What a modification answers (slot.mode for modifyHandler). */
export const ModifyMode = {
  /** SET with NX/XX/KEEPTTL and without GET: +OK, or a null when the condition failed. */
  SetOk: 64,
  /** SET … GET: the old value or a null. */
  SetGet: 65,
  /** SETNX, MSETNX: :1 or :0. */
  SetFlag: 66,
  /** GETDEL, GETEX: the value or a null. */
  Value: 67,
  /** INCR…, APPEND, SETRANGE, EXPIRE…, PERSIST: the integer. */
  Integer: 68,
  /** INCRBYFLOAT: the bulk string. */
  Text: 69,
  /**
   * GETEX with an expiry Redis refuses: a null when the key does not exist (Redis looks the key up
   * before it reads the expiry), else the slot's error. The actor is asked for a plain GETEX.
   */
  RefuseIfPresent: 70,
  /** LCS … IDX: the ranges the actor sent as text (`formatLcsRanges`), as Redis's map. */
  LcsRanges: 71,
  /** BITFIELD: the answers the actor sent as text (`formatBitfieldAnswers`), as an array. */
  BitfieldAnswers: 72,
} as const;
export type ModifyMode = (typeof ModifyMode)[keyof typeof ModifyMode];
export type ReplyMode = ReadMode | WriteMode | ModifyMode;

/** A command of one key and nothing else, run as `modifier` and answered by `mode` (GETDEL, PERSIST, DUMP). */
export function keyOnlyModify(modifier: Modifier, mode: ModifyMode) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    if (!keyFits(key, w)) return true;
    modifyKey(conn, key, modifier, 0, undefined, 0, mode);
    return false;
  };
}

/** Sends a read-modify-write answered by `mode`; returns its reply slot. */
export function modifyKey(
  conn: RespConnection,
  key: Uint8Array,
  modifier: Modifier,
  flags: number,
  value: Uint8Array | undefined,
  expiresAtMs: number,
  mode: ModifyMode,
  arg = 0,
  operand?: Uint8Array,
): ReplySlot {
  const slot = conn.defer();
  slot.mode = mode;
  const modify = specFor(conn, OpKind.Modify, key);
  modify.modifier = modifier;
  modify.flags = flags;
  modify.value = value;
  modify.expiresAtMs = expiresAtMs;
  modify.arg = arg;
  modify.operand = operand;
  submit(conn, slot, modifyHandler);
  return slot;
}

/** The shared spec, reset for a `kind` op on `key` at the connection's durability; the caller sets the rest by name. */
function specFor(
  conn: RespConnection,
  kind: typeof OpKind.Write | typeof OpKind.Modify,
  key: Uint8Array,
): WriteSpec {
  spec.kind = kind;
  spec.key = key;
  spec.value = undefined;
  spec.expiresAtMs = 0;
  spec.durability = conn.durability;
  spec.replicaAcks = conn.replicaAcks;
  spec.wantsPrior = false;
  spec.modifier = Modifier.Set;
  spec.flags = 0;
  spec.arg = 0;
  spec.operand = undefined;
  return spec;
}

/** Submits the shared spec (`specFor`) for `slot`, answered by `handler`. */
function submit(
  conn: RespConnection,
  slot: ReplySlot,
  handler: ResultHandler<ReplySlot> | ResultHandler<WritePart>,
): void {
  const token = handler === partWriteHandler ? new WritePart(slot) : slot;
  const dispatcher = conn.server.keys;
  const error = dispatcher.submitWrite(spec, handler as ResultHandler<unknown>, token);
  releaseWriteSpec(spec);
  if (conn.writtenFragments.size === 0) conn.writtenSinceStamp = dispatcher.servingStamp;
  conn.writtenFragments.add(dispatcher.lastWriteFragment);
  if (error !== undefined) {
    if (token instanceof WritePart) {
      slot.error ??= failureText(error);
      slot.parts--;
    } else failSlot(slot, error);
    return;
  }
  if (!slot.write) {
    slot.write = true;
    conn.writesInFlight++;
  }
}

const EMPTY = Buffer.alloc(0);

/** One read of a multi-key command (MGET, EXISTS): its slot, position and mode. */
class ReadPart {
  constructor(
    readonly slot: ReplySlot,
    readonly index: number,
    readonly mode: ReadMode,
  ) {}
}

/** One write of a multi-key command (MSET, DEL): its slot. */
class WritePart {
  constructor(readonly slot: ReplySlot) {}
}

/** Formats a read reply from the key's live record (`undefined` when absent); `clock` for TTLs. */
export function formatRead(
  w: RespWriter,
  mode: ReadMode,
  record: Uint8Array | undefined,
  a: number,
  b: number,
  clock: WallClock,
): void {
  switch (mode) {
    case ReadMode.Get:
      if (record === undefined) w.null();
      else w.bulk(valueBytesOf(record));
      return;
    case ReadMode.Strlen:
      w.integer(record === undefined ? 0 : valueBytesOf(record).length);
      return;
    case ReadMode.Type:
      w.simple(record === undefined ? 'none' : 'string');
      return;
    case ReadMode.Exists:
      w.integer(record === undefined ? 0 : 1);
      return;
    case ReadMode.GetRange:
      w.bulk(record === undefined ? EMPTY : substring(valueBytesOf(record), a, b));
      return;
    case ReadMode.MemoryUsage:
      if (record === undefined) w.null();
      else w.integer(a + record.length);
      return;
    case ReadMode.ObjectEncoding:
    case ReadMode.ObjectRefcount:
    case ReadMode.ObjectFreq:
    case ReadMode.ObjectIdletime:
      if (record === undefined) w.null();
      else formatObject(w, mode, valueBytesOf(record));
      return;
    default:
      formatExpiry(w, mode, record, clock.nowMs());
  }
}

/** Redis keeps strings of up to this many bytes in one allocation with their header (`embstr`). */
const EMBSTR_BYTES_MAX = 44;
/** Redis shares one object for each integer value below this (OBJ_SHARED_INTEGERS)… */
const SHARED_INTEGERS = 10_000n;
/** …whose reference count reads as this (OBJ_SHARED_REFCOUNT). */
const SHARED_REFCOUNT = 2_147_483_647;

/** The encoding Redis would give a string of these bytes: `int`, `embstr` or `raw`. */
function stringEncodingOf(value: Uint8Array): 'int' | 'embstr' | 'raw' {
  if (parseInt64(value) !== undefined) return 'int';
  return value.length <= EMBSTR_BYTES_MAX ? 'embstr' : 'raw';
}

/**
 * OBJECT's answers for a live string. The encoding is Redis's for a string of these bytes as SET
 * stores it (one grown by APPEND or SETRANGE is `raw` in Redis whatever its length). Redis tracks
 * access frequency only under an LFU eviction policy, which Tessera has none of, and answers FREQ
 * with this error; access times Tessera does not keep at all.
 */
function formatObject(w: RespWriter, mode: ReadMode, value: Uint8Array): void {
  switch (mode) {
    case ReadMode.ObjectEncoding:
      return w.bulk(Buffer.from(stringEncodingOf(value), 'latin1'));
    case ReadMode.ObjectRefcount: {
      const n = parseInt64(value);
      return w.integer(n !== undefined && n >= 0n && n < SHARED_INTEGERS ? SHARED_REFCOUNT : 1);
    }
    case ReadMode.ObjectFreq:
      return w.error(
        'An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.',
      );
    default:
      assert(mode === ReadMode.ObjectIdletime, `unknown read mode ${mode}`);
      return w.error('OBJECT IDLETIME is not supported: Tessera keeps no access times');
  }
}

/** TTL / PTTL / EXPIRETIME / PEXPIRETIME: -2 for a missing key, -1 for no deadline. */
function formatExpiry(w: RespWriter, mode: ReadMode, record: Uint8Array | undefined, nowMs: number): void {
  if (record === undefined) return w.integer(-2);
  const expiresAt = expiresAtOf(record);
  if (expiresAt === 0) return w.integer(-1);
  const left = Math.max(0, expiresAt - nowMs);
  switch (mode) {
    case ReadMode.Ttl:
      // Redis rounds to the nearest second.
      return w.integer(Math.floor((left + 500) / 1000));
    case ReadMode.Pttl:
      return w.integer(left);
    case ReadMode.ExpireTime:
      return w.integer(Math.floor(expiresAt / 1000));
    default:
      assert(mode === ReadMode.PexpireTime, `unknown read mode ${mode}`);
      return w.integer(expiresAt);
  }
}

/** GETRANGE's substring, exactly as Redis 7.2 computes it: negative offsets count from the end, the end is inclusive. */
export function substring(value: Uint8Array, start: number, end: number): Uint8Array {
  const n = value.length;
  if (start < 0 && end < 0 && start > end) return EMPTY;
  let from = start < 0 ? n + start : start;
  let to = end < 0 ? n + end : end;
  if (from < 0) from = 0;
  if (to < 0) to = 0;
  if (to >= n) to = n - 1;
  if (from > to || n === 0) return EMPTY;
  return value.subarray(from, to + 1);
}

function accumulate(slot: ReplySlot, mode: ReadMode, record: Uint8Array | undefined, index: number): void {
  slot.conn.server.stats.lookup(record !== undefined);
  if (mode === ReadMode.MgetPart) {
    slot.values![index] = record === undefined ? null : Buffer.from(valueBytesOf(record));
  } else if (record !== undefined) {
    slot.count++;
  }
}

/** Answers a slot with an error now (the request never reached a worker). */
function failSlot(slot: ReplySlot, error: TesseraError | string): void {
  const w = slot.conn.beginReply(slot);
  if (typeof error === 'string') w.error(error);
  else writeFailure(w, error);
  slot.conn.endReply(slot);
}

/** Finishes a multi-key command once its last part is in (or when none went to a worker). */
export function finishParts(slot: ReplySlot): void {
  if (slot.parts > 0) return;
  const w = slot.conn.beginReply(slot);
  if (slot.error !== null) writeErrorText(w, slot.error);
  else if (slot.values !== null) {
    w.arrayHeader(slot.values.length);
    for (const v of slot.values) {
      if (v === null) w.null();
      else w.bulk(v);
    }
  } else if (slot.mode === WriteMode.Ok) w.ok();
  else w.integer(slot.count);
  slot.conn.endReply(slot);
}

const clockOf = (slot: ReplySlot): WallClock => slot.conn.server.keys.turnClock;

// The handlers below are given only slots of their own kind: a read slot's mode is a ReadMode, a
// modification's a ModifyMode (set by readKey, modifyKey).
const readHandler: ResultHandler<ReplySlot> = {
  onResult(slot, buf, at, length) {
    const w = slot.conn.beginReply(slot);
    const status = resultStatus(buf, at);
    if (status === Reply.Found || status === Reply.NotFound)
      slot.conn.server.stats.lookup(status === Reply.Found);
    if (status === Reply.Found)
      formatRead(
        w,
        slot.mode as ReadMode,
        buf.subarray(at + RESULT_HEADER_BYTES, at + length),
        slot.a,
        slot.b,
        clockOf(slot),
      );
    else if (status === Reply.NotFound)
      formatRead(w, slot.mode as ReadMode, undefined, slot.a, slot.b, clockOf(slot));
    else writeFailure(w, resultError(buf, at, length));
    slot.conn.endReply(slot);
  },
  onFailure(slot, error) {
    failSlot(slot, error);
  },
};

/** One part of a multi-key command is in (with its error, if it failed); the last one answers. */
function partDone(slot: ReplySlot, error: TesseraError | undefined): void {
  if (error !== undefined) slot.error ??= failureText(error);
  slot.parts--;
  finishParts(slot);
}

const partReadHandler: ResultHandler<ReadPart> = {
  onResult(part, buf, at, length) {
    const status = resultStatus(buf, at);
    if (status === Reply.Found) {
      accumulate(part.slot, part.mode, buf.subarray(at + RESULT_HEADER_BYTES, at + length), part.index);
    } else if (status === Reply.NotFound) part.slot.conn.server.stats.lookup(false);
    partDone(
      part.slot,
      status === Reply.Found || status === Reply.NotFound ? undefined : resultError(buf, at, length),
    );
  },
  onFailure: (part, error) => partDone(part.slot, error),
};

/** Whether a write result means the write holds (applied, already there, or expired on arrival). */
function writeHeld(status: number): boolean {
  return status === Reply.Applied || status === Reply.AlreadyPresent || status === Reply.Expired;
}

const writeHandler: ResultHandler<ReplySlot> = {
  onResult(slot, buf, at, length) {
    const w = slot.conn.beginReply(slot);
    const status = resultStatus(buf, at);
    if (!writeHeld(status)) writeFailure(w, resultError(buf, at, length));
    else if (slot.mode === WriteMode.Ok) w.ok();
    else w.integer(resultHadPrior(buf, at) ? 1 : 0);
    slot.conn.endReply(slot);
  },
  onFailure(slot, error) {
    failSlot(slot, error);
  },
};

const partWriteHandler: ResultHandler<WritePart> = {
  onResult(part, buf, at, length) {
    const status = resultStatus(buf, at);
    if (writeHeld(status) && status !== Reply.Expired) part.slot.count += resultHadPrior(buf, at) ? 1 : 0;
    partDone(part.slot, writeHeld(status) ? undefined : resultError(buf, at, length));
  },
  onFailure: (part, error) => partDone(part.slot, error),
};

const modifyHandler: ResultHandler<ReplySlot> = {
  onResult(slot, buf, at, length) {
    const w = slot.conn.beginReply(slot);
    const status = resultStatus(buf, at);
    if (slot.mode === ModifyMode.RefuseIfPresent && status === Reply.Applied) writeErrorText(w, slot.error!);
    else formatModify(w, slot.mode as ModifyMode, status, buf, at, length);
    slot.conn.endReply(slot);
  },
  onFailure(slot, error) {
    failSlot(slot, error);
  },
};

function formatModify(
  w: RespWriter,
  mode: ModifyMode,
  status: number,
  buf: Buffer,
  at: number,
  length: number,
): void {
  const payloadAt = at + RESULT_HEADER_BYTES;
  switch (status) {
    case Reply.Applied:
    case Reply.AlreadyPresent:
    case Reply.Expired:
    case Reply.NotApplied: {
      const applied = status !== Reply.NotApplied;
      if (mode === ModifyMode.SetOk) return applied ? w.ok() : w.null();
      if (mode === ModifyMode.SetFlag) return w.integer(applied ? 1 : 0);
      // SET … GET, GETDEL, GETEX: the record the actor returned, if any.
      if (length > RESULT_HEADER_BYTES) return w.bulk(valueBytesOf(buf.subarray(payloadAt, at + length)));
      return w.null();
    }
    case Reply.NotFound:
      return w.null();
    case Reply.Integer: {
      const text = buf.toString('latin1', payloadAt, at + length);
      return w.integer(text.length < 16 ? Number(text) : BigInt(text));
    }
    case Reply.Text:
      if (mode === ModifyMode.LcsRanges)
        return writeLcsRanges(w, buf.toString('latin1', payloadAt, at + length));
      if (mode === ModifyMode.BitfieldAnswers)
        return writeBitfieldAnswers(w, buf.toString('latin1', payloadAt, at + length));
      return w.bulkRange(buf, payloadAt, at + length);
    case Reply.Refused:
      return writeErrorText(w, buf.toString('utf8', payloadAt, at + length));
    default:
      return writeFailure(w, resultError(buf, at, length));
  }
}

/** BITFIELD's answer: an integer per subcommand, or a null where OVERFLOW FAIL refused one. */
function writeBitfieldAnswers(w: RespWriter, text: string): void {
  const answers = parseBitfieldAnswers(text);
  w.arrayHeader(answers.length);
  for (const answer of answers) {
    if (answer === null) w.null();
    else w.integer(answer);
  }
}

/** LCS IDX's answer: a map of "matches" (each [[aStart, aEnd], [bStart, bEnd], length?]) and "len". */
function writeLcsRanges(w: RespWriter, text: string): void {
  const { length, ranges } = parseLcsRanges(text);
  w.mapHeader(2);
  w.bulk('matches');
  w.arrayHeader(ranges.length);
  for (const r of ranges) {
    w.arrayHeader(r.length === 5 ? 3 : 2);
    w.arrayHeader(2);
    w.integer(r[0]);
    w.integer(r[1]);
    w.arrayHeader(2);
    w.integer(r[2]);
    w.integer(r[3]);
    if (r.length === 5) w.integer(r[4]);
  }
  w.bulk('len');
  w.integer(length);
}

export { ModifyFlag };
