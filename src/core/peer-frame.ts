// Peer frames (proto/peer.proto): a u32 big-endian length, then one encoded Envelope. This module
// cuts a byte stream into frames under the size limits, and reads the few fields the main thread
// needs to route a frame — which message it is, and the fragment it concerns — without decoding the
// rest (DESIGN.md: never decode what you only forward).

import { PREAUTH_FRAME_BYTES_MAX } from './limits.js';

export const FRAME_PREFIX_BYTES = 4;
/** `forEachField`: visit every length-delimited field. */
export const ANY_FIELD = -1;

/** Envelope field numbers (proto/peer.proto `Envelope.msg`). */
export const EnvelopeField = {
  Hello: 1,
  HelloAuth: 2,
  ForwardedOps: 3,
  ForwardedResults: 4,
  SessionStart: 5,
  ReplicateBatch: 6,
  BatchAck: 7,
  BatchNack: 8,
  SessionReset: 9,
  FragmentAbsent: 10,
  ReconcileRequest: 11,
  ReconcileResponse: 12,
  ReconcileFetch: 13,
  ReconcileData: 14,
  PublishBatch: 15,
  MemberPing: 16,
  MemberAck: 17,
  MemberNack: 18,
  MemberPingReq: 19,
  MemberGossip: 20,
  MemberSync: 21,
  MemberJoinRequest: 22,
  MemberJoinAccept: 23,
  MemberRefuse: 24,
  Placement: 25,
  Admin: 26,
  ClientPorts: 27,
} as const;
export type EnvelopeField = (typeof EnvelopeField)[keyof typeof EnvelopeField];

/**
 * Per-field byte counters are indexed by an envelope's first byte >> 3: the field number for fields
 * below 16, and for 16..31 too (their two-byte tag's first byte carries the low bits plus 0x80).
 */
export const ENVELOPE_FIELD_COUNTERS = 32;

/** Membership messages (proto Member*): the main thread's membership driver takes them. */
export function isMembershipMessage(field: number): boolean {
  return field >= EnvelopeField.MemberPing && field <= EnvelopeField.MemberRefuse;
}

/** Messages the main thread hands to the worker owning their fragment, as bytes. */
export function isFragmentMessage(field: number): boolean {
  return field >= EnvelopeField.SessionStart && field <= EnvelopeField.ReconcileData;
}

/**
 * Accumulates socket bytes and cuts them into frames. `limit` is the largest frame body accepted
 * now (4 KiB until the handshake completes); a larger length prefix is a protocol error.
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  limit = PREAUTH_FRAME_BYTES_MAX;

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  /**
   * The next complete frame body, undefined when more bytes are needed, or an Error (with the
   * reason) when the stream announces a frame over the limit.
   */
  next(): Buffer | undefined | Error {
    if (this.buffered < FRAME_PREFIX_BYTES) return undefined;
    const head = this.contiguous(FRAME_PREFIX_BYTES);
    const length = head.readUInt32BE(0);
    if (length > this.limit) {
      return new Error(`frame of ${length} bytes exceeds the ${this.limit}-byte limit`);
    }
    if (this.buffered < FRAME_PREFIX_BYTES + length) return undefined;
    const all = this.contiguous(FRAME_PREFIX_BYTES + length);
    const body = all.subarray(FRAME_PREFIX_BYTES, FRAME_PREFIX_BYTES + length);
    this.consume(FRAME_PREFIX_BYTES + length);
    return body;
  }

  get bufferedBytes(): number {
    return this.buffered;
  }

  /** Joins chunks until the first holds at least `n` bytes; returns it. */
  private contiguous(n: number): Buffer {
    if (this.chunks[0].length < n) {
      const joined = Buffer.concat(this.chunks, this.buffered);
      this.chunks = [joined];
    }
    return this.chunks[0];
  }

  private consume(n: number): void {
    const first = this.chunks[0];
    if (first.length === n) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.buffered -= n;
  }
}

/** Prefixes an encoded envelope with its length. */
export function frameOf(envelope: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_PREFIX_BYTES + envelope.length);
  frame.writeUInt32BE(envelope.length, 0);
  frame.set(envelope, FRAME_PREFIX_BYTES);
  return frame;
}

/** Where an envelope's message lies: its field number and the byte range of its body. */
export interface EnvelopePeek {
  field: number;
  start: number;
  end: number;
}

/**
 * Reads the envelope's one message field without decoding it. Undefined when the bytes are not one
 * well-formed length-delimited field spanning the whole envelope (an empty envelope included).
 */
export function peekEnvelope(bytes: Uint8Array): EnvelopePeek | undefined {
  const tag = readVarint(bytes, 0);
  if (tag === undefined || (tag.value & 7) !== 2) return undefined;
  const length = readVarint(bytes, tag.next);
  if (length === undefined || length.next + length.value !== bytes.length) return undefined;
  return { field: Math.floor(tag.value / 8), start: length.next, end: bytes.length };
}

/** The routing fields of a fragment message: its fragment, and its newest timestamp if it carries one. */
export interface FragmentPeek {
  fragment: number;
  /** The `max_wall_ms` double (ReplicateBatch 5, ReconcileResponse 10, ReconcileData 8), 0 when absent. */
  maxWallMs: number;
}

/** Field number of `max_wall_ms` in the messages that carry records. */
export function maxWallMsField(field: number): number {
  if (field === EnvelopeField.ReplicateBatch) return 5;
  if (field === EnvelopeField.ReconcileResponse) return 10;
  if (field === EnvelopeField.ReconcileData) return 8;
  return 0;
}

/**
 * Reads field 1 (the fragment; 0 when absent, as proto3 leaves zero out) and, when `wallField` is
 * set, that 64-bit double field of the message in `bytes[start, end)`, skipping everything else.
 * Undefined when the message is malformed.
 */
export function peekFragment(
  bytes: Uint8Array,
  start: number,
  end: number,
  wallField = 0,
): FragmentPeek | undefined {
  const out: FragmentPeek = { fragment: 0, maxWallMs: 0 };
  const wellFormed = forEachField(
    bytes,
    start,
    end,
    0,
    () => {},
    (field, value) => {
      if (field === 1) out.fragment = value;
    },
    (field, at) => {
      if (field === wallField) out.maxWallMs = readDoubleAt(bytes, at);
    },
  );
  return wellFormed ? out : undefined;
}

/** The little-endian double at `at` (a protobuf 64-bit field's value, as `forEachField` finds it). */
export function readDoubleAt(bytes: Uint8Array, at: number): number {
  return Buffer.from(bytes.buffer, bytes.byteOffset + at, 8).readDoubleLE(0);
}

/** Bytes of `n` as a protobuf varint (n < 2^32). */
export function varintBytes(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5;
}

/** Writes `n` (< 2^32) as a protobuf varint at `at`; returns the offset after it. */
export function writeVarint(buf: Uint8Array, at: number, n: number): number {
  let p = at;
  while (n >= 0x80) {
    buf[p++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[p++] = n;
  return p;
}

/**
 * Calls `visit(start, end, field)` for each length-delimited occurrence of `field` (every one when
 * `field` is ANY_FIELD) in the message at `bytes[start, end)`, `scalar(field, value)` for each varint
 * and `fixed64(field, offset)` for each 64-bit field; false when the message is malformed (visited
 * fields may already have been handed over).
 */
export function forEachField(
  bytes: Uint8Array,
  start: number,
  end: number,
  field: number,
  visit: (start: number, end: number, field: number) => void,
  scalar?: (field: number, value: number) => void,
  fixed64?: (field: number, at: number) => void,
): boolean {
  let p = start;
  while (p < end) {
    const tag = readVarint(bytes, p);
    if (tag === undefined) return false;
    const f = Math.floor(tag.value / 8);
    const wire = tag.value & 7;
    p = tag.next;
    if (wire === 0) {
      const v = readVarint(bytes, p);
      if (v === undefined) return false;
      scalar?.(f, v.value);
      p = v.next;
    } else if (wire === 2) {
      const n = readVarint(bytes, p);
      if (n === undefined || n.next + n.value > end) return false;
      if (f === field || field === ANY_FIELD) visit(n.next, n.next + n.value, f);
      p = n.next + n.value;
    } else if (wire === 1) {
      if (p + 8 <= end) fixed64?.(f, p);
      p += 8;
    } else if (wire === 5) {
      p += 4;
    } else {
      return false;
    }
    if (p > end) return false;
  }
  return true;
}

/**
 * Builds one frame holding an envelope whose message is a list of length-delimited items
 * (ForwardedOps, ForwardedResults), appended one at a time; `finish` writes the headers in front.
 * The buffer is reused between frames.
 */
export class ListFrameBuilder {
  private buf = Buffer.allocUnsafe(64 * 1024);
  /** Items start after room for the longest headers: prefix, two tags, two lengths, two varint fields. */
  private static readonly HEAD = FRAME_PREFIX_BYTES + 2 * (1 + 5) + 2 * (1 + 5);
  private end = ListFrameBuilder.HEAD;
  count = 0;

  constructor(
    private readonly envelopeField: number,
    private readonly itemField: number,
  ) {}

  get bytes(): number {
    return this.end - ListFrameBuilder.HEAD;
  }

  /** Reserves an item of `length` bytes; write it into `buffer` at the returned offset. */
  reserve(length: number): number {
    const need = this.end + 1 + 5 + length;
    if (need > this.buf.length) {
      const grown = Buffer.allocUnsafe(Math.max(need, this.buf.length * 2));
      this.buf.copy(grown, 0, 0, this.end);
      this.buf = grown;
    }
    this.buf[this.end] = (this.itemField << 3) | 2;
    const at = writeVarint(this.buf, this.end + 1, length);
    this.end = at + length;
    this.count++;
    return at;
  }

  get buffer(): Buffer {
    return this.buf;
  }

  /**
   * The finished frame (a fresh copy), with `field1 = value1` and `field2 = value2` first, each
   * where its value is > 0 (each < 2^32); resets.
   */
  finish(field1 = 0, value1 = 0, field2 = 0, value2 = 0): Buffer {
    const items = this.end - ListFrameBuilder.HEAD;
    const scalar1 = value1 > 0 ? 1 + varintBytes(value1) : 0;
    const scalar2 = value2 > 0 ? 1 + varintBytes(value2) : 0;
    const message = scalar1 + scalar2 + items;
    const envelope = 1 + varintBytes(message) + message;
    const start = ListFrameBuilder.HEAD - scalar1 - scalar2 - 1 - varintBytes(message) - FRAME_PREFIX_BYTES;
    let p = start;
    this.buf.writeUInt32BE(envelope, p);
    p += FRAME_PREFIX_BYTES;
    this.buf[p++] = (this.envelopeField << 3) | 2;
    p = writeVarint(this.buf, p, message);
    if (scalar1 > 0) {
      this.buf[p++] = field1 << 3;
      p = writeVarint(this.buf, p, value1);
    }
    if (scalar2 > 0) {
      this.buf[p++] = field2 << 3;
      p = writeVarint(this.buf, p, value2);
    }
    const frame = Buffer.from(this.buf.subarray(start, this.end));
    this.end = ListFrameBuilder.HEAD;
    this.count = 0;
    return frame;
  }
}

/** A protobuf varint up to 2^53 at `at`; undefined when truncated or longer than 8 bytes. */
function readVarint(bytes: Uint8Array, at: number): { value: number; next: number } | undefined {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 8; i++) {
    const p = at + i;
    if (p >= bytes.length) return undefined;
    const b = bytes[p];
    value += (b & 0x7f) * scale;
    if ((b & 0x80) === 0) return { value, next: p + 1 };
    scale *= 128;
  }
  return undefined;
}
