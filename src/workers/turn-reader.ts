// Reads a turn's request records out of the request ring. The requests then own their bytes (lmdb
// keeps pointers to written buffers until commit; peer frames are served asynchronously), and the
// ring's space is released at once. Neighbouring records share one copy; a large one gets its own,
// so a small record kept long (in a replication backlog) never holds a large one's memory.

import { copyRange } from '../core/bytes.js';
import { SHARED_COPY_RECORD_BYTES_MAX, WORKER_TURN_OPS_MAX } from '../core/limits.js';
import type { RingReader } from '../threads/ring.js';

/** Alignment at which shared memory copies word by word (`copyRun`). */
const SHARED_COPY_ALIGN = 8;

/** Takes each record of a turn, in ring order, from the turn's copy. */
export interface RecordDecoder {
  decode(buf: Buffer, at: number, length: number): void;
}

export class TurnReader {
  /** This turn's records: ring offset and length. */
  private readonly turnAt = new Int32Array(WORKER_TURN_OPS_MAX);
  private readonly turnBytes = new Int32Array(WORKER_TURN_OPS_MAX);
  /**
   * This turn's copies (copyRun), one per run of neighbouring records: the copy, the index past the
   * run's last record, and what turns a record's ring offset into its offset in the copy. Kept per
   * run, not per record: storing a new copy into this long-lived array costs a write barrier.
   */
  private readonly runCopies: (Buffer | undefined)[] = [];
  private readonly runEnds = new Int32Array(WORKER_TURN_OPS_MAX);
  private readonly runShifts = new Int32Array(WORKER_TURN_OPS_MAX);
  private runCount = 0;
  /** The memory of the copy being decoded and where the copy starts in it (`view`). */
  private copyMemory: ArrayBufferLike = new ArrayBuffer(0);
  private copyByteOffset = 0;

  constructor(readonly ring: RingReader) {}

  /** Copies up to a turn's records out of the ring, releases it, and hands each to `decoder`. */
  read(decoder: RecordDecoder): void {
    this.takeTurn();
    const at = this.turnAt;
    const bytes = this.turnBytes;
    const copies = this.runCopies;
    let i = 0;
    for (let r = 0; r < this.runCount; r++) {
      const copy = copies[r]!;
      copies[r] = undefined;
      // Views of the copy are made from its memory directly: a Buffer's `buffer` and `byteOffset`
      // are calls into the runtime, once per copy here instead of twice per view.
      this.copyMemory = copy.buffer;
      this.copyByteOffset = copy.byteOffset;
      const shift = this.runShifts[r];
      for (const end = this.runEnds[r]; i < end; i++) decoder.decode(copy, at[i] + shift, bytes[i]);
    }
  }

  /**
   * A plain view of `length` bytes at `at` of the copy being decoded: cheaper to make than a
   * Buffer, for bytes that need no Buffer methods.
   */
  view(at: number, length: number): Uint8Array {
    return new Uint8Array(this.copyMemory, this.copyByteOffset + at, length);
  }

  private takeTurn(): void {
    const reader = this.ring;
    const at = this.turnAt;
    const bytes = this.turnBytes;
    let count = 0;
    let next: number;
    while (count < WORKER_TURN_OPS_MAX && (next = reader.next()) !== -1) {
      at[count] = next;
      bytes[count] = reader.recordBytes;
      count++;
    }
    this.runCount = 0;
    let run = 0;
    for (let i = 0; i < count; i++) {
      const large = bytes[i] > SHARED_COPY_RECORD_BYTES_MAX;
      // A record before its predecessor: the ring wrapped, and the run cannot continue across it.
      if (i > run && (large || at[i] < at[i - 1])) {
        this.copyRun(run, i);
        run = i;
      }
      if (large) {
        this.copyRun(i, i + 1);
        run = i + 1;
      }
    }
    if (run < count) this.copyRun(run, count);
    reader.release();
  }

  /** One copy of the ring bytes from record `first` to the end of record `end - 1`. */
  private copyRun(first: number, end: number): void {
    const start = this.turnAt[first];
    const stop = this.turnAt[end - 1] + this.turnBytes[end - 1];
    const ring = this.ring.bytes;
    // A run shorter than NATIVE_COPY_BYTES_MIN is copied by V8, which moves shared memory 8 bytes at
    // a time only between addresses equal mod 8 (byte by byte otherwise, ~8× slower): the copy
    // starts at the ring bytes' own alignment. Longer runs are one memcpy either way.
    const copy = Buffer.allocUnsafe(stop - start + SHARED_COPY_ALIGN - 1);
    const skew = (ring.byteOffset + start - copy.byteOffset) & (SHARED_COPY_ALIGN - 1);
    copyRange(ring, start, stop, copy, skew);
    const r = this.runCount++;
    this.runCopies[r] = copy;
    this.runEnds[r] = end;
    this.runShifts[r] = skew - start;
  }
}
