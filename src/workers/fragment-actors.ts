// The fragments a worker serves, each with its actor (FragmentCore) over the store. A fragment is
// opened here: its part of the store first (lmdb: its named database; LevelDB: its key range), then
// its actor, which starts from the newest timestamp the store holds for it. At runtime the main
// thread may give the worker a fragment (open) or take one away: the fragment leaves first (no
// operation is admitted for it, while what it queued runs out), then its actor is closed.

import type { WallClock } from '../core/clock.js';
import { storageError } from '../core/errors.js';
import { type FragmentConfig, FragmentCore, FragmentOp } from '../core/fragment.js';
import { type Durability, OpKind, type Priority, Reply } from '../core/ops.js';
import type { KvStore } from '../native-bindings/kv-store.js';

export type ActorConfig = Omit<
  FragmentConfig,
  'fragment' | 'storedHighWaterWallMs' | 'replicates' | 'logsWrites'
>;

const NO_KEY = Buffer.alloc(0);

/**
 * Hands an actor a fence through `submit`; resolves once it is reached — everything the actor ran
 * before it is answered and at `durability` — and rejects when the store failed. A fence at
 * Priority.Background runs after every other queue, so after everything admitted before it.
 */
export function fenced(
  submit: (fence: FragmentOp) => void,
  priority: Priority,
  durability: Durability,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const fence = new FragmentOp(OpKind.Fence, 0, priority, durability, NO_KEY, NO_KEY);
    fence.sink = {
      onReply: (_op, reply, text) =>
        reply === Reply.FenceReached ? resolve() : reject(storageError(text || 'fence failed')),
    };
    submit(fence);
  });
}

export class FragmentActors {
  private readonly cores: (FragmentCore | undefined)[] = [];
  private readonly served: number[] = [];
  /** 1 for a fragment leaving: its actor finishes what it holds, and takes nothing new. */
  private readonly leavingMark: Uint8Array;

  constructor(
    private readonly config: ActorConfig,
    private readonly store: KvStore,
    private readonly clock: WallClock,
    fragmentCount: number,
  ) {
    this.leavingMark = new Uint8Array(fragmentCount);
  }

  /**
   * Opens `fragment` and makes its actor; `replicates`: it may have other replicas to send writes
   * to. A fragment already open is kept as it is (one leaving serves again).
   */
  async open(fragment: number, replicates: boolean): Promise<FragmentCore> {
    this.leavingMark[fragment] = 0;
    const open = this.cores[fragment];
    if (open !== undefined) return open;
    await this.store.openFragment(fragment);
    const storedHighWaterWallMs = this.store.highWaterWallMs(fragment);
    const core = new FragmentCore(
      { ...this.config, fragment, storedHighWaterWallMs, replicates, logsWrites: this.store.logsWrites },
      this.store,
      this.clock.nowMs(),
    );
    this.cores[fragment] = core;
    this.served.push(fragment);
    return core;
  }

  /** The actor of `fragment`, or undefined when this worker does not serve it (or it is leaving). */
  find(fragment: number): FragmentCore | undefined {
    return this.leavingMark[fragment] === 1 ? undefined : this.cores[fragment];
  }

  /** The fragment stops taking operations; its actor runs until `close`. */
  leave(fragment: number): void {
    if (this.cores[fragment] !== undefined) this.leavingMark[fragment] = 1;
  }

  /** Forgets a fragment's actor (it has left, and holds nothing not committed). */
  close(fragment: number): void {
    if (this.cores[fragment] === undefined) return;
    this.cores[fragment] = undefined;
    this.leavingMark[fragment] = 0;
    this.served.splice(this.served.indexOf(fragment), 1);
  }

  /** The actor of `fragment` while this worker holds it (serving or leaving), else undefined. */
  held(fragment: number): FragmentCore | undefined {
    return this.cores[fragment];
  }

  /** The actor of a fragment this worker holds (serving or leaving). */
  of(fragment: number): FragmentCore {
    return this.cores[fragment]!;
  }

  /** The fragments held (serving or leaving), in the order they were opened. */
  fragments(): readonly number[] {
    return this.served;
  }

  /** Newest timestamp stored in any fragment served, to seed the node's clock. */
  highWaterWallMs(): number {
    let max = 0;
    for (const f of this.served) max = Math.max(max, this.store.highWaterWallMs(f));
    return max;
  }
}
