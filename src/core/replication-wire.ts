// ReplicateBatch, ReconcileData and ReconcileResponse (proto/peer.proto) encoded and read by hand:
// they are the peer messages whose size grows with the write rate and with a copy's bytes (a page
// carries a copy's records), and protobufjs's object mapping costs more per replicated write than
// storing it (~1.2 µs against ~0.7 µs, measured; decoding a page copied each record twice). The
// bytes are the same protobuf encoding: other decoders read them unchanged. Records and keys are
// read as views into the frame.

import {
  ANY_FIELD,
  EnvelopeField,
  forEachField,
  peekEnvelope,
  readDoubleAt,
  varintBytes,
  writeVarint,
} from './peer-frame.js';
import { wallMsOf } from './record.js';

export interface ReplicatedOpView {
  key: Uint8Array;
  record: Uint8Array;
}

export interface ReplicateBatchView {
  fragment: number;
  sessionId: number;
  batchSeq: number;
  requiredAckLevel: number;
  maxWallMs: number;
  ops: readonly ReplicatedOpView[];
}

/** A page of an anti-entropy fetch's records (ReconcileData): a copy's bytes travel in these. */
export interface ReconcileDataView {
  fragment: number;
  sessionId: number;
  roundId: number;
  chunkSeq: number;
  pageSeq: number;
  entries: readonly ReplicatedOpView[];
  done: boolean;
  maxWallMs: number;
}

/** An anti-entropy page (ReconcileResponse): summaries to fetch, and the records a copy takes whole. */
export interface ReconcileResponseView {
  fragment: number;
  sessionId: number;
  roundId: number;
  pageSeq: number;
  /** Keys with their stamps (KeySummary: key, stamp). */
  summaries: readonly { key: Uint8Array; stamp: Uint8Array }[];
  done: boolean;
  nextAfterKey: Uint8Array;
  /** The responder's copy of the fragment; undefined (null as protobufjs decodes it) when it did not say. */
  sourceSize?: { keys: number; bytes: number } | null;
  records: readonly ReplicatedOpView[];
  /** The newest wall-clock ms among `records`; 0 when none. */
  maxWallMs: number;
}

/** ReconcileResponse's fields (proto/peer.proto). */
const RESPONSE: {
  varints: readonly number[];
  summaries: number;
  nextAfterKey: number;
  sourceSize: number;
  records: number;
  maxWallMs: number;
} = {
  // fragment, session_id, round_id, page_seq, done
  varints: [1, 2, 3, 4, 6],
  summaries: 5,
  nextAfterKey: 7,
  sourceSize: 8,
  records: 9,
  maxWallMs: 10,
};

/** Where a message of varint fields, one double and repeated ReplicatedOp keeps each (proto/peer.proto). */
interface OpsMessageLayout {
  /** Below 16: its tag is one byte. */
  envelopeField: EnvelopeField;
  /** Its varint fields (uint32, bool), in the order their values are given. */
  varints: readonly number[];
  maxWallMs: number;
  ops: number;
}

const BATCH: OpsMessageLayout = {
  envelopeField: EnvelopeField.ReplicateBatch,
  // fragment, session_id, batch_seq, required_ack_level
  varints: [1, 2, 3, 4],
  maxWallMs: 5,
  ops: 6,
};
const DATA: OpsMessageLayout = {
  envelopeField: EnvelopeField.ReconcileData,
  // fragment, session_id, round_id, chunk_seq, page_seq, done
  varints: [1, 2, 3, 4, 5, 7],
  maxWallMs: 8,
  ops: 6,
};

/**
 * The newest wall-clock ms among `ops`' records (0 when none): the `max_wall_ms` of a message that
 * carries them, which the receiving node's clock observes before its worker merges them.
 */
export function newestWallMs(ops: readonly ReplicatedOpView[]): number {
  let newest = 0;
  for (const op of ops) newest = Math.max(newest, wallMsOf(op.record));
  return newest;
}

/** Bytes of a length-delimited field holding `n` bytes. */
function lengthDelimitedBytes(n: number): number {
  return 1 + varintBytes(n) + n;
}

function varintFieldBytes(value: number): number {
  return value === 0 ? 0 : 1 + varintBytes(value);
}

/** The encoded Envelope { replicate_batch } (without the frame's length prefix). */
export function encodeReplicateBatch(b: ReplicateBatchView): Uint8Array {
  return encodeOpsMessage(
    BATCH,
    [b.fragment, b.sessionId, b.batchSeq, b.requiredAckLevel],
    b.maxWallMs,
    b.ops,
  );
}

/** The encoded Envelope { reconcile_data } (without the frame's length prefix). */
export function encodeReconcileData(d: ReconcileDataView): Uint8Array {
  const values = [d.fragment, d.sessionId, d.roundId, d.chunkSeq, d.pageSeq, d.done ? 1 : 0];
  return encodeOpsMessage(DATA, values, d.maxWallMs, d.entries);
}

function encodeOpsMessage(
  layout: OpsMessageLayout,
  values: readonly number[],
  maxWallMs: number,
  ops: readonly ReplicatedOpView[],
): Uint8Array {
  let body = maxWallMs === 0 ? 0 : 9;
  for (const v of values) body += varintFieldBytes(v);
  for (const op of ops) body += lengthDelimitedBytes(opBytes(op));
  const out = Buffer.allocUnsafe(lengthDelimitedBytes(body));
  out[0] = (layout.envelopeField << 3) | 2;
  let p = writeVarint(out, 1, body);
  for (let i = 0; i < values.length; i++) p = writeVarintField(out, p, layout.varints[i], values[i]);
  if (maxWallMs !== 0) {
    out[p++] = (layout.maxWallMs << 3) | 1;
    out.writeDoubleLE(maxWallMs, p);
    p += 8;
  }
  for (const op of ops) p = writePairField(out, p, layout.ops, op.key, op.record);
  return out;
}

/** Bytes of one ReplicatedOp message. */
function opBytes(op: ReplicatedOpView): number {
  return pairBytes(op.key, op.record);
}

/** Bytes of a message of two bytes fields, 1 and 2 (ReplicatedOp, KeySummary). */
function pairBytes(first: Uint8Array, second: Uint8Array): number {
  return lengthDelimitedBytes(first.length) + lengthDelimitedBytes(second.length);
}

/** Writes a message of two bytes fields, 1 and 2, as field `field`; returns the next offset. */
function writePairField(
  out: Buffer,
  p: number,
  field: number,
  first: Uint8Array,
  second: Uint8Array,
): number {
  out[p] = (field << 3) | 2;
  p = writeVarint(out, p + 1, pairBytes(first, second));
  return writeBytesField(out, writeBytesField(out, p, 1, first), 2, second);
}

/** FragmentSize's bytes: its two doubles, each left out when 0 (as proto3 does). */
function sizeBytes(size: { keys: number; bytes: number }): number {
  return (size.keys === 0 ? 0 : 9) + (size.bytes === 0 ? 0 : 9);
}

/** The encoded Envelope { reconcile_response } (without the frame's length prefix). */
export function encodeReconcileResponse(r: ReconcileResponseView): Uint8Array {
  const values = [r.fragment, r.sessionId, r.roundId, r.pageSeq, r.done ? 1 : 0];
  const size = r.sourceSize ?? undefined;
  let body = 0;
  for (const v of values) body += varintFieldBytes(v);
  for (const s of r.summaries) body += lengthDelimitedBytes(pairBytes(s.key, s.stamp));
  if (r.nextAfterKey.length > 0) body += lengthDelimitedBytes(r.nextAfterKey.length);
  if (size !== undefined) body += lengthDelimitedBytes(sizeBytes(size));
  for (const op of r.records) body += lengthDelimitedBytes(opBytes(op));
  if (r.maxWallMs !== 0) body += 9;
  const out = Buffer.allocUnsafe(lengthDelimitedBytes(body));
  out[0] = (EnvelopeField.ReconcileResponse << 3) | 2;
  let p = writeVarint(out, 1, body);
  // Fields in number order, as protobufjs writes them.
  for (let i = 0; i < 4; i++) p = writeVarintField(out, p, RESPONSE.varints[i], values[i]);
  for (const s of r.summaries) p = writePairField(out, p, RESPONSE.summaries, s.key, s.stamp);
  p = writeVarintField(out, p, RESPONSE.varints[4], values[4]);
  if (r.nextAfterKey.length > 0) p = writeBytesField(out, p, RESPONSE.nextAfterKey, r.nextAfterKey);
  if (size !== undefined) {
    out[p] = (RESPONSE.sourceSize << 3) | 2;
    p = writeVarint(out, p + 1, sizeBytes(size));
    p = writeDoubleField(out, p, 1, size.keys);
    p = writeDoubleField(out, p, 2, size.bytes);
  }
  for (const op of r.records) p = writePairField(out, p, RESPONSE.records, op.key, op.record);
  writeDoubleField(out, p, RESPONSE.maxWallMs, r.maxWallMs);
  return out;
}

/** Writes a double field unless it is zero; returns the next offset. */
function writeDoubleField(out: Buffer, p: number, field: number, value: number): number {
  if (value === 0) return p;
  out[p] = (field << 3) | 1;
  out.writeDoubleLE(value, p + 1);
  return p + 9;
}

/** Reads an encoded Envelope { reconcile_response }; undefined when it is not one or is malformed. */
export function readReconcileResponse(bytes: Uint8Array): ReconcileResponseView | undefined {
  const peek = peekEnvelope(bytes);
  if (peek === undefined || peek.field !== EnvelopeField.ReconcileResponse) return undefined;
  const values = [0, 0, 0, 0, 0];
  const summaries: { key: Uint8Array; stamp: Uint8Array }[] = [];
  const records: ReplicatedOpView[] = [];
  let nextAfterKey: Uint8Array = EMPTY;
  let sourceSize: { keys: number; bytes: number } | undefined;
  let maxWallMs = 0;
  let nestedWellFormed = true;
  const wellFormed = forEachField(
    bytes,
    peek.start,
    peek.end,
    ANY_FIELD,
    (start, end, field) => {
      if (field === RESPONSE.summaries || field === RESPONSE.records) {
        const pair = readPair(bytes, start, end);
        if (pair === undefined) nestedWellFormed = false;
        else if (field === RESPONSE.records) records.push({ key: pair[0], record: pair[1] });
        else summaries.push({ key: pair[0], stamp: pair[1] });
      } else if (field === RESPONSE.nextAfterKey) {
        nextAfterKey = bytes.subarray(start, end);
      } else if (field === RESPONSE.sourceSize) {
        const size = { keys: 0, bytes: 0 };
        const ok = forEachField(bytes, start, end, 0, ignore, undefined, (f, at) => {
          if (f === 1) size.keys = readDoubleAt(bytes, at);
          else if (f === 2) size.bytes = readDoubleAt(bytes, at);
        });
        if (!ok) nestedWellFormed = false;
        sourceSize = size;
      }
    },
    (field, value) => {
      const i = RESPONSE.varints.indexOf(field);
      if (i !== -1) values[i] = value;
    },
    (field, at) => {
      if (field === RESPONSE.maxWallMs) maxWallMs = readDoubleAt(bytes, at);
    },
  );
  if (!wellFormed || !nestedWellFormed) return undefined;
  const [fragment, sessionId, roundId, pageSeq, done] = values;
  return {
    fragment,
    sessionId,
    roundId,
    pageSeq,
    summaries,
    done: done !== 0,
    nextAfterKey,
    sourceSize: sourceSize ?? null,
    records,
    maxWallMs,
  };
}

/** A message of two bytes fields, 1 and 2, as views (either empty when absent); undefined when malformed. */
function readPair(bytes: Uint8Array, start: number, end: number): [Uint8Array, Uint8Array] | undefined {
  const pair: [Uint8Array, Uint8Array] = [EMPTY, EMPTY];
  const ok = forEachField(bytes, start, end, ANY_FIELD, (s, e, field) => {
    if (field === 1) pair[0] = bytes.subarray(s, e);
    else if (field === 2) pair[1] = bytes.subarray(s, e);
  });
  return ok ? pair : undefined;
}

const EMPTY = new Uint8Array(0);
const ignore = (): void => {};

/** Writes a varint field unless it is zero (proto3 leaves zeros out); returns the next offset. */
function writeVarintField(out: Buffer, p: number, field: number, value: number): number {
  if (value === 0) return p;
  out[p] = field << 3;
  return writeVarint(out, p + 1, value);
}

function writeBytesField(out: Buffer, p: number, field: number, bytes: Uint8Array): number {
  out[p] = (field << 3) | 2;
  const at = writeVarint(out, p + 1, bytes.length);
  out.set(bytes, at);
  return at + bytes.length;
}

/** Reads an encoded Envelope { replicate_batch }; undefined when it is not one or is malformed. */
export function readReplicateBatch(bytes: Uint8Array): ReplicateBatchView | undefined {
  const m = readOpsMessage(bytes, BATCH);
  if (m === undefined) return undefined;
  const [fragment, sessionId, batchSeq, requiredAckLevel] = m.values;
  return { fragment, sessionId, batchSeq, requiredAckLevel, maxWallMs: m.maxWallMs, ops: m.ops };
}

/** Reads an encoded Envelope { reconcile_data }; undefined when it is not one or is malformed. */
export function readReconcileData(bytes: Uint8Array): ReconcileDataView | undefined {
  const m = readOpsMessage(bytes, DATA);
  if (m === undefined) return undefined;
  const [fragment, sessionId, roundId, chunkSeq, pageSeq, done] = m.values;
  return {
    fragment,
    sessionId,
    roundId,
    chunkSeq,
    pageSeq,
    entries: m.ops,
    done: done !== 0,
    maxWallMs: m.maxWallMs,
  };
}

/** The message's varint values (in the layout's order; absent ones 0), its double and its ops, as views. */
function readOpsMessage(
  bytes: Uint8Array,
  layout: OpsMessageLayout,
): { values: number[]; maxWallMs: number; ops: ReplicatedOpView[] } | undefined {
  const peek = peekEnvelope(bytes);
  if (peek === undefined || peek.field !== layout.envelopeField) return undefined;
  const values = layout.varints.map(() => 0);
  const ops: ReplicatedOpView[] = [];
  let maxWallMs = 0;
  let opsWellFormed = true;
  const wellFormed = forEachField(
    bytes,
    peek.start,
    peek.end,
    layout.ops,
    (start, end) => {
      const pair = readPair(bytes, start, end);
      if (pair === undefined) opsWellFormed = false;
      else ops.push({ key: pair[0], record: pair[1] });
    },
    (field, value) => {
      const i = layout.varints.indexOf(field);
      if (i !== -1) values[i] = value;
    },
    (field, at) => {
      if (field === layout.maxWallMs) maxWallMs = readDoubleAt(bytes, at);
    },
  );
  return wellFormed && opsWellFormed ? { values, maxWallMs, ops } : undefined;
}
