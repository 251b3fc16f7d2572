// A node-wide SharedArrayBuffer in which workers publish what the main thread needs to serve reads
// itself from an lmdb read snapshot (DESIGN.md "What we measured": one cross-thread hop less).
//
//   Int32 index   0              COMMIT_EPOCH  bumped after every store commit by any worker
//   Int32 index   1 + f          DIRTY[f]      1 while fragment f holds writes not yet committed
//   Int32 index   1 + F + w      MEMORY_KIB[w] KiB of memory worker w's store holds (kv-store.ts
//                                              `memoryBytes`), rounded up; set after each commit
//
// A worker stores DIRTY[f] = 1 before it publishes the acknowledgement of a write that is not
// committed, and bumps COMMIT_EPOCH after a commit and before it clears DIRTY[f]. So when the main
// thread sees DIRTY[f] = 0, every acknowledged write of f is committed; if the epoch moved since its
// read snapshot was taken, it renews the snapshot before reading.

const COMMIT_EPOCH = 0;
const DIRTY_BASE = 1;

/** The unit workers publish their stores' memory in (a cell holds up to 2 TiB of it). */
export const BOARD_MEMORY_UNIT_BYTES = 1024;

export class FragmentBoard {
  private readonly cells: Int32Array;
  private readonly memoryBase: number;
  private readonly workerCount: number;

  constructor(
    readonly buffer: SharedArrayBuffer,
    fragmentCount: number,
  ) {
    this.cells = new Int32Array(buffer);
    this.memoryBase = DIRTY_BASE + fragmentCount;
    this.workerCount = this.cells.length - this.memoryBase;
  }

  static create(fragmentCount: number, workerCount: number): FragmentBoard {
    return new FragmentBoard(
      new SharedArrayBuffer((DIRTY_BASE + fragmentCount + workerCount) * 4),
      fragmentCount,
    );
  }

  epoch(): number {
    return Atomics.load(this.cells, COMMIT_EPOCH);
  }

  markCommitted(): void {
    Atomics.add(this.cells, COMMIT_EPOCH, 1);
  }

  isClean(fragment: number): boolean {
    return Atomics.load(this.cells, DIRTY_BASE + fragment) === 0;
  }

  setDirty(fragment: number, dirty: boolean): void {
    const value = dirty ? 1 : 0;
    if (this.cells[DIRTY_BASE + fragment] !== value) Atomics.store(this.cells, DIRTY_BASE + fragment, value);
  }

  /** Publishes the bytes of memory worker `worker`'s store holds. */
  setMemoryBytes(worker: number, bytes: number): void {
    const kib = Math.ceil(bytes / BOARD_MEMORY_UNIT_BYTES);
    const at = this.memoryBase + worker;
    if (this.cells[at] !== kib) Atomics.store(this.cells, at, kib);
  }

  /** The memory every worker's store holds, as last published, in bytes (a KiB multiple). */
  memoryBytes(): number {
    let kib = 0;
    for (let w = 0; w < this.workerCount; w++) kib += Atomics.load(this.cells, this.memoryBase + w);
    return kib * BOARD_MEMORY_UNIT_BYTES;
  }
}
