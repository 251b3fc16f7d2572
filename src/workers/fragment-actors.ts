// The fragments a worker serves, each with its actor (FragmentCore) over the store. A fragment is
// opened here: its part of the store first (lmdb: its named database; LevelDB: its key range), then
// its actor, which starts from the newest timestamp the store holds for it.

import type { WallClock } from '../core/clock.js';
import { type FragmentConfig, FragmentCore } from '../core/fragment.js';
import type { KvStore } from '../native-bindings/kv-store.js';

export type ActorConfig = Omit<FragmentConfig, 'fragment' | 'storedHighWaterWallMs' | 'replicates'>;

export class FragmentActors {
  private readonly cores: (FragmentCore | undefined)[] = [];
  private readonly served: number[] = [];

  constructor(
    private readonly config: ActorConfig,
    private readonly store: KvStore,
    private readonly clock: WallClock,
  ) {}

  /** Opens `fragment` and makes its actor; `replicates`: it has other replicas to send writes to. */
  async open(fragment: number, replicates: boolean): Promise<FragmentCore> {
    await this.store.openFragment(fragment);
    const storedHighWaterWallMs = this.store.highWaterWallMs(fragment);
    const core = new FragmentCore(
      { ...this.config, fragment, storedHighWaterWallMs, replicates },
      this.store,
      this.clock.nowMs(),
    );
    this.cores[fragment] = core;
    this.served.push(fragment);
    return core;
  }

  /** The actor of `fragment`, or undefined when this worker does not serve it. */
  find(fragment: number): FragmentCore | undefined {
    return this.cores[fragment];
  }

  /** The actor of a fragment this worker serves. */
  of(fragment: number): FragmentCore {
    return this.cores[fragment]!;
  }

  /** The fragments served, in the order they were opened. */
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
