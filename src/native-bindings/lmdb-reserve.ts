// Disk blocks kept allocated ahead of the LMDB data file's last page, so that a full disk fails a
// commit instead of killing the process.
//
// The env runs with `useWritemap`: LMDB writes pages straight into a shared mapping of a sparse data
// file as long as the map. A page never written before has no disk block behind it; when the disk
// is full, the kernel cannot give it one at the moment LMDB's write touches it, and the process gets
// SIGBUS — the node dies at once, on every restart that writes, with nothing logged. (Without the
// write map LMDB reports the failed write as an error, but its commits cost 20–40 % more.)
//
// So before a transaction writes, the store makes sure that the file's blocks from the env's next
// page to as far as the transaction could take it are allocated, by writing zeros there through the
// file (Node has no `fallocate`). Those pages are past every page LMDB has used, and the env's
// write lock is held (this runs inside the transaction), so no one else writes them meanwhile. If
// the zeros cannot be written, the transaction is refused with a storage error that says the disk
// is full, and the commit-failure path takes over: the writes stay pending and are retried, new
// ones are refused, reads go on — and once space is freed the next retry succeeds.
//
// What a transaction can take is bounded per operation (RESERVE_PAGES_PER_OP pages besides its
// record's bytes: the copy of the leaf it changes and of its branch pages, a split) plus a base for
// the free list. Each fill reaches RESERVE_FILL_AHEAD_BYTES past that, so fills are rare.
//
// Limits: a file system that stores zero blocks as holes (ZFS or btrfs with compression) reserves
// nothing this way; a tree deeper than the bound assumes, with every operation of a transaction
// splitting pages at every level, could outgrow it.

import fs from 'node:fs';
import { storageError } from '../core/errors.js';

/** Pages one put or removal may add to the file besides its record's own bytes. */
export const RESERVE_PAGES_PER_OP = 4;
/** Bytes any transaction may add besides its operations' (the free list, the main database). */
export const RESERVE_TXN_BASE_BYTES = 1024 * 1024;
/** How far a fill reaches past what the transaction needs, so that most transactions fill nothing. */
export const RESERVE_FILL_AHEAD_BYTES = 4 * 1024 * 1024;
/** The zeros written per system call. */
const RESERVE_WRITE_BYTES = 1024 * 1024;
const ZEROS = Buffer.alloc(RESERVE_WRITE_BYTES);

/** What a transaction of `ops` puts and removals storing `recordBytes` in all may add to the file. */
export function reserveBytesFor(ops: number, recordBytes: number, pageBytes: number): number {
  return RESERVE_TXN_BASE_BYTES + ops * RESERVE_PAGES_PER_OP * pageBytes + recordBytes;
}

/** The blocks of one env's data file allocated ahead of its last page, as far as this store knows. */
export class LmdbFileReserve {
  #fd = -1;
  /** The file's bytes from 0 up to here are known to have blocks (this store wrote them, or LMDB did). */
  #allocatedEnd = 0;

  constructor(
    readonly filePath: string,
    readonly pageBytes: number,
  ) {}

  /**
   * Makes sure the file's blocks are allocated from page `nextPage` (the first page LMDB has not
   * used) for `needBytes`; throws a storage error when the disk has no room for them. `mapBytes`:
   * the map's size, to which LMDB cuts the file when it maps it again, dropping blocks past it.
   * Call it with the env's write lock held.
   */
  ensure(nextPage: number, needBytes: number, mapBytes: number): void {
    if (this.#allocatedEnd > mapBytes) this.#allocatedEnd = mapBytes;
    const next = nextPage * this.pageBytes;
    const end = next + needBytes;
    if (end <= this.#allocatedEnd) return;
    // Every page before `next` has been written by LMDB, so it has its block.
    let at = Math.max(next, this.#allocatedEnd);
    const target = end + RESERVE_FILL_AHEAD_BYTES;
    try {
      if (this.#fd === -1) this.#fd = fs.openSync(this.filePath, 'r+');
      while (at < target) {
        const n = Math.min(RESERVE_WRITE_BYTES, target - at);
        const written = fs.writeSync(this.#fd, ZEROS, 0, n, at);
        at += written;
        this.#allocatedEnd = at;
        if (written < n) throw new Error('short write');
      }
    } catch (err) {
      // Enough for this transaction, though not for the fill ahead: it may go on.
      if (at >= end) return;
      const reason = err instanceof Error ? err.message : String(err);
      throw storageError(
        `disk full: the LMDB data file needs ${end - at} more bytes allocated ahead of its last page (${reason})`,
      );
    }
  }

  close(): void {
    if (this.#fd === -1) return;
    fs.closeSync(this.#fd);
    this.#fd = -1;
  }
}
