// Binary layouts of the records that cross the rings: requests main → worker, results worker → main.
// Encoders write straight into ring memory at an offset; decoders read in place. No JSON on the hot
// path (only the rare health reply carries JSON).
//
// Request (main → worker):
//   0  u8   kind         OpKind (1..4) or a control kind (RequestKind)
//   1  u8   flags        bits 0-1 priority, bits 2-3 durability, bit 4 header-only read,
//                        bit 5 the write wants to know whether a live value existed, bit 6 the
//                        op waits for replica acknowledgements
//   2  u16  fragment
//   4  u32  reqId
//   8  u16  keyLength
//   10 …    key, then with the replica-wait flag (bit 6) the replica-wait parameters (below), then
//           for Write the versioned record (src/core/record.ts) to the end; for Modify the modify
//           parameters (below), then the stamp record
//
// Replica-wait parameters: a Fence (with an empty key) answers FenceReached once it reached its
// durability here and `replicas` other replicas acknowledged everything before it at `level`, or
// after `timeoutMs`; its result's detail byte is the number of replicas reached. A Write or Modify
// is answered as without the flag once, besides, those replicas acknowledged it or the time is up;
// detail bits 1-7 are the replicas reached (a write the fragment refused is answered at once).
//   0  u8   replicas     0..REPLICA_ACKS_MAX
//   1  u8   level        AckLevel (memory 1, store 2, stable 3)
//   2  u32  timeoutMs    1..REPLICA_WAIT_ROUND_MS_MAX
//
// Modify parameters, after the key:
//   0  u8   modifier     src/core/modify.ts Modifier
//   1  u8   flags        ModifyFlag bits
//   2  u32  arg          SETRANGE offset, SETBIT / GETBIT bit offset
//   6  u16  operandLength, then the operand (INCRBY / INCRBYFLOAT delta as sent, MSETNX pairs…)
//
// Control request (Health, Crash, Close, FailCommits, Backup): kind at 0, bytes 1-3 zero, reqId at
// 4, then its payload from byte 8 (writeControlHeader, controlPayloadAt).
//
// Scan request: the common 8-byte header (flags: bit 0 start inclusive, bit 1 has start, bit 2 has
// end, bit 3 keys only), then u16 startLength, start, u16 endLength, end, u32 limit, u32 byteLimit,
// u32 examineLimit,
// u16 patternLength, pattern.
//
// Result (worker → main):
//   0  u8   status       Reply, or ResultKind.ScanPage / ResultKind.Health / ResultKind.Error
//   1  u8   detail       bit 0: a live value existed before the write; bits 1-7: the replicas a
//                        write with the replica-wait flag reached; for Error: the ErrorKind
//   2  u16  (zero)
//   4  u32  reqId
//   8  …    Found / Superseded: a record; Backpressure / StorageFailed / Error: UTF-8 message;
//           ScanPage: see encodeScanPage; Health: UTF-8 JSON
//
// Acks (worker → main): several header-only results of one status and detail in one record:
//   0  u8   ResultKind.Acks
//   1  u8   detail       as above, shared by all
//   2  u8   status       the Reply they all carry
//   3  u8   (zero)
//   4  u32  count        1..RESULT_ACKS_MAX
//   8  …    count u32 reqIds

import { assert } from '../core/assert.js';
import { BitOperation } from '../core/bits.js';
import {
  copyBytes,
  copyRange,
  readU16LE,
  readU32LE,
  readU48BE,
  writeU16LE,
  writeU32LE,
  writeU48BE,
} from '../core/bytes.js';
import { type ErrorKind, isErrorKind, truncateErrorMessage } from '../core/errors.js';
import {
  KEY_BYTES_MAX,
  REPLICA_ACKS_MAX,
  REPLICA_WAIT_ROUND_MS_MAX,
  SCAN_EXAMINED_KEYS_MAX,
  SCAN_PAGE_BYTES_MAX,
  SCAN_PAGE_KEYS_MAX,
  SCAN_PATTERN_BYTES_MAX,
} from '../core/limits.js';
import { decodeKeys, decodePairs, MODIFIER_MAX, Modifier } from '../core/modify.js';
import { type Durability, OpKind, type Priority, Reply } from '../core/ops.js';
import { DIGEST_BYTES, type PageAnswer, type RangeDigest, type SourceSize } from '../core/reconciler.js';
import { isWellFormedRecord, valueOffsetOf } from '../core/record.js';
import { AckLevel } from '../core/replication-sender.js';

export const REQUEST_HEADER_BYTES = 10;
/** The header every record but a fragment op's is: kind, flags, u16 (fragment or peer), u32 id. */
const COMMON_HEADER_BYTES = 8;
export const RESULT_HEADER_BYTES = COMMON_HEADER_BYTES;
/** Bytes before a control request's payload. */
export const CONTROL_HEADER_BYTES = COMMON_HEADER_BYTES;
// Fields every request and result record has at the same place.
const KIND_AT = 0;
const FLAGS_AT = 1;
const FRAGMENT_AT = 2;
const ID_AT = 4;
const KEY_BYTES_AT = 8;

/** Request kinds beyond the fragment ops (OpKind 1..4). */
export const RequestKind = {
  Scan: 16,
  Health: 17,
  /** Test hook: the worker throws an uncaught error, as a crash would. */
  Crash: 18,
  /** Close the store and exit; sent once every fragment is flushed. */
  Close: 19,
  /** A peer frame for one of the worker's fragments: byte 1 unused, u16 peer member index, then the envelope. */
  PeerFrame: 20,
  /** A peer connection came up (byte 1 = 1) or went down (0): u16 peer member index. */
  PeerState: 21,
  /**
   * The background pool's answer to a PoolSpan (reqId = its task id; byte 1: bit 0 truncated, bit 1
   * failed), then per entry u16 key length, key, u16 stamp length, stamp.
   */
  PoolSpanResult: 22,
  /** Test hook: the worker's next N store commits fail as a failing disk's would (u32 N at 8). */
  FailCommits: 23,
  /** Back the worker's store up into a data directory: its UTF-8 path from byte 8 (KvStore.backup). */
  Backup: 24,
  /**
   * Answer once every replication sender of the worker has its backlog acknowledged (Applied), or
   * when the u32 ms at 8 have passed first (NotApplied).
   */
  DrainReplication: 25,
  /**
   * Hold a fragment (u16 at 2): open it if the worker does not, and set its replica member indices
   * (this node's included): u16 count at 8, then count u16 indices. Answered Applied, or Error.
   */
  HoldFragment: 29,
  /** Stop serving a fragment (u16 at 2): close its senders and actor, remove its data. Applied, or Error. */
  DropFragment: 30,
  /**
   * Member slots were appended: u16 index of the first at 8, u16 count, then per member u16 length
   * and its UTF-8 node id. Applied, or Error.
   */
  AddMembers: 31,
  /**
   * Start an anti-entropy round of fragment (u16 at 2) toward member (u16 at 8) now; answered
   * (RoundAnswer) once a round that started after the request ended, or at the u32 ms at 10.
   */
  ReconcileNow: 32,
  /**
   * Answer once the sender of fragment (u16 at 2) toward member (u16 at 8) has its backlog
   * acknowledged at the level (u8 at 10) — Applied — or when the u32 ms at 12 passed (NotApplied).
   */
  DrainedTo: 33,
} as const;

export const ResultKind = {
  ScanPage: 32,
  Health: 33,
  Error: 34,
  Closed: 35,
  /** A frame for a peer (u16 member index at 2, no reqId), then the encoded envelope. */
  PeerFrame: 36,
  /** The peer broke the protocol: close its connection (u16 member index at 2), then the UTF-8 reason. */
  PeerClose: 37,
  /**
   * Read an anti-entropy span in the background pool: u16 fragment at 2, task id at 4; byte 1: bit 0
   * after-key given, bit 1 last-key given, bit 2 open end; then u16 length + after key, u16 length +
   * last key.
   */
  PoolSpan: 38,
  /** Several header-only results of one status and detail (see the layout above). */
  Acks: 39,
  /**
   * An anti-entropy round of a sender ended (no reqId; RoundAnswer's layout): byte 1 bit 0 ok,
   * u16 fragment at 2, then u16 member, u32 round sequence, u32 round id, u32 keys pulled, u48 bytes
   * pulled, UTF-8 reason.
   */
  RoundReport: 43,
  /** The answer to ReconcileNow: a RoundReport under the request's id. */
  RoundAnswer: 44,
  /** A running round pulled a page: its counts so far, as a RoundReport (not ok, no reason). */
  RoundProgress: 45,
} as const;

/** Writes the header of a peer record (request or result); returns where the payload starts. */
export function writePeerHeader(buf: Buffer, at: number, kind: number, flag: number, peer: number): number {
  buf[at + KIND_AT] = kind;
  buf[at + FLAGS_AT] = flag;
  writeU16LE(buf, at + FRAGMENT_AT, peer);
  writeU32LE(buf, at + ID_AT, 0);
  return at + PEER_HEADER_BYTES;
}
export const PEER_HEADER_BYTES = COMMON_HEADER_BYTES;
/** The member index a peer record is for (where a fragment op has its fragment). */
export const peerOf = (buf: Buffer, at: number): number => readU16LE(buf, at + FRAGMENT_AT);
/** A PeerState request's flag bits (`writePeerHeader`'s flag). */
export const PeerStateFlag = {
  /** The peer connection is up. */
  Up: 1 << 0,
  /** The peer takes FragmentAbsent answers (CAPABILITY_FRAGMENT_ABSENT). */
  TakesFragmentAbsent: 1 << 1,
} as const;
/** A PeerState request's news: the peer connection is up. */
export const peerStateUp = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & PeerStateFlag.Up) !== 0;
/** A PeerState request's news: the peer takes FragmentAbsent answers. */
export const peerTakesFragmentAbsent = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & PeerStateFlag.TakesFragmentAbsent) !== 0;

/** A fragment op's flag bits beside its priority and durability (`requestFlags`). */
export const RequestFlag = {
  /** A read answers with the record's header and node id only. */
  HeaderOnly: 1 << 4,
  /** A write reports whether a live value existed before it. */
  WantsPrior: 1 << 5,
  /** The op also waits for replica acknowledgements (the replica-wait parameters follow its key). */
  ReplicaWait: 1 << 6,
  /** A scan's fence: answered StorageFailed at once while the store keeps failing (`answersWhileFailing`). */
  ForScan: 1 << 7,
} as const;

export const REPLICA_WAIT_PARAMS_BYTES = 6;
/** A write's detail byte: bit 0 says a live value existed before it, bits 1–7 the replicas reached. */
const PRIOR_BIT = 1;
const REACHED_SHIFT = 1;

/** What a replica-wait fence asks (`writeReplicaWaitParams`). */
export interface ReplicaWaitParams {
  replicas: number;
  level: AckLevel;
  timeoutMs: number;
}

/** Writes the replica-wait parameters at `at` (right after the key); returns the end. */
export function writeReplicaWaitParams(buf: Buffer, at: number, params: ReplicaWaitParams): number {
  assert(
    Number.isInteger(params.replicas) && params.replicas >= 0 && params.replicas <= REPLICA_ACKS_MAX,
    'replicas out of range',
  );
  assert(
    params.timeoutMs >= 1 && params.timeoutMs <= REPLICA_WAIT_ROUND_MS_MAX,
    'replica wait timeout out of range',
  );
  buf[at] = params.replicas;
  buf[at + 1] = params.level;
  writeU32LE(buf, at + 2, params.timeoutMs);
  return at + REPLICA_WAIT_PARAMS_BYTES;
}

/** The replica-wait parameters of a request at `at` that has them, checked by `checkRequest`. */
export function readReplicaWaitParams(buf: Buffer, at: number): ReplicaWaitParams {
  const params = replicaWaitParamsAt(buf, at + REQUEST_HEADER_BYTES + readU16LE(buf, at + KEY_BYTES_AT));
  assert(isReplicaWaitParams(params), 'replica wait parameters out of range after decode');
  return params;
}

function replicaWaitParamsAt(buf: Buffer, p: number): ReplicaWaitParams {
  return { replicas: buf[p], level: buf[p + 1] as AckLevel, timeoutMs: readU32LE(buf, p + 2) };
}

function isReplicaWaitParams(p: ReplicaWaitParams): boolean {
  return (
    p.replicas <= REPLICA_ACKS_MAX &&
    p.level >= AckLevel.Memory &&
    p.level <= AckLevel.Stable &&
    p.timeoutMs >= 1 &&
    p.timeoutMs <= REPLICA_WAIT_ROUND_MS_MAX
  );
}

export const requestReplicaWait = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & RequestFlag.ReplicaWait) !== 0;

/** Bytes after the header before a request's record (or modify parameters): its key, and the wait's. */
export const requestKeyAndWaitBytes = (buf: Uint8Array, at: number): number =>
  readU16LE(buf, at + KEY_BYTES_AT) +
  ((buf[at + FLAGS_AT] & RequestFlag.ReplicaWait) !== 0 ? REPLICA_WAIT_PARAMS_BYTES : 0);

/** A fragment op's flags byte: its priority and durability; OR RequestFlag bits into it. */
export function requestFlags(priority: Priority, durability: Durability): number {
  return priority | (durability << 2);
}
export const SCAN_START_INCLUSIVE = 1;
export const SCAN_HAS_START = 2;
export const SCAN_HAS_END = 4;
export const SCAN_KEYS_ONLY = 8;
/** Records without their values (version and deadline: `stampOf`); bits 4–5 hold the priority. */
export const SCAN_STAMPS_ONLY = 64;

export function requestBytes(keyBytes: number, recordBytes: number): number {
  return REQUEST_HEADER_BYTES + keyBytes + recordBytes;
}

/**
 * Writes a request header and its key; returns the offset where a record (if any) follows. `flags`:
 * `requestFlags(priority, durability)` with any RequestFlag bits.
 */
export function writeRequestHeader(
  buf: Buffer,
  at: number,
  kind: number,
  flags: number,
  fragment: number,
  reqId: number,
  key: Uint8Array,
): number {
  buf[at + KIND_AT] = kind;
  buf[at + FLAGS_AT] = flags;
  writeU16LE(buf, at + FRAGMENT_AT, fragment);
  writeU32LE(buf, at + ID_AT, reqId);
  writeU16LE(buf, at + KEY_BYTES_AT, key.length);
  buf.set(key, at + REQUEST_HEADER_BYTES);
  return at + REQUEST_HEADER_BYTES + key.length;
}

export const requestKind = (buf: Buffer, at: number): number => buf[at + KIND_AT];
export const requestPriority = (buf: Buffer, at: number): Priority => (buf[at + FLAGS_AT] & 3) as Priority;
export const requestDurability = (buf: Buffer, at: number): Durability =>
  ((buf[at + FLAGS_AT] >> 2) & 3) as Durability;
export const requestHeaderOnly = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & RequestFlag.HeaderOnly) !== 0;
export const requestWantsPrior = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & RequestFlag.WantsPrior) !== 0;
export const requestForScan = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & RequestFlag.ForScan) !== 0;
export const requestFragment = (buf: Buffer, at: number): number => readU16LE(buf, at + FRAGMENT_AT);
export const requestId = (buf: Buffer, at: number): number => readU32LE(buf, at + ID_AT);
export const requestKeyBytes = (buf: Buffer, at: number): number => readU16LE(buf, at + KEY_BYTES_AT);
/** Replaces an encoded request's id (a request passed on under the sender's own id). */
export const setRequestId = (buf: Uint8Array, at: number, reqId: number): void =>
  writeU32LE(buf, at + ID_AT, reqId);

/** Writes a control request's header; returns where its payload starts. */
export function writeControlHeader(buf: Buffer, at: number, kind: number, reqId: number): number {
  buf[at + KIND_AT] = kind;
  buf[at + FLAGS_AT] = 0;
  writeU16LE(buf, at + FRAGMENT_AT, 0);
  writeU32LE(buf, at + ID_AT, reqId);
  return at + CONTROL_HEADER_BYTES;
}
export const controlPayloadAt = (at: number): number => at + CONTROL_HEADER_BYTES;

export const MODIFY_PARAMS_BYTES = 8;
/** Longest operand (its length is a u16): faces refuse commands whose operand would be longer. */
export const MODIFY_OPERAND_BYTES_MAX = 0xffff;

export interface ModifyParams {
  modifier: Modifier;
  flags: number;
  arg: number;
  operand: Buffer | undefined;
  /** Offset just past the parameters: where the stamp record starts. */
  end: number;
}

/** Writes modify parameters at `at` (right after the key); returns where the stamp record goes. */
export function writeModifyParams(
  buf: Buffer,
  at: number,
  modifier: Modifier,
  flags: number,
  arg: number,
  operand: Uint8Array | undefined,
): number {
  buf[at] = modifier;
  buf[at + 1] = flags;
  writeU32LE(buf, at + 2, arg);
  const n = operand?.length ?? 0;
  assert(n <= MODIFY_OPERAND_BYTES_MAX, 'a modify operand longer than MODIFY_OPERAND_BYTES_MAX');
  writeU16LE(buf, at + 6, n);
  if (n > 0) copyBytes(buf, at + MODIFY_PARAMS_BYTES, operand!);
  return at + MODIFY_PARAMS_BYTES + n;
}

/** Reads modify parameters from a buffer the caller owns (the operand is a view into it). */
export function readModifyParams(buf: Buffer, at: number): ModifyParams {
  const n = readU16LE(buf, at + 6);
  const end = at + MODIFY_PARAMS_BYTES + n;
  assert(end <= buf.length, 'modify parameters run past their record');
  return {
    modifier: buf[at] as Modifier,
    flags: buf[at + 1],
    arg: readU32LE(buf, at + 2),
    operand: n > 0 ? buf.subarray(at + MODIFY_PARAMS_BYTES, end) : undefined,
    end,
  };
}

/**
 * Where a write's record, or a modification's stamp record, starts in request `op` (a checked
 * request at offset 0); -1 for other kinds.
 */
export function requestStampAt(op: Buffer): number {
  const kind = op[0];
  if (kind !== OpKind.Write && kind !== OpKind.Modify) return -1;
  const rest = REQUEST_HEADER_BYTES + requestKeyAndWaitBytes(op, 0);
  return kind === OpKind.Write ? rest : rest + MODIFY_PARAMS_BYTES + readU16LE(op, rest + 6);
}

/**
 * Why a request from outside this process (a peer's forwarded operation) cannot be handed to a
 * worker — whose decoders assume well-formed requests — or undefined when it can.
 */
export function checkRequest(
  op: Buffer,
  fragmentCount: number,
  fragmentOf: (key: Uint8Array) => number,
): string | undefined {
  if (op.length < REQUEST_HEADER_BYTES) return 'request shorter than its header';
  const kind = op[0];
  const fragment = readU16LE(op, 2);
  if (fragment >= fragmentCount) return `fragment ${fragment} out of range`;
  if (kind === RequestKind.Scan) return checkScanRequest(op);
  if (!isFragmentOpKind(kind)) return `request kind ${kind} cannot be forwarded`;
  if ((op[1] & 3) > 2 || ((op[1] >> 2) & 3) > 2) return 'bad priority or durability';
  const keyBytes = readU16LE(op, 8);
  const keyEnd = REQUEST_HEADER_BYTES + keyBytes;
  if (keyBytes > KEY_BYTES_MAX || keyEnd > op.length) return 'bad key length';
  let rest = keyEnd;
  if ((op[1] & RequestFlag.ReplicaWait) !== 0) {
    rest += REPLICA_WAIT_PARAMS_BYTES;
    if (rest > op.length) return 'bad replica wait length';
    const params = replicaWaitParamsAt(op, keyEnd);
    if (!isReplicaWaitParams(params)) return 'bad replica wait parameters';
    if (kind === OpKind.Fence)
      return keyBytes === 0 && rest === op.length ? undefined : 'bad replica wait length';
    if (kind !== OpKind.Write && kind !== OpKind.Modify) return 'only fences and writes wait for replicas';
  }
  if (kind !== OpKind.Write && kind !== OpKind.Modify)
    return rest === op.length ? undefined : 'trailing bytes';
  // A request carries its key once the fragment is known: the key must be the fragment's.
  if (fragmentOf(op.subarray(REQUEST_HEADER_BYTES, keyEnd)) !== fragment) return 'key of another fragment';
  if (kind === OpKind.Write) return isWellFormedRecord(op.subarray(rest)) ? undefined : 'malformed record';
  if (rest + MODIFY_PARAMS_BYTES > op.length) return 'modify parameters cut short';
  const modifier = op[rest];
  if (modifier < Modifier.Set || modifier > MODIFIER_MAX) return `unknown modifier ${modifier}`;
  const end = rest + MODIFY_PARAMS_BYTES + readU16LE(op, rest + 6);
  if (end > op.length || !isWellFormedRecord(op.subarray(end))) return 'malformed modify parameters';
  if (modifier === Modifier.Rename || modifier === Modifier.Copy) {
    const target = op.subarray(rest + MODIFY_PARAMS_BYTES, end);
    if (target.length > KEY_BYTES_MAX || fragmentOf(target) !== fragment)
      return 'malformed RENAME or COPY target';
  }
  if (modifier === Modifier.SetAllIfNone) {
    const pairs = decodePairs(op.subarray(rest + MODIFY_PARAMS_BYTES, end));
    if (
      pairs === undefined ||
      pairs.some(([key]) => key.length > KEY_BYTES_MAX || fragmentOf(key) !== fragment)
    ) {
      return 'malformed MSETNX pairs';
    }
  }
  if (modifier === Modifier.PfCount || modifier === Modifier.PfMerge) {
    const others = decodeKeys(op.subarray(rest + MODIFY_PARAMS_BYTES, end));
    if (
      others === undefined ||
      others.some((key) => key.length > KEY_BYTES_MAX || fragmentOf(key) !== fragment)
    )
      return 'malformed PFCOUNT or PFMERGE keys';
  }
  if (modifier === Modifier.PfAdd && (end - rest - MODIFY_PARAMS_BYTES) % 3 !== 0) return 'malformed PFADD';
  if (modifier === Modifier.Lcs) {
    const other = decodeKeys(op.subarray(rest + MODIFY_PARAMS_BYTES, end));
    if (
      other === undefined ||
      other.length !== 1 ||
      other[0].length > KEY_BYTES_MAX ||
      fragmentOf(other[0]) !== fragment
    ) {
      return 'malformed LCS';
    }
  }
  if (modifier === Modifier.BitOp) {
    const sources = decodeKeys(op.subarray(rest + MODIFY_PARAMS_BYTES, end));
    const operation = op[rest + 1];
    if (
      operation < BitOperation.And ||
      operation > BitOperation.Not ||
      sources === undefined ||
      sources.length === 0 ||
      sources.some((key) => key.length > KEY_BYTES_MAX || fragmentOf(key) !== fragment)
    ) {
      return 'malformed BITOP';
    }
  }
  return undefined;
}

function checkScanRequest(op: Buffer): string | undefined {
  let p = 8;
  for (let i = 0; i < 2; i++) {
    if (p + 2 > op.length) return 'scan request cut short';
    const n = readU16LE(op, p);
    if (n > KEY_BYTES_MAX) return 'scan bound longer than a key';
    p += 2 + n;
  }
  if (p + 14 > op.length) return 'scan request cut short';
  const limit = readU32LE(op, p);
  const examine = readU32LE(op, p + 8);
  if (
    limit > SCAN_PAGE_KEYS_MAX ||
    readU32LE(op, p + 4) > SCAN_PAGE_BYTES_MAX ||
    examine > SCAN_EXAMINED_KEYS_MAX
  ) {
    return 'scan limits out of range';
  }
  const pattern = readU16LE(op, p + 12);
  if (pattern > SCAN_PATTERN_BYTES_MAX || p + 14 + pattern !== op.length) return 'bad scan pattern';
  return undefined;
}

export function isFragmentOpKind(kind: number): kind is OpKind {
  return kind >= 1 && kind <= 4;
}

export interface ScanRequest {
  fragment: number;
  start: Uint8Array | undefined;
  startInclusive: boolean;
  end: Uint8Array | undefined;
  limit: number;
  byteLimit: number;
  /** Keys the page may examine before it returns what it has (Redis's COUNT is a bound of this kind). */
  examineLimit: number;
  pattern: Uint8Array | undefined;
  keysOnly: boolean;
  /** Without keysOnly: each entry's record without its value (its stamp). */
  stampsOnly: boolean;
}

export function scanRequestBytes(s: ScanRequest): number {
  return 8 + 2 + (s.start?.length ?? 0) + 2 + (s.end?.length ?? 0) + 12 + 2 + (s.pattern?.length ?? 0);
}

export function writeScanRequest(
  buf: Buffer,
  at: number,
  reqId: number,
  priority: Priority,
  s: ScanRequest,
): void {
  buf[at + KIND_AT] = RequestKind.Scan;
  buf[at + FLAGS_AT] =
    (s.startInclusive ? SCAN_START_INCLUSIVE : 0) |
    (s.start !== undefined ? SCAN_HAS_START : 0) |
    (s.end !== undefined ? SCAN_HAS_END : 0) |
    (s.keysOnly ? SCAN_KEYS_ONLY : 0) |
    (s.stampsOnly ? SCAN_STAMPS_ONLY : 0) |
    (priority << 4);
  writeU16LE(buf, at + FRAGMENT_AT, s.fragment);
  writeU32LE(buf, at + ID_AT, reqId);
  let p = at + COMMON_HEADER_BYTES;
  p = writeBytes16(buf, p, s.start);
  p = writeBytes16(buf, p, s.end);
  buf.writeUInt32LE(s.limit, p);
  buf.writeUInt32LE(s.byteLimit, p + 4);
  buf.writeUInt32LE(s.examineLimit, p + 8);
  writeBytes16(buf, p + 12, s.pattern);
}

/** Decodes a scan request, copying its keys out of ring memory. */
export function readScanRequest(buf: Buffer, at: number): { scan: ScanRequest; priority: Priority } {
  const flags = buf[at + FLAGS_AT];
  let p = at + COMMON_HEADER_BYTES;
  const start = readBytes16(buf, p);
  p += 2 + start.length;
  const end = readBytes16(buf, p);
  p += 2 + end.length;
  const limit = buf.readUInt32LE(p);
  const byteLimit = buf.readUInt32LE(p + 4);
  const examineLimit = buf.readUInt32LE(p + 8);
  const pattern = readBytes16(buf, p + 12);
  const scan: ScanRequest = {
    fragment: readU16LE(buf, at + FRAGMENT_AT),
    start: flags & SCAN_HAS_START ? start : undefined,
    startInclusive: (flags & SCAN_START_INCLUSIVE) !== 0,
    end: flags & SCAN_HAS_END ? end : undefined,
    limit,
    byteLimit,
    examineLimit,
    pattern: pattern.length > 0 ? pattern : undefined,
    keysOnly: (flags & SCAN_KEYS_ONLY) !== 0,
    stampsOnly: (flags & SCAN_STAMPS_ONLY) !== 0,
  };
  return { scan, priority: ((flags >> 4) & 3) as Priority };
}

/**
 * What a worker asks the background pool to read: a span for anti-entropy
 * (src/workers/reconcile-span.ts), or with `expiredAtMs` a page for the TTL cleaner
 * (src/workers/expired-span.ts).
 */
export interface PoolSpanRequest {
  fragment: number;
  /** Undefined: from the first key. */
  afterKey: Uint8Array | undefined;
  /** The requester's last range key; undefined when it has none. */
  lastKey: Uint8Array | undefined;
  /** The ranges the requester described, and keys per range (reconcile-span.ts `SpanQuery`). */
  rangeCount: number;
  rangeKeys: number;
  openEnd: boolean;
  /** Keys an open page takes past the last range (reconcile-span.ts `SpanQuery`). */
  tailKeys: number;
  /** The cleaner's time: only records expired by then come back (and the page's last key). */
  expiredAtMs?: number;
  /** What the pool works out from an anti-entropy span, in place of returning it. */
  work?: SpanWork;
}

/**
 * Anti-entropy's work on a span (src/core/reconciler.ts), done in the pool so that only its outcome
 * crosses to the worker: a requester's page as range digests (`describePage`), or a responder's
 * answer to a requester's ranges (`answerPage`: the keys to list and to send whole).
 */
export type SpanWork =
  | { kind: 'describe'; horizonMs: number }
  | { kind: 'answer'; horizonMs: number; recordsMax: number; ranges: readonly RangeDigest[] };

/**
 * The span's keys with their versions (stamps: records without values), in key order, as the pool
 * thread encoded them (`encodePoolSpanEntries`): the main thread copies them into the ring whole,
 * with no work per key, and only the worker decodes them.
 */
export interface PoolSpanResult {
  /** Keys and stamps; a `describe` span's range digests (last key and digest); an `answer`'s keys listed, then sent whole. */
  entries: Uint8Array;
  truncated: boolean;
  /** A TTL cleaner's page: a value with a deadline was among the keys examined. */
  expiring?: boolean;
  /** An `answer` span's outcome besides its keys. */
  answer?: { listedCount: number; nextAfterKey: Uint8Array; done: boolean };
}

const SPAN_AFTER_KEY = 1;
const SPAN_LAST_KEY = 2;
const SPAN_OPEN_END = 4;
const SPAN_EXPIRED_AT = 8;
const SPAN_DESCRIBE = 16;
const SPAN_ANSWER = 32;
const SPAN_TRUNCATED = 1;
const SPAN_FAILED = 2;
const SPAN_EXPIRING = 4;
const SPAN_ANSWERED = 8;

export function poolSpanRequestBytes(r: PoolSpanRequest): number {
  return (
    8 +
    2 +
    (r.afterKey?.length ?? 0) +
    2 +
    (r.lastKey?.length ?? 0) +
    2 +
    2 +
    2 +
    (r.expiredAtMs === undefined ? 0 : 6) +
    spanWorkBytes(r.work)
  );
}

function spanWorkBytes(work: SpanWork | undefined): number {
  if (work === undefined) return 0;
  if (work.kind === 'describe') return 6;
  let n = 6 + 2;
  for (const r of work.ranges) n += 2 + r.lastKey.length + DIGEST_BYTES;
  return n;
}

/**
 * ResultKind.PoolSpan (worker → main): u16 fragment at 2, task id at 4, then the two keys, the u16
 * range count, the u16 keys per range, the u16 tail keys, then the cleaner's time (u48) when it is
 * one of its pages, or the work's horizon (u48) and, for an answer, the u16 records it may send and
 * each range (u16 length and last key, then its digest).
 */
export function writePoolSpanRequest(buf: Buffer, at: number, taskId: number, r: PoolSpanRequest): void {
  buf[at + KIND_AT] = ResultKind.PoolSpan;
  buf[at + FLAGS_AT] =
    (r.afterKey !== undefined ? SPAN_AFTER_KEY : 0) |
    (r.lastKey !== undefined ? SPAN_LAST_KEY : 0) |
    (r.openEnd ? SPAN_OPEN_END : 0) |
    (r.expiredAtMs !== undefined ? SPAN_EXPIRED_AT : 0) |
    (r.work?.kind === 'describe' ? SPAN_DESCRIBE : 0) |
    (r.work?.kind === 'answer' ? SPAN_ANSWER : 0);
  writeU16LE(buf, at + FRAGMENT_AT, r.fragment);
  writeU32LE(buf, at + ID_AT, taskId);
  const end = writeBytes16(buf, writeBytes16(buf, at + COMMON_HEADER_BYTES, r.afterKey), r.lastKey);
  writeU16LE(buf, end, r.rangeCount);
  writeU16LE(buf, end + 2, r.rangeKeys);
  writeU16LE(buf, end + 4, r.tailKeys);
  let p = end + 6;
  if (r.expiredAtMs !== undefined) {
    writeU48BE(buf, p, r.expiredAtMs);
    p += 6;
  }
  if (r.work === undefined) return;
  writeU48BE(buf, p, r.work.horizonMs);
  p += 6;
  if (r.work.kind !== 'answer') return;
  assert(r.work.ranges.length === r.rangeCount, 'an answer carries the ranges it counts');
  writeU16LE(buf, p, r.work.recordsMax);
  p += 2;
  for (const range of r.work.ranges) {
    p = writeBytes16(buf, p, range.lastKey);
    copyBytes(buf, p, range.digest);
    p += DIGEST_BYTES;
  }
}

/** The task id of a PoolSpan request record: what the main thread answers it with. */
export function poolSpanTaskIdOf(buf: Buffer, at: number): number {
  return readU32LE(buf, at + ID_AT);
}

/**
 * Decodes a PoolSpan request in the pool thread, from the record the worker wrote and the main
 * thread moved there whole: its keys and digests are views of that record.
 */
export function readPoolSpanRequest(buf: Buffer, at: number): { taskId: number; request: PoolSpanRequest } {
  const flags = buf[at + FLAGS_AT];
  const afterAt = at + COMMON_HEADER_BYTES;
  const lastAt = afterAt + 2 + readU16LE(buf, afterAt);
  const countAt = lastAt + 2 + readU16LE(buf, lastAt);
  const request: PoolSpanRequest = {
    fragment: readU16LE(buf, at + FRAGMENT_AT),
    afterKey: flags & SPAN_AFTER_KEY ? viewBytes16(buf, afterAt) : undefined,
    lastKey: flags & SPAN_LAST_KEY ? viewBytes16(buf, lastAt) : undefined,
    rangeCount: readU16LE(buf, countAt),
    rangeKeys: readU16LE(buf, countAt + 2),
    openEnd: (flags & SPAN_OPEN_END) !== 0,
    tailKeys: readU16LE(buf, countAt + 4),
  };
  let p = countAt + 6;
  if (flags & SPAN_EXPIRED_AT) {
    request.expiredAtMs = readU48BE(buf, p);
    p += 6;
  }
  if (flags & SPAN_DESCRIBE) request.work = { kind: 'describe', horizonMs: readU48BE(buf, p) };
  if (flags & SPAN_ANSWER) {
    const horizonMs = readU48BE(buf, p);
    const recordsMax = readU16LE(buf, p + 6);
    p += 8;
    const ranges: RangeDigest[] = [];
    for (let i = 0; i < request.rangeCount; i++) {
      const lastKey = viewBytes16(buf, p);
      p += 2 + lastKey.length;
      ranges.push({ lastKey, digest: buf.subarray(p, p + DIGEST_BYTES) });
      p += DIGEST_BYTES;
    }
    request.work = { kind: 'answer', horizonMs, recordsMax, ranges };
  }
  return { taskId: readU32LE(buf, at + ID_AT), request };
}

/** A span's entries as a PoolSpanResult record carries them: u16 length and key, u16 length and stamp, each. */
export function encodePoolSpanEntries(
  entries: ReadonlyArray<{ key: Uint8Array; record: Uint8Array }>,
): Buffer {
  let n = 0;
  for (const e of entries) n += 4 + e.key.length + valueOffsetOf(e.record);
  const out = Buffer.allocUnsafe(n);
  let p = 0;
  // The stamp is copied from the record, not taken as a view of it (a view per key adds up).
  for (const e of entries)
    p = writeBytes16(out, writeBytes16(out, p, e.key), e.record, valueOffsetOf(e.record));
  return out;
}

/** Range digests as a PoolSpanResult record carries them: each as an entry of its last key and digest. */
export function encodePoolSpanRanges(ranges: readonly RangeDigest[]): Buffer {
  let n = 0;
  for (const r of ranges) n += 4 + r.lastKey.length + r.digest.length;
  const out = Buffer.allocUnsafe(n);
  let p = 0;
  for (const r of ranges) p = writeBytes16(out, writeBytes16(out, p, r.lastKey), r.digest);
  return out;
}

/** An answer's keys (listed, then sent whole) and the rest of what it says, as the worker reads them. */
export function pageAnswerOf(span: {
  entries: Array<{ key: Buffer; record: Buffer }>;
  answer?: { listedCount: number; nextAfterKey: Uint8Array; done: boolean };
}): PageAnswer | undefined {
  const a = span.answer;
  if (a === undefined || a.listedCount > span.entries.length) return undefined;
  return {
    listed: span.entries.slice(0, a.listedCount),
    tail: span.entries.slice(a.listedCount),
    nextAfterKey: a.nextAfterKey,
    done: a.done,
  };
}

/** Bytes an answer's outcome takes before its entries: u32 listed count, u8 done, the next key. */
function answerBytes(answer: PoolSpanResult['answer']): number {
  return answer === undefined ? 0 : 4 + 1 + 2 + answer.nextAfterKey.length;
}

export function poolSpanResultBytes(span: PoolSpanResult | undefined): number {
  return COMMON_HEADER_BYTES + answerBytes(span?.answer) + (span?.entries.length ?? 0);
}

/** RequestKind.PoolSpanResult (main → worker): the span, or `undefined` when the pool failed. */
export function writePoolSpanResult(
  buf: Buffer,
  at: number,
  taskId: number,
  span: PoolSpanResult | undefined,
): void {
  buf[at + KIND_AT] = RequestKind.PoolSpanResult;
  buf[at + FLAGS_AT] =
    span === undefined
      ? SPAN_FAILED
      : (span.truncated ? SPAN_TRUNCATED : 0) |
        (span.expiring === true ? SPAN_EXPIRING : 0) |
        (span.answer !== undefined ? SPAN_ANSWERED : 0);
  writeU16LE(buf, at + FRAGMENT_AT, 0);
  writeU32LE(buf, at + ID_AT, taskId);
  let p = at + COMMON_HEADER_BYTES;
  const answer = span?.answer;
  if (answer !== undefined) {
    writeU32LE(buf, p, answer.listedCount);
    buf[p + 4] = answer.done ? 1 : 0;
    p = writeBytes16(buf, p + 5, answer.nextAfterKey);
  }
  if (span !== undefined && span.entries.length > 0) copyBytes(buf, p, span.entries);
}

/**
 * A PoolSpanResult record for the request `taskId`, written by the pool thread into an ArrayBuffer
 * of its own, so that it moves to the main thread (not cloned) and is copied into the ring whole.
 */
export function encodePoolSpanResult(taskId: number, span: PoolSpanResult): Buffer {
  const record = Buffer.allocUnsafeSlow(poolSpanResultBytes(span));
  writePoolSpanResult(record, 0, taskId, span);
  return record;
}

/**
 * Decodes a PoolSpanResult, copied out of ring memory in one piece that its keys and stamps view;
 * undefined when the pool failed.
 */
export function readPoolSpanResult(
  buf: Buffer,
  at: number,
  end: number,
):
  | {
      entries: Array<{ key: Buffer; record: Buffer }>;
      truncated: boolean;
      expiring: boolean;
      answer?: { listedCount: number; nextAfterKey: Uint8Array; done: boolean };
    }
  | undefined {
  const flags = buf[at + FLAGS_AT];
  if ((flags & SPAN_FAILED) !== 0) return undefined;
  let from = at + COMMON_HEADER_BYTES;
  let answer: { listedCount: number; nextAfterKey: Uint8Array; done: boolean } | undefined;
  if ((flags & SPAN_ANSWERED) !== 0) {
    const nextAfterKey = readBytes16(buf, from + 5);
    answer = { listedCount: readU32LE(buf, from), done: buf[from + 4] === 1, nextAfterKey };
    from += 5 + 2 + nextAfterKey.length;
  }
  const body = Buffer.from(buf.subarray(from, end));
  const entries: Array<{ key: Buffer; record: Buffer }> = [];
  for (let p = 0; p < body.length; ) {
    const keyEnd = p + 2 + body.readUInt16LE(p);
    const stampEnd = keyEnd + 2 + body.readUInt16LE(keyEnd);
    entries.push({ key: body.subarray(p + 2, keyEnd), record: body.subarray(keyEnd + 2, stampEnd) });
    p = stampEnd;
  }
  const truncated = (flags & SPAN_TRUNCATED) !== 0;
  const expiring = (flags & SPAN_EXPIRING) !== 0;
  return answer === undefined ? { entries, truncated, expiring } : { entries, truncated, expiring, answer };
}

/** Writes the first `n` bytes (all of them by default) with a u16 length before them. */
function writeBytes16(
  buf: Buffer,
  at: number,
  bytes: Uint8Array | undefined,
  n = bytes?.length ?? 0,
): number {
  buf.writeUInt16LE(n, at);
  if (n > 0) copyRange(bytes!, 0, n, buf, at + 2);
  return at + 2 + n;
}

/** A u16-length-prefixed byte string, as a view of `buf`. */
function viewBytes16(buf: Buffer, at: number): Buffer {
  return buf.subarray(at + 2, at + 2 + readU16LE(buf, at));
}

function readBytes16(buf: Buffer, at: number): Buffer {
  const n = buf.readUInt16LE(at);
  return Buffer.from(buf.subarray(at + 2, at + 2 + n));
}

export function writeResultHeader(
  buf: Buffer,
  at: number,
  status: number,
  detail: number,
  reqId: number,
): number {
  buf[at + KIND_AT] = status;
  buf[at + FLAGS_AT] = detail;
  writeU16LE(buf, at + FRAGMENT_AT, 0);
  writeU32LE(buf, at + ID_AT, reqId);
  return at + RESULT_HEADER_BYTES;
}

/** An Error result in a fresh buffer, as a worker writes one: the kind in `detail`, the message after. */
export function encodeErrorResult(kind: ErrorKind, message: string, reqId = 0): Buffer {
  const text = truncateErrorMessage(message);
  const out = Buffer.alloc(RESULT_HEADER_BYTES + Buffer.byteLength(text));
  out.write(text, writeResultHeader(out, 0, ResultKind.Error, kind, reqId), 'utf8');
  return out;
}

/** Writes the header of an Acks record; the reqIds follow it, 4 bytes each. */
export function writeAcksHeader(
  buf: Buffer,
  at: number,
  reply: Reply,
  detail: number,
  count: number,
): number {
  buf[at + KIND_AT] = ResultKind.Acks;
  buf[at + FLAGS_AT] = detail;
  buf[at + ACKS_REPLY_AT] = reply;
  buf[at + ACKS_REPLY_AT + 1] = 0;
  writeU32LE(buf, at + ID_AT, count);
  return at + RESULT_HEADER_BYTES;
}
const ACKS_REPLY_AT = 2;

export const acksReply = (buf: Buffer, at: number): number => buf[at + ACKS_REPLY_AT];
export const acksCount = (buf: Buffer, at: number): number => readU32LE(buf, at + ID_AT);

export const resultStatus = (buf: Buffer, at: number): number => buf[at + KIND_AT];
export const resultDetail = (buf: Buffer, at: number): number => buf[at + FLAGS_AT];
/**
 * A write's detail byte: whether a live value existed before it, and the replicas it reached (no
 * more than it may ask for: REPLICA_ACKS_MAX fits the 7 bits).
 */
export const writeDetail = (prior: boolean, reached: number): number =>
  (prior ? PRIOR_BIT : 0) | (Math.min(reached, REPLICA_ACKS_MAX) << REACHED_SHIFT);
/** Whether a live value existed before the write (`writeDetail`). */
export const resultHadPrior = (buf: Buffer, at: number): boolean => (buf[at + FLAGS_AT] & PRIOR_BIT) !== 0;
/** The replicas a write with the replica-wait flag reached (`writeDetail`). */
export const resultReplicasReached = (buf: Buffer, at: number): number => buf[at + FLAGS_AT] >> REACHED_SHIFT;
export const resultId = (buf: Buffer, at: number): number => readU32LE(buf, at + ID_AT);
/** Replaces an encoded result's id (a result passed back under its origin's id). */
export const setResultId = (buf: Uint8Array, at: number, reqId: number): void =>
  writeU32LE(buf, at + ID_AT, reqId);

/** Bytes of a record as a result carries it: whole, or header and node id only. */
export function resultRecordBytes(record: Uint8Array, headerOnly: boolean): number {
  return headerOnly ? valueOffsetOf(record) : record.length;
}

/** One live entry of a scan page. */
export interface ScanEntry {
  key: Buffer;
  /** The stored record (its stamp for stamps-only scans), or undefined for keys-only scans. */
  record: Buffer | undefined;
}

/**
 * Scan page payload: u8 done, u16 resumeKeyLength, resumeKey (the last key examined: the next page
 * starts strictly after it), u32 count, then per entry u16 keyLength, key, u32 recordLength, record.
 */
export function scanPageBytes(entries: readonly ScanEntry[], resumeKey: Uint8Array | undefined): number {
  let n = 1 + 2 + (resumeKey?.length ?? 0) + 4;
  for (const e of entries) n += 2 + e.key.length + 4 + (e.record?.length ?? 0);
  return n;
}

export function writeScanPage(
  buf: Buffer,
  at: number,
  done: boolean,
  resumeKey: Uint8Array | undefined,
  entries: readonly ScanEntry[],
): number {
  buf[at] = done ? 1 : 0;
  let p = writeBytes16(buf, at + 1, resumeKey);
  buf.writeUInt32LE(entries.length, p);
  p += 4;
  for (const e of entries) {
    p = writeBytes16(buf, p, e.key);
    const n = e.record?.length ?? 0;
    buf.writeUInt32LE(n, p);
    if (n > 0) copyBytes(buf, p + 4, e.record!);
    p += 4 + n;
  }
  return p;
}

export interface ScanPage {
  done: boolean;
  resumeKey: Buffer | undefined;
  entries: ScanEntry[];
}

/**
 * Why a result from outside this process (a peer's answer to a forwarded operation) cannot be handed
 * to the handlers — which assume well-formed results — or undefined when it can.
 */
export function checkResult(buf: Buffer, at: number, length: number): string | undefined {
  if (length < RESULT_HEADER_BYTES) return 'result shorter than its header';
  const end = at + length;
  const status = resultStatus(buf, at);
  if (status === Reply.Found || status === Reply.Superseded) {
    return isWellFormedRecord(buf.subarray(at + RESULT_HEADER_BYTES, end)) ? undefined : 'malformed record';
  }
  if (status === ResultKind.Error)
    return isErrorKind(resultDetail(buf, at)) ? undefined : 'unknown error kind';
  if (status === ResultKind.ScanPage) return checkScanPage(buf, at + RESULT_HEADER_BYTES, end);
  return status >= Reply.Applied && status <= Reply.Refused ? undefined : `unknown result status ${status}`;
}

function checkScanPage(buf: Buffer, at: number, end: number): string | undefined {
  if (at + 7 > end) return 'scan page cut short';
  let p = at + 3 + buf.readUInt16LE(at + 1);
  if (p + 4 > end) return 'scan page cut short';
  const count = buf.readUInt32LE(p);
  p += 4;
  for (let i = 0; i < count; i++) {
    if (p + 2 > end) return 'scan page cut short';
    p += 2 + buf.readUInt16LE(p);
    if (p + 4 > end) return 'scan page cut short';
    const n = buf.readUInt32LE(p);
    if (p + 4 + n > end || (n > 0 && !isWellFormedRecord(buf.subarray(p + 4, p + 4 + n)))) {
      return 'malformed scan entry';
    }
    p += 4 + n;
  }
  return p === end ? undefined : 'scan page length does not match';
}

/** Decodes a scan page, copying everything out of ring memory. */
export function readScanPage(buf: Buffer, at: number, end: number): ScanPage {
  const done = buf[at] === 1;
  const resume = readBytes16(buf, at + 1);
  let p = at + 3 + resume.length;
  const count = buf.readUInt32LE(p);
  p += 4;
  const entries: ScanEntry[] = [];
  for (let i = 0; i < count; i++) {
    const key = readBytes16(buf, p);
    p += 2 + key.length;
    const n = buf.readUInt32LE(p);
    entries.push({ key, record: n > 0 ? Buffer.from(buf.subarray(p + 4, p + 4 + n)) : undefined });
    p += 4 + n;
  }
  assert(p === end, 'scan page length does not match its record');
  return { done, resumeKey: done ? undefined : resume, entries };
}

// --- runtime placement control (HoldFragment, DropFragment, AddMembers, ReconcileNow, DrainedTo) ---

/** Writes the header of a control request about one fragment; returns where its payload starts. */
function writeFragmentControlHeader(
  buf: Buffer,
  at: number,
  kind: number,
  fragment: number,
  reqId: number,
): number {
  writeControlHeader(buf, at, kind, reqId);
  writeU16LE(buf, at + FRAGMENT_AT, fragment);
  return at + CONTROL_HEADER_BYTES;
}

/** The fragment a control request is about (HoldFragment, DropFragment, ReconcileNow, DrainedTo). */
export const controlFragment = (buf: Buffer, at: number): number => readU16LE(buf, at + FRAGMENT_AT);

export const holdRequestBytes = (replicas: readonly number[]): number =>
  CONTROL_HEADER_BYTES + 2 + 2 * replicas.length;

export function writeHoldRequest(
  buf: Buffer,
  at: number,
  reqId: number,
  fragment: number,
  replicas: readonly number[],
): void {
  const p = writeFragmentControlHeader(buf, at, RequestKind.HoldFragment, fragment, reqId);
  writeU16LE(buf, p, replicas.length);
  for (let i = 0; i < replicas.length; i++) writeU16LE(buf, p + 2 + 2 * i, replicas[i]);
}

export function readHoldReplicas(buf: Buffer, at: number): number[] {
  const p = controlPayloadAt(at);
  const count = readU16LE(buf, p);
  const replicas: number[] = [];
  for (let i = 0; i < count; i++) replicas.push(readU16LE(buf, p + 2 + 2 * i));
  return replicas;
}

export function writeDropRequest(buf: Buffer, at: number, reqId: number, fragment: number): void {
  writeFragmentControlHeader(buf, at, RequestKind.DropFragment, fragment, reqId);
}

export function membersRequestBytes(nodeIds: readonly string[]): number {
  let n = CONTROL_HEADER_BYTES + 4;
  for (const id of nodeIds) n += 2 + Buffer.byteLength(id);
  return n;
}

/** AddMembers: `nodeIds` are the member slots from index `first` on. */
export function writeMembersRequest(
  buf: Buffer,
  at: number,
  reqId: number,
  first: number,
  nodeIds: readonly string[],
): void {
  let p = writeControlHeader(buf, at, RequestKind.AddMembers, reqId);
  writeU16LE(buf, p, first);
  writeU16LE(buf, p + 2, nodeIds.length);
  p += 4;
  for (const id of nodeIds) {
    const n = buf.write(id, p + 2, 'utf8');
    writeU16LE(buf, p, n);
    p += 2 + n;
  }
}

export function readMembersRequest(buf: Buffer, at: number): { first: number; nodeIds: string[] } {
  let p = controlPayloadAt(at);
  const first = readU16LE(buf, p);
  const count = readU16LE(buf, p + 2);
  p += 4;
  const nodeIds: string[] = [];
  for (let i = 0; i < count; i++) {
    const n = readU16LE(buf, p);
    nodeIds.push(buf.toString('utf8', p + 2, p + 2 + n));
    p += 2 + n;
  }
  return { first, nodeIds };
}

export const RECONCILE_NOW_REQUEST_BYTES = CONTROL_HEADER_BYTES + 6;
export const DRAINED_TO_REQUEST_BYTES = CONTROL_HEADER_BYTES + 12;
/** A ReconcileNow flag: the round verifies a copy (ReplicationDriver.reconcileNow `verify`). */
const RECONCILE_VERIFY_FLAG = 1;
/** A ReconcileNow flag: clients' requests wait for the round (ReplicationDriver.reconcileNow `urgent`). */
const RECONCILE_URGENT_FLAG = 2;
/** A DrainedTo answer's detail: the sender's continuity is the one the request named. */
export const DRAINED_CONTINUOUS = 1;

export function writeReconcileNowRequest(
  buf: Buffer,
  at: number,
  reqId: number,
  fragment: number,
  member: number,
  timeoutMs: number,
  verify: boolean,
  urgent = false,
): void {
  const p = writeFragmentControlHeader(buf, at, RequestKind.ReconcileNow, fragment, reqId);
  buf[at + FLAGS_AT] = (verify ? RECONCILE_VERIFY_FLAG : 0) | (urgent ? RECONCILE_URGENT_FLAG : 0);
  writeU16LE(buf, p, member);
  writeU32LE(buf, p + 2, timeoutMs);
}

export const reconcileVerifies = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & RECONCILE_VERIFY_FLAG) !== 0;
export const reconcileIsUrgent = (buf: Buffer, at: number): boolean =>
  (buf[at + FLAGS_AT] & RECONCILE_URGENT_FLAG) !== 0;

export function writeDrainedToRequest(
  buf: Buffer,
  at: number,
  reqId: number,
  fragment: number,
  member: number,
  level: number,
  timeoutMs: number,
  continuity: number,
): void {
  const p = writeFragmentControlHeader(buf, at, RequestKind.DrainedTo, fragment, reqId);
  writeU16LE(buf, p, member);
  buf[p + 2] = level;
  buf[p + 3] = 0;
  writeU32LE(buf, p + 4, timeoutMs);
  writeU32LE(buf, p + 8, continuity);
}

/** What a ReconcileNow or DrainedTo waits for (`level` and `continuity`: DrainedTo only). */
export interface PeerWait {
  member: number;
  level: number;
  timeoutMs: number;
  /** The sender continuity the answer compares with (0: none). */
  continuity: number;
}

export function readPeerWait(buf: Buffer, at: number): PeerWait {
  const p = controlPayloadAt(at);
  if (buf[at + KIND_AT] === RequestKind.ReconcileNow)
    return { member: readU16LE(buf, p), level: 0, timeoutMs: readU32LE(buf, p + 2), continuity: 0 };
  return {
    member: readU16LE(buf, p),
    level: buf[p + 2],
    timeoutMs: readU32LE(buf, p + 4),
    continuity: readU32LE(buf, p + 8),
  };
}

/** How an anti-entropy round of one (fragment, peer) sender ended. */
export interface RoundReport {
  fragment: number;
  member: number;
  /** The sender's count of rounds started, this one included (1 for its first). */
  roundSeq: number;
  roundId: number;
  /** The round compared every page with the peer (false: it failed, or was abandoned). */
  ok: boolean;
  /** Keys the round fetched from the peer (newer there, or missing here). */
  keysPulled: number;
  /** Bytes of those keys and their records (what `--move-rate` limits). */
  bytesPulled: number;
  /**
   * The peer's copy of the fragment as its latest summary page of the round said (an estimate:
   * src/core/reconciler.ts SourceSize); undefined until one did. Counts past 2^48 - 1 read as that.
   */
  sourceSize: SourceSize | undefined;
  /**
   * The peer's replication continuity (src/core/replication-sender.ts) this node had heard when the
   * round started; 0 when none.
   */
  continuity: number;
  /**
   * The round compared everything, with no horizon: complete, under a continuity, it verified this
   * copy against the peer (src/workers/replication.ts).
   */
  whole: boolean;
  /** Why it failed; empty when ok. */
  reason: string;
}

// Round report, after the result header (flags bit 0: ok; bit 1: the source's size is known;
// bit 2: whole):
//   0  u16  member
//   2  u32  roundSeq
//   6  u32  roundId
//   10 u32  keysPulled
//   14 u48  bytesPulled
//   20 u48  sourceKeys    (0 unless known)
//   26 u48  sourceBytes   (0 unless known)
//   32 u32  continuity
//   36 …    reason, UTF-8, to the end
const ROUND_MEMBER_AT = 0;
const ROUND_SEQ_AT = 2;
const ROUND_ID_AT = 6;
const ROUND_KEYS_PULLED_AT = 10;
const ROUND_BYTES_PULLED_AT = 14;
const ROUND_SOURCE_KEYS_AT = 20;
const ROUND_SOURCE_BYTES_AT = 26;
const ROUND_CONTINUITY_AT = 32;
const ROUND_REASON_AT = 36;
const ROUND_OK_FLAG = 1;
const ROUND_SOURCE_SIZE_FLAG = 2;
const ROUND_WHOLE_FLAG = 4;
const U48_MAX = 2 ** 48 - 1;
const ROUND_REPORT_BYTES = RESULT_HEADER_BYTES + ROUND_REASON_AT;

export const roundReportBytes = (r: RoundReport): number => ROUND_REPORT_BYTES + Buffer.byteLength(r.reason);

/** RoundReport or RoundProgress (reqId 0), or RoundAnswer. The reason is at most ERROR_MESSAGE_BYTES_MAX (truncateErrorMessage). */
export function writeRoundReport(buf: Buffer, at: number, kind: number, reqId: number, r: RoundReport): void {
  const source = r.sourceSize;
  buf[at + KIND_AT] = kind;
  buf[at + FLAGS_AT] =
    (r.ok ? ROUND_OK_FLAG : 0) |
    (source === undefined ? 0 : ROUND_SOURCE_SIZE_FLAG) |
    (r.whole ? ROUND_WHOLE_FLAG : 0);
  writeU16LE(buf, at + FRAGMENT_AT, r.fragment);
  writeU32LE(buf, at + ID_AT, reqId);
  const p = at + RESULT_HEADER_BYTES;
  writeU16LE(buf, p + ROUND_MEMBER_AT, r.member);
  writeU32LE(buf, p + ROUND_SEQ_AT, r.roundSeq);
  writeU32LE(buf, p + ROUND_ID_AT, r.roundId);
  writeU32LE(buf, p + ROUND_KEYS_PULLED_AT, r.keysPulled);
  buf.writeUIntLE(r.bytesPulled, p + ROUND_BYTES_PULLED_AT, 6);
  buf.writeUIntLE(Math.min(source?.keys ?? 0, U48_MAX), p + ROUND_SOURCE_KEYS_AT, 6);
  buf.writeUIntLE(Math.min(source?.bytes ?? 0, U48_MAX), p + ROUND_SOURCE_BYTES_AT, 6);
  writeU32LE(buf, p + ROUND_CONTINUITY_AT, r.continuity);
  buf.write(r.reason, p + ROUND_REASON_AT, 'utf8');
}

export function readRoundReport(buf: Buffer, at: number, length: number): RoundReport {
  assert(length >= ROUND_REPORT_BYTES, 'a round report shorter than its fields');
  const p = at + RESULT_HEADER_BYTES;
  const flags = buf[at + FLAGS_AT];
  return {
    fragment: readU16LE(buf, at + FRAGMENT_AT),
    member: readU16LE(buf, p + ROUND_MEMBER_AT),
    roundSeq: readU32LE(buf, p + ROUND_SEQ_AT),
    roundId: readU32LE(buf, p + ROUND_ID_AT),
    ok: (flags & ROUND_OK_FLAG) !== 0,
    keysPulled: readU32LE(buf, p + ROUND_KEYS_PULLED_AT),
    bytesPulled: buf.readUIntLE(p + ROUND_BYTES_PULLED_AT, 6),
    sourceSize:
      (flags & ROUND_SOURCE_SIZE_FLAG) === 0
        ? undefined
        : {
            keys: buf.readUIntLE(p + ROUND_SOURCE_KEYS_AT, 6),
            bytes: buf.readUIntLE(p + ROUND_SOURCE_BYTES_AT, 6),
          },
    continuity: readU32LE(buf, p + ROUND_CONTINUITY_AT),
    whole: (flags & ROUND_WHOLE_FLAG) !== 0,
    reason: buf.toString('utf8', p + ROUND_REASON_AT, at + length),
  };
}
