// A node-wide SharedArrayBuffer in which workers publish what the main thread needs to serve reads
// itself from an lmdb read snapshot (DESIGN.md "What we measured": one cross-thread hop less).
//
//   Int32 index   0        COMMIT_EPOCH  bumped after every store commit by any worker
//   Int32 index   1 + f    DIRTY[f]      1 while fragment f holds writes not yet committed
//
// A worker stores DIRTY[f] = 1 before it publishes the acknowledgement of a write that is not
// committed, and bumps COMMIT_EPOCH after a commit and before it clears DIRTY[f]. So when the main
// thread sees DIRTY[f] = 0, every acknowledged write of f is committed; if the epoch moved since its
// read snapshot was taken, it renews the snapshot before reading.

const COMMIT_EPOCH = 0;
const DIRTY_BASE = 1;

export class FragmentBoard {
  private readonly cells: Int32Array;

  constructor(readonly buffer: SharedArrayBuffer) {
    this.cells = new Int32Array(buffer);
  }

  static create(fragmentCount: number): FragmentBoard {
    return new FragmentBoard(new SharedArrayBuffer((DIRTY_BASE + fragmentCount) * 4));
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
}
