// The byte format of the lmdb store's write-ahead log (src/native-bindings/write-ahead-log.ts):
// what a worker appends before its writes are committed, fdatasyncs for `stable` writes, and
// replays when it opens the store. The stable logs an older version left are in the same format.
//
// A log file is a sequence of frames, one per group sync:
//
//   offset  size  field
//   0       4     payloadBytes  u32 LE
//   4       4     crc32         u32 LE, CRC-32 (IEEE) of the payload
//   8       …     payload: entries, back to back
//
// and an entry is
//
//   0       2     fragment      u16 LE
//   2       2     keyBytes      u16 LE
//   4       4     recordBytes   u32 LE
//   8       …     key, then record (src/core/record.ts)
//
// except that an entry whose keyBytes is LOG_DROP_KEY_BYTES (no key can be that long) and whose
// recordBytes is 0 marks the fragment dropped: the entries before it for that fragment are void.
//
// A frame header whose payloadBytes is 0 ends the log: the file is zero-filled ahead of its frames
// (src/native-bindings/stable-log-file.ts), and a frame always holds at least one entry.
//
// A power loss can tear the frame being written; its sync never completed, so none of its writes
// were acknowledged. Reading stops at the first frame that is short or fails its checksum.
// Entries are records with their LWW versions, so replaying a log over a store that already holds
// them (or newer ones) changes nothing: replay is a merge, not a redo.

import { crc32 as zlibCrc32 } from 'node:zlib';
import { assert } from './assert.js';
import { readU16LE, readU32LE, writeU16LE, writeU32LE } from './bytes.js';
import { KEY_BYTES_MAX, STABLE_LOG_FRAME_BYTES_MAX } from './limits.js';

export const STABLE_LOG_FRAME_HEADER_BYTES = 8;
export const STABLE_LOG_ENTRY_HEADER_BYTES = 8;
/** keyBytes of a drop marker: above KEY_BYTES_MAX, so never a key's. */
export const LOG_DROP_KEY_BYTES = 0xffff;

/**
 * CRC-32 (IEEE 802.3, as zlib and gzip compute it) of `bytes[start, end)`, by zlib: a byte-at-a-time
 * table in JavaScript costs ~2 ns a byte, over ten times zlib's, and every stable write's bytes pass
 * through it.
 */
export function crc32(bytes: Uint8Array, start = 0, end = bytes.length): number {
  return zlibCrc32(bytes.subarray(start, end));
}

/**
 * The entries committed since the last frame, gathered into one growable buffer. `seal()` turns
 * them into a frame and starts the next; the buffer is reused, so a steady stream allocates only
 * when it grows. A frame never exceeds STABLE_LOG_FRAME_BYTES_MAX: `append` reports false instead
 * (the caller then makes its next sync a full checkpoint).
 */
export class StableLogTail {
  #buf: Buffer;
  #used = STABLE_LOG_FRAME_HEADER_BYTES;
  #entries = 0;

  constructor(initialBytes = 64 * 1024) {
    this.#buf = Buffer.allocUnsafe(Math.max(initialBytes, STABLE_LOG_FRAME_HEADER_BYTES));
  }

  get entryCount(): number {
    return this.#entries;
  }

  /** Appends one entry; false (and nothing appended) when the frame would pass its limit. */
  append(fragment: number, key: Uint8Array, record: Uint8Array): boolean {
    assert(key.length <= KEY_BYTES_MAX, 'stable log key too long');
    const need = STABLE_LOG_ENTRY_HEADER_BYTES + key.length + record.length;
    if (this.#used + need > STABLE_LOG_FRAME_BYTES_MAX) return false;
    if (this.#used + need > this.#buf.length) this.#grow(this.#used + need);
    const b = this.#buf;
    let at = this.#used;
    writeU16LE(b, at, fragment);
    writeU16LE(b, at + 2, key.length);
    writeU32LE(b, at + 4, record.length);
    at += STABLE_LOG_ENTRY_HEADER_BYTES;
    b.set(key, at);
    b.set(record, at + key.length);
    this.#used = at + key.length + record.length;
    this.#entries++;
    return true;
  }

  /** Appends a marker that voids the entries of `fragment` before it; false when the frame is full. */
  appendDrop(fragment: number): boolean {
    if (this.#used + STABLE_LOG_ENTRY_HEADER_BYTES > STABLE_LOG_FRAME_BYTES_MAX) return false;
    if (this.#used + STABLE_LOG_ENTRY_HEADER_BYTES > this.#buf.length)
      this.#grow(this.#used + STABLE_LOG_ENTRY_HEADER_BYTES);
    writeU16LE(this.#buf, this.#used, fragment);
    writeU16LE(this.#buf, this.#used + 2, LOG_DROP_KEY_BYTES);
    writeU32LE(this.#buf, this.#used + 4, 0);
    this.#used += STABLE_LOG_ENTRY_HEADER_BYTES;
    this.#entries++;
    return true;
  }

  /**
   * The frame of every entry appended since the last seal (undefined when there are none), and a
   * fresh tail for what follows. The frame is a copy: the tail keeps appending while it is written.
   */
  seal(): Buffer | undefined {
    const frame = this.frame();
    if (frame === undefined) return undefined;
    const copy = Buffer.from(frame);
    this.clear();
    return copy;
  }

  /**
   * The frame of every entry appended since the last seal (undefined when there are none), in the
   * tail's own buffer: valid until the next append or `clear`, which the caller makes once it is
   * written. No copy: the synchronous writer's form.
   */
  frame(): Buffer | undefined {
    if (this.#entries === 0) return undefined;
    const b = this.#buf;
    writeU32LE(b, 0, this.#used - STABLE_LOG_FRAME_HEADER_BYTES);
    writeU32LE(b, 4, crc32(b, STABLE_LOG_FRAME_HEADER_BYTES, this.#used));
    return b.subarray(0, this.#used);
  }

  /** Drops every entry appended since the last seal (a checkpoint covers them). */
  clear(): void {
    this.#used = STABLE_LOG_FRAME_HEADER_BYTES;
    this.#entries = 0;
  }

  #grow(need: number): void {
    const next = Buffer.allocUnsafe(
      Math.min(Math.max(need, this.#buf.length * 2), STABLE_LOG_FRAME_BYTES_MAX),
    );
    this.#buf.copy(next, 0, 0, this.#used);
    this.#buf = next;
  }
}

export interface StableLogEntry {
  fragment: number;
  /** A drop marker: the fragment's entries before it are void (key and record are empty). */
  drop: boolean;
  key: Buffer;
  record: Buffer;
}

export interface StableLogContents {
  entries: StableLogEntry[];
  /** Whole frames read. */
  frames: number;
  /**
   * Bytes after the last whole frame up to the last non-zero byte: a torn (or never completed)
   * write, ignored. The zero-filled space after it is not counted.
   */
  tornBytes: number;
}

/**
 * Every entry of the whole frames of a log file, in order. A frame that is short or fails its
 * checksum ends the log (a sync torn by power loss). A frame whose checksum holds but whose entries
 * do not add up is corruption the checksum cannot explain, and throws.
 */
export function readStableLog(bytes: Buffer): StableLogContents {
  const entries: StableLogEntry[] = [];
  let frames = 0;
  let at = 0;
  while (bytes.length - at >= STABLE_LOG_FRAME_HEADER_BYTES) {
    const payloadBytes = readU32LE(bytes, at);
    if (payloadBytes === 0) break;
    const start = at + STABLE_LOG_FRAME_HEADER_BYTES;
    const end = start + payloadBytes;
    if (payloadBytes > STABLE_LOG_FRAME_BYTES_MAX || end > bytes.length) break;
    if (crc32(bytes, start, end) !== readU32LE(bytes, at + 4)) break;
    readEntries(bytes, start, end, entries);
    frames++;
    at = end;
  }
  let used = bytes.length;
  while (used > at && bytes[used - 1] === 0) used--;
  return { entries, frames, tornBytes: used - at };
}

function readEntries(bytes: Buffer, start: number, end: number, into: StableLogEntry[]): void {
  let at = start;
  while (at < end) {
    if (end - at < STABLE_LOG_ENTRY_HEADER_BYTES) throw new StableLogCorrupt(at, 'a cut entry header');
    const fragment = readU16LE(bytes, at);
    const keyBytes = readU16LE(bytes, at + 2);
    const recordBytes = readU32LE(bytes, at + 4);
    const keyAt = at + STABLE_LOG_ENTRY_HEADER_BYTES;
    if (keyBytes === LOG_DROP_KEY_BYTES && recordBytes === 0) {
      into.push({ fragment, drop: true, key: NO_BYTES, record: NO_BYTES });
      at = keyAt;
      continue;
    }
    if (keyBytes > KEY_BYTES_MAX) throw new StableLogCorrupt(at, `a ${keyBytes}-byte key`);
    if (recordBytes > end - keyAt - keyBytes) throw new StableLogCorrupt(at, 'an entry past its frame');
    into.push({
      fragment,
      drop: false,
      key: bytes.subarray(keyAt, keyAt + keyBytes),
      record: bytes.subarray(keyAt + keyBytes, keyAt + keyBytes + recordBytes),
    });
    at = keyAt + keyBytes + recordBytes;
  }
}

const NO_BYTES = Buffer.alloc(0);

/** A checksummed frame whose contents are malformed: not a torn write, so not silently skipped. */
export class StableLogCorrupt extends Error {
  override name = 'StableLogCorrupt';
  constructor(
    readonly offset: number,
    what: string,
  ) {
    super(`${what} at byte ${offset}`);
  }
}
