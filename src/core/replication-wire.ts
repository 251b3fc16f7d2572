// ReplicateBatch and ReconcileData (proto/peer.proto) encoded and read by hand: they are the peer
// messages whose size grows with the write rate and with a copy's bytes, and protobufjs's object
// mapping costs more per replicated write than storing it (~1.2 µs against ~0.7 µs, measured). The
// bytes are the same protobuf encoding: other decoders read them unchanged. Records and keys are
// read as views into the frame.

import {
  ANY_FIELD,
  EnvelopeField,
  forEachField,
  peekEnvelope,
  varintBytes,
  writeVarint,
} from './peer-frame.js';

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
  for (const op of ops) {
    out[p++] = (layout.ops << 3) | 2;
    p = writeVarint(out, p, opBytes(op));
    p = writeBytesField(out, p, 1, op.key);
    p = writeBytesField(out, p, 2, op.record);
  }
  return out;
}

/** Bytes of one ReplicatedOp message. */
function opBytes(op: ReplicatedOpView): number {
  return lengthDelimitedBytes(op.key.length) + lengthDelimitedBytes(op.record.length);
}

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
  const empty = new Uint8Array(0);
  const wellFormed = forEachField(
    bytes,
    peek.start,
    peek.end,
    layout.ops,
    (start, end) => {
      const op: ReplicatedOpView = { key: empty, record: empty };
      const ok = forEachField(bytes, start, end, ANY_FIELD, (s, e, field) => {
        if (field === 1) op.key = bytes.subarray(s, e);
        else if (field === 2) op.record = bytes.subarray(s, e);
      });
      if (!ok) opsWellFormed = false;
      ops.push(op);
    },
    (field, value) => {
      const i = layout.varints.indexOf(field);
      if (i !== -1) values[i] = value;
    },
    (field, at) => {
      if (field === layout.maxWallMs)
        maxWallMs = Buffer.from(bytes.buffer, bytes.byteOffset + at, 8).readDoubleLE(0);
    },
  );
  return wellFormed && opsWellFormed ? { values, maxWallMs, ops } : undefined;
}
