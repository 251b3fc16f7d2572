// The producing end of a ring as both threads use it: records are encoded straight into ring memory
// when they fit; when the ring is full they are encoded into a buffer of their own and copied in, in
// order, as the consumer frees space. Nothing is dropped or overwritten; callers bound how much
// may overflow (`overflowRecords`).

import { copyBytes } from '../core/bytes.js';
import { type RingWriter, ringClosedError } from './ring.js';

export class RingOutbox {
  /** Buffer holding the record being encoded: the ring's memory, or an overflow buffer. */
  buffer: Buffer;
  private reservedBytes = 0;
  private spilled = false;
  private readonly overflow: Buffer[] = [];
  private overflowHead = 0;
  private draining = false;
  private published = 0;

  /**
   * `publishEvery`: records after which a commit publishes at once instead of waiting for the
   * caller's publish, so a long burst reaches the consumer in parts it can work on while the rest is
   * still being encoded. 0: only the caller publishes (it must order publishing with other state).
   */
  constructor(
    readonly writer: RingWriter,
    private readonly publishEvery = 0,
  ) {
    this.buffer = writer.bytes;
  }

  /** Records waiting for ring space. */
  get overflowRecords(): number {
    return this.overflow.length - this.overflowHead;
  }

  /** Offset in `this.buffer` where a payload of `bytes` is to be written; then call `commit()`. */
  reserve(bytes: number): number {
    this.reservedBytes = bytes;
    if (this.overflowRecords === 0) {
      const at = this.writer.reserve(bytes);
      if (at !== -1) {
        this.buffer = this.writer.bytes;
        this.spilled = false;
        return at;
      }
    }
    this.buffer = Buffer.allocUnsafe(bytes);
    this.spilled = true;
    return 0;
  }

  commit(): void {
    if (!this.spilled) {
      this.writer.commit(this.reservedBytes);
      if (++this.published === this.publishEvery) this.publish();
      return;
    }
    this.overflow.push(this.buffer);
    this.buffer = this.writer.bytes;
    if (!this.draining) void this.drainOverflow();
  }

  /** Makes committed records visible to the consumer (one wake-up for all of them). */
  publish(): void {
    if (this.published === 0) return;
    this.published = 0;
    this.writer.publish();
  }

  /** Copies overflowed records into the ring as space frees up; stops quietly once the ring closes. */
  private async drainOverflow(): Promise<void> {
    this.draining = true;
    try {
      while (this.overflowRecords > 0) {
        const record = this.overflow[this.overflowHead];
        const at = this.writer.reserve(record.length);
        if (at === -1) {
          this.publish();
          await this.writer.waitForSpace(record.length);
          continue;
        }
        copyBytes(this.writer.bytes, at, record);
        this.writer.commit(record.length);
        this.published++;
        this.overflow[this.overflowHead++] = undefined!;
        if (this.overflowHead > 1024 && this.overflowHead * 2 > this.overflow.length) {
          this.overflow.splice(0, this.overflowHead);
          this.overflowHead = 0;
        }
      }
      this.publish();
    } catch (err) {
      if (!(err instanceof Error && err.message === ringClosedError().message)) throw err;
      this.overflow.length = 0;
      this.overflowHead = 0;
    } finally {
      this.draining = false;
    }
  }
}
