// Hybrid logical clock (DESIGN.md "Version", spec §2.3): 48-bit wall milliseconds + 16-bit logical
// counter. Strictly monotonic per node even when the wall clock stalls or moves backwards. The wall
// clock is read by the caller and passed in as `nowMs`. A node whose workers stamp writes too (their
// RESP ports) shares one clock between its threads: the last timestamp lives in a shared cell,
// changed by compare-and-swap, so a stamp issued on any thread orders after every one before it.

import { assert } from './assert.js';
import { HLC_LOGICAL_MAX, HLC_WALL_MS_MAX, MAX_CLOCK_SKEW_MS_DEFAULT } from './limits.js';

/** Bytes of a shared clock cell (`sharedClockCell`): one 64-bit word, wall ms << 16 | logical. */
export const SHARED_CLOCK_CELL_BYTES = 8;

/** A cell several threads' clocks share (pass it to each `HybridLogicalClock`). */
export function sharedClockCell(): SharedArrayBuffer {
  return new SharedArrayBuffer(SHARED_CLOCK_CELL_BYTES);
}

export class HybridLogicalClock {
  /** Last issued or observed timestamp; every tick returns something strictly greater. */
  wallMs = 0;
  logical = 0;
  readonly maxClockSkewMs: number;
  /** The timestamp shared with other threads' clocks, when there is one. */
  private cell: BigInt64Array | undefined;

  constructor(maxClockSkewMs = MAX_CLOCK_SKEW_MS_DEFAULT, shared?: SharedArrayBuffer) {
    assert(Number.isSafeInteger(maxClockSkewMs) && maxClockSkewMs >= 0, 'maxClockSkewMs must be ≥ 0');
    this.maxClockSkewMs = maxClockSkewMs;
    if (shared !== undefined) this.shareWith(shared);
  }

  /**
   * From now on this clock shares `shared` with the other clocks given it: what this one issued or
   * observed so far is merged into the cell first, so nothing issued later orders before it.
   */
  shareWith(shared: SharedArrayBuffer): void {
    const wallMs = this.wallMs;
    const logical = this.logical;
    this.cell = new BigInt64Array(shared, 0, 1);
    this.observeShared(wallMs, logical);
  }

  /**
   * Issues the next timestamp into `wallMs` / `logical`. Within one millisecond (or while the wall
   * clock runs behind the last timestamp) the logical counter advances; when it would overflow, the
   * timestamp borrows the next millisecond.
   */
  tick(nowMs: number): void {
    if (this.cell !== undefined) return this.tickShared(nowMs);
    this.advance(nowMs);
  }

  private advance(nowMs: number): void {
    if (nowMs > this.wallMs) {
      assert(nowMs <= HLC_WALL_MS_MAX, 'wall clock beyond 48 bits');
      this.wallMs = nowMs;
      this.logical = 0;
    } else if (this.logical < HLC_LOGICAL_MAX) {
      this.logical++;
    } else {
      this.wallMs++;
      this.logical = 0;
    }
  }

  /**
   * Takes a remote or stored timestamp into account so later ticks order after it. Returns false —
   * and changes nothing — when it is more than `maxClockSkewMs` ahead of `nowMs`: one bad timestamp
   * must never be stored, or it would win every later LWW comparison (spec §2.3).
   */
  observe(wallMs: number, logical: number, nowMs: number): boolean {
    if (wallMs > nowMs + this.maxClockSkewMs) return false;
    if (this.cell !== undefined) {
      this.observeShared(wallMs, logical);
      return true;
    }
    this.merge(wallMs, logical);
    return true;
  }

  private merge(wallMs: number, logical: number): void {
    if (wallMs > this.wallMs || (wallMs === this.wallMs && logical > this.logical)) {
      this.wallMs = wallMs;
      this.logical = logical;
    }
  }

  /** `advance` on the shared timestamp: retried when another thread changed it meanwhile. */
  private tickShared(nowMs: number): void {
    const cell = this.cell!;
    for (;;) {
      const seen = Atomics.load(cell, 0);
      this.load(seen);
      this.advance(nowMs);
      if (Atomics.compareExchange(cell, 0, seen, this.packed()) === seen) return;
    }
  }

  /** `merge` on the shared timestamp, as `tickShared`. */
  private observeShared(wallMs: number, logical: number): void {
    const cell = this.cell!;
    for (;;) {
      const seen = Atomics.load(cell, 0);
      this.load(seen);
      this.merge(wallMs, logical);
      if (Atomics.compareExchange(cell, 0, seen, this.packed()) === seen) return;
    }
  }

  private load(word: bigint): void {
    this.wallMs = Number(word >> 16n);
    this.logical = Number(word & 0xffffn);
  }

  private packed(): bigint {
    return (BigInt(this.wallMs) << 16n) | BigInt(this.logical);
  }

  /**
   * Takes into account a wall ms whose logical counter is unknown — a store's high-water mark (only
   * the wall ms is stored), the newest stamp of a peer's frame — as if every counter within it were
   * taken: a node whose wall clock reads earlier than that millisecond (it followed a faster peer,
   * or its clock stepped back across a restart) must not issue those stamps again, or a new write
   * would share an older one's version and be taken for it. False, changing nothing, as `observe`.
   */
  observeWallMs(wallMs: number, nowMs: number): boolean {
    return this.observe(wallMs, HLC_LOGICAL_MAX, nowMs);
  }
}

/** Printable form of a timestamp, `wall.logical`, used in errors and golden files. */
export function formatTimestamp(wallMs: number, logical: number): string {
  return `${wallMs}.${logical}`;
}
