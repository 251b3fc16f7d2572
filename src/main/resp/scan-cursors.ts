// SCAN cursors for Redis clients. A Redis cursor is an unsigned 64-bit integer, and many clients
// parse it as one, but where a Tessera scan stands is (fragment, last key seen) — a key of up to
// 1 KiB, carried in the embedded API's scan cursor. So the node keeps those cursors in a bounded
// table and hands out their ids as Redis cursors.
// Positions live on the main thread, so a cursor survives worker restarts (the next page simply
// reads on from the stored key). A cursor stays valid until the table evicts it, least recently
// used first; an evicted or unknown cursor is answered with an error, never with a silent restart.

import { assert } from '../../core/assert.js';

/** Iterations that can be in progress at once (one entry per page handed out). */
export const SCAN_CURSORS_MAX = 65_536;
/** Bytes of the positions kept for them. */
export const SCAN_CURSOR_BYTES_MAX = 16 * 1024 * 1024;

export class ScanCursors {
  /** Insertion order is recency order: a use re-inserts. */
  private readonly positions = new Map<number, string>();
  private bytes = 0;
  private nextId = 1;

  get size(): number {
    return this.positions.size;
  }

  /** A new cursor id for `position` (an embedded-API scan cursor). */
  open(position: string): number {
    const id = this.nextId++;
    assert(Number.isSafeInteger(id), 'scan cursor ids exhausted');
    this.positions.set(id, position);
    this.bytes += position.length;
    while (this.positions.size > SCAN_CURSORS_MAX || this.bytes > SCAN_CURSOR_BYTES_MAX) this.evictOldest();
    return id;
  }

  /** The position of cursor `id`, or undefined if it was never handed out or has been evicted. */
  find(id: number): string | undefined {
    const position = this.positions.get(id);
    if (position !== undefined) {
      this.positions.delete(id);
      this.positions.set(id, position);
    }
    return position;
  }

  private evictOldest(): void {
    const oldest = this.positions.keys().next();
    if (oldest.done) return;
    const position = this.positions.get(oldest.value)!;
    this.bytes -= position.length;
    this.positions.delete(oldest.value);
  }
}
